"""Scopes: regions, loops (``Product`` of ``Product`` times), nesting, and misuse."""

from __future__ import annotations

import pytest

import pytimely as pt
from pytimely.errors import GraphError
from pytimely.testing import assert_frontier, run_collect

from .helpers import rounds


def test_region_is_transparent():
    def build(scope):
        h, s = scope.new_input()
        out = scope.region(lambda r: s.enter(r).map(lambda x: x + 1).leave())
        return h, out.capture()

    assert rounds(build, [[1], [2]]).extract() == [(0, [2]), (1, [3])]


def test_nested_regions_rounds_complete():
    # timely core/enterleave.rs test_nested: enter/enter/leave/leave, rounds complete.
    def work(worker):
        def build(scope):
            h, s = scope.new_input()

            def outer(r1):
                def inner(r2):
                    return s.enter(r1).enter(r2).map(lambda x: x * 10).leave()

                return r1.region(inner).leave()

            out = scope.region(outer).exchange(lambda x: x)
            return h, out.capture(), out.probe()

        h, captured, probe = worker.dataflow(build)
        for r in range(5):
            if worker.index == 0:
                h.send(r)
            h.advance_to(r + 1)
            worker.step_while(lambda: probe.less_than(h.time))
        return captured.extract()

    for workers in (1, 2):
        merged = sorted(
            (t, x) for got in pt.execute(work, workers=workers) for t, xs in got for x in xs
        )
        assert merged == [(r, 10 * r) for r in range(5)]


def test_iterative_loop_counter_and_feedback():
    seen = []

    def build(scope):
        def body(inner):
            handle, looped = inner.feedback(1)
            s = scope.to_stream([3, 1]).enter(inner).concat(looped)
            s = s.inspect_time(lambda t, x: seen.append((t, x)))
            s.filter(lambda x: x > 0).map(lambda x: x - 1).connect_loop(handle)
            return s.filter(lambda x: x == 0).leave()

        return scope.iterative(body)

    assert run_collect(build) == {0: [0, 0]}
    assert sorted(seen) == sorted(
        [
            (pt.Product(0, 0), 3),
            (pt.Product(0, 0), 1),
            (pt.Product(0, 1), 2),
            (pt.Product(0, 1), 0),
            (pt.Product(0, 2), 1),
            (pt.Product(0, 3), 0),
        ]
    )


def test_feedback_in_the_top_scope():
    # timely's loopdemo shape: a feedback loop directly in the dataflow's scope (int times).
    def build(scope):
        handle, looped = scope.feedback(1)
        s = scope.to_stream([4]).concat(looped)
        s.filter(lambda x: x > 0).map(lambda x: x - 1).connect_loop(handle)
        return s

    assert run_collect(build) == {0: [4], 1: [3], 2: [2], 3: [1], 4: [0]}


def test_nested_loops_product_of_product():
    inner_times = []

    def build(scope):
        def outer_body(outer):
            o_handle, o_loop = outer.feedback(1)
            entered = scope.to_stream([0]).enter(outer).concat(o_loop)

            def inner_body(inner):
                i_handle, i_loop = inner.feedback(1)
                s = entered.enter(inner).concat(i_loop)
                s = s.inspect_time(lambda t, x: inner_times.append((t, x)))
                # Inner loop: add 1 until the value is a multiple of 3.
                s.filter(lambda x: (x + 1) % 3 != 0).map(lambda x: x + 1).connect_loop(i_handle)
                return s.filter(lambda x: (x + 1) % 3 == 0).map(lambda x: x + 1).leave()

            result = outer.iterative(inner_body)
            # Outer loop: three rounds.
            result.filter(lambda x: x < 9).connect_loop(o_handle)
            return result.leave()

        return scope.iterative(outer_body)

    assert run_collect(build) == {0: [3, 6, 9]}
    P = pt.Product
    expected = []
    for outer_round, start in enumerate([0, 3, 6]):
        for step in range(3):
            expected.append((P(P(0, outer_round), step), start + step))
    assert sorted(inner_times) == sorted(expected)
    assert all(
        isinstance(t, pt.Product) and isinstance(t.outer, pt.Product) for t, _ in inner_times
    )


def test_loop_with_rounds_and_probe_in_iterative_scope():
    def work(worker):
        def build(scope):
            h, s = scope.new_input()

            def body(inner):
                handle, looped = inner.feedback(1)
                x = s.enter(inner).concat(looped)
                x.filter(lambda v: v > 1).map(lambda v: v // 2).connect_loop(handle)
                return x.filter(lambda v: v <= 1).leave()

            out = scope.iterative(body)
            return h, out.capture(), out.probe()

        h, captured, probe = worker.dataflow(build)
        for r in range(4):
            h.send(2 ** (r + 3))
            h.advance_to(r + 1)
            worker.step_while(lambda: probe.less_than(h.time))
            assert_frontier(probe, [r + 1])
        return captured.extract()

    assert pt.execute(work)[0] == [(0, [1]), (1, [1]), (2, [1]), (3, [1])]


def test_scope_misuse_is_a_graph_error():
    with pytest.raises(GraphError):
        pt.example(lambda s: s.to_stream([1]).leave())

    def wrong_scope(scope):
        a = scope.to_stream([1])
        scope.region(lambda r: r.region(lambda rr: a.enter(rr)))

    with pytest.raises(GraphError):
        pt.example(wrong_scope)

    def mixed(scope):
        a = scope.to_stream([1])
        scope.region(lambda r: r.to_stream([2]).concat(a))

    with pytest.raises(GraphError):
        pt.example(mixed)

    def twice(scope):
        h, loop = scope.feedback(1)
        loop.connect_loop(h)
        loop.connect_loop(h)

    with pytest.raises(GraphError):
        pt.example(twice)

    with pytest.raises(GraphError):
        pt.example(lambda s: s.feedback(0))

    escaped = []
    with pytest.raises(GraphError):
        pt.example(lambda s: escaped.append(s))
        escaped[0].to_stream([1])  # the scope was built already


def test_broadcast_edge_counts_on_two_workers():
    # Broadcast multiplies records by the number of workers; progress must still balance.
    def work(worker):
        def build(scope):
            h, s = scope.new_input()
            out = s.broadcast().count()
            return h, out.capture(), out.probe()

        h, captured, probe = worker.dataflow(build)
        for r in range(3):
            h.send_batch(list(range(r + worker.index)))
            h.advance_to(r + 1)
            worker.step_while(lambda: probe.less_than(h.time))
        return captured.extract()

    for got in pt.execute(work, workers=2):
        assert got == [(0, [1]), (1, [3]), (2, [5])]
