"""PostgreSQL change data capture as a source: a logical replication slot (``test_decoding``).

:class:`PostgresCdcSource` reads the changes of committed transactions from a replication
slot, in commit order, as records ``{"op": "insert" | "update" | "delete", "table":
"schema.name", "row": {column: value}}`` (for a delete, the row holds the replica identity:
the primary key).  The source has one partition (the slot); its offset is the commit LSN of
the last transaction read, so a restart skips exactly the transactions the checkpoint
covered.  The slot itself advances only when a checkpoint holding an offset *commits*
(:meth:`~pytimely.io.api.PartitionReader.release`): until then the server keeps the WAL, so
nothing read after the last committed checkpoint can be lost to a crash.

Reading peeks at the slot (``pg_logical_slot_peek_changes``), which decodes from the slot's
confirmed position on every refill: a refill costs the changes since the last committed
checkpoint, one reason to checkpoint often.  The slot must exist (``create_slot=True``
creates it with the ``test_decoding`` plugin of postgresql-contrib if it does not; the server
needs ``wal_level=logical``).  ``stop_at_end=True`` makes a bounded job of the changes
committed before the reader opened.

A server that goes away -- restarted, shut down, the reader's backend terminated -- is
reconnected to with backoff and the read runs again (:class:`~pytimely.io.postgres.Connection`):
reading peeks again from the slot, which is safe because the slot only advances when a
checkpoint commits (a transaction already returned is skipped by its commit LSN), and advancing
the slot to a position it already holds is a no-op.  After ``connect_timeout`` seconds (30)
without a working connection, a :class:`~pytimely.errors.TimelyError` names the source
(``PostgresCdcSource`` and its name), the slot, the server's ``host:port`` and the last error;
in a job ``pt.execute`` raises it as a ``WorkerFailure``.

>>> PostgresCdcSource("host=127.0.0.1 port=1 password=secret", "orders_slot").describe()
"PostgresCdcSource 'pg-cdc:orders_slot' (slot 'orders_slot' at 127.0.0.1:1)"
>>> parse_change("table public.t: INSERT: id[integer]:1 name[text]:'O''Brien' x[real]:null")
{'op': 'insert', 'table': 'public.t', 'row': {'id': 1, 'name': "O'Brien", 'x': None}}
>>> lsn_value("0/1528EA8")
22187688
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import TimelyError
from .api import PartitionReader, Source
from .postgres import Connection, address, transient

try:
    import psycopg
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "pytimely.io.postgres_cdc needs psycopg: pip install 'pytimely[postgres]'"
    ) from exc

__all__ = ["PostgresCdcSource", "lsn_value", "parse_change"]

_CHANGE = re.compile(r"^table ([^:]+): (INSERT|UPDATE|DELETE): ?(.*)$", re.S)
_COLUMN = re.compile(r"([^\s\[]+)\[([^\]]+)\]:('(?:[^']|'')*'|\S+)")
_INTS = {"integer", "bigint", "smallint"}
_FLOATS = {"double precision", "real", "numeric"}


def lsn_value(lsn: str) -> int:
    """A WAL position ``"X/Y"`` as one integer (comparable)."""
    high, low = lsn.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def _value(kind: str, text: str) -> Any:
    if text == "null":
        return None
    if text.startswith("'"):
        return text[1:-1].replace("''", "'")
    if kind in _INTS:
        return int(text)
    if kind in _FLOATS:
        return float(text)
    if kind == "boolean":
        return text == "true"
    return text


def parse_change(data: str) -> dict[str, Any] | None:
    """A ``test_decoding`` change line as a record (``None`` for other lines)."""
    m = _CHANGE.match(data)
    if m is None:
        return None
    table, op, columns = m.groups()
    row = {name: _value(kind, text) for name, kind, text in _COLUMN.findall(columns)}
    return {"op": op.lower(), "table": table, "row": row}


class _SlotReader(PartitionReader):
    def __init__(self, source: PostgresCdcSource, offset: int | None) -> None:
        self._source = source
        self._conn = source.connection()
        self._offset = offset or 0  # the commit LSN of the last transaction returned
        self._buffer: list[tuple[int, list[dict[str, Any]]]] = []  # (commit LSN, changes)
        self._end: int | None = None
        if source.stop_at_end:
            row = self._conn.run(
                lambda conn: conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
            )
            self._end = lsn_value(row[0])

    def _refill(self) -> None:
        slot = self._source.slot
        rows = self._conn.run(  # peeked again whole after a reconnection: nothing is consumed
            lambda conn: conn.execute(
                "SELECT lsn::text, data FROM pg_logical_slot_peek_changes(%s, NULL, NULL)",
                (slot,),
            ).fetchall()
        )
        pending: list[dict[str, Any]] = []
        seen = self._buffer[-1][0] if self._buffer else self._offset
        tables = self._source.tables
        for lsn, data in rows:
            if data.startswith("BEGIN"):
                pending = []
            elif data.startswith("COMMIT"):
                commit = lsn_value(lsn)
                if commit > seen:
                    self._buffer.append((commit, pending))
                    seen = commit
                pending = []
            else:
                change = parse_change(data)
                if change is not None and (tables is None or change["table"] in tables):
                    pending.append(change)

    def read(self, limit: int) -> list[Any]:
        if not self._buffer:
            self._refill()
        out: list[Any] = []
        while self._buffer and len(out) < limit:  # whole transactions (one may exceed limit)
            commit, changes = self._buffer.pop(0)
            out += changes
            self._offset = commit
        return out

    def offset(self) -> int:
        return self._offset

    def exhausted(self) -> bool:
        if self._end is None or self._buffer:
            return False
        if self._offset >= self._end:
            return True
        self._refill()  # nothing left before the end: the last commit read may be earlier
        return not self._buffer or self._buffer[0][0] > self._end

    def release(self, offset: Any) -> None:
        if offset:
            lsn = f"{offset >> 32:X}/{offset & 0xFFFFFFFF:X}"
            slot = self._source.slot
            self._conn.run(  # again after a reconnection: advancing to where it is is a no-op
                lambda conn: conn.execute(
                    "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (slot, lsn)
                )
            )

    def close(self) -> None:
        self._conn.close()


class PostgresCdcSource(Source):
    """The committed changes behind replication slot ``slot`` of the server at ``dsn``
    (module docstring); ``tables``: only these (``"schema.name"``), default all;
    ``connect_timeout``: seconds to keep reconnecting while the server is away (at the start
    or mid-run) before the error names it."""

    def __init__(
        self,
        dsn: str,
        slot: str,
        *,
        name: str | None = None,
        tables: list[str] | None = None,
        create_slot: bool = True,
        stop_at_end: bool = False,
        connect_timeout: float = 30.0,
    ) -> None:
        self.dsn = dsn
        self.slot = slot
        self.name = name or f"pg-cdc:{slot}"
        self.tables = set(tables) if tables is not None else None
        self.create_slot = create_slot
        self.stop_at_end = stop_at_end
        self.connect_timeout = connect_timeout

    def describe(self) -> str:
        """How errors name this source."""
        return f"PostgresCdcSource {self.name!r} (slot {self.slot!r} at {address(self.dsn)})"

    def connection(self) -> Connection:
        """An autocommit :class:`~pytimely.io.postgres.Connection` that comes back (retried
        with backoff for ``connect_timeout`` seconds), not yet open."""
        return Connection(
            self.dsn,
            self.connect_timeout,
            self.describe(),
            autocommit=True,
            application_name=f"pytimely {self.name}",
        )

    def connect(self) -> Any:
        """An open autocommit psycopg connection (retried with backoff for
        ``connect_timeout`` seconds)."""
        return self.connection().connection()

    def partitions(self) -> list[str]:
        """One partition, the slot (created here if ``create_slot`` and missing)."""
        slot = self.slot

        def find_or_create(conn: Any) -> None:
            exists = conn.execute(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,)
            ).fetchone()
            if exists is None:
                if not self.create_slot:
                    raise TimelyError(f"{self.describe()}: no such replication slot")
                try:
                    conn.execute(
                        "SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (slot,)
                    )
                except psycopg.errors.DuplicateObject:
                    pass  # another worker created it first
                except psycopg.Error as exc:
                    if transient(exc, conn):
                        raise  # the server went away: Connection.run retries
                    raise TimelyError(f"{self.describe()}: cannot create the slot: {exc}") from exc

        connection = self.connection()
        try:
            connection.run(find_or_create)
        finally:
            connection.close()
        return [self.slot]

    def open(self, partition: str, offset: Any) -> PartitionReader:
        """The slot's reader, after the transaction committed at LSN ``offset``."""
        return _SlotReader(self, None if offset is None else int(offset))
