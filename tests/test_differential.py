"""pytimely.differential against a brute-force model.

Random update sequences (retractions, updates at out-of-order future times, several epochs)
go into a dataflow; after each epoch, at every time the output's frontier has passed, the
accumulated output must equal the model: the operator applied, from scratch, to the input
accumulated at that time.  ``int`` times, then partially ordered ``Product`` times (updates
delayed to random loop coordinates inside an iterative scope), then iteration itself.
"""

from __future__ import annotations

import random
import struct
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pytimely as pt
import pytimely.differential as dd
from pytimely import Product

pytestmark = pytest.mark.timeout(120)

# -- models --------------------------------------------------------------------------------


def acc(updates, le):
    out = Counter()
    for d, t, r in updates:
        if le(t):
            out[d] += r
    return {d: c for d, c in out.items() if c}


def model_count(a):
    return {(d, c): 1 for d, c in a.items()}


def model_distinct(a):
    return {d: 1 for d, c in a.items() if c > 0}


def model_sum(a):
    sums = Counter()
    keys = set()
    for (k, v), c in a.items():
        keys.add(k)
        sums[k] += v * c
    return {(k, sums[k]): 1 for k in keys}


def model_min(a):
    best = {}
    for (k, v), c in a.items():
        if c > 0:
            best[k] = min(best.get(k, v), v)
    return {(k, v): 1 for k, v in best.items()}


def model_join(a):
    left = [((k, v), c) for (tag, k, v), c in a.items() if tag == "L"]
    right = [((k, v), c) for (tag, k, v), c in a.items() if tag == "R"]
    out = Counter()
    for (k1, v1), c1 in left:
        for (k2, v2), c2 in right:
            if k1 == k2:
                out[(k1, (v1, v2))] += c1 * c2
    return {d: c for d, c in out.items() if c}


def model_reach(a):
    edges = {d for d, c in a.items() if c > 0}
    if not any(s == 0 for s, _ in edges):
        return {}
    seen, todo = {0}, [0]
    while todo:
        n = todo.pop()
        for s, t in edges:
            if s == n and t not in seen:
                seen.add(t)
                todo.append(t)
    return {n: 1 for n in seen}


def split(c):
    left = c.filter(lambda x: x[0] == "L").map(lambda x: (x[1], x[2]))
    right = c.filter(lambda x: x[0] == "R").map(lambda x: (x[1], x[2]))
    return left.join(right)


def reach(edges):
    edges = edges.distinct()
    roots = edges.filter(lambda e: e[0] == 0).map(lambda e: e[0]).distinct()

    def step(nodes):
        e = edges.enter(nodes.scope)
        return nodes.map(lambda n: (n, ())).join_map(e, lambda k, _u, v: v).concat(nodes).distinct()

    return roots.iterate(step)


def reach_entered(edges):
    edges = edges.distinct()
    by_src = edges.arrange_by_key()
    roots = edges.filter(lambda e: e[0] == 0).map(lambda e: e[0]).distinct()

    def step(nodes):
        hop = nodes.map(lambda n: (n, ())).arrange_by_key()
        return hop.join_map(by_src.enter(nodes.scope), lambda k, _u, v: v).concat(nodes).distinct()

    return roots.iterate(step)


def count_entered(c):
    def inside(inner):
        counted = c.arrange_by_self().enter(inner).reduce(lambda k, vals: [(vals[0][1], 1)])
        return counted.as_collection().leave()

    return c.scope.iterative(inside)


OPERATORS = {
    "count": (lambda c: c.count(), model_count),
    "distinct": (lambda c: c.distinct(), model_distinct),
    "sum": (lambda c: c.reduce(lambda k, vals: [(sum(v * n for v, n in vals), 1)]), model_sum),
    "min": (lambda c: c.min(), model_min),
    "consolidate": (lambda c: c.consolidate(), lambda a: dict(a)),
    "join": (split, model_join),
    "reach": (reach, model_reach),
    "reach_entered": (reach_entered, model_reach),
    "count_entered": (count_entered, model_count),
}

# -- the driver ----------------------------------------------------------------------------


def run_rounds(build, rounds, workers=1, wait=True):
    """Feed ``rounds[e]`` (updates at times ``>= e``) in epoch ``e``; after each epoch, the
    merged captured output of every worker, as prefixes: ``(raw, [length after epoch e])``.
    Without ``wait`` every epoch is fed before the dataflow runs (loops then hold several
    epochs at once: frontiers of several incomparable times), and checked at the end."""

    def work(worker):
        def dataflow(scope):
            session, collection = dd.new_input(scope)
            out = build(collection)
            return session, out.capture(), out.probe()

        session, captured, probe = worker.dataflow(dataflow)
        marks = []
        for e, updates in enumerate(rounds):
            if worker.index == 0:
                for d, t, r in updates:
                    session.update_at(d, t, r)
            session.advance_to(e + 1)
            if wait:
                worker.step_while(lambda: probe.less_than(e + 1))
            marks.append(len(captured.raw))
        if not wait:
            worker.step_while(lambda: probe.less_than(len(rounds)))
            marks = [len(captured.raw)] * len(rounds)
        session.close()
        return captured.raw, marks

    return pt.execute(work, workers=workers, timeout=100)


def check_rounds(name, rounds, workers=1, wait=True):
    build, model = OPERATORS[name]
    results = run_rounds(build, rounds, workers, wait)
    inputs = [u for updates in rounds for u in updates]
    for e in range(len(rounds)):
        out = [u for raw, marks in results for u in raw[: marks[e]]]
        for t in range(e + 1):
            want = model(acc(inputs, lambda u: u <= t))
            got = acc(out, lambda u: u <= t)
            assert got == want, (name, e, t)


def updates_strategy(data, epochs=4, spread=3):
    update = st.tuples(data, st.integers(0, spread), st.sampled_from([1, 1, 2, -1]))
    rounds = st.lists(st.lists(update, max_size=12), min_size=1, max_size=epochs)
    return rounds.map(lambda rs: [[(d, e + dt, r) for d, dt, r in u] for e, u in enumerate(rs)])


SMALL = st.integers(0, 4)
PAIRS = st.tuples(st.integers(0, 2), st.integers(0, 3))
SIDES = st.tuples(st.sampled_from("LR"), st.integers(0, 2), st.integers(0, 2))


@settings(max_examples=150, deadline=None)
@given(updates_strategy(SMALL))
def test_count_distinct_consolidate_match_the_model(rounds):
    for name in ("count", "distinct", "consolidate"):
        check_rounds(name, rounds)


@settings(max_examples=60, deadline=None)
@given(updates_strategy(SMALL))
def test_count_and_distinct_with_several_epochs_pending_at_once(rounds):
    # Over int times both keep running counts: a frontier that passes several times at once
    # has them applied in time order, each record's change emitted at its own time.
    for name in ("count", "distinct"):
        check_rounds(name, rounds, wait=False)
    check_rounds("distinct", rounds, workers=2, wait=False)


def test_running_counts_refuse_times_that_are_not_ints():
    from pytimely.differential.total import count_total

    def inside(c):
        return c.scope.iterative(lambda inner: count_total(c.enter(inner)).leave())

    with pytest.raises(TypeError, match="Count: needs int times, not Product"):
        dd.example([1], inside)


@settings(max_examples=150, deadline=None)
@given(updates_strategy(PAIRS))
def test_reduce_sum_and_min_match_the_model(rounds):
    check_rounds("sum", rounds)
    check_rounds("min", rounds)


@settings(max_examples=150, deadline=None)
@given(updates_strategy(SIDES))
def test_join_matches_the_model(rounds):
    check_rounds("join", rounds)


EDGES = st.tuples(st.integers(0, 4), st.integers(0, 4))


@settings(max_examples=100, deadline=None)
@given(updates_strategy(EDGES, epochs=4, spread=2))
def test_iterated_reachability_matches_the_model(rounds):
    check_rounds("reach", rounds)


@settings(max_examples=100, deadline=None)
@given(updates_strategy(EDGES, epochs=4, spread=2))
def test_reachability_with_several_epochs_in_the_loop_at_once(rounds):
    check_rounds("reach", rounds, wait=False)


@settings(max_examples=100, deadline=None)
@given(updates_strategy(EDGES, epochs=4, spread=2), st.booleans())
def test_arrangements_entered_into_a_loop_are_read_in_place(rounds, wait):
    check_rounds("reach_entered", rounds, wait=wait)
    check_rounds("count_entered", [[(a, t, r) for (a, _b), t, r in u] for u in rounds], wait=wait)


def random_rounds(seed, data, epochs=4, per=10, spread=3):
    rng = random.Random(seed)
    return [
        [(data(rng), e + rng.randint(0, spread), rng.choice([1, 1, 2, -1])) for _ in range(per)]
        for e in range(epochs)
    ]


@pytest.mark.parametrize("workers", [2, 3])
def test_operators_on_several_worker_processes(workers):
    small = lambda r: r.randint(0, 6)  # noqa: E731
    sides = lambda r: (r.choice("LR"), r.randint(0, 3), r.randint(0, 2))  # noqa: E731
    edges = lambda r: (r.randint(0, 5), r.randint(0, 5))  # noqa: E731
    check_rounds("count", random_rounds(workers, small), workers)
    check_rounds("join", random_rounds(workers, sides), workers)
    check_rounds("reach", random_rounds(workers, edges, spread=1), workers)
    check_rounds("reach_entered", random_rounds(workers + 7, edges), workers, wait=False)


# -- partially ordered times ---------------------------------------------------------------


def run_product(build, rounds, inner_max, wait=True):
    """Updates ``((data, inner), outer, diff)`` are delayed inside an iterative scope to
    ``Product(outer, inner)``; ``build`` runs there.  Returns (raw, marks) like run_rounds."""

    def work(worker):
        def dataflow(scope):
            session, collection = dd.new_input(scope)

            def inside(inner):
                c = collection.enter(inner).map_times(lambda t: t)
                timed = c.stream.map_batch(
                    lambda b: [(d, Product(t[0], i), r) for (d, i), t, r in b]
                )
                out = build(dd.Collection(timed))
                return out.capture(), out.probe()

            captured, probe = scope.iterative(inside)
            return session, captured, probe

        session, captured, probe = worker.dataflow(dataflow)
        marks = []
        for e, updates in enumerate(rounds):
            for d, t, r in updates:
                session.update_at(d, t, r)
            session.advance_to(e + 1)
            if wait:
                worker.step_while(lambda: probe.less_than(Product(e + 1, 0)))
            marks.append(len(captured.raw))
        if not wait:
            worker.step_while(lambda: probe.less_than(Product(len(rounds), 0)))
            marks = [len(captured.raw)] * len(rounds)
        session.close()
        return captured.raw, marks

    return pt.execute(work, workers=1, timeout=100)


def check_product(name, rounds, inner_max=3, wait=True):
    build, model = OPERATORS[name]
    [(raw, marks)] = run_product(build, rounds, inner_max, wait)
    inputs = [(d, Product(t, i), r) for updates in rounds for (d, i), t, r in updates]
    for e in range(len(rounds)):
        out = raw[: marks[e]]
        for o in range(e + 1):
            for i in range(inner_max + 2):
                t = Product(o, i)
                want = model(acc(inputs, lambda u, t=t: u.less_equal(t)))
                got = acc(out, lambda u, t=t: u.less_equal(t))
                assert got == want, (name, e, t)


def product_strategy(data, inner_max=3):
    item = st.tuples(data, st.integers(0, inner_max))
    return updates_strategy(item, epochs=3, spread=2)


@settings(max_examples=150, deadline=None)
@given(product_strategy(SMALL))
def test_count_and_distinct_at_product_times(rounds):
    check_product("count", rounds)
    check_product("distinct", rounds)


@settings(max_examples=100, deadline=None)
@given(product_strategy(PAIRS))
def test_reduce_at_product_times(rounds):
    check_product("sum", rounds)


@settings(max_examples=100, deadline=None)
@given(product_strategy(SIDES))
def test_join_at_product_times(rounds):
    check_product("join", rounds)


@settings(max_examples=100, deadline=None)
@given(product_strategy(PAIRS))
def test_reduce_and_join_at_product_times_with_several_epochs_pending(rounds):
    check_product("sum", rounds, wait=False)
    check_product("count", [[((d[0], i), t, r) for (d, i), t, r in u] for u in rounds], wait=False)


# -- arrangements: compaction, the spine, sharing, import --------------------------------------


@settings(max_examples=100, deadline=None)
@given(updates_strategy(PAIRS, epochs=6, spread=3))
def test_compaction_never_changes_an_answer_at_a_time_not_yet_passed(rounds):
    def work(worker):
        def dataflow(scope):
            session, c = dd.new_input(scope)
            arranged = c.arrange_by_key()
            return session, arranged.trace_handle(), arranged.stream.probe()

        session, handle, probe = worker.dataflow(dataflow)
        sent = []
        for e, updates in enumerate(rounds):
            for d, t, r in updates:
                session.update_at(d, t, r)
            sent.extend(updates)
            session.advance_to(e + 1)
            worker.step_while(lambda: probe.less_than(e + 1))
            handle.set_logical_compaction([e + 1])  # only times >= e + 1 asked from now on
            for t in range(e + 1, e + 5):
                want = sorted(acc([u for u in sent if u[1] <= e], lambda u: u <= t).items())
                assert handle.accumulate(t) == want, (e, t)
        session.close()
        return handle.trace.statistics()

    pt.execute(work)


def test_compaction_shrinks_a_long_history_and_the_spine_stays_logarithmic():
    def work(worker):
        def dataflow(scope):
            session, c = dd.new_input(scope)
            arranged = c.arrange_by_key()
            return session, arranged.trace_handle(), arranged.stream.probe()

        session, handle, probe = worker.dataflow(dataflow)
        for e in range(200):
            session.update(("k", e % 5), 1)
            session.update(("k", (e - 1) % 5), -1)
            session.advance_to(e + 1)
            worker.step_while(lambda: probe.less_than(e + 1))
            handle.set_logical_compaction([e + 1])
        stats = handle.trace.statistics()
        session.close()
        return stats

    [stats] = pt.execute(work)
    assert stats["inserted"] == 200
    assert stats["batches"] <= 2 * 8 + 2  # O(log n) batches
    assert stats["updates"] < 100  # 400 updates, compacted


def test_an_arrangement_is_shared_and_imported_into_another_dataflow():
    def work(worker):
        def first(scope):
            session, c = dd.new_input(scope)
            arranged = c.arrange_by_key()
            sums = arranged.reduce(lambda k, vs: [(sum(v * n for v, n in vs), 1)])
            joined = arranged.join(arranged)  # one index, read by two operators
            return session, arranged.trace_handle(), sums.as_collection().capture(), joined.probe()

        session, handle, sums, probe = worker.dataflow(first)
        for v in range(3):
            session.insert(("a", v))
        session.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))

        def second(scope):
            imported = handle.import_into(scope)
            counts = imported.reduce(lambda k, vs: [(len(vs), 1)]).as_collection()
            return counts.capture(), counts.probe()

        counts, probe2 = worker.dataflow(second)
        session.insert(("b", 7))
        session.remove(("a", 0))
        session.advance_to(2)
        worker.step_while(lambda: probe.less_than(2) or probe2.less_than(2))
        assert counts.as_of(0) == [(("a", 3), 1)]
        assert counts.as_of(1) == [(("a", 2), 1), (("b", 1), 1)]
        assert sums.as_of(1) == [(("a", 3), 1), (("b", 7), 1)]
        handle.drop()
        session.close()
        return True

    assert pt.execute(work) == [True]


def test_many_distinct_times_in_one_flush_cost_one_batch_per_invocation():
    def work(worker):
        def dataflow(scope):
            session, c = dd.new_input(scope)
            arranged = c.arrange_by_self()
            batches = []
            arranged.stream.inspect_batch(lambda t, b: batches.append((t, len(b))))
            return session, arranged, batches, c.count().probe()

        session, arranged, batches, probe = worker.dataflow(dataflow)
        for t in range(1000):
            session.update_at(t % 7, t, 1)
        session.advance_to(1000)
        worker.step_while(lambda: probe.less_than(1000))
        session.close()
        return batches

    [batches] = pt.execute(work)
    assert batches == [(0, 1)]  # 1000 distinct times: one sealed batch, one message


def test_input_session_rejects_an_update_before_its_time():
    def build(scope):
        session, c = dd.new_input(scope)
        session.advance_to(3)
        with pytest.raises(ValueError, match="before the session's time"):
            session.update_at("x", 2, 1)
        session.close()
        return c.capture()

    assert pt.example(build).updates() == []


@settings(max_examples=60, deadline=None)
@given(product_strategy(EDGES, inner_max=2))
def test_reachability_nested_in_a_loop_at_product_times(rounds):
    check_product("reach", rounds, inner_max=2)
    check_product("reach_entered", rounds, inner_max=2)


def test_a_large_merge_in_progress_does_not_starve_the_small_ones_behind_it():
    """Each merge in progress gets its own effort: while two large batches merge, the small
    batches inserted after them keep merging too, so readers scan few batches."""
    from pytimely.differential.trace import Batch, Trace

    trace = Trace("t", 0)
    reader = trace.handle(reads=True)
    for half in range(2):
        trace.insert(Batch.from_updates([((k, half), 0, 1) for k in range(20_000)], 0))
        reader.acknowledge(trace.seq)
    for i in range(60):
        trace.insert(Batch.from_updates([(("small", i), 0, 1)], 0))
        reader.acknowledge(trace.seq)
    stats = trace.statistics()
    assert stats["merging"] >= 1  # the large merge is still under way
    assert stats["batches"] <= 2 + 2 * 7, stats  # the 60 small ones: O(log 60) batches
    assert sum(len(b) for b in trace.batches(reader.acked)) == 40_060


def _closure_by_subsets(new, old):
    """Every join of a nonempty subset of ``new`` with any subset of ``old``, by brute force."""
    import itertools

    from pytimely.differential.lattice import join

    out = set()
    for n in range(1, len(new) + 1):
        for some in itertools.combinations(sorted(new), n):
            for m in range(len(old) + 1):
                for others in itertools.combinations(sorted(old), m):
                    acc = some[0]
                    for t in (*some[1:], *others):
                        acc = join(acc, t)
                    out.add(acc)
    return out


LOOP_TIMES = st.builds(Product, st.integers(0, 2), st.integers(0, 5))


@settings(max_examples=200, deadline=None)
@given(st.sets(LOOP_TIMES, min_size=1, max_size=4), st.sets(LOOP_TIMES, max_size=4), st.booleans())
def test_join_closure_equals_every_join_of_subsets(new, old, one_outer):
    # With one outer coordinate the times are a chain, closed by a shortcut; otherwise by joins.
    from pytimely.differential.reduce import join_closure

    if one_outer:
        new = {Product(1, t[1]) for t in new}
        old = {Product(1, t[1]) for t in old}
    assert join_closure(new, old) == _closure_by_subsets(new, old)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.sets(LOOP_TIMES, min_size=1, max_size=2),
    st.sets(LOOP_TIMES, min_size=1, max_size=4),
    st.lists(LOOP_TIMES, max_size=5),
    st.sets(LOOP_TIMES, max_size=3),
)
def test_the_one_pass_chain_closure_equals_the_general_one(before, new, history, pending):
    """A reduce's closure of a key's new times with its history advanced by the frontier it
    saw last, by the one-pass chain path where that applies, equals the general path."""
    from pytimely.differential.lattice import advance_by, in_future, minimal
    from pytimely.differential.reduce import _ChainTimes, join_closure

    before = minimal(before)
    # What a reduce sees: new and pending times in the future of the last frontier.
    new = {t for t in new if in_future(before, t)}
    pending = {t for t in pending if in_future(before, t)}
    if not new:
        return
    ins = [((), u, 1) for u in history]
    closed = _ChainTimes(before).closure(new, ins, pending)
    old = {advance_by(u, before) for u in history} | pending
    general = join_closure(new, old) - pending
    if closed is not None:
        assert closed == general
    else:  # the general path only where some time lies off the least outer time of before
        e = min(f[0] for f in before)
        assert any(t[0] != e for t in new | pending) or any(u[0] > e for u in history)


# -- the trace's merges and a key's updates across batches ------------------------------------


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.lists(
        st.dictionaries(st.integers(0, 4), st.lists(st.integers(), min_size=1, max_size=3)),
        max_size=5,
    ),
    st.integers(0, 5),
)
def test_compiled_updates_of_equals_the_python_lookup(datas, key):
    from pytimely import _native
    from pytimely.differential.reduce import _updates_of

    compiled = _native.speedups
    if compiled is None:
        pytest.skip("the compiled extension is not built")
    got, want = compiled.updates_of(key, datas), _updates_of(key, datas)
    assert list(got) == list(want)
    owners = [d[key] for d in datas if key in d]
    if len(owners) == 1:
        assert got is owners[0]  # one batch has the key: its own list, not a copy
    elif not owners:
        assert got == ()
    with pytest.raises(TypeError):
        compiled.updates_of(key, tuple(datas))


@pytest.mark.parametrize("at_once", [True, False])
def test_a_merge_works_for_the_smaller_batch_and_leaves_untouched_keys_as_they_were(
    at_once, monkeypatch
):
    """Merging copies the larger batch's index (at once, or by chunks when it is large) and
    merges the other's keys into it: a key that no newer update met keeps its very list, and
    a key in both is compacted by the frontier."""
    from pytimely.differential import trace
    from pytimely.differential.trace import Batch, _Merge

    if not at_once:
        monkeypatch.setattr(trace, "COPY_AT_ONCE", 100)
    old = Batch.from_updates([((k, "v"), 0, 1) for k in range(1_000)], 0)
    new = Batch.from_updates([((1, "v"), 3, -1), ((2, "w"), 3, 1), ((5_000, "v"), 3, 1)], 3)
    merge = _Merge(old, new, [5])
    fuel, merged = merge.work(10)  # at once: 62 units spent; by chunks: 160 entries copied
    assert merged is None
    assert len(merge.data) == (1_000 if at_once else 160)
    while merged is None:
        fuel, merged = merge.work(10)
    assert merged.data[7] is old.data[7]  # untouched: the same list, its time not advanced
    assert 1 not in merged.data  # inserted at 0, retracted at 3: consolidated away at 5
    assert merged.data[2] == [("v", 5, 1), ("w", 5, 1)]  # met by a new update: compacted
    assert merged.data[5_000] is new.data[5_000]
    assert merged.size == 1_000 - 1 + 2


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 5), st.integers(-2, 2).filter(bool)), max_size=6),
        min_size=2,
        max_size=12,
    )
)
def test_a_merge_writes_into_a_batch_nothing_else_holds_and_copies_one_that_is_held(epochs):
    """A trace merges in place into the base batch's index when nothing but the merge holds
    that batch (no reader, no message, no import), else it copies it: the batches a reader
    holds never change, and either way the trace holds the same consolidated updates."""
    from pytimely.differential.trace import Batch, Trace, _Merge

    starts = []
    original = _Merge._start

    def spy(merge):
        original(merge)
        starts.append(merge.data is merge.base)

    results = []
    for hold in (False, True):
        trace = Trace("t", 0)
        held, snapshots = [], []
        starts.clear()
        try:
            _Merge._start = spy
            for epoch, updates in enumerate(epochs):
                batch = Batch.from_updates([((k, "v"), epoch, d) for k, d in updates], epoch)
                if hold:
                    held.append(batch)
                    snapshots.append({k: list(v) for k, v in batch.data.items()})
                trace.insert(batch)
                del batch
            while any(type(e) is not Batch for e in trace.spine):
                trace.exert(1_000)
        finally:
            _Merge._start = original
        if hold:  # the first merge's base is one of the held batches: copied
            assert not starts or starts[0] is False
            assert [{k: list(v) for k, v in b.data.items()} for b in held] == snapshots
        got: Counter = Counter()
        for b in trace.batches():
            for k, ups in b.data.items():
                for v, t, d in ups:
                    got[(k, v, t)] += d
        results.append(({k: d for k, d in got.items() if d}, list(starts)))
    (unheld, _), (copied, _) = results
    assert unheld == copied


def test_merges_into_an_old_batch_nothing_else_holds_write_in_place():
    """An old batch that only the trace holds takes the newer batches merged into it without
    being copied; one a reader still holds is copied and stays as it was."""
    from pytimely.differential import trace as trace_module
    from pytimely.differential.trace import Batch, Trace, _Merge

    if trace_module._refcount is None:
        pytest.skip("no reference counts on this interpreter: merges always copy")
    for hold in (False, True):
        trace = Trace("t", 0)
        trace.insert(Batch.from_updates([((k, "v"), 0, 1) for k in range(12)], 0))
        old = trace.spine[0] if hold else None
        into_old = []  # (in place?) of each merge whose base is the old batch's index
        original = _Merge._start

        def spy(merge):
            original(merge)
            if 0 in merge.base and len(merge.base) >= 12:
                into_old.append(merge.data is merge.base)

        try:
            _Merge._start = spy
            for epoch in range(1, 12):
                trace.insert(Batch.from_updates([((epoch, "v"), epoch, -1)], epoch))
                trace.exert(10_000)
        finally:
            _Merge._start = original
        assert into_old and all(m is (not hold) for m in into_old), into_old
        if hold:
            assert len(old.data) == 12 and old.data[3] == [("v", 0, 1)]
        live: Counter = Counter()
        for b in trace.batches():
            for k, ups in b.data.items():
                live[k] += sum(d for _v, _t, d in ups)
        assert sorted(k for k, c in live.items() if c) == [0]


UPDATE_LISTS = st.lists(
    st.tuples(st.sampled_from(["v", "w", ()]), st.integers(0, 6), st.integers(-2, 2).filter(bool)),
    min_size=1,
    max_size=6,
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.dictionaries(st.integers(0, 6), UPDATE_LISTS, max_size=6),
    st.dictionaries(st.integers(0, 6), UPDATE_LISTS, max_size=6),
    st.sampled_from(["none", "int", "product"]),
    st.integers(0, 4),
    st.integers(1, 8),
)
def test_compiled_merge_equals_the_python_merge(a, b, since_kind, f, fuel):
    """The compiled merge of two batches' keys gives what the Python one gives, step by step
    (the same positions and fuel, the same merged index), for every kind of compaction."""
    from pytimely import _native
    from pytimely.differential.trace import Batch, _Merge

    compiled = _native.speedups
    if compiled is None:
        pytest.skip("the compiled extension is not built")
    if since_kind == "product":
        a = {k: [(v, Product(t % 2, t), d) for v, t, d in ups] for k, ups in a.items()}
        b = {k: [(v, Product(t % 2, t), d) for v, t, d in ups] for k, ups in b.items()}
    since = {"none": [], "int": [f], "product": [Product(1, f), Product(2, 0)]}[since_kind]
    minimum = Product(0, 0) if since_kind == "product" else 0
    runs = []
    for use_compiled in (False, True):
        ba, bb = Batch(dict(a), minimum), Batch(dict(b), minimum)
        merge = _Merge(ba, bb, since)
        steps = []
        _native.speedups = compiled if use_compiled else None
        try:
            done = None
            while done is None:
                left, done = merge.work(fuel)
                steps.append((merge.pos, left))
        finally:
            _native.speedups = compiled
        runs.append((steps, done.data, done.size))
    (steps_py, data_py, size_py), (steps_c, data_c, size_c) = runs
    assert steps_c == steps_py
    assert size_c == size_py == sum(map(len, data_py.values()))  # counted as it merged
    assert {k: sorted(map(repr, v)) for k, v in data_c.items()} == {
        k: sorted(map(repr, v)) for k, v in data_py.items()
    }


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(
            st.tuples(st.sampled_from(["a", "b", 1]), st.sampled_from([(), "v", 2])),
            st.sampled_from([0, 1, Product(0, 1)]),
            st.integers(-2, 2).filter(bool),
        ),
        max_size=10,
    ),
    st.sampled_from([0, 1, Product(0, 1)]),
    st.booleans(),
)
def test_compiled_index_equals_the_python_index(updates, time, one_time):
    """Sealing a batch indexes the same updates, with the same size, by either path; updates
    of another shape than tuples take the Python path."""
    from pytimely import _native
    from pytimely.differential.trace import Batch

    compiled = _native.speedups
    if compiled is None:
        pytest.skip("the compiled extension is not built")
    if one_time:
        updates = [(kv, time, d) for kv, _t, d in updates]
    data, size = compiled.index_updates(updates, time)
    want = Batch.index(updates, time)
    assert data == want
    assert size == sum(map(len, want.values())) == Batch.from_updates(updates, time).size
    listed = [[kv, t, d] for kv, t, d in updates]  # updates as lists: the Python path
    if listed:
        assert compiled.index_updates(listed, time) is None
        assert Batch.from_updates(listed, time).data == want


COUNTED = st.lists(st.tuples(st.just(()), LOOP_TIMES, st.integers(-2, 2).filter(bool)), max_size=6)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.lists(LOOP_TIMES, min_size=1, max_size=4, unique=True),
    COUNTED,
    COUNTED,
    st.sampled_from(["distinct", "minus_one", "float"]),
    st.booleans(),
)
def test_compiled_count_changes_equal_the_python_ones(times, ins, outs, kind, as_tuple):
    """A threshold's corrections at a loop's times are the same by either path; a function
    that returns anything but an int leaves the compiled path without a trace."""
    from pytimely import _native
    from pytimely.differential.reduce import _count_changes

    compiled = _native.speedups
    if compiled is None:
        pytest.skip("the compiled extension is not built")
    f = {
        "distinct": lambda n: 1 if n > 0 else 0,
        "minus_one": lambda n: n - 1,
        "float": lambda n: n / 2,
    }[kind]
    times = sorted(times)
    if as_tuple:
        outs = tuple(outs)
    want_fixes: list = [("earlier",)]
    want = _count_changes("k", times, ins, outs, f, want_fixes)
    got_fixes: list = [("earlier",)]
    got = compiled.count_changes("k", times, ins, outs, f, got_fixes, Product)
    if got is None:  # handed back untouched
        assert kind == "float" and got_fixes == [("earlier",)]
        return
    assert (got, got_fixes) == (want, want_fixes)
    assert compiled.count_changes("k", [(0, 1)], ins, outs, f, [], Product) is None  # tuple time


# -- a threshold's private histories, compiled and in Python -----------------------------------

HISTORY = st.dictionaries(
    st.integers(0, 5),
    st.lists(st.tuples(st.just(()), LOOP_TIMES, st.integers(-2, 2).filter(bool)), max_size=9),
    max_size=6,
)
#: A compaction frontier, or none: the loop times whose future the histories may be advanced to.
SINCE = st.one_of(st.none(), st.sets(LOOP_TIMES, min_size=1, max_size=2))


def _compiled_or_skip() -> object:
    from pytimely import _native

    if _native.speedups is None:
        pytest.skip("the compiled extension is not built")
    return _native.speedups


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    HISTORY,
    st.lists(st.integers(0, 7), max_size=6),
    st.sets(LOOP_TIMES, max_size=2),
    st.dictionaries(st.integers(0, 5), st.integers(1, 9), max_size=3),
)
def test_compiled_history_compaction_equals_the_python_one(index, keys, frontier, limits):
    """A private history's lists that have reached their limit are compacted by the frontier,
    to the same updates and the same next limits, by either path (keys it lacks are skipped,
    keys compacted to nothing leave it)."""
    from pytimely import _native
    from pytimely.differential.lattice import minimal
    from pytimely.differential.reduce import _History

    compiled = _compiled_or_skip()
    frontier = minimal(frontier)
    runs = []
    for use_compiled in (False, True):
        h = _History()
        h.index = {k: list(v) for k, v in index.items() if v}
        h.limits = {k: n for k, n in limits.items() if k in h.index}
        _native.speedups = compiled if use_compiled else None
        try:
            h.compact_grown(keys, frontier)
        finally:
            _native.speedups = compiled
        runs.append((h.index, h.limits))
    assert runs[1] == runs[0]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.lists(st.tuples(st.integers(0, 4), LOOP_TIMES, st.integers(-2, 2)), max_size=12),
    HISTORY,
)
def test_compiled_record_index_equals_the_python_one(records, index):
    """A threshold's arriving records land in its history and its fresh times alike by either
    path; a record of another shape is refused by the compiled one."""
    from pytimely.differential.reduce import _index_self

    compiled = _compiled_or_skip()
    py_index, py_fresh = {k: list(v) for k, v in index.items()}, {}
    c_index, c_fresh = {k: list(v) for k, v in index.items()}, {}
    _index_self(records, py_index, py_fresh)
    compiled.index_self(records, c_index, c_fresh)
    assert (c_index, c_fresh) == (py_index, py_fresh)
    with pytest.raises(TypeError):
        compiled.index_self([[1, 2, 3]], {}, {})


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.dictionaries(st.integers(0, 5), st.sets(LOOP_TIMES, min_size=1, max_size=3), max_size=5),
    HISTORY,
    st.dictionaries(st.integers(0, 5), st.sets(LOOP_TIMES, min_size=1, max_size=3), max_size=4),
    st.sets(LOOP_TIMES, min_size=1, max_size=2),
    st.booleans(),
)
def test_compiled_chain_pending_equals_the_python_closure(fresh, index, pending, before, bare):
    """The keys' pending times (and the keys waiting at each time) after the compiled chain
    closure equal the Python one's; the keys it hands back are those whose times are not a
    chain at one outer time, and it leaves them untouched."""
    from pytimely.differential.lattice import minimal
    from pytimely.differential.reduce import _ChainTimes

    compiled = _compiled_or_skip()
    before = minimal(before)
    chain = _ChainTimes(before)
    pending = {k: {t for t in ts if t not in fresh.get(k, ())} or ts for k, ts in pending.items()}
    want_pending = {k: set(v) for k, v in pending.items()}
    want_waiting: dict = {}
    for k, ts in pending.items():
        for t in ts:
            want_waiting.setdefault(t, set()).add(k)
    got_pending = {k: set(v) for k, v in pending.items()}
    got_waiting = {t: set(ks) for t, ks in want_waiting.items()}
    # A key's one new time may come as the time itself (what packed records leave).
    given_fresh = {k: next(iter(v)) if bare and len(v) == 1 else v for k, v in fresh.items()}
    rest = compiled.chain_pending(
        given_fresh, index, got_pending, got_waiting, chain.outer, chain.floor, {}, Product
    )
    for key, times in fresh.items():
        p = want_pending.get(key, set())
        closed = chain.closure(times, index.get(key, ()), p)
        if closed is None:
            assert key in rest
            continue
        assert key not in rest
        want_pending[key] = p | closed
        for t in closed:
            want_waiting.setdefault(t, set()).add(key)
    for key in rest:  # untouched, as the general path expects them
        if key in pending:
            assert got_pending[key] == pending[key]
        else:
            assert key not in got_pending
    assert got_pending == {k: v for k, v in want_pending.items() if k in got_pending}
    assert got_waiting == want_waiting


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.dictionaries(st.integers(0, 4), st.sets(LOOP_TIMES, min_size=1, max_size=4), max_size=4),
    HISTORY,
    HISTORY,
    st.sampled_from(["distinct", "minus_one", "float"]),
    st.data(),
)
def test_compiled_threshold_evaluation_equals_the_python_one(pending, ins, outs, kind, data):
    """A threshold's corrections at the keys' ready times, and the pending times left, are the
    same by the compiled loop as key by key in Python; a key the compiled path does not take
    (here: a function that answers a float) is handed back untouched."""
    from pytimely.differential.reduce import _count_changes, positive

    compiled = _compiled_or_skip()
    f = {
        "distinct": positive,
        "minus_one": lambda n: n - 1,
        "float": lambda n: n / 2,
    }[kind]
    ready = {
        k: sorted(data.draw(st.sets(st.sampled_from(sorted(ts)), min_size=1)), reverse=True)
        for k, ts in pending.items()
    }
    got_fixes: list = []
    got_pending = {k: set(v) for k, v in pending.items()}
    # (distinct's threshold goes as None: the compiled loop knows it without a call)
    given = None if kind == "distinct" else f
    rest = compiled.threshold_ready(ready, got_pending, ins, outs, given, got_fixes, Product)
    assert all(times == sorted(times) for times in ready.values())
    want_fixes: list = []
    want_pending = {k: set(v) for k, v in pending.items()}
    for key, times in ready.items():
        fixes: list = []
        _count_changes(key, times, ins.get(key, ()), outs.get(key, ()), f, fixes)
        if key in rest:  # handed back untouched: f answered a float
            assert kind == "float" and got_pending[key] == pending[key]
            continue
        want_fixes += fixes
        want_pending[key] -= set(times)
        if not want_pending[key]:
            del want_pending[key]
    assert (got_fixes, got_pending) == (want_fixes, want_pending)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(LOOP_TIMES, st.sets(LOOP_TIMES, min_size=1, max_size=3))
def test_compiled_product_advance_equals_advance_by(t, frontier):
    from pytimely.differential.lattice import advance_by, minimal

    compiled = _compiled_or_skip()
    frontier = minimal(frontier)
    got = compiled.advance_product(tuple(frontier), Product, None, t)
    assert got == advance_by(t, frontier) and type(got) is Product
    nested = Product(Product(0, 1), 2)
    assert compiled.advance_product(tuple(frontier), Product, lambda x: "fallback", nested) == (
        "fallback"
    )


@settings(max_examples=40, deadline=None)
@given(product_strategy(EDGES, inner_max=2))
def test_reachability_by_the_python_paths_matches_the_model(rounds):
    """The same loops with every compiled path switched off (what a machine without a C
    compiler runs)."""
    from pytimely import _native

    compiled = _native.speedups
    _native.speedups = None
    try:
        check_product("reach", rounds, inner_max=2)
    finally:
        _native.speedups = compiled


def _packed(index: dict) -> dict:
    """``index`` (key -> ``((), Product, diff)`` updates) as packed histories, by the compiled
    extension itself."""
    compiled = _compiled_or_skip()
    out: dict = {}
    assert compiled.pack_extend(out, {k: list(v) for k, v in index.items() if v}, Product)
    return out


def _multiset(updates) -> Counter:
    return Counter({(v, t): d for v, t, d in updates})


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.lists(st.tuples(st.integers(0, 4), LOOP_TIMES, st.integers(-2, 2)), max_size=12),
    HISTORY,
)
def test_packed_records_hold_what_the_lists_hold(records, index):
    """Records packed into a history read back as the updates the list path holds; a record
    that does not fit (a time of another shape, a diff beyond 64 bits) packs nothing."""
    from pytimely.differential.reduce import _index_self, _unpacked

    compiled = _compiled_or_skip()
    lists, list_fresh = {k: list(v) for k, v in index.items() if v}, {}
    packed, packed_fresh = _packed(index), {}
    _index_self(records, lists, list_fresh)
    assert compiled.pack_records(records, packed, packed_fresh, Product)
    # (a key's one time is held as the time, several as a set)
    assert {k: v if type(v) is set else {v} for k, v in packed_fresh.items()} == list_fresh
    assert all(type(v) is set for k, v in packed_fresh.items() if len(list_fresh[k]) > 1)
    assert {k: _unpacked(v) for k, v in packed.items()} == lists
    for odd in [(0, 1, 1), (0, Product(0, 1), 2**70), (0, Product(0, 1), 1.0)]:
        before = {k: bytes(v) for k, v in packed.items()}
        assert not compiled.pack_records([*records, odd], packed, {}, Product)
        assert {k: bytes(v) for k, v in packed.items()} == before
    assert not compiled.pack_extend(packed, {0: [("v", Product(0, 1), 1)]}, Product)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(HISTORY, st.lists(st.integers(0, 7), max_size=6), st.sets(LOOP_TIMES, max_size=2))
def test_packed_compaction_equals_the_list_compaction(index, keys, frontier):
    """Packed histories compact to the same updates (in another order) and the same next
    limits as lists do."""
    from pytimely.differential.lattice import minimal
    from pytimely.differential.reduce import _History, _unpacked

    compiled = _compiled_or_skip()
    frontier = minimal(frontier)
    lists = _History()
    lists.index = {k: list(v) for k, v in index.items() if v}
    lists.compact_grown(keys, frontier)
    packed = _packed(index)
    assert compiled.packed_compact(packed, keys, tuple(frontier), Product)
    assert packed.keys() == lists.index.keys()
    for key, ba in packed.items():
        assert _multiset(_unpacked(ba)) == _multiset(lists.index[key])
        assert struct.unpack_from("q", ba)[0] == lists.limits.get(key, 4)
    assert not compiled.packed_compact(packed, keys, ((0, 1),), Product)  # not a Product


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.dictionaries(st.integers(0, 5), st.sets(LOOP_TIMES, min_size=1, max_size=3), max_size=5),
    HISTORY,
    st.sets(LOOP_TIMES, min_size=1, max_size=2),
    HISTORY,
)
def test_compiled_phases_read_packed_histories_as_lists(fresh, index, before, outs):
    """The chain closure and the threshold's evaluation give the same answers over packed
    histories as over lists."""
    from pytimely.differential.lattice import minimal
    from pytimely.differential.reduce import _ChainTimes

    compiled = _compiled_or_skip()
    chain = _ChainTimes(minimal(before))
    runs = []
    for ins_, outs_ in ((index, outs), (_packed(index), _packed(outs))):
        pending: dict = {}
        waiting: dict = {}
        rest = compiled.chain_pending(
            fresh, ins_, pending, waiting, chain.outer, chain.floor, {}, Product
        )
        ready = {k: sorted(ts) for k, ts in pending.items()}
        fixes: list = []
        left = compiled.threshold_ready(
            ready, pending, ins_, outs_, lambda n: 1 if n > 0 else 0, fixes, Product
        )
        runs.append((rest, waiting, fixes, pending, left))
    assert runs[1] == runs[0]


@pytest.mark.parametrize("kind", ["huge diffs", "float counts"])
def test_a_threshold_in_a_loop_unpacks_what_does_not_fit(kind):
    """Diffs beyond 64 bits, or a threshold whose function answers floats, leave the packed
    histories for lists, with the same answers."""

    def body(c):
        def loop(inner):
            x = c.enter(inner)
            if kind == "huge diffs":
                return x.threshold(lambda n: n).leave()
            return x.threshold(lambda n: n / 2).leave()

        return c.scope.iterative(loop)

    def build(scope):
        session, c = dd.new_input(scope)
        captured = body(c).capture()
        big = 2**70 if kind == "huge diffs" else 3
        for epoch in range(3):
            session.update("a", big)
            session.update("b", 1)
            session.advance_to(epoch + 1)
        session.close()
        return captured

    got = pt.example(build)
    want = 3 * 2**70 if kind == "huge diffs" else 4.5
    assert dict((x, d) for x, d in got.as_of(2)) == {
        "a": want,
        "b": 3 if kind == "huge diffs" else 1.5,
    }


JOIN_INDEX = st.dictionaries(
    st.integers(0, 3),
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(-2, 2).filter(bool)),
        min_size=1,
        max_size=3,
    ),
    max_size=4,
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    JOIN_INDEX,
    st.lists(JOIN_INDEX, max_size=3),
    st.booleans(),
    st.sampled_from(["ints", "products", "entered"]),
)
def test_compiled_join_pairs_equal_every_pair(data, others, swap, times):
    """A join's pairs by the compiled loop: every update of a key with every update of the
    same key in each other batch, in order, at the lub of the (mapped) times, with the
    product of the diffs and the user's function of the values (swapped when asked)."""
    from pytimely.differential.lattice import TimeMemo, join

    compiled = _compiled_or_skip()
    as_product = {
        "ints": None,
        "products": lambda t: Product(t % 2, t),
        "entered": lambda t: Product(t, 0),
    }[times]
    if times == "products":  # both sides' times are loop times already
        data = {k: [(v, as_product(t), d) for v, t, d in ups] for k, ups in data.items()}
        others = [
            {k: [(v, as_product(t), d) for v, t, d in ups] for k, ups in o.items()} for o in others
        ]
    mine = None
    theirs = TimeMemo(as_product) if times == "entered" else None
    if times == "entered":  # the other side a loop's own times, this side entered
        mine, theirs = theirs, None
        others = [
            {k: [(v, Product(t, t % 3), d) for v, t, d in ups] for k, ups in o.items()}
            for o in others
        ]

    def f(key, a, b):
        return (key, a, b)

    got = compiled.join_pairs(data, others, f, swap, mine, theirs, join, Product)
    want = []
    for key, ups in data.items():
        for other in others:
            for v1, t1, d1 in ups:
                for v2, t2, d2 in other.get(key, ()):
                    m1 = mine(t1) if mine is not None else t1
                    m2 = theirs(t2) if theirs is not None else t2
                    r = f(key, v2, v1) if swap else f(key, v1, v2)
                    want.append((r, join(m1, m2), d1 * d2))
    assert got == want
    assert all(type(t) is type(w) for (_r, t, _d), (_s, w, _e) in zip(got, want))
    with pytest.raises(ZeroDivisionError):  # the user's function's error goes through
        if any(k in o for k in data for o in others):
            compiled.join_pairs(data, others, lambda *_: 1 / 0, swap, mine, theirs, join, Product)
        else:
            raise ZeroDivisionError


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    JOIN_INDEX,
    st.lists(JOIN_INDEX, min_size=2, max_size=4),
    st.booleans(),
    st.sampled_from(["ints", "products", "entered"]),
    st.integers(0, 3),
)
def test_compiled_join_pairs_read_the_other_trace_consolidated(data, others, swap, times, m):
    """Given the batch's meet (a time at or before its every time), a key's updates held by
    several other batches are consolidated at their times advanced by it: the pairs summed
    at each (record, time) are those of every pair, and no pair has a zero diff; the Python
    form makes the same pairs."""
    from pytimely.differential.join import join_pairs
    from pytimely.differential.lattice import TimeMemo, join

    compiled = _compiled_or_skip()
    if times == "products":
        meet = Product(m, m % 2)
        data = {
            k: [(v, join(Product(t, t % 3), meet), d) for v, t, d in ups] for k, ups in data.items()
        }
        others = [
            {k: [(v, Product(t, t % 2), d) for v, t, d in ups] for k, ups in o.items()}
            for o in others
        ]
        mine = theirs = None
    elif times == "entered":  # this side a loop's own times, the other side entered
        meet = Product(m, 1)
        data = {
            k: [(v, join(Product(t, t % 3), meet), d) for v, t, d in ups] for k, ups in data.items()
        }
        mine, theirs = None, TimeMemo(lambda t: Product(t, 0))
    else:
        meet = m
        data = {k: [(v, max(t, m), d) for v, t, d in ups] for k, ups in data.items()}
        mine = theirs = None
    calls = []

    def f(key, a, b):
        calls.append(key)
        return (key, a, b)

    lub = max if times == "ints" else join
    got = compiled.join_pairs(data, others, f, swap, mine, theirs, lub, Product, meet)
    python = join_pairs(data, others, lambda k, a, b: (k, a, b), swap, mine, theirs, lub, meet)
    assert sorted(got, key=repr) == sorted(python, key=repr)  # the same pairs, made once each
    want: Counter = Counter()
    for key, ups in data.items():
        for other in others:
            for v1, t1, d1 in ups:
                for v2, t2, d2 in other.get(key, ()):
                    m2 = theirs(t2) if theirs is not None else t2
                    r = (key, v2, v1) if swap else (key, v1, v2)
                    want[(r, lub(t1, m2))] += d1 * d2
    summed: Counter = Counter()
    for r, t, d in got:
        summed[(r, t)] += d
    assert {k: d for k, d in summed.items() if d} == {k: d for k, d in want.items() if d}
    assert all(d for _r, _t, d in got)
    assert len(calls) == len(got)


def test_compiled_join_makes_no_pair_of_an_insertion_and_its_later_retraction():
    """An edge inserted in one batch and deleted in a later one, both before the new batch's
    time: no pair, and the user's function is not called for it."""
    compiled = _compiled_or_skip()
    calls = []

    def f(key, a, b):
        calls.append((a, b))
        return b

    others = [{1: [("x", 0, 1), ("y", 0, 1)]}, {1: [("x", 2, -1)]}, {1: [("z", 5, 1)]}]
    got = compiled.join_pairs({1: [((), 3, 1)]}, others, f, False, None, None, max, Product, 3)
    assert sorted(got) == [("y", 3, 1), ("z", 5, 1)]
    assert sorted(calls) == [((), "y"), ((), "z")]
    # Without the meet every pair is made, the retraction's too.
    got = compiled.join_pairs({1: [((), 3, 1)]}, others, f, False, None, None, max, Product)
    assert sorted(got) == [("x", 3, -1), ("x", 3, 1), ("y", 3, 1), ("z", 5, 1)]


def _in_future_of(frontier, pending):
    """``pending`` (key -> times) with only the times in the future of ``frontier`` (all of
    them without one), keys left with none dropped: what a reduce sees waiting."""
    from pytimely.differential.lattice import in_future

    if not frontier:
        return pending
    kept = {k: {t for t in ts if in_future(frontier, t)} for k, ts in pending.items()}
    return {k: ts for k, ts in kept.items() if ts}


def _canonical(updates, frontier) -> Counter:
    """Updates advanced by ``frontier`` and consolidated: what compaction may leave of them."""
    from pytimely.differential.lattice import advance_by

    acc: Counter = Counter()
    for v, t, d in updates:
        acc[(v, advance_by(t, frontier) if frontier else t)] += d
    return Counter({k: d for k, d in acc.items() if d})


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.dictionaries(st.integers(0, 4), st.sets(LOOP_TIMES, min_size=1, max_size=4), max_size=4),
    HISTORY,
    HISTORY,
    SINCE,
    st.data(),
)
def test_compiled_threshold_into_records_equals_the_batch_form(pending, ins, outs, since, data):
    """A threshold whose output is a collection gets, as records, the corrections the batch
    form gives, and finds them in its packed output history (compacted there by the frontier
    once grown, which changes no accumulation at a time in its future)."""
    from pytimely.differential.lattice import minimal
    from pytimely.differential.reduce import _unpacked

    compiled = _compiled_or_skip()
    frontier = minimal(since) if since else None
    pending = _in_future_of(frontier, pending)
    ready = {
        k: sorted(data.draw(st.sets(st.sampled_from(sorted(ts)), min_size=1)))
        for k, ts in pending.items()
    }
    want_fixes: list = []
    want_pending = {k: set(v) for k, v in pending.items()}
    compiled.threshold_ready(
        {k: list(v) for k, v in ready.items()}, want_pending, ins, outs, None, want_fixes, Product
    )
    got: list = []
    got_pending = {k: set(v) for k, v in pending.items()}
    packed_outs = _packed(outs)
    rest = compiled.records_ready(
        ready,
        got_pending,
        _packed(ins),
        packed_outs,
        None,
        got,
        Product,
        None if frontier is None else tuple(frontier),
    )
    assert rest == []
    assert got == [(kv[0], t, d) for kv, t, d in want_fixes]
    assert got_pending == want_pending
    for key in set(outs) | set(ready):
        before = [u for u in outs.get(key, ())]
        after = before + [((), t, d) for kv, t, d in want_fixes if kv[0] == key]
        have = _unpacked(packed_outs[key]) if key in packed_outs else []
        assert _canonical(have, frontier) == _canonical(after, frontier)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.dictionaries(st.integers(0, 4), st.sets(LOOP_TIMES, min_size=1, max_size=3), max_size=4),
    HISTORY,
    HISTORY,
    SINCE,
    LOOP_TIMES,
)
def test_compiled_threshold_of_the_keys_ready_at_one_time_equals_the_dict_form(
    pending, ins, outs, since, t
):
    """Handed the set of keys ready at one time ``t`` (a loop's next round, as they wait),
    the compiled threshold gives what it gives for the dict of those keys' one-time lists."""
    from pytimely.differential.lattice import in_future, minimal
    from pytimely.differential.reduce import _unpacked

    compiled = _compiled_or_skip()
    frontier = minimal(since) if since else None
    if frontier and not in_future(frontier, t):
        return
    pending = _in_future_of(frontier, {k: ts | {t} for k, ts in pending.items()})
    runs = []
    for as_set in (False, True):
        fixes: list = []
        left = {k: set(v) for k, v in pending.items()}
        packed_outs = _packed(outs)
        args = [left, _packed(ins), packed_outs, None, fixes, Product]
        bound = None if frontier is None else tuple(frontier)
        if as_set:
            rest = compiled.records_ready(set(pending), *args, bound, [t])
        else:
            rest = compiled.records_ready({k: [t] for k in pending}, *args, bound)
        outs_now = {k: _unpacked(v) for k, v in packed_outs.items()}
        runs.append((rest, sorted(fixes, key=repr), left, outs_now))
    assert runs[0] == runs[1]
    with pytest.raises(TypeError):  # a set needs its one time
        compiled.records_ready(set(pending), {}, {}, {}, None, [], Product, None)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.dictionaries(LOOP_TIMES, st.sets(st.integers(0, 5), min_size=1, max_size=4), max_size=5),
    st.data(),
)
def test_compiled_ready_gathering_equals_the_python_one(waiting, data):
    """The keys waiting at the times the frontier passed, with their times in order, by
    either path; those times leave the waiting index."""
    from pytimely.differential.reduce import _gather_ready

    compiled = _compiled_or_skip()
    passed = data.draw(st.lists(st.sampled_from(sorted(waiting)), unique=True)) if waiting else []
    runs = []
    for gather in (_gather_ready, compiled.gather_ready):
        left = {t: set(keys) for t, keys in waiting.items()}
        ready: dict = {}
        gather(left, passed, ready)
        runs.append((ready, left))
    assert runs[1] == runs[0]
    assert set(runs[0][1]) == set(waiting) - set(passed)
