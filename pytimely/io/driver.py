"""Jobs: a dataflow fed by sources into sinks, with checkpoints (:func:`job`, :func:`read`,
:func:`write`).

``pt.execute(job(build, checkpoint=DIR), workers=N)`` (or ``ps.run(job(...), workers=N)``)
runs ``build(scope)`` on every worker.  In it, :func:`read` makes a stream of a source's
records and :func:`write` sends a stream to a sink.  Then each worker, epoch after epoch:

1. reads its partitions (:func:`~pytimely.io.api.owned`) for ``epoch_seconds`` or
   ``epoch_records`` records, whichever comes first, feeding them at the current epoch and
   stepping the dataflow as it goes (a growing source's partitions are listed again every
   ``source.relist_seconds``, and those new to this worker opened at their checkpointed
   offset);
2. advances its inputs to the next epoch;
3. every ``snapshot_every`` epochs, at epoch ``T``: stops reading, steps until every sink's
   input has passed every time before ``T`` *on every worker* (so every operator has applied
   exactly the input read before ``T``, everywhere), stages its sink writers' output, and
   writes its part of the checkpoint at ``T``: its readers' offsets, what it staged, and its
   stateful operators' state.  The worker that completes the set of parts commits the
   checkpoint and publishes every part's staged output (:mod:`pytimely.io.checkpoint`).
   Nobody reads on before every worker has written its part: records read at ``T`` and sent
   to a worker still draining would otherwise enter its state before its snapshot.

When every source is exhausted (every reader, and every growing source says it will not
grow) the job drains and ends with a last checkpoint (at the epoch it started from plus
:data:`FINAL`) that publishes the rest; run again on the same checkpoint, it carries on from
there and reads only what the sources gained since (nothing, for files that did not change).
A job restarted on the same checkpoint -- after a
crash, with the same or another number of workers -- first publishes what its latest
committed checkpoint staged (publishing is idempotent), discards whatever was staged after it,
restores the operators' state partitioned by key for the new workers, reopens every
partition at its offset, and carries on from epoch ``T``.  Readers of the sinks therefore see
every result exactly once.  Without ``checkpoint`` the job publishes at the end only.

The timestamps are the epochs, or event time with :func:`read`'s ``event_time=`` (then the
input's time is the watermark, and checkpoints fall on multiples of ``snapshot_every`` event-
time units from ``start``). Exactly-once needs deterministic sources (a partition reread from
an offset returns the same records) and a deterministic dataflow per key; output that depends
on the order of records from different workers may differ between a run and its replay, but is
still written once.

>>> import pytimely as pt, tempfile, json, os
>>> from pytimely.io.files import JsonLinesSource, JsonLinesSink
>>> inp, out = tempfile.mkdtemp(), tempfile.mkdtemp()
>>> with open(os.path.join(inp, "clicks.jsonl"), "w") as f:
...     _ = f.write("".join(json.dumps({"user": u}) + "\\n" for u in "abab"))
>>> def build(scope):
...     clicks = read(scope, JsonLinesSource(inp))
...     totals = clicks.map(lambda r: (r["user"], 1)).stateful_map(
...         int, lambda n, one: (n + one, n + one), name="Totals")
...     write(totals, JsonLinesSink(out))
>>> _ = pt.execute(job(build, checkpoint=tempfile.mkdtemp()))
>>> sorted(tuple(json.loads(line)) for name in os.listdir(out) if name.endswith(".jsonl")
...        for line in open(os.path.join(out, name)))
[('a', 1), ('a', 2), ('b', 1), ('b', 2)]
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..dataflow.snapshot import StateRegistry, partition
from ..errors import TimelyError
from ..synchronization import barrier
from .api import PartitionReader, Sink, SinkWriter, Source, owned
from .checkpoint import Checkpoint, CheckpointStore

__all__ = ["FINAL", "JobReport", "job", "read", "write"]

#: How far after the epoch a run started at its last checkpoint lies: that checkpoint is
#: later than every other of the run, and all workers agree on it without a word.
FINAL = 2**62

_log = logging.getLogger(__name__)


@dataclass
class _Reading:
    """One :func:`read` of a job on one worker: the input and the readers of its partitions."""

    source: Source
    handle: Any  # InputHandle
    event_time: Callable[[Any], int] | None = None
    delay: int = 0
    readers: dict[str, PartitionReader] = field(default_factory=dict)
    listed_at: float = 0.0  # when the partitions were last listed (time.monotonic())


@dataclass
class _Writing:
    """One :func:`write` of a job on one worker: the sink, its writer, and a probe that passes
    a time once the writer has taken every record before it."""

    sink: Sink
    writer: SinkWriter
    probe: Any = None


class _Building:
    """What :func:`read` and :func:`write` register while a job's dataflow is built."""

    def __init__(self, index: int, peers: int, attempt: str) -> None:
        self.index, self.peers, self.attempt = index, peers, attempt
        self.readings: list[_Reading] = []
        self.writings: list[_Writing] = []


_BUILDING: contextvars.ContextVar[_Building | None] = contextvars.ContextVar(
    "pytimely_io_job", default=None
)


def _building(what: str) -> _Building:
    building = _BUILDING.get()
    if building is None:
        raise TimelyError(
            f"pytimely.io.{what}() works inside a job's build function: run it with "
            "pt.execute(pytimely.io.job(build, ...))"
        )
    return building


def read(
    scope: Any,
    source: Source,
    *,
    event_time: Callable[[Any], int] | None = None,
    delay: int = 0,
) -> Any:
    """A stream of ``source``'s records at the epoch they were read in (module docstring).

    With ``event_time=f`` (an int per record) the job's timestamps are *event time*: a worker's
    records enter at its watermark -- the least over its partitions of the greatest event time
    read from each, minus ``delay`` -- which the windows' ``event_time=`` modes read as theirs
    (a record more than ``delay`` out of order is late for them). Then ``snapshot_every``
    counts event-time units between checkpoints. A worker whose partitions stay idle holds the
    watermark of the whole job where its last record left it."""
    building = _building("read")
    if any(r.source.name == source.name for r in building.readings):
        raise TimelyError(
            f"two sources of this job are both named {source.name!r}: their offsets would "
            "mix in the checkpoint; give each a name (source.name = ...)"
        )
    if delay < 0:
        raise ValueError(f"read(): delay must be at least 0, not {delay}")
    handle, stream = scope.new_input()
    building.readings.append(_Reading(source, handle, event_time, delay))
    return stream


def write(stream: Any, sink: Sink) -> None:
    """Send ``stream``'s records to ``sink`` (module docstring)."""
    building = _building("write")
    writing = _Writing(sink, sink.writer(building.index, building.peers, building.attempt))
    take = writing.writer.write
    name = f"Write({sink.name})"

    def logic(inp: Any, out: Any) -> None:
        for _t, batch in inp.drain_batches():
            take(list(batch))

    from ..dataflow.pacts import Pipeline

    written = stream.unary(Pipeline, name, lambda cap, info: (cap.drop(), logic)[1])
    writing.probe = written.probe()
    building.writings.append(writing)


@dataclass
class JobReport:
    """What a worker of a :func:`job` did: ``records`` read, ``epochs`` run, ``checkpoints``
    it wrote parts of, the epoch it ``restored`` from (``None``: a fresh start), whether it
    found the job ``complete`` (restored from the end of an earlier run and found nothing new
    to read), and ``start_seconds``: from the call to
    the first read (reading the checkpoint, restoring state, cleaning up, meeting the other
    workers)."""

    records: int = 0
    epochs: int = 0
    checkpoints: int = 0
    restored: int | None = None
    complete: bool = False
    start_seconds: float = 0.0


def job(
    build: Callable[[Any], Any],
    *,
    checkpoint: str | None = None,
    filesystem: Any = None,
    name: str | None = None,
    snapshot_every: int | None = None,
    start: int | None = None,
    epoch_seconds: float = 0.1,
    epoch_records: int = 100_000,
    read_batch: int = 1_000,
    timeout: float | None = None,
) -> Callable[[Any], JobReport]:
    """``fn(worker)`` for ``pt.execute`` / ``ps.run`` that runs ``build`` as a job (module
    docstring).  ``checkpoint``: a directory for checkpoints (``None``: none; results are
    published at the end): a local path, or a URI of any filesystem pyarrow knows
    (``s3://bucket/ck``), or a path of ``filesystem`` (a ``pyarrow.fs.FileSystem``)
    (:mod:`pytimely.io.storage`).  ``name``: the job's name, checked against the checkpoint's
    (default: ``build``'s qualified name).  ``snapshot_every``: epochs between checkpoints
    (default 10), or event-time units with :func:`read`'s ``event_time=`` (then required,
    with ``start``: the event time the job's first run starts at, before its first record);
    ``epoch_seconds`` / ``epoch_records``: when an epoch ends; ``read_batch``: records per
    read call.  ``timeout``: seconds a checkpoint may wait for the other workers."""
    if (
        (snapshot_every is not None and snapshot_every < 1)
        or epoch_seconds <= 0
        or (epoch_records < 1 or read_batch < 1)
    ):
        raise ValueError(
            "job(): snapshot_every, epoch_seconds, epoch_records and read_batch must be positive"
        )
    job_name = name or str(getattr(build, "__qualname__", "job"))

    def run(worker: Any) -> JobReport:
        store = CheckpointStore(checkpoint, job_name, filesystem) if checkpoint else None
        return _Job(worker, build, store, snapshot_every, start, epoch_seconds,
                    epoch_records, read_batch, timeout).run()  # fmt: skip

    return run


class _Job:
    """One worker's run of a job (module docstring of :mod:`pytimely.io.driver`)."""

    def __init__(
        self,
        worker: Any,
        build: Callable[[Any], Any],
        store: CheckpointStore | None,
        snapshot_every: int | None,
        start: int | None,
        epoch_seconds: float,
        epoch_records: int,
        read_batch: int,
        timeout: float | None,
    ) -> None:
        self.worker = worker
        self.build = build
        self.store = store
        self.snapshot_every_given = snapshot_every
        self.snapshot_every = snapshot_every if snapshot_every is not None else 10
        self.start = start
        self.epoch_seconds = epoch_seconds
        self.epoch_records = epoch_records
        self.read_batch = read_batch
        self.timeout = timeout
        self.report = JobReport()
        self.registry = StateRegistry()
        # Staged sink output not yet known to be in a committed checkpoint, per sink name; and
        # the last checkpoint this worker wrote a part of: its epoch, how many descriptions of
        # each sink it listed, and the offsets it held.
        self.pending: dict[str, list[Any]] = collections.defaultdict(list)
        self.written: tuple[int, dict[str, int], dict[str, dict[str, Any]]] | None = None
        # Event time only: the input's next time, and per partition reader the greatest event
        # time read from it minus the delay (see _advance_watermark).
        self.watermark: int | None = None
        self.partition_marks: dict[PartitionReader, int] = {}
        # The restored checkpoint's offsets, per source and partition: where a partition opens,
        # also one a growing source lists later.
        self.offsets: dict[str, dict[str, Any]] = {}
        # With a checkpoint: an input closed when this worker has read everything, and a probe
        # of it (see _build).
        self.reading_done: Any = None
        self.all_done: Any = None
        # With a checkpoint: an input advanced to ``T`` once this worker has written its part
        # of the checkpoint at ``T``, and a probe of it: nobody reads past ``T`` before every
        # worker's state is cut there (see _checkpoint).
        self.cut: Any = None
        self.all_cut: Any = None
        self.building = _Building(worker.index, worker.peers, f"{uuid.uuid4().hex[:12]}")

    # -- start ---------------------------------------------------------------------------------

    def _restore(self) -> Checkpoint | None:
        """The latest committed checkpoint, read back (worker 0 first claims the directory
        for this job, or checks that it is this job's)."""
        store = self.store
        if store is None:
            return None
        if self.worker.index == 0:
            store.claim()
        meta = store.latest()
        restored = store.load(meta) if meta is not None else None
        return restored

    def _clean_up(self, restored: Checkpoint | None) -> None:
        """Worker 0, before anyone builds: publish what the committed checkpoint staged,
        discard what later attempts staged, drop uncommitted checkpoints."""
        keep = restored.staged if restored is not None else {}
        for sink in (w.sink for w in self.building.writings):
            staged = keep.get(sink.name, [])
            for description in staged:
                sink.publish(description)
            sink.discard(staged)
        if self.store is not None:
            self.store.drop_uncommitted(restored.epoch if restored is not None else None)

    @contextlib.contextmanager
    def _registering(self) -> Iterator[None]:
        token = _BUILDING.set(self.building)
        try:
            with self.registry.building():
                yield
        finally:
            _BUILDING.reset(token)

    def run(self) -> JobReport:
        worker = self.worker
        started = time.monotonic()
        restored = self._restore()
        if restored is not None:
            self.registry = StateRegistry(partition(restored.state, worker.index, worker.peers))
            self.report.restored = restored.epoch
        with self._registering():
            worker.dataflow(self._build, name="Job")
        unclaimed = self.registry.unclaimed()
        if unclaimed:
            raise TimelyError(
                f"the checkpoint holds state of operators this job no longer builds: {unclaimed}"
            )
        if self.store is not None and not self.building.writings:
            raise TimelyError(
                "a checkpointed job needs at least one io.write(): a checkpoint waits until "
                "every sink's input has passed its epoch on every worker, which is how it knows "
                "that the stateful operators upstream have applied exactly the input before it"
            )
        if worker.index == 0:
            self._clean_up(restored)
        barrier(worker, timeout=self.timeout)  # nobody stages before the clean-up is done
        epoch = restored.epoch if restored is not None else self.start
        if any(r.event_time is not None for r in self.building.readings):
            self.watermark = epoch  # event time: the input's time follows what is read
            if self.store is not None and (self.snapshot_every_given is None or epoch is None):
                raise ValueError(
                    "job(): with read(..., event_time=) and a checkpoint, give snapshot_every "
                    "in event-time units (e.g. 10_000: every 10 s of millisecond times) and "
                    "start, the event time the job starts at (every worker must count its "
                    "checkpoints from the same time)"
                )
        epoch = epoch or 0
        self.offsets = restored.offsets if restored is not None else {}
        for reading in self.building.readings:
            self._open_owned(reading)
            reading.handle.advance_to(epoch)
        self.report.start_seconds = time.monotonic() - started
        try:
            self._loop(epoch)
            self.report.complete = (
                restored is not None and restored.final and not self.report.records
            )
        finally:
            for reading in self.building.readings:
                for reader in reading.readers.values():
                    reader.close()
        return self.report

    # -- epochs --------------------------------------------------------------------------------

    def _build(self, scope: Any) -> None:
        """The user's ``build``, and (with a checkpoint) two inputs of its own, each feeding
        nothing but a probe (so they hold no other frontier): one a worker closes once it has
        nothing more to read, whose probe tells every worker when all of them are done, and
        one it advances past each checkpoint it has written its part of."""
        self.build(scope)
        if self.store is not None:
            self.reading_done, done = scope.new_input()
            self.all_done = done.probe()
            self.cut, cut = scope.new_input()
            self.all_cut = cut.probe()

    def _everyone_done(self) -> bool:
        """This worker has nothing more to read: say so, and whether every worker has."""
        if self.reading_done is None:
            return True
        if not self.reading_done.closed:
            self.reading_done.close()
            self.worker.step()
        return self.all_done.done()

    def _idle_epoch(self) -> None:
        """An epoch of a worker with nothing to read while others still read: step and park
        for ``epoch_seconds`` (or until every worker is done)."""
        deadline = time.monotonic() + self.epoch_seconds
        while (left := deadline - time.monotonic()) > 0 and not self.all_done.done():
            self.worker.step_or_park(left)

    def _loop(self, epoch: int) -> None:
        worker = self.worker
        final = epoch + FINAL  # the same on every worker: they all start at the restored epoch
        readings = self.building.readings
        while True:
            if self._read_epoch():
                if self._everyone_done():
                    break
                # Others still read (and send this worker records): it keeps taking its part
                # in their checkpoints, without holding their time back -- in event time its
                # watermark jumps to the next checkpoint boundary, where it waits for them.
                self._idle_epoch()
                if self.watermark is not None:
                    every = self.snapshot_every
                    self.watermark = max(self.watermark, (epoch // every + 1) * every)
            self.report.epochs += 1
            self._advance_watermark()
            if self.watermark is None:  # ingestion epochs
                epoch += 1
                for reading in readings:
                    reading.handle.advance_to(epoch)
                if self.store is not None and epoch % self.snapshot_every == 0:
                    self._checkpoint(epoch)
                continue
            # Event time: every checkpoint boundary the watermark passed, in order (nothing
            # read so far is at or after the first of them: it all went in at ``epoch``).
            every = self.snapshot_every
            boundary = (epoch // every + 1) * every
            while self.store is not None and self.watermark >= boundary:  # each, in turn
                for reading in readings:
                    reading.handle.advance_to(boundary)
                self._checkpoint(boundary)
                epoch, boundary = boundary, boundary + every
            if self.watermark > epoch:
                epoch = self.watermark
                for reading in readings:
                    reading.handle.advance_to(epoch)
        for reading in readings:
            reading.handle.close()
        if self.cut is not None:
            self.cut.close()
        worker.run()
        self._checkpoint(final, drained=True)
        for w in self.building.writings:
            w.writer.close()

    def _advance_watermark(self) -> None:
        """Event time: the watermark rises to the least of the partitions' marks (each the
        greatest event time read from it minus the delay), over the partitions that are not
        exhausted: a partition that lags, or has given nothing yet, holds it back, so that its
        records are not late because another partition ran ahead."""
        if self.watermark is None:
            return
        marks = self.partition_marks
        live = [
            marks.get(reader)
            for reading in self.building.readings
            if reading.event_time is not None
            for reader in reading.readers.values()
            if not reader.exhausted()
        ]
        if live and None not in live:
            least = min(m for m in live if m is not None)
            if least > self.watermark:
                self.watermark = least

    def _open_owned(self, reading: _Reading) -> int:
        """List ``reading``'s partitions and open those this worker owns and has not opened
        yet, at their checkpointed offsets; returns how many it opened."""
        source, worker = reading.source, self.worker
        growing = source.relist_seconds is not None
        done = self.offsets.get(source.name, {})
        opened = 0
        for p in owned(source.partitions(), worker.index, worker.peers, stable=growing):
            if p not in reading.readers:
                reading.readers[p] = source.open(p, done.get(p))
                opened += 1
        reading.listed_at = time.monotonic()
        return opened

    def _grow(self, force: bool = False) -> int:
        """List the growing sources again whose ``relist_seconds`` have passed (all of them
        with ``force``); returns how many partitions that opened."""
        opened = 0
        now = time.monotonic()
        for reading in self.building.readings:
            every = reading.source.relist_seconds
            if every is not None and (force or now - reading.listed_at >= every):
                opened += self._open_owned(reading)
        return opened

    def _exhausted(self) -> bool:
        """Whether every reader is exhausted and every growing source says it will not grow;
        then (once) the growing sources are listed again, lest a partition that appeared
        since their last listing be left out."""
        readings = self.building.readings
        if not all(r.exhausted() for reading in readings for r in reading.readers.values()):
            return False
        growing = [r.source for r in readings if r.source.relist_seconds is not None]
        if not all(source.exhausted() for source in growing):
            return False
        return not (growing and self._grow(force=True))

    def _read_epoch(self) -> bool:
        """Read for one epoch; returns whether every source is exhausted."""
        worker = self.worker
        deadline = time.monotonic() + self.epoch_seconds
        budget = self.epoch_records
        limit = self.read_batch
        while budget > 0:
            self._grow()
            got = 0
            for reading in self.building.readings:
                send, event_time = reading.handle.send_batch, reading.event_time
                for reader in reading.readers.values():
                    batch = reader.read(min(limit, budget - got) or 1)
                    if batch:
                        send(batch)
                        got += len(batch)
                        if event_time is not None:
                            seen = max(map(event_time, batch)) - reading.delay
                            marks = self.partition_marks
                            if reader not in marks or seen > marks[reader]:
                                marks[reader] = seen
            budget -= got
            self.report.records += got
            worker.step()
            if not got:
                if self._exhausted():
                    return True
                worker.step_or_park(min(0.01, max(0.0, deadline - time.monotonic())))
            if time.monotonic() >= deadline:
                break
        return False

    def _release(self, offsets: dict[str, dict[str, Any]]) -> None:
        """A checkpoint holding ``offsets`` (this worker's) committed: tell the readers."""
        for reading in self.building.readings:
            done = offsets.get(reading.source.name, {})
            for p, reader in reading.readers.items():
                if p in done:
                    reader.release(done[p])

    def _checkpoint(self, epoch: int, drained: bool = False) -> None:
        """This worker's part of the checkpoint at ``epoch`` (its sources are stopped there),
        then the commit if the part was the last one."""
        worker = self.worker
        if not drained:
            probes = [w.probe for w in self.building.writings]
            worker.step_while(lambda: any(p.less_than(epoch) for p in probes), timeout=self.timeout)
        pending = self.pending
        if self.written is not None and self.store is not None:
            # The last checkpoint this worker wrote a part of: if another worker committed
            # it since, what it listed is published (or will be, at a restart): forget it.
            written_at, listed, held = self.written
            if self.store.committed(written_at):
                for sink_name, n in listed.items():
                    del pending[sink_name][:n]
                self._release(held)
                self.written = None
        for w in self.building.writings:
            staged = w.writer.stage()
            if staged is not None:
                pending[w.sink.name].append(staged)
        if self.store is None:
            if drained:  # no checkpoint: publish at the end
                for w in self.building.writings:
                    for staged in pending[w.sink.name]:
                        w.sink.publish(staged)
            return
        offsets = {
            reading.source.name: {p: r.offset() for p, r in reading.readers.items()}
            for reading in self.building.readings
        }
        state = self.registry.snapshot()  # also at the end: a later run carries on from it
        # Every description staged since the last checkpoint known committed: a part may list
        # one again (publishing is idempotent), but none may go unlisted.
        staged = {name: list(descriptions) for name, descriptions in pending.items()}
        self.store.write_part(epoch, worker.index, worker.peers, offsets, staged, state)
        self.written = (epoch, {name: len(d) for name, d in staged.items()}, offsets)
        self.report.checkpoints += 1
        if self.store.try_commit(epoch, worker.peers, final=drained):  # committed it: publish
            committed = self.store.load(
                {"epoch": epoch, "workers": worker.peers}  # the marker this call wrote
            )
            sinks = {w.sink.name: w.sink for w in self.building.writings}
            for sink_name, descriptions in committed.staged.items():
                for description in descriptions:
                    sinks[sink_name].publish(description)
            self.written = None
            for descriptions in pending.values():
                descriptions.clear()
            self._release(offsets)
            _log.info("worker %d committed the checkpoint at epoch %d", worker.index, epoch)
        if not drained:
            # The cut is consistent only if no worker reads at ``epoch`` (and sends what it
            # read on) before every worker has taken its state at ``epoch``: a worker still
            # draining would apply those records before its snapshot, or hold them stashed,
            # and a restart from this checkpoint would apply them twice.
            self.cut.advance_to(epoch)
            worker.step_while(lambda: self.all_cut.less_than(epoch), timeout=self.timeout)
