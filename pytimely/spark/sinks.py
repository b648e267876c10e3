"""Dataflow outputs as Parquet, written by the workers themselves, readable by Spark.

Anything a Spark task yields reaches Spark only when the task ends, so long-running workers
write their output themselves, with pyarrow, as soon as it is final:

* :func:`write_parquet` -- a pass-through sink that writes each epoch's records once its input
  frontier has passed the epoch (no more records of it can arrive).  By default every worker
  *rolls* files that hold many epochs, ``directory/worker=i/part-<first>-<last>.parquet``
  (``first``/``last``: the least and greatest epoch in the file), with the epoch in an
  ``epoch`` column of every row; a file is committed when it reaches ``roll_bytes`` (128 MB),
  ``roll_seconds`` (60 s) after it received its first rows, or when the stream ends.  A job
  of 3,600 one-second epochs thus writes one file per worker, not 3,600.  With
  ``per_epoch=True`` -- the default inside a :class:`~pytimely.spark.StreamingBridge`, whose
  micro-batches must appear as they complete and whose restarts replay epochs -- it writes
  ``directory/worker=i/epoch=e.parquet`` (:func:`epoch_path`) as soon as ``e`` completes, and a
  replayed epoch overwrites its file.  Either way **a probe on the returned stream passing
  ``e`` means every row of every epoch ``<= e`` is in committed, complete files on every
  worker** (see *Progress* below).  ``spark.read.parquet(directory)`` reads everything, with a
  ``worker`` column from the directory names; :func:`read_output` does the same with pyarrow,
  and :func:`output_files` lists the committed files.
* :func:`capture_parquet` -- ``capture_into`` a :class:`~pytimely.capture.ParquetWriter` at
  ``directory/worker=i/capture.parquet``: the stream's data *and* progress events, readable by
  ``spark.read.parquet`` and replayable with :func:`capture_readers` + ``replay_into``.  (A
  Parquet file is complete only once closed, i.e. when the captured stream completes; for
  streams that run forever use :func:`write_parquet`.)

Files appear atomically: they are written under a hidden name (``.part-<first>.parquet.tmp``,
``.epoch=e.parquet.tmp``; Spark and pyarrow skip names that begin with ``.``) and renamed when
complete.  In a batch run on Spark (:func:`pytimely.spark.run`,
:func:`~pytimely.spark.run_on_dataframe`) they are first staged per attempt and moved into
``directory`` only when the whole run succeeded (:mod:`pytimely.spark.staging`, which leaves
the hidden files behind), so that a retried run leaves exactly the files of a clean one.

**Progress** (timestamp tokens).  The sink holds at most one capability: at the least epoch it
has received but not yet committed (none when everything received is committed).  It sends
each epoch's records downstream, at the epoch's own time, when the epoch completes, but the
capability keeps the returned stream's frontier at or before every epoch that is not in a
committed file yet.  So in rolling mode the returned stream passes ``e`` at the first commit
after ``e`` completed on every worker -- the roll of the file holding ``e`` (by size, by age,
or at the end of the stream) -- i.e. up to ``roll_seconds`` after ``e`` completed; in
per-epoch mode as soon as ``e``'s file is written.  Wait on it (``step_while(probe...)``) only
with a ``roll_seconds`` you are willing to wait, or with ``per_epoch=True``.
"""

from __future__ import annotations

import glob
import math
import os
import re
import time as _time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from operator import itemgetter
from typing import Any

from ..dataflow.idioms import MinToken
from ..dataflow.operators.aggregation import release_ready
from ..dataflow.operators.generic import unary_frontier
from ..dataflow.pacts import Pipeline
from ..errors import TimelyError
from ..progress.operate import FrontierInterest
from .staging import output_folder

_first = itemgetter(0)

__all__ = [
    "ROW_GROUP_BYTES",
    "capture_parquet",
    "capture_readers",
    "epoch_path",
    "output_files",
    "per_epoch_sinks",
    "read_output",
    "to_arrow",
    "write_parquet",
]

#: Records a rolling :func:`write_parquet` buffers (Arrow bytes) before it writes them as one
#: row group.  Not one row group per epoch: thousands of tiny epochs would make a huge footer.
ROW_GROUP_BYTES = 4 * 2**20

# Whether ``write_parquet(per_epoch=None)`` writes one file per epoch: true while a
# StreamingBridge builds its workers' dataflows (``per_epoch_sinks``).  The dataflow is built
# by one thread per worker process, so a module-level flag suffices.
_per_epoch_default = False
_resume_from: int | None = None


@contextmanager
def per_epoch_sinks(resume_from: int | None = None) -> Iterator[None]:
    """While in this block, :func:`write_parquet` built with ``per_epoch=None`` writes one file
    per epoch.  :class:`~pytimely.spark.StreamingBridge` builds its workers' dataflows in it:
    its micro-batches must be visible as soon as they complete, and a restart replays epochs,
    whose files must then be overwritten whole rather than added next to the old ones.

    ``resume_from``: the dataflow restarts from a snapshot taken when every epoch before it
    was complete.  Files of epochs ``>= resume_from`` were written after that snapshot by the
    run that died; the restart writes those epochs again, perhaps on other workers (a restart
    on fewer workers leaves ``worker=j`` folders nobody writes to, and keys may move), so each
    per-epoch sink first removes them from its directory: from its own folder and from the
    folders of workers ``j >= peers`` with ``j % peers`` its index."""
    global _per_epoch_default, _resume_from
    previous = _per_epoch_default, _resume_from
    _per_epoch_default, _resume_from = True, resume_from
    try:
        yield
    finally:
        _per_epoch_default, _resume_from = previous


def discard_epochs_from(directory: str, index: int, peers: int, first: int) -> list[str]:
    """Remove the per-epoch files of epochs ``>= first`` that worker ``index`` of ``peers``
    answers for under ``directory`` (:func:`per_epoch_sinks`); returns the removed paths."""
    removed = []
    for worker, epoch, per_epoch, path in _committed(directory):
        if per_epoch and worker % peers == index and epoch >= first:
            os.remove(path)
            removed.append(path)
    return removed


def _committed(directory: str) -> Iterator[tuple[int, int, bool, str]]:
    """``(worker, first epoch, one file per epoch?, path)`` of every committed file
    :func:`write_parquet` wrote under ``directory``, in no particular order."""
    for path in glob.glob(os.path.join(os.fspath(directory), "worker=*", "*.parquet")):
        m = _FILE_NAME.match(os.path.basename(path))
        part = os.path.basename(os.path.dirname(path)).split("=", 1)[1]
        if m is None or not part.isdigit():
            continue
        per_epoch = m.group(3) is not None
        yield int(part), int(m.group(3) if per_epoch else m.group(1)), per_epoch, path


def epoch_path(directory: str, worker: int, epoch: int) -> str:
    """Where :func:`write_parquet` with ``per_epoch=True`` puts worker ``worker``'s records of
    ``epoch``."""
    return os.path.join(os.fspath(directory), f"worker={worker}", f"epoch={epoch}.parquet")


_FILE_NAME = re.compile(r"^(?:part-(-?\d+)-(-?\d+)|epoch=(-?\d+))\.parquet$")


def output_files(directory: str) -> list[str]:
    """The committed files :func:`write_parquet` wrote under ``directory`` (both modes), in
    worker order and, per worker, in epoch order.  Hidden temporary files and staged files of
    a run in progress are not among them."""
    found = sorted((worker, first, path) for worker, first, _one, path in _committed(directory))
    return [path for _w, _e, path in found]


def read_output(directory: str, columns: Sequence[str] | None = None) -> Any:
    """Every committed file under ``directory`` as one ``pyarrow.Table`` (``None`` if there
    is none yet), with a ``worker`` column from the folder names, as ``spark.read.parquet``
    reads them.  ``columns`` selects columns (``worker`` among them if wanted)."""
    import pyarrow.dataset as ds

    files = output_files(directory)
    if not files:
        return None
    dataset = ds.dataset(
        files, format="parquet", partitioning="hive", partition_base_dir=os.fspath(directory)
    )
    return dataset.to_table(columns=list(columns) if columns is not None else None)


def _arrow_kind(x: Any) -> str | None:
    t = type(x)
    if t.__module__.startswith("pyarrow") and t.__name__ in ("RecordBatch", "Table"):
        return t.__name__
    return None


def _tuples_table(rows: list[tuple], names: list[str], schema: Any) -> Any:
    """``rows`` (tuples of ``len(names)`` fields) as a table built column by column, about
    five times faster than through dicts; ``None`` when they do not fit that simple case
    (ragged tuples, mixed types, a schema naming other columns), so the caller takes the
    general path and its errors."""
    import pyarrow as pa

    width = len(names)
    if any(len(r) != width for r in rows):
        return None
    if schema is not None and list(schema.names) != names:
        return None
    try:
        arrays = [
            pa.array(column, type=None if schema is None else schema.field(i).type)
            for i, column in enumerate(zip(*rows))
        ]
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None
    return pa.Table.from_arrays(arrays, names=names)


def to_arrow(
    batches: Sequence[Any], columns: Sequence[str] | None = None, schema: Any = None
) -> Any:
    """One ``pyarrow.Table`` from batches of records: Arrow batches/tables, or lists of dicts,
    tuples (named by ``columns``, default ``_1, _2, ...``) or scalars (column ``value``)."""
    import pyarrow as pa

    tables = []
    rows: list[Any] = []
    for batch in batches:
        if type(batch) is list:
            rows.extend(batch)
            continue
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
            table = _tuples_table(rows, names, schema)
            if table is not None:
                tables.append(table)
                rows = []
            dicts = [dict(zip(names, r)) for r in rows]
        else:
            name = columns[0] if columns else "value"
            dicts = [{name: r} for r in rows]
        if dicts:
            tables.append(pa.Table.from_pylist(dicts, schema=schema))
    if not tables:
        return None
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables, promote_options="default")


class _Tables:
    """Each epoch's batches as one Arrow table of the sink's schema (the given one, else the
    first table's), with the epoch column."""

    __slots__ = ("what", "columns", "schema", "epoch_column")

    def __init__(
        self, what: str, columns: Sequence[str] | None, schema: Any, epoch_column: str | None
    ) -> None:
        self.what = what
        self.columns = columns
        self.schema = schema
        self.epoch_column = epoch_column

    def table(self, t: int, batches: list[Any]) -> Any:
        """The records of epoch ``t`` (``None`` when there are none)."""
        import pyarrow as pa

        fixed = self.schema
        try:
            table = to_arrow(batches, self.columns, fixed)
        except (pa.ArrowException, KeyError, ValueError, TypeError) as exc:
            raise TimelyError(
                f"{self.what}: epoch {t}'s records cannot be made a table"
                f"{'' if fixed is None else f' of the schema {fixed}'}: {exc}"
            ) from exc
        if table is None or not table.num_rows:
            return None
        if fixed is None:
            self.schema = table.schema
        elif not table.schema.equals(fixed):
            try:
                table = table.select(fixed.names).cast(fixed)
            except (pa.ArrowException, KeyError, ValueError) as exc:
                raise TimelyError(
                    f"{self.what}: epoch {t}'s records do not fit the schema {fixed}: {exc}"
                ) from exc
        column = self.epoch_column
        if column is not None and column not in table.column_names:
            table = table.append_column(column, pa.array([t] * table.num_rows, pa.int64()))
        return table

    def tables(self, epochs: list[int], batches: list[list[Any]]) -> Any:
        """The records of several complete ``epochs`` (increasing; ``batches[j]`` those of
        ``epochs[j]``) as one table, in one conversion: fine-grained epochs (a session's
        millisecond) then cost a few list operations each, not a table each.  ``None`` when
        there are no records."""
        import numpy as np
        import pyarrow as pa

        if len(epochs) == 1:
            return self.table(epochs[0], batches[0])
        flat = [b for bs in batches for b in bs]
        sizes = [sum(map(len, bs)) for bs in batches]
        fixed = self.schema
        try:
            table = to_arrow(flat, self.columns, fixed)
            if table is not None and fixed is not None and not table.schema.equals(fixed):
                table = table.select(fixed.names).cast(fixed)
        except (pa.ArrowException, KeyError, ValueError, TypeError):
            table = None  # find the epoch that does not fit, and say so
            for t, bs in zip(epochs, batches):
                self.table(t, bs)
            raise
        if table is None or not table.num_rows:
            return None
        if fixed is None:
            self.schema = table.schema
        column = self.epoch_column
        if column is not None and column not in table.column_names:
            times = np.repeat(np.array(epochs, dtype=np.int64), sizes)
            table = table.append_column(column, pa.array(times, pa.int64()))
        return table


class _RollingFile:
    """A worker's open file of a rolling :func:`write_parquet`: tables are buffered and written
    as row groups of about :data:`ROW_GROUP_BYTES` through a ``ParquetWriter`` under a hidden
    name; :meth:`commit` closes it and renames it to ``part-<first>-<last>.parquet``."""

    __slots__ = (
        "folder",
        "compression",
        "roll_bytes",
        "roll_seconds",
        "activator",
        "first",
        "last",
        "deadline",
        "buffer",
        "buffered",
        "temp",
        "sink",
        "writer",
    )

    def __init__(
        self,
        folder: str,
        compression: str,
        roll_bytes: float,
        roll_seconds: float,
        activator: Any,
    ) -> None:
        self.folder = folder
        self.compression = compression
        self.roll_bytes = roll_bytes
        self.roll_seconds = roll_seconds
        self.activator = activator
        self.first: int | None = None  # None: the file holds no rows (not open)
        self.last: int | None = None
        self.deadline = math.inf
        self.buffer: list[Any] = []
        self.buffered = 0
        self.temp = ""
        self.sink: Any = None
        self.writer: Any = None

    def add(self, first: int, last: int, table: Any) -> None:
        """Append the rows of the epochs ``first`` to ``last`` (epochs come in increasing
        order); commit if the file reached ``roll_bytes``."""
        if self.first is None:
            self.first = first
            if self.roll_seconds < math.inf:
                # Our deadline is no later than the timer's: when it fires, the file is due.
                self.deadline = _time.monotonic() + self.roll_seconds
                self.activator.activate_after(self.roll_seconds)
        self.last = last
        self.buffer.append(table)
        self.buffered += table.nbytes
        if self.buffered >= ROW_GROUP_BYTES:
            self._write()
        if self.size() >= self.roll_bytes:
            self.commit()

    def size(self) -> int:
        """Bytes written to the file so far plus the (Arrow) bytes buffered for it."""
        return (self.sink.tell() if self.sink is not None else 0) + self.buffered

    def due(self) -> bool:
        """The file holds rows and ``roll_seconds`` have passed since its first ones."""
        return self.first is not None and _time.monotonic() >= self.deadline

    def _write(self) -> None:
        """Write the buffered tables as one row group (opening the file first if need be)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        buffer = self.buffer
        if not buffer:
            return
        table = buffer[0] if len(buffer) == 1 else pa.concat_tables(buffer)
        self.buffer = []
        self.buffered = 0
        if self.writer is None:
            self.temp = os.path.join(self.folder, f".part-{self.first}.parquet.tmp")
            self.sink = pa.OSFile(self.temp, "wb")
            self.writer = pq.ParquetWriter(self.sink, table.schema, compression=self.compression)
        self.writer.write_table(table, row_group_size=table.num_rows)

    def commit(self) -> None:
        """Write what is buffered, close the file and rename it into place (if it holds rows)."""
        if self.first is None:
            return
        self._write()
        self.writer.close()
        self.sink.close()
        final = os.path.join(self.folder, f"part-{self.first}-{self.last}.parquet")
        os.replace(self.temp, final)
        self.first = self.last = None
        self.deadline = math.inf
        self.writer = self.sink = None


def write_parquet(
    stream: Any,
    directory: str,
    *,
    columns: Sequence[str] | None = None,
    schema: Any = None,
    epoch_column: str | None = "epoch",
    compression: str = "snappy",
    roll_bytes: int | None = 128 * 2**20,
    roll_seconds: float | None = 60.0,
    per_epoch: bool | None = None,
    name: str = "WriteParquet",
) -> Any:
    """Write ``stream``'s records as Parquet under ``directory/worker=i/`` once their epoch is
    complete; returns the stream (passed through: each epoch's records, at their epoch, once
    it is complete).  Times must be ``int`` epochs.

    *Rolling* (the default): every worker appends the complete epochs to one open file at a
    time and commits it as ``part-<first epoch>-<last epoch>.parquet`` when it reaches
    ``roll_bytes`` (Parquet bytes written plus Arrow bytes buffered), ``roll_seconds`` after
    its first rows arrived (the operator wakes itself: the roll happens without further
    input), or when the stream ends.  An epoch is never split across files of one worker.
    ``None`` turns a limit off.  *Per epoch* (``per_epoch=True``): one file per epoch and
    worker, ``epoch=e.parquet`` (:func:`epoch_path`), written when ``e`` completes; a replayed
    epoch overwrites its file.  ``per_epoch=None`` means per epoch inside a
    :class:`~pytimely.spark.StreamingBridge` (:func:`per_epoch_sinks`), rolling elsewhere.

    A probe on the returned stream passing ``e`` means every row of every epoch ``<= e`` is in
    committed files on every worker: in rolling mode that happens at the commit of the file
    holding ``e`` (the roll after ``e`` completed), in per-epoch mode when ``e``'s file is
    written (the module docstring says why).

    Records: see :func:`to_arrow` (``columns`` names tuple fields).  ``schema`` (a
    ``pyarrow.Schema``, without the epoch column) fixes the column types; otherwise the first
    epoch's inferred types are kept for the later ones, so that Spark can read the files
    together (records that do not fit raise :class:`~pytimely.errors.TimelyError` naming the
    sink and the epoch).  ``epoch_column`` (int64; ``None``: not stored) holds every row's
    epoch.  Epochs in which a worker saw no records leave no trace in its files.

    >>> import os, shutil, tempfile
    >>> import pytimely as pt
    >>> from pytimely.spark import output_files, read_output, write_parquet
    >>> out = tempfile.mkdtemp()
    >>> def build(scope):
    ...     inp, stream = scope.new_input()
    ...     write_parquet(stream, out)          # int records: one column, "value"
    ...     return inp
    >>> worker = pt.Worker()
    >>> inp = worker.dataflow(build)
    >>> for epoch in range(1000):               # 1,000 epochs of two records each
    ...     inp.send_batch([epoch, -epoch])
    ...     inp.advance_to(epoch + 1)
    >>> inp.close()
    >>> worker.run()
    >>> [os.path.relpath(path, out) for path in output_files(out)]
    ['worker=0/part-0-999.parquet']
    >>> table = read_output(out)
    >>> table.num_rows, table.column_names
    (2000, ['value', 'epoch', 'worker'])
    >>> shutil.rmtree(out)
    """
    if roll_bytes is not None and roll_bytes <= 0:
        raise ValueError(f"write_parquet: roll_bytes must be positive or None, not {roll_bytes}")
    if roll_seconds is not None and not roll_seconds >= 0:
        raise ValueError(f"write_parquet: roll_seconds must be >= 0 or None, not {roll_seconds}")
    import pyarrow.parquet as pq

    if per_epoch is None:
        per_epoch = _per_epoch_default
    index = stream.scope.index
    if per_epoch and _resume_from is not None:
        discard_epochs_from(directory, index, stream.scope.peers, _resume_from)
    folder = output_folder(directory, index)
    tables = _Tables(f"write_parquet {name!r} into {directory}", columns, schema, epoch_column)
    what = tables.what

    def write_epoch(t: int, table: Any) -> None:
        final = os.path.join(folder, f"epoch={t}.parquet")
        temp = os.path.join(folder, f".epoch={t}.parquet.tmp")
        pq.write_table(table, temp, compression=compression)
        os.replace(temp, final)

    def ctor(cap: Any, info: Any) -> Any:
        cap.drop()
        # Epoch -> its batches, received and not complete yet.
        pending: dict[int, list[Any]] = {}
        rolling = (
            None
            if per_epoch
            else _RollingFile(
                folder,
                compression,
                math.inf if roll_bytes is None else roll_bytes,
                math.inf if roll_seconds is None else roll_seconds,
                info.activator(),
            )
        )
        # The one capability: at the least epoch received and not committed (none: nothing).
        token = MinToken()

        def logic(inp: Any, out: Any) -> None:
            # All messages at once, with one ref at their least time: a sink fed results at
            # many fine-grained times pays a dictionary entry per time, not a ref each.
            ref, messages = inp.take_all()
            frontier = inp.frontier
            bound = frontier.int_bound()  # epoch e is complete iff e < bound
            arrived: list[tuple[int, list[Any]]] = []  # complete on arrival, by epoch
            if ref is not None:
                if (
                    not pending
                    and type(ref.time) is int
                    and bound is not None
                    and max(map(_first, messages)) < bound
                ):
                    # The common case for results sent at their own (passed) times: every
                    # epoch is complete already, so group them without the pending dict.
                    messages.sort(key=_first)
                    last = None
                    for t, batch in messages:
                        if t == last:
                            arrived[-1][1].append(batch)
                        else:
                            arrived.append((t, [batch]))
                            last = t
                else:
                    get = pending.get
                    for t, batch in messages:
                        entry = get(t)
                        if entry is None:
                            if type(t) is not int:
                                raise TimelyError(f"{what}: times must be int epochs, not {t!r}")
                            pending[t] = [batch]
                        else:
                            entry.append(batch)
                token.cover(ref, ref.time)
            if arrived:
                ready = [t for t, _batches in arrived]
                done = [batches for _t, batches in arrived]
            elif bound is None:
                ready = release_ready(pending, frontier)
                done = [pending.pop(t) for t in ready]
            elif pending:
                ready = sorted(t for t in pending if t < bound)
                done = [pending.pop(t) for t in ready]
            else:
                ready = []
            if ready:
                if rolling is None:
                    for t, batches in zip(ready, done):
                        table = tables.table(t, batches)
                        if table is not None:
                            write_epoch(t, table)
                else:
                    table = tables.tables(ready, done)
                    if table is not None:
                        rolling.add(ready[0], ready[-1], table)  # commits when big enough
                if out.connected:  # the pass-through, if anything reads it
                    out.give_timed(token.cap, [(t, b) for t, bs in zip(ready, done) for b in bs])
            if rolling is not None and (frontier.is_empty() or rolling.due()):
                rolling.commit()
            # Hold the least epoch not in a committed file: the open file's first, else the
            # least pending one (epochs complete in order, so both are below later epochs).
            least = rolling.first if rolling is not None else None
            if least is None and pending:
                least = min(pending)
            token.settle(least)

        return logic

    return unary_frontier(stream, Pipeline, name, ctor, interest=FrontierInterest.IF_CAPABILITY)


class _DeferredParquetWriter:
    """A ParquetWriter created at the first ``Messages`` event (events before it are kept and
    written first).  A stream that never carried a batch writes no file: its ``value`` column
    would have a made-up type (int64) and keep ``spark.read.parquet`` from reading the other
    workers' files of the same capture, and it holds nothing to replay.

    ``capture_into`` flushes at every frontier change (so that tailing readers of a
    :class:`~pytimely.capture.FileWriter` see it), but a Parquet file is readable only once
    closed: a row group per frontier change would only make thousands of tiny row groups (one
    per epoch).  So a flush writes a row group only once ``group_events`` events are waiting
    or ``group_seconds`` have passed since the last one; ``close`` writes the rest.
    """

    def __init__(
        self,
        path: str,
        options: dict[str, Any],
        group_events: int = 100_000,
        group_seconds: float = 60.0,
    ) -> None:
        self.path = path
        self._options = options
        self._writer: Any = None
        self._early: list[Any] = []
        self._group_events = group_events
        self._group_seconds = group_seconds
        self._waiting = 0
        self._since = _time.monotonic()

    def push(self, event: Any) -> None:
        from ..capture.event import Messages

        self._waiting += 1
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
        if self._writer is None:
            return
        now = _time.monotonic()
        if self._waiting >= self._group_events or now - self._since >= self._group_seconds:
            self._writer.flush()
            self._waiting = 0
            self._since = now

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
