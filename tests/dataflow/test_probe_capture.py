"""Probes and capture: what a probe's frontier says, and what ``capture`` records."""

from __future__ import annotations

from typing import Any

import pytimely as pt
from pytimely.capture.event import Messages, Progress
from pytimely.testing import assert_frontier, run_collect

from .helpers import input_with, probed_input, rounds


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
            assert_frontier(probe, [r + 1])
        handle.close()
        for _ in range(3):
            worker.step()
        assert probe.done()
        assert_frontier(probe, [])
        assert not probe.less_equal(10**9)
        return True

    assert pt.execute(work) == [True]


def test_probe_before_the_first_step_is_conservative():
    worker = pt.Worker()
    handle, probe = worker.dataflow(probed_input)
    handle.advance_to(5)
    assert probe.less_than(1) and probe.less_equal(0)  # nothing reported yet
    worker.step_while(lambda: probe.less_than(5))
    assert_frontier(probe, [5])


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
        assert_frontier(probe, [1])  # the slower stream holds the probe
        b_in.advance_to(7)
        worker.step_while(lambda: probe.less_than(3))
        assert_frontier(probe, [3])
        a_in.close()
        b_in.close()
        worker.step_while(lambda: not probe.done())
        return True

    assert pt.execute(work) == [True]


def test_probe_with_returns_the_stream():
    def build(scope):
        probe = pt.ProbeHandle()
        s = scope.to_stream([1, 2]).probe_with(probe)
        return s.map(lambda x: x * 2)

    assert run_collect(build) == {0: [2, 4]}


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
