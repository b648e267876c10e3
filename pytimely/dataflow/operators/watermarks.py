"""Flink-style watermarks, as a library on timestamp tokens (Lattuada, McSherry, Liagouris,
"Timestamp tokens: a better coordination primitive for data-processing systems", SoCC 2022,
sections 2.1, 4 and 7).

Timestamp tokens can reproduce other systems' coordination idioms without any system support.
This module reproduces Flink's: *in-band watermarks*.  It exists to be compared with tokens and
notifications (the NEXMark Q4/Q7 idioms, the no-op chains of section 7.3), so it is written to be
faithful to the costs of the model, not to be clever.

The model
---------

* A **watermarked stream** (:class:`WStream`) carries ordinary data batches *and* marker
  batches (:class:`Markers`, a tuple of :class:`Watermark` records; never mixed with data).
  ``Watermark(time, src, dst)`` sent by worker ``src``'s instance of an operator to worker
  ``dst``'s instance of the next one promises: *no more data with timestamp < time will come
  from me on this channel*.  Markers travel in the same FIFO channels as the data, so a marker
  is received after all the data sent before it.
* Every watermark operator is **invoked to forward markers**: its inputs have
  ``FrontierInterest.NEVER``, it never looks at the system's frontiers, and learns about time
  only from the markers in its input.  It keeps the latest watermark of each upstream channel
  (one per upstream worker on an exchanged edge, just its own worker on a pipelined edge), and
  its input watermark is the minimum of them (over all inputs).  When that minimum advances it
  (1) fires its event-time work (``on_watermark``), sending the results, then (2) forwards the
  new watermark downstream: **to every downstream worker** if any consumer of its output
  exchanges data ("watermarks-X": the marker is broadcast, one marker record per destination
  worker), or only to its own worker if every consumer is pipelined ("watermarks-P").  So a
  chain of ``L`` exchanging operators on ``P`` workers processes ``L * P * P`` markers per
  watermark advance, and each operator is invoked for each advance even if it has no data:
  exactly the costs section 7.3 measures.
* Each operator **holds one timestamp token at its output watermark** and downgrades it as the
  watermark advances (drops it at :data:`END`).  The system's frontiers therefore stay correct
  (probes, ``capture``, and token-based operators downstream all work), but no watermark operator
  ever consults them.  Data are sent at their own (message) timestamps, which are never below
  the output watermark; results fired by a watermark are sent at the *previous* output
  watermark (the held token's time), in one batch: the records carry their logical times, as in
  Flink, where a record's timestamp is data, not coordination.
* Sources: :func:`assign_watermarks` turns an ordinary stream into a watermarked one.  It is
  the one place where the system frontier is read (it is the boundary between the two worlds,
  like a Flink source that knows its input's progress): on every change of its input frontier
  it emits the frontier's minimum as a watermark.  :class:`WatermarkInput` instead wraps an
  input handle and injects markers in-band on every ``advance_to``.  Closing the input sends the
  final watermark :data:`END`.
* Completion: :meth:`WStream.probe` is a sink that tracks the watermark reaching it
  (``less_than(t)``: data before ``t`` may still come), learning it from markers only.

Times are integers (Flink's watermarks are event-time longs).  Watermark time ``w`` means the
same as a frontier ``{w}``: times ``>= w`` may still appear.  ``WatermarkStats`` counts
invocations and markers per operator, which is how the tests show the ``L * P * P`` growth.

Where data are partitioned, the pact of every exchanged edge is :class:`WatermarkExchange`:
data records go by key (as :class:`~pytimely.dataflow.Exchange`), each marker goes to the worker
it names.  Counts stay exact (a marker record is one record, consumed once), so progress
tracking is not disturbed by the broadcast.
"""

from __future__ import annotations

import heapq
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple, Self

from ...progress.operate import FrontierInterest
from ..pacts import Exchange, Pipeline, open_channel
from .generic import OperatorBuilder, unary, unary_frontier

if TYPE_CHECKING:
    from ..capability import Capability
    from ..operator import OperatorInfo
    from ..ports import InputPort, OutputPort
    from ..scope import Scope
    from ..services import WorkerServices
    from ..stream import Stream

__all__ = [
    "END",
    "EventTimeTimers",
    "Markers",
    "WStream",
    "Watermark",
    "WatermarkExchange",
    "WatermarkInput",
    "WatermarkProbe",
    "WatermarkStats",
    "assign_watermarks",
    "watermark_input",
]

END = sys.maxsize
"""The final watermark: no more data at all (sent when a source closes)."""

_NEVER = FrontierInterest.NEVER


class Watermark(NamedTuple):
    """A marker: worker ``src`` promises worker ``dst`` no more data before ``time``."""

    time: int
    src: int
    dst: int


class Markers(tuple):
    """A batch of :class:`Watermark` markers (a tuple subclass: shared, never copied)."""

    __slots__ = ()


# ---------------------------------------------------------------------------------------------
# Statistics


class OpStats:
    """Per operator instance: invocations, markers received (for this worker) and sent,
    watermark advances, and the current output watermark."""

    __slots__ = ("advances", "invocations", "markers_in", "markers_out", "name", "watermark")

    def __init__(self, name: str) -> None:
        self.name = name
        self.invocations = 0
        self.markers_in = 0
        self.markers_out = 0
        self.advances = 0
        self.watermark = 0

    def as_dict(self) -> dict[str, Any]:
        return {s: getattr(self, s) for s in self.__slots__}

    def __repr__(self) -> str:
        return f"OpStats({self.as_dict()!r})"


class WatermarkStats:
    """Watermark traffic of one watermarked dataflow on one worker."""

    def __init__(self) -> None:
        self.ops: dict[str, OpStats] = {}

    def op(self, name: str) -> OpStats:
        """Register and return the stats of a new operator instance named ``name``.

        A name already taken gets a suffix: ``#2``, ``#3``, ...
        """
        st = OpStats(name)
        key = name
        n = 1
        while key in self.ops:
            n += 1
            key = f"{name}#{n}"
        self.ops[key] = st
        return st

    @property
    def markers_in(self) -> int:
        """Markers received by this worker, summed over the dataflow's operators."""
        return sum(s.markers_in for s in self.ops.values())

    @property
    def markers_out(self) -> int:
        """Markers sent by this worker, summed over the dataflow's operators."""
        return sum(s.markers_out for s in self.ops.values())

    @property
    def invocations(self) -> int:
        """Invocations of this worker's operator instances, summed over the dataflow."""
        return sum(s.invocations for s in self.ops.values())

    def summary(self) -> dict[str, int]:
        """The dataflow's totals on this worker: operators, invocations, markers in and out."""
        return {
            "operators": len(self.ops),
            "invocations": self.invocations,
            "markers_in": self.markers_in,
            "markers_out": self.markers_out,
        }

    def __repr__(self) -> str:
        return f"WatermarkStats({self.summary()!r})"


# ---------------------------------------------------------------------------------------------
# The pact of exchanged watermarked edges


class WatermarkExchange(Exchange):
    """Data by ``key`` (``None``: data stay on this worker), markers to the worker they name."""

    def __init__(self, key: Callable[[Any], Any] | None = None) -> None:
        super().__init__(key)

    def connect(
        self, worker: WorkerServices, push: Callable[[Any, Any], None], consumer: str = "?"
    ) -> Callable[[Any, Any], None]:
        """See :meth:`Pact.connect`: data by ``key``, each marker to the worker it names.

        A marker travels alone in its batch; without ``key`` data stay on this worker.
        """
        channel = open_channel(worker, push)
        if worker.peers == 1:
            if self.key is None:
                return push
            data = self.pusher(worker, channel, push, consumer)

            def checked(t: Any, batch: Any) -> None:  # markers are not keyed records
                (push if type(batch) is Markers else data)(t, batch)

            return checked
        send = worker.allocator.send
        me = worker.index
        if self.key is None:
            data, send_held = push, _nothing_held
        else:
            holder = self.exchange_pusher(worker, channel, push, consumer)
            data, send_held = holder.push, holder.send_held

        def pusher(t: Any, batch: Any) -> None:
            if type(batch) is Markers:
                send_held()  # a marker must not overtake the data sent before it
                for m in batch:
                    if m.dst == me:
                        push(t, Markers((m,)))
                    else:
                        send(channel, m.dst, (t, Markers((m,))))
            else:
                data(t, batch)

        return pusher

    def __repr__(self) -> str:
        return "WatermarkExchange"


def _nothing_held() -> None:
    """The data of an edge without a key stay on this worker: nothing is held back."""


def _pact(key: Any) -> Any:
    return Pipeline if key is None else WatermarkExchange(key)


# ---------------------------------------------------------------------------------------------
# Watermarked streams and operators


class WStream:
    """A watermarked stream: the underlying timely ``stream`` (data and marker batches), the
    dataflow's :class:`WatermarkStats`, and whether any consumer exchanges (then markers are
    broadcast to every worker)."""

    __slots__ = ("_fanout", "stats", "stream")

    def __init__(self, stream: Stream, stats: WatermarkStats) -> None:
        self.stream = stream
        self.stats = stats
        self._fanout = [False]  # set by consumers at build time, read by the producer at run time

    @property
    def scope(self) -> Any:
        """The scope of the underlying timely stream."""
        return self.stream.scope

    def _consumed_by(self, key_or_flag: Any) -> None:
        if key_or_flag is not None and key_or_flag is not False:
            self._fanout[0] = True

    # -- generic operators ------------------------------------------------------------------

    def process(
        self,
        on_data: Callable[[Any], Any] | None,
        on_watermark: Callable[[int], Any] | None = None,
        key: Callable[[Any], Any] | None = None,
        name: str = "WProcess",
    ) -> WStream:
        """A (keyed) stateful operator.

        ``key``: exchange the input by ``key(record)`` (``None``: pipelined, this worker only).
        ``on_data(batch)`` returns records to send now at the batch's timestamp (or ``None``).
        ``on_watermark(w)`` is called whenever the input watermark advances to ``w``, before
        ``w`` is forwarded; it returns records to send (or ``None``): event-time timers fire
        here (see :class:`EventTimeTimers`).
        """
        handler = None if on_data is None else (lambda _i, batch: on_data(batch))
        return _operator(name, [(self, key)], handler, on_watermark)

    def process2(
        self,
        other: WStream,
        on_data: Callable[[int, Any], Any] | None,
        on_watermark: Callable[[int], Any] | None = None,
        key1: Callable[[Any], Any] | None = None,
        key2: Callable[[Any], Any] | None = None,
        name: str = "WProcess2",
    ) -> WStream:
        """Two inputs: ``on_data(port, batch)`` with ``port`` 0 or 1; the input watermark is the
        minimum over both inputs' channels."""
        return _operator(name, [(self, key1), (other, key2)], on_data, on_watermark)

    def map(self, f: Callable[[Any], Any], key: Any = None, name: str = "WMap") -> WStream:
        """Apply ``f`` to every record (exchanged by ``key`` if given), forwarding the watermark."""
        return self.process(lambda batch: [f(x) for x in batch], None, key, name)

    def map_batch(
        self, f: Callable[[Any], Any], key: Any = None, name: str = "WMapBatch"
    ) -> WStream:
        """``f(batch) -> batch`` (may return an empty batch)."""
        return self.process(f, None, key, name)

    def flat_map(
        self, f: Callable[[Any], Iterable[Any]], key: Any = None, name: str = "WFlatMap"
    ) -> WStream:
        """Replace every record by the records ``f(record)`` yields, forwarding the watermark."""
        return self.process(lambda batch: [y for x in batch for y in f(x)], None, key, name)

    def filter(self, p: Callable[[Any], bool], key: Any = None, name: str = "WFilter") -> WStream:
        """Keep the records for which ``p`` holds, forwarding the watermark."""
        return self.process(lambda batch: [x for x in batch if p(x)], None, key, name)

    def noop(self, key: Any = None, name: str = "WNoop") -> WStream:
        """Forward data unchanged (exchanged by ``key`` if given) and, like every watermark
        operator, the watermark: the building block of section 7.3's chains."""
        return self.process(_identity, None, key, name)

    # -- leaving the watermark world ----------------------------------------------------------

    def data(self, name: str = "WData") -> Stream:
        """The data without the markers, as an ordinary stream (at the data's timestamps).  Its
        frontier is correct because every watermark operator holds a token at its output
        watermark."""

        def ctor(cap: Capability, info: OperatorInfo) -> Callable[..., None]:
            cap.drop()

            def logic(inp: InputPort, out: OutputPort) -> None:
                for ref, batch in inp:
                    if type(batch) is not Markers:
                        out.session(ref).give_batch(batch)

            return logic

        return unary(self.stream, Pipeline, name, ctor)

    def probe(
        self, all_workers: bool = False, name: str = "WProbe", handle: WatermarkProbe | None = None
    ) -> WatermarkProbe:
        """A sink tracking the watermark that reaches it.  ``all_workers``: the probe wants
        every worker's markers (the upstream operator then broadcasts them), so it reflects
        global progress; otherwise it sees its own worker's upstream instance only.  Returns
        ``handle`` (a new :class:`WatermarkProbe` by default)."""
        handle = handle if handle is not None else WatermarkProbe()
        stats = self.stats.op(name)
        if all_workers:
            self._fanout[0] = True
        pact = WatermarkExchange(None) if all_workers else Pipeline

        def ctor(caps: list[Capability], info: OperatorInfo) -> Callable[..., None]:
            me, peers = info.worker_index, info.peers
            latest = dict.fromkeys(range(peers) if all_workers else (me,), 0)

            def logic(inp: InputPort) -> None:
                stats.invocations += 1
                for _ref, batch in inp:
                    if type(batch) is Markers:
                        for m in batch:
                            if m.dst == me:
                                stats.markers_in += 1
                                latest[m.src] = max(latest[m.src], m.time)
                        w = min(latest.values())
                        if w > handle.watermark:
                            handle.watermark = w
                            stats.watermark = w
                            stats.advances += 1
                    else:
                        handle.records += len(batch)

            return logic

        b = OperatorBuilder(name, self.scope)
        b.new_input(self.stream, pact, interest=_NEVER)
        b.build(ctor)
        return handle

    def __repr__(self) -> str:
        return f"<WStream from {self.stream.source}>"


def _forward(
    new: int, state: list[Any], st: Any, fanout: bool, me: int, peers: int, out: OutputPort
) -> None:
    """Move the held token (``state[1]``) to watermark ``new`` and send the marker: to every
    worker when a consumer exchanges, else to this worker only; drop the token at ``END``."""
    tok = state[1]
    state[0] = new
    st.advances += 1
    st.watermark = new
    dsts = range(peers) if fanout else (me,)
    tok.downgrade(new)
    out.session(tok).give_batch(Markers(Watermark(new, me, d) for d in dsts))
    st.markers_out += len(dsts)
    if new >= END:
        tok.drop()
        state[1] = None


def _identity(batch: Any) -> Any:
    return batch


def _operator(
    name: str,
    inputs: list[tuple[WStream, Any]],
    on_data: Callable[[int, Any], Any] | None,
    on_watermark: Callable[[int], Any] | None,
) -> WStream:
    """The one watermark operator: inputs ``[(wstream, key or None)]``, one output."""
    first = inputs[0][0]
    scope = first.scope
    stats = first.stats
    builder = OperatorBuilder(name, scope)
    for ws, key in inputs:
        ws._consumed_by(key)
        builder.new_input(ws.stream, _pact(key), interest=_NEVER)
    builder.new_output()
    keys = [key for _ws, key in inputs]
    n_in = len(inputs)
    holder: list[WStream] = []

    def ctor(caps: list[Capability], info: OperatorInfo) -> Callable[..., None]:
        token = caps[0]  # the output watermark's token, at the minimum time
        me, peers = info.worker_index, info.peers
        st = stats.op(name)
        latest = [dict.fromkeys(range(peers) if k is not None else (me,), 0) for k in keys]
        in_wm = [0] * n_in
        state: list[Any] = [0, token]  # output watermark, its token (None after END)

        def logic(*ports: Any) -> None:
            st.invocations += 1
            out = ports[n_in]
            for i in range(n_in):
                for ref, batch in ports[i]:
                    if type(batch) is Markers:
                        lat = latest[i]
                        for m in batch:
                            if m.dst == me:
                                st.markers_in += 1
                                lat[m.src] = max(lat[m.src], m.time)
                        in_wm[i] = min(lat.values())
                    elif on_data is not None:
                        res = on_data(i, batch)
                        if res is not None and len(res):
                            out.session(ref).give_batch(res)
            new = in_wm[0] if n_in == 1 else min(in_wm)
            if new > state[0]:
                tok = state[1]
                if on_watermark is not None:
                    res = on_watermark(new)
                    if res is not None and len(res):
                        out.session(tok).give_batch(res)  # at the previous output watermark
                _forward(new, state, st, holder[0]._fanout[0], me, peers, out)

        return logic

    # ``holder`` is filled before any logic runs (logic runs only after the build).
    out = WStream.__new__(WStream)
    holder.append(out)
    stream = builder.build(ctor)[0]
    WStream.__init__(out, stream, stats)
    return out


# ---------------------------------------------------------------------------------------------
# Sources


def assign_watermarks(
    stream: Stream, name: str = "AssignWatermarks", stats: WatermarkStats | None = None
) -> WStream:
    """An ordinary stream as a watermarked one: data pass unchanged (any batch type); whenever
    the input frontier advances, its minimum (``END`` once empty) is emitted as a watermark.
    This source adapter is the only watermark operator that reads a system frontier.

    >>> import pytimely as pt
    >>> pt.example(lambda s: s.to_stream([1]).assign_watermarks().stream.capture()).extract()
    [(0, [1]), (9223372036854775807, [Watermark(time=9223372036854775807, src=0, dst=0)])]
    """
    stats = stats if stats is not None else WatermarkStats()
    holder: list[WStream] = []

    def ctor(cap: Capability, info: OperatorInfo) -> Callable[..., None]:
        me, peers = info.worker_index, info.peers
        st = stats.op(name)
        state: list[Any] = [0, cap]

        def logic(inp: InputPort, out: OutputPort) -> None:
            st.invocations += 1
            for ref, batch in inp:
                out.session(ref).give_batch(batch)
            if state[1] is None:
                return
            els = inp.frontier.elements()
            new = els[0] if els else END
            if new > state[0]:
                _forward(new, state, st, holder[0]._fanout[0], me, peers, out)

        return logic

    out = WStream.__new__(WStream)
    holder.append(out)
    s = unary_frontier(stream, Pipeline, name, ctor, interest=FrontierInterest.ALWAYS)
    WStream.__init__(out, s, stats)
    return out


class WatermarkInput:
    """An input handle that injects watermarks in-band: ``advance_to(t)`` sends the marker
    ``t`` (to every downstream worker if the stream is exchanged) right after advancing;
    ``close()`` sends :data:`END` and closes the input."""

    __slots__ = ("_me", "_peers", "_stats", "handle", "wstream")

    def __init__(self, handle: Any, wstream: WStream, me: int, peers: int, stats: OpStats) -> None:
        self.handle = handle
        self.wstream = wstream
        self._me = me
        self._peers = peers
        self._stats = stats
        # However the handle is closed (by us, or by the worker leaving its function): END first.
        handle.on_close(self._send_end)

    @property
    def time(self) -> Any:
        """The handle's current time: the last watermark sent; records sent now carry it."""
        return self.handle.time

    def send(self, record: Any) -> None:
        """Send ``record`` at the current time (see :meth:`InputHandle.send`)."""
        self.handle.send(record)

    def send_batch(self, batch: Any) -> None:
        """Send every record of ``batch`` at the current time."""
        self.handle.send_batch(batch)

    def flush(self) -> None:
        """Push the records buffered in the handle downstream now (no watermark is sent)."""
        self.handle.flush()

    def _mark(self, t: int) -> None:
        dsts = range(self._peers) if self.wstream._fanout[0] else (self._me,)
        self.handle.send_batch(Markers(Watermark(t, self._me, d) for d in dsts))
        self._stats.markers_out += len(dsts)
        self._stats.advances += 1
        self._stats.watermark = t

    def advance_to(self, t: int) -> None:
        """Advance to ``t`` and send the marker ``t`` in-band (no-op if already at ``t``)."""
        if t == self.handle.time:
            return
        self.handle.advance_to(t)
        self._mark(t)

    def close(self) -> None:
        """Close the input; the :data:`END` marker goes out first, firing every timer."""
        self.handle.close()  # sends END first (``_send_end``, the handle's on_close callback)

    def _send_end(self) -> None:
        if self.handle.time != END:
            self.handle.advance_to(END)
            self._mark(END)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def watermark_input(
    scope: Scope, name: str = "WatermarkInput", stats: WatermarkStats | None = None
) -> tuple[WatermarkInput, WStream]:
    """A new input whose stream is watermarked by the handle itself (see
    :class:`WatermarkInput`)."""
    stats = stats if stats is not None else WatermarkStats()
    handle, stream = scope.new_input()
    ws = WStream(stream, stats)
    wi = WatermarkInput(handle, ws, scope.index, scope.peers, stats.op(name))
    return wi, ws


# ---------------------------------------------------------------------------------------------
# Completion and timers


class WatermarkProbe:
    """The watermark that reached a :meth:`WStream.probe` sink (learned from markers only)."""

    __slots__ = ("records", "watermark")

    def __init__(self) -> None:
        self.watermark = 0
        self.records = 0

    def less_than(self, t: int) -> bool:
        """Data before ``t`` may still arrive (the watermark has not reached ``t``)."""
        return self.watermark < t

    def less_equal(self, t: int) -> bool:
        """Data at ``t`` may still arrive (the watermark has not passed ``t``)."""
        return self.watermark <= t

    def done(self) -> bool:
        """Whether the :data:`END` marker has arrived: no data at all can come any more."""
        return self.watermark >= END

    def __repr__(self) -> str:
        return f"WatermarkProbe(watermark={self.watermark!r})"


class EventTimeTimers:
    """Flink's event-time timer service, per operator instance: ``register(t, item)`` and, when
    the watermark advances to ``w``, ``due(w)`` pops every item whose timer time is ``< w``
    (complete: no data before ``w`` can come) in time order; ``due(w, inclusive=True)`` also
    pops those at ``w``.  Items with equal times come out in insertion order."""

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Any]] = []
        self._seq = 0

    def register(self, t: int, item: Any = None) -> None:
        """Set a timer at ``t`` carrying ``item``, popped by :meth:`due` once it is complete."""
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, item))

    def due(self, w: int, inclusive: bool = False) -> list[tuple[int, Any]]:
        """Pop the timers complete at watermark ``w``, as ``(time, item)`` in time order.

        Complete means a time ``< w``; with ``inclusive``, ``<= w``.
        """
        heap = self._heap
        out = []
        if inclusive:
            while heap and heap[0][0] <= w:
                t, _s, item = heapq.heappop(heap)
                out.append((t, item))
        else:
            while heap and heap[0][0] < w:
                t, _s, item = heapq.heappop(heap)
                out.append((t, item))
        return out

    def peek(self) -> int | None:
        """The earliest pending timer's time, or ``None`` when no timer is set."""
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)
