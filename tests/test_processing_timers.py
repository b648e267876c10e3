"""Processing-time timers in ``keyed_process``: they fire on the worker's clock (woken by its
timer, not by polling), emit at the least time the input may still bring, hold the output
back no further than the input, can be cancelled, and survive a snapshot and a restore onto
another number of workers."""

from __future__ import annotations

import time

import pytest

import pytimely as pt
from pytimely.dataflow.snapshot import StateRegistry, partition

pytestmark = pytest.mark.timeout(60)


def count_then_report(delay: float):
    def process(ctx, user, _click):
        if ctx.state is None:
            ctx.set_processing_timer(delay)
        ctx.state = (ctx.state or 0) + 1

    def report(ctx, user, deadline):
        assert time.monotonic() >= deadline
        ctx.emit((user, ctx.state))
        ctx.clear()

    return process, report


def test_a_timer_fires_on_the_clock_at_the_inputs_time_without_polling():
    process, report = count_then_report(0.3)

    def build(scope):
        inp, clicks = scope.new_input()
        out = clicks.keyed_process(process, on_processing_timer=report)
        return inp, out.capture(), out.probe()

    worker = pt.Worker()
    inp, captured, probe = worker.dataflow(build)
    inp.send_batch([("ann", "a"), ("bob", "b"), ("ann", "c")])
    inp.advance_to(7)
    started, cpu = time.monotonic(), time.process_time()
    worker.step_while(lambda: probe.less_than(7), timeout=10)  # the timer holds nothing back
    assert captured.extract() == []
    while not captured.extract() and time.monotonic() - started < 10:
        worker.step_or_park(1.0)
    waited = time.monotonic() - started
    assert 0.3 <= waited < 5
    assert captured.extract() == [(7, [("ann", 2), ("bob", 1)])]
    assert time.process_time() - cpu < 0.2, "the worker polled while it waited"
    inp.close()
    worker.run()


def test_a_cancelled_timer_does_not_fire():
    def process(ctx, user, click):
        deadline = ctx.set_processing_timer(0.1)
        if click == "cancel":
            ctx.cancel_processing_timer(deadline)

    def report(ctx, user, deadline):
        ctx.emit(user)

    def build(scope):
        inp, clicks = scope.new_input()
        return inp, clicks.keyed_process(process, on_processing_timer=report).capture()

    worker = pt.Worker()
    inp, captured = worker.dataflow(build)
    inp.send_batch([("ann", "cancel"), ("bob", "keep")])
    inp.close()
    worker.run()  # returns once bob's timer fired: nothing else is pending
    assert captured.extract() == [(0, ["bob"])]


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_every_key_is_reported_once_on_several_workers(workers):
    process, report = count_then_report(0.1)
    users = [f"u{i}" for i in range(30)]

    def work(worker):
        def build(scope):
            inp, clicks = scope.new_input()
            return inp, clicks.keyed_process(process, on_processing_timer=report).capture()

        inp, captured = worker.dataflow(build)
        if worker.index == 0:
            inp.send_batch([(u, 1) for u in users for _ in range(3)])
        inp.close()
        worker.run()
        return captured.extract()

    reported = [r for per in pt.execute(work, workers=workers) for _t, b in per for r in b]
    assert sorted(reported) == sorted((u, 3) for u in users)


def test_pending_timers_survive_a_snapshot_and_a_restore_on_other_workers():
    process, report = count_then_report(0.5)

    def build(scope):
        inp, clicks = scope.new_input()
        out = clicks.keyed_process(process, on_processing_timer=report, name="Reporter")
        return inp, out.capture(), out.probe()

    def first(worker):
        registry = StateRegistry()
        with registry.building():
            inp, _captured, probe = worker.dataflow(build)
        if worker.index == 0:
            inp.send_batch([("ann", 1), ("bob", 1), ("ann", 1)])
        inp.advance_to(3)
        worker.step_while(lambda: probe.less_than(3), timeout=10)
        return registry.snapshot()

    snapshot = [r for records in pt.execute(first, workers=2) for r in records]
    assert {op.split("@")[0] for op, _k, _b in snapshot} == {"Reporter"}

    def restored(worker):
        registry = StateRegistry(partition(snapshot, worker.index, worker.peers))
        with registry.building():
            inp, captured, _probe = worker.dataflow(build)
        inp.advance_to(3)
        inp.close()
        worker.run()
        return captured.extract()

    started = time.monotonic()
    reported = [r for per in pt.execute(restored, workers=3) for _t, b in per for r in b]
    assert sorted(reported) == [("ann", 2), ("bob", 1)]
    assert time.monotonic() - started < 10
