"""Counts and thresholds over totally ordered (``int``) times: one running count per record.

When times are totally ordered, a record's count after the updates at time ``t`` is its count
before them plus their sum, and once the input frontier has passed ``t`` no update at ``t`` or
before can arrive.  So :func:`count_total` and :func:`threshold_total` keep, per record, only
its current count (a ``dict`` entry while the count is nonzero: memory bounded by the live
collection, not by its history), hold the updates the frontier has not passed, and when it
passes them apply them time by time, emitting for every record whose count changed the
retraction of its old output and its new one, at that time.  They read no history, so they
need no arrangement: differential dataflow calls them ``count_total`` and
``threshold_total``.  Over partially ordered times (inside ``iterate``) a record's count at a
time is the sum over every earlier time, of which there is no single "before":
:meth:`Collection.count <pytimely.differential.Collection.count>` and
:meth:`~pytimely.differential.Collection.threshold` use the general ``reduce`` there.

Tokens: one, at the least pending time (the least time of the updates held), like
:func:`~pytimely.differential.arrange.arrange`; everything the frontier passed is applied in
one invocation.  Records are routed by their hash, so each is counted on one worker.

>>> import pytimely.differential as dd
>>> dd.example(["a", "b", "a"], lambda c: count_total(c))
[(('a', 2), 1), (('b', 1), 1)]
>>> dd.example(["a", "b", "a"], lambda c: threshold_total(c, lambda n: n - 1))
[('a', 1)]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..dataflow.capability import CapabilitySet
from ..dataflow.pacts import Exchange
from ..progress.operate import FrontierInterest
from .collection import Collection

__all__ = ["count_total", "threshold_total", "totally_ordered"]

#: ``emit(record, old, new, t, add)``: the output's change at time ``t`` for a record whose
#: count went from ``old`` to ``new`` (either may be 0), each update given to ``add``.
Emit = Callable[[Any, int, int, Any, Callable[[tuple[Any, Any, int]], None]], None]


def totally_ordered(collection: Collection) -> bool:
    """Whether ``collection``'s times are ``int`` (a dataflow's own scope, not a loop's).

    >>> import pytimely.differential as dd
    >>> def inside(c):
    ...     inner = c.scope.iterative(lambda s: totally_ordered(c.enter(s)))
    ...     return c.filter(lambda _: totally_ordered(c) and not inner)
    >>> dd.example([1], inside)
    [(1, 1)]
    """
    return type(collection.scope.domain.minimum()) is int


def count_total(collection: Collection, name: str = "Count") -> Collection:
    """``(record, count)`` for every record present, over ``int`` times (see the module).

    >>> import pytimely.differential as dd
    >>> dd.example([1, 1, 2], lambda c: count_total(c.concat(c.filter(lambda x: x == 2))))
    [((1, 2), 1), ((2, 2), 1)]
    """

    def emit(d: Any, old: int, new: int, t: Any, add: Callable[[Any], None]) -> None:
        if old:
            add(((d, old), t, -1))
        if new:
            add(((d, new), t, 1))

    return _running_counts(collection, emit, name)


def threshold_total(
    collection: Collection, f: Callable[[int], int], name: str = "Threshold"
) -> Collection:
    """Every record with its count ``n`` (nonzero) replaced by ``f(n)``, over ``int`` times.

    >>> import pytimely.differential as dd
    >>> dd.example(["a", "a", "b"], lambda c: threshold_total(c, lambda n: 1 if n > 1 else 0))
    [('a', 1)]
    """

    def emit(d: Any, old: int, new: int, t: Any, add: Callable[[Any], None]) -> None:
        was = f(old) if old else 0
        now = f(new) if new else 0
        if now != was:
            add((d, t, now - was))

    return _running_counts(collection, emit, name)


def _running_counts(collection: Collection, emit: Emit, name: str) -> Collection:
    """The operator behind :func:`count_total` and :func:`threshold_total`: the records'
    running counts, updated time by time (in time order) as the frontier passes them, and
    ``emit`` told of every record whose count changed."""
    if not totally_ordered(collection):
        raise TypeError(
            f"{name}: needs int times, not {type(collection.scope.domain.minimum()).__name__} "
            "(use count() / threshold(), which choose)"
        )

    def ctor(cap: Any, info: Any) -> Callable[..., None]:
        caps = CapabilitySet([cap])
        pending: list[tuple[Any, Any, int]] = []
        counts: dict[Any, int] = {}
        seen: list[Any] = [None]

        def logic(inp: Any, out: Any) -> None:
            fresh = False
            for ref, batch in inp:
                caps.insert(ref.retain())
                pending.extend(batch)
                fresh = True
            bound = inp.frontier.int_bound()
            if not fresh and bound == seen[0]:
                return
            seen[0] = bound
            if pending:
                ready = [u for u in pending if u[1] < bound]  # all once the input ended (inf)
                rest = []
                if len(ready) < len(pending):
                    rest = [u for u in pending if u[1] >= bound]
                if ready:
                    changes: list[tuple[Any, Any, int]] = []
                    add = changes.append
                    count_of = counts.get
                    for t, updates in _by_time(ready):
                        deltas: dict[Any, int] = {}
                        get = deltas.get
                        for d, _t, r in updates:
                            deltas[d] = get(d, 0) + r
                        for d, r in deltas.items():
                            if r:
                                old = count_of(d, 0)
                                new = old + r
                                if new:
                                    counts[d] = new
                                else:
                                    del counts[d]
                                emit(d, old, new, t, add)
                    if changes:
                        # The held token is at the least pending time: at or before them all.
                        out.give_batch(caps.first(), changes)
                    pending[:] = rest
            if pending:
                caps.downgrade([min(u[1] for u in pending)])
            elif caps:
                caps.drop()

        return logic

    stream = collection.stream.unary_frontier(
        Exchange(_record), name, ctor, interest=FrontierInterest.ALWAYS
    )
    return Collection(stream)


def _record(u: tuple[Any, Any, int]) -> Any:
    return u[0]


def _by_time(updates: list[tuple[Any, Any, int]]) -> list[tuple[Any, list[tuple[Any, Any, int]]]]:
    """``updates`` grouped by time, in time order (one group, as is, when all share one)."""
    first = updates[0][1]
    for u in updates:
        if u[1] != first:
            break
    else:
        return [(first, updates)]
    groups: dict[Any, list[tuple[Any, Any, int]]] = {}
    for u in updates:
        groups.setdefault(u[1], []).append(u)
    return sorted(groups.items(), key=lambda g: g[0])
