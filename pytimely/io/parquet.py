"""A folder of Parquet files as an exactly-once sink, rolled at every checkpoint.

:class:`ParquetSink` writes each worker's records since the last checkpoint as one Parquet
file, staged under ``<folder>/_staging/`` (written under a hidden temporary name, renamed when
complete), and publishes a staged file by renaming it into ``<folder>``: atomic on one
filesystem, and idempotent (a file already moved is not moved again, also when two workers
publish the same description at once).  :meth:`~ParquetSink.discard` removes what failed
attempts staged.  Readers of the folder -- ``pyarrow.dataset.dataset(folder)``,
``spark.read.parquet(folder)``, :meth:`~ParquetSink.published` -- see published files only
(they skip names that start with ``_`` or ``.``), hence every record exactly once.

**A checkpoint is a roll.**  The folder gets one file per worker per checkpoint that had
rows (and one more per worker at the end of the job), as Spark's file sink writes one per
micro-batch.  So choose ``snapshot_every`` (and ``epoch_seconds``) for the files you want: a
checkpoint every 10 s of a 4-worker job makes 1,440 files an hour; one a minute, 240.  Within
a file, rows go in row groups of up to ``row_group_rows``.

Records become rows: dicts (a column per key: ``columns=``, else the first record's keys),
tuples (``columns=`` names their fields) or, with a single column, any value.  ``schema=`` (a
``pyarrow.Schema``) fixes the columns' types; without it each worker's first row group fixes
them for its later ones, so give a schema when a column may start out empty (all ``None``) or
mix ints and floats.  A record that does not fit is an error naming the sink and the file.

>>> import tempfile, pyarrow.dataset as ds
>>> sink = ParquetSink(tempfile.mkdtemp(), columns=["user", "total"])
>>> writer = sink.writer(0, 1, "run1")
>>> writer.write([("a", 1), ("b", 1)])
>>> writer.write([("a", 2)])
>>> staged = writer.stage(); staged
{'file': 'run1-w0-000000.parquet'}
>>> ds.dataset(sink.folder).to_table().num_rows  # staged, not published: nothing to read yet
0
>>> sink.publish(staged); sink.publish(staged)  # the second time: nothing to do
>>> sink.published()
['run1-w0-000000.parquet']
>>> ds.dataset(sink.folder).to_table().to_pylist()
[{'user': 'a', 'total': 1}, {'user': 'b', 'total': 1}, {'user': 'a', 'total': 2}]
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..errors import TimelyError
from .api import Sink, SinkWriter
from .staging import publish_by_rename

__all__ = ["ParquetSink"]

STAGING = "_staging"
SUFFIX = ".parquet"


class ParquetSink(Sink):
    """Parquet files in ``folder``, one per worker per checkpoint, published by rename (module
    docstring); ``columns``: the column names (tuples' fields, or which keys of dicts);
    ``schema``: a ``pyarrow.Schema`` for the rows; ``row_group_rows``: rows per row group."""

    def __init__(
        self,
        folder: str | os.PathLike,
        *,
        name: str = "parquet",
        columns: Sequence[str] | None = None,
        schema: Any = None,
        row_group_rows: int = 65_536,
    ) -> None:
        if row_group_rows < 1:
            raise ValueError(f"sink {name!r}: row_group_rows must be positive")
        if schema is not None and columns is not None:
            missing = [c for c in columns if c not in schema.names]
            if missing:
                raise ValueError(f"sink {name!r}: the schema has no column {missing[0]!r}")
        self.folder = os.fspath(folder)
        self.staging = os.path.join(self.folder, STAGING)
        self.name = name
        self.columns = None if columns is None else list(columns)
        self.schema = schema
        self.row_group_rows = row_group_rows

    def writer(self, index: int, peers: int, attempt: str) -> SinkWriter:
        """Worker ``index``'s writer: staged files ``<attempt>-w<index>-<seq>.parquet``."""
        return _ParquetWriter(self, f"{attempt}-w{index}")

    def publish(self, staged: Any) -> None:
        """Move the staged file into the folder (nothing to do if it was moved already)."""
        publish_by_rename(self.staging, self.folder, staged, f"sink {self.name!r}")

    def discard(self, keep: Sequence[Any]) -> None:
        """Delete the staged files not in ``keep``, and the temporary files of files that
        were being written when their attempt failed."""
        if not os.path.isdir(self.staging):
            return
        kept = {staged["file"] for staged in keep}
        for name in os.listdir(self.staging):
            unkept = name.endswith(SUFFIX) and name not in kept
            if unkept or (name.startswith(".") and name.endswith(".tmp")):
                try:
                    os.remove(os.path.join(self.staging, name))
                except FileNotFoundError:
                    pass

    def published(self) -> list[str]:
        """The published files' names, sorted."""
        if not os.path.isdir(self.folder):
            return []
        return sorted(
            n
            for n in os.listdir(self.folder)
            if n.endswith(SUFFIX) and not n.startswith((".", "_"))
        )


class _ParquetWriter(SinkWriter):
    """One worker's staged Parquet files: rows gather until ``row_group_rows`` of them make a
    row group of the open file, which :meth:`stage` closes."""

    def __init__(self, sink: ParquetSink, prefix: str) -> None:
        self._sink = sink
        self._prefix = prefix
        self._seq = 0
        self._rows: list[Any] = []
        self._writer: Any = None  # pyarrow.parquet.ParquetWriter of the open file
        self._name = ""
        self._schema = sink.schema  # given, or fixed by the first row group

    def _temporary(self) -> str:
        return os.path.join(self._sink.staging, f".{self._name}.tmp")

    def write(self, records: list[Any]) -> None:
        if not records:
            return
        self._rows.extend(records)
        if len(self._rows) >= self._sink.row_group_rows:
            self._flush()

    def _table(self, rows: list[Any]) -> Any:
        """``rows`` as a table of the sink's columns (module docstring)."""
        import pyarrow as pa

        sink, schema = self._sink, self._schema
        names = sink.columns or (list(schema.names) if schema is not None else None)
        first = rows[0]
        if isinstance(first, dict):
            names = names or list(first)
            data = [[r.get(n) for r in rows] for n in names]
        elif isinstance(first, (tuple, list)):
            if names is None:
                raise TimelyError(
                    f"sink {sink.name!r}: the records are tuples: name their fields with "
                    "columns=[...] (or schema=)"
                )
            width = len(names)
            wrong = next((r for r in rows if len(r) != width), None)
            if wrong is not None:
                raise TimelyError(
                    f"sink {sink.name!r}: a record has {len(wrong)} fields, not the "
                    f"{width} columns {names}: {wrong!r}"
                )
            data = [list(column) for column in zip(*rows)]
        elif names is not None and len(names) == 1:
            data = [rows]
        else:
            raise TimelyError(
                f"sink {sink.name!r}: a record is a dict, a tuple with columns=[...], or any "
                f"value with a single column (columns=['name']), not {type(first).__name__}"
            )
        types = [None if schema is None else schema.field(n).type for n in names]
        arrays = [pa.array(column, type=t) for column, t in zip(data, types)]
        if schema is not None and list(schema.names) == names:
            return pa.Table.from_arrays(arrays, schema=schema)
        return pa.Table.from_arrays(arrays, names=names)

    def _flush(self) -> None:
        """Write the rows gathered as a row group of the open file (opened if need be)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows, self._rows = self._rows, []
        if not rows:
            return
        if self._writer is None:
            self._name = f"{self._prefix}-{self._seq:06d}{SUFFIX}"
        where = os.path.join(self._sink.staging, self._name)
        try:
            table = self._table(rows)
            if self._writer is None:
                os.makedirs(self._sink.staging, exist_ok=True)
                self._writer = pq.ParquetWriter(self._temporary(), table.schema)
                self._schema = table.schema
            self._writer.write_table(table, row_group_size=self._sink.row_group_rows)
        except (pa.ArrowException, TypeError, ValueError, KeyError, AttributeError) as exc:
            hint = ""
            if self._sink.schema is None and self._schema is not None:
                hint = (
                    f" (the first rows fixed the types: {self._schema}; give "
                    "schema=pyarrow.schema([...]) to choose them)"
                )
            raise TimelyError(
                f"sink {self._sink.name!r}: records cannot be written to {where}: {exc}{hint}"
            ) from exc

    def stage(self) -> Any:
        """Write what is gathered, close the file, sync it and give it its staged name:
        ``{"file": name}``, or ``None`` if nothing was written since the last call."""
        self._flush()
        if self._writer is None:
            return None
        self._writer.close()
        self._writer = None
        temporary = self._temporary()
        fd = os.open(temporary, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, os.path.join(self._sink.staging, self._name))
        self._seq += 1
        return {"file": self._name}

    def close(self) -> None:
        if self._writer is not None:  # an attempt that failed: discard() removes the file
            self._writer.close()
            self._writer = None
