"""PostgreSQL as an exactly-once sink, through psycopg 3 (``pip install 'pytimely[postgres]'``).

:class:`PostgresSink` inserts a job's records as rows of a table.  Each worker stages its
records in a local file per checkpoint (under ``staging``); publishing a staged file is **one
transaction** that records the file's name in the table ``pytimely_published`` and copies its
rows into the target table.  A file published before (a replay after a failure) finds its name
there and is skipped, so the table holds every record exactly once, whatever failed when.

>>> import tempfile
>>> sink = PostgresSink("host=127.0.0.1 port=1", "totals", ["user_id", "total"],
...                     staging=tempfile.mkdtemp())
>>> sink.describe()
"PostgreSQL sink 'pg:totals' (table totals at host=127.0.0.1 port=1)"
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import TimelyError
from .api import Sink, SinkWriter
from .staging import StagedFileWriter, discard_staged, mark_sent, unsent

try:
    import psycopg
    from psycopg import sql
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "pytimely.io.postgres needs psycopg: pip install 'pytimely[postgres]'"
    ) from exc

__all__ = ["PostgresSink", "connect"]


def connect(dsn: str, timeout: float, who: str, autocommit: bool = False) -> Any:
    """A psycopg connection to ``dsn``, retried with backoff for ``timeout`` seconds; then an
    error naming ``who`` and the server's answer."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        try:
            return psycopg.connect(dsn, autocommit=autocommit, connect_timeout=max(1, int(timeout)))
        except psycopg.OperationalError as exc:
            if time.monotonic() + delay > deadline:
                raise TimelyError(
                    f"{who}: cannot connect within {timeout} s: {str(exc).strip()}"
                ) from exc
            time.sleep(delay)
            delay = min(1.0, delay * 2)


MARKERS = "pytimely_published"


class PostgresSink(Sink):
    """Rows of ``table`` (``columns``), exactly once (module docstring).  ``row`` turns a
    record into a sequence of column values (default: the record itself); ``staging``: a
    local directory for the staged files (shared by the workers); ``connect_timeout``:
    seconds to keep trying to reach the server before the error names it."""

    def __init__(
        self,
        dsn: str,
        table: str,
        columns: Sequence[str],
        staging: str | os.PathLike,
        *,
        name: str | None = None,
        row: Callable[[Any], Sequence[Any]] = lambda record: record,
        connect_timeout: float = 30.0,
    ) -> None:
        self.dsn = dsn
        self.table = table
        self.columns = list(columns)
        self.staging = os.fspath(staging)
        self.name = name or f"pg:{table}"
        self.row = row
        self.connect_timeout = connect_timeout

    def describe(self) -> str:
        """How errors name this sink."""
        return f"PostgreSQL sink {self.name!r} (table {self.table} at {self.dsn})"

    def writer(self, index: int, peers: int, attempt: str) -> SinkWriter:
        """Worker ``index``'s writer: staged files ``<attempt>-w<index>-<seq>.staged``."""
        row = self.row
        return StagedFileWriter(
            self.staging, f"{attempt}-w{index}", lambda r: json.dumps(list(row(r)))
        )

    def publish(self, staged: Any) -> None:
        """Copy the staged file's rows and record its name, in one transaction (skipped if
        the name is recorded already)."""
        path = unsent(self.staging, staged, self.describe())
        if path is None:
            return
        name = staged["file"]
        copy = sql.SQL("COPY {} ({}) FROM STDIN").format(
            sql.Identifier(*self.table.split(".")),
            sql.SQL(", ").join(map(sql.Identifier, self.columns)),
        )
        with connect(self.dsn, self.connect_timeout, self.describe()) as conn:
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {MARKERS} "
                "(sink text, staged text, at timestamptz DEFAULT now(), PRIMARY KEY (sink, staged))"
            )
            conn.commit()
            with conn.transaction():
                new = conn.execute(
                    f"INSERT INTO {MARKERS} (sink, staged) VALUES (%s, %s) "
                    "ON CONFLICT DO NOTHING RETURNING 1",
                    (self.name, name),
                ).fetchone()
                if new is not None:
                    with conn.cursor().copy(copy) as rows, open(path, encoding="utf-8") as f:
                        for line in f:
                            rows.write_row(json.loads(line))
        mark_sent(path)

    def discard(self, keep: Sequence[Any]) -> None:
        """Delete the staged files not in ``keep`` (sent ones stay as the record of it)."""
        discard_staged(self.staging, keep)
