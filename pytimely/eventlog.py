"""Logging streams: what a worker's dataflows do, as events (timely-dataflow's ``logging.rs``).

Events are recorded per worker only once something listens: :meth:`Worker.log_to` (a
callback handed each step's events as an :class:`EventBatch`) or :func:`log_stream` (the events
as an ordinary pytimely stream, to be counted, windowed, or ``capture_into`` a file and
replayed elsewhere).  :meth:`Worker.enable_statistics` keeps only the running totals of
``Worker.statistics()``.  Until one of them is called nothing is recorded and nothing is paid:
the instrumentation is swapped in then (see ``Subgraph.observe``), never tested for on the
hot path.  Operators become their observed variants (``OperatorCore.observe``), which time
their invocations and count the records and batches of their ports in the frames that run
anyway; nested scopes are timed by a wrapper, and only the edges out of a scope's inputs or
out of a nested scope are wrapped to be counted; progress sends and the allocator get hooks.

The events, after timely's ``TimelyEvent`` variants; every one starts with ``time`` (seconds
since logging started on this worker) and ``worker`` (its index):

* :class:`OperatesEvent` -- an operator (or nested scope) exists: id, address, name, ports;
* :class:`ScheduleEvent` -- an operator was scheduled: when it started and how long it ran
  (timely logs a start and a stop event; here events reach listeners only at the end of a
  step, when every start has its stop, so one event carries both, in the place of the start);
* :class:`MessagesEvent` -- what a channel carried: records, batches and, for batches that
  cross to another worker, bytes, summed (one event per batch would cost more than the push
  it describes) and stamped at the end of the step.  Batches that stay on this worker are
  logged as sent on their edge (an edge carries every batch its source output sends: the
  output's own counts), one event per invocation of the source operator that sent on it (per
  step, for an edge out of a scope's input or a nested scope); those that cross are logged as
  sent by one worker and received by the other, one event per channel, direction and peer
  per step that used it;
* :class:`ProgressEvent` -- a scope's progress batch sent or received;
* :class:`CapabilityEvent` -- an operator's capability count changed at a time.

Invariant: the events of one step reach the listeners at the end of that step, in the order
they happened (the step's message counts last); operator ids are unique per worker and every
other event's ``id`` names an operator announced before by an :class:`OperatesEvent`.

Statistics (``Worker.statistics()["operators"]``), per operator: ``records_in`` /
``batches_in`` are what its logic took from its inputs -- from this worker and, behind an
Exchange, from the others; records still queued are not counted yet -- and ``records_out`` /
``batches_out`` what its outputs sent (each batch once, however many operators read it).
For a nested scope they are what the edges into and out of it carried.
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, overload, runtime_checkable

if TYPE_CHECKING:
    from .progress.subgraph import BatchPush, EdgeEnd

__all__ = [
    "OperatesEvent",
    "ScheduleEvent",
    "MessagesEvent",
    "ProgressEvent",
    "CapabilityEvent",
    "EventLog",
    "EventBatch",
    "log_stream",
]


@runtime_checkable
class _SelfObserving(Protocol):
    """An operator that times and logs its own invocations once asked (the dataflow layer's
    ``OperatorCore``), so that the log needs no wrapper around it.  The event log depends on
    this interface, not on the operator class: ``eventlog`` sits above ``progress`` and beside
    ``dataflow``, and imports neither's internals."""

    invocations: int
    input_ports: Sequence[Any]
    output_ports: Sequence[Any]

    def observe(self) -> None:
        """Start timing invocations and counting what every port takes in or sends."""
        ...

    def timing(self) -> tuple[float, float]:
        """Total and longest invocation time since :meth:`observe`."""
        ...

    def log_schedules(
        self,
        schedules: list[Any],
        log_id: int,
        capabilities: Callable[[float], None],
        sent: Any,
        edges: list[list[Any]],
    ) -> None:
        """Log every invocation (and what its outputs sent on ``edges``) into ``schedules``."""
        ...

    def log_edges(self, output: int, edges: Any) -> None:
        """While logging, log what ``output`` sends on ``edges``."""
        ...


class OperatesEvent(NamedTuple):
    """Operator ``id`` (unique on this worker) exists at ``address`` with its ports.

    >>> OperatesEvent(0.0, 0, 1, (0, 1), "map", 1, 1).address
    (0, 1)
    """

    time: float
    worker: int
    id: int
    address: tuple[int, ...]
    name: str
    inputs: int
    outputs: int


class ScheduleEvent(NamedTuple):
    """Operator ``id`` was scheduled at ``time`` and ran ``duration`` seconds (it stopped at
    :attr:`stop`).

    >>> ScheduleEvent(0.5, 0, 1, 0.25).stop
    0.75
    """

    time: float
    worker: int
    id: int
    duration: float

    @property
    def stop(self) -> float:
        """When the invocation returned (seconds since logging started)."""
        return self.time + self.duration


class MessagesEvent(NamedTuple):
    """During the step that ended at ``time``, ``records`` in ``batches`` batches were sent
    (``is_send``) or received on ``channel`` from worker ``source`` to worker ``target``;
    ``bytes`` is the encoded size of what crossed to another worker (0 for batches that stay
    on this one).  ``channel`` is the communication channel for data crossing workers, else
    the edge ``(scope address, edge index)``.

    >>> MessagesEvent(0.1, 0, (( 0,), 2), True, 0, 0, 5, 1, 0).records
    5
    """

    time: float
    worker: int
    channel: Any
    is_send: bool
    source: int
    target: int
    records: int
    batches: int
    bytes: int


class ProgressEvent(NamedTuple):
    """The scope at ``address`` sent (``is_send``) or received one progress batch of
    ``updates`` pointstamp changes.

    >>> ProgressEvent(0.1, 0, (0,), True, 3).updates
    3
    """

    time: float
    worker: int
    address: tuple[int, ...]
    is_send: bool
    updates: int


class CapabilityEvent(NamedTuple):
    """Operator ``id``'s capabilities for output ``port`` at ``at`` changed by ``delta``.

    >>> CapabilityEvent(0.1, 0, 1, 0, 7, -1).delta
    -1
    """

    time: float
    worker: int
    id: int
    port: int
    at: Any
    delta: int


class _OperatorFigures:
    """One observed operator: who it is, and how to read its running totals: ``timing()``
    returns ``(invocations, seconds in total, longest seconds)``, each of ``inputs`` /
    ``outputs`` ``(records, batches)``.  For an operator they read the totals it keeps itself
    (``OperatorCore.observe``: its own and its ports' counters), and ``output_edges`` lists,
    per output, the edges it feeds (as MessagesEvent channels; ``log_edges(output, edges)``
    tells the operator of a new one, see ``OperatorCore.log_edges``); for a nested scope
    (``output_edges is None``) the totals live in the closures that count them
    (``EventLog.scheduler`` and ``edge``), ``inputs`` and ``outputs`` being the counts of the
    edges into and out of it."""

    __slots__ = (
        "id",
        "name",
        "address",
        "ports",
        "timing",
        "inputs",
        "outputs",
        "output_edges",
        "log_edges",
    )

    def __init__(
        self, id: int, name: str, address: tuple[int, ...], ports: tuple[int, int]
    ) -> None:
        self.id = id
        self.name = name
        self.address = address
        self.ports = ports
        self.timing: Callable[[], tuple[int, float, float]] = _never_scheduled
        self.inputs: list[Callable[[], tuple[int, int]]] = []
        self.outputs: list[Callable[[], tuple[int, int]]] = []
        self.output_edges: list[list[Any]] | None = None
        self.log_edges: Callable[[int, list[Any]], None] | None = None  # an operator's


def _never_scheduled() -> tuple[int, float, float]:
    return 0, 0.0, 0.0


class _EdgeCounter:
    """The running totals of one wrapped edge (see ``EventLog.edge``)."""

    __slots__ = ("records", "batches")

    def __init__(self) -> None:
        self.records = 0
        self.batches = 0

    def counts(self) -> tuple[int, int]:
        return self.records, self.batches


class _Reported:
    """What ``EventLog.flush`` turns into MessagesEvents for a wrapped edge (an operator's
    clock logs its outputs' edges itself): a ``counter`` (an :class:`_EdgeCounter`: anything
    with running ``records`` and ``batches``), the ``channels`` (edges) it feeds, and the
    totals at its last report."""

    __slots__ = ("counter", "channels", "records", "batches")

    def __init__(self, counter: Any, channels: list[Any]) -> None:
        self.counter = counter
        self.channels = channels
        self.records = counter.records
        self.batches = counter.batches

    def forget(self) -> None:
        """Report nothing of what was counted so far."""
        self.records = self.counter.records
        self.batches = self.counter.batches


# Raw events are kept flat, in two lists, so that recording one allocates no tuple: tuples are
# tracked by the cyclic garbage collector, and a step's worth of them (one per operator
# invocation) would trigger young collections that scan them all again; floats, ints and
# ``None`` are not tracked.  ``schedules`` holds the ScheduleEvents, the most frequent, as
# ``id, start, duration`` triples (recorded by the operators themselves, see
# ``OperatorCore.log_schedules``); ``events`` every other event in ``_WIDTH`` slots: its class,
# its raw clock, its *position* (how many ``schedules`` slots were filled before it: where it
# goes among the ScheduleEvents), then its fields after ``worker``, padded with ``None``.
# The MessagesEvents of a step's edges (counted on this worker, one per edge used), the most
# frequent after the ScheduleEvents, are ``channel, records, batches`` triples of a third list,
# ``sent``: they all come last in their step and share its end as their time.
_WIDTH = 10  # a MessagesEvent: class, clock, position and 7 fields, the widest


class EventLog:
    """The recorder of one worker: buffers events for the listeners and keeps the running
    statistics.  It is the observer ``Subgraph.observe`` and the allocator call back into.

    >>> log = EventLog(worker=0)
    >>> seen = []
    >>> log.listen(seen.extend)
    >>> log.flush(); seen
    []
    """

    def __init__(self, worker: int) -> None:
        self.worker = worker
        # Raw events, flat (see ``_WIDTH``); never replaced: operators and closures extend them.
        self.schedules: list[Any] = []
        self.events: list[Any] = []
        self.sent: list[Any] = []
        self.recording = False  # events for listeners (statistics are always kept)
        self._listeners: list[Callable[[EventBatch], None]] = []
        self._origin = _time.perf_counter()
        self._operators: dict[tuple[int, ...], _OperatorFigures] = {}
        self._channels: dict[int, dict[int, list[int]]] = {}  # channel -> peer -> [recs, bytes]
        self._counted_outputs: set[tuple[tuple[int, ...], tuple[int, int]]] = set()
        # What ``flush`` turns into MessagesEvents (an operator's clock logs its outputs'
        # edges after each invocation, see ``OperatorCore.log_schedules``): the wrapped edges
        # pushed to in the step (maybe several times: only the first finds anything new; never
        # replaced: the closures append to it); and the traffic crossing workers by
        # ``(channel, is_send, peer)`` as ``[records, batches, bytes]``.
        self._to_report: list[_Reported] = []
        self._reported: list[_Reported] = []  # all of them
        self._crossed: dict[tuple[int, bool, int], list[int]] = {}
        self._start_logging: list[Callable[[], None]] = []  # per operator, once recording

    def record(self, kind: type, clock: float, *fields: Any) -> None:
        """Record one event of class ``kind`` (its fields after ``time`` and ``worker``), not
        a ScheduleEvent."""
        raw = (kind, clock, len(self.schedules), *fields)
        self.events.extend(raw + (None,) * (_WIDTH - len(raw)))

    def listen(self, callback: Callable[[EventBatch], None]) -> None:
        """Hand ``callback`` the events of every step that recorded any, as one
        :class:`EventBatch` (valid after the call: keep it or copy what you need)."""
        self._listeners.append(callback)
        if not self.recording:  # announce the operators observed so far, for statistics
            self.recording = True
            for reported in self._reported:  # count messages from now on
                reported.forget()
            for start in self._start_logging:
                start()
            self._start_logging.clear()
            now = self.now()
            for f in self._operators.values():
                self.record(OperatesEvent, now, f.id, f.address, f.name, *f.ports)

    def flush(self) -> None:
        """Deliver the events recorded since the last flush (the end of a worker step), the
        step's message counts last."""
        schedules, events, sent = self.schedules, self.events, self.sent
        end = self.now()
        if self._to_report or self._crossed:
            self._record_messages(end)
        if events or schedules or sent:
            delivered = EventBatch(
                schedules[:], events[:], sent[:], end, origin=self._origin, worker=self.worker
            )
            schedules.clear()  # the same lists: the operators and closures hold them
            events.clear()
            sent.clear()
            for listener in self._listeners:
                listener(delivered)

    def _record_messages(self, now: float) -> None:
        """One MessagesEvent per wrapped edge pushed to and per channel, direction and peer
        crossed since the last flush, stamped ``now`` (operators' edges are logged by their
        clocks)."""
        worker = self.worker
        position = len(self.schedules)
        extend = self.events.extend
        sent = self.sent.extend
        to_report = self._to_report
        for reported in to_report:
            counter = reported.counter
            batches = counter.batches
            if batches != reported.batches:
                records = counter.records
                for channel in reported.channels:
                    sent((channel, records - reported.records, batches - reported.batches))
                reported.records = records
                reported.batches = batches
        to_report.clear()
        crossed, self._crossed = self._crossed, {}
        for (channel, is_send, peer), (records, batches, size) in crossed.items():
            source, target = (worker, peer) if is_send else (peer, worker)
            extend(
                (
                    MessagesEvent,
                    now,
                    position,
                    channel,
                    is_send,
                    source,
                    target,
                    records,
                    batches,
                    size,
                )
            )

    def now(self) -> float:
        """The clock raw events carry (``EventBatch`` makes it seconds since logging began)."""
        return _time.perf_counter()

    # -- the observer of subgraphs (progress layer) ------------------------------------------

    def scheduler(
        self, address: tuple[int, ...], child: Any, schedule: Callable[[], bool]
    ) -> Callable[[], bool]:
        """What to call instead of ``child.schedule``.  An operator times, counts and logs
        its invocations itself once observed (``OperatorCore.observe``: no wrapper frame),
        its ports count its records and batches; a nested scope is wrapped by a function that
        times it and logs its capability changes."""
        figures = self._operators.get(address)
        if figures is None:
            figures = _OperatorFigures(
                len(self._operators), child.name, address, (child.inputs, child.outputs)
            )
            self._operators[address] = figures
            if self.recording:
                self.record(
                    OperatesEvent, self.now(), figures.id, address, child.name, *figures.ports
                )
        op_id = figures.id
        schedules = self.schedules
        extend = self.events.extend
        internals = child.shared.internals

        def capabilities(stop: float) -> None:
            """The capability changes of the invocation that stopped at ``stop``."""
            position = len(schedules)
            for port, cb in enumerate(internals):
                for t, d in cb:
                    extend((CapabilityEvent, stop, position, op_id, port, t, d, None, None, None))

        if isinstance(child, _SelfObserving):
            self._observe_operator(child, figures, capabilities)
            return child.schedule  # looked up again: the observed variant's

        clock = _time.perf_counter
        schedule_extend = schedules.extend
        invocations = 0
        total = longest = 0.0

        def scheduled_scope() -> bool:
            """A nested scope: its event goes before those of its children (it started first)."""
            nonlocal invocations, total, longest
            if not self.recording:
                start = clock()
                incomplete = schedule()
                elapsed = clock() - start
            else:
                slot = len(schedules)  # the event goes where the invocation started
                schedule_extend((op_id, 0.0, 0.0))
                start = clock()
                incomplete = schedule()
                elapsed = clock() - start
                schedules[slot + 1] = start
                schedules[slot + 2] = elapsed
                if any(internals):
                    capabilities(start + elapsed)
            invocations += 1
            total += elapsed
            if elapsed > longest:
                longest = elapsed
            return incomplete

        def timing() -> tuple[int, float, float]:
            return invocations, total, longest

        figures.timing = timing
        return scheduled_scope

    def _observe_operator(
        self, core: _SelfObserving, figures: _OperatorFigures, capabilities: Callable[[float], None]
    ) -> None:
        """Observe an operator (``OperatorCore.observe``): its invocations are timed, its
        ports count (so no edge of its needs a wrapper), and once recording it logs its
        invocations and, after each one that sent, one MessagesEvent per edge each output
        feeds (the edges filled in by ``edge``)."""
        core.observe()
        invocations_before = core.invocations
        figures.timing = lambda: (core.invocations - invocations_before, *core.timing())
        ports = core.output_ports
        figures.inputs = [port.counts for port in core.input_ports]
        figures.outputs = [port.counts for port in ports]
        edges: list[list[Any]] = [[] for _ in ports]
        figures.output_edges = edges
        figures.log_edges = core.log_edges

        def start_logging() -> None:
            core.log_schedules(self.schedules, figures.id, capabilities, self.sent, edges)

        if self.recording:
            start_logging()
        else:
            self._start_logging.append(start_logging)

    def edge(
        self, scope: tuple[int, ...], index: int, source: EdgeEnd, target: EdgeEnd, push: BatchPush
    ) -> BatchPush:
        """The instrumented replacement of the push of edge ``index`` of the scope at
        ``scope``, from ``(node, output)`` to ``(node, input)`` (node 0: the boundary).

        An operator's output counts what it sends (every batch goes to each of its edges), so
        an edge from an operator keeps its push and is reported from those counts.  Only edges
        from a scope's input or from a nested scope are wrapped, to count their batches."""
        channel = (scope, index)
        sender = self._operators.get(scope + (source[0],)) if source[0] else None
        receiver = self._operators.get(scope + (target[0],)) if target[0] else None
        if sender is not None and sender.output_edges is not None:
            edges = sender.output_edges[source[1]]
            edges.append(channel)
            if sender.log_edges is not None:  # (None only for a nested scope)
                sender.log_edges(source[1], edges)  # taken into account if it logs already
            if receiver is not None and receiver.output_edges is None:  # into a nested scope
                receiver.inputs.append(sender.outputs[source[1]])
            return push

        counter = _EdgeCounter()
        reported = _Reported(counter, [channel])
        self._reported.append(reported)
        queue = self._to_report.append

        # This runs once per batch: it counts, and while recording queues the edge's counts
        # for ``flush``.
        def pushed(t: Any, batch: Any) -> None:
            counter.records += len(batch)
            counter.batches += 1
            if self.recording:
                queue(reported)
            push(t, batch)

        if sender is not None and (scope, source) not in self._counted_outputs:
            self._counted_outputs.add((scope, source))  # a nested scope's output
            sender.outputs.append(counter.counts)
        if receiver is not None and receiver.output_edges is None:  # into a nested scope
            receiver.inputs.append(counter.counts)
        return pushed

    def progress_sent(self, address: tuple[int, ...], updates: int) -> None:
        """The scope at ``address`` sends a progress batch of ``updates`` changes.

        Recorded as a :class:`ProgressEvent` while someone listens (``recording``).
        """
        if self.recording:
            self.record(ProgressEvent, self.now(), address, True, updates)

    def progress_received(self, address: tuple[int, ...], updates: int) -> None:
        """The scope at ``address`` receives a progress batch of ``updates`` changes.

        Recorded as a :class:`ProgressEvent` while someone listens (``recording``).
        """
        if self.recording:
            self.record(ProgressEvent, self.now(), address, False, updates)

    # -- the observer of the allocator (communication layer) ---------------------------------

    def traffic(self, channel: int, peer: int, is_send: bool, payload: Any, size: int) -> None:
        """A message crossed to (``is_send``) or from worker ``peer`` on ``channel``:
        ``size`` encoded bytes; a data payload is ``(time, batch)``, a progress one a list."""
        records = _records(payload)
        if is_send:
            figures = self._channels.setdefault(channel, {}).setdefault(peer, [0, 0])
            figures[0] += records
            figures[1] += size
        if self.recording:
            figures = self._crossed.get((channel, is_send, peer))
            if figures is None:
                self._crossed[(channel, is_send, peer)] = [records, 1, size]
            else:
                figures[0] += records
                figures[1] += 1
                figures[2] += size

    # -- statistics ---------------------------------------------------------------------------

    def operator_statistics(self) -> dict[tuple[int, ...], dict[str, Any]]:
        """Per operator address, its running totals (see ``Worker.statistics``)."""
        out = {}
        for address, f in self._operators.items():
            invocations, total, longest = f.timing()
            inputs = [counts() for counts in f.inputs]
            outputs = [counts() for counts in f.outputs]
            out[address] = {
                "name": f.name,
                "address": list(address),
                "invocations": invocations,
                "time_total_s": total,
                "time_max_s": longest,
                "records_in": sum(r for r, _b in inputs),
                "records_out": sum(r for r, _b in outputs),
                "batches_in": sum(b for _r, b in inputs),
                "batches_out": sum(b for _r, b in outputs),
            }
        return out

    def channel_statistics(self) -> list[dict[str, Any]]:
        """Per communication channel, what this worker sent to each other worker."""
        out = []
        for channel, peers in sorted(self._channels.items()):
            out.append(
                {
                    "channel": channel,
                    "records_sent": sum(r for r, _b in peers.values()),
                    "bytes_sent": sum(b for _r, b in peers.values()),
                    "to": {
                        peer: {"records": r, "bytes": b} for peer, (r, b) in sorted(peers.items())
                    },
                }
            )
        return out


class EventBatch(Sequence[Any]):
    """The events of one step, as handed to listeners: a read-only sequence whose items are
    the event named tuples, in the order they happened.  They are recorded flat (see
    ``_WIDTH``: a named tuple per event, and a float for the subtraction, cost more to make
    and collect than the bookkeeping of an operator invocation) and typed as they are read:
    ``time`` is the raw ``time.perf_counter()`` reading minus ``origin``.  A listener that
    only counts events pays for nothing else; the first item read types them all.

    >>> schedules = [7, 10.25, 0.125]
    >>> raw = [ProgressEvent, 10.5, 3, (0,), True, 2, None, None, None, None]
    >>> sent = [((0,), 1), 4, 1]
    >>> batch = EventBatch(schedules, raw, sent, 11.0, origin=10.0, worker=3)
    >>> len(batch), batch[1].updates, batch[2].records
    (3, 2, 4)
    >>> list(batch)[:2] == [ScheduleEvent(0.25, 3, 7, 0.125), ProgressEvent(0.5, 3, (0,), True, 2)]
    True
    """

    __slots__ = ("_schedules", "_raw", "_sent", "_sent_at", "_origin", "_worker", "_typed")

    def __init__(
        self,
        schedules: list[Any],
        raw: list[Any],
        sent: Sequence[Any] = (),
        sent_at: float = 0.0,
        origin: float = 0.0,
        worker: int = 0,
    ) -> None:
        if len(schedules) % 3 or len(raw) % _WIDTH or len(sent) % 3:
            raise ValueError(
                f"raw events come in runs of 3, {_WIDTH} and 3 slots, not "
                f"{len(schedules)}, {len(raw)} and {len(sent)}"
            )
        self._schedules = schedules
        self._raw = raw
        self._sent = sent
        self._sent_at = sent_at
        self._origin = origin
        self._worker = worker
        self._typed: list[Any] | None = None

    def __len__(self) -> int:
        return len(self._schedules) // 3 + len(self._raw) // _WIDTH + len(self._sent) // 3

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if self._typed is None:
            self._typed = list(self._merged())
        return self._typed[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._typed) if self._typed is not None else self._merged()

    def _merged(self) -> Iterator[Any]:
        """The events, typed, each other event after the ScheduleEvents recorded before it."""
        schedules, raw, origin, worker = self._schedules, self._raw, self._origin, self._worker
        new = tuple.__new__
        at = 0  # the next ScheduleEvent's slot
        for i in range(0, len(raw), _WIDTH):
            position = raw[i + 2]
            while at < position:
                yield new(
                    ScheduleEvent,
                    (schedules[at + 1] - origin, worker, schedules[at], schedules[at + 2]),
                )
                at += 3
            kind = raw[i]
            fields = raw[i + 3 : i + 1 + len(kind._fields)]
            yield new(kind, (raw[i + 1] - origin, worker, *fields))
        for rest in range(at, len(schedules), 3):
            yield new(
                ScheduleEvent,
                (schedules[rest + 1] - origin, worker, schedules[rest], schedules[rest + 2]),
            )
        sent, sent_time = self._sent, self._sent_at - origin
        for i in range(0, len(sent), 3):
            channel, records, batches = sent[i : i + 3]
            yield new(
                MessagesEvent,
                (sent_time, worker, channel, True, worker, worker, records, batches, 0),
            )

    def __repr__(self) -> str:
        return f"EventBatch({list(self)!r})"


def _records(payload: Any) -> int:
    if type(payload) is tuple and len(payload) == 2:  # (time, batch) of a data channel
        try:
            return len(payload[1])
        except TypeError:
            return 1
    return 1


def log_stream(scope: Any) -> Any:
    """This worker's events as a stream of ``scope`` (of int times): the events of the ``n``-th
    delivery (one per worker step that recorded any) arrive at time ``n``.  The dataflow that
    hosts the stream is not itself logged (its own activity would feed it forever).

    >>> import pytimely as pt
    >>> from pytimely.eventlog import log_stream
    >>> worker = pt.Worker()
    >>> kinds = set()
    >>> _ = worker.dataflow(lambda s: log_stream(s).inspect(lambda e: kinds.add(type(e).__name__)))
    >>> def build(scope):
    ...     inp, stream = scope.new_input()
    ...     return inp, stream.map(str).probe()
    >>> inp, probe = worker.dataflow(build)
    >>> inp.send(1); inp.advance_to(1); worker.step_while(lambda: probe.less_than(1))
    >>> _ = worker.step()  # the log dataflow consumes what the last step recorded
    >>> sorted(kinds)
    ['CapabilityEvent', 'MessagesEvent', 'OperatesEvent', 'ProgressEvent', 'ScheduleEvent']
    """
    worker = scope.worker
    handle, stream = scope.new_input()
    deliveries = 0

    def deliver(events: list[Any]) -> None:
        nonlocal deliveries
        if handle.closed:  # the program closed its inputs: nothing more to tell
            return
        deliveries += 1
        handle.advance_to(deliveries)
        handle.send_batch(list(events))

    worker.log_to(deliver, exclude_dataflow=scope.path[0])
    return stream
