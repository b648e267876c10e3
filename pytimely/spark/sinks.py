"""Dataflow outputs as Parquet, written by the workers themselves, readable by Spark.

Anything a Spark task yields reaches Spark only when the task ends, so long-running workers
write their output themselves, with pyarrow, as soon as it is final:

* :func:`write_parquet` -- a pass-through operator that writes each epoch's records to
  ``directory/worker=i/epoch=e.parquet`` the moment its input frontier passes ``e`` (no more
  records at ``e`` can arrive), then forwards them.  It holds a capability for ``e`` until the
  file is written, so a probe on its output stream passing ``e`` means: every worker's file for
  ``e`` is on disk.  ``spark.read.parquet(directory)`` reads everything, with a ``worker``
  column from the directory names and an ``epoch`` column from the files.
* :func:`capture_parquet` -- ``capture_into`` a :class:`~pytimely.capture.ParquetWriter` at
  ``directory/worker=i/capture.parquet``: the stream's data *and* progress events, readable by
  ``spark.read.parquet`` and replayable with :func:`capture_readers` + ``replay_into``.  (A
  Parquet file is complete only once closed, i.e. when the captured stream completes; for
  streams that run forever use :func:`write_parquet`.)

Files appear atomically: they are written under a hidden name (``.epoch=e.parquet.tmp``, which
Spark and pyarrow skip) and renamed when complete.  In a batch run on Spark
(:func:`pytimely.spark.run`, :func:`~pytimely.spark.run_on_dataframe`) they are first staged
per attempt and moved into ``directory`` only when the whole run succeeded
(:mod:`pytimely.spark.staging`), so that a retried run leaves exactly the files of a clean one.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from typing import Any

from ..dataflow.channels import Pipeline
from ..dataflow.operators.aggregation import release_ready
from ..dataflow.operators.generic import unary_frontier
from ..errors import TimelyError
from ..progress.operate import FrontierInterest
from .staging import output_folder

__all__ = ["capture_parquet", "capture_readers", "epoch_path", "to_arrow", "write_parquet"]


def epoch_path(directory: str, worker: int, epoch: int) -> str:
    """Where :func:`write_parquet` puts worker ``worker``'s records of ``epoch``."""
    return os.path.join(os.fspath(directory), f"worker={worker}", f"epoch={epoch}.parquet")


def _arrow_kind(x: Any) -> str | None:
    t = type(x)
    if t.__module__.startswith("pyarrow") and t.__name__ in ("RecordBatch", "Table"):
        return t.__name__
    return None


def to_arrow(
    batches: Sequence[Any], columns: Sequence[str] | None = None, schema: Any = None
) -> Any:
    """One ``pyarrow.Table`` from batches of records: Arrow batches/tables, or lists of dicts,
    tuples (named by ``columns``, default ``_1, _2, ...``) or scalars (column ``value``)."""
    import pyarrow as pa

    tables = []
    rows: list[Any] = []
    for batch in batches:
        kind = _arrow_kind(batch)
        if kind == "RecordBatch":
            tables.append(pa.Table.from_batches([batch]))
        elif kind == "Table":
            tables.append(batch)
        else:
            rows.extend(batch)
    if rows:
        first = rows[0]
        if isinstance(first, dict):
            dicts = rows
        elif isinstance(first, tuple):
            names = (
                list(columns) if columns is not None else [f"_{i + 1}" for i in range(len(first))]
            )
            if hasattr(first, "_fields") and columns is None:
                names = list(first._fields)
            dicts = [dict(zip(names, r)) for r in rows]
        else:
            name = columns[0] if columns else "value"
            dicts = [{name: r} for r in rows]
        tables.append(pa.Table.from_pylist(dicts, schema=schema))
    if not tables:
        return None
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables, promote_options="default")


def write_parquet(
    stream: Any,
    directory: str,
    *,
    columns: Sequence[str] | None = None,
    schema: Any = None,
    epoch_column: str | None = "epoch",
    compression: str = "snappy",
    name: str = "WriteParquet",
) -> Any:
    """Write ``stream``'s records to ``directory/worker=i/epoch=e.parquet`` per epoch ``e``
    as soon as ``e`` is complete; returns the stream (passed through, each epoch's records
    after its file is written).

    Records: see :func:`to_arrow` (``columns`` names tuple fields).  ``schema`` (a
    ``pyarrow.Schema``, without the epoch column) fixes the column types; otherwise the first
    file's inferred types are kept for the later ones, so that Spark can read them together.
    ``epoch_column`` (None: none) is added to every file holding the epoch.  Epochs in which
    a worker saw no records produce no file from that worker.  Times must be ``int``.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    index = stream.scope.index
    folder = output_folder(directory, index)
    state: dict[str, Any] = {"schema": schema}

    def write(t: Any, batches: list[Any]) -> None:
        if type(t) is not int:
            raise TimelyError(f"write_parquet: times must be int epochs, not {t!r}")
        table = to_arrow(batches, columns, state["schema"])
        if table is None:
            return
        fixed = state["schema"]
        if fixed is not None and not table.schema.equals(fixed):
            try:
                table = table.select(fixed.names).cast(fixed)
            except (pa.ArrowException, KeyError, ValueError) as exc:
                raise TimelyError(
                    f"write_parquet: epoch {t}'s records do not fit the schema {fixed}: {exc}"
                ) from exc
        elif fixed is None:
            state["schema"] = table.schema
        if epoch_column is not None and epoch_column not in table.column_names:
            table = table.append_column(epoch_column, pa.array([t] * table.num_rows, pa.int64()))
        final = os.path.join(folder, f"epoch={t}.parquet")
        temp = os.path.join(folder, f".epoch={t}.parquet.tmp")
        pq.write_table(table, temp, compression=compression)
        os.replace(temp, final)

    def ctor(cap: Any, info: Any) -> Any:
        cap.drop()
        pending: dict[Any, list[Any]] = {}

        def logic(inp: Any, out: Any) -> None:
            for ref, batch in inp:
                entry = pending.get(ref.time)
                if entry is None:
                    entry = pending[ref.time] = [ref.retain(), []]
                entry[1].append(batch)
            for t in release_ready(pending, inp.frontier):
                held, batches = pending.pop(t)
                write(t, batches)
                for batch in batches:
                    out.give_batch(held, batch)
                held.drop()

        return logic

    return unary_frontier(stream, Pipeline, name, ctor, interest=FrontierInterest.IF_CAPABILITY)


class _DeferredParquetWriter:
    """A ParquetWriter created at the first ``Messages`` event (events before it are kept and
    written first).  A stream that never carried a batch writes no file: its ``value`` column
    would have a made-up type (int64) and keep ``spark.read.parquet`` from reading the other
    workers' files of the same capture, and it holds nothing to replay."""

    def __init__(self, path: str, options: dict[str, Any]) -> None:
        self.path = path
        self._options = options
        self._writer: Any = None
        self._early: list[Any] = []

    def push(self, event: Any) -> None:
        from ..capture.event import Messages

        if self._writer is None:
            self._early.append(event)
            if type(event) is Messages:
                from ..capture import ParquetWriter

                self._writer = ParquetWriter(self.path, **self._options)
                for early in self._early:
                    self._writer.push(early)
                self._early = []
        else:
            self._writer.push(event)

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def capture_parquet(stream: Any, directory: str, **writer_options: Any) -> str:
    """``capture_into`` a ParquetWriter at ``directory/worker=i/capture.parquet``; returns the
    path.  ``writer_options`` go to :class:`~pytimely.capture.ParquetWriter`.

    The file is created when the first batch arrives: a worker whose stream carried no records
    writes no file (it has nothing to replay, and a file without records could not say what
    type its ``value`` column has).  ``spark.read.parquet(directory)`` reads the workers' files
    together when their record types agree (the first batch fixes each file's columns).
    """
    path = os.path.join(output_folder(directory, stream.scope.index), "capture.parquet")
    stream.capture_into(_DeferredParquetWriter(path, writer_options))
    return path


def capture_readers(directory: str) -> list[Any]:
    """A :class:`~pytimely.capture.ParquetReader` for every ``capture.parquet`` under
    ``directory`` (in worker order), for ``replay_into``."""
    from ..capture import ParquetReader

    paths = glob.glob(os.path.join(os.fspath(directory), "worker=*", "capture.parquet"))

    def worker_of(path: str) -> int:
        part = os.path.basename(os.path.dirname(path))
        return int(part.split("=", 1)[1])

    return [ParquetReader(p) for p in sorted(paths, key=worker_of)]
