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

**Spark Connect.**  From a Connect session the ``foreachBatch`` function runs in a Python
process of the server, not in the client, and nothing there can reach the client.  So the
workers are started as :func:`pytimely.spark.remote.run` starts them (a barrier ``mapInArrow``
stage), each publishes its feed address in a rendezvous folder, and
:attr:`~StreamingBridge.foreach_batch` is a picklable :class:`_Feeder` that opens control
sessions with the workers from the server (:class:`~pytimely.spark._control.FeedLink`) and
does there what the classic driver does.  The workers own the bridge's state (last batch
closed, watermark, completions, uncommitted snapshots) and tell it to every feeder that says
hello, so a restarted query's new server process goes on where the last one stopped; the
client reads it, and stops the workers, through one-task jobs that open a session from an
executor (:class:`_RemoteWorkers`).

Usage::

    with StreamingBridge(spark, build, workers=2) as bridge:
        q = stream_df.writeStream.foreachBatch(bridge.foreach_batch).start()
        ...
        q.stop()
    results = bridge.results          # build's return values, per worker
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import socket
import threading
import time as _time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from ..dataflow.snapshot import StateRegistry
from ..errors import TimelyError
from ..naming import describe_function
from .dataframe import RECORD_FORMATS, arrow_to_records
from .executor import (
    TaskInbox,
    advertised_host,
    check_lost,
    drain_input,
    portable,
    result_row,
    worker_task,
)
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
    """One worker's side of a :class:`StreamingBridge`: takes the feeder's messages from the
    task's inbox, feeds closed micro-batches into the dataflow, reports them complete and
    snapshots the state when due.

    Messages in (tuples from the feed, from the control connection of a classic launch, and
    from feeders' control sessions as ``("session", session, message)``; matched by
    :meth:`receive`; a known kind of the wrong shape is an error, other kinds are ignored):
    ``("data", batch, payload)`` an Arrow IPC payload of a micro-batch;
    ``("close", batch, pushes, at, then)`` the feeder delivered it completely;
    ``("replay", batch, files, at, then)`` a committed batch to read back from the input log;
    ``("stop",)``; ``("feed-error", why)``; ``("recovered",)`` (the checkpoint's input log was
    replayed); ``("committed", batch)`` (the snapshot after ``batch`` is committed);
    ``("latency", batch, seconds)`` (a Connect feeder saw ``batch`` complete that long after
    its ``foreachBatch`` call began: kept for the client, which cannot ask the feeder); and from
    a session only, ``("hello",)``, answered on that session with ``("hello", state)``
    (:meth:`state`).  Reports out, to the control connection and every open session:
    ``("logged", batch)`` its rows are in the input log; ``("epoch", batch)`` it and every
    batch before it are complete; ``("snapshot", batch, then, rows)`` the state after it is
    in the store.

    Invariants: ``closes`` holds closed batches in the order the feeder closed them, and a
    batch enters the dataflow only once every push it counted has arrived; ``fed`` holds the
    batches that entered, in order, until the probes show them complete; ``last_batch`` is the
    last batch that entered; ``last_close`` the last batch closed and the time the input
    advances to after it; ``snapshotted`` the last batch whose state is in the store.
    """

    def __init__(
        self,
        worker: Any,
        control: Any,
        dataflow: tuple[Any, Any, list[Any]],
        records: str,
        checkpoint: tuple[InputLog, SnapshotStore, StateRegistry] | None,
        restored: dict | None,
        snapshot_every: int,
    ) -> None:
        self.worker = worker
        self.control = control
        self.sessions: set[Any] = set()
        self.handle, self.out, self.probes = dataflow
        self.records = records
        self.log, self.store, self.registry = checkpoint if checkpoint else (None, None, None)
        self.restored = restored
        start = (-1, 0) if restored is None else (restored["batch"], restored["then"])
        self.snapshotted = start[0]
        self.completed = start[0]
        self.last_close = start
        self.snapshot_every = snapshot_every
        self.held: dict[int, list[Any]] = {}  # batch -> payloads received, not yet closed
        self.received: dict[int, int] = {}  # batch -> pushes received
        self.closes: list[_Close] = []
        self.fed: list[_Fed] = []
        self.last_batch = start[0]
        self.stopping = False
        self.recovered = checkpoint is None  # until a feeder replayed the input log
        self.epochs = 0
        self.rows = 0
        #: Batch -> (time the input advanced to, rows fed) of snapshots not yet committed.
        self.uncommitted: dict[int, tuple[int, int]] = {}
        self.committed: list[int] = []
        self.replayed: list[int] = []
        self.watermarks: dict[int, int] = {}
        self.latencies: dict[int, float] = {}

    def _fail(self, what: str) -> TimelyError:
        return TimelyError(f"worker {self.worker.index}: {what}")

    def report(self, header: Any) -> None:
        """Send ``header`` to the control connection (if any) and every open session."""
        if self.control is not None:
            self.control.send(header)
        for session in list(self.sessions):
            if not session.send(header):
                self.sessions.discard(session)

    def state(self) -> dict[str, Any]:
        """What a feeder or the client learns of this worker when it opens a session."""
        return {
            "worker": self.worker.index,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "last_close": self.last_close,
            "completed": self.completed,
            "recovered": self.recovered,
            "restored": self.restored,
            "uncommitted": dict(self.uncommitted),
            "committed": list(self.committed),
            "replayed": list(self.replayed),
            "watermarks": dict(self.watermarks),
            "latencies": dict(self.latencies),
            "rows": self.rows,
        }

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
                    self.last_close = (batch, then)
                case ("replay", batch, files, at, then):  # a committed batch from the input log
                    self.closes.append(_Close(batch, 0, at, then, files))
                    self.last_close = (batch, then)
                case ("stop",):
                    self.stopping = True
                case ("feed-error", why):
                    raise self._fail(why)
                case ("recovered",):
                    self.recovered = True
                case ("committed", batch):
                    self.committed.append(batch)
                    for b in [b for b in self.uncommitted if b <= batch]:
                        del self.uncommitted[b]
                case ("latency", batch, seconds):
                    self.latencies[batch] = seconds
                case ("session", session, message):
                    self.serve_session(session, message)
                case (
                    "data"
                    | "close"
                    | "replay"
                    | "stop"
                    | "feed-error"
                    | "committed"
                    | "latency"
                    | "session",
                    *_,
                ):
                    raise self._fail(f"malformed message from the feeder: {item!r}")

    def serve_session(self, session: Any, message: Any) -> None:
        """A message from a feeder's control session (``None``: the session ended)."""
        match message:
            case None:
                self.sessions.discard(session)
            case ("hello",):
                self.sessions.add(session)
                session.send(("hello", self.state()))
            case _:
                self.receive([message])

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
                    f"micro-batch {close.batch}: more pushes arrived than the feeder counted "
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
                self.replayed.append(close.batch)
            elif self.log is not None:  # durable before it can change any state
                self.log.write_part(close.batch, self.worker.index, payloads)
                self.report(("logged", close.batch))
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
            self.watermarks[close.batch] = close.then
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
            self.completed = last
            self.report(("epoch", last))

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
            self.uncommitted[self.last_batch] = (self.handle.time, self.rows)
            self.report(("snapshot", self.last_batch, self.handle.time, self.rows))

    def run(self, inbox: TaskInbox) -> dict[str, Any]:
        """Serve the feeders until one says stop; then finish the dataflow."""
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
            self.completed = self.fed[-1].batch
            self.report(("epoch", self.completed))
        return {
            "result": portable(self.out),
            "epochs": self.epochs,
            "rows": self.rows,
            "dropped_pushes": dropped,
        }


def _bridge_body(
    dataflow: tuple[Callable[[Any, Any], Any], str, str | None, int],
    secret: bytes,
    bind_host: str,
    announce: Callable[[Any, int], None],
    restore: dict | None = None,
) -> Callable[[Any, Any, TaskInbox], Any]:
    """The body of a bridge worker's task: build the dataflow (``dataflow`` is ``(build,
    records, checkpoint, snapshot_every)``; its state restored from ``restore``, a committed
    snapshot's metadata), listen for feeds and sessions, call ``announce(control, port)`` with
    the feed listener's port, and serve."""
    build, records, checkpoint, snapshot_every = dataflow

    def body(worker: Any, control: Any, inbox: TaskInbox) -> Any:
        from ._control import FeedListener

        def around_input(scope: Any) -> Any:
            handle, stream = scope.new_input()
            # write_parquet writes one file per epoch here: a micro-batch must be visible when
            # it is reported complete, and a replayed one overwrites its files (Restarts).
            with per_epoch_sinks(None if restore is None else restore["then"]):
                out = build(scope, stream)
            probes = [s.probe() for s in _as_streams(out, stream)]
            return handle, out, probes

        saved = None
        if checkpoint is None:
            built = worker.dataflow(around_input)
        else:
            store = SnapshotStore(checkpoint)
            owned = (
                {} if restore is None else store.restore_for(restore, worker.index, worker.peers)
            )
            registry = StateRegistry(owned)
            with registry.building():
                built = worker.dataflow(around_input)
            if registry.unclaimed():
                raise TimelyError(
                    f"worker {worker.index}: the checkpoint {checkpoint} holds state of "
                    f"operators {registry.unclaimed()} that {describe_function(build)} no "
                    f"longer builds (it builds {registry.operators})"
                )
            saved = (InputLog(checkpoint), store, registry)
        bridge = _BridgeWorker(worker, control, built, records, saved, restore, snapshot_every)
        feed = FeedListener(
            secret,
            worker.index,
            bind_host,
            on_batch=lambda e, payload: inbox.put(("data", e, payload)),
            on_error=lambda why: inbox.put(("feed-error", why)),
            on_session=lambda session, message: inbox.put(("session", session, message)),
        )
        try:
            announce(control, feed.port)
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


def _announce(folder: str, index: int, info: dict[str, Any]) -> None:
    """Publish worker ``index``'s feed address in the rendezvous ``folder``, whole or not at
    all (written aside, then renamed)."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"worker-{index}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(info, f)
    os.replace(path + ".tmp", path)


def _announced(folder: str, workers: int) -> dict[int, dict[str, Any]]:
    """The workers of a bridge that have published their feed address in ``folder``."""
    found = {}
    for i in range(workers):
        try:
            with open(os.path.join(folder, f"worker-{i}.json")) as f:
                found[i] = json.load(f)
        except (FileNotFoundError, json.JSONDecodeError):
            continue
    return found


def _await_announced(folder: str, workers: int, timeout: float) -> list[dict[str, Any]]:
    """Every worker's published address, waiting up to ``timeout`` seconds for them."""
    deadline = _time.monotonic() + timeout
    while True:
        found = _announced(folder, workers)
        if len(found) == workers:
            return [found[i] for i in range(workers)]
        if _time.monotonic() > deadline:
            missing = [i for i in range(workers) if i not in found]
            raise TimelyError(
                f"streaming workers {missing} did not publish their address in {folder} within "
                f"{timeout:g} s: the bridge's rendezvous= folder must be one that the Spark "
                "server's Python and its executors both see (a shared file system, or the "
                "checkpoint location)"
            )
        _time.sleep(0.1)


class _LaunchChannel:
    """A classic launch: the driver's coordinator carries the feeder's messages, and the
    launch's job says whether the workers still run."""

    def __init__(self, launch: Launch, feeds: list[tuple[str, int]]) -> None:
        self.launch = launch
        self.feeds = feeds

    def send(self, worker: int, header: Any) -> bool:
        """Send ``header`` to ``worker``; whether it is connected."""
        return self.launch.coordinator.send(worker, header)

    def check(self) -> None:
        """Raise the workers' failure, if they failed."""
        launch = self.launch
        if launch.coordinator.failure is not None or not launch.alive():
            launch.wait(timeout=launch.grace + 5.0)
            if not launch.alive():
                launch.finish()  # raises the failure
            raise TimelyError("the streaming workers failed")


class _SessionChannel:
    """A control session with every worker (:class:`~pytimely.spark._control.FeedLink`),
    opened by a feeder that found their addresses in the rendezvous folder: where no driver
    coordinator exists (a bridge started from Spark Connect)."""

    def __init__(
        self,
        folder: str,
        workers: int,
        secret: bytes,
        timeout: float,
        on_message: Callable[[int, Any], None],
    ) -> None:
        from ._control import FeedLink

        announced = _await_announced(folder, workers, timeout)
        self.feeds = [(a["feed"][0], int(a["feed"][1])) for a in announced]
        self.broken: dict[int, str] = {}
        self.links = []
        try:
            for i, address in enumerate(self.feeds):
                self.links.append(
                    FeedLink(
                        address,
                        secret,
                        i,
                        on_message=functools.partial(on_message, i),
                        on_closed=functools.partial(self.broken.__setitem__, i),
                        timeout=min(timeout, 30.0),
                    )
                )
        except BaseException:
            self.close()
            raise

    def send(self, worker: int, header: Any) -> bool:
        """Send ``header`` to ``worker``; whether its session is open."""
        return worker not in self.broken and self.links[worker].send(header)

    def check(self) -> None:
        """Raise if a worker's session ended: its task ended or failed."""
        if self.broken:
            i, why = min(self.broken.items())
            raise TimelyError(
                f"streaming worker {i} at {self.feeds[i][0]}:{self.feeds[i][1]} is gone ({why}); "
                "the bridge's Spark job ended or failed: see its stage's task errors"
            )

    def close(self) -> None:
        """End every session."""
        for link in self.links:
            link.close()


#: What a :class:`_Feeder` carries when it is pickled (for a Connect server to run it).
_FEEDER_CONFIG = (
    "workers",
    "secret",
    "key",
    "event_time",
    "delay",
    "checkpoint",
    "wait",
    "folder",
    "ready_timeout",
)


class _Feeder:
    """The ``foreachBatch`` function of a bridge, and the state of the feeding side: which
    batches were closed, the watermark, completions, the input log and the snapshots'
    commits (module docstring).

    It talks to the workers through a channel: the classic driver's coordinator
    (:class:`_LaunchChannel`, attached by :class:`StreamingBridge`), or, when it runs in a
    Spark Connect server's Python process, control sessions it opens itself from the
    rendezvous ``folder`` (:class:`_SessionChannel`).  There it learns where the last feeder
    left off from the workers' answers to ``("hello",)``: the workers own the bridge's state,
    so a restarted query (a new server process) goes on where the last one stopped.  Pickled,
    it carries only its configuration (``_FEEDER_CONFIG``).
    """

    def __init__(
        self,
        workers: int,
        secret: bytes,
        *,
        key: list[str] | None,
        event_time: str | None,
        delay: int,
        checkpoint: str | None,
        wait: bool,
        folder: str | None = None,
        ready_timeout: float = 120.0,
        on_epoch: Callable[[int], Any] | None = None,
    ) -> None:
        self.workers = workers
        self.secret = secret
        self.key = key
        self.event_time = event_time
        self.delay = delay
        self.checkpoint = checkpoint
        self.wait = wait
        self.folder = folder
        self.ready_timeout = ready_timeout
        self.on_epoch = on_epoch
        self._fresh()

    def _fresh(self) -> None:
        self.channel: Any = None
        self.log = InputLog(self.checkpoint) if self.checkpoint is not None else None
        self.store = SnapshotStore(self.checkpoint) if self.checkpoint is not None else None
        self.lock = threading.Condition()
        self.recovered = self.checkpoint is None
        #: The committed snapshot the workers started from, or None.
        self.restored: dict | None = None
        self.last_closed = -1
        #: The time the next micro-batch's rows are sent at (module docstring, **Times**).
        self.watermark = 0
        self.watermarks: dict[int, int] = {}
        self.completed = -1
        self.epochs: dict[int, int] = {}
        self.logged: dict[int, set[int]] = {}
        #: Batch -> {worker: (time the input advanced to, rows fed)} of uncommitted snapshots.
        self.snapshot_parts: dict[int, dict[int, tuple[int, int]]] = {}
        self.replayed: list[int] = []
        self.snapshots: list[int] = []
        self.hellos: dict[int, dict[str, Any]] = {}
        self.closed_at: dict[int, float] = {}
        self.latencies: dict[int, float] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _FEEDER_CONFIG}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.on_epoch = None
        self._fresh()

    def attach(self, channel: Any, restored: dict | None) -> None:
        """Feed through ``channel`` workers that started from the snapshot ``restored``."""
        self.channel = channel
        self.restored = restored
        if restored is not None:
            self.completed = restored["batch"]
            self.epochs = dict.fromkeys(range(self.workers), restored["batch"])

    def _open_sessions(self) -> None:
        """In a Connect server's process: open sessions with the workers and take up the
        state they hold (class docstring)."""
        assert self.folder is not None
        channel = _SessionChannel(
            self.folder, self.workers, self.secret, self.ready_timeout, self.message
        )
        try:
            for w in range(self.workers):
                channel.send(w, ("hello",))
            deadline = _time.monotonic() + 30.0
            with self.lock:
                while len(self.hellos) < self.workers:
                    channel.check()
                    if _time.monotonic() > deadline:
                        raise TimelyError("the streaming workers did not answer within 30 s")
                    self.lock.wait(0.1)
        except BaseException:
            channel.close()
            raise
        states = [self.hellos[w] for w in range(self.workers)]
        restored = states[0]["restored"]
        if any(s["restored"] != restored for s in states):
            raise TimelyError(
                f"the streaming workers started from different snapshots of {self.checkpoint}: "
                f"{[s['restored'] and s['restored']['batch'] for s in states]}"
            )
        self.attach(channel, restored)
        self.recovered = all(s["recovered"] for s in states)
        if self.recovered:
            self.last_closed, self.watermark = states[0]["last_close"]
        self.watermarks = dict(states[0]["watermarks"])
        for w, state in enumerate(states):
            self.epochs[w] = max(self.epochs.get(w, -1), state["completed"])
            for batch, part in state["uncommitted"].items():
                self.snapshot_parts.setdefault(batch, {})[w] = part
        self.completed = min(self.epochs.get(w, -1) for w in range(self.workers))

    # -- the workers' reports ------------------------------------------------------------------

    def message(self, index: int, header: Any) -> None:
        """A worker's report (:class:`_BridgeWorker`): ``("hello", state)``, ``("snapshot",
        batch, then, rows)``, ``("logged", batch)`` or ``("epoch", batch)``."""
        fire = []
        with self.lock:
            match header:
                case ("hello", state):
                    self.hellos[index] = state
                case ("snapshot", batch, then, rows):
                    self.snapshot_parts.setdefault(batch, {})[index] = (then, rows)
                case ("logged", batch):
                    self.logged.setdefault(batch, set()).add(index)
                case ("epoch", batch):
                    self.epochs[index] = max(self.epochs.get(index, -1), batch)
                    done = min(self.epochs.get(i, -1) for i in range(self.workers))
                    while self.completed < done:
                        self.completed += 1
                        start = self.closed_at.pop(self.completed, None)
                        if start is not None:
                            self.latencies[self.completed] = _time.monotonic() - start
                            fire.append(self.completed)
                case _:
                    return
            self.lock.notify_all()
        if fire and isinstance(self.channel, _SessionChannel):
            # On Connect nobody can ask this process: the workers keep the figures.
            for epoch in fire:
                for w in range(self.workers):
                    self.channel.send(w, ("latency", epoch, self.latencies[epoch]))
        if self.on_epoch is not None:
            for epoch in fire:
                try:
                    self.on_epoch(epoch)
                except Exception:  # noqa: BLE001, S110 - a callback must not kill the reader
                    pass

    # -- the foreachBatch function -----------------------------------------------------------

    def __call__(self, batch_df: Any, batch_id: int) -> None:
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

        if self.channel is None:
            self._open_sessions()
        channel = self.channel
        channel.check()
        epoch = int(batch_id)
        if not self.recovered:
            self._recover(epoch)
        if self.store is not None:
            self._commit_snapshot(epoch)
        if epoch <= self.last_closed:
            return  # a re-run of a batch we already delivered
        started = _time.monotonic()
        feeds = channel.feeds
        secret = self.secret
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
        with self.lock:
            self.closed_at[epoch] = started
        for w in range(n):
            self._send(w, ("close", epoch, counts[w], at, then), f"close epoch {epoch}")
        if self.log is not None:
            self._wait_logged(epoch)
            self.log.commit(epoch, at, then, n)
        self.last_closed = epoch
        self.watermark = then
        self.watermarks[epoch] = then
        if self.wait:
            self.wait_for(epoch)

    # -- the input log (``checkpoint``) -----------------------------------------------------------

    def _send(self, worker: int, header: Any, what: str) -> None:
        """Send ``header`` to ``worker``; its failure (or, failing that, a worker that is not
        connected) raised, saying we could not ``what``."""
        if not self.channel.send(worker, header):
            self.channel.check()
            raise TimelyError(f"worker {worker} is not connected; cannot {what}")

    def _send_all(self, header: Any) -> None:
        for w in range(self.workers):
            self._send(w, header, f"send {header[0]!r}")

    def _recover(self, first: int) -> None:
        """Before Spark's first batch ``first`` of this run: the workers started from the last
        committed state snapshot (after batch ``s``, :attr:`restored`); replay every logged
        batch after ``s`` and ``< first`` (Spark committed them; their state must be rebuilt)
        and discard the log from ``first`` on (Spark delivers those batches again)."""
        assert self.log is not None and self.store is not None
        self.store.discard_uncommitted()
        if self.restored is not None:
            s = self.restored["batch"]
            if s >= first:  # a snapshot is committed only once Spark committed its batch
                raise TimelyError(
                    f"the checkpoint {self.checkpoint} holds state after micro-batch {s}, but "
                    f"Spark restarts at batch {first}: the checkpoint is not this query's"
                )
            self.last_closed = s
            self.watermark = self.restored["then"]
            self.log.truncate_through(s)
        self.log.discard_from(first)
        for batch, meta in self.log.committed():
            for w in range(self.workers):
                files = self.log.parts(batch, meta, w, self.workers)
                replay = ("replay", batch, files, meta["at"], meta["then"])
                self._send(w, replay, f"replay batch {batch}")
            self.last_closed = batch
            self.watermark = meta["then"]
            self.watermarks[batch] = meta["then"]
            self.replayed.append(batch)
        self._send_all(("recovered",))
        self.recovered = True

    def _commit_snapshot(self, running: int) -> None:
        """Spark runs batch ``running``, so it has committed every batch before it: commit the
        latest state snapshot every worker wrote after such a batch, then forget the older
        snapshots and the input log up to it (a restart replays only what came after)."""
        assert self.log is not None and self.store is not None
        with self.lock:
            ready = [
                b
                for b, parts in self.snapshot_parts.items()
                if b < running and len(parts) == self.workers
            ]
            if not ready:
                return
            batch = max(ready)
            parts = self.snapshot_parts[batch]
            for b in [b for b in self.snapshot_parts if b <= batch]:
                del self.snapshot_parts[b]
        then = max(t for t, _rows in parts.values())
        base = self.restored["rows"] if self.restored is not None else 0
        rows = base + sum(r for _t, r in parts.values())
        self.store.commit(batch, then, rows, self.workers)
        self.log.truncate_through(batch)
        self.snapshots.append(batch)
        self._send_all(("committed", batch))

    def _wait_logged(self, epoch: int, timeout: float = 120.0) -> None:
        """Block until every worker has written its part of ``epoch`` to the input log."""
        deadline = _time.monotonic() + timeout
        while True:
            with self.lock:
                if len(self.logged.get(epoch, ())) == self.workers:
                    del self.logged[epoch]
                    return
                self.lock.wait(0.25)
            self.channel.check()
            if _time.monotonic() > deadline:
                raise TimeoutError(f"micro-batch {epoch} was not logged within {timeout:g} s")

    def wait_for(self, epoch: int, timeout: float | None = 120.0) -> None:
        """Block until every worker has finished ``epoch`` (TimeoutError after ``timeout``)."""
        deadline = None if timeout is None else _time.monotonic() + timeout
        while True:
            with self.lock:
                if self.completed >= epoch:
                    return
                self.lock.wait(0.25)
            self.channel.check()
            if deadline is not None and _time.monotonic() > deadline:
                raise TimeoutError(f"epoch {epoch} did not complete within {timeout:g} s")


def _ask_workers(folder: str, workers: int, secret: bytes, say: Any) -> dict[int, Any]:
    """On an executor: open a session with every worker that published its address in
    ``folder``; with ``say=("hello",)`` return their states, else send ``say`` and return
    ``{}``."""
    from ._control import FeedLink

    answers: dict[int, Any] = {}
    arrived = threading.Condition()

    def answer(i: int, header: Any) -> None:
        if header[0] == "hello":
            with arrived:
                answers[i] = header[1]
                arrived.notify_all()

    links = []
    try:
        for i, info in _announced(folder, workers).items():
            feed = (info["feed"][0], int(info["feed"][1]))
            try:
                link = FeedLink(feed, secret, i, functools.partial(answer, i), lambda why: None)
            except (OSError, TimelyError):
                continue  # a worker that stopped or died: not there
            links.append(link)
            link.send(say)
        if say != ("hello",):
            return {}
        deadline = _time.monotonic() + 10.0
        with arrived:
            while len(answers) < len(links) and _time.monotonic() < deadline:
                arrived.wait(0.1)
            return dict(answers)
    finally:
        for link in links:
            link.close()


class _RemoteWorkers:
    """The client's side of a bridge started from Spark Connect: the workers' stage, and small
    one-task jobs that open sessions with the workers from an executor (the client cannot
    reach them) to read their state or stop them."""

    def __init__(self, spark: Any, stage: Any, folder: str, workers: int, secret: bytes) -> None:
        self.spark = spark
        self.stage = stage
        self.folder = folder
        self.workers = workers
        self.secret = secret
        self._states: dict[int, Any] = {}
        self._read_at = -1.0

    def _job(self, say: Any) -> dict[int, Any]:
        import pickle

        folder, workers, secret = self.folder, self.workers, self.secret

        def task(batches: Iterator[Any]) -> Iterator[Any]:
            import pyarrow as pa

            drain_input(batches)  # so that Spark reuses this Python worker
            found = _ask_workers(folder, workers, secret, say)
            yield pa.RecordBatch.from_pylist(
                [{"states": pickle.dumps(found)}], schema=pa.schema([("states", pa.binary())])
            )

        rows = self.spark.range(1, numPartitions=1).mapInArrow(task, "states binary").collect()
        return pickle.loads(rows[0]["states"])

    def states(self, fresh: float = 0.25) -> dict[int, Any]:
        """The workers' states (:meth:`_BridgeWorker.state`), at most ``fresh`` seconds old
        while the workers run; a worker that no longer answers (it stopped or died) keeps the
        state it last reported."""
        if self.stage.running() and _time.monotonic() - self._read_at > fresh:
            self._states.update(self._job(("hello",)))
            self._read_at = _time.monotonic()
        return self._states

    def stop(self) -> None:
        """Tell every worker to stop once the batches closed so far are in."""
        self._job(("stop",))


def _default_rendezvous(checkpoint: str | None) -> str:
    import tempfile

    if checkpoint is not None:
        return os.path.join(checkpoint, "pytimely", "workers")
    return os.path.join(tempfile.gettempdir(), "pytimely-bridges")


class StreamingBridge:
    """Long-running workers fed by a Structured Streaming query (module docstring).

    ``build(scope, stream)`` as for :func:`pytimely.spark.run_on_dataframe` (``records`` is
    ``"rows"``, ``"tuples"`` or ``"arrow"``).  ``on_epoch(epoch)`` is called on the driver when
    every worker has finished an epoch (classic sessions only).  ``wait=True`` makes
    ``foreach_batch`` return only once its epoch is complete (back-pressure on the query;
    per-epoch latency is then what Spark reports as batch duration).  ``event_time`` /
    ``delay``: times from an event-time column and the watermark (module docstring,
    **Times**); ``checkpoint``: the state snapshots and input log that let a restarted bridge
    restore its state, one snapshot per ``snapshot_every`` micro-batches (**Restarts**).
    ``rendezvous``: on Spark Connect, the folder where the workers publish their addresses
    for the ``foreachBatch`` function that runs on the server (**Spark Connect**).  Other
    options as for :func:`pytimely.spark.run`.
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
        rendezvous: str | None = None,
        **options: Any,
    ) -> None:
        from .session import is_connect

        if records not in RECORD_FORMATS:
            raise ValueError(f"records must be one of {RECORD_FORMATS}, not {records!r}")
        if delay < 0:
            raise ValueError("delay must be >= 0")
        if type(snapshot_every) is not int or snapshot_every < 1:
            raise ValueError(f"snapshot_every must be a positive int, got {snapshot_every!r}")
        self.spark = spark
        self.workers = workers
        self.checkpoint = checkpoint
        self.results: list[Any] | None = None
        self.stats: list[dict[str, Any]] = []
        self._remote: _RemoteWorkers | None = None
        options.setdefault("description", "pytimely workers fed by a stream")
        feeding = {
            "key": [key] if isinstance(key, str) else key,
            "event_time": event_time,
            "delay": int(delay),
            "checkpoint": checkpoint,
            "wait": wait,
        }
        dataflow = (build, records, checkpoint, snapshot_every)
        if is_connect(spark):
            if on_epoch is not None:
                raise ValueError(
                    "on_epoch is called on the driver, and a Spark Connect client is not one: "
                    "the foreachBatch function runs on the server; poll bridge.completed instead"
                )
            folder = rendezvous if rendezvous is not None else _default_rendezvous(checkpoint)
            self._start_remote(dataflow, feeding, folder, ready_timeout, options)
        else:
            self._start_classic(dataflow, feeding, on_epoch, ready_timeout, options)

    def _start_classic(
        self,
        dataflow: tuple[Any, str, str | None, int],
        feeding: dict[str, Any],
        on_epoch: Callable[[int], Any] | None,
        ready_timeout: float,
        options: dict[str, Any],
    ) -> None:
        checkpoint = dataflow[2]
        restore = SnapshotStore(checkpoint).latest() if checkpoint is not None else None
        feeder: _Feeder | None = None
        self._launch = launch = Launch(
            self.spark,
            self.workers,
            extra_slots=1,
            on_message=lambda i, header, _payload: feeder and feeder.message(i, header),
            stage_outputs=False,
            **options,
        )
        feeder = _Feeder(self.workers, launch.secret, on_epoch=on_epoch, **feeding)
        self._feeder = feeder
        spec = launch.spec
        bind_host = launch.bind_host
        workers = self.workers

        def task(index: int, items: Any) -> Iterator[Any]:
            from pyspark import BarrierTaskContext

            advertise = advertised_host(BarrierTaskContext.get(), index, bind_host)

            def announce(control: Any, port: int) -> None:
                control.send(("ready", {"feed": (advertise, port)}))

            body = _bridge_body(dataflow, spec.secret, bind_host, announce, restore)
            i, result = worker_task(spec, body, items)
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
            feeds = [tuple(coord.ready[i]["feed"]) for i in range(workers)]
        except BaseException:
            launch.close()
            raise
        feeder.attach(_LaunchChannel(launch, feeds), restore)

    def _start_remote(
        self,
        dataflow: tuple[Any, str, str | None, int],
        feeding: dict[str, Any],
        rendezvous: str,
        ready_timeout: float,
        options: dict[str, Any],
    ) -> None:
        from . import remote
        from .executor import TaskInbox

        checkpoint = dataflow[2]
        # grace and start_timeout concern the classic driver's control connections: accepted
        # so that one call serves both kinds of session, and unused (as by remote.run).
        known = {"secret", "bind_host", "connect_timeout", "description", "grace", "start_timeout"}
        if set(options) - known:
            raise ValueError(
                f"options {sorted(set(options) - known)} are not available for a bridge started "
                f"from Spark Connect (it takes {sorted(known)})"
            )
        spec = remote.prepare(
            self.spark,
            self.workers,
            options.get("secret"),
            options.get("bind_host"),
            options.get("connect_timeout", 60.0),
            slots=self.workers + 1,
        )
        spec = dataclasses.replace(spec, stage_outputs=False)
        folder = os.path.join(rendezvous, spec.run_id)
        bind_host = spec.bind_host

        def fn(worker: Any, _batches: Any) -> Any:
            from pyspark import BarrierTaskContext

            inbox = TaskInbox()
            inbox.wake = worker.allocator.wake
            restore = SnapshotStore(checkpoint).latest() if checkpoint is not None else None
            advertise = advertised_host(BarrierTaskContext.get(), worker.index, bind_host)

            def announce(_control: Any, port: int) -> None:
                info = {"feed": [advertise, port], "host": socket.gethostname(), "pid": os.getpid()}
                _announce(folder, worker.index, info)

            body = _bridge_body(dataflow, spec.secret, bind_host, announce, restore)
            try:
                return body(worker, None, inbox)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(folder, f"worker-{worker.index}.json"))

        stage = remote.RemoteStage(self.spark, spec, fn, None, options["description"])
        self._remote = _RemoteWorkers(self.spark, stage, folder, self.workers, spec.secret)
        self._feeder = _Feeder(
            self.workers, spec.secret, folder=folder, ready_timeout=ready_timeout, **feeding
        )
        deadline = _time.monotonic() + ready_timeout
        try:
            while len(self._remote.states(fresh=0.0)) < self.workers:  # all have said hello
                if not stage.running():
                    stage.rows()  # raises the workers' failure
                    raise TimelyError("the streaming workers ended before they were ready")
                if _time.monotonic() > deadline:
                    ready = len(self._remote.states(fresh=0.0))
                    raise TimelyError(
                        f"only {ready} of {self.workers} streaming workers were ready within "
                        f"{ready_timeout:g} s (rendezvous folder {folder})"
                    )
                _time.sleep(0.2)
        except BaseException:
            stage.interrupt()
            raise

    # -- what the bridge knows ----------------------------------------------------------------

    def _states(self) -> list[dict[str, Any]]:
        assert self._remote is not None
        states = self._remote.states()
        return [states[i] for i in sorted(states)]

    @property
    def foreach_batch(self) -> Callable[[Any, int], None]:
        """The ``writeStream.foreachBatch`` function: pushes micro-batch ``batch_id`` into the
        workers as epoch ``batch_id``, then closes it (module docstring).  From a Spark
        Connect session it is pickled and runs in the server's Python."""
        return self._feeder

    @property
    def completed(self) -> int:
        """The highest epoch every worker has finished (after a restart: the restored one)."""
        if self._remote is None:
            return self._feeder.completed
        states = self._states()
        return min(s["completed"] for s in states) if len(states) == self.workers else -1

    @property
    def watermark(self) -> int:
        """The time the next micro-batch's rows are sent at: the next batch id, or with
        ``event_time`` the watermark (max event time so far - ``delay``, never decreasing)."""
        if self._remote is None:
            return self._feeder.watermark
        states = self._states()
        return max((s["last_close"][1] for s in states), default=0)

    @property
    def watermarks(self) -> dict[int, int]:
        """Micro-batch id -> the time the input advanced to after it."""
        if self._remote is None:
            return self._feeder.watermarks
        states = self._states()
        return dict(states[0]["watermarks"]) if states else {}

    @property
    def restored(self) -> dict | None:
        """The committed state snapshot the workers started from (its metadata: ``batch``,
        ``then``, ``rows``, ``workers``), or ``None``."""
        if self._remote is None:
            return self._feeder.restored
        states = self._states()
        return states[0]["restored"] if states else None

    @property
    def replayed(self) -> list[int]:
        """Micro-batches replayed from the input log when the bridge started: only those
        after the restored snapshot."""
        if self._remote is None:
            return self._feeder.replayed
        states = self._states()
        return list(states[0]["replayed"]) if states else []

    @property
    def snapshots(self) -> list[int]:
        """The state snapshots this bridge committed, by batch."""
        if self._remote is None:
            return self._feeder.snapshots
        states = self._states()
        return list(states[0]["committed"]) if states else []

    @property
    def latencies(self) -> dict[int, float]:
        """Epoch -> seconds from its ``foreach_batch`` call to its completion (on Connect,
        as the server's feeder saw it, kept by the workers)."""
        if self._remote is None:
            return self._feeder.latencies
        states = self._states()
        return dict(states[0]["latencies"]) if states else {}

    # -- observing and stopping --------------------------------------------------------------

    def wait_for(self, epoch: int, timeout: float | None = 120.0) -> None:
        """Block until every worker has finished ``epoch`` (TimeoutError after ``timeout``)."""
        if self._remote is None:
            self._feeder.wait_for(epoch, timeout)
            return
        deadline = None if timeout is None else _time.monotonic() + timeout
        while self.completed < epoch:
            if not self._remote.stage.running():
                self._remote.stage.rows()
                raise TimelyError("the streaming workers ended")
            if deadline is not None and _time.monotonic() > deadline:
                raise TimeoutError(f"epoch {epoch} did not complete within {timeout:g} s")
            _time.sleep(0.1)

    def stop(self, timeout: float | None = 120.0) -> list[Any]:
        """Close the input (after every closed epoch is in), let the dataflows finish, and
        return ``build``'s return values per worker (also kept in :attr:`results`)."""
        if self._remote is not None:
            outcome = self._stop_remote(timeout)
        else:
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

    def _stop_remote(self, timeout: float | None) -> list[Any]:
        assert self._remote is not None
        stage = self._remote.stage
        try:
            if stage.running():
                self._remote.states(fresh=0.0)  # the last batches closed, as the workers say
                self._remote.stop()
            if not stage.join(timeout):
                stage.interrupt()
                raise TimeoutError(f"the streaming workers did not stop within {timeout} s")
        except BaseException:
            stage.interrupt()
            raise
        return stage.results()

    def worker_processes(self) -> dict[int, tuple[str, int]]:
        """``{worker: (host, pid)}`` of the running workers, as they reported when starting."""
        if self._remote is not None:
            return {s["worker"]: (s["host"], s["pid"]) for s in self._states()}
        hellos = self._launch.coordinator.hellos
        return {i: (h["host"], h["pid"]) for i, h in sorted(hellos.items())}

    def cancel(self) -> None:
        """Stop the workers now (cancels their Spark job)."""
        if self._remote is not None:
            with contextlib.suppress(Exception):  # what the workers last said, if they can
                self._remote.states(fresh=0.0)
            self._remote.stage.interrupt()
        else:
            self._launch.close()

    def __enter__(self) -> StreamingBridge:  # noqa: PYI034
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        if kind is None:
            self.stop()
        else:
            self.cancel()
