"""DataFrames as dataflow inputs: each worker reads one partition, in time order.

:func:`run_on_dataframe` repartitions the DataFrame into exactly N partitions (by ``key``
columns, or round-robin), sorts each partition by the ``time`` column and runs the workers as
``mapInArrow(task, schema, barrier=True)``: worker ``i`` receives partition ``i`` as Arrow
record batches (the fast path between the JVM and Python).  On every worker ``build(scope,
stream)`` builds the dataflow around one input stream carrying that partition's rows; the
worker then feeds the batches in slices of :data:`STEP_ROWS` rows and steps its dataflows once
per slice, however many distinct times the slice holds, keeping its input within a slice of
the other workers' (a worker whose partition streams in faster waits, parked, instead of
running ahead).  When the partition is exhausted the input closes and the worker runs its
dataflows to completion; ``build``'s return value is the worker's result.  One integer
``key`` column is partitioned the way pytimely's exchange routes it, so rows start on the
worker that owns their key.

**Times.**  The ``time`` column is read in one of two ways:

* **Exact times** (``delay=None``, the default): every row is sent at its own time (an int
  ``>= 0``: epochs, seconds, ...).  The input holds its one token at the least time it may
  still send at and advances once per slice (:meth:`InputHandle.send_batch` with
  ``times=``), so distinct times cost no progress round each; but every distinct time is still
  a message of its own through the dataflow, so use this for coarse times.
* **Event time** (``delay=D``, an int ``>= 0`` in the column's units): the column is each
  row's event time and stays in the row; the stream's timestamps are the worker's
  **watermark**, the largest event time fed so far minus ``D`` (never decreasing, never below
  0).  Each slice is sent at the watermark in force when it starts, and the input then
  advances to the watermark after it: one time per slice, however fine the event times.  This
  is the Structured Streaming bridge's rule (:mod:`pytimely.spark.streaming`); event-time
  operators read the column (``window_count(..., event_time=lambda r: r["ts_ms"])``) and
  treat the timestamp as the watermark.  Since each partition is sorted by the column, no row
  arrives behind the watermark, and results equal a batch computation's; ``D`` only delays
  them (it matters where rows may be out of order, as in the bridge).

The column must be of an integer type, or a timestamp type, which arrives as milliseconds since
the Unix epoch (an int64 column of the same name).  A column of another type is refused before
anything starts; nulls, or (exact times) negative values, fail the worker with a message naming
the column and the first offending row.

Records on ``stream`` (``records=``):

* ``"arrow"`` -- ``pyarrow.RecordBatch`` slices (every column), for vectorized operators
  (``map_batch``); with exact times one slice per run of equal times.  Operators that iterate
  over records (``map``, ``exchange``, ``aggregate``) need one of the two below, or a
  ``map_batch`` that converts.
* ``"rows"`` -- one ``dict`` per row (``{column: value}``).
* ``"tuples"`` -- one ``tuple`` per row, in column order (about three times cheaper to make
  than dicts: the choice for large inputs).

On a terminal every worker shows a progress bar (``progress=``): with exact times the epochs it
has fed out of all the DataFrame's epochs (:class:`EpochProgress`), with event time how far its
watermark has come through the DataFrame's range of times (:class:`TimeRangeProgress`).
"""

from __future__ import annotations

import sys
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from .executor import TaskInbox, result_row, worker_task
from .launcher import Launch, _submit
from .session import is_connect

__all__ = [
    "EpochProgress",
    "arrow_to_records",
    "feed_batches",
    "prepare_dataframe",
    "run_on_dataframe",
]

RECORD_FORMATS = ("arrow", "rows", "tuples")

#: Rows fed between two steps of a worker, per record format (Arrow batches are sliced to
#: this size): with event time, one watermark advance per slice, and the workers' inputs are
#: kept within a slice of each other.  Smaller slices release results sooner and keep less
#: state pending; each slice costs a step and a wait for the slowest worker (tens of
#: microseconds).  Per-record formats pay microseconds per row, so small slices cost them
#: nothing: the sessionization of ``bench/pipeline.py`` ran at 600 k clicks/s with 1,000 rows,
#: 470 k with 5,000, 410 k with 10,000 and 230 k with 40,000.  Arrow batches, cheap per row,
#: take larger slices.  ``run_on_dataframe(step_rows=...)`` overrides it.
STEP_ROWS = {"rows": 1_000, "tuples": 1_000, "arrow": 10_000}
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


def _times(batch: Any, time: str, exact: bool) -> Any:
    """Column ``time`` of ``batch`` as an int64 numpy array (timestamps as milliseconds),
    checked: no nulls, and for exact times no negative values."""
    import pyarrow as pa

    column = batch.column(batch.schema.get_field_index(time))
    if column.null_count:
        row = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise ValueError(
            f"time column {time!r} has a null in row {row} of a batch ({_row(batch, row)}); "
            "every row needs a time"
        )
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.timestamp("ms", tz=column.type.tz)).cast(pa.int64())
    elif not pa.types.is_integer(column.type):
        raise TypeError(
            f"time column {time!r} is {column.type}; it must be an integer or timestamp type"
        )
    times = column.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    if exact and len(times) and int(times.min()) < 0:
        row = int(np.argmax(times < 0))
        raise ValueError(
            f"time column {time!r} has the negative time {int(times[row])} in row {row} of a "
            f"batch ({_row(batch, row)}); exact times are epochs >= 0 (or pass delay= to read "
            "the column as event time)"
        )
    return times


def _row(batch: Any, i: int) -> str:
    """Row ``i`` of an Arrow batch, for an error message."""
    return repr(batch.slice(i, 1).to_pylist()[0])


class EpochProgress:
    """One worker's epochs fed out of ``epochs`` (every epoch of the DataFrame, sorted), as a
    tqdm bar on stderr.  Invariant: an epoch counts as done once the input has advanced past it
    (no more of its rows will come from this worker), and all are done at :meth:`finish`.

    The bar is off when stderr is not a terminal (tqdm's ``disable=None``: nothing in logs or
    pipes), and absent when tqdm (in the ``all`` extra) is not installed.
    """

    def __init__(self, epochs: Sequence[int], desc: str, position: int = 0) -> None:
        self._epochs = list(epochs)
        self._start(len(self._epochs), desc, "epoch", position)

    def _start(self, total: int, desc: str, unit: str, position: int) -> None:
        self._total = total
        self._done = 0
        try:
            from tqdm import tqdm
        except ImportError:
            self._bar: Any = None
            return
        self._bar = tqdm(
            total=total, desc=desc, unit=unit, disable=None, position=position, file=sys.stderr
        )

    def advanced_to(self, t: int) -> None:
        """The input now promises no rows before ``t``: every epoch below it is done."""
        self._set(bisect_left(self._epochs, t))

    def finish(self) -> None:
        """The input is closed: everything is done."""
        self._set(self._total)
        if self._bar is not None:
            self._bar.close()

    def _set(self, done: int) -> None:
        if done > self._done:
            if self._bar is not None:
                self._bar.update(done - self._done)
            self._done = done


class TimeRangeProgress(EpochProgress):
    """How far one worker's watermark has come through ``[first, last]``, the DataFrame's
    range of event times, in per mille (event-time feeding: the times are too many to list).

    >>> bar = TimeRangeProgress(1_000, 2_000, "worker 0 event time")
    >>> bar.advanced_to(1_500)
    >>> bar.finish()
    """

    def __init__(self, first: int, last: int, desc: str, position: int = 0) -> None:
        self._first = first
        self._span = max(1, last - first)
        self._start(1000, desc, "‰", position)

    def advanced_to(self, t: int) -> None:
        """The watermark reached ``t``."""
        self._set(min(1000, max(0, (t - self._first) * 1000 // self._span)))


def feed_batches(
    worker: Any,
    handle: Any,
    batches: Iterable[Any],
    time: str | None,
    records: str,
    progress: EpochProgress | None = None,
    delay: int | None = None,
    step_rows: int | None = None,
    probe: Any = None,
) -> int:
    """Send Arrow ``batches`` (sorted by ``time``) into ``handle`` in slices of at most
    ``step_rows`` rows and step ``worker`` once after each slice, telling ``progress`` of every
    advance; returns the number of rows sent.  ``delay=None``: every row at its own time;
    ``delay=D``: rows at the watermark (module docstring, **Times**).  Does not close
    ``handle``.

    ``probe`` (a probe of ``handle``'s stream) keeps the workers' inputs in step: before the
    next slice, the worker steps (parking when idle) until every worker's input has reached
    the time this worker's input had one slice ago.  Without it, a worker whose partition
    streams in faster runs ahead, and everything it sends waits, as open state, for the
    slowest worker's watermark: on two workers that made a sessionization three times slower.
    """
    step_rows = STEP_ROWS[records] if step_rows is None else step_rows
    rows = 0
    behind = None  # the input's time one slice ago
    for big in batches:
        for start in range(0, big.num_rows, step_rows):
            batch = big.slice(start, step_rows) if big.num_rows > step_rows else big
            if probe is not None and behind is not None:
                worker.step_while(lambda: probe.less_than(behind))
            behind = handle.time
            _feed_one(handle, batch, time, records, progress, delay)
            rows += batch.num_rows
            worker.step()  # let the dataflow work on this slice while the next streams in
    return rows


def _feed_one(
    handle: Any,
    batch: Any,
    time: str | None,
    records: str,
    progress: EpochProgress | None,
    delay: int | None,
) -> None:
    """Send one non-empty Arrow slice and advance the input after it (:func:`feed_batches`)."""
    from ..errors import TimelyError

    if time is None:
        handle.send_batch(arrow_to_records(batch, records))
        return
    if delay is not None:
        times = _times(batch, time, exact=False)
        handle.send_batch(arrow_to_records(batch, records))  # at the watermark
        then = int(times.max()) - delay
        if then > handle.time:
            handle.advance_to(then)
            if progress is not None:
                progress.advanced_to(then)
        return
    times = _times(batch, time, exact=True)
    first, last = int(times[0]), int(times[-1])
    if first < handle.time or (len(times) > 1 and not bool((times[1:] >= times[:-1]).all())):
        raise TimelyError(
            f"time column {time!r}: the partition is not sorted by it (value {first} after "
            f"{handle.time}); feed_batches needs batches in time order"
        )
    # One call for the slice's many times: a message per run of equal times (Arrow slices,
    # or lists of rows), the token held at the least of them; then one advance.
    handle.send_batch(arrow_to_records(batch, records), times=times)
    if last != handle.time:
        handle.advance_to(last)
        if progress is not None:
            progress.advanced_to(last)


def functions_for(df: Any) -> Any:
    """``pyspark.sql.functions`` for ``df``'s kind of session (``df``: a DataFrame or a
    session): Spark Connect's own module for a Connect one (the generic module builds classic
    columns whenever this process also holds a classic session)."""
    if is_connect(getattr(df, "sparkSession", df)):
        from pyspark.sql.connect import functions

        return functions
    from pyspark.sql import functions

    return functions


def prepare_dataframe(
    df: Any, workers: int, time: str | None, key: Any = None, align: bool = True
) -> Any:
    """``df`` in exactly ``workers`` partitions (by ``key`` columns, or round-robin), each
    sorted by ``time``; a timestamp-typed ``time`` column becomes int64 milliseconds since the
    Unix epoch.  A ``time`` column that is missing or of another type is refused here, before
    any job starts.  One integer ``key`` column is partitioned the way pytimely's exchange
    routes it (``align``; :func:`_aligned_partition`), so rows start on the worker that owns
    their key."""
    from pyspark.sql.types import IntegralType, TimestampNTZType, TimestampType

    F = functions_for(df)

    if time is not None:
        if time not in df.columns:
            raise ValueError(f"time column {time!r} is not among the columns {df.columns}")
        dtype = df.schema[time].dataType
        if isinstance(dtype, (TimestampType, TimestampNTZType)):
            df = df.withColumn(time, F.unix_millis(F.col(time).cast("timestamp")))
        elif not isinstance(dtype, IntegralType):
            raise TypeError(
                f"time column {time!r} is {dtype.simpleString()}; it must be an integer type or a "
                "timestamp type (e.g. F.col(c).cast('long'), or F.to_timestamp(c) for text)"
            )
    if key is None:
        parted = df.repartition(workers)
    else:
        keys = [key] if isinstance(key, str) else list(key)
        aligned = _aligned_partition(df, keys, workers) if align else None
        parted = (
            df.repartition(workers, aligned)
            if aligned is not None
            else df.repartition(workers, *keys)
        )
    return parted.sortWithinPartitions(time) if time is not None else parted


def _aligned_partition(df: Any, keys: list[str], workers: int) -> Any:
    """For one integer key column: an expression that makes Spark put the rows of key ``k``
    in partition ``k % workers`` -- where pytimely's exchange routes ``k``
    (:func:`pytimely.dataflow.exchange.routing.route`), so a dataflow that exchanges by that key
    sends no record to another worker.  ``None`` for other keys (Spark's hash then decides).

    Spark places a row in partition ``pmod(hash(expr), workers)``; for each worker ``i`` we
    pick a small int whose hash lands on ``i`` (one tiny Spark job) and map ``k % workers``
    to it.
    """
    from pyspark.sql.types import IntegralType

    F = functions_for(df)
    if len(keys) != 1 or not isinstance(df.schema[keys[0]].dataType, IntegralType):
        return None
    spark = df.sparkSession
    probe = spark.range(0, 64 * workers).select(
        "id", F.pmod(F.hash(F.col("id").cast("int")), F.lit(workers)).alias("p")
    )
    chosen: dict[int, int] = {}
    for row in probe.collect():
        chosen.setdefault(int(row["p"]), int(row["id"]))
    if len(chosen) < workers:
        return None  # no small int lands on some partition: let Spark hash the key
    surrogates = F.array(*[F.lit(chosen[i]).cast("int") for i in range(workers)])
    route = F.pmod(F.col(keys[0]), F.lit(workers)).cast("int") + 1
    return F.element_at(surrogates, route)


def run_on_dataframe(
    df: Any,
    build: Callable[[Any, Any], Any],
    *,
    time: str | None,
    delay: int | None = None,
    workers: int = 2,
    key: str | list[str] | None = None,
    records: str = "rows",
    attempts: int = 1,
    dashboard: int | None = None,
    progress: bool | None = None,
    step_rows: int | None = None,
    **options: Any,
) -> list[Any]:
    """Run a dataflow over ``df`` on ``workers`` Spark-placed workers (module docstring).

    ``build(scope, stream)`` is called once on every worker (``scope.index`` is the worker's
    index); ``stream`` carries the worker's partition: ``delay=None``, each row at its time in
    column ``time`` (None: all rows at time 0); ``delay=D``, rows at the watermark, column
    ``time`` their event time (module docstring, **Times**).  Returns ``build``'s return values
    in worker order (cloud-pickled back).  ``dashboard=PORT``: worker 0 serves the live
    dashboard while the job runs, as with :func:`pytimely.spark.run`, whose other options
    (``timeout``, ``secret``, ...) ``options`` are.  ``progress``: show every worker's progress
    bar (on its stderr, if that is a terminal); None (default): when the driver's stderr is a
    terminal.  It costs one Spark job on the driver (the distinct epochs, or the range of event
    times).  ``step_rows``: rows fed between two steps of a worker (default
    :data:`STEP_ROWS`: 1,000 rows as dicts or tuples, 10,000 as Arrow; with event time, one
    watermark per slice).

    Sessionizing clicks by their millisecond event times (``ts_ms``), on two workers::

        def build(scope, clicks):
            sessions = clicks.window_count(
                pt.Session(30_000), key=lambda r: r[0], event_time=lambda r: r[1]
            )
            return ps.write_parquet(sessions.output, "out/sessions",
                                    columns=["user", "start", "end", "clicks"])

        ps.run_on_dataframe(df.select("user", "ts_ms"), build, time="ts_ms", delay=0,
                            key="user", records="tuples")
    """
    if records not in RECORD_FORMATS:
        raise ValueError(f"records must be one of {RECORD_FORMATS}, not {records!r}")
    if delay is not None and (type(delay) is not int or delay < 0):
        raise ValueError(f"delay must be None or an int >= 0, not {delay!r}")
    if step_rows is not None and (type(step_rows) is not int or step_rows < 1):
        raise ValueError(f"step_rows must be a positive int, not {step_rows!r}")
    if delay is not None and time is None:
        raise ValueError("delay= reads the time column as event time: give time= too")
    prepare_dataframe(df, workers, time, key, align=False)  # check the columns now
    spark = df.sparkSession
    show = sys.stderr.isatty() if progress is None else progress
    if not show:
        span = None
    elif delay is None:
        span = _distinct_epochs(df, time)
    else:
        span = _time_range(prepare_dataframe(df, 1, time), time)

    def over_partition(worker: Any, batches: Iterator[Any]) -> Any:
        """The worker's dataflow, fed its partition's Arrow ``batches``."""

        def dataflow(scope: Any) -> Any:
            handle, stream = scope.new_input()
            return handle, stream.probe(), build(scope, stream)

        handle, probe, result = worker.dataflow(dataflow)
        bar = _bar(span, delay, worker.index)
        feed_batches(worker, handle, batches, time, records, bar, delay, step_rows, probe)
        handle.close()
        if bar is not None:
            bar.finish()
        return result

    if is_connect(spark):
        from . import remote

        options.setdefault("description", "pytimely workers over a DataFrame")
        return remote.run(
            spark,
            over_partition,
            workers,
            stage_input=lambda n: prepare_dataframe(df, n, time, key),
            attempts=attempts,
            dashboard=dashboard,
            **options,
        )

    def action(launch: Launch) -> Callable[[], list[Any]]:
        import pyarrow as pa

        spec = launch.spec
        prepared = prepare_dataframe(df, launch.workers, time, key)
        out_schema = pa.schema([("worker", pa.int64()), ("result", pa.binary())])

        def task(batches: Iterator[Any]) -> Iterator[Any]:
            def body(worker: Any, control: Any, inbox: TaskInbox) -> Any:
                from ..execute import run_worker

                return run_worker(lambda w: over_partition(w, batches), worker, dashboard=dashboard)

            index, result = worker_task(spec, body, batches)
            i, payload = result_row(index, result)
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


def _bar(span: Any, delay: int | None, index: int) -> EpochProgress | None:
    """Worker ``index``'s progress bar over ``span`` (None: no bar)."""
    if span is None:
        return None
    if delay is None:
        return EpochProgress(span, f"worker {index} epochs", position=index)
    first, last = span
    return TimeRangeProgress(first, last, f"worker {index} event time", position=index)


def _distinct_epochs(df: Any, time: str | None) -> list[int]:
    """Every epoch of ``df``, sorted (one Spark job)."""
    if time is None:
        return [0]
    return sorted(int(row[0]) for row in df.select(time).distinct().collect())


def _time_range(df: Any, time: str) -> tuple[int, int]:
    """The least and largest value of ``df``'s int time column ``time`` (one Spark job)."""
    F = functions_for(df)
    row = df.agg(F.min(time), F.max(time)).collect()[0]
    return (int(row[0] or 0), int(row[1] or 0))
