"""Joining two arrangements: every pair of updates with equal keys, at the join of their times.

An update ``(k, v1)`` at ``t1`` with diff ``d1`` and ``(k, v2)`` at ``t2`` with ``d2`` give
``f(k, v1, v2)`` at ``join(t1, t2)`` (the least time at which both have happened) with diff
``d1 * d2``.  Summed over all pairs, the output at any time ``t`` is exactly the join of the
two inputs as they are at ``t`` -- the bilinearity that makes joins incremental.

Each pair must be produced once.  The operator keeps, per input, how many of the trace's
batches it has received (its handle's acknowledged count).  In one invocation it joins
first each new batch of the first input with the second trace *as acknowledged before this
invocation*, then each new batch of the second input with the first trace *including* the
first input's new batches: a pair of two new batches is produced in the second step only.

The pairs of a batch are made by ``_speedups.join_pairs`` when the extension is built (the
user's function still called once per pair), else by :func:`join_pairs` in Python.  Both read
the other trace as differential dataflow's join does: a key's updates held by several of its
batches (merges not done yet) are consolidated first, their times advanced by the new batch's
time (every time of the batch is at or after it, and advancing the other side's times to it
changes no lub with them).  An edge inserted in one batch and deleted in a later one then
makes no pair at all, instead of a pair and its retraction that every operator downstream
would carry until they cancel (on reachability, a third of the join's output).

Nothing is buffered: every batch is joined as it arrives, and the output goes out at the
batch's message time (which is at or before every output time), so the operator holds no
tokens.  Its handles promise the traces that it will only ask about times in the future of
the *other* input's frontier, which is what lets each trace compact.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import _native
from ..dataflow.pacts import Pipeline
from ..order import Product
from ..progress.operate import FrontierInterest
from .collection import Collection
from .lattice import TimeMemo, join

if TYPE_CHECKING:
    from .arrange import Arrangement
    from .trace import Batch

__all__ = ["join_arrangements", "join_pairs"]


def join_arrangements(
    left: Arrangement,
    right: Arrangement,
    f: Callable[[Any, Any, Any], Any],
    flat: bool = False,
    name: str = "Join",
) -> Collection:
    """The join of two arrangements of one scope: ``f(key, v1, v2)`` per pair (each record of
    the iterable ``f`` returns, with ``flat``).

    >>> import pytimely.differential as dd
    >>> def f(c):
    ...     return join_arrangements(c.arrange_by_key(), c.arrange_by_key(),
    ...                              lambda k, a, b: a * b)
    >>> dd.example([("x", 2), ("x", 3)], f)
    [(4, 1), (6, 2), (9, 1)]
    """
    trace1, trace2 = left._trace(), right._trace()
    h1, h2 = trace1.handle(reads=True), trace2.handle(reads=True)
    int_times = type(left.scope.domain.minimum()) is int
    lub = max if int_times else join

    # Entered arrangements read a parent scope's trace: their times are mapped on the way.
    map1, map2 = left.time_in, right.time_in
    out1 = left.frontier_out or _same
    out2 = right.frontier_out or _same

    def pairs(batch: Batch, others: list[Batch], swap: bool) -> list[tuple[Any, Any, int]]:
        mine, theirs = (map2, map1) if swap else (map1, map2)
        # An entered trace's times are mapped once per distinct time (a batch's matches share
        # a few times; the mapping is two Python calls).
        mine = TimeMemo(mine) if mine is not None else None
        theirs = TimeMemo(theirs) if theirs is not None else None
        datas = [other.data for other in others]
        # Every time of the batch is at or after its time: the other side's updates of a key,
        # advanced to it, are consolidated across batches (see the module's note).
        meet = batch.time if mine is None else mine(batch.time)
        compiled = _native.speedups
        if compiled is not None and not flat:
            return compiled.join_pairs(batch.data, datas, f, swap, mine, theirs, lub, Product, meet)
        return join_pairs(batch.data, datas, f, swap, mine, theirs, lub, meet, flat)

    def ctor(cap: Any, info: Any) -> Callable[..., None]:
        cap.drop()

        def logic(in1: Any, in2: Any, out: Any) -> None:
            new1 = list(in1)
            if new1:
                before = trace2.batches(h2.acked)
                for ref, batches in new1:
                    for b in batches:
                        if before:
                            out.give_batch(ref, pairs(b, before, False))
                        h1.acknowledge(b.seq_hi)
            new2 = list(in2)
            if new2:
                now = trace1.batches(h1.acked)
                for ref, batches in new2:
                    for b in batches:
                        if now:
                            out.give_batch(ref, pairs(b, now, True))
                        h2.acknowledge(b.seq_hi)
            h1.set_logical_compaction(out1(in2.frontier.elements()))
            h2.set_logical_compaction(out2(in1.frontier.elements()))
            if not h1.frontier and not h2.frontier:
                # Both inputs are complete: nothing more will be read.
                h1.drop()
                h2.drop()

        return logic

    stream = left.stream.binary_frontier(
        right.stream, Pipeline, Pipeline, name, ctor, interest=FrontierInterest.ALWAYS
    )
    return Collection(stream)


def _same(frontier: list[Any]) -> list[Any]:
    return frontier


def join_pairs(
    data: dict[Any, list[tuple[Any, Any, int]]],
    others: list[dict[Any, list[tuple[Any, Any, int]]]],
    f: Callable[[Any, Any, Any], Any],
    swap: bool,
    mine: TimeMemo | None,
    theirs: TimeMemo | None,
    lub: Callable[[Any, Any], Any],
    meet: Any = None,
    flat: bool = False,
) -> list[tuple[Any, Any, int]]:
    """The pairs of a new batch's index ``data`` with the indexes ``others`` of the other
    trace (the Python form of ``_speedups.join_pairs``): for each key, every update ``(v1, t1,
    d1)`` with every ``(v2, t2, d2)`` of the other side gives ``(f(key, v1, v2), lub(t1, t2),
    d1 * d2)`` (``f(key, v2, v1)`` when ``swap``; each record of the iterable it returns with
    ``flat``).  Times are mapped by ``mine`` and ``theirs`` when given.  With ``meet`` (at or
    before every time of ``data``), a key's updates held by several of ``others`` are first
    consolidated at their times advanced to it.

    >>> old, new = {1: [("x", 0, 1), ("y", 0, 1)]}, {1: [("x", 2, -1)]}
    >>> join_pairs({1: [((), 3, 1)]}, [old, new], lambda k, a, b: b, False, None, None, max, 3)
    [('y', 3, 1)]
    """
    out: list[tuple[Any, Any, int]] = []
    extend = out.extend
    for key, ups in data.items():
        if mine is not None:
            ups = _mapped(ups, mine)
        found = [m for other in others if (m := other.get(key))]
        if not found:
            continue
        if theirs is not None:
            found = [_mapped(m, theirs) for m in found]
        if len(found) > 1 and meet is not None:
            found = [_consolidated(found, meet, lub)]
        for matches in found:
            if flat:
                for v1, t1, d1 in ups:
                    for v2, t2, d2 in matches:
                        res = f(key, v2, v1) if swap else f(key, v1, v2)
                        t, d = lub(t1, t2), d1 * d2
                        extend([(r, t, d) for r in res])
            elif swap:
                for v1, t1, d1 in ups:
                    extend([(f(key, v2, v1), lub(t1, t2), d1 * d2) for v2, t2, d2 in matches])
            else:
                for v1, t1, d1 in ups:
                    extend([(f(key, v1, v2), lub(t1, t2), d1 * d2) for v2, t2, d2 in matches])
    return out


def _consolidated(
    lists: list[list[tuple[Any, Any, int]]], meet: Any, lub: Callable[[Any, Any], Any]
) -> list[tuple[Any, Any, int]]:
    """The updates of ``lists`` with equal values at equal times advanced to ``meet`` added up
    (the first one's time kept: its lub with any time at or after ``meet`` is theirs too), zero
    sums dropped.

    >>> _consolidated([[("x", 0, 1), ("y", 1, 1)], [("x", 2, -1)]], 3, max)
    [('y', 1, 1)]
    """
    acc: dict[tuple[Any, Any], list[Any]] = {}
    for updates in lists:
        for v, t, d in updates:
            k = (v, lub(t, meet))
            have = acc.get(k)
            if have is None:
                acc[k] = [t, d]
            else:
                have[1] += d
    return [(v, t, d) for (v, _at), (t, d) in acc.items() if d]


def _mapped(updates: list[tuple[Any, Any, int]], memo: TimeMemo) -> list[tuple[Any, Any, int]]:
    """``updates`` with their times mapped by ``memo`` (its answers looked up inline).

    >>> _mapped([("v", 1, 1), ("w", 1, -1)], TimeMemo(lambda t: t * 10))
    [('v', 10, 1), ('w', 10, -1)]
    """
    known = memo.known
    out = []
    for v, t, d in updates:
        m = known.get(t)
        if m is None:
            m = memo(t)
        out.append((v, m, d))
    return out
