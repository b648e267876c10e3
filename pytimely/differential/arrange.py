"""Arrangements: a collection's updates indexed by key, shared by the operators that read it.

``collection.arrange_by_key()`` routes each ``(key, val)`` update to the worker its key picks
and, there, holds the updates until the input frontier has passed their times.  Each time the
frontier moves it seals the passed updates into an immutable :class:`~.trace.Batch`, appends
it to the worker's :class:`~.trace.Trace` and sends it downstream.  An :class:`Arrangement` is
that stream of batches plus the trace.  Joins and reduces read the trace through handles
instead of keeping their own copies of their inputs, and an arrangement used by several of
them is indexed and stored once.

Tokens.  The arrange operator holds capabilities only at the least times of the updates it
still holds (one for ``int`` times), and seals everything the frontier passed in one batch
per invocation -- one batch per capability when several incomparable times are pending, each
sent at its capability's time, which is at or before every update in it.  So updates at a
million distinct times cost what updates at one time cost, per invocation.

The trace's ``upper`` follows the input frontier: every future batch has only times in its
future.  That is what lets :func:`import_trace` bring a trace into another dataflow: it sends
what the trace holds now, then each new batch, and holds its own tokens at the trace's upper.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..dataflow.capability import CapabilitySet
from ..dataflow.pacts import Exchange
from ..order import to_inner, to_outer
from ..progress.operate import FrontierInterest
from .collection import Collection
from .lattice import TimeMemo, in_future, less_equal, minimal
from .trace import MIN_EFFORT, Batch, Trace, TraceHandle

if TYPE_CHECKING:
    from ..dataflow.scope import Scope
    from ..dataflow.stream import Stream

__all__ = ["Arrangement", "arrange", "import_trace"]


class Arrangement:
    """A stream of sealed :class:`~.trace.Batch` es and the :class:`~.trace.Trace` that holds
    them all, indexed by key (one trace per worker).

    >>> import pytimely as pt
    >>> import pytimely.differential as dd
    >>> def build(scope):
    ...     session, pairs = dd.new_input(scope)
    ...     by_key = pairs.arrange_by_key()
    ...     sums = by_key.reduce(lambda k, vals: [(sum(v * c for v, c in vals), 1)])
    ...     pairs_back = by_key.as_collection().capture()  # the same arrangement, read twice
    ...     session.insert(("a", 1)); session.insert(("a", 2)); session.close()
    ...     return sums.as_collection().capture(), pairs_back
    >>> sums, pairs = pt.example(build)
    >>> sums.as_of(0), pairs.as_of(0)
    ([(('a', 3), 1)], [(('a', 1), 1), (('a', 2), 1)])
    """

    __slots__ = ("stream", "trace", "by_self", "time_in", "frontier_out")

    def __init__(
        self,
        stream: Stream,
        trace: Trace | None,
        by_self: bool = False,
        time_in: Callable[[Any], Any] | None = None,
        frontier_out: Callable[[list[Any]], list[Any]] | None = None,
    ) -> None:
        self.stream = stream
        self.trace = trace
        self.by_self = by_self
        # An arrangement entered into a child scope reads a parent's trace: ``time_in`` maps
        # the trace's times to this scope's, ``frontier_out`` this scope's frontiers to the
        # trace's (for the readers' compaction handles).  ``None``: the same times.
        self.time_in = time_in
        self.frontier_out = frontier_out

    def enter(self, scope: Scope) -> Arrangement:
        """The same arrangement (the same trace, not a copy) in ``scope``, a child of its
        scope: in an iterative scope its updates are at loop round 0.  Index a collection
        once outside a loop and join with it in every round.

        >>> import pytimely.differential as dd
        >>> def reach(edges):
        ...     by_src = edges.arrange_by_key()
        ...     def step(nodes):
        ...         inner = by_src.enter(nodes.scope)
        ...         hop = nodes.map(lambda n: (n, ())).arrange_by_key()
        ...         return hop.join_map(inner, lambda k, _u, v: v).concat(nodes).distinct()
        ...     return edges.filter(lambda e: e[0] == 1).map(lambda e: 1).iterate(step)
        >>> dd.example([(1, 2), (2, 3), (4, 5)], reach)
        [(1, 1), (2, 1), (3, 1)]
        """
        outer, inner = self.scope.domain, scope.domain
        stream = self.stream.enter(scope)
        before_in, before_out = self.time_in, self.frontier_out
        if outer == inner:
            return Arrangement(stream, self.trace, self.by_self, before_in, before_out)

        def time_in(t: Any) -> Any:
            return to_inner(outer, inner, t if before_in is None else before_in(t))

        def frontier_out(frontier: list[Any]) -> list[Any]:
            mine = minimal(to_outer(outer, inner, f) for f in frontier)
            return mine if before_out is None else before_out(mine)

        return Arrangement(stream, self.trace, self.by_self, time_in, frontier_out)

    @property
    def scope(self) -> Scope:
        """The scope of the batch stream."""
        return self.stream.scope

    def _trace(self) -> Trace:
        if self.trace is None:
            raise ValueError("this arrangement keeps no trace (it was made by consolidate)")
        return self.trace

    def reader(self) -> TraceHandle:
        """A reading handle for an operator of this dataflow: it holds compaction at the
        trace's current frontier, and merges at the batches it acknowledged, until it says
        otherwise.

        >>> import pytimely as pt
        >>> import pytimely.differential as dd
        >>> def build(scope):
        ...     return dd.new_input(scope)[1].arrange_by_self().reader()
        >>> pt.example(build).reads
        True
        """
        return self._trace().handle(reads=True)

    def trace_handle(self) -> TraceHandle:
        """A handle for the user: it holds the trace's compaction where it is until advanced
        with ``set_logical_compaction`` or dropped, and can ``import_into`` another
        dataflow of this worker (see :meth:`~.trace.TraceHandle.import_into`).

        >>> import pytimely as pt
        >>> import pytimely.differential as dd
        >>> def build(scope):
        ...     session, c = dd.new_input(scope)
        ...     handle = c.arrange_by_self().trace_handle()
        ...     session.insert("x"); session.close()
        ...     return handle
        >>> pt.example(build).accumulate(0)
        [(('x', ()), 1)]
        """
        return self._trace().handle(reads=False)

    def as_collection(self, f: Callable[[Any, Any], Any] | None = None) -> Collection:
        """The updates as a collection of ``f(key, val)`` (default ``(key, val)``).

        >>> import pytimely.differential as dd
        >>> dd.example([("a", 1)], lambda c: c.arrange_by_key().as_collection(lambda k, v: v))
        [(1, 1)]
        """
        time_in = self.time_in
        if time_in is not None:
            g = f if f is not None else _pair

            def flatten(batches: list[Batch]) -> list[tuple[Any, Any, int]]:
                return [
                    (g(k, v), time_in(t), r)
                    for b in batches
                    for k, updates in b.data.items()
                    for v, t, r in updates
                ]
        elif f is None:

            def flatten(batches: list[Batch]) -> list[tuple[Any, Any, int]]:
                return [
                    ((k, v), t, r)
                    for b in batches
                    for k, updates in b.data.items()
                    for v, t, r in updates
                ]
        else:

            def flatten(batches: list[Batch]) -> list[tuple[Any, Any, int]]:
                return [
                    (f(k, v), t, r)
                    for b in batches
                    for k, updates in b.data.items()
                    for v, t, r in updates
                ]

        return Collection(self.stream.map_batch(flatten, name="AsCollection"))

    def join(self, other: Arrangement) -> Collection:
        """``(key, (v1, v2))`` for every pair of updates with equal keys (see
        :meth:`Collection.join <pytimely.differential.Collection.join>`).

        >>> import pytimely.differential as dd
        >>> dd.example([("a", 1)], lambda c: c.arrange_by_key().join(c.arrange_by_key()))
        [(('a', (1, 1)), 1)]
        """
        from .join import join_arrangements

        return join_arrangements(self, other, lambda k, v1, v2: (k, (v1, v2)))

    def join_map(self, other: Arrangement, f: Callable[[Any, Any, Any], Any]) -> Collection:
        """``f(key, v1, v2)`` for every pair of updates with equal keys.

        >>> import pytimely.differential as dd
        >>> a = lambda c: c.arrange_by_key()
        >>> dd.example([("a", 1)], lambda c: a(c).join_map(a(c), lambda k, x, y: k * (x + y)))
        [('aa', 1)]
        """
        from .join import join_arrangements

        return join_arrangements(self, other, f)

    def join_core(self, other: Arrangement, f: Callable[[Any, Any, Any], Any]) -> Collection:
        """Every record of the iterable ``f(key, v1, v2)`` for every pair of updates with
        equal keys.

        >>> import pytimely.differential as dd
        >>> a = lambda c: c.arrange_by_key()
        >>> dd.example([("a", 1)], lambda c: a(c).join_core(a(c), lambda k, x, y: [x, y]))
        [(1, 2)]
        """
        from .join import join_arrangements

        return join_arrangements(self, other, f, flat=True)

    def reduce(
        self,
        logic: Callable[[Any, list[tuple[Any, int]]], list[tuple[Any, int]]],
        name: str = "Reduce",
    ) -> Arrangement:
        """The arrangement of ``logic(key, [(val, count), ...])`` per key (see
        :meth:`Collection.reduce <pytimely.differential.Collection.reduce>`).

        >>> import pytimely.differential as dd
        >>> n = lambda k, vals: [(len(vals), 1)]
        >>> dd.example([("a", 1), ("a", 2)], lambda c: c.arrange_by_key().reduce(n).as_collection())
        [(('a', 2), 1)]
        """
        from .reduce import reduce_arrangement

        return reduce_arrangement(self, logic, name)

    def __repr__(self) -> str:
        return f"Arrangement({self.stream!r}, {self.trace!r})"


def _token_index(held: list[Any], t: Any, name: str) -> int:
    """The index of the first of the capabilities ``held`` at or before time ``t``."""
    for i, c in enumerate(held):
        if less_equal(c.time, t):
            return i
    raise AssertionError(f"{name}: no token at or before {t!r}")  # pragma: no cover


def arrange(
    collection: Collection, by_self: bool = False, name: str = "Arrange", keep: bool = True
) -> Arrangement:
    """Arrange ``collection`` (``(key, val)`` records, or records by themselves with
    ``by_self``); ``keep=False`` seals and sends batches without keeping a trace (what
    ``consolidate`` needs).

    >>> import pytimely.differential as dd
    >>> dd.example([("k", 1)], lambda c: arrange(c).as_collection())
    [(('k', 1), 1)]
    """
    scope = collection.scope
    minimum = scope.domain.minimum()
    int_times = type(minimum) is int
    trace = Trace(name, minimum) if keep else None
    pact = Exchange(_first) if by_self else Exchange(_first_of_first)

    def ctor(cap: Any, info: Any) -> Callable[..., None]:
        caps = CapabilitySet([cap])
        pending: list[tuple[Any, Any, int]] = []
        seen: list[Any] = [None]

        def logic(inp: Any, out: Any) -> None:
            fresh = False
            for ref, batch in inp:
                caps.insert(ref.retain())
                if by_self:
                    pending.extend([((d, ()), t, r) for d, t, r in batch])
                else:
                    pending.extend(batch)
                fresh = True
            frontier_view = inp.frontier
            bound = frontier_view.int_bound() if int_times else None
            if bound is not None:
                frontier = [] if bound == math.inf else [bound]
            else:
                frontier = frontier_view.elements()
            if not fresh and frontier == seen[0]:
                return
            seen[0] = frontier
            if pending:
                if bound is not None:
                    ready = [u for u in pending if u[1] < bound]
                    if len(ready) < len(pending):
                        rest = [u for u in pending if u[1] >= bound]
                    else:
                        rest = []
                else:
                    # Partially ordered times: ask the frontier once per distinct time.
                    times = {u[1] for u in pending}
                    later = {t for t in times if in_future(frontier, t)}
                    if not later:
                        ready, rest = pending[:], []
                    else:
                        ready = [u for u in pending if u[1] not in later]
                        rest = [u for u in pending if u[1] in later]
                if ready:
                    held = list(caps)
                    if len(held) == 1:
                        groups = [(held[0], ready)]
                    else:
                        parts: dict[int, list] = {}
                        token_of = TimeMemo(lambda t: _token_index(held, t, name))
                        for u in ready:
                            parts.setdefault(token_of(u[1]), []).append(u)
                        groups = [(held[i], parts[i]) for i in sorted(parts)]
                    for c, updates in groups:
                        b = Batch.from_updates(updates, c.time)
                        if b.size:
                            if trace is not None:
                                trace.insert(b)
                            out.give_batch(c, [b])
                    pending[:] = rest
            if pending:
                caps.downgrade(minimal(u[1] for u in pending))
            elif caps:
                caps.drop()
            if trace is not None:
                trace.advance_upper(frontier)
                trace.exert(MIN_EFFORT)

        return logic

    stream = collection.stream.unary_frontier(pact, name, ctor, interest=FrontierInterest.ALWAYS)
    return Arrangement(stream, trace, by_self)


def _pair(k: Any, v: Any) -> tuple[Any, Any]:
    return (k, v)


def _first(u: tuple) -> Any:
    return u[0]


def _first_of_first(u: tuple) -> Any:
    return u[0][0]


def import_trace(handle: TraceHandle, scope: Scope, name: str | None = None) -> Arrangement:
    """An arrangement of ``scope`` replaying the trace of ``handle`` (what
    :meth:`~.trace.TraceHandle.import_into` does).

    >>> import pytimely as pt
    >>> import pytimely.differential as dd
    >>> def first(scope):
    ...     session, c = dd.new_input(scope)
    ...     return session, c.arrange_by_self().trace_handle()
    >>> def work(worker):
    ...     session, handle = worker.dataflow(first)
    ...     session.insert("x"); session.advance_to(1)
    ...     worker.step_while(lambda: handle.trace.upper == [0])
    ...     counts = worker.dataflow(lambda s: import_trace(handle, s).as_collection().capture())
    ...     session.insert("y"); session.close()
    ...     return counts
    >>> pt.execute(work)[0].updates()
    [(('x', ()), 0, 1), (('y', ()), 1, 1)]
    """
    trace = handle.trace
    name = name or f"Import({trace.name})"
    # What the trace holds now, in order, then every later batch and upper (in order).
    snapshot = trace.batches()
    events: list[tuple[str, Any]] = []
    upper_now = list(trace.upper)
    state: dict[str, Any] = {"activator": None, "first": True}

    def listen(kind: str, value: Any) -> None:
        events.append((kind, value))
        if state["activator"] is not None:
            state["activator"].activate()

    trace.listeners.append(listen)

    def ctor(cap: Any, info: Any) -> Callable[..., None]:
        caps = CapabilitySet([cap])
        state["activator"] = info.activator()

        def logic(out: Any) -> None:
            if state["first"]:
                state["first"] = False
                for b in snapshot:
                    out.give_batch(cap, [b])
                _downgrade(caps, upper_now)
            taken = events[:]
            del events[:]
            for kind, value in taken:
                if kind == "batch":
                    for c in caps:
                        if less_equal(c.time, value.time):
                            out.give_batch(c, [value])
                            break
                    else:  # pragma: no cover - the trace's upper would have been wrong
                        raise AssertionError(f"{name}: no token at or before {value!r}")
                else:
                    _downgrade(caps, value)
            if not caps and listen in trace.listeners:
                trace.listeners.remove(listen)

        return logic

    from ..dataflow.operators.generic import source

    stream = source(scope, name, ctor)
    return Arrangement(stream, trace)


def _downgrade(caps: CapabilitySet, upper: list[Any]) -> None:
    if upper:
        caps.downgrade(upper)
    else:
        caps.drop()
