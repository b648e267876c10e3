"""Keyed operators (``stateful_map``, ``keyed_process``, ``join``) against plain-Python
references, on 1, 2 and 3 workers, with random data, random timestamps sent out of order and
random batch boundaries."""

from __future__ import annotations

import bisect
import random
from collections import Counter, defaultdict
from typing import Any

import pytest

import pytimely as pt
from pytimely.errors import OperatorError, WorkerFailure

pytestmark = pytest.mark.timeout(120)

WORKERS = [1, 2, 3]


def send_out_of_order(
    worker: pt.Worker, inputs: list[tuple[Any, Any, list[tuple[int, Any]]]], rng: random.Random
) -> None:
    """Send each input's ``(time, record)`` list in its (shuffled) order, in random small
    batches, keeping each input's capability at the least time it still has to send, stepping
    the worker in between; then drop the capabilities."""
    state = []
    for handle, cap, timed in inputs:
        state.append([handle, cap, timed, 0, sorted(t for t, _ in timed)])
    while any(s[3] < len(s[2]) for s in state):
        s = rng.choice([s for s in state if s[3] < len(s[2])])
        handle, cap, timed, i, remaining = s
        chunk = timed[i : i + rng.randint(1, 6)]
        s[3] = i + len(chunk)
        for t, record in chunk:
            handle.session(cap, t).give(record)
            del remaining[bisect.bisect_left(remaining, t)]
        handle.flush()
        if remaining:
            cap.downgrade(remaining[0])
        worker.step()
    for _handle, cap, _timed, _i, _remaining in state:
        cap.drop()


def by_sender(records: list[tuple[int, Any, Any]], worker: pt.Worker, sender: Any) -> list:
    return [r for r in records if sender(r) % worker.peers == worker.index]


def flatten(per_worker: list[list[tuple[int, list[Any]]]]) -> Counter:
    return Counter((t, x) for captured in per_worker for t, batch in captured for x in batch)


# --------------------------------------------------------------------------------------------
# stateful_map


def fold_by_time(records: list[tuple[int, int, int]]) -> Counter:
    """Reference: per key, fold the records sorted by time (stable: send order within a time)."""
    states: dict[int, int] = {}
    out = Counter()
    for t, k, v in sorted(records, key=lambda r: r[0]):
        s = states.get(k, 1)
        s = (s * 31 + v) % 1_000_003
        if v == 0:
            states.pop(k, None)
        else:
            states[k] = s
        out[(t, (k, s))] += 1
    return out


def digest(state: int, value: int) -> tuple[int | None, int]:
    s = (state * 31 + value) % 1_000_003
    return (None if value == 0 else s), s


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("seed", [1, 2])
def test_stateful_map_equals_a_fold_sorted_by_time(workers, seed):
    gen = random.Random(seed)
    # (time, key, value); a value of 0 forgets the key.  Each key is sent by one worker, so its
    # records of one time arrive in that worker's send order (the guarantee is arrival order).
    records = [(gen.randrange(25), gen.randrange(12), gen.randrange(8)) for _ in range(400)]

    def work(worker):
        def build(scope):
            (handle, cap), stream = scope.new_unordered_input()
            out = stream.map(lambda r: (r[1], r[2])).stateful_map(lambda: 1, digest)
            return handle, cap, out.capture()

        handle, cap, captured = worker.dataflow(build)
        mine = by_sender(records, worker, lambda r: r[1] + 1)
        timed = [(r[0], r) for r in mine]
        send_out_of_order(worker, [(handle, cap, timed)], random.Random(seed + worker.index))
        worker.run()
        return captured.extract()

    assert flatten(pt.execute(work, workers=workers, timeout=60)) == fold_by_time(records)


def test_stateful_map_applies_a_late_arriving_earlier_time_first():
    # Time 5 is sent before time 2; the fold must still see 2 first.
    worker = pt.Worker()

    def build(scope):
        (handle, cap), stream = scope.new_unordered_input()
        out = stream.stateful_map(list, lambda acc, v: ([*acc, v], [*acc, v]))
        return handle, cap, out.capture()

    handle, cap, captured = worker.dataflow(build)
    handle.session(cap, 5).give(("k", "at 5"))
    handle.flush()
    worker.step()
    handle.session(cap, 2).give(("k", "at 2"))
    handle.flush()
    cap.drop()
    worker.run()
    assert captured.extract() == [(2, [("k", ["at 2"])]), (5, [("k", ["at 2", "at 5"])])]


# --------------------------------------------------------------------------------------------
# keyed_process


def timer_reference(records: list[tuple[int, int, int, bool]]) -> Counter:
    """Per key: records in time order (send order within a time) set or cancel a timer at
    ``t + d``; a timer at ``T`` fires after every record at ``T`` and reports how many records
    of its key have time ``<= T``."""
    horizon = max(t for t, *_ in records) + 10
    at: dict[int, list] = defaultdict(list)
    for r in records:
        at[r[0]].append(r)
    timers: dict[int, set[int]] = defaultdict(set)
    seen: Counter = Counter()
    out = Counter()
    for tau in range(horizon):
        for _t, k, d, cancel in at[tau]:
            seen[k] += 1
            if cancel:
                timers[tau + d].discard(k)
            else:
                timers[tau + d].add(k)
        for k in timers.pop(tau, ()):
            out[(tau, (k, tau, seen[k]))] += 1
    return out


def count_and_schedule(ctx: pt.KeyedContext, key: int, value: tuple[int, bool]) -> None:
    d, cancel = value
    ctx.state = (ctx.state or 0) + 1
    if cancel:
        ctx.cancel_timer(ctx.time + d)
    else:
        ctx.set_timer(ctx.time + d)


def report_count(ctx: pt.KeyedContext, key: int, t: int) -> None:
    ctx.emit((key, t, ctx.state))


def frontier_checked(stream: pt.Stream, violations: list) -> pt.Stream:
    """Pass records through, noting any received at a time the input frontier had passed."""

    def ctor(cap, info):
        cap.drop()

        def logic(inp, out):
            for ref, batch in inp:
                if not inp.frontier.less_equal(ref.time):
                    violations.append((ref.time, inp.frontier.elements()))
                out.give_batch(ref, batch)

        return logic

    return stream.unary(pt.Pipeline, "FrontierCheck", ctor)


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("seed", [3, 4])
def test_keyed_process_timers_fire_once_after_the_frontier_passes(workers, seed):
    gen = random.Random(seed)
    records = [
        (gen.randrange(20), gen.randrange(9), gen.randrange(4), gen.random() < 0.25)
        for _ in range(300)
    ]

    def work(worker):
        violations: list = []

        def build(scope):
            (handle, cap), stream = scope.new_unordered_input()
            keyed = stream.map(lambda r: (r[1], (r[2], r[3])))
            fired = keyed.keyed_process(count_and_schedule, report_count)
            return handle, cap, frontier_checked(fired, violations).capture()

        handle, cap, captured = worker.dataflow(build)
        timed = [(r[0], r) for r in by_sender(records, worker, lambda r: r[1] + 2)]
        send_out_of_order(worker, [(handle, cap, timed)], random.Random(seed * 7 + worker.index))
        worker.run()
        return captured.extract(), violations

    results = pt.execute(work, workers=workers, timeout=60)
    assert all(not violations for _c, violations in results)
    fired = flatten([captured for captured, _v in results])
    # Exactly once each, at the timer's time, after every record at or before it.
    assert fired == timer_reference(records)
    assert all(t == timer_t for (t, (_k, timer_t, _n)) in fired)


def test_keyed_process_holds_one_capability_per_pending_timer_time():
    worker = pt.Worker()
    stats = pt.StateStats()

    def remember(ctx, key, t):
        ctx.set_timer(t)

    def build(scope):
        (handle, cap), stream = scope.new_unordered_input()
        fired = stream.keyed_process(remember, lambda ctx, key, t: ctx.emit((key, t)), stats=stats)
        return handle, cap, fired.probe(), fired.capture()

    handle, cap, probe, captured = worker.dataflow(build)
    with handle.session(cap, 0) as session:
        for key, t in [("a", 7), ("b", 7), ("c", 3), ("a", 3), ("a", 7)]:
            session.give((key, t))
    cap.downgrade(5)
    worker.step_while(lambda: probe.less_than(5), timeout=10)
    # The timers at 3 fired and their token is gone (the output is not held at 3); one token
    # remains, at 7, for the two keys' timers there (a's second set_timer(7) is the same timer).
    assert captured.extract() == [(3, [("a", 3), ("c", 3)])]
    assert (stats.pending_times, stats.entries) == (1, 2)
    cap.drop()
    worker.run()
    assert captured.extract() == [(3, [("a", 3), ("c", 3)]), (7, [("a", 7), ("b", 7)])]
    assert (stats.pending_times, stats.entries) == (0, 0)


def test_a_timer_at_the_frontier_waits_for_the_frontier_to_pass_it():
    # Reached is not passed: records at time 4 may still come while the frontier is {4}.
    worker = pt.Worker()

    def build(scope):
        (handle, cap), stream = scope.new_unordered_input()

        def process(ctx, key, value):
            ctx.state = (ctx.state or 0) + 1
            ctx.set_timer(4)

        fired = stream.keyed_process(process, lambda ctx, key, t: ctx.emit((key, ctx.state)))
        return handle, cap, fired.probe(), fired.capture()

    handle, cap, probe, captured = worker.dataflow(build)
    handle.session(cap, 1).give(("k", None))
    handle.flush()
    cap.downgrade(4)
    worker.step_while(lambda: probe.less_than(4), timeout=10)
    assert captured.extract() == []  # the frontier is {4}: it reached the timer, not passed it
    handle.session(cap, 4).give(("k", None))
    handle.flush()
    cap.downgrade(5)
    worker.step_while(lambda: probe.less_than(5), timeout=10)
    assert captured.extract() == [(4, [("k", 2)])]  # both records counted, fired once
    cap.drop()
    worker.run()
    assert captured.extract() == [(4, [("k", 2)])]


# --------------------------------------------------------------------------------------------
# join


def nested_loop_join(left, right, within=None) -> Counter:
    """Reference: every pair with equal keys, at the later timestamp."""
    out = Counter()
    for tl, kl, vl in left:
        for tr, kr, vr in right:
            if kl == kr and (within is None or abs(tl - tr) <= within):
                out[(max(tl, tr), (kl, vl, vr))] += 1
    return out


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("within", [None, 3])
def test_join_equals_a_nested_loop(workers, within):
    gen = random.Random(10 + workers)
    keys = ["ann", "bob", "cy", "dee", "eve", 7, 8]
    left = [(gen.randrange(15), gen.choice(keys), f"L{i}") for i in range(150)]
    right = [(gen.randrange(15), gen.choice(keys), f"R{i}") for i in range(150)]

    def work(worker):
        def build(scope):
            (lh, lcap), ls = scope.new_unordered_input()
            (rh, rcap), rs = scope.new_unordered_input()
            joined = ls.join(rs, key=lambda r: r[1], within=within)
            out = joined.map(lambda kvv: (kvv[0], kvv[1][2], kvv[2][2]))
            return lh, lcap, rh, rcap, out.capture()

        lh, lcap, rh, rcap, captured = worker.dataflow(build)
        mine_l = [(r[0], r) for r in by_sender(left, worker, lambda r: int(r[2][1:]))]
        mine_r = [(r[0], r) for r in by_sender(right, worker, lambda r: int(r[2][1:]) + 1)]
        send_out_of_order(
            worker, [(lh, lcap, mine_l), (rh, rcap, mine_r)], random.Random(worker.index)
        )
        worker.run()
        return captured.extract()

    assert flatten(pt.execute(work, workers=workers, timeout=60)) == nested_loop_join(
        left, right, within
    )


def test_join_pairs_records_of_two_kinds_of_records_with_two_key_functions():
    def build(scope):
        orders = scope.to_stream([{"user": 1, "item": "pen"}, {"user": 2, "item": "ink"}])
        users = scope.to_stream([(1, "ann"), (2, "bob"), (3, "cy")])
        return orders.join(users, key=lambda o: o["user"], other_key=lambda u: u[0]).capture()

    assert pt.example(build).extract() == [
        (
            0,
            [
                (1, {"user": 1, "item": "pen"}, (1, "ann")),
                (2, {"user": 2, "item": "ink"}, (2, "bob")),
            ],
        ),
    ]


# --------------------------------------------------------------------------------------------
# bounded memory on unbounded streams with bounded live keys


def feed_rounds(worker, handle, probe, rounds, make_batch):
    for r in range(rounds):
        handle.send_batch(make_batch(r))
        handle.advance_to(r + 1)
        worker.step_while(lambda: probe.less_than(handle.time), timeout=30)


def test_stateful_map_forgets_keys_whose_state_is_none():
    # Round r opens 10 new keys, visits the previous round's again, and closes (third visit)
    # those of round r - 2: 2000 keys over the stream, never more than 20 live.
    worker = pt.Worker()
    stats = pt.StateStats()
    outputs = []

    def visit(n, _v):
        return (None if n == 2 else n + 1), n + 1

    def build(scope):
        handle, stream = scope.new_input()
        probe = stream.stateful_map(int, visit, stats=stats).inspect(outputs.append).probe()
        return handle, probe

    def round_(r):
        return [(q * 10 + k, None) for q in (r, r - 1, r - 2) if q >= 0 for k in range(10)]

    handle, probe = worker.dataflow(build)
    feed_rounds(worker, handle, probe, 200, round_)
    assert stats.keys == 20 and stats.peak_keys == 20
    assert Counter(n for _k, n in outputs) == {1: 2000, 2: 1990, 3: 1980}


def test_keyed_process_sessions_leave_no_state_behind():
    worker = pt.Worker()
    stats = pt.StateStats()

    def click(ctx, user, _v):
        ctx.state = (ctx.state or 0) + 1
        ctx.set_timer(ctx.time + 2)

    def expire(ctx, user, t):
        if ctx.time >= t:  # the last click's timer: the session is over
            ctx.emit((user, ctx.state))
            ctx.clear()

    def build(scope):
        handle, stream = scope.new_input()
        probe = stream.keyed_process(click, expire, stats=stats).probe()
        return handle, probe

    handle, probe = worker.dataflow(build)
    feed_rounds(
        worker, handle, probe, 300, lambda r: [((r // 5) * 100 + k, None) for k in range(20)]
    )
    handle.close()
    worker.run()
    assert stats.keys == 0 and stats.entries == 0 and stats.pending_times == 0
    assert stats.peak_keys <= 40 and stats.peak_entries <= 60


@pytest.mark.parametrize("workers", [1, 2])
def test_join_within_forgets_records_no_partner_can_reach(workers):
    def work(worker):
        stats = pt.StateStats()

        def build(scope):
            lh, ls = scope.new_input()
            rh, rs = scope.new_input()
            joined = ls.join(rs, within=2, stats=stats)
            probe = joined.probe()
            return lh, rh, probe, joined.count().capture()

        lh, rh, probe, counts = worker.dataflow(build)
        for r in range(150):
            if worker.index == 0:
                lh.send_batch([(r % 7, r)])
                rh.send_batch([(r % 7, -r)])
            lh.advance_to(r + 1)
            rh.advance_to(r + 1)
            worker.step_while(lambda: probe.less_than(r + 1), timeout=30)
        lh.close()
        rh.close()
        worker.run()
        return stats.peak_entries, sum(n for _t, ns in counts.extract() for n in ns)

    results = pt.execute(work, workers=workers, timeout=60)
    # Key r % 7 recurs every 7 rounds, beyond within=2: each record only pairs with its twin.
    assert sum(pairs for _peak, pairs in results) == 150
    assert all(peak <= 12 for peak, _pairs in results)


# --------------------------------------------------------------------------------------------
# errors name the operator, the function and the record


def test_a_raising_function_is_named_with_the_record():
    def boom(state, value):
        raise ZeroDivisionError("bad value")

    def build(scope):
        return scope.to_stream([("k", 41)]).stateful_map(int, boom, name="Totals").probe()

    with pytest.raises(OperatorError) as info:
        pt.example(build)
    message = str(info.value)
    assert "stateful_map 'Totals'" in message and "boom" in message
    assert "('k', 41)" in message and "ZeroDivisionError" in message
    assert info.value.operator == "Totals"


def test_a_raising_key_function_is_named_with_the_record():
    def user_of(record):
        return record["user"]

    def build(scope):
        stream = scope.to_stream([{"usr": 1}])
        return stream.keyed_process(lambda c, k, v: None, key=user_of).probe()

    with pytest.raises(OperatorError) as info:
        pt.example(build)
    message = str(info.value)
    assert "keyed_process 'KeyedProcess(<lambda> @ test_keyed.py:" in message
    assert "key function" in message
    assert "user_of" in message and "{'usr': 1}" in message


def test_records_that_are_not_pairs_are_named():
    def build(scope):
        return scope.to_stream([5]).join(scope.to_stream([(5, 1)])).probe()

    with pytest.raises(OperatorError, match=r"join 'Join': records must be \(key, value\) pairs"):
        pt.example(build)


def test_a_raising_key_function_in_the_exchange_is_named_on_two_workers():
    def work(worker):
        def build(scope):
            records = scope.to_stream([(1, 2), None] if worker.index == 0 else [])
            return records.stateful_map(int, lambda s, v: (s, v), key=lambda r: r[0]).probe()

        worker.dataflow(build)
        worker.run()

    with pytest.raises(WorkerFailure) as info:
        pt.execute(work, workers=2, timeout=60)
    first = str(info.value).splitlines()[-2]  # worker 0's line of the summary
    assert "OperatorError: exchange channel" in first
    assert "into operator 'StatefulMap(<lambda> @ test_keyed.py:" in first
    assert "stateful_map 'StatefulMap(<lambda> @" in first and "key function <lambda>" in first
    assert first.endswith("on record None")  # said once, not once per wrapper
    assert "checked_key" not in first


def test_set_timer_in_the_past_is_refused():
    def build(scope):
        timed = scope.to_stream([("k", 1)]).delay(lambda r, t: 5)
        return timed.keyed_process(lambda ctx, k, v: ctx.set_timer(3), lambda *a: None).probe()

    with pytest.raises(OperatorError, match=r"set_timer\(3\) for key 'k' is before the current"):
        pt.example(build)


def test_join_pairs_of_partially_ordered_times_meet_at_their_least_upper_bound():
    from pytimely.dataflow.operators.join import least_upper_bound

    assert least_upper_bound(pt.Product(1, 0), pt.Product(0, 5)) == pt.Product(1, 5)
    assert least_upper_bound(pt.Product(1, 2), pt.Product(1, 5)) == pt.Product(1, 5)
    assert least_upper_bound(3, 7) == 7
