"""Count windows (``pt.Count``): per key, windows of ``size`` records every ``every`` records, in
timestamp order, checked against plain Python on random inputs that arrive out of order, on
1, 2 and 3 workers, and through a failure and a restart on another worker count."""

from __future__ import annotations

import collections
import json
import os
import random
import sys

import pytest

import pytimely as pt
from pytimely import io
from pytimely.errors import WorkerFailure

sys.path.insert(0, os.path.dirname(__file__))
import io_job  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def _records(seed: int, n: int = 600, keys: int = 7) -> list[tuple[str, int, int]]:
    """``(key, value, time)`` with a time of its own per record (so each key's order is its
    time order, whatever the arrival order), shuffled."""
    rng = random.Random(seed)
    times = rng.sample(range(n * 5), n)
    records = [(f"k{rng.randrange(keys)}", rng.randrange(100), t) for t in times]
    rng.shuffle(records)
    return records


def _expected(records, windower: pt.Count, kind: str) -> set:
    """``(time, (key, start, end, result))`` by plain Python."""
    per_key = collections.defaultdict(list)
    for k, v, t in sorted(records, key=lambda r: r[2]):
        per_key[k].append((v, t))
    out = set()
    for k, seq in per_key.items():
        for start in range(0, len(seq) - windower.size + 1, windower.every):
            window = seq[start : start + windower.size]
            values = [v for v, _t in window]
            result = {"count": len(values), "sum": sum(values), "collect": tuple(values)}[kind]
            out.add((window[-1][1], (k, start, start + windower.size, result)))
    return out


def _run(records, windower: pt.Count, kind: str, workers: int) -> set:
    def work(worker):
        def build(scope):
            inp, stream = scope.new_input()
            timed = stream.delay(lambda r, t: r[2]).map(lambda r: (r[0], r[1]))
            if kind == "count":
                windowed = timed.window_count(windower)
            elif kind == "sum":
                windowed = timed.window_fold(windower, int, lambda a, v: a + v)
            else:
                windowed = timed.window_collect(windower)
            return inp, windowed.output.capture(), windowed.late.capture()

        inp, out, late = worker.dataflow(build)
        inp.send_batch([r for i, r in enumerate(records) if i % worker.peers == worker.index])
        inp.close()
        worker.run()
        assert late.extract() == []
        return out.extract()

    found = set()
    for per_worker in pt.execute(work, workers=workers):
        for t, batch in per_worker:
            for k, s, e, result in batch:
                found.add((t, (k, s, e, tuple(result) if kind == "collect" else result)))
    return found


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize(
    "windower", [pt.Count(5), pt.Count(4, every=2), pt.Count(3, every=1)], ids=repr
)
def test_count_windows_match_plain_python(workers, windower):
    records = _records(seed=workers * 31 + windower.size)
    for kind in ("count", "sum", "collect"):
        assert _run(records, windower, kind, workers) == _expected(records, windower, kind)


def test_a_window_is_emitted_at_the_time_of_its_last_record_and_partial_ones_never():
    def build(scope):
        inp, stream = scope.new_input()
        out = stream.window_collect(pt.Count(2)).output.capture()
        for t, value in enumerate("abc"):
            inp.advance_to(t * 10)
            inp.send(("ann", value))
        return out

    assert pt.example(build).extract() == [(10, [("ann", 0, 2, ["a", "b"])])]


def test_count_windows_survive_a_failure_and_a_restart_on_another_worker_count(tmp_path):
    """Per-user windows of 7 clicks through an io job that fails on 2 workers and finishes
    on 3: each user's windows are exactly [0, 7), [7, 14), ... up to their clicks (lost state
    would number a user's clicks from 0 again; a doubled click would add a window)."""
    inp, out, ck = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "ck")
    clicks = io_job.write_clicks(inp, 4, 700, 20)

    def make(fail_at):
        def build(scope):
            records = io.read(scope, io.JsonLinesSource(inp))
            pairs = records.map(io_job.clicker(fail_at=fail_at))
            io.write(pairs.window_count(pt.Count(7), name="Sevens").output, io.JsonLinesSink(out))

        build.__qualname__ = "count_windows_job"
        return build

    epochs = dict(snapshot_every=2, epoch_seconds=0.05, epoch_records=200, read_batch=50)
    with pytest.raises(WorkerFailure, match="injected failure"):
        pt.execute(io.job(make("2:600"), checkpoint=ck, **epochs), workers=2)
    reports = pt.execute(io.job(make(None), checkpoint=ck, **epochs), workers=3)
    assert all(r.restored for r in reports)
    found = collections.defaultdict(list)
    for name in io.JsonLinesSink(out).published():
        with open(os.path.join(out, name)) as f:
            for line in f:
                user, start, end, count = json.loads(line)
                assert (end - start, count) == (7, 7)
                found[user].append(start)
    assert {u: sorted(s) for u, s in found.items()} == {
        u: list(range(0, n - 6, 7)) for u, n in clicks.items() if n >= 7
    }


def test_what_count_windows_refuse_is_named():
    with pytest.raises(ValueError, match="every"):
        pt.Count(2, every=3)
    with pytest.raises(ValueError, match="positive"):
        pt.Count(0)

    def with_event_time(scope):
        scope.to_stream([("a", 1)]).window_count(pt.Count(2), event_time=lambda r: r[1])

    with pytest.raises(TypeError, match="event_time"):
        pt.example(with_event_time)

    def joined(scope):
        s = scope.to_stream([("a", 1)])
        s.window_join(s, pt.Count(2))

    with pytest.raises(TypeError, match="window_join: windower must be"):
        pt.example(joined)


def test_a_failing_fold_is_named_with_the_record():
    def build(scope):
        s = scope.to_stream([("a", 1), ("a", "x")])
        return s.window_fold(pt.Count(2), int, lambda a, v: a + v).output.capture()

    with pytest.raises(Exception, match=r"fold function .* raised TypeError.*'x'"):
        pt.example(build)
