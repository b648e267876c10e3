"""Structured Streaming into running workers: one epoch per micro-batch.

:class:`StreamingBridge` starts N long-running workers (one barrier stage, as
:func:`pytimely.spark.run`), each with a dataflow built by ``build(scope, stream)`` around one
input, and a feed listener.  Its :meth:`~StreamingBridge.foreach_batch` is a
``writeStream.foreachBatch`` function: for micro-batch ``b`` it

1. runs ``batch_df.mapInArrow(push)``: the task of partition ``p`` pushes its Arrow batches over
   an authenticated TCP connection to worker ``p % N`` (``key=`` repartitions the micro-batch by
   those columns first, so that partition ``p`` -- all of its keys -- goes to worker ``p``),
   tagged with epoch ``b``; each push is acknowledged once the worker has it;
2. sends every worker "close epoch ``b``: you got ``k`` pushes" over its control connection.

A worker holds the pushed batches of epoch ``b`` until the close (data of a later epoch may
overtake it), then sends them at the batch's time and advances its input (see **Times**
below; by default time ``b``, then ``b + 1``).  Input of an
epoch that is never closed -- its micro-batch was interrupted, e.g. by stopping the query -- is
dropped when the bridge stops (Spark delivers that batch again after a restart).  When
its dataflow has finished epoch ``b`` -- the streams ``build`` returned (default: the input
stream) have passed ``b`` -- it reports to the driver; once every worker did,
:attr:`~StreamingBridge.completed` becomes ``b`` and ``on_epoch(b)`` is called on the driver.
Per-epoch results are best written with :func:`pytimely.spark.write_parquet`, which inside
``build`` writes one file per epoch by default (``per_epoch=None``; rolling files would keep a
batch from completing until their roll).  Return its stream from ``build``: when epoch ``b`` is
reported complete, every worker's file for ``b`` is on disk.

**Times.**  By default the micro-batch ids are the epochs (processing time): batch ``b``'s rows
are sent at time ``b`` and the input then advances to ``b + 1``.  With ``event_time=column``
(an integer column, e.g. ``F.unix_millis(ts)``) the times are event time, following the
watermark rule of Spark's ``withWatermark`` ("Handling Late Data and Watermarking" in the
Structured Streaming guide): the watermark is the largest event time seen so far minus
``delay``, never decreasing; batch ``b``'s rows are sent at the watermark in force when it
started, and the input then advances to the watermark after it.  An event-time window operator
(``window_count(..., event_time=...)``, :mod:`pytimely.dataflow.operators.windowing`) treats
that timestamp as the watermark: window ``[s, e)`` is emitted once the watermark reaches
``e + lateness``, and a row whose window was already emitted goes to ``.late``.  Batch ``b`` is
reported complete once the dataflow has passed both its rows' time and the watermark after it
(so with an unchanged watermark, when a later batch moves it).

**Restarts.**  With ``checkpoint=`` (the query's ``checkpointLocation``), every micro-batch's
rows are logged there by the workers before they enter the dataflow, and committed by the
driver before ``foreach_batch`` returns (before Spark commits the batch)
(:mod:`pytimely.spark.recovery`).  Every ``snapshot_every`` batches each worker lets the batches
it was fed complete, feeds nothing more meanwhile, and writes its stateful operators' state
(windows, ``stateful_map``, ``keyed_process``, joins; :mod:`pytimely.dataflow.snapshot`) after
the last of them, ``s``; once Spark has committed ``s`` the driver commits that snapshot and
deletes the older ones and the input log up to ``s`` (:mod:`pytimely.spark.snapshots`).  A
bridge started again on the same checkpoint builds its workers' dataflows from the last
committed snapshot -- each worker keeps the keys it owns under the routing rule, so fewer or
more workers re-partition the state by key -- and replays only the logged batches after ``s``
before the query's first batch.  So the outputs after a kill and restart equal a clean run's:
epochs emitted before the snapshot are not emitted again, and those the killed run emitted
after it are emitted again with the same records (the snapshot plus the same replayed batches
rebuild the same state), which :func:`pytimely.spark.write_parquet` (one file per epoch in a
bridge) makes idempotent by rewriting an epoch's file whole -- on a different number of workers
such an epoch lands in other workers' folders, and the old ones are stale.  Snapshots need
``build`` to return the streams downstream of its stateful operators (its sinks): their
frontiers tell when a batch is applied everywhere.

Micro-batch ids still name the batches.  A batch id at or below the last closed one (Spark re-runs
the last batch after a restart from its checkpoint) is skipped: delivery into one bridge is
exactly-once per batch id.  The workers hold N task slots for the bridge's whole life, and each
micro-batch needs at least one more: the bridge insists on ``N + 1`` slots.

Usage::

    with StreamingBridge(spark, build, workers=2) as bridge:
        q = stream_df.writeStream.foreachBatch(bridge.foreach_batch).start()
        ...
        q.stop()
    results = bridge.results          # build's return values, per worker
"""

from __future__ import annotations

import threading
import time as _time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from ..dataflow.snapshot import StateRegistry
from ..errors import TimelyError
from ..naming import describe_function
from .dataframe import RECORD_FORMATS, arrow_to_records
from .executor import TaskInbox, check_lost, portable, result_row, worker_task
from .launcher import Launch
from .recovery import InputLog
from .sinks import per_epoch_sinks
from .snapshots import SnapshotStore

__all__ = ["BatchInterrupted", "StreamingBridge"]


def _ipc_bytes(batch: Any) -> Any:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def _read_ipc(payload: Any) -> list[Any]:
    import pyarrow as pa

    return pa.ipc.open_stream(pa.py_buffer(payload)).read_all().to_batches()


def _as_streams(out: Any, default: Any) -> list[Any]:
    from ..dataflow.stream import Stream

    if out is None:
        return [default]
    if isinstance(out, Stream):
        return [out]
    if isinstance(out, (list, tuple)) and out and all(isinstance(s, Stream) for s in out):
        return list(out)
    return [default]


class BatchInterrupted(TimelyError):
    """A micro-batch's Spark call was interrupted (by ``query.stop()``): the batch is not
    closed, and Spark, which interrupted it, treats the query's stop as clean."""


#: The JVM exceptions Spark counts as "interrupted by stop" (``StreamExecution``).
_INTERRUPTIONS = (
    "java.lang.InterruptedException",
    "java.io.InterruptedIOException",
    "java.nio.channels.ClosedByInterruptException",
)


def _interruption(exc: BaseException) -> str | None:
    """For a Py4J error whose Java exception is an interruption, the short text Spark's
    ``PROXY_ERROR`` expression recognises; else None.

    >>> class Py4JJavaError(Exception):
    ...     errmsg = "An error occurred while calling o233.collectToPython."
    ...     java_exception = "java.lang.InterruptedException"
    >>> print(_interruption(Py4JJavaError()))  # doctest: +NORMALIZE_WHITESPACE
    py4j.protocol.Py4JJavaError: An error occurred while calling o233.collectToPython:
    java.lang.InterruptedException
    >>> _interruption(ValueError("x")) is None
    True
    """
    if type(exc).__name__ != "Py4JJavaError":
        return None
    try:
        java = exc.java_exception  # type: ignore[attr-defined]
        name = java if isinstance(java, str) else java.getClass().getName()
    except Exception:  # noqa: BLE001 - the gateway may be going away: not ours to decide
        return None
    if name not in _INTERRUPTIONS:
        return None
    call = str(getattr(exc, "errmsg", "")).strip().rstrip(".")
    return f"py4j.protocol.Py4JJavaError: {call}: {name}"


class _Close(NamedTuple):
    """A micro-batch the driver closed: ``pushes`` payloads make it up; its rows are sent at
    time ``at`` and the input then advances to ``then``; ``files`` are the input-log parts of a
    batch replayed after a restart (``None``: its payloads arrive on the feed)."""

    batch: int
    pushes: int
    at: int
    then: int
    files: list[str] | None


class _Fed(NamedTuple):
    """A micro-batch that entered the dataflow and is not yet reported complete."""

    batch: int
    at: int
    then: int


class _BridgeWorker:
    """One worker's side of a :class:`StreamingBridge`: takes the driver's messages from the
    task's inbox, feeds closed micro-batches into the dataflow, reports them complete and
    snapshots the state when due.

    Messages in (tuples from the feed and the control connection, matched by :meth:`receive`;
    a known kind of the wrong shape is an error, other kinds are ignored):
    ``("data", batch, payload)`` an Arrow IPC payload of a micro-batch;
    ``("close", batch, pushes, at, then)`` the driver delivered it completely;
    ``("replay", batch, files, at, then)`` a committed batch to read back from the input log;
    ``("stop",)``; ``("feed-error", why)``.  Messages out, to the driver
    (:meth:`StreamingBridge._message`): ``("logged", batch)`` its rows are in the input log;
    ``("epoch", batch)`` it and every batch before it are complete; ``("snapshot", batch,
    then, rows)`` the state after it is in the store.

    Invariants: ``closes`` holds closed batches in the order the driver closed them, and a
    batch enters the dataflow only once every push it counted has arrived; ``fed`` holds the
    batches that entered, in order, until the probes show them complete; ``last_batch`` is the
    last batch that entered; ``snapshotted`` the last batch whose state is in the store.
    """

    def __init__(
        self,
        worker: Any,
        control: Any,
        dataflow: tuple[Any, Any, list[Any]],
        records: str,
        checkpoint: tuple[InputLog, SnapshotStore, StateRegistry] | None,
        snapshotted: int,
        snapshot_every: int,
    ) -> None:
        self.worker = worker
        self.control = control
        self.handle, self.out, self.probes = dataflow
        self.records = records
        self.log, self.store, self.registry = checkpoint if checkpoint else (None, None, None)
        self.snapshotted = snapshotted
        self.snapshot_every = snapshot_every
        self.held: dict[int, list[Any]] = {}  # batch -> payloads received, not yet closed
        self.received: dict[int, int] = {}  # batch -> pushes received
        self.closes: list[_Close] = []
        self.fed: list[_Fed] = []
        self.last_batch = -1
        self.stopping = False
        self.epochs = 0
        self.rows = 0

    def _fail(self, what: str) -> TimelyError:
        return TimelyError(f"worker {self.worker.index}: {what}")

    def receive(self, items: list[tuple[Any, ...]]) -> None:
        """Take the messages that arrived (see the class docstring)."""
        for item in items:
            match item:
                case ("data", batch, payload):
                    if batch <= self.last_batch:
                        raise self._fail(
                            f"input for micro-batch {batch} arrived after the batch was closed"
                        )
                    self.received[batch] = self.received.get(batch, 0) + 1
                    self.held.setdefault(batch, []).append(payload)
                case ("close", batch, pushes, at, then):
                    self.closes.append(_Close(batch, pushes, at, then, None))
                case ("replay", batch, files, at, then):  # a committed batch from the input log
                    self.closes.append(_Close(batch, 0, at, then, files))
                case ("stop",):
                    self.stopping = True
                case ("feed-error", why):
                    raise self._fail(why)
                case ("data" | "close" | "replay" | "stop" | "feed-error", *_):
                    raise self._fail(f"malformed message from the driver: {item!r}")

    def _snapshot_waits(self) -> bool:
        """A snapshot is due, and the last batch fed left the time where its rows were (an
        unchanged watermark): nothing more may enter until a later batch moves the input on
        and the snapshot is taken."""
        return (
            self.registry is not None
            and self.last_batch - self.snapshotted >= self.snapshot_every
            and bool(self.fed)
            and self.fed[-1].then > self.fed[-1].at
        )

    def feed_closed(self) -> None:
        """Feed every closed batch whose pushes have all arrived, in order: its rows at
        ``at``, then the input advances to ``then`` (module docstring)."""
        handle = self.handle
        while (
            self.closes
            and self.received.get(self.closes[0].batch, 0) >= self.closes[0].pushes
            and not self._snapshot_waits()
        ):
            close = self.closes.pop(0)
            if self.received.pop(close.batch, 0) != close.pushes:
                raise self._fail(
                    f"micro-batch {close.batch}: more pushes arrived than the driver counted "
                    f"({close.pushes})"
                )
            if close.batch <= self.last_batch or close.at < handle.time:
                raise self._fail(
                    f"micro-batch {close.batch} closed twice, or at time {close.at} after "
                    f"{handle.time}"
                )
            self.last_batch = close.batch
            payloads = self.held.pop(close.batch, [])
            if close.files is not None:
                payloads = [p for f in close.files for p in InputLog.read_part(f)]
            elif self.log is not None:  # durable before it can change any state
                self.log.write_part(close.batch, self.worker.index, payloads)
                self.control.send(("logged", close.batch))
            if close.at > handle.time:
                handle.advance_to(close.at)
            for payload in payloads:
                for batch in _read_ipc(payload):
                    if batch.num_rows:
                        handle.send_batch(arrow_to_records(batch, self.records))
                        self.rows += batch.num_rows
            if close.then > handle.time:
                handle.advance_to(close.then)
            self.fed.append(_Fed(close.batch, close.at, close.then))
            self.epochs += 1

    def report_complete(self) -> None:
        """Report the last batch whose rows' time, and every time before the one the input
        advanced to after it, the dataflow has passed."""
        last = None
        while self.fed and not any(
            p.less_equal(self.fed[0].at) or p.less_than(self.fed[0].then) for p in self.probes
        ):
            last = self.fed.pop(0).batch
        if last is not None:
            self.control.send(("epoch", last))

    def snapshot_if_due(self) -> None:
        """Every batch fed so far is complete and nothing later entered: the operators' state
        is exactly "all input before handle.time applied", a consistent snapshot after
        ``last_batch``."""
        if (
            self.registry is not None
            and self.store is not None
            and not self.fed
            and self.last_batch - self.snapshotted >= self.snapshot_every
        ):
            worker = self.worker
            self.store.write_part(
                self.last_batch, worker.index, worker.peers, self.registry.snapshot()
            )
            self.snapshotted = self.last_batch
            self.control.send(("snapshot", self.last_batch, self.handle.time, self.rows))

    def run(self, inbox: TaskInbox) -> dict[str, Any]:
        """Serve the driver until it says stop; then finish the dataflow."""
        while True:
            items = inbox.take()
            check_lost(items)
            self.receive(items)
            self.feed_closed()
            if self.stopping and not self.closes:
                break
            self.worker.step_or_park(0.5)
            self.report_complete()
            self.snapshot_if_due()
        # Input of batches never closed (a micro-batch interrupted by stopping the query) is
        # dropped: Spark re-delivers that batch when the query restarts.
        dropped = sum(self.received.values())
        self.handle.close()
        self.worker.run()
        if self.fed:
            self.control.send(("epoch", self.fed[-1].batch))
        return {
            "result": portable(self.out),
            "epochs": self.epochs,
            "rows": self.rows,
            "dropped_pushes": dropped,
        }


def _bridge_body(
    build: Callable[[Any, Any], Any],
    records: str,
    secret: bytes,
    bind_host: str,
    advertise: str,
    checkpoint: str | None = None,
    restore: dict | None = None,
    snapshot_every: int = 1,
) -> Callable[[Any, Any, TaskInbox], Any]:
    def body(worker: Any, control: Any, inbox: TaskInbox) -> Any:
        from ._control import FeedListener

        def dataflow(scope: Any) -> Any:
            handle, stream = scope.new_input()
            # write_parquet writes one file per epoch here: a micro-batch must be visible when
            # it is reported complete, and a replayed one overwrites its files (Restarts).
            with per_epoch_sinks(None if restore is None else restore["then"]):
                out = build(scope, stream)
            probes = [s.probe() for s in _as_streams(out, stream)]
            return handle, out, probes

        saved = None
        if checkpoint is None:
            built = worker.dataflow(dataflow)
        else:
            store = SnapshotStore(checkpoint)
            owned = (
                {} if restore is None else store.restore_for(restore, worker.index, worker.peers)
            )
            registry = StateRegistry(owned)
            with registry.building():
                built = worker.dataflow(dataflow)
            if registry.unclaimed():
                raise TimelyError(
                    f"worker {worker.index}: the checkpoint {checkpoint} holds state of "
                    f"operators {registry.unclaimed()} that {describe_function(build)} no "
                    f"longer builds (it builds {registry.operators})"
                )
            saved = (InputLog(checkpoint), store, registry)
        bridge = _BridgeWorker(
            worker,
            control,
            built,
            records,
            saved,
            -1 if restore is None else restore["batch"],
            snapshot_every,
        )
        feed = FeedListener(
            secret,
            worker.index,
            bind_host,
            on_batch=lambda e, payload: inbox.put(("data", e, payload)),
            on_error=lambda why: inbox.put(("feed-error", why)),
        )
        try:
            control.send(("ready", {"feed": (advertise, feed.port)}))
            return bridge.run(inbox)
        finally:
            feed.close()

    return body


def _check_event_time(df: Any, column: str) -> None:
    from pyspark.sql.types import IntegralType

    if column not in df.columns:
        raise ValueError(f"event-time column {column!r} is not among the columns {df.columns}")
    dtype = df.schema[column].dataType
    if not isinstance(dtype, IntegralType):
        raise TypeError(
            f"event-time column {column!r} is {dtype.simpleString()}; it must be an integer "
            "type (e.g. F.unix_millis(ts), or F.col('ts').cast('long') for seconds)"
        )


class StreamingBridge:
    """Long-running workers fed by a Structured Streaming query (module docstring).

    ``build(scope, stream)`` as for :func:`pytimely.spark.run_on_dataframe` (``records`` is
    ``"rows"``, ``"tuples"`` or ``"arrow"``).  ``on_epoch(epoch)`` is called on the driver when
    every worker has finished an epoch.  ``wait=True`` makes ``foreach_batch`` return only once
    its epoch is complete (back-pressure on the query; per-epoch latency is then what Spark
    reports as batch duration).  ``event_time`` / ``delay``: times from an event-time column
    and the watermark (module docstring, **Times**); ``checkpoint``: the state snapshots and
    input log that let a restarted bridge restore its state, one snapshot per
    ``snapshot_every`` micro-batches (**Restarts**).  Other options as for
    :func:`pytimely.spark.run`.
    """

    def __init__(
        self,
        spark: Any,
        build: Callable[[Any, Any], Any],
        workers: int = 2,
        *,
        records: str = "rows",
        key: str | list[str] | None = None,
        on_epoch: Callable[[int], Any] | None = None,
        wait: bool = False,
        ready_timeout: float = 120.0,
        event_time: str | None = None,
        delay: int = 0,
        checkpoint: str | None = None,
        snapshot_every: int = 1,
        **options: Any,
    ) -> None:
        if records not in RECORD_FORMATS:
            raise ValueError(f"records must be one of {RECORD_FORMATS}, not {records!r}")
        if delay < 0:
            raise ValueError("delay must be >= 0")
        if type(snapshot_every) is not int or snapshot_every < 1:
            raise ValueError(f"snapshot_every must be a positive int, got {snapshot_every!r}")
        self.checkpoint = checkpoint
        self._log = InputLog(checkpoint) if checkpoint is not None else None
        self._snapshots = SnapshotStore(checkpoint) if checkpoint is not None else None
        self._recovered = checkpoint is None
        self._logged: dict[int, set[int]] = {}
        #: Batch -> {worker: (time the input advanced to, rows fed)} of the state snapshots
        #: workers wrote after that batch and the driver has not committed yet.
        self._snapshot_parts: dict[int, dict[int, tuple[int, int]]] = {}
        #: The committed state snapshot this bridge's workers started from (its metadata:
        #: ``batch``, ``then``, ``rows``, ``workers``), or ``None``.
        self.restored: dict | None = (
            self._snapshots.latest() if self._snapshots is not None else None
        )
        #: Micro-batches replayed from the input log when the bridge started: only those after
        #: the restored snapshot (see ``checkpoint``).
        self.replayed: list[int] = []
        #: The state snapshots this bridge committed, by batch.
        self.snapshots: list[int] = []
        self.event_time = event_time
        self.delay = int(delay)
        #: The time the next micro-batch's rows are sent at: its batch id, or with
        #: ``event_time`` the watermark (max event time so far - ``delay``, never decreasing).
        self.watermark = 0
        #: Micro-batch id -> the time the input advanced to after it (the watermark).
        self.watermarks: dict[int, int] = {}
        self.spark = spark
        self.workers = workers
        self.records = records
        self.key = [key] if isinstance(key, str) else key
        self.on_epoch = on_epoch
        self.wait = wait
        self.results: list[Any] | None = None
        # The highest epoch every worker has finished: after a restart, the restored one.
        self.completed = self.restored["batch"] if self.restored is not None else -1
        self._last_closed = -1
        self._epoch_lock = threading.Condition()
        self._closed_at: dict[int, float] = {}
        self.latencies: dict[int, float] = {}  # epoch -> seconds from foreach_batch to complete
        options.setdefault("description", "pytimely workers fed by a stream")
        self._launch = Launch(
            spark, workers, extra_slots=1, on_message=self._message, stage_outputs=False, **options
        )
        launch = self._launch
        spec = launch.spec
        bind_host = launch.bind_host
        restore = self.restored

        def task(index: int, _items: Any) -> Iterator[Any]:
            from pyspark import BarrierTaskContext

            if bind_host in ("0.0.0.0", "::", ""):
                ctx = BarrierTaskContext.get()
                advertise = ctx.getTaskInfos()[index].address.rsplit(":", 1)[0].strip("[]")
            else:
                advertise = bind_host
            body = _bridge_body(
                build,
                records,
                spec.secret,
                bind_host,
                advertise,
                checkpoint,
                restore,
                snapshot_every,
            )
            i, result = worker_task(spec, body)
            yield result_row(i, result)

        rdd = launch.sc.parallelize(range(workers), workers).barrier().mapPartitionsWithIndex(task)
        try:
            launch.start(rdd.collect)
            coord = launch.coordinator
            launch.wait(lambda: len(coord.ready) == workers, timeout=ready_timeout)
            if len(coord.ready) < workers:
                if not launch.alive():
                    launch.finish()
                raise TimelyError(
                    f"only {len(coord.ready)} of {workers} streaming workers were ready within "
                    f"{ready_timeout:g} s"
                )
            self.feeds = [tuple(coord.ready[i]["feed"]) for i in range(workers)]
        except BaseException:
            launch.close()
            raise

    # -- driver-side bookkeeping ------------------------------------------------------------

    def _message(self, index: int, header: Any, payload: Any) -> None:
        """A worker's message (:class:`_BridgeWorker`): ``("snapshot", batch, then, rows)``,
        ``("logged", batch)`` or ``("epoch", batch)`` (the coordinator keeps the epochs)."""
        match header:
            case ("snapshot", batch, then, rows):
                with self._epoch_lock:
                    self._snapshot_parts.setdefault(batch, {})[index] = (then, rows)
                return
            case ("logged", batch):
                with self._epoch_lock:
                    self._logged.setdefault(batch, set()).add(index)
                    self._epoch_lock.notify_all()
                return
            case ("epoch", *_):
                pass
            case _:
                return
        coord = self._launch.coordinator
        done = min(coord.epochs.get(i, -1) for i in range(self.workers))
        fire = []
        with self._epoch_lock:
            while self.completed < done:
                self.completed += 1
                start = self._closed_at.pop(self.completed, None)
                if start is not None:
                    self.latencies[self.completed] = _time.monotonic() - start
                    fire.append(self.completed)
            self._epoch_lock.notify_all()
        if self.on_epoch is not None:
            for epoch in fire:
                try:
                    self.on_epoch(epoch)
                except Exception:  # noqa: BLE001, S110 - a callback must not kill the reader
                    pass

    def _check_running(self) -> None:
        launch = self._launch
        if launch.coordinator.failure is not None or not launch.alive():
            launch.wait(timeout=launch.grace + 5.0)
            if not launch.alive():
                launch.finish()  # raises the failure
            raise TimelyError("the streaming workers failed")

    # -- the foreachBatch function -----------------------------------------------------------

    def foreach_batch(self, batch_df: Any, batch_id: int) -> None:
        """Push micro-batch ``batch_id`` into the workers as epoch ``batch_id``, then close it.

        A ``query.stop()`` while the batch runs interrupts the Spark call the batch waits in;
        that surfaces here as a Py4J error carrying the whole JVM stack (about 9,000
        characters).  Spark decides whether a failed ``foreachBatch`` was its own stop by
        running a regular expression over the Python error's text, and that expression
        (``(.|\\n)*`` in ``StreamExecution.PROXY_ERROR``) overflows the JVM's stack on a text
        that long: a clean stop printed a ``StackOverflowError`` and a thousand ``Pattern``
        frames.  So an interruption is re-raised as :class:`BatchInterrupted`, whose short
        message still says what Spark looks for.  The batch was not closed; Spark delivers it
        again after a restart, as any batch it did not commit.
        """
        try:
            self._push_and_close(batch_df, batch_id)
        except Exception as exc:
            interrupted = _interruption(exc)
            if interrupted is None:
                raise
            raise BatchInterrupted(
                f"micro-batch {batch_id} was interrupted: {interrupted}"
            ) from None

    def _push_and_close(self, batch_df: Any, batch_id: int) -> None:
        import pyarrow as pa

        from ._control import push_batches

        self._check_running()
        epoch = int(batch_id)
        if not self._recovered:
            self._recover(epoch)
        if self._snapshots is not None:
            self._commit_snapshot(epoch)
        if epoch <= self._last_closed:
            return  # a re-run of a batch we already delivered
        started = _time.monotonic()
        feeds = self.feeds
        secret = self._launch.secret
        n = self.workers
        df = batch_df.repartition(n, *self.key) if self.key else batch_df
        event_time = self.event_time
        if event_time is not None:
            _check_event_time(batch_df, event_time)
        schema = pa.schema(
            [
                ("worker", pa.int64()),
                ("pushes", pa.int64()),
                ("rows", pa.int64()),
                ("max_time", pa.int64()),
            ]
        )

        def push(batches: Iterator[Any]) -> Iterator[Any]:
            import pyarrow.compute as pc
            from pyspark import TaskContext

            w = TaskContext.get().partitionId() % n
            counted: dict[str, Any] = {"rows": 0, "max": None}

            def payloads() -> Iterator[Any]:
                for b in batches:
                    if b.num_rows:
                        counted["rows"] += b.num_rows
                        if event_time is not None:
                            top = pc.max(b.column(event_time)).as_py()
                            if top is not None and (counted["max"] is None or top > counted["max"]):
                                counted["max"] = top
                        yield _ipc_bytes(b)

            it = payloads()
            first = next(it, None)
            pushes = 0
            if first is not None:

                def chain() -> Iterator[Any]:
                    yield first
                    yield from it

                pushes = push_batches(feeds[w], secret, w, epoch, chain())
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([w], pa.int64()),
                    pa.array([pushes], pa.int64()),
                    pa.array([counted["rows"]], pa.int64()),
                    pa.array([counted["max"]], pa.int64()),
                ],
                schema=schema,
            )

        stats = df.mapInArrow(push, "worker long, pushes long, rows long, max_time long").collect()
        counts = [0] * n
        for row in stats:
            counts[row["worker"]] += row["pushes"]
        at = self.watermark if event_time is not None else epoch
        then = at + 1
        if event_time is not None:
            tops = [row["max_time"] for row in stats if row["max_time"] is not None]
            then = max(at, max(tops) - self.delay) if tops else at
        with self._epoch_lock:
            self._closed_at[epoch] = started
        coord = self._launch.coordinator
        for w in range(n):
            if not coord.send(w, ("close", epoch, counts[w], at, then)):
                self._check_running()
                raise TimelyError(f"worker {w} is not connected; cannot close epoch {epoch}")
        if self._log is not None:
            self._wait_logged(epoch)
            self._log.commit(epoch, at, then, n)
        self._last_closed = epoch
        self.watermark = then
        self.watermarks[epoch] = then
        if self.wait:
            self.wait_for(epoch)

    # -- the input log (``checkpoint``) -----------------------------------------------------------

    def _recover(self, first: int) -> None:
        """Before Spark's first batch ``first`` of this run: the workers started from the last
        committed state snapshot (after batch ``s``, :attr:`restored`); replay every logged
        batch after ``s`` and ``< first`` (Spark committed them; their state must be rebuilt)
        and discard the log from ``first`` on (Spark delivers those batches again)."""
        assert self._log is not None and self._snapshots is not None
        self._recovered = True
        self._snapshots.discard_uncommitted()
        if self.restored is not None:
            s = self.restored["batch"]
            if s >= first:  # a snapshot is committed only once Spark committed its batch
                raise TimelyError(
                    f"the checkpoint {self.checkpoint} holds state after micro-batch {s}, but "
                    f"Spark restarts at batch {first}: the checkpoint is not this query's"
                )
            self._last_closed = s
            self.watermark = self.restored["then"]
            self._log.truncate_through(s)
        self._log.discard_from(first)
        coord = self._launch.coordinator
        for batch, meta in self._log.committed():
            for w in range(self.workers):
                files = self._log.parts(batch, meta, w, self.workers)
                if not coord.send(w, ("replay", batch, files, meta["at"], meta["then"])):
                    self._check_running()
                    raise TimelyError(f"worker {w} is not connected; cannot replay batch {batch}")
            self._last_closed = batch
            self.watermark = meta["then"]
            self.watermarks[batch] = meta["then"]
            self.replayed.append(batch)

    def _commit_snapshot(self, running: int) -> None:
        """Spark runs batch ``running``, so it has committed every batch before it: commit the
        latest state snapshot every worker wrote after such a batch, then forget the older
        snapshots and the input log up to it (a restart replays only what came after)."""
        assert self._log is not None and self._snapshots is not None
        with self._epoch_lock:
            ready = [
                b
                for b, parts in self._snapshot_parts.items()
                if b < running and len(parts) == self.workers
            ]
            if not ready:
                return
            batch = max(ready)
            parts = self._snapshot_parts[batch]
            for b in [b for b in self._snapshot_parts if b <= batch]:
                del self._snapshot_parts[b]
        then = max(t for t, _rows in parts.values())
        base = self.restored["rows"] if self.restored is not None else 0
        rows = base + sum(r for _t, r in parts.values())
        self._snapshots.commit(batch, then, rows, self.workers)
        self._log.truncate_through(batch)
        self.snapshots.append(batch)

    def _wait_logged(self, epoch: int, timeout: float = 120.0) -> None:
        """Block until every worker has written its part of ``epoch`` to the input log."""
        deadline = _time.monotonic() + timeout
        while True:
            with self._epoch_lock:
                if len(self._logged.get(epoch, ())) == self.workers:
                    del self._logged[epoch]
                    return
                self._epoch_lock.wait(0.25)
            self._check_running()
            if _time.monotonic() > deadline:
                raise TimeoutError(f"micro-batch {epoch} was not logged within {timeout:g} s")

    # -- observing and stopping --------------------------------------------------------------

    def wait_for(self, epoch: int, timeout: float | None = 120.0) -> None:
        """Block until every worker has finished ``epoch`` (TimeoutError after ``timeout``)."""
        deadline = None if timeout is None else _time.monotonic() + timeout
        while True:
            with self._epoch_lock:
                if self.completed >= epoch:
                    return
                self._epoch_lock.wait(0.25)
            if self._launch.coordinator.failure is not None or not self._launch.alive():
                self._check_running()
            if deadline is not None and _time.monotonic() > deadline:
                raise TimeoutError(f"epoch {epoch} did not complete within {timeout:g} s")

    def stop(self, timeout: float | None = 120.0) -> list[Any]:
        """Close the input (after every closed epoch is in), let the dataflows finish, and
        return ``build``'s return values per worker (also kept in :attr:`results`)."""
        launch = self._launch
        try:
            launch.coordinator.broadcast(("stop",))
            if not launch.wait(timeout=timeout):
                launch.cancel(f"the workers did not stop within {timeout} s")
                launch.wait(timeout=30.0)
            outcome = launch.finish()
        finally:
            launch.close()
        self.results = [r["result"] for r in outcome]
        self.stats = [{k: v for k, v in r.items() if k != "result"} for r in outcome]
        return self.results

    def worker_processes(self) -> dict[int, tuple[str, int]]:
        """``{worker: (host, pid)}`` of the running workers, as they reported when starting."""
        hellos = self._launch.coordinator.hellos
        return {i: (h["host"], h["pid"]) for i, h in sorted(hellos.items())}

    def cancel(self) -> None:
        """Stop the workers now (cancels their Spark job)."""
        self._launch.close()

    def __enter__(self) -> StreamingBridge:  # noqa: PYI034
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        if kind is None:
            self.stop()
        else:
            self.cancel()
