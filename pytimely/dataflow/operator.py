"""Operators built from user logic: the runtime core a scope schedules.

An operator is a constructor that receives its initial capabilities (one per output, at the
minimum time) and returns the *logic*, a function the worker calls whenever the operator is
scheduled.  :class:`OperatorCore` is the child a scope schedules (an
:class:`~pytimely.progress.operate.Operate`): it calls the logic with its ports
(:mod:`pytimely.dataflow.ports`), invalidates borrowed capability refs and flushes buffered
output; :class:`OperatorInfo` and :class:`Activator` are what a constructor may know of it.

This module is internal: operators are made with the builders of
:mod:`pytimely.dataflow.operators.generic`.

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

import types
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..progress.antichain import MutableAntichain
from ..progress.operate import FrontierInterest, SharedProgress
from .capability import Capability, CapabilityRef, invalidate
from .invocation import invocation_clock
from .ports import CountingInputPort, CountingOutputPort, InputPort, OutputPort

if TYPE_CHECKING:
    from .scope import Scope

__all__ = [
    "OperatorCore",
    "OperatorInfo",
    "Activator",
]


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
        "inline_depth",
        "_identity_paths",
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
        # The (input, output) pairs joined by the identity summary, where a message's own
        # capability may send: checked on every send with a CapabilityRef, so computed once,
        # at the first (not at construction: most of a million idle operators never send).
        self._identity_paths: frozenset[tuple[int, int]] | None = None
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
        # > 0: this operator forwards inline (``forwards_inline``), as the ``inline_depth``-th
        # of a chain of such operators; -1: driven from outside its logic, nothing downstream
        # may run inline (see ``dataflow/inline.py``); set by its builder.
        self.inline_depth = 0

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
        paths = self._identity_paths
        if paths is None:
            identity = self.scope.domain.identity()
            paths = self._identity_paths = frozenset(
                (i_, o_)
                for i_, row in enumerate(self.summary_rows)
                for o_, summaries in enumerate(row)
                if any(s == identity for s in summaries)
            )
        return (i, o) in paths

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

    def forwards_inline(self) -> bool:
        """See ``Operate.forwards_inline``: whether its builder made it inline (see
        :func:`~pytimely.dataflow.operators.generic.forward_batches`)."""
        return self.inline_depth > 0

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
