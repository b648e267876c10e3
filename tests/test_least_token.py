"""LeastToken: one capability at the least pending time, and the operators that use it
(windows, sessions, ``stateful_map``, ``keyed_process``) holding at most one capability per
token holder however many distinct times are pending -- on one and two workers -- while their
results stay exactly what a per-record reference gives."""

from __future__ import annotations

import doctest
import math
import random
from collections import defaultdict

import pytest

import pytimely as pt
from pytimely.dataflow.operators import tokens as tokens_module
from pytimely.dataflow.operators.tokens import LeastToken, TokenPerTime, tokens_for
from pytimely.errors import CapabilityError

pytestmark = pytest.mark.timeout(120)


# -- the holder, with stand-in capabilities --------------------------------------------------


class FakeCap:
    def __init__(self, time, log):
        self.time, self.log = time, log
        log.append(("take", time))

    def delayed(self, t):
        assert t >= self.time, (self.time, t)
        return FakeCap(t, self.log)

    def downgrade(self, t):
        assert t > self.time
        self.log.append(("downgrade", self.time, t))
        self.time = t

    def drop(self):
        self.log.append(("drop", self.time))


class Frontier:
    def __init__(self, *elements):
        self.elements = elements

    def less_than(self, t):
        return any(e < t for e in self.elements)

    def less_equal(self, t):
        return any(e <= t for e in self.elements)


def test_docstring_examples_run():
    result = doctest.testmod(
        tokens_module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted >= 10 and result.failed == 0


def test_one_token_at_the_least_pending_time():
    log = []
    message = FakeCap(0, log)
    token = LeastToken()
    assert token.cap is None and token.time == math.inf and not token
    assert token.hold(message, 50) is True
    assert token.hold(message, 70, 3) is True
    assert token.hold(message, 50) is False  # already pending: a count, no token work
    assert log == [("take", 0), ("take", 50)]
    assert token.hold(message, 20) is True  # below the token: a new one, the old dropped
    assert log[2:] == [("take", 20), ("drop", 50)]
    assert (token.time, token.times(), len(token)) == (20, [20, 50, 70], 3)
    assert (token.count(50), token.count(70), token.count(99)) == (2, 3, 0)
    assert 70 in token and 99 not in token and token.least() == 20


def test_done_and_settle_move_the_token_once_or_drop_it():
    log = []
    message = FakeCap(0, log)
    token = LeastToken()
    for t in (10, 20, 30, 30):
        token.hold(message, t)
    assert token.done(10) is True and token.done(30) is False and token.done(20) is True
    assert token.least() == 30 and token.time == 10  # counts only: not moved before settle
    token.settle()
    assert log[-1] == ("downgrade", 10, 30) and token.time == 30
    token.settle()  # nothing changed: nothing done
    assert log[-1] == ("downgrade", 10, 30)
    token.done(30)
    token.settle()
    assert log[-1] == ("drop", 30) and token.cap is None and token.time == math.inf
    token.settle()
    assert log[-1] == ("drop", 30)
    with pytest.raises(KeyError):
        token.done(30)
    token.hold(message, 40)
    with pytest.raises(ValueError, match="only 1 pending"):
        token.done(40, 2)
    assert token.count(40) == 1


def test_ready_pops_in_order_and_the_token_allows_sending_until_settle():
    log = []
    message = FakeCap(0, log)
    token = LeastToken()
    for t in (40, 10, 30, 20):
        token.hold(message, t)
    token.done(30)  # a stale heap entry, skipped
    popped = []
    for t in token.ready(Frontier(25)):  # every time before 10 and 20 is complete
        popped.append((t, token.cap_for(t).time))
    assert popped == [(10, 10), (20, 10)] and token.times() == [40]
    assert list(token.passed(Frontier(40))) == []  # 40 itself may still arrive
    token.settle()
    assert token.time == 40
    assert list(token.passed(Frontier(41))) == [40] and not token
    token.settle()
    assert token.cap is None
    with pytest.raises(CapabilityError):
        token.cap_for(40)


def test_discard_and_rehold_of_a_time():
    log = []
    message = FakeCap(0, log)
    token = LeastToken()
    token.hold(message, 5, 2)
    assert token.discard(5) == 2 and token.discard(5) == 0 and not token
    token.hold(message, 5)  # pending again (a duplicate heap entry: still popped once)
    assert list(token.ready(Frontier(9))) == [5]
    token.settle()
    assert token.cap is None and log[-1] == ("drop", 5)


def test_least_token_refuses_times_that_are_not_ints():
    token = LeastToken()
    with pytest.raises(TypeError, match="int times only"):
        token.hold(FakeCap(pt.Product(0, 0), []), pt.Product(1, 0))
    with pytest.raises(TypeError, match="int times only"):
        token.hold(FakeCap(0, []), True)


def test_token_per_time_for_partially_ordered_times():
    log = []
    message = FakeCap(pt.Product(0, 0), log)
    tokens = tokens_for(pt.Product(0, 0))
    assert type(tokens) is TokenPerTime and type(tokens_for(3)) is LeastToken
    a, b = pt.Product(0, 5), pt.Product(1, 0)  # incomparable: one token could not do both
    tokens.hold(message, a)
    tokens.hold(message, b)
    tokens.hold(message, b)
    assert tokens.cap_for(a).time == a and tokens.cap_for(b).time == b and tokens.held == 2
    tokens.done(b)
    assert tokens.held == 2  # still one at b
    popped = list(tokens.ready(Frontier(pt.Product(2, 9))))
    assert popped == [a, b] and tokens.cap_for(a).time == a  # usable until settle
    tokens.settle()
    assert tokens.held == 0 and sorted(e for e in log if e[0] == "drop") == [
        ("drop", a),
        ("drop", b),
    ]


# -- counting the capabilities operators hold ------------------------------------------------


def held(worker, name):
    """``{output: [times]}`` of the capabilities this worker's operators named ``name`` hold
    (one entry per capability)."""
    out = defaultdict(list)
    for _index, _name, sg in worker.dataflow_scopes():
        names = sg.tracker.node_names
        for loc, t, c in sg.held_capabilities():
            if names[loc.node] == name:
                out[loc.port].extend([t] * c)
    return dict(out)


def ms_events(worker, n=4000, keys=50, seed=0):
    """This worker's share of ``n`` ``(key, event time)`` records, event times 1 ms apart with
    some disorder (every worker sends records of every key)."""
    rng = random.Random(seed)
    records = [(rng.randrange(keys), i + rng.randrange(20)) for i in range(n)]
    return records[worker.index :: worker.peers]


@pytest.mark.parametrize("workers", [1, 2])
def test_windows_and_sessions_hold_one_capability_while_many_times_are_pending(workers):
    def work(worker):
        def build(scope):
            inp, events = scope.new_input()
            at = lambda r: r[1]  # noqa: E731
            made = {
                "Tumbling": events.window_count(pt.Tumbling(10), event_time=at, name="Tumbling"),
                "Sliding": events.window_fold(
                    pt.Sliding(20, 5), int, lambda a, r: a + 1, event_time=at, name="Sliding"
                ),
                "Sessions": events.window_count(pt.Session(7), event_time=at, name="Sessions"),
                "Collect": events.window_collect(pt.Session(7), event_time=at, name="Collect"),
            }
            outputs = {name: w.output.capture() for name, w in made.items()}
            probes = [w.output.probe() for w in made.values()]
            return inp, made, outputs, probes

        inp, made, outputs, probes = worker.dataflow(build)
        records = ms_events(worker)
        for i in range(0, len(records), 100):
            inp.send_batch(records[i : i + 100])
        inp.advance_to(5)  # every record (at 0) is in; nothing can close before 5
        worker.step_while(lambda: any(p.less_than(5) for p in probes), timeout=30)
        seen = {name: (w.state_size(), held(worker, name)) for name, w in made.items()}
        inp.close()
        worker.run()
        return seen, {name: out.extract() for name, out in outputs.items()}

    results = pt.execute(work, workers=workers, timeout=60)
    for seen, _totals in results:
        for name, (size, caps) in seen.items():
            assert size > 200, (name, size)  # hundreds of windows / sessions pending ...
            assert set(caps) == {0} and len(caps[0]) == 1, (name, caps)  # ... one token
            assert caps[0][0] >= 5  # at the least pending emission time
    assert sum(r[3] for _s, totals in results for _t, b in totals["Tumbling"] for r in b) == 4000
    for _seen, totals in results:
        for t, batch in totals["Tumbling"]:
            assert all(e == t for _k, _s, e, _n in batch)  # each window at its own end
        for t, batch in totals["Sessions"]:
            assert all(e == t for _k, _s, e, _n in batch)


@pytest.mark.parametrize("workers", [1, 2])
def test_keyed_operators_hold_one_capability_per_holder(workers):
    """Records stashed at many distinct times (the input holds time 0 back) and timers at
    many distinct times: one token for the stash, one for the timers."""

    def remember(ctx, key, value):
        ctx.set_timer(ctx.time + 1000 + value)

    def report(ctx, key, t):
        ctx.emit((key, t))

    def work(worker):
        map_stats, timer_stats = pt.StateStats(), pt.StateStats()

        def build(scope):
            (handle, cap), events = scope.new_unordered_input()
            running = events.stateful_map(int, lambda n, v: (n + 1, v), name="Map", stats=map_stats)
            timed = events.keyed_process(remember, report, name="Timers", stats=timer_stats)
            counts = events.window_count(pt.Session(3), name="SessionCounts")
            outs = [running.capture(), timed.capture(), counts.output.capture()]
            probes = [running.probe(), timed.probe(), counts.output.probe()]
            return handle, cap, outs, probes

        handle, cap, outs, probes = worker.dataflow(build)
        times = list(range(1, 301))
        random.Random(worker.index).shuffle(times)
        for t in times:  # out of order, all after the input's own time 0: they must wait
            with handle.session(cap, time=t) as session:
                session.give((t % 7, t))
        with handle.session(cap) as session:  # at 0: applied at once, timers at 1000 + k
            for k in range(200):
                session.give((k, k))
        # What this worker's operators will hold (int keys go to worker ``key % peers``).
        mine = worker.index
        waiting_times = [t for t in range(1, 301) if t % 7 % worker.peers == mine]
        timer_times = [1000 + k for k in range(200) if k % worker.peers == mine]
        waiting, timers = len(waiting_times), len(timer_times)
        worker.step_while(
            lambda: (
                map_stats.pending_times < waiting or timer_stats.pending_times < waiting + timers
            ),
            timeout=30,
        )
        stashed = {name: held(worker, name) for name in ("Map", "Timers", "SessionCounts")}
        cap.downgrade(1100)
        worker.step_while(lambda: any(p.less_than(1100) for p in probes), timeout=30)
        mid = held(worker, "Timers")
        cap.drop()
        worker.run()
        least = (waiting, min(waiting_times), min(timer_times))
        return stashed, mid, least, [o.extract() for o in outs]

    results = pt.execute(work, workers=workers, timeout=60)
    for stashed, mid, (waiting, first, first_timer), _outs in results:
        assert waiting > 20
        assert stashed["Map"] == {0: [first]}, stashed  # 40+ waiting times, one token
        assert sorted(stashed["Timers"][0]) == [first, first_timer], stashed  # stash, timers
        assert len(stashed["SessionCounts"][0]) <= 2, stashed  # the stash's; the sessions'
        assert len(mid[0]) == 1 and 1100 <= mid[0][0] <= 1600, mid  # timers below 1100 fired
    updates = [r for _s, _m, _w, outs in results for _t, b in outs[0] for r in b]
    assert len(updates) == workers * 500
    for _s, _m, _w, outs in results:  # stateful_map output at each record's own timestamp
        for t, batch in outs[0]:
            assert all(v == t or (t == 0 and v < 200) for _k, v in batch), (t, batch)
    # Timers (key, T) set twice (every worker sends the same records) are one timer.
    fired = sorted((t, r) for _s, _m, _w, outs in results for t, b in outs[1] for r in b)
    expected = sorted({(1000 + 2 * t, (t % 7, 1000 + 2 * t)) for t in range(1, 301)})
    expected += [(1000 + k, (k, 1000 + k)) for k in range(200)]
    assert fired == sorted(expected)


def test_stateful_map_with_product_times_keeps_one_capability_per_waiting_time():
    """In an iterative scope times are partially ordered: the stash falls back to one token
    per waiting time, and still applies records in time order."""

    def build(scope):
        (handle, cap), s = scope.new_unordered_input()

        def inner(loop):
            return s.enter(loop).stateful_map(int, lambda n, v: (n + v, n + v)).leave()

        out = scope.iterative(inner).capture()
        for t in (5, 3, 4, 1):
            with handle.session(cap, time=t) as session:
                session.give(("a", t))
        cap.drop()
        return out

    assert pt.example(build).extract() == [
        (1, [("a", 1)]),
        (3, [("a", 4)]),
        (4, [("a", 8)]),
        (5, [("a", 13)]),
    ]


# -- grouping a batch by window: exactly the per-record answer -----------------------------


def per_record_reference(windower, records, lateness):
    """``{(key, start, end): (emission time, values in arrival order)}`` and the late
    records, record by record, in arrival order."""
    width, step, offset = windower.width, windower.step, windower.offset
    members = defaultdict(list)
    late = []
    for ts, (k, x, v) in records:
        s = x - (x - offset) % step
        missed = False
        while s > x - width:
            if ts < s + width + lateness:
                members[(k, s, s + width)].append(v)
            else:
                missed = True
            s -= step
        if missed:
            late.append((k, x, v))
    return {w: (w[2] + lateness, vs) for w, vs in members.items()}, sorted(late)


@pytest.mark.parametrize(
    "windower", [pt.Tumbling(5, offset=2), pt.Sliding(6, 2, offset=1), pt.Sliding(10, 3)]
)
@pytest.mark.parametrize("spread", [3, 40, 400])
def test_batches_spanning_many_windows_match_the_per_record_answer(windower, spread):
    """Wide batches take the mask and sort paths; an order-sensitive fold (a list of values)
    shows each window still gets its records in arrival order."""
    rng = random.Random(spread)
    records = []
    for step in range(40):
        ts = step * 10
        for _ in range(rng.randrange(1, 60)):
            x = ts + rng.randrange(-spread, spread)
            records.append((ts, (f"k{rng.randrange(4)}", x, rng.randrange(1000))))

    def build(scope):
        inp, s = scope.new_input()
        at = lambda r: r[1]  # noqa: E731
        key = lambda r: r[0]  # noqa: E731
        folded = s.window_fold(
            windower, list, lambda a, r: [*a, r[2]], key=key, event_time=at, lateness=3
        )
        counted = s.window_count(windower, key=key, event_time=at, lateness=3)
        out = (folded.output.capture(), folded.late.capture(), counted.output.capture())
        i = 0
        while i < len(records):
            ts = records[i][0]
            inp.advance_to(ts)
            j = i
            while j < len(records) and records[j][0] == ts:
                j += 1
            inp.send_batch([r for _t, r in records[i:j]])
            i = j
        return out

    folded, late, counted = pt.example(build)
    expected, expected_late = per_record_reference(windower, records, 3)
    got = {}
    for t, batch in folded.extract():
        for k, s, e, vs in batch:
            got[(k, s, e)] = (t, vs)
    assert got == expected
    assert sorted(r for _t, b in late.extract() for r in b) == expected_late
    counts = {(k, s, e): (t, n) for t, b in counted.extract() for k, s, e, n in b}
    assert counts == {w: (t, len(vs)) for w, (t, vs) in expected.items()}


# -- session counts: many emission times retired in one invocation -------------------------


def session_reference(records, gap, lateness):
    """``{(key, start, end): (emission time, count)}`` and the late records."""
    per_key = defaultdict(list)
    late = []
    for ts, (k, x) in records:
        if ts <= x + lateness:
            per_key[k].append(x)
        else:
            late.append((k, x))
    out = {}
    for k, xs in per_key.items():
        xs.sort()
        start = last = xs[0]
        n = 0
        for x in xs:
            if x - last >= gap:
                out[(k, start, last + gap)] = (last + gap + lateness, n)
                start, n = x, 0
            last = x
            n += 1
        out[(k, start, last + gap)] = (last + gap + lateness, n)
    return out, sorted(late, key=repr)


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("keys", ["ints", "mixed"])
def test_session_counts_retiring_many_times_at_once_match_the_reference(workers, keys):
    """Fine-grained event times, a watermark that jumps: one release retires hundreds of
    emission times, keys come back while their older sessions still wait (older sessions),
    and records bridge sessions (merges)."""
    gap, lateness = 40, 5
    rng = random.Random(17)
    records = []
    for step in range(300):
        ts = (step // 30) * 300  # the watermark jumps by 300 every 30 batches
        for _ in range(rng.randrange(1, 12)):
            k = rng.randrange(25)
            if keys == "mixed" and k % 5 == 0:
                k = f"u{k}"
            records.append((ts, (k, step * 10 + rng.randrange(-30, 60))))

    def work(worker):
        def build(scope):
            inp, s = scope.new_input()
            w = s.window_count(pt.Session(gap), event_time=lambda r: r[1], lateness=lateness)
            return inp, w.output.capture(), w.late.capture(), w

        inp, out, late, w = worker.dataflow(build)
        mine = records[worker.index :: worker.peers]
        for i in range(0, len(mine), 3):
            ts = max(t for t, _r in mine[i : i + 3])
            if ts > inp.time:
                inp.advance_to(ts)
            inp.send_batch([r for _t, r in mine[i : i + 3]])
            if i % 30 == 0:
                worker.step()
        inp.close()
        worker.run()
        assert w.state_size() == 0
        return out.extract(), late.extract()

    # Records are sent at the batch's latest timestamp: the reference sees the same.
    sent = []
    for index in range(workers):
        mine = records[index::workers]
        for i in range(0, len(mine), 3):
            ts = max(t for t, _r in mine[i : i + 3])
            sent.extend((max(ts, 0), r) for _t, r in mine[i : i + 3])
    expected, expected_late = session_reference(sent, gap, lateness)
    got, got_late = {}, []
    for out, late in pt.execute(work, workers=workers, timeout=60):
        for t, batch in out:
            for k, s, e, n in batch:
                assert (k, s, e) not in got and t == e + lateness
                got[(k, s, e)] = (t, n)
        got_late.extend(r for _t, b in late for r in b)
    assert got == expected
    assert sorted(got_late, key=repr) == expected_late
    assert len(expected) > 3 * 25  # keys came back, again and again
