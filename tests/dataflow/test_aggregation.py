"""Operators that wait for a time to complete: ``count``, ``accumulate``, ``aggregate``, ``delay``,
``reclock``."""

from __future__ import annotations

import pytest

import pytimely as pt
from pytimely.errors import CapabilityError, OperatorError
from pytimely.testing import run_collect

from .helpers import rounds


def test_count():
    assert run_collect(lambda s: s.to_stream(range(10)).count()) == {0: [10]}


def test_accumulate_sum():
    got = run_collect(lambda s: s.to_stream(range(10)).accumulate(int, lambda a, b: a + sum(b)))
    assert got == {0: [45]}


def test_count_per_time():
    def build(scope):
        h, s = scope.new_input()
        return h, s.count().capture()

    assert rounds(build, [[1, 2, 3], [], [4], [5, 6]]).extract() == [(0, [3]), (2, [1]), (3, [2])]


def test_aggregate():
    # Doctest: (0..10).map(|x| (x % 2, x)).aggregate(sum) => (0, 20), (1, 25).
    def build(scope):
        return (
            scope.to_stream(range(10))
            .map(lambda x: (x % 2, x))
            .aggregate(lambda k, v, agg: agg + v, lambda k, agg: (k, agg))
        )

    assert run_collect(build) == {0: [(0, 20), (1, 25)]}


def test_aggregate_per_time_with_init():
    def build(scope):
        h, s = scope.new_input()
        out = s.aggregate(lambda k, v, agg: agg + [v], lambda k, agg: (k, sorted(agg)), init=list)
        return h, out.capture()

    got = rounds(build, [[("a", 1), ("b", 2), ("a", 3)], [("a", 4)]]).extract()
    assert got == [(0, [("a", [1, 3]), ("b", [2])]), (1, [("a", [4])])]


def test_aggregate_on_two_workers():
    def work(worker):
        def build(scope):
            s = scope.to_stream(range(worker.index, 100, 2)).map(lambda x: (x % 5, x))
            return s.aggregate(lambda k, v, agg: agg + v, lambda k, agg: (k, agg)).capture()

        c = worker.dataflow(build)
        worker.run()
        return c.extract()

    merged = sorted(kv for got in pt.execute(work, workers=2) for _t, kvs in got for kv in kvs)
    assert merged == [(k, sum(x for x in range(100) if x % 5 == k)) for k in range(5)]


def test_delay():
    def build(scope):
        return scope.to_stream(range(10)).delay(lambda x, t: t + x // 3)

    assert run_collect(build) == {0: [0, 1, 2], 1: [3, 4, 5], 2: [6, 7, 8], 3: [9]}


def test_delay_backwards_is_a_capability_error():
    def work(worker):
        def build(scope):
            h, s = scope.new_input()
            s.delay(lambda x, t: t - 1, name="Back")
            return h

        h = worker.dataflow(build)
        h.advance_to(5)
        h.send(1)
        for _ in range(3):
            worker.step()

    with pytest.raises(OperatorError) as info:
        pt.execute(work)
    assert isinstance(info.value.__cause__, CapabilityError)
    assert "Back" in str(info.value)


def test_reclock():
    # Doctest: data at times 0..8 (record = time), clock ticks at 3, 5, 8.
    def work(worker):
        def build(scope):
            data_in, data = scope.new_input()
            clock_in, clock = scope.new_input()
            return data_in, clock_in, data.reclock(clock).capture()

        data_in, clock_in, captured = worker.dataflow(build)
        for t in range(9):
            data_in.advance_to(t)
            clock_in.advance_to(t)
            data_in.send(t)
            if t in (3, 5, 8):
                clock_in.send(())
        return captured

    captured = pt.execute(work)[0]
    assert captured.extract() == [(3, [0, 1, 2, 3]), (5, [4, 5]), (8, [6, 7, 8])]
