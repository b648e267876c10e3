"""Outer joins: ``join(within=..., how=...)`` and ``window_join(..., how=...)`` emit the records
that found no partner, checked against nested loops in plain Python on 1, 2 and 3 workers with
records sent out of order."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from test_keyed import WORKERS, by_sender, flatten, send_out_of_order

import pytimely as pt

pytestmark = pytest.mark.timeout(120)

KEYS = ["ann", "bob", "cy", "dee", 7]


def _records(gen: random.Random, tag: str, n: int = 80) -> list[tuple[int, object, str]]:
    return [(gen.randrange(40), gen.choice(KEYS), f"{tag}{i}") for i in range(n)]


def nested_loop_outer_join(left, right, within: int, how: str) -> Counter:
    """Every pair with equal keys at most ``within`` apart, at the later time; with ``how``,
    each record without such a partner at its time plus ``within``."""
    out = Counter()
    met_left, met_right = set(), set()
    for tl, kl, vl in left:
        for tr, kr, vr in right:
            if kl == kr and abs(tl - tr) <= within:
                out[(max(tl, tr), (kl, vl, vr))] += 1
                met_left.add(vl)
                met_right.add(vr)
    if how in ("left", "outer"):
        out.update((tl + within, (kl, vl, None)) for tl, kl, vl in left if vl not in met_left)
    if how in ("right", "outer"):
        out.update((tr + within, (kr, None, vr)) for tr, kr, vr in right if vr not in met_right)
    return out


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("how", ["left", "right", "outer"])
def test_an_outer_interval_join_equals_a_nested_loop(workers, how):
    gen = random.Random(workers * 3 + len(how))
    left, right = _records(gen, "L"), _records(gen, "R")
    within = 3

    def work(worker):
        def build(scope):
            (lh, lcap), ls = scope.new_unordered_input()
            (rh, rcap), rs = scope.new_unordered_input()
            joined = ls.join(rs, key=lambda r: r[1], within=within, how=how)
            out = joined.map(lambda kvv: (kvv[0], kvv[1] and kvv[1][2], kvv[2] and kvv[2][2]))
            return lh, lcap, rh, rcap, out.capture()

        lh, lcap, rh, rcap, captured = worker.dataflow(build)
        mine_l = [(r[0], r) for r in by_sender(left, worker, lambda r: int(r[2][1:]))]
        mine_r = [(r[0], r) for r in by_sender(right, worker, lambda r: int(r[2][1:]) + 1)]
        send_out_of_order(
            worker, [(lh, lcap, mine_l), (rh, rcap, mine_r)], random.Random(worker.index)
        )
        worker.run()
        return captured.extract()

    found = flatten(pt.execute(work, workers=workers, timeout=60))
    assert found == nested_loop_outer_join(left, right, within, how)


def test_an_outer_join_without_within_is_refused():
    def build(scope):
        s = scope.to_stream([("a", 1)])
        s.join(s, how="left")

    with pytest.raises(ValueError, match="needs within="):
        pt.example(build)


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("how", ["inner", "left", "right", "outer"])
def test_an_outer_window_join_equals_a_nested_loop_per_window(workers, how):
    gen = random.Random(workers + 11 * len(how))
    left, right = _records(gen, "L"), _records(gen, "R")
    width = 10

    expected = Counter()
    windows = {(t // width * width, k) for t, k, _ in left + right}
    for start, k in windows:
        ls = [v for t, kk, v in left if kk == k and t // width * width == start]
        rs = [v for t, kk, v in right if kk == k and t // width * width == start]
        end = start + width
        rows = [(k, start, end, a, b) for a in ls for b in rs]
        if not rs and how in ("left", "outer"):
            rows = [(k, start, end, a, None) for a in ls]
        if not ls and how in ("right", "outer"):
            rows = [(k, start, end, None, b) for b in rs]
        expected.update((end, row) for row in rows)

    def work(worker):
        def build(scope):
            (lh, lcap), ls = scope.new_unordered_input()
            (rh, rcap), rs = scope.new_unordered_input()
            pairs = ls.map(lambda r: (r[1], r[2]))
            others = rs.map(lambda r: (r[1], r[2]))
            joined = pairs.window_join(others, pt.Tumbling(width), how=how)
            return lh, lcap, rh, rcap, joined.output.capture()

        lh, lcap, rh, rcap, captured = worker.dataflow(build)
        mine_l = [(r[0], r) for r in by_sender(left, worker, lambda r: int(r[2][1:]))]
        mine_r = [(r[0], r) for r in by_sender(right, worker, lambda r: int(r[2][1:]) + 1)]
        send_out_of_order(
            worker, [(lh, lcap, mine_l), (rh, rcap, mine_r)], random.Random(worker.index)
        )
        worker.run()
        return captured.extract()

    assert flatten(pt.execute(work, workers=workers, timeout=60)) == expected
