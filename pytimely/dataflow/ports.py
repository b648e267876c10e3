"""An operator's ports: what its logic reads from and sends to.

* :class:`InputPort` — iterating it yields ``(CapabilityRef, batch)`` pairs and records what
  was consumed; ``frontier`` (a :class:`Frontier`) says which times may still arrive.  A
  message may be a :class:`Bundle` (many times, counted once), handed out as its parts.
* :class:`OutputPort` — ``session(cap)`` (or ``give``/``give_batch``) sends data; every send is
  checked against a capability for that output and counted.  ``forward(t, batch)`` is the
  library's unchecked fast path (see its docstring for when it is legal).  Its fan-out point is
  a :class:`Tee`.
* :class:`CountingInputPort` / :class:`CountingOutputPort` — the observed variants, which also
  count records and batches (see :meth:`~pytimely.dataflow.operator.OperatorCore.observe`).

Counting invariants (what makes frontiers correct):

* a batch of ``n`` records consumed at ``t`` on input ``i`` adds ``(t, n)`` to
  ``shared.consumeds[i]`` *when it is handed to the logic*;
* a batch of ``n > 0`` records sent at ``t`` on output ``o`` adds ``(t, n)`` to
  ``shared.produceds[o]`` when it is pushed downstream; empty batches are never pushed (an
  empty message would create a count nobody ever consumes);
* capability changes go to ``shared.internals[o]``.

All of it is drained by the scope after the logic returns, as one atomic batch.  This module is
internal: operators are made with the builders of :mod:`pytimely.dataflow.operators.generic`,
which hand the logic its ports.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from ..progress.antichain import MutableAntichain
from .capability import Capability, CapabilityRef, send_time

if TYPE_CHECKING:
    from ..progress.change_batch import ChangeBatch
    from .operator import OperatorCore

__all__ = [
    "Frontier",
    "Bundle",
    "InputPort",
    "Tee",
    "OutputPort",
    "Session",
    "BATCH",
]


BATCH = 1024
"""Records buffered per time before they are pushed downstream (sessions and input handles)."""


class Frontier:
    """Read-only view of an input's frontier: the times that may still arrive."""

    __slots__ = ("_m",)

    def __init__(self, m: MutableAntichain) -> None:
        self._m = m

    def less_equal(self, t: Any) -> bool:
        """``t`` may still arrive (some frontier element is ``<= t``)."""
        return self._m.less_equal(t)

    def less_than(self, t: Any) -> bool:
        """Some frontier element is strictly before ``t``."""
        return self._m.less_than(t)

    def is_empty(self) -> bool:
        """No more data can ever arrive."""
        return self._m.is_empty()

    def int_bound(self) -> float | None:
        """For a frontier of one ``int`` element ``f``: ``f`` (so ``not less_than(t)`` is
        ``t <= f`` and ``not less_equal(t)`` is ``t < f``); ``math.inf`` for an empty one;
        ``None`` for any other.  Lets an operator that releases many times compare ints
        instead of asking the frontier once per time."""
        elements = self._m.frontier_list()
        if not elements:
            return math.inf
        if len(elements) == 1 and type(elements[0]) is int:
            return elements[0]
        return None

    def elements(self) -> list[Any]:
        """The frontier's elements, sorted."""
        return sorted(self._m.frontier_list())

    def __iter__(self) -> Iterator[Any]:
        return iter(sorted(self._m.frontier_list()))

    def __len__(self) -> int:
        return len(self._m.frontier_list())

    def __bool__(self) -> bool:
        return not self._m.is_empty()

    def __repr__(self) -> str:
        return f"Frontier({self.elements()!r})"


_UNBOUND_FRONTIER = MutableAntichain()
"""The frontier every input reads until its scope is built and binds it to the tracker's live
antichain (``InputPort.bind_frontier``): empty, shared, and never updated."""


class Bundle:
    """Several ``(time, batch)`` messages delivered as **one** message at the least of their
    times (:meth:`OutputPort.give_timed` into a pipeline), counted once by progress tracking:
    ``len`` is the number of records.  Input ports hand the parts out at their own times.

    Why this is safe: while the bundle is in flight, its count at the least time holds every
    downstream frontier at or before that time, hence before every part's time; the operator
    that takes it may send at each part's time because that time is at or after the
    message's (as if it had ``delayed`` the message's capability).  The consumption of the
    bundle and whatever the operator does with its parts are reported together, after the
    invocation.  What it saves: a progress count per distinct time, which for results at
    millisecond times (session ends) is most of what a message costs.
    """

    __slots__ = ("parts", "n")

    def __init__(self, parts: list[tuple[Any, Any]], n: int) -> None:
        self.parts = parts
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return f"<Bundle of {len(self.parts)} messages, {self.n} records>"


_first = itemgetter(0)
_second = itemgetter(1)


def _unbundled(queue: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """``queue`` with every :class:`Bundle` replaced by its parts."""
    if len(queue) == 1 and type(queue[0][1]) is Bundle:
        return queue[0][1].parts  # one bundle: its parts, not a copy
    out: list[tuple[Any, Any]] = []
    for t, batch in queue:
        if type(batch) is Bundle:
            out.extend(batch.parts)
        else:
            out.append((t, batch))
    return out


class InputPort:
    """An operator input: a FIFO of ``(time, batch)`` messages plus the input frontier
    (a message may be a :class:`Bundle`, handed out as its parts)."""

    __slots__ = ("op", "index", "queue", "_frontier", "consumed", "records", "batches", "bundled")

    def __init__(self, op: OperatorCore, index: int) -> None:
        self.op = op
        self.index = index
        self.queue: list[tuple[Any, Any]] = []
        self._frontier = _UNBOUND_FRONTIER
        self.consumed = op.shared.consumeds[index]
        # Records and batches taken by the logic, counted only by ``CountingInputPort``
        # (see ``OperatorCore.observe``).
        self.records = 0
        self.batches = 0
        self.bundled = False  # whether the queue may hold a Bundle

    @property
    def frontier(self) -> Frontier:
        """The times that may still arrive on this input."""
        return Frontier(self._frontier)

    @property
    def op_name(self) -> str:
        """The name of the operator this input belongs to (for error messages)."""
        return self.op.name

    def frontier_elements(self) -> tuple[Any, ...]:
        """The frontier's elements, unsorted and without a copy: the live tuple, replaced
        (never mutated) when the frontier next changes.  For operators that compare it with
        what they last saw on every activation (probe, capture)."""
        return self._frontier.frontier_list()

    def bind_frontier(self, frontier: MutableAntichain) -> None:
        """Read this input's frontier from ``frontier`` (the scope tracker's live antichain)
        from now on (see ``Operate.bind_frontiers``)."""
        self._frontier = frontier

    def push(self, t: Any, batch: Any) -> None:
        """Deliver a message (called by channels) and wake the operator."""
        self.queue.append((t, batch))
        self.op.activate()

    def push_bundle(self, t: Any, bundle: Bundle) -> None:
        """Deliver a :class:`Bundle` (one message at ``t``, the least of its parts' times)."""
        self.bundled = True
        self.queue.append((t, bundle))
        self.op.activate()

    def __iter__(self) -> Iterator[tuple[CapabilityRef, Any]]:
        consumed = self.consumed
        refs = self.op._refs
        while self.queue:
            queue, self.queue = self.queue, []
            for t, batch in queue:
                consumed.update(t, len(batch))
                if type(batch) is Bundle:
                    for part_t, part in batch.parts:
                        ref = CapabilityRef(part_t, self)
                        refs.append(ref)
                        yield ref, part
                    continue
                ref = CapabilityRef(t, self)
                refs.append(ref)
                yield ref, batch

    def next(self) -> tuple[CapabilityRef, Any] | None:
        """The next message, or ``None``."""
        if not self.queue:
            return None
        t, batch = self.queue.pop(0)
        self.consumed.update(t, len(batch))
        if type(batch) is Bundle:
            # Consumed whole: the rest goes back as a bundle that counts nothing more.
            (t, batch), *rest = batch.parts
            if rest:
                self.queue.insert(0, (t, Bundle(rest, 0)))
        ref = CapabilityRef(t, self)
        self.op._refs.append(ref)
        return ref, batch

    def drain_batches(self) -> list[tuple[Any, Any]]:
        """Take every queued ``(time, batch)``, recording consumption, without capability
        refs (for operators that forward data at its own time or never send)."""
        queue = self.queue
        if not queue:
            return []  # not ``queue``: the caller may keep what it got, and we refill it
        self.queue = []
        consumed = self.consumed
        for t, batch in queue:
            consumed.update(t, len(batch))
        if self.bundled:
            self.bundled = False
            return _unbundled(queue)
        return queue

    def take_all(self) -> tuple[CapabilityRef | None, list[tuple[Any, Any]]]:
        """Every queued ``(time, batch)`` and one :class:`CapabilityRef` at the least of
        their times (``None`` when nothing is queued), valid during this call like any
        other: for operators that hold one token for many times (seed 004, section 6.2) and
        would otherwise pay a ref per message.  Times must be totally ordered."""
        queue = self.drain_batches()
        if not queue:
            return None, queue
        least = min(map(_first, queue))
        ref = CapabilityRef(least, self)
        self.op._refs.append(ref)
        return ref, queue

    def counts(self) -> tuple[int, int]:
        """``(records, batches)`` taken by the logic since :meth:`OperatorCore.observe`
        (from this worker and, through an Exchange, from the others)."""
        return self.records, self.batches


class CountingInputPort(InputPort):
    """An :class:`InputPort` that also counts what the logic takes (``records``, ``batches``),
    where it records consumption anyway.  The methods repeat the base ones rather than call
    them: an extra Python frame per batch would cost more than the counting."""

    __slots__ = ()

    def __iter__(self) -> Iterator[tuple[CapabilityRef, Any]]:
        consumed = self.consumed
        refs = self.op._refs
        while self.queue:
            queue, self.queue = self.queue, []
            for t, batch in queue:
                n = len(batch)
                consumed.update(t, n)
                self.records += n
                self.batches += 1
                ref = CapabilityRef(t, self)
                refs.append(ref)
                yield ref, batch

    def next(self) -> tuple[CapabilityRef, Any] | None:
        if not self.queue:
            return None
        t, batch = self.queue.pop(0)
        n = len(batch)
        self.consumed.update(t, n)
        self.records += n
        self.batches += 1
        ref = CapabilityRef(t, self)
        self.op._refs.append(ref)
        return ref, batch

    def drain_batches(self) -> list[tuple[Any, Any]]:
        queue = self.queue
        if not queue:
            return []  # not ``queue``: the caller may keep what it got, and we refill it
        self.queue = []
        consumed = self.consumed
        records = 0
        for t, batch in queue:
            n = len(batch)
            consumed.update(t, n)
            records += n
        self.records += records
        self.batches += len(queue)
        return queue


class _Tap:
    """What :meth:`Tee.add` returns: ``tap(wrap)`` replaces one consumer by ``wrap(consumer)``.
    (An object, not a closure: every edge of every dataflow keeps one, and a closure with its
    cells costs three times the memory.)"""

    __slots__ = ("tee", "slot")

    def __init__(self, tee: Tee, slot: int) -> None:
        self.tee = tee
        self.slot = slot

    def __call__(self, wrap: Callable[[Any], Any]) -> None:
        self.tee.replace(self.slot, wrap)


class Tee:
    """The fan-out point of an output: every consumer receives every batch."""

    __slots__ = ("consumers",)

    def __init__(self) -> None:
        self.consumers: list[Callable[[Any, Any], None]] = []

    def add(self, push: Callable[[Any, Any], None]) -> Callable[[Any], None]:
        """Make ``push`` a consumer; returns its *tap*: ``tap(wrap)`` replaces the consumer by
        ``wrap(push)`` (how logging observes one edge without a test on every push)."""
        self.consumers.append(push)
        return _Tap(self, len(self.consumers) - 1)

    def replace(self, slot: int, wrap: Callable[[Any], Any]) -> None:
        """Replace consumer ``slot`` by ``wrap(consumer)``."""
        self.consumers[slot] = wrap(self.consumers[slot])

    def push(self, t: Any, batch: Any) -> None:
        """Hand the message ``(t, batch)`` to every consumer, in the order they were added."""
        consumers = self.consumers
        if len(consumers) == 1:
            consumers[0](t, batch)
        elif consumers:
            for c in consumers[:-1]:
                c(t, batch.copy() if isinstance(batch, list) else batch)
            consumers[-1](t, batch)


class OutputPort:
    """An operator output: counts and pushes batches, guarded by capabilities."""

    __slots__ = (
        "op",
        "index",
        "internals",
        "produced",
        "tee",
        "_buf_time",
        "_buf",
        "records",
        "batches",
    )

    def __init__(self, op: OperatorCore, index: int) -> None:
        self.op = op
        self.index = index
        self.internals: ChangeBatch = op.shared.internals[index]
        self.produced: ChangeBatch = op.shared.produceds[index]
        self.tee = Tee()
        self._buf_time: Any = None
        self._buf: list[Any] | None = None
        # Records and batches sent, counted only by ``CountingOutputPort``.
        self.records = 0
        self.batches = 0

    @property
    def op_name(self) -> str:
        """The name of the operator this output belongs to (for error messages)."""
        return self.op.name

    def activate(self) -> None:
        """Ask the scope to schedule the operator this output belongs to."""
        self.op.activate()

    @property
    def connected(self) -> bool:
        """Whether anything reads this output (an operator, a probe, a capture): a
        pass-through sink whose output nobody reads may skip building what it would send."""
        return bool(self.tee.consumers)

    # -- checks ---------------------------------------------------------------------------

    # Checks a send against a capability: defined beside the tokens it inspects (it is a
    # plain method: no extra call per send).
    _check = send_time

    # -- sending --------------------------------------------------------------------------

    def session(self, cap: Capability | CapabilityRef, time: Any = None) -> Session:
        """A session sending at ``time`` (default: the capability's time)."""
        return Session(self, self._check(cap, time))

    def give(self, cap: Capability | CapabilityRef, record: Any, time: Any = None) -> None:
        """Send ``record`` at ``time`` (default: the time of ``cap``, which must allow it).

        Buffered: records go out in batches of :data:`BATCH`, and at the end of the invocation.
        """
        self._give_at(self._check(cap, time), record)

    def give_batch(self, cap: Capability | CapabilityRef, batch: Any, time: Any = None) -> None:
        """Send a whole batch (a list, numpy array or Arrow batch) without copying it."""
        t = self._check(cap, time)
        if self._buf:
            self.flush()
        self.forward(t, batch)

    def give_timed(
        self,
        cap: Capability | CapabilityRef,
        batches: list[tuple[Any, Any]],
        records: int | None = None,
    ) -> None:
        """Send many ``(time, batch)`` pairs, in the given order, with one token: every time
        must be at or after the token's (checked once, against the least of them).  The many
        small messages of an operator that releases results at many times (windows and
        sessions at their own end times) cost a counter update and a push each, not a check
        and a call each.  ``records``: how many records the batches hold, when the caller
        counted them (then none of the batches may be empty); saves two passes over them."""
        sent = batches
        if records is None and not all(map(len, map(_second, batches))):
            sent = [(t, batch) for t, batch in batches if len(batch)]
        if not sent:
            return
        least = min(map(_first, sent))
        self._check(cap, least)
        if not self.tee.consumers:
            return  # nobody reads this output (a sink's pass-through): no edge to count on
        if self._buf:
            self.flush()
        if type(self) is not OutputPort:  # a counting port counts in ``forward``
            for t, batch in sent:
                self.forward(t, batch)
            return
        produced = self.produced
        consumers = self.tee.consumers
        push = consumers[0] if len(consumers) == 1 else self.tee.push
        # A pipeline straight into one (unobserved) operator's input takes them all as one
        # message at the least time, counted once (see Bundle).
        port = getattr(push, "__self__", None)
        if type(port) is InputPort and len(sent) > 1:
            n = sum(map(len, map(_second, sent))) if records is None else records
            produced.update(least, n)
            port.push_bundle(least, Bundle(sent, n))
            return
        for t, batch in sent:
            produced.update(t, len(batch))
            push(t, batch)

    def _give_at(self, t: Any, record: Any) -> None:
        buf = self._buf
        if buf is None or self._buf_time != t:
            if buf:
                self.flush()
            self._buf_time = t
            buf = self._buf = []
        buf.append(record)
        if len(buf) >= BATCH:
            self.flush()

    def forward(self, t: Any, batch: Any) -> None:
        """Send ``batch`` at ``t`` with no capability check: the fast path of the library's
        own operators (no buffering either; an empty batch is not sent).

        Legal only when the operator provably holds a capability for ``t`` on this output
        during the current invocation, as in:

        * forwarding a message received in this invocation at its own time ``t`` (or at
          ``summary(t)``) on an output the input reaches with that summary — the message's
          own :class:`CapabilityRef` would allow it;
        * sending at the time of a :class:`Capability` for this output that the caller holds.

        Anything else breaks the progress invariant (a record at a time whose pointstamp
        nobody holds) without an error; user logic uses ``session``/``give``, which check.
        Flush buffered session output first if order matters (``give_batch`` does).
        """
        n = len(batch)
        if not n:
            return
        self.produced.update(t, n)
        consumers = self.tee.consumers
        if len(consumers) == 1:  # the common case, without the fan-out's own call
            consumers[0](t, batch)
        else:
            self.tee.push(t, batch)

    def flush(self) -> None:
        """Send what ``give`` and sessions buffered; done after every invocation."""
        buf = self._buf
        if buf:
            self._buf = None
            self.forward(self._buf_time, buf)

    def counts(self) -> tuple[int, int]:
        """``(records, batches)`` sent since :meth:`OperatorCore.observe` (each batch
        once, however many consumers it goes to)."""
        return self.records, self.batches


class CountingOutputPort(OutputPort):
    """An :class:`OutputPort` that also counts what it sends (``records``, ``batches``), in
    ``forward``, the one frame every sent batch passes through (it repeats the base method
    rather than call it: see :class:`CountingInputPort`)."""

    __slots__ = ()

    def forward(self, t: Any, batch: Any) -> None:
        n = len(batch)
        if not n:
            return
        self.produced.update(t, n)
        self.records += n
        self.batches += 1
        consumers = self.tee.consumers
        if len(consumers) == 1:
            consumers[0](t, batch)
        else:
            self.tee.push(t, batch)


class Session:
    """Sending at one time on one output (obtained from ``OutputPort.session``)."""

    __slots__ = ("_port", "time")

    def __init__(self, port: OutputPort, time: Any) -> None:
        self._port = port
        self.time = time

    def give(self, record: Any) -> None:
        """Send one ``record`` at the session's time (buffered)."""
        self._port._give_at(self.time, record)

    def give_batch(self, batch: Any) -> None:
        """Send a whole batch at the session's time, uncopied, after the buffered records."""
        port = self._port
        if port._buf:
            port.flush()
        port.forward(self.time, batch)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._port.flush()
