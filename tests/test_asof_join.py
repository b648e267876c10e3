"""``Stream.asof_join`` against ``pandas.merge_asof`` (backward, by key, with and without a
tolerance) on random inputs that arrive out of order, on 1, 2 and 3 workers; with event times
as timestamps and read from the records; and through an io job's failure and restart on
another worker count.  ``Stream.lookup_join`` against a table replayed in plain Python."""

from __future__ import annotations

import json
import os
import random

import pandas as pd
import pytest

import pytimely as pt
from pytimely import io
from pytimely.errors import WorkerFailure

pytestmark = pytest.mark.timeout(120)


def _data(seed: int, n_left: int = 300, n_right: int = 200, keys: int = 5):
    """Left ``(key, e, id)`` and right ``(key, e, price)``; right event times unique (so the
    latest one is never a tie), both shuffled."""
    rng = random.Random(seed)
    left = [(f"k{rng.randrange(keys)}", rng.randrange(2000), i) for i in range(n_left)]
    right = [
        (f"k{rng.randrange(keys)}", e, rng.randrange(1000))
        for e in rng.sample(range(2000), n_right)
    ]
    rng.shuffle(left)
    rng.shuffle(right)
    return left, right


def _expected(left, right, tolerance) -> set:
    lf = pd.DataFrame(left, columns=["key", "e", "id"]).sort_values("e", kind="stable")
    rf = pd.DataFrame(right, columns=["key", "e", "price"]).sort_values("e", kind="stable")
    rf["right_e"] = rf["e"]
    merged = pd.merge_asof(lf, rf, on="e", by="key", direction="backward", tolerance=tolerance)
    out = set()
    for row in merged.itertuples():
        match = None if pd.isna(row.price) else (row.key, int(row.right_e), int(row.price))
        out.add(((row.key, row.e, row.id), match))
    return out


def _run(left, right, workers, tolerance, in_records: bool):
    """Records sent at time 0 and delayed to their event time (``in_records=False``), or to a
    timestamp up to 30 before it, the event time read from the record."""

    def stamp(r, t):
        return r[1] if not in_records else max(0, r[1] - (hash(r) % 31))

    def work(worker):
        def build(scope):
            lin, ls = scope.new_input()
            rin, rs = scope.new_input()
            ls, rs = ls.delay(stamp), rs.delay(stamp)
            at = (lambda r: r[1]) if in_records else None
            joined = ls.asof_join(rs, key=lambda r: r[0], event_time=at, other_event_time=at,
                                  tolerance=tolerance)  # fmt: skip
            return lin, rin, joined.capture()

        lin, rin, out = worker.dataflow(build)
        mine = lambda rs: [r for i, r in enumerate(rs) if i % worker.peers == worker.index]  # noqa: E731
        lin.send_batch(mine(left))
        rin.send_batch(mine(right))
        lin.close()
        rin.close()
        worker.run()
        return out.extract()

    found = []
    for per_worker in pt.execute(work, workers=workers):
        for t, batch in per_worker:
            for k, lrec, rrec in batch:
                assert t == lrec[1], "a result leaves at its left record's event time"
                found.append((lrec, rrec))
    return found


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("tolerance", [None, 50])
@pytest.mark.parametrize("in_records", [False, True], ids=["timestamps", "event_time"])
def test_asof_join_matches_pandas_merge_asof(workers, tolerance, in_records):
    left, right = _data(seed=workers * 7 + (tolerance or 0))
    found = _run(left, right, workers, tolerance, in_records)
    assert len(found) == len(left), "every left record answered exactly once"
    assert set(found) == _expected(left, right, tolerance)


def test_a_left_record_waits_for_the_right_frontier():
    """The answer for a left record at 10 is the right record at 8, which arrives later."""

    def build(scope):
        lin, ls = scope.new_input()
        rin, rs = scope.new_input()
        out = ls.asof_join(rs).capture()
        probe = ls.asof_join(rs).probe()
        lin.advance_to(10)
        lin.send(("a", "click"))
        lin.close()
        return rin, out, probe

    worker = pt.Worker()
    rin, out, probe = worker.dataflow(build)
    for _ in range(5):
        worker.step()
    assert probe.less_equal(10), "the frontier must not pass a waiting left record"
    rin.advance_to(8)
    rin.send(("a", "price at 8"))
    rin.advance_to(11)
    rin.close()
    worker.run()
    assert out.extract() == [(10, [("a", "click", "price at 8")])]


def test_an_asof_join_survives_a_failure_and_a_restart_on_another_worker_count(tmp_path):
    left_dir, right_dir = tmp_path / "clicks", tmp_path / "prices"
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    left, right = _data(seed=5, n_left=1200, n_right=600)
    for folder, rows in ((left_dir, left), (right_dir, right)):
        folder.mkdir()
        rows = sorted(rows, key=lambda r: r[1])  # each file in event-time order
        for part in range(2):
            with open(folder / f"part-{part}.jsonl", "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows[part::2])

    def make(fail_at):
        def build(scope):
            at = lambda r: r[1]  # noqa: E731
            clicks = io.read(scope, io.JsonLinesSource(left_dir, name="clicks"), event_time=at)
            prices = io.read(scope, io.JsonLinesSource(right_dir, name="prices"), event_time=at)

            def check(r):
                if r[2] == fail_at:
                    raise RuntimeError("injected failure")
                return r

            joined = clicks.map(check).asof_join(
                prices, key=lambda r: r[0], event_time=at, other_event_time=at, tolerance=50,
                name="Asof",
            )  # fmt: skip
            io.write(joined, io.JsonLinesSink(out))

        build.__qualname__ = "asof_job"
        return build

    epochs = dict(snapshot_every=100, start=0, epoch_seconds=0.05, epoch_records=100,
                  read_batch=20)  # fmt: skip
    late_id = max(left, key=lambda r: r[1])[2]  # the last click: fails late in the run
    with pytest.raises(WorkerFailure, match="injected failure"):
        pt.execute(io.job(make(late_id), checkpoint=ck, **epochs), workers=2)
    reports = pt.execute(io.job(make(None), checkpoint=ck, **epochs), workers=3)
    assert all(r.restored for r in reports)
    found = []
    for name in io.JsonLinesSink(out).published():
        with open(os.path.join(out, name)) as f:
            for line in f:
                _k, lrec, rrec = json.loads(line)
                found.append((tuple(lrec), tuple(rrec) if rrec else None))
    assert len(found) == len(left)
    assert set(found) == _expected(left, right, 50)


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("how", ["left", "inner"])
def test_lookup_join_sees_the_table_as_of_each_records_time(workers, how):
    """Table updates and deletes (``None``) at unique times per key, records at random times:
    each record gets its key's value after every update at or before its time."""
    rng = random.Random(workers)
    updates = []
    for k in ("a", "b", "c", "d"):
        for t in sorted(rng.sample(range(500), 40)):
            updates.append((k, None if rng.random() < 0.25 else rng.randrange(100), t))
    records = [(rng.choice("abcde"), i, rng.randrange(500)) for i in range(300)]
    rng.shuffle(updates)

    expected = set()
    for k, i, t in records:
        history = sorted((ut, v) for uk, v, ut in updates if uk == k and ut <= t)
        value = history[-1][1] if history else None
        if value is not None or how == "left":
            expected.add((t, (k, i, value)))

    def work(worker):
        def build(scope):
            rin, rs = scope.new_input()
            tin, ts = scope.new_input()
            rs = rs.delay(lambda r, t: r[2]).map(lambda r: (r[0], r[1]))
            ts = ts.delay(lambda u, t: u[2]).map(lambda u: (u[0], u[1]))
            return rin, tin, rs.lookup_join(ts, how=how).capture()

        rin, tin, out = worker.dataflow(build)
        mine = lambda xs: [x for j, x in enumerate(xs) if j % worker.peers == worker.index]  # noqa: E731
        rin.send_batch(mine(records))
        tin.send_batch(mine(updates))
        rin.close()
        tin.close()
        worker.run()
        return out.extract()

    found = [
        (t, r) for per_worker in pt.execute(work, workers=workers) for t, b in per_worker for r in b
    ]
    assert len(found) == len(set(found)) == len(expected)
    assert set(found) == expected


def test_a_bad_tolerance_is_refused():
    def build(scope):
        s = scope.to_stream([("a", 1)])
        s.asof_join(s, tolerance=-1)

    with pytest.raises(ValueError, match="tolerance"):
        pt.example(build)
