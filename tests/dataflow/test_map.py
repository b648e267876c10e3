"""Record-at-a-time operators: ``map``, ``filter``, ``flat_map``, ``map_batch``, the ``inspect``
family and ``to_stream`` (timely-dataflow ``dataflow/operators/core/map.rs`` and friends)."""

from __future__ import annotations

import pytimely as pt
from pytimely.testing import run_collect

from .helpers import rounds


def test_map_filter_flat_map():
    assert run_collect(lambda s: s.to_stream(range(10)).map(lambda x: x * x)) == {
        0: [x * x for x in range(10)]
    }
    assert run_collect(lambda s: s.to_stream(range(10)).filter(lambda x: x % 3 == 0)) == {
        0: [0, 3, 6, 9]
    }
    assert run_collect(lambda s: s.to_stream(range(3)).flat_map(lambda x: [x] * x)) == {
        0: [1, 2, 2]
    }


def test_flat_map_then_maps_yields_4_to_13():
    # timely core/map.rs test_builder: flat_map(x+1).map(+1) x3 on 0..10 yields 4..13.
    def build(scope):
        s = scope.to_stream(range(10)).flat_map(lambda x: [x + 1])
        for _ in range(3):
            s = s.map(lambda x: x + 1)
        return s

    assert run_collect(build) == {0: list(range(4, 14))}


def test_map_batch_sees_whole_batches():
    sizes = []

    def f(batch):
        sizes.append(len(batch))
        return [x + 1 for x in batch]

    assert run_collect(lambda s: s.to_stream(range(100)).map_batch(f)) == {0: list(range(1, 101))}
    assert sum(sizes) == 100 and len(sizes) == 1


def test_inspect_variants_and_for_each():
    seen, timed, batches, each = [], [], [], []

    def build(scope):
        handle, s = scope.new_input()
        out = (
            s.inspect(seen.append)
            .inspect_time(lambda t, x: timed.append((t, x)))
            .inspect_batch(lambda t, b: batches.append((t, list(b))))
        )
        out.for_each(lambda t, b: each.append((t, list(b))))
        return handle, out.capture()

    captured = rounds(build, [[1, 2], [], [3]])
    assert seen == [1, 2, 3]
    assert timed == [(0, 1), (0, 2), (2, 3)]
    assert batches == [(0, [1, 2]), (2, [3])]
    assert each == batches
    assert captured.extract() == [(0, [1, 2]), (2, [3])]


def test_to_stream_range_and_list_are_identical():
    a = run_collect(lambda s: s.to_stream(range(5000)))
    b = run_collect(lambda s: s.to_stream(list(range(5000))))
    c = run_collect(lambda s: s.to_stream(x for x in range(5000)))
    assert a == b == c == {0: list(range(5000))}


def test_to_stream_every_worker_emits_everything():
    # Doctest of `execute` on three workers: each emits 0..10, so all of them together 0..30/3.
    def work(worker):
        captured = worker.dataflow(lambda s: s.to_stream(range(10)).capture())
        worker.run()
        return captured.extract()

    per_worker = pt.execute(work, workers=3)
    merged = sorted(x for got in per_worker for _t, xs in got for x in xs)
    assert merged == [x // 3 for x in range(30)]
