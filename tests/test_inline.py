"""Operators that forward inline (``forward_batches`` on a pipeline: ``map``, ``inspect``, an
unchanged forward) run inside the call of the operator that sends to them, and their scope
counts what is sent to them as already at their consumers.  Results, progress and errors must
be exactly those of ordinary operators."""

from __future__ import annotations

import collections

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pytimely as pt
from pytimely.dataflow.inline import INLINE_CHAIN, SEND_INLINE_MAX
from pytimely.errors import OperatorError
from pytimely.progress.subgraph import _count_past_inline

pytestmark = pytest.mark.timeout(120)


def test_maps_and_inspects_on_a_pipeline_run_inline_in_chains_of_at_most_eight():
    depths = []

    def build(scope):
        s = scope.to_stream(range(10))
        depths.append(scope.inline_depth(s.source))  # sends within its invocations
        s = s.map_batch(lambda b: b)  # an ordinary operator
        depths.append(scope.inline_depth(s.source))
        for _ in range(2 * INLINE_CHAIN + 4):
            s = s.map(lambda x: x + 1)
            depths.append(scope.inline_depth(s.source))
        s = s.inspect(lambda x: None)
        depths.append(scope.inline_depth(s.source))
        kept = s.filter(lambda x: x % 2 == 0)  # fewer records out than in: an ordinary operator
        depths.append(scope.inline_depth(kept.source))
        return kept.capture()

    out = pt.example(build).extract()
    assert out == [(0, [x + 2 * INLINE_CHAIN + 4 for x in range(10) if x % 2 == 0])]
    chain = list(range(1, INLINE_CHAIN + 1))
    assert depths == [0, 0, *chain, 0, *chain, 0, 1, 2, 3, 0]


def test_a_map_behind_an_input_handle_runs_inline_but_not_behind_a_scope_input():
    """An input handle's records leave in its caller's ``send``: a ``map`` there runs inline,
    within ``send`` (the handle's operator is woken and drains the counts with its capability
    moves).  A scope input's records arrive wherever the parent's sender is: nothing inline."""
    depths, calls = [], []

    def build(scope):
        inp, s = scope.new_input()
        depths.append(scope.inline_depth(s.source))
        first = s.map(lambda x: calls.append(x) or x)
        depths.append(scope.inline_depth(first.source))

        def inner(region):
            entered = s.enter(region).map(lambda x: x)
            depths.append(region.inline_depth(entered.source))
            return entered.leave()

        return inp, scope.region(inner).capture(), first.capture()

    worker = pt.Worker()
    inp, cap, mapped = worker.dataflow(build)
    inp.send_batch([1, 2])
    assert calls == [1, 2]  # ran within send_batch, before any step
    inp.advance_to(1)
    inp.send_batch([3])
    inp.close()
    worker.run()
    assert depths == [0, 1, 0]
    assert cap.extract() == [(0, [1, 2]), (1, [3])]
    assert mapped.extract() == [(0, [1, 2]), (1, [3])]


def test_a_large_batch_sent_outside_a_step_waits_for_the_maps_invocation():
    """Within ``send`` only small batches go through inline chains: what a chain makes of a
    large one would wait for the next step in a queue, exposed to the collector meanwhile.
    A large batch waits for the map's own invocation (in the next step, collector paused),
    counted at the map's consumers all the while."""
    import gc

    calls = []

    def build(scope):
        inp, s = scope.new_input()
        doubled = s.map(lambda x: calls.append(gc.isenabled()) or 2 * x)
        counts = doubled.map(lambda x: (x % 3, 1)).aggregate(
            lambda _k, v, acc: acc + v, lambda k, acc: (k, acc)
        )
        return inp, counts.capture(), counts.probe()

    worker = pt.Worker()
    inp, cap, probe = worker.dataflow(build)
    small, large = list(range(SEND_INLINE_MAX)), list(range(SEND_INLINE_MAX + 1))
    inp.send_batch(small)
    assert calls == [True] * len(small)  # at once, within send
    inp.send_batch(large)
    assert len(calls) == len(small)  # waits for the next step
    worker.step()
    assert calls[len(small) :] == [False] * len(large)  # in the step, collector paused
    inp.advance_to(1)
    worker.step_while(lambda: probe.less_than(1), timeout=20)
    expected = collections.Counter((2 * x) % 3 for x in small + large)
    assert sorted(cap.extract()[0][1]) == sorted(expected.items())
    inp.close()
    worker.run()


def test_a_failing_map_behind_an_input_handle_raises_from_send_naming_the_map():
    worker = pt.Worker()

    def build(scope):
        inp, s = scope.new_input()
        return inp, s.map(lambda x: 1 // x, name="Invert").probe()

    inp, probe = worker.dataflow(build)
    inp.send_batch([1, 2])
    with pytest.raises(OperatorError) as info:
        inp.send_batch([0])
    assert info.value.operator == "Invert"
    assert isinstance(info.value.__cause__, ZeroDivisionError)


@pytest.mark.parametrize("claimed", [2, 5])
def test_an_input_fed_from_inside_another_operator_keeps_its_counts_with_an_inline_map(claimed):
    """A handle fed from an operator's logic, possibly after the handle's operator has run in
    the same pass, with batches whose length and iteration disagree (so the inline map's own
    count changes too): every record is still counted once, at its time."""

    def work(worker):
        def build(scope):
            inp, s = scope.new_input()
            clock_in, clock = scope.new_input()
            totals = []
            for mapped in (s.map(lambda x: (x, 1)), s.map_batch(lambda b: b).map(lambda x: (x, 1))):
                counts = mapped.aggregate(lambda _k, v, acc: acc + v, lambda k, acc: (k, acc))
                totals.append((counts.capture(), counts.probe()))

            def feed(t, batch):  # runs in an ordinary operator's invocation, within a step
                for x in batch:
                    inp.send_batch(_Stretchy([x, x, x], claimed))
                inp.advance_to(t + 1)

            clock.map_batch(lambda b: b).inspect_batch(feed)
            return inp, clock_in, totals

        inp, clock_in, totals = worker.dataflow(build)
        for t in range(3):
            clock_in.send_batch([t])
            clock_in.advance_to(t + 1)
            worker.step_while(lambda: any(p.less_than(t + 1) for _c, p in totals), timeout=20)
        clock_in.close()
        inp.close()
        worker.run()
        return [c.extract() for c, _p in totals]

    direct, behind = pt.execute(work)[0]
    assert direct == behind == [(0, [(0, 3)]), (1, [(1, 3)]), (2, [(2, 3)])]


def _count_job(worker, rounds, per_round):
    """Records through a chain of inline maps and an inspect into a count per (time, key),
    stepped a little between sends so that times overlap in flight."""
    seen = []

    def build(scope):
        inp, s = scope.new_input()
        pairs = s.map(lambda x: (x % 5, 1)).inspect(seen.append).map(lambda kv: kv)
        counts = pairs.aggregate(lambda _k, v, acc: acc + v, lambda k, acc: (k, acc))
        return inp, counts.capture(), counts.probe()

    inp, cap, probe = worker.dataflow(build)
    n = 0
    for r in range(rounds):
        for _ in range(per_round):
            inp.send(n)
            n += 1
            worker.step()
        inp.advance_to(r + 1)
        worker.step()
    inp.close()
    worker.run()
    assert probe.done()
    return cap.extract(), len(seen)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_count_downstream_of_inline_operators_gets_every_record_once_at_its_time(workers):
    rounds, per_round = 12, 7
    results = pt.execute(lambda w: _count_job(w, rounds, per_round), workers=workers)
    got = collections.Counter()
    for extracted, _seen in results:
        for t, records in extracted:
            for k, c in records:
                assert (t, k) not in got, f"two counts for key {k} at time {t}: emitted early"
                got[(t, k)] = c
    want = collections.Counter()
    for w in range(workers):
        for i in range(rounds * per_round):
            want[(i // per_round, i % 5)] += 1
    assert got == want
    assert sum(seen for _e, seen in results) == workers * rounds * per_round


def test_an_inline_map_fans_out_to_every_consumer_and_each_gets_its_own_list():
    def build(scope):
        doubled = scope.to_stream([1, 2, 3]).map(lambda x: 2 * x)
        mutated = doubled.map_batch(lambda b: b.append(0) or b)  # changes its list in place
        return doubled.capture(), mutated.capture()

    plain, mutated = pt.example(build)
    assert plain.extract() == [(0, [2, 4, 6])]
    assert mutated.extract() == [(0, [0, 2, 4, 6])]  # extract sorts a time's records


def test_inline_operators_inside_a_loop_reach_the_fixed_point():
    def collatz(scope):
        start = scope.to_stream(range(1, 8))

        def body(inner):
            handle, loop = inner.feedback(1)
            nxt = start.enter(inner).concat(loop)
            step = nxt.map(lambda x: x // 2 if x % 2 == 0 else 3 * x + 1)
            step = step.inspect(lambda x: None).map(lambda x: x)
            # An inline map straight into the feedback (an operator built before it).
            step.filter(lambda x: x != 1).map(lambda x: x).connect_loop(handle)
            return step.filter(lambda x: x == 1).leave()

        return scope.iterative(body).capture()

    assert pt.example(collatz).extract() == [(0, [1] * 7)]


def test_an_inline_map_in_a_nested_scope_is_counted_by_that_scope():
    def work(worker):
        def build(scope):
            inp, s = scope.new_input()

            def inner(region):
                plus = s.enter(region).map_batch(lambda b: b).map(lambda x: x + 1)
                assert region.inline_depth(plus.source) == 1
                return plus.leave()

            out = scope.region(inner)
            return inp, out.capture(), out.probe()

        inp, cap, probe = worker.dataflow(build)
        for t in range(4):
            inp.send_batch([t, 10 * t])
            inp.advance_to(t + 1)
            worker.step_while(lambda: probe.less_than(t + 1), timeout=20)
            assert cap.extract()[-1] == (t, [t + 1, 10 * t + 1])  # complete when passed
        inp.close()
        worker.run()
        return len(cap.extract())

    assert pt.execute(work) == [4]


class _Stretchy:
    """A batch that says it holds ``n`` records and yields ``n + extra`` (or fewer): an inline
    map makes a list of another length from it, which the scope must count."""

    def __init__(self, items, claimed):
        self.items, self.claimed = items, claimed

    def __len__(self):
        return self.claimed

    def __iter__(self):
        return iter(self.items)


@pytest.mark.parametrize("claimed", [2, 5])
def test_a_batch_that_comes_out_of_an_inline_map_with_another_length_is_counted(claimed):
    def work(worker):
        def build(scope):
            inp, s = scope.new_input()
            same = s.map_batch(lambda b: b)  # an ordinary operator: forwards the batch object
            counts = same.map(lambda x: (x, 1)).aggregate(
                lambda _k, v, acc: acc + v, lambda k, acc: (k, acc)
            )
            return inp, counts.capture(), counts.probe()

        inp, cap, probe = worker.dataflow(build)
        for t in range(3):
            inp.send_batch(_Stretchy([t, t, t], claimed))  # three records out
            inp.advance_to(t + 1)
            worker.step_while(lambda: probe.less_than(t + 1), timeout=20)
        inp.close()
        worker.run()
        return cap.extract()

    assert pt.execute(work)[0] == [(0, [(0, 3)]), (1, [(1, 3)]), (2, [(2, 3)])]


def test_a_failing_inline_map_is_named_not_the_operator_that_sent_to_it():
    def bad(x):
        return 1 // (x - 2)

    def build(scope):
        fine = scope.to_stream([1, 2]).map_batch(lambda b: b, name="Fine")  # ordinary
        return fine.map(bad, name="Bad").probe()  # inline

    with pytest.raises(OperatorError) as info:
        pt.example(build)
    assert info.value.operator == "Bad"
    assert str(info.value).startswith("operator 'Bad' at (0, 3) raised ZeroDivisionError")
    assert "in bad @" in str(info.value)
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_an_observed_inline_map_counts_each_delivery_as_an_invocation_of_its_own():
    worker = pt.Worker()
    worker.enable_statistics()
    results = []

    def build(scope):
        inp, s = scope.new_input()
        ordinary = s.filter(lambda x: True)
        ordinary.map(lambda x: x * 10, name="Times").inspect_batch(lambda t, b: results.extend(b))
        return inp

    inp = worker.dataflow(build)
    for r in range(4):
        inp.send_batch([r, r])
        inp.advance_to(r + 1)
        worker.step()
    inp.close()
    worker.run()
    assert results == [0, 0, 10, 10, 20, 20, 30, 30]
    ops = {op["name"]: op for op in worker.statistics()["operators"]}
    times = ops["Times"]
    assert times["records_in"] == 8 and times["records_out"] == 8
    assert times["batches_in"] == 4 and times["batches_out"] == 4
    assert times["invocations"] >= 4 and times["time_total_s"] > 0


def test_a_probe_behind_an_operator_drops_batches_inline_and_runs_when_its_frontier_moves():
    worker = pt.Worker()
    worker.enable_statistics()

    def build(scope):
        inp, s = scope.new_input()
        return inp, s.map_batch(lambda b: b).probe(name="Watch")

    inp, probe = worker.dataflow(build)
    for r in range(3):
        for _ in range(20):
            inp.send_batch([r])
            worker.step()
        assert probe.less_equal(r) and not probe.less_than(r)
        inp.advance_to(r + 1)
        worker.step_while(lambda: probe.less_than(r + 1), timeout=20)
    inp.close()
    worker.run()
    assert probe.done()
    watch = {op["name"]: op for op in worker.statistics()["operators"]}["Watch"]
    assert watch["records_in"] == 60 and watch["batches_in"] == 60  # taken, as counted
    assert watch["invocations"] <= 8  # four frontier moves, not sixty batches


class _Child:
    def __init__(self, inline):
        self.inline = inline

    def forwards_inline(self):
        return self.inline


def test_the_scope_counts_past_chains_of_inline_children_with_weights_multiplied():
    # node 1 (inline) feeds 2 (inline) and 3; node 2 feeds 3 and 4; node 0 feeds 1 twice over
    # (a weight-2 edge) and 4.  Input locations: node n's input is location n - 1.
    children = [None, _Child(True), _Child(True), _Child(False), _Child(False)]
    target_loc = [[], [0], [1], [2], [3]]
    targets = [[[(0, 2), (3, 1)]], [[(1, 1), (2, 1)]], [[(2, 1), (3, 1)]], [[]], [[]]]
    _count_past_inline(targets, children, target_loc)
    # Node 1's records end at 3 (from 2), 4 (from 2) and 3 (its own edge).
    assert targets[1] == [[(2, 1), (3, 1), (2, 1)]]
    assert targets[2] == [[(2, 1), (3, 1)]]
    assert targets[0] == [[(2, 2), (3, 2), (2, 2), (3, 1)]]
    assert targets[3] == [[]] and targets[4] == [[]]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 3)), max_size=6),
            st.integers(0, 2),  # how far the handle advances after this batch
            st.booleans(),  # whether the worker steps after it
        ),
        max_size=8,
    )
)
def test_an_inline_stateful_map_applies_each_key_in_time_order_as_the_scheduled_one(sends):
    """On one worker, ``stateful_map`` behind an input runs inline; with ``stats`` it is an
    ordinary operator.  Both must give each key its records in time order, arrival order
    within a time, whatever the interleaving of sends, advances and steps."""

    def run(inline: bool):
        worker = pt.Worker()

        def build(scope):
            inp, s = scope.new_input()
            stats = None if inline else pt.StateStats()
            out = s.stateful_map(int, lambda c, i: (c + 1, (c + 1, i)), stats=stats)
            return inp, scope.inline_depth(out.source), out.capture()

        inp, depth, cap = worker.dataflow(build)
        assert (depth > 0) == inline
        n = 0
        for records, advance, step in sends:
            base = inp.time
            batch = [(k, n + i) for i, (k, _dt) in enumerate(records)]
            n += len(records)
            if batch:
                inp.send_batch(batch, times=[base + dt for _k, dt in records])
            inp.advance_to(base + advance)
            if step:
                worker.step()
        inp.close()
        worker.run()
        return cap.extract()

    inline, scheduled = run(True), run(False)
    # The model: per key, records ordered by (time, arrival); the k-th gets count k.
    flat = []
    n, now = 0, 0
    for records, advance, _step in sends:
        for i, (k, dt) in enumerate(records):
            flat.append((now + dt, n + i, k))
        n += len(records)
        now += advance
    expected: dict = collections.defaultdict(list)
    per_key: collections.Counter = collections.Counter()
    for t, i, k in sorted(flat):
        per_key[k] += 1
        expected[t].append((k, (per_key[k], i)))

    def by_time(extracted):
        got: dict = collections.defaultdict(list)
        for t, batch in extracted:
            got[t].extend(batch)
        return {t: sorted(b) for t, b in got.items()}

    assert by_time(inline) == by_time(scheduled) == {t: sorted(b) for t, b in expected.items()}
