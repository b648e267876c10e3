"""Reduce: per key, a function of the key's accumulated values, maintained as they change.

``reduce(logic)`` keeps, for every key, an output collection equal at every time ``t`` to
``logic(key, input at t)``, where "input at ``t``" is the key's ``[(val, count)]`` summed over
the updates at times ``<= t`` (nonzero counts, sorted).  It keeps its output in a trace of its
own (its result is an arrangement, like DD's) and emits, at each time where the function's
value differs from what the output already says, the difference.

At which times can the output change?  Only where the input's accumulation can: at the times
of the key's updates and, for partially ordered times, at the joins of any of them -- an
update at ``(1, 0)`` and one at ``(0, 3)`` are first both visible at ``(1, 3)``.  When new
updates for a key arrive, the operator adds to the key's *pending* times the closure under
join of the new update times with every time the key already has (its history and the times
still pending).  For ``int`` times that closure is just the new times.  A pending time is
evaluated once the input frontier has passed it, in an order that extends the partial order,
so that the output's own corrections at earlier times are counted at later ones.

Tokens: the operator holds capabilities at the least pending times only, and evaluates every
pending time the frontier has passed in one invocation.  Its handle on the input trace (and
on its own output trace) follows the input frontier: every time it will evaluate later is in
that frontier's future, where compaction changes no accumulation.

For ``int`` times a key's ready times are evaluated in one sweep over its updates sorted by
time; for other times each ready time sums the updates at or before it.

An input arrangement made for the reduce alone (``keep=False``) is held as a private index
per side (:class:`_History`), not as traces: nobody else reads them, so they need no
immutable batches and no merges.  ``distinct`` and ``threshold`` inside loops go one step
further (:func:`threshold_records`): no arrange operator at all, their records indexed into
the private history as they arrive, and their output records, not an arrangement.  Over
loop times their phases (indexing, the chain closure, gathering the ready keys, the
evaluation, the compaction) run in the compiled extension when it is built, key by key in
Python otherwise, with the same results.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import _native
from ..dataflow.capability import CapabilitySet
from ..dataflow.pacts import Exchange, Pipeline
from ..order import Product
from ..progress.operate import FrontierInterest
from .lattice import (
    TimeMemo,
    advance_by,
    in_future,
    join,
    less_equal,
    meet_frontiers,
    minimal,
)
from .trace import MIN_EFFORT, Batch, Trace, compactor

if TYPE_CHECKING:
    from .arrange import Arrangement
    from .collection import Collection

__all__ = ["reduce_arrangement", "threshold_records", "positive", "join_closure"]

Logic = Callable[[Any, list[tuple[Any, int]]], list[tuple[Any, int]]]


def join_closure(new: set[Any], old: set[Any]) -> set[Any]:
    """Every join of a nonempty subset of ``new`` with any subset of ``old``.

    >>> from pytimely import Product as P
    >>> sorted(join_closure({P(1, 0)}, {P(0, 3), P(0, 1)}))
    [(1, 0), (1, 1), (1, 3)]
    """
    chain = _chain_closure(new, old)
    if chain is not None:
        return chain
    closed = set(new)
    work = list(closed)
    others = [x for x in old if x not in closed]
    while work:
        c = work.pop()
        for x in (*others, *closed):
            j = join(c, x)
            if j not in closed:
                closed.add(j)
                work.append(j)
    return closed


def _chain_closure(new: set[Any], old: set[Any]) -> set[Any] | None:
    """:func:`join_closure` when every time is a loop's ``Product(outer, round)`` with one and
    the same ``outer`` (the common case once the history is advanced by the frontier): those
    are a chain, a join is the latest of its times, so the closure is ``new`` and the ``old``
    times at or after the earliest new one.  ``None`` for any other times."""
    first = next(iter(new))
    if type(first) is not Product:
        return None
    outer = first[0]
    for x in new:
        if type(x) is not Product or x[0] != outer or type(x[1]) is not int:
            return None
    for x in old:
        if type(x) is not Product or x[0] != outer or type(x[1]) is not int:
            return None
    least = min(x[1] for x in new)
    closed = set(new)
    closed.update(x for x in old if x[1] >= least)
    return closed


class _ChainTimes:
    """:func:`join_closure` of a key's new times with its history advanced by the frontier
    ``before``, in one pass, where ``before`` holds loop times ``Product(outer, round)`` of
    ``int`` s and every time involved lies at its least outer time ``e`` once advanced: a chain,
    whose joins are its latest times.  (A time ``(u0, u1)`` with ``u0 <= e`` advances to
    ``(e, max(u1, least round of before))``.)  :meth:`closure` gives the times not yet
    pending, or ``None`` where the times are not of that shape (the caller takes the general
    path).

    >>> from pytimely import Product as P
    >>> chain = _ChainTimes([P(1, 2)])
    >>> history = [((), P(0, 1), 1), ((), P(1, 5), 1), ((), P(0, 7), -1)]
    >>> sorted(chain.closure({P(1, 4)}, history, {P(1, 7)}))
    [(1, 4), (1, 5)]
    >>> chain.closure({P(2, 4)}, history, set()) is None  # another outer time
    True
    >>> sorted(_ChainTimes([P(1, 2), P(2, 0)]).closure({P(1, 4)}, history, set()))
    [(1, 4), (1, 5), (1, 7)]
    """

    __slots__ = ("outer", "floor", "made")

    def __init__(self, before: list[Any] | None) -> None:
        self.outer: int | None = None
        self.floor = 0
        self.made: dict[int, Product] = {}
        if not before:
            return
        for b in before:
            if type(b) is not Product or type(b[0]) is not int or type(b[1]) is not int:
                return
        self.outer = min(b[0] for b in before)
        self.floor = min(b[1] for b in before)

    def closure(self, times: set[Any], ins: Any, pending: set[Any]) -> set[Any] | None:
        e = self.outer
        if e is None:
            return None
        least = None
        for t in times:
            if type(t) is not Product or t[0] != e or type(t[1]) is not int:
                return None
            if least is None or t[1] < least:
                least = t[1]
        for t in pending:
            if t[0] != e:
                return None
        floor = self.floor
        rounds = set()
        for _v, u, _d in ins:
            u0, u1 = u
            if u0 > e:
                return None
            if u1 < floor:
                u1 = floor
            if u1 >= least:
                rounds.add(u1)
        closed = set(times)
        made = self.made
        for r in rounds:
            t = made.get(r)
            if t is None:
                t = made[r] = Product(e, r)
            closed.add(t)
        closed -= pending
        return closed


def _accumulate(updates: list[tuple[Any, Any, int]], t: Any) -> dict[Any, int]:
    acc: dict[Any, int] = {}
    get = acc.get
    if type(t) is Product and type(t[0]) is int and type(t[1]) is int:
        # A loop's time: every time of the scope has this shape; compare inline.
        t0, t1 = t
        for v, (u0, u1), d in updates:
            if u0 <= t0 and u1 <= t1:
                acc[v] = get(v, 0) + d
        return acc
    for v, u, d in updates:
        if less_equal(u, t):
            acc[v] = get(v, 0) + d
    return acc


def _present(acc: dict[Any, int]) -> list[tuple[Any, int]]:
    return sorted((v, c) for v, c in acc.items() if c)


def _difference(desired: list[tuple[Any, int]], current: dict[Any, int]) -> list[tuple[Any, int]]:
    diff = {v: -c for v, c in current.items() if c}
    for v, c in desired:
        diff[v] = diff.get(v, 0) + c
    return [(v, c) for v, c in diff.items() if c]


def reduce_arrangement(
    arranged: Arrangement,
    logic: Logic,
    name: str = "Reduce",
    counts: Callable[[int], int] | None = None,
) -> Arrangement:
    """The arrangement of ``logic`` applied per key to ``arranged`` (see the module).

    ``counts`` tells that ``arranged`` is by self (every value ``()``) and that ``logic`` is
    ``[((), counts(n))]`` of the key's count ``n`` (nothing where that is 0): a threshold, which
    loops then evaluate by adding up diffs, without building the values' list.

    >>> import pytimely.differential as dd
    >>> def f(c):
    ...     return reduce_arrangement(c.arrange_by_key(), lambda k, vs: [(len(vs), 1)])
    >>> dd.example([("a", 1), ("a", 2), ("b", 1)], lambda c: f(c).as_collection())
    [(('a', 2), 1), (('b', 1), 1)]
    """
    made: Arrangement = _reduce(arranged, None, logic, name, counts)
    return made


def threshold_records(collection: Collection, f: Callable[[int], int], name: str) -> Collection:
    """Every record of ``collection`` with its count ``n`` replaced by ``f(n)`` (nothing where
    that is 0): :func:`reduce_arrangement` with ``counts=f`` of the records arranged by
    themselves for it alone, the arrange folded in and the output a collection, not an
    arrangement (nobody reads it as one).  The records are exchanged by themselves and indexed
    into the reduce's private history as they arrive: an update not yet complete sits there
    harmlessly, since every time evaluated is complete and so is every time at or before it.
    What ``distinct`` and ``threshold`` do in loops.

    >>> import pytimely.differential as dd
    >>> def f(c):
    ...     return c.scope.iterative(
    ...         lambda s: threshold_records(c.enter(s), lambda n: min(n, 2), "T").leave())
    >>> dd.example(["a", "b", "a", "a"], f)
    [('a', 2), ('b', 1)]
    """
    made: Collection = _reduce(None, collection, _threshold_logic(f), name, f)
    return made


def positive(count: int) -> int:
    """Distinct's threshold: 1 for a positive count, else 0 (the compiled evaluation knows it
    without calling it).

    >>> positive(3), positive(-1)
    (1, 0)
    """
    return 1 if count > 0 else 0


def _threshold_logic(f: Callable[[int], int]) -> Logic:
    def logic(key: Any, vals: list[tuple[Any, int]]) -> list[tuple[Any, int]]:
        n = f(vals[0][1])
        return [((), n)] if n else []

    return logic


def _index_self(records: list, index: dict[Any, list], fresh: dict[Any, set[Any]]) -> None:
    """Each record ``(x, t, diff)`` appended to ``index[x]`` as ``((), t, diff)``, its time added
    to ``fresh[x]`` (the compiled form: ``_speedups.index_self``).

    >>> index, fresh = {}, {}
    >>> _index_self([("a", 1, 1), ("a", 2, -1)], index, fresh); index, fresh
    ({'a': [((), 1, 1), ((), 2, -1)]}, {'a': {1, 2}})
    """
    for x, t, d in records:
        u = ((), t, d)
        have = index.get(x)
        if have is None:
            index[x] = [u]
        else:
            have.append(u)
        times = fresh.get(x)
        if times is None:
            fresh[x] = {t}
        else:
            times.add(t)


def _reduce(
    arranged: Arrangement | None,
    records: Collection | None,
    logic: Logic,
    name: str,
    counts: Callable[[int], int] | None,
) -> Any:
    """:func:`reduce_arrangement` of ``arranged`` (an arrangement), or
    :func:`threshold_records` of ``records`` (a collection)."""
    from .arrange import Arrangement
    from .collection import Collection

    if records is not None:
        scope = records.scope
        time_in = frontier_out = None
        private = True
    else:
        assert arranged is not None
        scope = arranged.scope
        time_in = arranged.time_in  # set when the arrangement was entered from a parent scope
        frontier_out = arranged.frontier_out
        # An arrangement that keeps no trace (``keep=False``: made for this operator alone) is
        # held here as one mutable index per side, key -> its updates: nobody else reads it,
        # so it needs neither immutable batches nor merges, and a key's history is one lookup.
        private = arranged.trace is None
    minimum = scope.domain.minimum()
    int_times = type(minimum) is int
    if private:
        in_trace = out_trace = None
        # A threshold's histories in a loop of int times, packed (see _History).
        packed = (
            records is not None
            and _native.speedups is not None
            and type(minimum) is Product
            and type(minimum[0]) is int
            and type(minimum[1]) is int
        )
        hist_in = _History(packed)
        hist_out = _History(packed)
    else:
        assert arranged is not None
        in_trace = arranged._trace()
        in_handle = in_trace.handle(reads=True)
        out_trace = Trace(name, minimum)
        out_handle = out_trace.handle(reads=True)

    def ctor(cap: Any, info: Any) -> Callable[..., None]:
        caps = CapabilitySet([cap])
        pending: dict[Any, set[Any]] = {}
        # Partially ordered times: the keys pending at each time (few distinct times, many
        # keys: which are ready is told once per time, not once per key).
        waiting: dict[Any, set[Any]] = {}
        seen: list[Any] = [None]

        def run(inp: Any, out: Any) -> None:
            fresh: dict[Any, set[Any]] = {}
            # Keys' updates in the input trace, read once per invocation (partial orders).
            gathered: dict[Any, Any] = {}
            # This invocation's times of the input trace, in this scope (entered: mapped).
            inner = TimeMemo(time_in) if time_in is not None else None
            compiled = _native.speedups
            for ref, batches in inp:
                caps.insert(ref.retain())
                if records is not None:  # (x, t, diff) records, not batches
                    hist_in.add_records(batches, fresh)
                    continue
                for b in batches:
                    for key, updates in b.data.items():
                        if inner is None:
                            times = {u[1] for u in updates}
                        else:
                            times = {inner(u[1]) for u in updates}
                        got = fresh.get(key)
                        if got is None:
                            fresh[key] = times
                        else:
                            got |= times
                    if private:
                        hist_in.extend(b.data)
                    else:
                        in_handle.acknowledge(b.seq_hi)
            bound = inp.frontier.int_bound() if int_times else None
            if bound is not None:
                frontier = [] if bound == math.inf else [bound]
            else:
                frontier = inp.frontier.elements()
            if not fresh and frontier == seen[0]:
                return
            before, seen[0] = seen[0], frontier
            if private and fresh and before is not None:
                # Every time evaluated from here on is in the future of ``before``.
                hist_in.compact_grown(fresh, before)

            if fresh:
                if int_times:
                    for key, times in fresh.items():
                        p = pending.get(key)
                        if p is None:
                            pending[key] = times
                        else:
                            p |= times
                else:
                    # Every new and pending time is in the future of the frontier seen last
                    # time, where advancing the history by it changes no join with them --
                    # and collapses most of it.
                    advance = TimeMemo(lambda t: advance_by(t, before)) if before else None
                    if private:
                        read = hist_in.updates
                    else:
                        hist = [b.data for b in in_trace.batches(in_handle.acked)]
                        _updates_of = _reader()

                        def read(key: Any) -> Any:
                            return _updates_of(key, hist)

                    # A loop's rounds at one outer time: see _ChainTimes.
                    chain = _ChainTimes(before) if inner is None else None
                    general: Any = fresh  # the keys taken one by one below
                    chained = chain is not None and chain.outer is not None
                    if private and compiled is not None and chained:
                        # Every key whose times are a chain at one outer time, at once; the
                        # others (listed) as below.
                        general = compiled.chain_pending(
                            fresh,
                            hist_in.index,
                            pending,
                            waiting,
                            chain.outer,
                            chain.floor,
                            chain.made,
                            Product,
                        )
                    for key in general:
                        times = fresh[key]
                        if type(times) is not set:  # one time (see _History.add_records)
                            times = {times}
                        p = pending.setdefault(key, set())
                        ins = gathered[key] = read(key)
                        closed = chain.closure(times, ins, p) if chain is not None else None
                        if closed is None:
                            old = {u[1] for u in ins}
                            if inner is not None:
                                old = {inner(t) for t in old}
                            if advance is not None:
                                old = {advance(t) for t in old}
                            old |= p
                            closed = join_closure(times, old) - p
                        for t in closed:
                            p.add(t)
                            keys = waiting.get(t)
                            if keys is None:
                                waiting[t] = {key}
                            else:
                                keys.add(key)

            # Which pending times has the frontier passed?
            # key -> its ready times; or, with one = [t], the set of keys ready at t alone
            ready: Any = {}
            one: list[Any] | None = None
            if int_times:
                for key, times in pending.items():
                    # (all of a key's times ready: the common case, one C call to tell)
                    done = list(times) if max(times) < bound else [t for t in times if t < bound]
                    if done:
                        ready[key] = done
            else:
                passed = [t for t in waiting if not in_future(frontier, t)]
                if len(passed) == 1 and records is not None and inner is None:
                    # (a loop's next round: one time, its keys handed over as they wait)
                    one = passed
                    ready = waiting.pop(passed[0])
                elif compiled is not None:
                    compiled.gather_ready(waiting, passed, ready)
                else:
                    _gather_ready(waiting, passed, ready)
            if ready and records is not None:
                # A threshold's output is a collection: records, and its own history.
                recorded, corrections = _evaluate(ready, pending, inner, gathered, before, one)
                if corrections:  # (the Python paths': not in the output history yet)
                    data = Batch.index(corrections, None)
                    hist_out.extend(data)
                    if before is not None:
                        hist_out.compact_grown(data, before)
                    recorded += [(kv[0], t, d) for kv, t, d in corrections]
                _emit_records(recorded, out)
            elif ready:
                _recorded, corrections = _evaluate(ready, pending, inner, gathered, before)
                grown = _emit(corrections, out)
                if private:
                    if before is not None:  # the keys whose output history grew
                        for data in grown:
                            hist_out.compact_grown(data, before)
                else:
                    out_handle.acknowledge(out_trace.seq)

            if pending:
                if int_times:
                    caps.downgrade([min(min(p) for p in pending.values())])
                else:
                    caps.downgrade(minimal(waiting))
            elif caps:
                caps.drop()
            if private:
                if not frontier and not pending:
                    hist_in.clear()
                    hist_out.clear()
                return
            out_trace.advance_upper(meet_frontiers([frontier, [c.time for c in caps]]))
            if not frontier and not pending:
                # Finished: nothing more will be read, so hold nothing back for others.
                in_handle.drop()
                out_handle.drop()
                return
            in_handle.set_logical_compaction(
                frontier if frontier_out is None else frontier_out(frontier)
            )
            out_handle.set_logical_compaction(frontier)
            out_trace.exert(MIN_EFFORT)

        def _evaluate(
            ready: Any,
            pending: dict[Any, set[Any]],
            inner: TimeMemo | None,
            gathered: dict[Any, Any],
            before: list[Any] | None,
            one: list[Any] | None = None,
        ) -> tuple[list[tuple[Any, Any, int]], list[tuple[tuple[Any, Any], Any, int]]]:
            """The corrections at the ready times (``ready``: key -> its ready times; or, with
            ``one`` = ``[t]``, the set of keys ready at ``t`` alone): records ``(key, t,
            diff)`` already in the output history (a threshold's, packed, by the compiled
            path), and updates ``((key, val), t, diff)`` not yet in it."""
            if private:
                read_in, read_out = hist_in.updates, hist_out.updates
            else:
                in_data = [b.data for b in in_trace.batches(in_handle.acked)]
                out_data = [b.data for b in out_trace.batches()]
                _updates_of = _reader()

                def read_in(key: Any) -> Any:
                    return _updates_of(key, in_data)

                def read_out(key: Any) -> Any:
                    return _updates_of(key, out_data)

            compiled = _native.speedups if counts is not None else None
            corrections: list[tuple[tuple[Any, Any], Any, int]] = []
            recorded: list[tuple[Any, Any, int]] = []
            in_c = compiled is not None and private and inner is None and not int_times
            takes_set = in_c and records is not None and hist_in.packed and hist_out.packed
            if one is not None and not takes_set:  # only the packed evaluation takes a set
                ready, one = {key: list(one) for key in ready}, None
            if in_c:
                # A threshold over private histories: every key at once, but those (listed)
                # whose times or updates the compiled path does not take.
                f = None if counts is positive else counts  # (None: distinct's, in C)
                if takes_set:
                    since = None if before is None else tuple(before)
                    at = [] if one is None else [one]
                    args = (ready, pending, hist_in.index, hist_out.index, f, recorded, Product)
                    rest = compiled.records_ready(*args, since, *at)
                else:
                    rest = compiled.threshold_ready(
                        ready, pending, hist_in.index, hist_out.index, f, corrections, Product
                    )
                ready = {key: ready[key] if one is None else list(one) for key in rest}
            for key, times in ready.items():
                left = pending[key]
                if len(left) == len(times):  # every pending time of the key is ready
                    del pending[key]
                else:
                    left.difference_update(times)
                times.sort()
                # A key's updates in every batch; read only, unless copied below (one batch:
                # the batch's own list).
                ins = gathered.get(key)
                if ins is None:
                    ins = read_in(key)
                if inner is not None:
                    ins = [(v, inner(u), d) for v, u, d in ins]
                outs = read_out(key)
                if int_times:
                    if len(times) == 1:  # the commonest case, inline: one ready time
                        t = times[0]
                        acc: dict[Any, int] = {}
                        for v, u, d in ins:
                            if u <= t:
                                acc[v] = acc.get(v, 0) + d
                        present = sorted((v, c) for v, c in acc.items() if c)
                        desired = logic(key, present) if present else []
                        change: dict[Any, int] = {}
                        for v, u, d in outs:
                            if u <= t:
                                change[v] = change.get(v, 0) - d
                        for v, c in desired:
                            change[v] = change.get(v, 0) + c
                        corrections.extend(((key, v), t, c) for v, c in change.items() if c)
                        continue
                    _sweep(key, times, list(ins), list(outs), corrections)
                    continue
                if counts is not None:
                    if compiled is None or (
                        compiled.count_changes(key, times, ins, outs, counts, corrections, Product)
                        is None
                    ):
                        _count_changes(key, times, ins, outs, counts, corrections)
                    continue
                outs = list(outs)  # grows with this key's corrections
                for t in times:
                    present = _present(_accumulate(ins, t))
                    desired = logic(key, present) if present else []
                    for v, d in _difference(desired, _accumulate(outs, t)):
                        outs.append((v, t, d))
                        corrections.append(((key, v), t, d))
            return recorded, corrections

        def _sweep(
            key: Any,
            times: list[int],
            ins: list[tuple[Any, Any, int]],
            outs: list[tuple[Any, Any, int]],
            corrections: list[tuple[tuple[Any, Any], Any, int]],
        ) -> None:
            # Totally ordered times: walk the updates in time order once.
            ins.sort(key=_time_of)
            outs.sort(key=_time_of)
            acc_in: dict[Any, int] = {}
            acc_out: dict[Any, int] = {}
            i = o = 0
            n_in, n_out = len(ins), len(outs)
            for t in times:
                while i < n_in and ins[i][1] <= t:
                    v, _u, d = ins[i]
                    acc_in[v] = acc_in.get(v, 0) + d
                    i += 1
                while o < n_out and outs[o][1] <= t:
                    v, _u, d = outs[o]
                    acc_out[v] = acc_out.get(v, 0) + d
                    o += 1
                present = _present(acc_in)
                desired = logic(key, present) if present else []
                for v, d in _difference(desired, acc_out):
                    acc_out[v] = acc_out.get(v, 0) + d
                    corrections.append(((key, v), t, d))

        def _emit_records(records: list[tuple[Any, Any, int]], out: Any) -> None:
            """Send a threshold's corrections, as records, under the tokens held."""
            if not records:
                return
            for c, part in _by_token(records):
                out.give_batch(c, part)

        def _by_token(updates: list) -> list[tuple[Any, list]]:
            """``updates`` (time second) grouped under the first token held at or before
            each one's time."""
            held = list(caps)
            if len(held) == 1:
                return [(held[0], updates)]
            parts: dict[int, list] = {}
            for u in updates:
                for i, c in enumerate(held):
                    if less_equal(c.time, u[1]):
                        parts.setdefault(i, []).append(u)
                        break
                else:  # pragma: no cover - a pending time always has a token below it
                    raise AssertionError(f"{name}: no token at or before {u[1]!r}")
            return [(held[i], parts[i]) for i in sorted(parts)]

        def _emit(corrections: list[tuple[tuple[Any, Any], Any, int]], out: Any) -> list[dict]:
            """Send the corrections, batched under the tokens held; the batches' indexes."""
            if not corrections:
                return []
            sent = []
            for c, updates in _by_token(corrections):
                b = Batch.from_updates(updates, c.time)
                if b.size:
                    if private:
                        hist_out.extend(b.data)
                    else:
                        out_trace.insert(b)
                    out.give_batch(c, [b])
                    sent.append(b.data)
            return sent

        return run

    if records is not None:
        pact: Any = Exchange(_record_of)
        stream = records.stream.unary_frontier(pact, name, ctor, interest=FrontierInterest.ALWAYS)
        return Collection(stream)
    else:
        stream = arranged.stream.unary_frontier(
            Pipeline, name, ctor, interest=FrontierInterest.ALWAYS
        )
    return Arrangement(stream, out_trace)


def _count_changes(
    key: Any,
    times: list[Any],
    ins: Any,
    outs: Any,
    f: Callable[[int], int],
    corrections: list[tuple[tuple[Any, Any], Any, int]],
) -> list[tuple[Any, Any, int]]:
    """A threshold's corrections for ``key`` at ``times`` (sorted, extending the partial order):
    the input at ``t`` is the count of the key's updates at or before ``t``; the output there
    should hold ``((), f(count))`` (nothing for a zero count).  Its updates so far are ``outs``;
    returns them with the corrections added (a new list), as the compiled form
    (``_speedups.count_changes``) does.

    >>> from pytimely import Product as P
    >>> fixes = []
    >>> ins = [((), P(0, 1), 1), ((), P(0, 2), 1)]
    >>> _count_changes("k", [P(0, 1), P(0, 2)], ins, [], lambda n: min(n, 1), fixes)
    [((), (0, 1), 1)]
    >>> fixes
    [(('k', ()), (0, 1), 1)]
    """
    outs = list(outs)  # grows with the key's corrections
    for t in times:
        have = want = 0
        if type(t) is Product and type(t[0]) is int and type(t[1]) is int:
            # A loop's time: every time of the scope has this shape; compare inline.
            t0, t1 = t
            for _v, (u0, u1), d in ins:
                if u0 <= t0 and u1 <= t1:
                    want += d
            for _v, (u0, u1), d in outs:
                if u0 <= t0 and u1 <= t1:
                    have += d
        else:
            for _v, u, d in ins:
                if less_equal(u, t):
                    want += d
            for _v, u, d in outs:
                if less_equal(u, t):
                    have += d
        if want:
            want = f(want)
        if want != have:
            outs.append(((), t, want - have))
            corrections.append(((key, ()), t, want - have))
    return outs


class _History:
    """A reduce's private index of one side, ``index[key] = [(val, time, diff)]``, grown by
    batches and compacted key by key: a key's list is advanced by the frontier and
    consolidated once it has doubled since it was last (from 4 updates on), so it stays within
    twice what compaction leaves.  Readers take a key's list for the length of one invocation,
    during which nothing is added.

    A *packed* history (``packed=True``: a threshold's, in a loop of ``int`` times, with the
    compiled extension) holds each key's updates ``((), Product(t0, t1), diff)`` as one
    ``bytearray`` of 64-bit ``(t0, t1, diff)`` after a header of two 64-bit ints, the length at
    which it is next compacted (``limits`` unused) and the number of updates (the room after
    them doubles as it fills): no object per update for the compiled phases to visit.
    :meth:`updates` reads a key either way.  An update that does not fit (a time of another
    shape, a diff beyond 64 bits), or the compiled extension switched off, unpacks it for good.

    >>> h = _History()
    >>> h.extend({"k": [("v", t, 1) for t in range(8)]})
    >>> h.compact_grown(["k"], [5]); h.index["k"]
    [('v', 5, 6), ('v', 6, 1), ('v', 7, 1)]
    """

    __slots__ = ("index", "limits", "packed")

    def __init__(self, packed: bool = False) -> None:
        self.index: dict[Any, Any] = {}
        self.limits: dict[Any, int] = {}
        self.packed = packed

    def packs(self) -> Any:
        """The compiled extension when this history is packed (and it is loaded), else None,
        after unpacking the history if it was packed."""
        if not self.packed:
            return None
        compiled = _native.speedups
        if compiled is None:
            self.unpack()
        return compiled

    def unpack(self) -> None:
        """Hold every key's updates as a list of tuples from now on."""
        if self.packed:
            self.packed = False
            self.index = {key: _unpacked(ba) for key, ba in self.index.items()}

    def updates(self, key: Any) -> Any:
        """``key``'s updates as ``(val, time, diff)`` tuples (``()`` when none): the list itself
        (not to be changed) unless packed."""
        have = self.index.get(key)
        if have is None:
            return ()
        return _unpacked(have) if self.packed else have

    def add_records(self, records: list, fresh: dict[Any, Any]) -> None:
        """Add a threshold's records ``(x, t, diff)`` as ``((), t, diff)`` to ``x``'s updates,
        and each time to ``fresh[x]``: a set of times, or (packed) the time itself while
        ``x``'s records share one."""
        compiled = self.packs()
        if compiled is not None:
            if compiled.pack_records(records, self.index, fresh, Product):
                return
            self.unpack()
        compiled = _native.speedups
        (_index_self if compiled is None else compiled.index_self)(records, self.index, fresh)

    def extend(self, data: dict[Any, list[tuple[Any, Any, int]]]) -> None:
        """Add a batch's updates (its lists are copied, never shared)."""
        compiled = self.packs()
        if compiled is not None:
            if compiled.pack_extend(self.index, data, Product):
                return
            self.unpack()
        compiled = _native.speedups
        if compiled is not None:
            compiled.history_extend(self.index, data)
            return
        index = self.index
        get = index.get
        for key, updates in data.items():
            have = get(key)
            if have is None:
                index[key] = list(updates)
            else:
                have.extend(updates)

    def compact_grown(self, keys: Any, frontier: list[Any]) -> None:
        """Compact by ``frontier`` the lists of ``keys`` that have doubled since last time."""
        compiled = self.packs()
        if compiled is not None:
            if compiled.packed_compact(self.index, keys, tuple(frontier), Product):
                return
            self.unpack()
        index, limits = self.index, self.limits
        compiled = _native.speedups
        if compiled is not None:
            compiled.history_compact(index, limits, keys, *compactor(frontier).compiled_form())
            return
        by_frontier = None
        for key in keys:
            have = index.get(key)
            if have is None or len(have) < limits.get(key, 4):
                continue
            if by_frontier is None:
                by_frontier = compactor(frontier)
            kept = by_frontier(have)
            if kept:
                index[key] = kept
                limits[key] = max(4, 2 * len(kept))
            else:
                del index[key]
                limits.pop(key, None)

    def clear(self) -> None:
        """Forget everything (the operator has finished)."""
        self.index.clear()
        self.limits.clear()


def _unpacked(packed: bytearray) -> list[tuple[Any, Any, int]]:
    """A packed history's updates as tuples (see :class:`_History`).

    >>> _unpacked(bytearray(struct.pack("qqqqqqqq", 4, 1, 0, 2, -1, 0, 0, 0)))
    [((), (0, 2), -1)]
    """
    n = struct.unpack_from("q", packed, 8)[0]
    updates = struct.iter_unpack("qqq", packed[16 : 16 + 24 * n])
    return [((), Product(t0, t1), d) for t0, t1, d in updates]


def _gather_ready(waiting: dict[Any, set[Any]], times: list[Any], ready: dict[Any, list]) -> None:
    """Each key waiting at one of ``times`` (which leave ``waiting``), with its times, into
    ``ready`` (the compiled form: ``_speedups.gather_ready``).

    >>> ready = {}
    >>> waiting = {1: {"a", "b"}, 2: {"a"}, 3: {"c"}}
    >>> _gather_ready(waiting, [1, 2], ready); sorted(ready.items()), waiting
    ([('a', [1, 2]), ('b', [1])], {3: {'c'}})
    """
    for t in times:
        for key in waiting.pop(t):
            done = ready.get(key)
            if done is None:
                ready[key] = [t]
            else:
                done.append(t)


def _record_of(u: tuple[Any, Any, int]) -> Any:
    return u[0]


def _time_of(u: tuple[Any, Any, int]) -> Any:
    return u[1]


def _reader() -> Callable[[Any, list[dict[Any, Any]]], Any]:
    """:func:`_updates_of`, compiled when the extension is there (looked up at each call, so
    that a test can switch paths)."""
    compiled = _native.speedups
    return _updates_of if compiled is None else compiled.updates_of


def _updates_of(key: Any, data: list[dict[Any, Any]]) -> Any:
    """``key``'s updates in the batches' ``data``, oldest first: a batch's own list when one
    batch has them (not to be changed), else a new list.

    >>> _updates_of("k", [{"k": [1]}, {}, {"k": [2, 3]}]), _updates_of("j", [{"k": [1]}])
    ([1, 2, 3], ())
    """
    found = None
    joined = None
    for d in data:
        updates = d.get(key)
        if updates is not None:
            if found is None:
                found = updates
            elif joined is None:
                joined = found + updates
            else:
                joined += updates
    if joined is not None:
        return joined
    return () if found is None else found
