"""Event-time windows (``window_fold``/``count``/``collect``/``join``) against plain-Python
references on 1, 2 and 3 workers: random data, random batch boundaries, event times that lag
or lead their timestamps (late records included).  A checker downstream of every operator
asserts each result comes once, at its window's close timestamp ``end + lateness``."""

from __future__ import annotations

import random
from collections import Counter, defaultdict

import numpy as np
import pytest

import pytimely as pt
from pytimely.errors import OperatorError, WorkerFailure

pytestmark = pytest.mark.timeout(120)

WINDOWERS = {
    "tumbling": pt.Tumbling(7, offset=3),
    "sliding": pt.Sliding(10, 4, offset=1),
    "session": pt.Session(3),
}
KINDS = ("count", "fold", "collect")


# -- data and references ---------------------------------------------------------------------


def make_records(seed: int, n: int = 500, lagging: bool = True) -> list[tuple[int, tuple]]:
    """``[(timestamp, (key, (event_time, value)))]``, sorted by timestamp.  With ``lagging``
    event times range from 12 before to 3 after the timestamp (so some records are late)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        ts = rng.randrange(0, 60)
        x = ts + rng.randrange(-12, 4) if lagging else ts
        out.append((ts, (f"k{rng.randrange(6)}", (x, rng.randrange(100)))))
    out.sort(key=lambda r: r[0])
    return out


def windows_containing(windower, x):
    """Independent of ``pytimely.windows``: scan the candidate starts."""
    width, step, offset = windower.width, windower.step, windower.offset
    base = (x - offset) // step
    starts = [offset + m * step for m in range(base - width // step - 2, base + 2)]
    return [(s, s + width) for s in starts if s <= x < s + width]


def reference(windower, kind, records, lateness, event_times):
    """``({(key, start, end): (emission time, result)}, Counter of late records)``."""
    late = Counter()
    members = defaultdict(list)  # (key, start, end) -> [(x, value)]
    if isinstance(windower, pt.Session):
        per_key = defaultdict(list)
        for ts, (k, (x, v)) in records:
            x = x if event_times else ts
            if ts <= x + lateness:
                per_key[k].append((x, v))
            else:
                late[(k, (x, v))] += 1
        for k, items in per_key.items():
            items.sort(key=lambda p: p[0])
            session = [items[0]]
            for item in items[1:]:
                if item[0] - session[-1][0] < windower.gap:
                    session.append(item)
                else:
                    members[(k, session[0][0], session[-1][0] + windower.gap)] = session
                    session = [item]
            members[(k, session[0][0], session[-1][0] + windower.gap)] = session
    else:
        for ts, (k, (x, v)) in records:
            x = x if event_times else ts
            missed = False
            for s, e in windows_containing(windower, x):
                if ts < e + lateness:
                    members[(k, s, e)].append((x, v))
                else:
                    missed = True
            if missed:
                late[(k, (x, v))] += 1
    expected = {}
    for (k, s, e), items in members.items():
        if kind == "count":
            result = len(items)
        elif kind == "fold":
            result = sum(v for _x, v in items)
        else:
            result = sorted(items)
        expected[(k, s, e)] = (e + lateness, result)
    return expected, late


def run_operator(stream, windower, kind, event_times, lateness):
    et = (lambda r: r[1][0]) if event_times else None
    if kind == "count":
        return stream.window_count(windower, event_time=et, lateness=lateness)
    if kind == "fold":
        return stream.window_fold(
            windower, int, lambda acc, xv: acc + xv[1], event_time=et, lateness=lateness
        )
    return stream.window_collect(windower, event_time=et, lateness=lateness)


def check_once_at_close(stream, lateness, name="CheckOnceAtClose"):
    """Pass results through, asserting each ``(key, start, end)`` comes once on this worker
    and at timestamp ``end + lateness``."""

    def ctor(cap, info):
        cap.drop()
        seen = set()

        def logic(inp, out):
            for ref, batch in inp:
                for k, s, e, _r in batch:
                    assert ref.time == e + lateness, (ref.time, k, s, e, lateness)
                    assert (k, s, e) not in seen, f"window {(k, s, e)} emitted twice"
                    seen.add((k, s, e))
                out.session(ref).give_batch(batch)

        return logic

    return stream.unary(pt.Pipeline, name, ctor)


def feed(inp, records, worker_index, peers, rng):
    """This worker's share of ``records`` in random batches, advancing time as it goes."""
    mine = [r for i, r in enumerate(records) if i % peers == worker_index]
    i = 0
    while i < len(mine):
        ts = mine[i][0]
        inp.advance_to(ts)
        j = i
        while j < len(mine) and mine[j][0] == ts:
            j += 1
        group = [r for _t, r in mine[i:j]]
        while group:  # random batch boundaries within one timestamp
            cut = rng.randrange(1, len(group) + 1)
            inp.send_batch(group[:cut])
            group = group[cut:]
        i = j


def all_windows_job(seed, event_times, lateness):
    records = make_records(seed, lagging=event_times)

    def work(worker):
        handles = {}

        def build(scope):
            inp, stream = scope.new_input()
            for wname, windower in WINDOWERS.items():
                for kind in KINDS:
                    w = run_operator(stream, windower, kind, event_times, lateness)
                    checked = check_once_at_close(w.output, lateness)
                    handles[(wname, kind)] = (checked.capture(), w.late.capture())
            return inp

        inp = worker.dataflow(build)
        feed(inp, records, worker.index, worker.peers, random.Random(seed * 7 + worker.index))
        inp.close()
        worker.run()
        return {combo: (out.extract(), late.extract()) for combo, (out, late) in handles.items()}

    return records, work


def assert_matches_reference(records, per_worker, event_times, lateness):
    for wname, windower in WINDOWERS.items():
        for kind in KINDS:
            expected, expected_late = reference(windower, kind, records, lateness, event_times)
            got = {}
            got_late = Counter()
            for results in per_worker:
                out, late = results[(wname, kind)]
                for t, batch in out:
                    for k, s, e, r in batch:
                        assert (k, s, e) not in got, f"{wname}/{kind}: {(k, s, e)} twice"
                        if kind == "collect":
                            xs = [x for x, _v in r]
                            assert xs == sorted(xs), f"{wname}: not in event-time order"
                            r = sorted(r)
                        got[(k, s, e)] = (t, r)
                for _t, batch in late:
                    got_late.update(batch)
            assert got == expected, f"{wname}/{kind} differs from the reference"
            assert got_late == expected_late, f"{wname}/{kind}: late records differ"
            if event_times:
                assert expected_late, "the data should include late records"


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_every_windower_and_kind_matches_reference_with_late_records(workers):
    records, work = all_windows_job(seed=workers, event_times=True, lateness=2)
    per_worker = pt.execute(work, workers=workers, timeout=60)
    assert_matches_reference(records, per_worker, event_times=True, lateness=2)


@pytest.mark.parametrize("workers", [1, 2])
def test_timestamps_as_event_times_nothing_is_late(workers):
    records, work = all_windows_job(seed=10 + workers, event_times=False, lateness=0)
    per_worker = pt.execute(work, workers=workers, timeout=60)
    assert_matches_reference(records, per_worker, event_times=False, lateness=0)
    for results in per_worker:
        assert all(late == [] for _out, late in results.values())


# -- the emission rule, step by step -------------------------------------------------------


def test_result_waits_until_the_frontier_passes_the_time_before_close():
    """Window [0, 10) closes at 10: not emitted while the frontier is at 9 (it has only
    *reached* 9, records at 9 may still come — and one does), emitted once it moves to 10."""
    worker = pt.Worker()
    seen = []

    def build(scope):
        inp, stream = scope.new_input()
        w = stream.window_count(pt.Tumbling(10))
        w.output.inspect_time(lambda t, r: seen.append((t, r)))
        return inp, w.output.probe()

    inp, probe = worker.dataflow(build)
    inp.advance_to(5)
    inp.send(("a", None))
    inp.advance_to(9)
    worker.step_while(lambda: probe.less_than(9), timeout=10)
    assert seen == []
    inp.send(("a", None))  # at 9, after the frontier reached 9: still in the window
    inp.advance_to(10)
    worker.step_while(lambda: probe.less_than(10), timeout=10)
    assert seen == [(10, ("a", 0, 10, 2))]
    inp.close()
    worker.run()
    assert seen == [(10, ("a", 0, 10, 2))]


def test_session_closes_at_last_plus_gap_and_moves_when_extended():
    """Session [5, 9) would close at 9; a record at 8 extends it to [5, 12): nothing at 9,
    the session once at 12."""
    worker = pt.Worker()
    seen = []

    def build(scope):
        inp, stream = scope.new_input()
        w = stream.window_count(pt.Session(4))
        w.output.inspect_time(lambda t, r: seen.append((t, r)))
        return inp, w.output.probe(), w

    inp, probe, w = worker.dataflow(build)
    inp.advance_to(5)
    inp.send(("a", None))
    inp.advance_to(8)
    worker.step_while(lambda: probe.less_than(8), timeout=10)
    inp.send(("a", None))
    inp.advance_to(11)
    worker.step_while(lambda: probe.less_than(11), timeout=10)
    assert seen == []
    inp.advance_to(12)
    worker.step_while(lambda: probe.less_than(12), timeout=10)
    assert seen == [(12, ("a", 5, 12, 2))]
    assert w.state_size() == 0
    inp.close()
    worker.run()


# -- session counts: many keys at once ----------------------------------------------------------


def crowded_records(seed: int, keys: str, event_times: bool) -> list[tuple[int, tuple]]:
    """Many keys per timestamp, so most event times are shared by dozens of keys (the
    vectorized count path): 300 keys, ~100 records per timestamp, keys pausing for the gap
    often enough that sessions close, reopen and bridge.  ``keys``: ``"ints"``, ``"mixed"``
    (a string key appears halfway), ``"tuples"`` (pairs of ints) or ``"huge"`` (event times
    beyond 2**62)."""
    rng = random.Random(seed)
    shift = 2**62 if keys == "huge" else 0
    out = []
    for _ in range(4000):
        ts = rng.randrange(0, 40)
        k = rng.randrange(300)
        if keys == "mixed" and ts >= 20 and k % 7 == 0:
            k = f"user{k}"
        if keys == "tuples":
            k = (k % 17, k // 17)
        x = ts + rng.choice([-5, -1, 0, 0, 0, 1]) if event_times else ts
        out.append((ts + shift, (k, (x + shift, None))))
    out.sort(key=lambda r: r[0])
    return out


@pytest.mark.parametrize(
    ("workers", "event_times", "keys"),
    [
        (1, False, "ints"),
        (2, False, "mixed"),
        (1, False, "tuples"),
        (1, True, "ints"),
        (2, True, "mixed"),
        (2, True, "tuples"),
        (3, True, "huge"),
    ],
)
def test_session_counts_of_crowded_batches_match_reference(workers, event_times, keys):
    windower, lateness = pt.Session(3), 2 if event_times else 0
    records = crowded_records(workers, keys, event_times)
    at = (lambda r: r[1][0]) if event_times else None

    def work(worker):
        def build(scope):
            inp, stream = scope.new_input()
            w = stream.window_count(windower, event_time=at, lateness=lateness)
            return inp, check_once_at_close(w.output, lateness).capture(), w.late.capture(), w

        inp, out, late, w = worker.dataflow(build)
        feed(inp, records, worker.index, worker.peers, random.Random(worker.index))
        inp.close()
        worker.run()
        assert w.state_size() == 0
        return out.extract(), late.extract()

    expected, expected_late = reference(windower, "count", records, lateness, event_times)
    got, got_late = {}, Counter()
    for out, late in pt.execute(work, workers=workers, timeout=60):
        for t, batch in out:
            for k, s, e, n in batch:
                assert (k, s, e) not in got
                got[(k, s, e)] = (t, n)
        for _t, batch in late:
            got_late.update(batch)
    assert got == expected
    assert got_late == expected_late
    assert (len(expected_late) > 0) == event_times
    # Keys came back after a pause often: sessions reopened and bridged.
    assert len(expected) > 2 * len({k for k, _s, _e in expected})


def test_millisecond_sessions_are_exact_and_prompt():
    """Event times in ms with a gap of seconds (the session store files sessions in buckets of
    many ms): every session equals the reference, and each is emitted as soon as the frontier
    reaches its emission time, though its bucket has not passed yet."""
    gap, lateness = 3_000, 2_000
    rng = random.Random(5)
    records = []
    for _ in range(3_000):
        ts = rng.randrange(0, 60_000)
        x = ts + rng.choice([-2_600, -1_500, -200, 0, 0, 40, 900]) + rng.randrange(-50, 50)
        records.append((ts, (rng.randrange(300), (x, None))))
    records.sort(key=lambda r: r[0])
    expected, expected_late = reference(pt.Session(gap), "count", records, lateness, True)
    worker = pt.Worker()
    seen = {}

    def build(scope):
        inp, stream = scope.new_input()
        w = stream.window_count(pt.Session(gap), event_time=lambda r: r[1][0], lateness=lateness)
        checked = check_once_at_close(w.output, lateness)
        checked.inspect_time(lambda t, r: seen.__setitem__(r[:3], (t, r[3])))
        return inp, checked.probe(), w

    inp, probe, w = worker.dataflow(build)
    assert w.state_size() == 0
    for i, (ts, record) in enumerate(records):
        inp.advance_to(ts)
        inp.send(record)
        if i % 7 == 0:  # stop the frontier at many times inside buckets
            worker.step_while(lambda: probe.less_than(ts), timeout=10)
            due = {k: v for k, v in expected.items() if v[0] <= ts}
            assert {k: seen[k] for k in due if k in seen} == due
            assert seen.keys() <= expected.keys()
            assert len(seen) == len(due), f"at {ts}: {len(due) - len(seen)} sessions held back"
    inp.close()
    worker.run()
    assert seen == expected
    assert w.state_size() == 0
    assert len(expected) > 200 and expected_late


def test_session_counts_of_inputs_out_of_step_are_applied_in_time_order(monkeypatch):
    """One input ahead of another (as workers' inputs are): the later time's records wait for
    the earlier one's, so no key is counted *before* its open session -- the one-key
    ``SessionCounts.add`` path, many times slower than the vectorized one, is never taken --
    and the sessions are those of the records in time order."""
    from pytimely.dataflow.operators.windowing.session_counts import SessionCounts

    one_key_adds = []
    add = SessionCounts.add

    def counted_add(self, ref, k, x, n):
        one_key_adds.append((k, x))
        add(self, ref, k, x, n)

    monkeypatch.setattr(SessionCounts, "add", counted_add)
    worker = pt.Worker()

    def build(scope):
        behind_in, behind = scope.new_input()
        ahead_in, ahead = scope.new_input()
        w = behind.concat(ahead).window_count(pt.Session(10))
        return behind_in, ahead_in, check_once_at_close(w.output, 0).capture(), w

    behind_in, ahead_in, out, w = worker.dataflow(build)
    users = range(32)  # enough keys sharing a time for the vectorized step
    ahead_in.advance_to(50)
    ahead_in.send_batch([(u, "cart") for u in users])
    for _ in range(3):
        worker.step()
    behind_in.send_batch([(u, "home") for u in users])  # at 0: 50 before the open sessions
    behind_in.advance_to(45)
    behind_in.send_batch([(u, "pay") for u in users[:8]])  # at 45: bridges to 50
    behind_in.close()
    ahead_in.close()
    worker.run()
    assert one_key_adds == []
    got = sorted((t, r) for t, batch in out.extract() for r in batch)
    expected = sorted(
        [(10, (u, 0, 10, 1)) for u in users]
        + [(60, (u, 45, 60, 2)) for u in users[:8]]
        + [(60, (u, 50, 60, 1)) for u in users[8:]]
    )
    assert got == expected
    assert w.state_size() == 0


# -- memory -------------------------------------------------------------------------------------


def test_state_stays_bounded_on_an_unbounded_stream_of_bounded_keys():
    worker = pt.Worker()

    def build(scope):
        inp, stream = scope.new_input()
        made = [
            stream.window_count(pt.Tumbling(10)),
            stream.window_collect(pt.Sliding(10, 5)),
            stream.window_fold(pt.Session(3), int, lambda a, v: a + v),
            stream.window_count(pt.Tumbling(10), event_time=lambda r: r[1], lateness=5),
            stream.window_count(pt.Session(3)),
        ]
        probe = made[0].output.concatenate([w.output for w in made[1:]]).probe()
        return inp, made, probe

    inp, made, probe = worker.dataflow(build)
    sizes = []
    for t in range(3000):
        inp.advance_to(t)
        # 20 live keys; every key pauses now and then, so sessions keep closing.
        inp.send_batch([(k, t) for k in range(20) if (t + k) % 11])
        if t % 50 == 49:
            worker.step_while(lambda t=t: probe.less_than(t - 20), timeout=10)
            sizes.append([w.state_size() for w in made])
    peak = [max(col) for col in zip(*sizes)]
    assert all(p <= 20 * 4 + 10 for p in peak), peak  # a few windows of 20 keys, never more
    assert min(sum(s) for s in sizes) > 0  # windows were live all along
    inp.close()
    worker.run()
    assert [w.state_size() for w in made] == [0, 0, 0, 0, 0]


# -- window_join ----------------------------------------------------------------------------------


def join_reference(windower, left, right, lateness):
    lefts = defaultdict(list)
    rights = defaultdict(list)
    for side, records in ((lefts, left), (rights, right)):
        for ts, (k, (x, v)) in records:
            for s, e in windows_containing(windower, x):
                if ts < e + lateness:
                    side[(k, s, e)].append((x, v))
    out = Counter()
    for w, ls in lefts.items():
        for a in ls:
            for b in rights.get(w, []):
                out[(w[2] + lateness, (w[0], w[1], w[2], a, b))] += 1
    return out


@pytest.mark.parametrize("workers", [1, 3])
@pytest.mark.parametrize("windower", [pt.Tumbling(8), pt.Sliding(9, 3)])
def test_window_join_matches_pairs_of_a_merge(workers, windower):
    left, right = make_records(100 + workers, 200), make_records(200 + workers, 200)

    def work(worker):
        def build(scope):
            in_l, s_l = scope.new_input()
            in_r, s_r = scope.new_input()
            et = lambda r: r[1][0]  # noqa: E731
            j = s_l.window_join(s_r, windower, event_time=et, other_event_time=et, lateness=1)
            return in_l, in_r, j.output.capture(), j.late.capture(), j.other_late.capture()

        in_l, in_r, out, late_l, late_r = worker.dataflow(build)
        rng = random.Random(worker.index)
        feed(in_l, left, worker.index, worker.peers, rng)
        feed(in_r, right, worker.index, worker.peers, rng)
        in_l.close()
        in_r.close()
        worker.run()
        return out.extract(), late_l.extract(), late_r.extract()

    got = Counter()
    late = 0
    for out, late_l, late_r in pt.execute(work, workers=workers, timeout=60):
        for t, batch in out:
            for r in batch:
                got[(t, r)] += 1
        late += sum(len(b) for _t, b in late_l) + sum(len(b) for _t, b in late_r)
    assert got == join_reference(windower, left, right, 1)
    assert late > 0


# -- the columnar path -------------------------------------------------------------------------


def columnar_records(seed, n=2000):
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 50, n))
    batch = np.zeros(n, dtype=[("user", "i8"), ("ts", "i8"), ("amount", "i8")])
    batch["user"] = rng.integers(0, 40, n)
    batch["ts"] = ts + rng.integers(-10, 3, n)
    batch["amount"] = rng.integers(0, 1000, n)
    return ts, batch


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("arrow", [False, True])
def test_columnar_count_and_fold_equal_the_record_path(workers, arrow):
    ts, batch = columnar_records(workers)
    windowers = [pt.Tumbling(5), pt.Sliding(7, 3, offset=2)]

    def work(worker):
        def build(scope):
            cin, cols = scope.new_input()
            rin, recs = scope.new_input()
            caps = []
            for w in windowers:
                caps.append(
                    (
                        cols.window_count(w, key="user", event_time="ts", lateness=1),
                        recs.window_count(
                            w, key=lambda r: r[0], event_time=lambda r: r[1], lateness=1
                        ),
                    )
                )
                caps.append(
                    (
                        cols.window_fold(
                            w, int, np.add, key="user", event_time="ts", value="amount", lateness=1
                        ),
                        recs.window_fold(
                            w,
                            int,
                            lambda a, r: a + r[2],
                            key=lambda r: r[0],
                            event_time=lambda r: r[1],
                            lateness=1,
                        ),
                    )
                )
            handles = []
            for c, r in caps:
                late_rows = []
                c.late.inspect_batch(lambda _t, b, rows=late_rows: rows.extend(_rows(b)))
                handles.append(
                    (c.output.capture(), late_rows, r.output.capture(), r.late.capture())
                )
            return cin, rin, handles

        cin, rin, handles = worker.dataflow(build)
        rng = np.random.default_rng(worker.index)
        for t in np.unique(ts)[worker.index :: worker.peers].tolist():
            rows = batch[ts == t]
            cin.advance_to(t)
            rin.advance_to(t)
            for part in np.array_split(rows, rng.integers(1, 4)):
                if arrow:
                    import pyarrow as pa

                    cin.send_batch(
                        pa.RecordBatch.from_pydict({name: part[name] for name in part.dtype.names})
                    )
                else:
                    cin.send_batch(part)
                rin.send_batch([tuple(int(v) for v in r) for r in part.tolist()])
        cin.close()
        rin.close()
        worker.run()
        out = []
        for c_out, late_rows, r_out, r_late in handles:
            out.append(
                (
                    sorted(r for _t, b in c_out.extract() for r in b),
                    sorted(r for _t, b in r_out.extract() for r in b),
                    sorted(late_rows),
                    sorted(r for _t, b in r_late.extract() for r in b),
                )
            )
        return out

    per_worker = pt.execute(work, workers=workers, timeout=60)
    for i in range(len(windowers) * 2):
        col = sorted(r for res in per_worker for r in res[i][0])
        rec = sorted(r for res in per_worker for r in res[i][1])
        assert col == rec and len(col) > 0
        col_late = sorted(r for res in per_worker for r in res[i][2])
        rec_late = sorted(r for res in per_worker for r in res[i][3])
        assert col_late == rec_late and len(col_late) > 0


def _rows(batch):
    if isinstance(batch, np.ndarray):
        return [tuple(int(v) for v in r) for r in batch.tolist()]
    return [tuple(int(v) for v in r.values()) for r in batch.to_pylist()]


# -- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make,error,words",
    [
        (lambda: pt.Tumbling(0), ValueError, "width must be positive"),
        (lambda: pt.Tumbling(2.5), TypeError, "width must be an int"),
        (lambda: pt.Sliding(10, -1), ValueError, "step must be positive"),
        (lambda: pt.Sliding(4, 5), ValueError, "step 5 > width 4"),
        (lambda: pt.Session(0), ValueError, "gap must be positive"),
        (lambda: pt.Session(True), TypeError, "gap must be an int"),
    ],
)
def test_bad_windowers_are_refused(make, error, words):
    with pytest.raises(error, match=words):
        make()


def _failing_dataflow(**kwargs):
    def build(scope):
        scope.to_stream([("ok", 1), ("bad", "later")]).window_count(pt.Tumbling(5), **kwargs)

    return build


def test_non_integer_event_time_names_operator_and_record():
    with pytest.raises(OperatorError, match=r"window_count: event times must be ints.*'bad'") as e:
        pt.example(_failing_dataflow(event_time=lambda r: r[1]))
    assert isinstance(e.value.__cause__, TypeError)


def test_raising_key_function_names_operator_function_and_record():
    def key_of(record):
        return record[0] + 1

    # The key function runs where records are exchanged: the error names that channel, the
    # windowing operator it feeds, the function and the record.
    with pytest.raises(
        (OperatorError, WorkerFailure),
        match=r"into operator 'WindowCount': key "
        r"function .*key_of raised TypeError.*'ok'",
    ):
        pt.example(_failing_dataflow(key=key_of))


def test_windowers_compare_by_parameters():
    assert pt.Tumbling(3) == pt.Tumbling(3) != pt.Tumbling(4)
    assert pt.Sliding(4, 4) != pt.Tumbling(4)  # different kinds, even with equal windows
    assert pt.Session(5) == pt.Session(5) != pt.Session(6)
    assert pt.windows.Tumbling is pt.Tumbling
