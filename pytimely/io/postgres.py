"""PostgreSQL as an exactly-once sink, through psycopg 3 (``pip install 'pytimely[postgres]'``).

:class:`PostgresSink` inserts a job's records as rows of a table.  Each worker stages its
records in a local file per checkpoint (under ``staging``); publishing a staged file is **one
transaction** that records the file's name in the table ``pytimely_published`` and copies its
rows into the target table.  A file published before (a replay after a failure) finds its name
there and is skipped, so the table holds every record exactly once, whatever failed when.

**A server that goes away.**  The connectors of this module and of
:mod:`~pytimely.io.postgres_cdc` talk to the server through a :class:`Connection`, kept open
between calls.  An error that says the server went away (:func:`transient`: no server at the
address, a server restarting or shutting down, the connection closed under it or its backend
terminated by ``pg_terminate_backend``) drops the connection; it is opened again with backoff
(0.05 s doubling to 1 s) and the whole operation runs again: the sink's transaction (its marker
row makes a transaction that did commit before the connection broke a no-op), the source's read
of the slot.  That goes on for ``connect_timeout`` seconds (30) from the first failure; then a
:class:`~pytimely.errors.TimelyError` names the connector (class and name), the server's
address (``host:port``, never the password), how long it waited and the last error the server
or the network gave.  In a job the error stops the worker, and ``pt.execute`` raises a
``WorkerFailure`` carrying it.  Other errors (a missing table, a row of the wrong type, no
replication slot left) are not retried.

>>> import tempfile
>>> sink = PostgresSink("host=127.0.0.1 port=1 password=secret", "totals",
...                     ["user_id", "total"], staging=tempfile.mkdtemp())
>>> sink.describe()
"PostgresSink 'pg:totals' (table totals at 127.0.0.1:1)"
>>> address("postgresql://app:secret@db.example:6543/app")
'db.example:6543'
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..errors import TimelyError
from .api import Sink, SinkWriter
from .staging import StagedFileWriter, discard_staged, mark_sent, unsent

try:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "pytimely.io.postgres needs psycopg: pip install 'pytimely[postgres]'"
    ) from exc

__all__ = ["Connection", "PostgresSink", "address", "connect", "transient"]


T = TypeVar("T")


def address(dsn: str) -> str:
    """Where ``dsn`` connects, as ``host:port`` (several, comma-separated): the part of a
    connection string that errors show (never the user or the password)."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "an unparsable connection string"
    hosts = str(params.get("host") or params.get("hostaddr") or os.environ.get("PGHOST") or "")
    ports = str(params.get("port") or os.environ.get("PGPORT") or "5432").split(",")
    names = [h or "local socket" for h in hosts.split(",")]
    if len(ports) != len(names):
        ports = [ports[0]] * len(names)
    return ",".join(f"{h}:{p or '5432'}" for h, p in zip(names, ports))


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


#: SQLSTATEs of a server going away or not there yet: administrator command / crash shutdown,
#: starting up or shutting down, and a replication slot still held by a terminated backend.
_COMING_BACK = {"57P01", "57P02", "57P03", "55006"}


def transient(exc: BaseException, conn: Any = None) -> bool:
    """Whether ``exc`` says the connection or the server went away (worth a new connection):
    an error of libpq's own (connection refused, closed unexpectedly), a connection exception
    (class 08), a shutdown or start-up, or a broken ``conn``."""
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return (
        state is None
        or state.startswith("08")
        or state in _COMING_BACK
        or (conn is not None and (conn.closed or conn.broken))
    )


class Connection:
    """A connection to ``dsn`` that comes back (module docstring).  :meth:`run` calls
    ``operation(conn)`` with the open connection (opened first if need be, then ``setup(conn)``)
    and returns what it returns; on an error that says the server went away
    (:func:`transient`) it closes the connection,
    waits (0.05 s doubling to 1 s), connects again and calls ``operation`` again -- so it must
    be safe to repeat (a whole transaction, a read) -- until ``timeout`` seconds have passed
    since the first failure: then a :class:`~pytimely.errors.TimelyError` names ``who``, how
    long it waited and the last error."""

    def __init__(
        self,
        dsn: str,
        timeout: float,
        who: str,
        *,
        autocommit: bool = False,
        application_name: str | None = None,
        setup: Callable[[Any], None] | None = None,
    ) -> None:
        self.dsn = dsn
        self.timeout = timeout
        self.who = who
        self.autocommit = autocommit
        self.setup = setup
        self._extra: dict[str, Any] = {}
        if application_name is not None:
            try:
                given = "application_name" in conninfo_to_dict(dsn)
            except psycopg.Error:
                given = True
            if not given:
                self._extra["application_name"] = application_name[:63]
        self._conn: Any = None

    def _open(self, waited: float) -> Any:
        if self._conn is None or self._conn.closed:
            self._conn = None
            per_try = max(1, math.ceil(self.timeout - waited))  # libpq takes whole seconds
            conn = psycopg.connect(
                self.dsn, autocommit=self.autocommit, connect_timeout=per_try, **self._extra
            )
            self._conn = conn
            if self.setup is not None:
                self.setup(conn)
        return self._conn

    def run(self, operation: Callable[[Any], T]) -> T:
        """``operation(conn)``, retried over a new connection while the server is away."""
        first_failure: float | None = None
        delay = 0.05
        while True:
            waited = 0.0 if first_failure is None else time.monotonic() - first_failure
            try:
                return operation(self._open(waited))
            except psycopg.OperationalError as exc:
                if not transient(exc, self._conn):
                    raise TimelyError(f"{self.who}: {_one_line(exc)}") from exc
                self.close()
                now = time.monotonic()
                if first_failure is None:
                    first_failure = now
                waited = now - first_failure
                if waited + delay > self.timeout:
                    raise TimelyError(
                        f"{self.who}: no working connection to the server for {waited:.1f} s "
                        f"(retried with backoff for up to {self.timeout:g} s); last error: "
                        f"{_one_line(exc)}"
                    ) from exc
                time.sleep(delay)
                delay = min(1.0, delay * 2)

    def connection(self) -> Any:
        """The open connection (connecting with backoff, as :meth:`run` does)."""
        return self.run(lambda conn: conn)

    def close(self) -> None:
        """Close the connection (the next :meth:`run` opens a new one)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:  # pragma: no cover - closing a broken connection
                pass


def connect(dsn: str, timeout: float, who: str, autocommit: bool = False) -> Any:
    """A psycopg connection to ``dsn``, retried with backoff for ``timeout`` seconds; then an
    error naming ``who`` and the server's answer (a one-off :class:`Connection`)."""
    return Connection(dsn, timeout, who, autocommit=autocommit).connection()


MARKERS = "pytimely_published"


def _create_markers(conn: Any) -> None:
    """The marker table, once per connection (two workers creating it at once: one wins)."""
    try:
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {MARKERS} "
            "(sink text, staged text, at timestamptz DEFAULT now(), PRIMARY KEY (sink, staged))"
        )
        conn.commit()
    except psycopg.errors.UniqueViolation:  # a concurrent CREATE TABLE IF NOT EXISTS
        conn.rollback()


class _SinkWriter(StagedFileWriter):
    """A worker's staged files; closing it at the end of the job also closes the sink's
    connection (reopened if the sink publishes again)."""

    def __init__(self, sink: PostgresSink, *args: Any) -> None:
        super().__init__(*args)
        self._sink = sink

    def close(self) -> None:
        super().close()
        self._sink.close()


class PostgresSink(Sink):
    """Rows of ``table`` (``columns``), exactly once (module docstring).  ``row`` turns a
    record into a sequence of column values (default: the record itself); ``staging``: a
    local directory for the staged files (shared by the workers); ``connect_timeout``:
    seconds to keep reconnecting and retrying a publish while the server is away (at the
    start or mid-run) before the error names it."""

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
        self._conn: Connection | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_conn": None}  # a connection stays in its process

    def describe(self) -> str:
        """How errors name this sink: class, name, table and the server's ``host:port``."""
        return f"PostgresSink {self.name!r} (table {self.table} at {address(self.dsn)})"

    def writer(self, index: int, peers: int, attempt: str) -> SinkWriter:
        """Worker ``index``'s writer: staged files ``<attempt>-w<index>-<seq>.staged``."""
        row = self.row
        return _SinkWriter(
            self, self.staging, f"{attempt}-w{index}", lambda r: json.dumps(list(row(r)))
        )

    def _connection(self) -> Connection:
        if self._conn is None:
            self._conn = Connection(
                self.dsn,
                self.connect_timeout,
                self.describe(),
                application_name=f"pytimely {self.name}",
                setup=_create_markers,
            )
        return self._conn

    def publish(self, staged: Any) -> None:
        """Copy the staged file's rows and record its name, in one transaction (skipped if
        the name is recorded already); the transaction is run again whole over a new
        connection if the server goes away meanwhile (module docstring)."""
        path = unsent(self.staging, staged, self.describe())
        if path is None:
            return
        name = staged["file"]
        copy = sql.SQL("COPY {} ({}) FROM STDIN").format(
            sql.Identifier(*self.table.split(".")),
            sql.SQL(", ").join(map(sql.Identifier, self.columns)),
        )

        def transaction(conn: Any) -> None:
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

        self._connection().run(transaction)
        mark_sent(path)

    def discard(self, keep: Sequence[Any]) -> None:
        """Delete the staged files not in ``keep`` (sent ones stay as the record of it)."""
        discard_staged(self.staging, keep)

    def close(self) -> None:
        """Close the connection to the server (the next publish opens a new one)."""
        if self._conn is not None:
            self._conn.close()
