"""Routing: ``exchange``, ``broadcast``, ``concat``/``concatenate``, ``partition``, ``branch``,
``ok_err``."""

from __future__ import annotations

import pytest

import pytimely as pt
from pytimely.errors import GraphError
from pytimely.testing import run_collect

from .helpers import rounds


def test_exchange_on_one_worker_is_identity():
    assert run_collect(lambda s: s.to_stream(range(10)).exchange(lambda x: x)) == {
        0: list(range(10))
    }


def test_exchange_and_broadcast_on_two_workers():
    def work(worker):
        def build(scope):
            mine = scope.to_stream(range(worker.index * 10, worker.index * 10 + 10))
            return mine.exchange(lambda x: x).capture(), mine.broadcast().capture()

        exchanged, broadcast = worker.dataflow(build)
        worker.run()
        return exchanged.extract(), broadcast.extract()

    results = pt.execute(work, workers=2)
    for index, (exchanged, broadcast) in enumerate(results):
        # Integer keys route to worker key % peers; other keys by stable_hash.
        assert exchanged == [(0, [x for x in range(20) if x % 2 == index])]
        assert broadcast == [(0, list(range(20)))]


def test_concat_and_concatenate():
    def build(scope):
        a = scope.to_stream([1, 2])
        b = scope.to_stream([10])
        c = scope.to_stream([100, 200])
        return a.concat(b), a.concatenate([b, c]), a.concatenate([])

    assert run_collect(build) == [
        {0: [1, 2, 10]},
        {0: [1, 2, 10, 100, 200]},
        {0: [1, 2]},
    ]


def test_concat_keeps_times():
    def build(scope):
        h, s = scope.new_input()
        return h, s.concat(s.map(lambda x: -x)).capture()

    assert rounds(build, [[1], [2, 3]]).extract() == [(0, [-1, 1]), (1, [-3, -2, 2, 3])]


def test_partition_branch_ok_err():
    def build(scope):
        s = scope.to_stream(range(10))
        parts = s.partition(3, lambda x: (x % 3, x * 10))
        no, yes = s.branch(lambda t, x: x >= 7)
        oks, errs = s.ok_err(lambda x: (x % 2 == 0, str(x)))
        return [*parts, no, yes, oks, errs]

    got = run_collect(build)
    assert got[:3] == [{0: [0, 30, 60, 90]}, {0: [10, 40, 70]}, {0: [20, 50, 80]}]
    assert got[3:5] == [{0: list(range(7))}, {0: [7, 8, 9]}]
    assert got[5:] == [{0: ["0", "2", "4", "6", "8"]}, {0: ["1", "3", "5", "7", "9"]}]


def test_branch_sees_the_time():
    def build(scope):
        h, s = scope.new_input()
        early, late = s.branch(lambda t, x: t >= 1)
        return h, (early.capture(), late.capture())

    early, late = rounds(build, [[1, 2], [3], [4]])
    assert early.extract() == [(0, [1, 2])]
    assert late.extract() == [(1, [3]), (2, [4])]


def test_partition_bad_parts():
    with pytest.raises(GraphError):
        pt.example(lambda s: s.to_stream([1]).partition(0, lambda x: (0, x)))
