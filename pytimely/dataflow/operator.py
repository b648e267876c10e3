"""Operators built from user logic: ports, sessions, and the runtime core.

An operator is a constructor that receives its initial capabilities (one per output, at the
minimum time) and returns the *logic*, a function the worker calls whenever the operator is
scheduled.  This module holds the runtime pieces the logic touches:

* :class:`InputPort` — iterating it yields ``(CapabilityRef, batch)`` pairs and records what
  was consumed; ``frontier`` says which times may still arrive.
* :class:`OutputPort` — ``session(cap)`` (or ``give``/``give_batch``) sends data; every send is
  checked against a capability for that output and counted.  ``forward(t, batch)`` is the
  library's unchecked fast path (see its docstring for when it is legal).
* :class:`OperatorCore` — the child a scope schedules (an
  :class:`~pytimely.progress.operate.Operate`): applies pending frontier changes, calls the
  logic, invalidates borrowed capability refs, flushes buffered output.

This module is internal: operators are made with the builders of
:mod:`pytimely.dataflow.operators.generic`, which hand the logic its ports.

Counting invariants (what makes frontiers correct):

* a batch of ``n`` records consumed at ``t`` on input ``i`` adds ``(t, n)`` to
  ``shared.consumeds[i]`` *when it is handed to the logic*;
* a batch of ``n > 0`` records sent at ``t`` on output ``o`` adds ``(t, n)`` to
  ``shared.produceds[o]`` when it is pushed downstream; empty batches are never pushed (an
  empty message would create a count nobody ever consumes);
* capability changes go to ``shared.internals[o]``.

All of it is drained by the scope after the logic returns, as one atomic batch.

Observation (statistics and logging, :mod:`pytimely.eventlog`): once
:meth:`OperatorCore.observe` is called, every invocation is timed (by the operator's
``clock``, see :mod:`pytimely.dataflow.invocation`), each input port also counts the records
and batches the logic takes from it, and each output port the records and batches it sends,
in their ``records`` / ``batches`` attributes; :meth:`OperatorCore.log_schedules` then has
the clock log every invocation, and what its outputs sent on each edge, for the event log.
Until then nothing is paid: the operator and its ports are switched to observed variants of
their classes, whose methods time and count in the frames that run, consume and send anyway
(no wrapper, no test on the unobserved path).
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable, Iterable, Iterator
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from ..progress.antichain import MutableAntichain
from ..progress.operate import FrontierInterest, SharedProgress
from .capability import Capability, CapabilityRef, invalidate, send_time
from .invocation import invocation_clock

if TYPE_CHECKING:
    from ..progress.change_batch import ChangeBatch
    from .scope import Scope

__all__ = [
    "InputPort",
    "OutputPort",
    "Session",
    "OperatorCore",
    "OperatorInfo",
    "Activator",
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
            return queue
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
            return queue
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

    def give_timed(self, cap: Capability | CapabilityRef, batches: list[tuple[Any, Any]]) -> None:
        """Send many ``(time, batch)`` pairs, in the given order, with one token: every time
        must be at or after the token's (checked once, against the least of them).  The many
        small messages of an operator that releases results at many times (windows and
        sessions at their own end times) cost a counter update and a push each, not a check
        and a call each."""
        sent = batches
        if not all(map(len, map(_second, batches))):
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
            n = sum(map(len, map(_second, sent)))
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


class Activator:
    """Wakes one operator: now, or after a delay (seconds)."""

    __slots__ = ("_op",)

    def __init__(self, op: OperatorCore) -> None:
        self._op = op

    def activate(self) -> None:
        """Ask the scope to schedule the operator at its next opportunity."""
        self._op.activate()

    def activate_after(self, delay: float) -> None:
        """Schedule the operator ``delay`` seconds from now (at once if ``delay <= 0``)."""
        if delay <= 0:
            self._op.activate()
        else:
            self._op.scope.worker.activate_after(self.activate, delay)


class OperatorInfo:
    """What an operator constructor may want to know about itself."""

    __slots__ = ("name", "index", "address", "worker_index", "peers", "_op")

    def __init__(self, op: OperatorCore) -> None:
        self.name = op.name
        self.index = op.index
        self.address = op.address
        self.worker_index = op.scope.worker.index
        self.peers = op.scope.worker.peers
        self._op = op

    def activator(self) -> Activator:
        """An :class:`Activator` that wakes this operator, for use from its logic or timers."""
        return Activator(self._op)


class OperatorCore:
    """A builder-made operator as its scope sees it (an ``Operate``)."""

    # Slots: a million operators must not carry a million instance dicts.
    __slots__ = (
        "scope",
        "name",
        "index",
        "address",
        "inputs",
        "outputs",
        "shared",
        "summary_rows",
        "_interest",
        "input_ports",
        "output_ports",
        "_refs",
        "_logic",
        "_ports",
        "activate",
        "_on_built",
        "invocations",
        "clock",
        "_record_capabilities",
    )

    local = True

    def __init__(
        self,
        scope: Scope,
        name: str,
        inputs: int,
        outputs: int,
        summary_rows: list[list[list[Any]]],
        interest: list[FrontierInterest],
    ) -> None:
        self.scope = scope
        self.name = name
        self.index = scope.reserve_child()
        self.address = scope.path + (self.index,)
        self.inputs = inputs
        self.outputs = outputs
        # No frontier batches: the scope binds our inputs to its tracker (``bind_frontiers``).
        self.shared = SharedProgress(inputs, outputs, frontier_copies=False)
        self.summary_rows = summary_rows
        self._interest = interest
        self.input_ports = [InputPort(self, i) for i in range(inputs)]
        self.output_ports = [OutputPort(self, o) for o in range(outputs)]
        self._refs: list[CapabilityRef] = []
        self._logic: Callable[..., Any] | None = None
        self._ports: tuple[Any, ...] = ()
        # ``activate()`` asks the scope to schedule this operator: a no-op until ``attach``,
        # then the scope's ``activate(index)`` with our index bound (no Python frame of ours:
        # every record batch delivered to an input calls it).
        self.activate: Callable[[], None] = _not_attached
        self._on_built: Callable[[], None] | None = None
        self.invocations = 0
        # Only once observed (``observe``, ``log_schedules``).
        self.clock: Any = None
        self._record_capabilities: Callable[[float], None] = _ignore_stop

    def set_logic(self, logic: Callable[..., Any] | None, ports: tuple[Any, ...] = ()) -> None:
        """What ``schedule`` runs: ``logic(*ports)`` (``None``: discard input, counted)."""
        self._logic = logic
        self._ports = ports

    def when_built(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once the scope is built and the initial capabilities counted
        (``Operate.built``): the first moment data may flow downstream."""
        self._on_built = callback

    def retire(self) -> None:
        """See :meth:`Operate.retire`: drop the logic, and with it whatever state the logic
        holds, anything still queued and the pushes downstream.  The graph is a web of cycles
        that may stay frozen out of the collector's sight a while
        (``Worker._release_frozen``); the state, often the bulk of the memory, is then freed
        at once by reference counting."""
        self._logic = None
        self._ports = ()
        self._on_built = None
        for port in self.input_ports:
            port.queue = []
        for out in self.output_ports:  # the pushes downstream (fused transforms among them)
            out.tee.consumers.clear()

    def identity_reaches(self, i: int, o: int) -> bool:
        """Input ``i`` reaches output ``o`` with the identity summary (so a message's own
        capability is valid there)."""
        identity = self.scope.domain.identity()
        return any(s == identity for s in self.summary_rows[i][o])

    # -- Operate --------------------------------------------------------------------------

    def summary(self) -> list[list[list[Any]]]:
        """See :meth:`Operate.summary`: the rows given to the builder, fixed at construction."""
        return self.summary_rows

    def interest(self) -> list[FrontierInterest]:
        """See :meth:`Operate.interest`: the per-input interest given to the builder."""
        return self._interest

    def attach(self, activate: Callable[[int], None], index: int) -> None:
        """See ``Operate.attach``; ``index`` is ours already (reserved at construction)."""
        assert index == self.index
        # A method object binding ``index`` as the one argument: calling it runs no Python
        # frame, like ``functools.partial``, at a third of the memory (a partial also holds an
        # args tuple and a keywords dict; with a million operators that is 130 MB).
        self.activate = types.MethodType(activate, index)

    def bind_frontiers(self, antichains: list[MutableAntichain]) -> bool:
        """Read input frontiers from the scope's tracker (see ``Operate``): no copies."""
        for port, frontier in zip(self.input_ports, antichains):
            port.bind_frontier(frontier)
        return True

    def built(self) -> None:
        """See ``Operate.built``: run the ``when_built`` callback, if any."""
        callback, self._on_built = self._on_built, None
        if callback is not None:
            callback()

    def initial_internals(self) -> list[tuple[int, Any, int]]:
        """One capability per worker at the minimum time on every output."""
        t0 = self.scope.domain.minimum()
        peers = self.scope.worker.peers
        return [(o, t0, peers) for o in range(self.outputs)]

    def mint_initial(self) -> list[Capability]:
        """The constructor's capabilities (already counted by ``initial_internals``)."""
        t0 = self.scope.domain.minimum()
        return [Capability(t0, port, _record=False) for port in self.output_ports]

    def observe(self) -> None:
        """From now on time every invocation and count the records and batches every port
        takes in or sends (see the module docstring: the operator and its ports become their
        observed variants, in place, so whoever holds them sees the change; a scheduler must
        look ``schedule`` up again).  Idempotent."""
        self.__class__ = ObservedOperatorCore
        if self.clock is None:
            self.clock = invocation_clock(self.outputs)
        for port in self.input_ports:
            port.__class__ = CountingInputPort
        for out in self.output_ports:
            out.__class__ = CountingOutputPort

    def log_schedules(
        self,
        schedules: list[Any],
        log_id: int = 0,
        capabilities: Callable[[float], None] | None = None,
        sent: list[Any] | None = None,
        edges: Iterable[Iterable[Any]] = (),
    ) -> None:
        """Once observed, log every invocation: ``log_id, start, duration`` go to
        ``schedules`` (``time.perf_counter`` seconds), and after an invocation in which an
        output sent anything, ``edge, records, batches`` (what it sent since it was last
        logged) go to ``sent`` for each of its edges in ``edges`` (one collection per output;
        see :meth:`log_edges`); ``capabilities(stop)`` is called after an invocation that
        changed capabilities (before the scope drains ``shared.internals``)."""
        self.clock.log_to(
            schedules,
            log_id,
            self.shared.internals,
            sent,
            tuple(self.output_ports),
            tuple(tuple(e) for e in edges),
        )
        self._record_capabilities = capabilities if capabilities is not None else _ignore_stop

    def log_edges(self, output: int, edges: Iterable[Any]) -> None:
        """While logging (:meth:`log_schedules`), log what ``output`` sends on ``edges``."""
        if self.clock is not None:
            self.clock.log_edges(output, tuple(edges))

    def timing(self) -> tuple[float, float]:
        """``(seconds in invocations, longest invocation)`` since :meth:`observe`."""
        clock = self.clock
        return (clock.total, clock.longest) if clock is not None else (0.0, 0.0)

    def schedule(self) -> bool:
        """See :meth:`Operate.schedule`: run the logic once; never incomplete.

        The input frontiers need no updating (they are the tracker's live antichains, see
        ``bind_frontiers``); afterwards invalidates this invocation's capability refs and
        flushes the outputs.  Without logic, input is discarded (counted).
        """
        self.invocations += 1
        logic = self._logic
        if logic is not None:
            try:
                logic(*self._ports)
            finally:
                refs = self._refs
                if refs:
                    invalidate(refs)
                for port in self.output_ports:
                    if port._buf:
                        port.flush()
        else:
            for port in self.input_ports:  # no logic: discard (still counted)
                for _ in port.drain_batches():
                    pass
        return False

    def __repr__(self) -> str:
        return f"<operator {self.name!r} at {self.address}>"


class ObservedOperatorCore(OperatorCore):
    """An :class:`OperatorCore` whose invocations are timed and, if asked, logged (see
    :meth:`OperatorCore.observe`).  ``schedule`` repeats the base method between its two clock
    readings rather than call it: a Python frame per invocation would cost more than the
    timing itself."""

    __slots__ = ()

    def schedule(self) -> bool:
        clock = self.clock
        clock.start()
        self.invocations += 1
        logic = self._logic
        if logic is not None:
            try:
                logic(*self._ports)
            finally:
                refs = self._refs
                if refs:
                    invalidate(refs)
                for out in self.output_ports:
                    if out._buf:
                        out.flush()
        else:
            for inp in self.input_ports:
                for _ in inp.drain_batches():
                    pass
        stopped = clock.stop()
        if stopped is not None:  # logging, and capabilities changed
            self._record_capabilities(stopped)
        return False


def _ignore_stop(stop: float) -> None:
    """No capability changes are logged."""


def _not_attached() -> None:
    """The activation of an operator whose scope is not built yet: nothing to do."""
