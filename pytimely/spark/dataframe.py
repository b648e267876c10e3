"""DataFrames as dataflow inputs: each worker reads one partition, in time order.

:func:`run_on_dataframe` repartitions the DataFrame into exactly N partitions (by ``key``
columns, or round-robin), sorts each partition by the ``time`` column and runs the workers as
``mapInArrow(task, schema, barrier=True)``: worker ``i`` receives partition ``i`` as Arrow
record batches (the fast path between the JVM and Python).  On every worker ``build(scope,
stream)`` builds the dataflow around one input stream carrying that partition's rows; the
worker then feeds the batches in, sending each run of equal times at that time and advancing
its input as the partition's times advance (``advance_to(t)`` promises no more data before
``t``, which is what lets the dataflow complete epoch after epoch while later ones still
stream in).  When the partition is exhausted the input closes and the worker runs its
dataflows to completion; ``build``'s return value is the worker's result.

Records on ``stream`` (``records=``):

* ``"arrow"`` -- ``pyarrow.RecordBatch`` slices (every column; all rows at one time), for
  vectorized operators (``map_batch``).  Operators that iterate over records (``map``,
  ``exchange``, ``aggregate``) need one of the two below, or a ``map_batch`` that converts.
* ``"rows"`` -- one ``dict`` per row (``{column: value}``).
* ``"tuples"`` -- one ``tuple`` per row, in column order.

The time column must be of an integer type with non-negative values (epochs).  To use event
times, compute an epoch column in Spark first, e.g.
``df.withColumn("epoch", (F.unix_timestamp("ts") / 60).cast("long"))``.

On a terminal every worker shows a progress bar of the epochs it has fed out of all the
DataFrame's epochs (:class:`EpochProgress`, ``progress=``).
"""

from __future__ import annotations

import sys
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from .executor import TaskInbox, _result_row, worker_task
from .launcher import Launch, _submit

__all__ = [
    "EpochProgress",
    "arrow_to_records",
    "feed_batches",
    "prepare_dataframe",
    "run_on_dataframe",
]

RECORD_FORMATS = ("arrow", "rows", "tuples")
_RESULT_SCHEMA = "worker long, result binary"


def arrow_to_records(batch: Any, records: str) -> Any:
    """A RecordBatch in the form the dataflow asked for (see the module docstring)."""
    if records == "arrow":
        return batch
    if records == "rows":
        return batch.to_pylist()
    if records == "tuples":
        columns = [column.to_pylist() for column in batch.columns]
        return list(zip(*columns)) if columns else [() for _ in range(batch.num_rows)]
    raise ValueError(f"records must be one of {RECORD_FORMATS}, not {records!r}")


def time_runs(batch: Any, time: str | None) -> Iterator[tuple[int, Any]]:
    """``(t, slice)`` for every run of equal times in ``batch`` (sorted by ``time``)."""
    import numpy as np

    n = batch.num_rows
    if n == 0:
        return
    if time is None:
        yield 0, batch
        return
    column = batch.column(batch.schema.get_field_index(time))
    if column.null_count:
        raise ValueError(f"time column {time!r} has nulls; every row needs an epoch")
    times = column.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    cuts = (np.flatnonzero(times[1:] != times[:-1]) + 1).tolist()
    start = 0
    for end in [*cuts, n]:
        yield int(times[start]), batch.slice(start, end - start)
        start = end


class EpochProgress:
    """One worker's epochs fed out of ``epochs`` (every epoch of the DataFrame, sorted), as a
    tqdm bar on stderr.  Invariant: an epoch counts as done once the input has advanced past it
    (no more of its rows will come from this worker), and all are done at :meth:`finish`.

    The bar is off when stderr is not a terminal (tqdm's ``disable=None``: nothing in logs or
    pipes), and absent when tqdm (in the ``all`` extra) is not installed.
    """

    def __init__(self, epochs: Sequence[int], desc: str, position: int = 0) -> None:
        self._epochs = list(epochs)
        self._done = 0
        try:
            from tqdm import tqdm
        except ImportError:
            self._bar: Any = None
            return
        self._bar = tqdm(
            total=len(self._epochs),
            desc=desc,
            unit="epoch",
            disable=None,
            position=position,
            file=sys.stderr,
        )

    def advanced_to(self, t: int) -> None:
        """The input now promises no rows before ``t``: every epoch below it is done."""
        self._set(bisect_left(self._epochs, t))

    def finish(self) -> None:
        """The input is closed: every epoch is done."""
        self._set(len(self._epochs))
        if self._bar is not None:
            self._bar.close()

    def _set(self, done: int) -> None:
        if done > self._done:
            if self._bar is not None:
                self._bar.update(done - self._done)
            self._done = done


def feed_batches(
    worker: Any,
    handle: Any,
    batches: Iterable[Any],
    time: str | None,
    records: str,
    progress: EpochProgress | None = None,
) -> int:
    """Send Arrow ``batches`` (sorted by ``time``) into ``handle`` at their times, stepping
    ``worker`` after each run of equal times, and telling ``progress`` of every advance;
    returns the number of rows sent.  Does not close ``handle``."""
    from ..errors import TimelyError

    rows = 0
    for batch in batches:
        for t, part in time_runs(batch, time):
            if t != handle.time:
                if t < handle.time:
                    raise TimelyError(
                        f"time column {time!r}: value {t} after {handle.time}; times must be "
                        "non-negative and the partition sorted by them"
                    )
                handle.advance_to(t)
                if progress is not None:
                    progress.advanced_to(t)
            handle.send_batch(arrow_to_records(part, records))
            rows += part.num_rows
            worker.step()  # let the dataflow work on this epoch while the next one streams in
    return rows


def prepare_dataframe(df: Any, workers: int, time: str | None, key: Any = None) -> Any:
    """``df`` in exactly ``workers`` partitions (by ``key`` columns, or round-robin), each
    sorted by ``time``."""
    from pyspark.sql.types import IntegralType

    if time is not None:
        if time not in df.columns:
            raise ValueError(f"time column {time!r} is not among the columns {df.columns}")
        dtype = df.schema[time].dataType
        if not isinstance(dtype, IntegralType):
            raise TypeError(
                f"time column {time!r} is {dtype.simpleString()}; it must be an integer type "
                "(compute an epoch column first, e.g. (unix_timestamp(ts) / 60).cast('long'))"
            )
    if key is None:
        parted = df.repartition(workers)
    else:
        keys = [key] if isinstance(key, str) else list(key)
        parted = df.repartition(workers, *keys)
    return parted.sortWithinPartitions(time) if time is not None else parted


def run_on_dataframe(
    df: Any,
    build: Callable[[Any, Any], Any],
    *,
    time: str | None,
    workers: int = 2,
    key: str | list[str] | None = None,
    records: str = "rows",
    attempts: int = 1,
    dashboard: int | None = None,
    progress: bool | None = None,
    **options: Any,
) -> list[Any]:
    """Run a dataflow over ``df`` on ``workers`` Spark-placed workers (module docstring).

    ``build(scope, stream)`` is called once on every worker (``scope.index`` is the worker's
    index); ``stream`` carries the worker's partition at the times of column ``time`` (None: all
    rows at time 0).  Returns ``build``'s return values in worker order (cloud-pickled back).
    ``dashboard=PORT``: worker 0 serves the live dashboard while the job runs, as with
    :func:`pytimely.spark.run`, whose other options (``timeout``, ``secret``, ...) ``options``
    are.  ``progress``: show every worker's :class:`EpochProgress` (on its stderr, if that is
    a terminal); None (default): when the driver's stderr is a terminal.  It costs one Spark
    job on the driver, collecting the distinct epochs.
    """
    if records not in RECORD_FORMATS:
        raise ValueError(f"records must be one of {RECORD_FORMATS}, not {records!r}")
    prepare_dataframe(df, workers, time, key)  # check the columns before starting anything
    spark = df.sparkSession
    show = sys.stderr.isatty() if progress is None else progress
    epochs = _distinct_epochs(df, time) if show else None

    def action(launch: Launch) -> Callable[[], list[Any]]:
        import pyarrow as pa

        spec = launch.spec
        prepared = prepare_dataframe(df, launch.workers, time, key)
        out_schema = pa.schema([("worker", pa.int64()), ("result", pa.binary())])

        def task(batches: Iterator[Any]) -> Iterator[Any]:
            def body(worker: Any, control: Any, inbox: TaskInbox) -> Any:
                from ..execute import run_worker

                def dataflow(scope: Any) -> Any:
                    handle, stream = scope.new_input()
                    return handle, build(scope, stream)

                def feed(worker: Any) -> Any:
                    handle, result = worker.dataflow(dataflow)
                    bar = (
                        None
                        if epochs is None
                        else EpochProgress(
                            epochs, f"worker {worker.index} epochs", position=worker.index
                        )
                    )
                    feed_batches(worker, handle, batches, time, records, bar)
                    handle.close()
                    if bar is not None:
                        bar.finish()
                    return result

                return run_worker(feed, worker, dashboard=dashboard)

            index, result = worker_task(spec, body)
            i, payload = _result_row(index, result)
            yield pa.RecordBatch.from_arrays(
                [pa.array([i], pa.int64()), pa.array([payload], pa.binary())], schema=out_schema
            )

        mapped = prepared.mapInArrow(task, _RESULT_SCHEMA, barrier=True)

        def collect() -> list[Any]:
            return [(row["worker"], row["result"]) for row in mapped.collect()]

        return collect

    args = dict(options)
    args.setdefault("description", "pytimely workers over a DataFrame")
    return _submit(args, spark, workers, action, attempts)


def _distinct_epochs(df: Any, time: str | None) -> list[int]:
    """Every epoch of ``df``, sorted (one Spark job)."""
    if time is None:
        return [0]
    return sorted(int(row[0]) for row in df.select(time).distinct().collect())
