"""The dataflow layer, operator by operator, with known answers.

Mirrors the behaviours the Rust crate's tests and doctests check (timely-rs §6.2): the operator
library (``reclock``, ``count``, ``accumulate``, ``aggregate``, the ``flat_map``/``map`` chain,
...), the generic builders, nested regions and loops (``Product`` of ``Product`` times), a user
timestamp type, capability misuse, operator failures, probe semantics, empty batches (gh523),
wide operators and regions (shape_scaling), and ``StuckError`` instead of a hang.
"""

from __future__ import annotations

import functools
import itertools
import time
from typing import Any

import pytest

import pytimely as pt
from pytimely.capture.event import Messages, Progress
from pytimely.errors import CapabilityError, GraphError, OperatorError, TimelyError
from pytimely.order import ProductDomain


def input_with(scope, *then):
    """A new input of ``scope``: ``(handle, f(stream) for f in then)``."""
    handle, stream = scope.new_input()
    results = [f(stream) for f in then]
    return (handle, *results)


def probed_input(scope):
    """A new input and a probe on its stream: ``(handle, probe)``."""
    return input_with(scope, lambda s: s.probe())


def collect(build):
    """``pt.example(build)`` where build returns a capture handle (or a list/tuple of them);
    returns the extracted contents."""
    got = pt.example(build)
    if isinstance(got, (list, tuple)):
        return [h.extract() for h in got]
    return got.extract()


def rounds(build, feeds, steps_between=True):
    """Run ``build(scope) -> (input, result)`` on one worker; round ``r`` sends ``feeds[r]``
    at time ``r`` and completes the round with a probe on the input stream's consumers.
    Returns ``result`` (typically capture handles) after the dataflow has finished."""

    def work(worker):
        handle, result = worker.dataflow(build)
        for r, records in enumerate(feeds):
            for x in records:
                handle.send(x)
            handle.advance_to(r + 1)
            if steps_between:
                for _ in range(3):
                    worker.step()
        return result

    return pt.execute(work)[0]


# ============================================================================================
# Record-at-a-time operators


def test_map_filter_flat_map():
    assert collect(lambda s: s.to_stream(range(10)).map(lambda x: x * x).capture()) == [
        (0, [x * x for x in range(10)])
    ]
    assert collect(lambda s: s.to_stream(range(10)).filter(lambda x: x % 3 == 0).capture()) == [
        (0, [0, 3, 6, 9])
    ]
    assert collect(lambda s: s.to_stream(range(3)).flat_map(lambda x: [x] * x).capture()) == [
        (0, [1, 2, 2])
    ]


def test_flat_map_then_maps_yields_4_to_13():
    # timely core/map.rs test_builder: flat_map(x+1).map(+1) x3 on 0..10 yields 4..13.
    def build(scope):
        s = scope.to_stream(range(10)).flat_map(lambda x: [x + 1])
        for _ in range(3):
            s = s.map(lambda x: x + 1)
        return s.capture()

    assert collect(build) == [(0, list(range(4, 14)))]


def test_map_batch_sees_whole_batches():
    sizes = []

    def f(batch):
        sizes.append(len(batch))
        return [x + 1 for x in batch]

    assert collect(lambda s: s.to_stream(range(100)).map_batch(f).capture()) == [
        (0, list(range(1, 101)))
    ]
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
    a = collect(lambda s: s.to_stream(range(5000)).capture())
    b = collect(lambda s: s.to_stream(list(range(5000))).capture())
    c = collect(lambda s: s.to_stream(x for x in range(5000)).capture())
    assert a == b == c == [(0, list(range(5000)))]


def test_to_stream_every_worker_emits_everything():
    # Doctest of `execute` on three workers: each emits 0..10, so all of them together 0..30/3.
    def work(worker):
        captured = worker.dataflow(lambda s: s.to_stream(range(10)).capture())
        worker.run()
        return captured.extract()

    per_worker = pt.execute(work, workers=3)
    merged = sorted(x for got in per_worker for _t, xs in got for x in xs)
    assert merged == [x // 3 for x in range(30)]


# ============================================================================================
# Routing


def test_exchange_on_one_worker_is_identity():
    assert collect(lambda s: s.to_stream(range(10)).exchange(lambda x: x).capture()) == [
        (0, list(range(10)))
    ]


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
        return a.concat(b).capture(), a.concatenate([b, c]).capture(), a.concatenate([]).capture()

    assert collect(build) == [
        [(0, [1, 2, 10])],
        [(0, [1, 2, 10, 100, 200])],
        [(0, [1, 2])],
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
        return [p.capture() for p in parts] + [no.capture(), yes.capture(), oks.capture(),
                                               errs.capture()]

    got = collect(build)
    assert got[:3] == [[(0, [0, 30, 60, 90])], [(0, [10, 40, 70])], [(0, [20, 50, 80])]]
    assert got[3:5] == [[(0, list(range(7)))], [(0, [7, 8, 9])]]
    assert got[5:] == [[(0, ["0", "2", "4", "6", "8"])], [(0, ["1", "3", "5", "7", "9"])]]


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


# ============================================================================================
# Operators that wait for a time to complete


def test_count():
    assert collect(lambda s: s.to_stream(range(10)).count().capture()) == [(0, [10])]


def test_accumulate_sum():
    got = collect(lambda s: s.to_stream(range(10)).accumulate(int, lambda a, b: a + sum(b))
                  .capture())
    assert got == [(0, [45])]


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
            .capture()
        )

    assert collect(build) == [(0, [(0, 20), (1, 25)])]


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
        return scope.to_stream(range(10)).delay(lambda x, t: t + x // 3).capture()

    assert collect(build) == [(0, [0, 1, 2]), (1, [3, 4, 5]), (2, [6, 7, 8]), (3, [9])]


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


# ============================================================================================
# Probes and capture


def test_probe_semantics():
    # timely core/probe.rs: before each round !done, less_equal(round), less_than(round+1);
    # after close() and a few steps, done().
    def work(worker):
        handle, probe = worker.dataflow(probed_input)
        for r in range(10):
            assert not probe.done()
            assert probe.less_equal(r)
            assert probe.less_than(r + 1)
            assert not probe.less_than(r)
            handle.send(r)
            handle.advance_to(r + 1)
            worker.step_while(lambda: probe.less_than(handle.time))
            assert not probe.less_equal(r)
            assert list(probe.frontier) == [r + 1]
        handle.close()
        for _ in range(3):
            worker.step()
        assert probe.done()
        assert list(probe.frontier) == []
        assert not probe.less_equal(10**9)
        return True

    assert pt.execute(work) == [True]


def test_probe_before_the_first_step_is_conservative():
    worker = pt.Worker()
    handle, probe = worker.dataflow(probed_input)
    handle.advance_to(5)
    assert probe.less_than(1) and probe.less_equal(0)  # nothing reported yet
    worker.step_while(lambda: probe.less_than(5))
    assert list(probe.frontier) == [5]


def test_probe_with_one_handle_for_two_streams():
    def work(worker):
        def build(scope):
            a_in, a = scope.new_input()
            b_in, b = scope.new_input()
            probe = pt.ProbeHandle()
            a.probe_with(probe)
            b.map(lambda x: x).probe_with(probe)
            return a_in, b_in, probe

        a_in, b_in, probe = worker.dataflow(build)
        a_in.advance_to(3)
        b_in.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))
        assert list(probe.frontier) == [1]  # the slower stream holds the probe
        b_in.advance_to(7)
        worker.step_while(lambda: probe.less_than(3))
        assert list(probe.frontier) == [3]
        a_in.close()
        b_in.close()
        worker.step_while(lambda: not probe.done())
        return True

    assert pt.execute(work) == [True]


def test_probe_with_returns_the_stream():
    def build(scope):
        probe = pt.ProbeHandle()
        s = scope.to_stream([1, 2]).probe_with(probe)
        return s.map(lambda x: x * 2).capture()

    assert collect(build) == [(0, [2, 4])]


def test_capture_extract_merges_and_sorts_per_time():
    def build(scope):
        h, s = scope.new_input()
        return h, s.capture()

    captured = rounds(build, [[3, 1], [], [2]], steps_between=False)
    assert captured.extract() == [(0, [1, 3]), (2, [2])]


def test_capture_into_writer_sees_progress_and_messages():
    class Writer:
        def __init__(self):
            self.events = []

        def push(self, event):
            self.events.append(event)

    writer = Writer()

    def work(worker):
        handle, _, probe = worker.dataflow(
            lambda s: input_with(s, lambda x: x.capture_into(writer), lambda x: x.probe())
        )
        handle.send("a")
        handle.advance_to(2)
        worker.step_while(lambda: probe.less_than(2))
        handle.send("b")

    pt.execute(work)
    messages = [e for e in writer.events if isinstance(e, Messages)]
    progress = [e for e in writer.events if isinstance(e, Progress)]
    assert [(m.time, list(m.batch)) for m in messages] == [(0, ["a"]), (2, ["b"])]
    # Relative to an implicit (0, +1), the progress events accumulate to nothing: complete.
    total: dict[Any, int] = {0: 1}
    for p in progress:
        for t, d in p.changes:
            total[t] = total.get(t, 0) + d
    assert all(v == 0 for v in total.values())
    assert Progress([(0, -1), (2, 1)]) in progress


# ============================================================================================
# Generic builders


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

    assert collect(lambda s: s.to_stream([]).unary(pt.Pipeline, "Late", ctor).capture()) == [
        (0, ["late"]), (4, ["given"])
    ]


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
        return h, s.unary_frontier(pt.Exchange(lambda x: x), "Stash", ctor,
                                   interest=pt.FrontierInterest.IF_CAPABILITY).capture()

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
            mins = a.map(lambda kv: kv[1]).binary_frontier(
                b.map(lambda kv: kv[1]), pt.Pipeline, pt.Pipeline, "Min", min_ctor
            ).capture()
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
        s.sink(pt.Pipeline, "Collect",
               lambda inp: got.extend((ref.time, list(b)) for ref, b in inp))
        return s.capture()

    assert collect(build) == [(0, [0]), (1, [1]), (2, [2])]
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

        streams = builder.build(ctor)
        return [s.capture() for s in streams]

    assert collect(build) == [[(0, [0, 2, 4])], [(0, [1, 3, 5, 100])], []]


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
        assert list(probe.frontier) == [3]  # the input at 1 reaches the output at 3
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
            assert list(probe.frontier) == [r + 1]  # the set follows the input frontier
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


# ============================================================================================
# Inputs


def test_input_handle_send_batch_and_close():
    def work(worker):
        def build(scope):
            h, s = scope.new_input()
            return h, s.capture()

        h, captured = worker.dataflow(build)
        assert h.time == 0
        h.send_batch([1, 2, 3])
        h.send_batch([])
        h.advance_to(2)
        assert h.time == 2
        h.send(4)
        with pytest.raises(CapabilityError):
            h.advance_to(1)
        h.close()
        h.close()  # idempotent
        with pytest.raises(TimelyError):
            h.send(5)
        return captured

    assert pt.execute(work)[0].extract() == [(0, [1, 2, 3]), (2, [4])]


def test_input_handle_large_batches():
    def work(worker):
        h, captured = worker.dataflow(lambda s: input_with(s, lambda x: x.count().capture()))
        for x in range(10_000):
            h.send(x)
        return captured

    assert pt.execute(work)[0].extract() == [(0, [10_000])]


def test_unordered_input():
    # Doctest: extract()[i] == (i, [i]).
    def work(worker):
        def build(scope):
            (handle, cap), stream = scope.new_unordered_input()
            return handle, cap, stream.capture()

        handle, cap, captured = worker.dataflow(build)
        for i in range(10):
            handle.session(cap).give(i)
            later = cap.delayed(i + 1)
            cap.drop()
            cap = later
            worker.step()
        cap.drop()
        return captured

    extracted = pt.execute(work)[0].extract()
    for i in range(10):
        assert extracted[i] == (i, [i])


def test_unordered_input_out_of_order_times():
    def work(worker):
        def build(scope):
            (handle, cap), stream = scope.new_unordered_input()
            return handle, cap, stream.capture(), stream.probe()

        handle, cap, captured, probe = worker.dataflow(build)
        c5 = cap.delayed(5)
        c2 = cap.delayed(2)
        cap.drop()
        handle.session(c5).give("five")
        handle.session(c2).give("two")
        handle.session(c2, 3).give("three")
        worker.step_while(lambda: probe.less_than(2))
        assert list(probe.frontier) == [2]
        c2.drop()
        worker.step_while(lambda: probe.less_than(5))
        with pytest.raises(CapabilityError):
            c5.downgrade(4)
        c5.drop()
        return captured

    assert pt.execute(work)[0].extract() == [(2, ["two"]), (3, ["three"]), (5, ["five"])]


# ============================================================================================
# Scopes: regions, loops, nesting


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
        merged = sorted((t, x) for got in pt.execute(work, workers=workers) for t, xs in got
                        for x in xs)
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

        return scope.iterative(body).capture()

    assert collect(build) == [(0, [0, 0])]
    assert sorted(seen) == sorted([
        (pt.Product(0, 0), 3), (pt.Product(0, 0), 1), (pt.Product(0, 1), 2),
        (pt.Product(0, 1), 0), (pt.Product(0, 2), 1), (pt.Product(0, 3), 0),
    ])


def test_feedback_in_the_top_scope():
    # timely's loopdemo shape: a feedback loop directly in the dataflow's scope (int times).
    def build(scope):
        handle, looped = scope.feedback(1)
        s = scope.to_stream([4]).concat(looped)
        s.filter(lambda x: x > 0).map(lambda x: x - 1).connect_loop(handle)
        return s.capture()

    assert collect(build) == [(0, [4]), (1, [3]), (2, [2]), (3, [1]), (4, [0])]


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

        return scope.iterative(outer_body).capture()

    assert collect(build) == [(0, [3, 6, 9])]
    P = pt.Product
    expected = []
    for outer_round, start in enumerate([0, 3, 6]):
        for step in range(3):
            expected.append((P(P(0, outer_round), step), start + step))
    assert sorted(inner_times) == sorted(expected)
    assert all(isinstance(t, pt.Product) and isinstance(t.outer, pt.Product)
               for t, _ in inner_times)


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
            assert list(probe.frontier) == [r + 1]
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


# ============================================================================================
# A user-defined timestamp type


@functools.total_ordering
class Tick:
    """An integer epoch wrapped in a class: the timestamp protocol, nothing more."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    @classmethod
    def minimum(cls) -> Tick:
        return cls(0)

    def less_equal(self, other: Tick) -> bool:
        return self.n <= other.n

    def less_than(self, other: Tick) -> bool:
        return self.n < other.n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tick) and other.n == self.n

    def __lt__(self, other: Tick) -> bool:
        return self.n < other.n

    def __hash__(self) -> int:
        return hash(("Tick", self.n))

    def __repr__(self) -> str:
        return f"Tick({self.n})"

    class Summary:
        __slots__ = ("k",)

        def __init__(self, k: int = 0) -> None:
            self.k = k

        def results_in(self, t: Tick) -> Tick:
            return Tick(t.n + self.k)

        def followed_by(self, other: Tick.Summary) -> Tick.Summary:
            return Tick.Summary(self.k + other.k)

        def less_equal(self, other: Tick.Summary) -> bool:
            return self.k <= other.k

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Tick.Summary) and other.k == self.k

        def __lt__(self, other: Tick.Summary) -> bool:
            return self.k < other.k

        def __hash__(self) -> int:
            return hash(("Tick.Summary", self.k))


@functools.total_ordering
class Pair:
    """Two counters under the product partial order (``<`` is lexicographic: a linear
    extension).  Incomparable pairs make frontiers with several elements."""

    __slots__ = ("a", "b")

    def __init__(self, a: int, b: int) -> None:
        self.a, self.b = a, b

    @classmethod
    def minimum(cls) -> Pair:
        return cls(0, 0)

    def less_equal(self, other: Pair) -> bool:
        return self.a <= other.a and self.b <= other.b

    def less_than(self, other: Pair) -> bool:
        return self.less_equal(other) and self != other

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Pair) and (other.a, other.b) == (self.a, self.b)

    def __lt__(self, other: Pair) -> bool:
        return (self.a, self.b) < (other.a, other.b)

    def __hash__(self) -> int:
        return hash(("Pair", self.a, self.b))

    def __repr__(self) -> str:
        return f"Pair({self.a}, {self.b})"

    class Summary:
        __slots__ = ("da", "db")

        def __init__(self, da: int = 0, db: int = 0) -> None:
            self.da, self.db = da, db

        def results_in(self, t: Pair) -> Pair:
            return Pair(t.a + self.da, t.b + self.db)

        def followed_by(self, other: Pair.Summary) -> Pair.Summary:
            return Pair.Summary(self.da + other.da, self.db + other.db)

        def less_equal(self, other: Pair.Summary) -> bool:
            return self.da <= other.da and self.db <= other.db

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Pair.Summary) and (other.da, other.db) == (self.da, self.db)

        def __hash__(self) -> int:
            return hash(("Pair.Summary", self.da, self.db))


def test_user_timestamp_rounds_loop_and_count():
    def work(worker):
        def build(scope):
            h, s = scope.new_input()
            handle, looped = scope.feedback(Tick.Summary(1))
            body = s.concat(looped).map(lambda x: x - 1)
            body.filter(lambda x: x > 0).connect_loop(handle)
            return h, body.capture(), s.count().capture(), body.probe()

        h, body, counts, probe = worker.dataflow(build, timestamp=Tick)
        assert h.time == Tick(0)
        for r in range(3):
            h.send(3)
            h.send(1)
            h.advance_to(Tick(r + 1))
            worker.step_while(lambda: probe.less_than(h.time))
            assert list(probe.frontier) == [Tick(r + 1)]
        return body.extract(), counts.extract()

    body, counts = pt.execute(work)[0]
    # Each round: 3 -> 2 (t), 2 -> 1 (t+1), 1 -> 0 (t+2); and 1 -> 0 (t).
    assert body == [
        (Tick(0), [0, 2]), (Tick(1), [0, 1, 2]), (Tick(2), [0, 0, 1, 2]),
        (Tick(3), [0, 1]), (Tick(4), [0]),
    ]
    assert counts == [(Tick(0), [2]), (Tick(1), [2]), (Tick(2), [2])]


def test_user_timestamp_partial_order_frontier():
    def work(worker):
        def build(scope):
            (handle, cap), stream = scope.new_unordered_input()
            return handle, cap, stream.capture(), stream.probe()

        handle, cap, captured, probe = worker.dataflow(build, timestamp=Pair)
        x = cap.delayed(Pair(1, 0))
        y = cap.delayed(Pair(0, 1))
        cap.drop()
        handle.session(x).give("x")
        handle.session(y).give("y")
        worker.step_while(lambda: probe.less_equal(Pair(0, 0)))
        assert sorted(probe.frontier) == [Pair(0, 1), Pair(1, 0)]  # two incomparable minima
        assert probe.less_equal(Pair(1, 1)) and not probe.less_equal(Pair(0, 0))
        x.downgrade(Pair(2, 0))
        worker.step_while(lambda: probe.less_equal(Pair(1, 0)))
        assert sorted(probe.frontier) == [Pair(0, 1), Pair(2, 0)]
        x.drop()
        worker.step_while(lambda: probe.less_equal(Pair(5, 0)))
        assert list(probe.frontier) == [Pair(0, 1)]
        y.drop()
        worker.step_while(lambda: not probe.done())
        return captured.extract()

    assert pt.execute(work)[0] == [(Pair(0, 1), ["y"]), (Pair(1, 0), ["x"])]


def test_user_timestamp_type_must_follow_the_protocol():
    class NotATime:
        pass

    with pytest.raises(TypeError):
        pt.Worker().dataflow(lambda s: None, timestamp=NotATime)


# ============================================================================================
# Capability misuse and operator failures


def _misuse(name, logic_factory, feed=((1,), (2,))):
    """Run an operator named ``name`` over two rounds; return the raised OperatorError."""

    def work(worker):
        def build(scope):
            h, s = scope.new_input()
            s.unary(pt.Pipeline, name, logic_factory)
            return h

        h = worker.dataflow(build)
        for r, records in enumerate(feed):
            for x in records:
                h.send(x)
            h.advance_to(r + 1)
            for _ in range(3):
                worker.step()

    with pytest.raises(OperatorError) as info:
        pt.execute(work)
    error = info.value
    assert error.operator == name
    assert name in str(error)
    assert isinstance(error.__cause__, CapabilityError)
    assert name in str(error.__cause__)
    return error


def test_sending_without_a_token():
    def ctor(cap, info):
        cap.drop()

        def logic(inp, out):
            for _ref, batch in inp:
                out.session(None).give_batch(batch)

        return logic

    error = _misuse("NoToken", ctor)
    assert "requires a Capability" in str(error.__cause__)


def test_sending_with_a_token_of_another_output():
    def build(scope):
        builder = pt.OperatorBuilder("WrongOutput", scope)
        builder.new_input(scope.to_stream([1]), pt.Pipeline)
        builder.new_output()
        builder.new_output()

        def ctor(caps, info):
            first, second = caps
            second.drop()

            def logic(inp, out0, out1):
                for _ in inp:
                    pass
                out1.session(first).give("oops")

            return logic

        builder.build(ctor)

    with pytest.raises(OperatorError) as info:
        pt.example(build)
    assert info.value.operator == "WrongOutput"
    assert isinstance(info.value.__cause__, CapabilityError)
    assert "output 0 cannot send on output 1" in str(info.value.__cause__)


def test_sending_with_a_token_of_another_operator():
    stolen = []

    def thief(cap, info):
        stolen.append(cap)

        def logic(inp, out):
            for _ in inp:
                pass

        return logic

    def user(cap, info):
        cap.drop()

        def logic(inp, out):
            for _ in inp:
                pass
            if stolen:
                out.session(stolen[0]).give(1)

        return logic

    def build(scope):
        s = scope.to_stream([1])
        s.unary(pt.Pipeline, "Thief", thief)
        s.unary(pt.Pipeline, "User", user)

    with pytest.raises(OperatorError) as info:
        pt.example(build)
    assert info.value.operator == "User"
    assert "Thief" in str(info.value.__cause__)


def test_message_token_on_an_unconnected_output():
    def build(scope):
        builder = pt.OperatorBuilder("Disconnected", scope)
        builder.new_input(scope.to_stream([1]), pt.Pipeline, connection=[0, None])
        builder.new_output()
        builder.new_output()

        def ctor(caps, info):
            for c in caps:
                c.drop()

            def logic(inp, out0, out1):
                for ref, _batch in inp:
                    ref.retain(output=1)

            return logic

        builder.build(ctor)

    with pytest.raises(OperatorError) as info:
        pt.example(build)
    assert info.value.operator == "Disconnected"
    assert "not connected" in str(info.value.__cause__)


def test_downgrading_backwards():
    def ctor(cap, info):
        cap.drop()

        def logic(inp, out):
            for ref, _batch in inp:
                c = ref.retain()
                c.downgrade(ref.time + 5)
                c.downgrade(ref.time + 1)

        return logic

    error = _misuse("Backwards", ctor)
    assert "downgrad" in str(error.__cause__)


def test_delayed_backwards():
    def ctor(cap, info):
        cap.drop()

        def logic(inp, out):
            for ref, _batch in inp:
                c = ref.retain()
                c.delayed(ref.time - 1)

        return logic

    _misuse("DelayedBack", ctor, feed=((), (1,)))


def test_sending_before_the_capability_time():
    def ctor(cap, info):
        cap.drop()

        def logic(inp, out):
            for ref, batch in inp:
                out.session(ref, ref.time - 1).give_batch(batch)

        return logic

    error = _misuse("Early", ctor, feed=((), (1,)))
    assert "cannot send at 0" in str(error.__cause__)


def test_using_a_dropped_token():
    def ctor(cap, info):
        cap.drop()

        def logic(inp, out):
            for _ref, batch in inp:
                out.session(cap).give_batch(batch)

        return logic

    error = _misuse("Dropped", ctor)
    assert "after drop()" in str(error.__cause__)


def test_dropping_twice():
    def ctor(cap, info):
        cap.drop()

        def logic(inp, out):
            for _ in inp:
                pass
            cap.drop()

        return logic

    _misuse("DropTwice", ctor)


def test_using_a_capability_ref_after_the_call():
    kept = []

    def ctor(cap, info):
        cap.drop()

        def logic(inp, out):
            for ref, _batch in inp:
                kept.append(ref)
            if len(kept) > 1:
                out.session(kept[0]).give("stale")

        return logic

    error = _misuse("StaleRef", ctor)
    assert "only valid during the call" in str(error.__cause__)

    kept.clear()

    def ctor2(cap, info):
        cap.drop()

        def logic(inp, out):
            for ref, _batch in inp:
                kept.append(ref)
            if len(kept) > 1:
                kept[0].retain()

        return logic

    _misuse("StaleRetain", ctor2)


def test_capability_errors_outside_operators_are_raised_directly():
    worker = pt.Worker()
    (handle, cap), _stream = worker.dataflow(lambda s: s.new_unordered_input())
    later = cap.delayed(3)
    with pytest.raises(CapabilityError, match="UnorderedInput"):
        later.downgrade(1)
    with pytest.raises(CapabilityError):
        later.delayed(2)
    cap.drop()
    with pytest.raises(CapabilityError, match="after drop"):
        cap.time  # noqa: B018
    with pytest.raises(CapabilityError):
        handle.session(cap)
    later.drop()
    worker.run()


def test_operator_exception_propagates_out_of_step():
    def ctor(cap, info):
        cap.drop()

        def logic(inp, out):
            for _ref, batch in inp:
                if 13 in batch:
                    raise ValueError("unlucky record")
                out.session(_ref).give_batch(batch)

        return logic

    worker = pt.Worker()

    def build(scope):
        h, s = scope.new_input()
        scope.region(lambda r: s.enter(r).unary(pt.Pipeline, "Fragile", ctor).leave()).probe()
        return h

    h = worker.dataflow(build)
    h.send(1)
    h.advance_to(1)
    for _ in range(3):
        worker.step()
    h.send(13)
    h.flush()  # inputs buffer records until flushed, advanced or full
    with pytest.raises(OperatorError) as info:
        for _ in range(3):
            worker.step()
    error = info.value
    assert error.operator == "Fragile"
    assert "Fragile" in str(error) and "ValueError" in str(error)
    assert isinstance(error.__cause__, ValueError)
    assert len(error.address) == 3  # (dataflow, region, operator): inside the region
    assert str(error.address) in str(error)


def test_operator_exception_in_execute():
    def work(worker):
        worker.dataflow(lambda s: s.to_stream([1]).map(lambda x: 1 / 0, name="Divide"))

    with pytest.raises(OperatorError, match="Divide") as info:
        pt.execute(work)
    assert isinstance(info.value.__cause__, ZeroDivisionError)


# ============================================================================================
# Progress edge cases


def test_gh523_empty_batches_do_not_block_progress():
    # A unary that emits an empty batch, then data, followed by exchange and probe: the probe
    # must complete after close().
    def ctor(cap, info):
        cap.drop()

        def logic(inp, out):
            for ref, batch in inp:
                out.session(ref).give_batch([])
                out.give_batch(ref, [])
                out.session(ref).give_batch(list(batch))

        return logic

    def build(scope):
        h, s = scope.new_input()
        out = s.unary(pt.Pipeline, "Empty", ctor).exchange(lambda x: x)
        return h, out.probe(), out.capture()

    for workers in (1, 2):

        def work(worker):
            h, probe, captured = worker.dataflow(build)
            h.send_batch([])
            h.send(worker.index)
            h.advance_to(1)
            worker.step_while(lambda: probe.less_than(1))
            h.close()
            worker.step_while(lambda: not probe.done())
            return captured.extract()

        merged = sorted(x for got in pt.execute(work, workers=workers) for _t, xs in got
                        for x in xs)
        assert merged == list(range(workers))


def test_stuck_step_while_raises_instead_of_hanging():
    def work(worker):
        h, probe = worker.dataflow(probed_input)
        h.send(1)
        worker.step_while(lambda: probe.less_than(1))  # never advanced: can never finish

    with pytest.raises(pt.StuckError) as info:
        pt.execute(work)
    assert "Input" in str(info.value)  # it says what holds the frontier


def test_stuck_run_with_a_leaked_capability():
    leaked = []

    def ctor(cap, info):
        leaked.append(cap)  # never dropped

        def logic(inp, out):
            for _ in inp:
                pass

        return logic

    with pytest.raises(pt.StuckError, match="Hoarder"):
        pt.example(lambda s: s.to_stream([1]).unary(pt.Pipeline, "Hoarder", ctor).probe())


def test_step_while_timeout():
    def ticker(cap, info):
        act = info.activator()

        def logic(out):
            assert cap.valid  # held forever (an unreferenced token would be collected)
            act.activate_after(0.01)  # forever busy, never done

        return logic

    worker = pt.Worker()
    probe = worker.dataflow(lambda s: s.source("Forever", ticker).probe())
    with pytest.raises(TimeoutError):
        worker.step_while(lambda: not probe.done(), timeout=0.1)


def test_frontier_interest_levels():
    calls = {"never": 0, "if_cap": 0, "always": 0}

    def counting(key, hold):
        def ctor(cap, info):
            if not hold:
                cap.drop()

            def logic(inp, out):
                calls[key] += 1
                for _ in inp:
                    pass
                if hold and not inp.frontier and cap.valid:
                    cap.drop()

            return logic

        return ctor

    def work(worker):
        def build(scope):
            h, s = scope.new_input()
            s.unary(pt.Pipeline, "Never", counting("never", False))
            s.unary_frontier(pt.Pipeline, "IfCapIdle", counting("if_cap", False),
                             interest=pt.FrontierInterest.IF_CAPABILITY)
            s.unary_frontier(pt.Pipeline, "Always", counting("always", True))
            return h

        h = worker.dataflow(build)
        for _ in range(3):
            worker.step()
        start = dict(calls)
        for r in range(10):
            h.advance_to(r + 1)
            for _ in range(3):
                worker.step()
        return {k: calls[k] - start[k] for k in calls}

    got = pt.execute(work)[0]
    assert got["never"] == 0  # only time moved
    assert got["if_cap"] == 0  # holds nothing
    assert got["always"] == 10  # once per frontier change


# ============================================================================================
# Shape scaling (timely tests/shape_scaling.rs), at 1,000


def test_operator_with_1000_inputs_and_outputs():
    n = 1000

    def build(scope):
        source = scope.to_stream(range(3))
        builder = pt.OperatorBuilder("Wide", scope)
        for i in range(n):
            builder.new_input(source, pt.Pipeline,
                              connection=[0 if j == i else None for j in range(n)])
        for _ in range(n):
            builder.new_output()

        def ctor(caps, info):
            for c in caps:
                c.drop()

            def logic(*ports):
                inputs, outputs = ports[:n], ports[n:]
                for i, inp in enumerate(inputs):
                    for ref, batch in inp:
                        outputs[i].session(ref).give_batch([(i, x) for x in batch])

            return logic

        outs = builder.build(ctor)
        return outs[0].capture(), outs[n - 1].capture(), outs[0].concatenate(outs[1:]).count() \
            .capture()

    first, last, total = pt.example(build)
    assert first.extract() == [(0, [(0, 0), (0, 1), (0, 2)])]
    assert last.extract() == [(0, [(n - 1, 0), (n - 1, 1), (n - 1, 2)])]
    assert total.extract() == [(0, [3 * n])]


def test_region_with_1000_entered_and_left_streams():
    n = 1000

    def work(worker):
        def build(scope):
            h, s = scope.new_input()
            streams = [s.map(lambda x, i=i: x + i) for i in range(n)]
            left = scope.region(lambda r: [x.enter(r).leave() for x in streams])
            merged = left[0].concatenate(left[1:])
            return h, merged.count().capture(), merged.probe()

        h, counts, probe = worker.dataflow(build)
        for r in range(2):
            h.send(r)
            h.advance_to(r + 1)
            worker.step_while(lambda: probe.less_than(h.time))
        return counts.extract()

    assert pt.execute(work)[0] == [(0, [n]), (1, [n])]


def test_data_sent_while_building_reaches_consumers_attached_later():
    def build(scope):
        inp, stream = scope.new_input()
        inp.send_batch([1, 2])
        inp.send(3)
        inp.flush()
        return stream.map(lambda x: x * 10).capture()

    assert pt.example(build).extract() == [(0, [10, 20, 30])]


def test_a_forgotten_capability_is_released_and_the_dataflow_completes():
    """A token that becomes unreachable without drop() is released (and its operator woken to
    report it), so it cannot stall the dataflow forever."""
    held = {}

    def ctor(cap, info):
        cap.drop()

        def logic(inp, out):
            for ref, batch in inp:
                held[ref.time] = ref.retain()  # kept for a while, then forgotten below
                out.session(ref).give_batch(batch)
            if inp.frontier.is_empty() or len(held) > 1:
                held.clear()  # no drop(): the collector must release them

        return logic

    def build(scope):
        inp, stream = scope.new_input()
        out = stream.unary_frontier(pt.Pipeline, "Forgetful", ctor)
        return inp, out.probe(), out.capture()

    def work(worker):
        inp, probe, cap = worker.dataflow(build)
        for r in range(3):
            inp.send(r)
            inp.advance_to(r + 1)
            worker.step()
        inp.close()
        worker.run()  # would raise StuckError if a forgotten token kept the frontier back
        assert probe.done()
        return cap.extract()

    assert pt.execute(work)[0] == [(0, [0]), (1, [1]), (2, [2])]


@pytest.mark.parametrize("bad", [2.5, True, "3", None, pt.Product(1, 2)])
def test_input_advance_to_a_time_of_the_wrong_type_fails_at_the_call(bad):
    """advance_to(2.5) on int times used to be accepted and break later, far from the mistake."""
    worker = pt.Worker()
    h, captured = worker.dataflow(lambda s: input_with(s, lambda x: x.capture()))
    h.send(1)
    with pytest.raises(TypeError, match=r"advance_to\(.*is not a time of this scope.*int"):
        h.advance_to(bad)
    assert h.time == 0
    h.advance_to(1)  # the handle is still usable
    h.close()
    worker.run()
    assert captured.extract() == [(0, [1])]


def test_input_advance_to_backwards_names_both_times():
    worker = pt.Worker()
    h, _ = worker.dataflow(lambda s: input_with(s, lambda x: x.capture()))
    h.advance_to(5)
    with pytest.raises(CapabilityError, match=r"advance_to\(3\) after advance_to\(5\)"):
        h.advance_to(3)
    assert h.time == 5


def test_input_in_product_time_checks_both_coordinates():
    worker = pt.Worker()
    h, _ = worker.dataflow(
        lambda s: input_with(s, lambda x: x.capture()), timestamp=ProductDomain(int, int)
    )
    with pytest.raises(TypeError, match="Product"):
        h.advance_to(pt.Product(1, 2.5))
    with pytest.raises(TypeError, match="Product"):
        h.advance_to(3)
    h.advance_to(pt.Product(1, 2))
    assert h.time == pt.Product(1, 2)


def test_unordered_input_rejects_wrong_and_earlier_times_at_the_call():
    worker = pt.Worker()
    (handle, cap), _ = worker.dataflow(lambda s: s.new_unordered_input())
    with pytest.raises(TypeError, match=r"delayed\(2\.5\).*not a time"):
        cap.delayed(2.5)
    with pytest.raises(TypeError, match=r"downgrade\(2\.5\).*not a time"):
        cap.downgrade(2.5)
    with pytest.raises(TypeError, match=r"session\(time=2\.5\).*not a time"):
        handle.session(cap, 2.5)
    later = cap.delayed(3)
    with pytest.raises(CapabilityError):
        later.delayed(2)
    with pytest.raises(CapabilityError):
        handle.session(later, 1)
    later.drop()
    cap.drop()
    worker.run()
