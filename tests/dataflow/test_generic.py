"""The generic builders: ``unary``/``binary`` (with and without frontiers), ``source``/``sink``,
``OperatorBuilder``, ``CapabilitySet`` and the notificator operators."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

import pytimely as pt
from pytimely.dataflow.operators.generic import unary_frontier
from pytimely.errors import CapabilityError, GraphError
from pytimely.progress.operate import FrontierInterest
from pytimely.testing import assert_frontier, run_collect

from .helpers import rounds


def test_unary_with_capability_ref():
    def double(cap, info):
        cap.drop()

        def logic(inp, out):
            for ref, batch in inp:
                out.session(ref).give_batch([2 * x for x in batch])

        return logic

    def build(scope):
        h, s = scope.new_input()
        return h, s.unary(pt.Pipeline, "Double", double).capture()

    assert rounds(build, [[1], [2, 3]]).extract() == [(0, [2]), (1, [4, 6])]


def test_unary_keeps_initial_capability_and_sends_later():
    # An operator may hold its initial capability and use it when it likes (here: on its
    # third invocation), then drop it.
    def ctor(cap, info):
        calls = [0]
        activator = info.activator()

        def logic(inp, out):
            calls[0] += 1
            for _ref, _batch in inp:
                pass
            if calls[0] < 3:
                activator.activate()
            elif cap.valid:
                out.session(cap).give("late")
                out.give(cap, "given", time=4)
                cap.drop()

        return logic

    assert run_collect(lambda s: s.to_stream([]).unary(pt.Pipeline, "Late", ctor)) == {
        0: ["late"],
        4: ["given"],
    }


def test_retain_delayed_downgrade():
    def ctor(cap, info):
        cap.drop()
        held = []

        def logic(inp, out):
            for ref, batch in inp:
                c = ref.retain()
                later = ref.delayed(ref.time + 10)
                out.session(c).give_batch(list(batch))
                c.downgrade(ref.time + 5)
                out.session(c).give_batch([x + 500 for x in batch])
                out.session(later).give_batch([x + 1000 for x in batch])
                c.drop()
                held.append(later)
            if not inp.frontier:  # input finished: let go of everything
                for c in held:
                    c.drop()
                held.clear()

        return logic

    def build(scope):
        h, s = scope.new_input()
        return h, s.unary_frontier(pt.Pipeline, "Moves", ctor).capture()

    got = rounds(build, [[1], [2]]).extract()
    assert got == [(0, [1]), (1, [2]), (5, [501]), (6, [502]), (10, [1001]), (11, [1002])]


def test_unary_frontier_wordcount_style():
    def ctor(cap, info):
        cap.drop()
        stash: dict[int, tuple[Any, list]] = {}

        def logic(inp, out):
            for ref, batch in inp:
                stash.setdefault(ref.time, (ref.retain(), []))[1].extend(batch)
            for t in sorted(stash):
                if not inp.frontier.less_equal(t):
                    c, xs = stash.pop(t)
                    out.session(c).give((t, sorted(xs)))
                    c.drop()

        return logic

    def build(scope):
        h, s = scope.new_input()
        return h, s.unary_frontier(
            pt.Exchange(lambda x: x), "Stash", ctor, interest=pt.FrontierInterest.IF_CAPABILITY
        ).capture()

    got = rounds(build, [[3, 1], [2], [], [5, 4]], steps_between=False).extract()
    assert got == [(0, [(0, [1, 3])]), (1, [(1, [2])]), (3, [(3, [4, 5])])]


def test_binary_and_binary_frontier():
    def join_ctor(cap, info):
        cap.drop()
        left, right = {}, {}

        def logic(a, b, out):
            for ref, batch in a:
                for k, v in batch:
                    for w in right.get(k, ()):
                        out.session(ref).give((k, v, w))
                    left.setdefault(k, []).append(v)
            for ref, batch in b:
                for k, w in batch:
                    for v in left.get(k, ()):
                        out.session(ref).give((k, v, w))
                    right.setdefault(k, []).append(w)

        return logic

    def min_ctor(cap, info):
        cap.drop()
        pending = {}

        def logic(a, b, out):
            for inp in (a, b):
                for ref, batch in inp:
                    entry = pending.setdefault(ref.time, [ref.retain(), None])
                    m = min(batch)
                    entry[1] = m if entry[1] is None else min(entry[1], m)
            for t in sorted(pending):
                if not a.frontier.less_equal(t) and not b.frontier.less_equal(t):
                    c, m = pending.pop(t)
                    out.give(c, m)
                    c.drop()

        return logic

    def work(worker):
        def build(scope):
            ain, a = scope.new_input()
            bin_, b = scope.new_input()
            key = pt.Exchange(lambda kv: kv[0])
            joined = a.binary(b, key, key, "Join", join_ctor).capture()
            mins = (
                a.map(lambda kv: kv[1])
                .binary_frontier(b.map(lambda kv: kv[1]), pt.Pipeline, pt.Pipeline, "Min", min_ctor)
                .capture()
            )
            return ain, bin_, joined, mins

        ain, bin_, joined, mins = worker.dataflow(build)
        ain.send(("x", 5))
        bin_.send(("y", 7))
        ain.advance_to(1)
        bin_.advance_to(1)
        worker.step()
        bin_.send(("x", 1))
        ain.send(("y", 2))
        ain.advance_to(2)
        bin_.advance_to(2)
        worker.step()
        bin_.send(("x", 9))
        return joined, mins

    joined, mins = pt.execute(work)[0]
    assert joined.extract() == [(1, [("x", 5, 1), ("y", 2, 7)]), (2, [("x", 5, 9)])]
    assert mins.extract() == [(0, [5]), (1, [1]), (2, [9])]


def test_sink_and_source():
    got = []

    def build(scope):
        def ticker(cap, info):
            state = {"n": 0}
            act = info.activator()

            def logic(out):
                if state["n"] < 3:
                    out.session(cap).give(state["n"])
                    state["n"] += 1
                    cap.downgrade(state["n"])
                    act.activate()
                elif cap.valid:
                    cap.drop()

            return logic

        s = scope.source("Ticker", ticker)
        s.sink(
            pt.Pipeline, "Collect", lambda inp: got.extend((ref.time, list(b)) for ref, b in inp)
        )
        return s

    assert run_collect(build) == {0: [0], 1: [1], 2: [2]}
    assert got == [(0, [0]), (1, [1]), (2, [2])]


def test_activate_after_wakes_a_parked_worker():
    def ticker(cap, info):
        act = info.activator()
        state = {"n": 0}

        def logic(out):
            if state["n"] < 3:
                out.session(cap).give(time.monotonic())
                state["n"] += 1
                cap.downgrade(state["n"])
                act.activate_after(0.03)
            elif cap.valid:
                cap.drop()

        return logic

    def work(worker):
        captured = worker.dataflow(lambda s: s.source("Ticker", ticker).capture())
        steps = 0
        while worker.step_or_park(1.0):
            steps += 1
            assert steps < 1000
        return captured.extract(), steps

    got, steps = pt.execute(work)[0]
    stamps = [xs[0] for _t, xs in got]
    assert [t for t, _ in got] == [0, 1, 2]
    assert all(b - a >= 0.025 for a, b in itertools.pairwise(stamps))
    assert steps < 50  # parked, not spinning


def test_operator_builder_many_ports_and_connections():
    def build(scope):
        a = scope.to_stream(range(6))
        b = scope.to_stream([100])
        builder = pt.OperatorBuilder("Router", scope)
        ia = builder.new_input(a, pt.Pipeline)
        ib = builder.new_input(b, pt.Pipeline, connection=[None, 0, None])
        assert (ia, ib) == (0, 1)
        outs = [builder.new_output() for _ in range(3)]
        assert outs == [0, 1, 2]

        def ctor(caps, info):
            assert len(caps) == 3 and [c.output for c in caps] == [0, 1, 2]
            assert info.name == "Router"
            for c in caps:
                c.drop()

            def logic(in_a, in_b, even, odd, other):
                for ref, batch in in_a:
                    even.session(ref).give_batch([x for x in batch if x % 2 == 0])
                    odd.session(ref).give_batch([x for x in batch if x % 2])
                for ref, batch in in_b:
                    odd.session(ref).give_batch(batch)

            return logic

        return builder.build(ctor)

    assert run_collect(build) == [{0: [0, 2, 4]}, {0: [1, 3, 5, 100]}, {}]


def test_operator_builder_connection_summary_delays():
    # A connection summary of 2: a message at t gives a capability at t+2 on that output.
    def build(scope):
        h, s = scope.new_input()
        builder = pt.OperatorBuilder("Later", scope)
        builder.new_input(s, pt.Pipeline, connection=[2])
        builder.new_output()

        def ctor(caps, info):
            caps[0].drop()

            def logic(inp, out):
                for ref, batch in inp:
                    with pytest.raises(CapabilityError):
                        ref.retain()  # t itself is not reachable on output 0
                    c = ref.delayed(ref.time + 2)
                    out.session(c).give_batch(list(batch))
                    c.drop()

            return logic

        out = builder.build(ctor)[0]
        return h, (out.capture(), out.probe())

    def work(worker):
        h, (captured, probe) = worker.dataflow(build)
        h.send(1)
        h.advance_to(1)
        worker.step_while(lambda: probe.less_than(3))
        assert_frontier(probe, [3])  # the input at 1 reaches the output at 3
        return captured

    assert pt.execute(work)[0].extract() == [(2, [1])]


def test_operator_builder_connection_must_name_every_output():
    def build(scope):
        builder = pt.OperatorBuilder("Bad", scope)
        builder.new_input(scope.to_stream([1]), pt.Pipeline, connection=[0, 0])
        builder.new_output()
        builder.build(lambda caps, info: None)

    with pytest.raises(GraphError, match="Bad"):
        pt.example(build)


def test_operator_builder_build_twice():
    def build(scope):
        builder = pt.OperatorBuilder("Once", scope)
        builder.new_output()
        builder.build(lambda caps, info: [c.drop() for c in caps] and None)
        builder.build(lambda caps, info: None)

    with pytest.raises(GraphError, match="Once"):
        pt.example(build)


def test_capability_set():
    def ctor(cap, info):
        held = pt.CapabilitySet([cap])
        log = info  # noqa: F841

        def logic(inp, out):
            for ref, batch in inp:
                for x in batch:
                    out.session(held.delayed(ref.time)).give(x)
            # Keep exactly what the input frontier allows.
            held.downgrade(inp.frontier)

        return logic

    def work(worker):
        def build(scope):
            h, s = scope.new_input()
            out = s.unary_frontier(pt.Pipeline, "Set", ctor)
            return h, out.capture(), out.probe()

        h, captured, probe = worker.dataflow(build)
        for r in range(3):
            h.send(r)
            h.advance_to(r + 1)
            worker.step_while(lambda: probe.less_than(h.time))
            assert_frontier(probe, [r + 1])  # the set follows the input frontier
        return captured

    assert pt.execute(work)[0].extract() == [(0, [0]), (1, [1]), (2, [2])]


def test_capability_set_semantics():
    def ctor(caps, info):
        c = caps[0]
        s = pt.CapabilitySet()
        assert not s and len(s) == 0
        s.insert(c.delayed(3))
        s.insert(c.delayed(5))  # dominated by 3: dropped
        assert [x.time for x in s] == [3]
        s.insert(c.delayed(1))  # dominates 3
        assert [x.time for x in s] == [1]
        assert s.first().time == 1
        d = s.delayed(4)
        assert d.time == 4
        with pytest.raises(CapabilityError):
            s.delayed(0)
        s.downgrade([2])
        assert [x.time for x in s] == [2]
        s.drop()
        assert not s
        d.drop()
        c.drop()

    def build(scope):
        builder = pt.OperatorBuilder("Set", scope)
        builder.new_output()
        return builder.build(ctor)[0].probe()

    assert pt.example(build).done()


def test_unary_notify_counts_per_time():
    def logic(inp, out, notificator):
        for ref, batch in inp:
            counts[ref.time] = counts.get(ref.time, 0) + len(batch)
            notificator.notify_at(ref.retain())
        for cap in notificator:
            out.session(cap).give((cap.time, counts.pop(cap.time)))
            cap.drop()

    counts: dict[int, int] = {}

    def build(scope):
        h, s = scope.new_input()
        return h, s.unary_notify(pt.Pipeline, "Notify", [], logic).capture()

    got = rounds(build, [[1, 2], [], [3], [4, 5, 6]], steps_between=False).extract()
    assert got == [(0, [(0, 2)]), (2, [(2, 1)]), (3, [(3, 3)])]


def test_unary_notify_initial_times():
    notified = []

    def logic(inp, out, notificator):
        for _ in inp:
            pass
        for cap in notificator:
            notified.append(cap.time)
            out.session(cap).give(cap.time)
            cap.drop()

    def build(scope):
        h, s = scope.new_input()
        return h, s.unary_notify(pt.Pipeline, "Init", [2, 0, 5], logic).capture()

    got = rounds(build, [[], [], [], []]).extract()
    assert notified == [0, 2, 5]
    assert got == [(0, [0]), (2, [2]), (5, [5])]


def test_binary_notify_waits_for_both_inputs():
    notified = []

    def logic(a, b, out, notificator):
        for inp in (a, b):
            for ref, batch in inp:
                notificator.notify_at(ref.retain())
        for cap in notificator:
            notified.append((cap.time, list(a.frontier), list(b.frontier)))
            out.give(cap, cap.time)
            cap.drop()

    def work(worker):
        def build(scope):
            ain, a = scope.new_input()
            bin_, b = scope.new_input()
            return ain, bin_, a.binary_notify(b, pt.Pipeline, pt.Pipeline, "Both", [], logic)

        ain, bin_, _ = worker.dataflow(build)
        ain.send(1)
        ain.advance_to(3)
        for _ in range(5):
            worker.step()
        assert notified == []  # b could still send at 0
        bin_.advance_to(2)
        for _ in range(5):
            worker.step()
        return list(notified)

    got = pt.execute(work)[0]
    assert got == [(0, [3], [2])]


@pytest.mark.parametrize(
    ("interest", "woken"),
    [(FrontierInterest.NEVER, False), (None, True), (FrontierInterest.ALWAYS, True)],
)
def test_interest_never_is_kept_and_none_means_always(interest, woken):
    """``interest=NEVER`` (0) must not be read as "not given": a frontier change alone wakes
    the operator only under ``ALWAYS``, the default."""
    calls = []

    def ctor(cap, info):
        cap.drop()
        return lambda inp, out: calls.append(inp.frontier.elements())

    worker = pt.Worker()

    def build(scope):
        inp, stream = scope.new_input()
        unary_frontier(stream, pt.Pipeline, "Watch", ctor, interest)
        return inp

    inp = worker.dataflow(build)
    worker.step()
    before = len(calls)
    inp.advance_to(5)
    for _ in range(3):
        worker.step()
    assert (len(calls) > before) == woken
