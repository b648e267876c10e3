"""``Stream.map_async``: concurrency against a slow fake service, order and exactly-once on 1
and 2 workers, results at their records' times with the frontier held back while calls are
outstanding, bounded in-flight calls, errors that name the operator and the record, and a
worker that parks (no busy loop) while it waits."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from typing import Any

import pytest

import pytimely as pt
from pytimely.errors import OperatorError, WorkerFailure

pytestmark = pytest.mark.timeout(60)

LOOP_THREAD = "pytimely-async"


def loop_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(LOOP_THREAD)]


@pytest.fixture(autouse=True)
def no_loop_thread_leaks():
    """Every test leaves no event loop thread behind: they are joined when the operators that
    use them finish or fail.  (A test that fails mid-run abandons its worker, whose loop lives
    on until the worker is collected: not this fixture's error to report again.)"""
    before = set(loop_threads())
    yield
    left = [t for t in loop_threads() if t not in before]
    assert not left, f"event loop threads left running: {left}"


class FakeService:
    """A slow service: each call sleeps ``delay(x)`` seconds and returns ``x * 2``; counts the
    calls per record and the calls running at once (only touched on the loop's thread)."""

    def __init__(self, delay=lambda x: 0.05) -> None:
        self.delay = delay
        self.calls: Counter = Counter()
        self.running = 0
        self.peak = 0
        self.lock = threading.Lock()  # the test reads ``outstanding`` from the worker thread
        self.outstanding: Counter = Counter()

    async def call(self, x: Any) -> Any:
        self.calls[x] += 1
        self.running += 1
        self.peak = max(self.peak, self.running)
        with self.lock:
            self.outstanding[x] += 1
        try:
            await asyncio.sleep(self.delay(x))
        finally:
            self.running -= 1
            with self.lock:
                self.outstanding[x] -= 1
                if not self.outstanding[x]:
                    del self.outstanding[x]
        return x * 2 if isinstance(x, int) else (x, "done")


# --------------------------------------------------------------------------------------------
# concurrency


def test_map_async_runs_calls_concurrently_at_least_20x_a_blocking_map():
    """400 calls of 50 ms each with 100 in flight against a blocking ``map`` sleeping 50 ms
    per record (timed on 20 records, extrapolated per record).

    Not noise-sensitive: both sides are dominated by sleeps, not by CPU.  The blocking map
    cannot beat 50 ms a record; the async one needs 4 rounds of 50 ms for 400 records (0.5 ms
    a record) plus the operator's own overhead (tens of microseconds a record), so it
    measures near 100x; the 20x bound would fail only if the machine lost ~2 ms a record,
    40 times what it costs."""
    service = FakeService()

    started = time.perf_counter()
    out = pt.example(
        lambda s: s.to_stream(range(400)).map_async(service.call, max_in_flight=100).capture()
    )
    async_per_record = (time.perf_counter() - started) / 400
    assert out.extract() == [(0, [x * 2 for x in range(400)])]
    assert service.peak == 100

    def blocking(x):
        time.sleep(0.05)
        return x * 2

    started = time.perf_counter()
    pt.example(lambda s: s.to_stream(range(20)).map(blocking).capture())
    blocking_per_record = (time.perf_counter() - started) / 20

    speedup = blocking_per_record / async_per_record
    assert speedup >= 20, f"map_async only {speedup:.1f}x a blocking map"


# --------------------------------------------------------------------------------------------
# order and exactly once, on 1 and 2 workers


def _order_job(ordered: bool, epochs: int = 4, per_epoch: int = 40):
    """Each worker sends its records ``(epoch, worker, i)`` over several epochs; the service
    answers after a random delay.  Returns what each worker sent (in order), what came out of
    ``map_async`` (in order, with times) and the service's call counts."""

    def work(worker):
        rng = random.Random(worker.index)
        delays = {}
        service = FakeService(lambda x: delays[x])
        sent, seen = [], []

        def build(scope):
            inp, stream = scope.new_input()
            out = stream.map_async(service.call, max_in_flight=16, ordered=ordered)
            out.inspect_time(lambda t, r: seen.append((t, r)))
            return inp, out.probe()

        inp, probe = worker.dataflow(build)
        for epoch in range(epochs):
            for i in range(per_epoch):
                record = (epoch, worker.index, i)
                delays[record] = rng.uniform(0, 0.01)
                sent.append(record)
                inp.send(record)
            inp.advance_to(epoch + 1)
            worker.step()
        inp.close()
        worker.step_while(lambda: not probe.done(), timeout=20)
        return sent, seen, dict(service.calls)

    return work


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
def test_order_and_exactly_once(workers, ordered):
    results = pt.execute(_order_job(ordered), workers=workers, timeout=40)
    for sent, seen, calls in results:
        assert calls == {r: 1 for r in sent}  # every record submitted exactly once
        assert Counter(r for _t, (r, _done) in seen) == Counter(sent)  # emitted exactly once
        assert all(t == r[0] for t, (r, _done) in seen)  # at the record's own time
        if ordered:
            assert [r for _t, (r, _done) in seen] == sent  # in arrival order
    if not ordered:  # random delays: some result overtook an earlier record's
        assert any([r for _t, (r, _d) in seen] != sent for sent, seen, _c in results)


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
def test_unordered_emits_as_calls_finish(ordered):
    delays = {0: 0.3, 1: 0.15, 2: 0.0}
    service = FakeService(lambda x: delays[x])
    seen = []
    pt.example(
        lambda s: (
            s.to_stream([0, 1, 2]).map_async(service.call, ordered=ordered).inspect(seen.append)
        )
    )
    assert seen == ([0, 2, 4] if ordered else [4, 2, 0])


# --------------------------------------------------------------------------------------------
# timestamps and frontiers


def test_results_at_their_times_and_frontier_held_while_calls_are_outstanding():
    rng = random.Random(7)
    delays = {}
    service = FakeService(lambda x: delays[x])
    worker = pt.Worker()

    def build(scope):
        inp, stream = scope.new_input()
        out = stream.map_async(service.call, max_in_flight=8, ordered=False)
        return inp, out.capture(), out.probe()

    inp, captured, probe = worker.dataflow(build)
    checks = held_back = 0

    def check() -> None:
        """No time with a call outstanding is behind the probe's frontier.  (A call that
        finishes after the snapshot still holds its capability: only the worker, which is not
        stepping now, lets it go.)"""
        nonlocal checks, held_back
        with service.lock:
            epochs = {r[0] for r in service.outstanding}
        for epoch in epochs:
            assert probe.less_equal(epoch), (epoch, probe)
        checks += 1
        held_back += bool(epochs)

    for epoch in range(6):
        for i in range(12):
            record = (epoch, i)
            delays[record] = rng.uniform(0, 0.02)
            inp.send(record)
        inp.advance_to(epoch + 1)
        worker.step()
        check()
    inp.close()
    deadline = time.monotonic() + 20
    while not probe.done():
        assert time.monotonic() < deadline
        worker.step_or_park(0.05)
        check()
    assert held_back >= 3, f"only {held_back} of {checks} checks saw an outstanding call"
    by_time = dict(captured.extract())
    assert sorted(by_time) == list(range(6))
    for epoch, results in by_time.items():
        assert sorted(results) == [((epoch, i), "done") for i in range(12)]


def test_probe_waits_for_the_slowest_call_of_an_epoch():
    """Epoch 0 has one slow call: the frontier stays at 0 until it is done, although every
    call of epoch 1 finished long before."""
    service = FakeService(lambda x: 0.4 if x == (0, "slow") else 0.0)
    worker = pt.Worker()

    def build(scope):
        inp, stream = scope.new_input()
        return inp, stream.map_async(service.call, ordered=False).probe()

    inp, probe = worker.dataflow(build)
    inp.send((0, "slow"))
    inp.advance_to(1)
    inp.send((1, "fast"))
    inp.advance_to(2)
    worker.step_while(lambda: service.calls[(1, "fast")] == 0 or service.outstanding[(1, "fast")])
    started = time.monotonic()
    worker.step_while(lambda: probe.less_than(1), timeout=10)
    assert service.calls[(0, "slow")] == 1 and not service.outstanding
    assert time.monotonic() - started > 0.2  # it waited for the slow call
    worker.step_while(lambda: probe.less_than(2), timeout=10)
    inp.close()
    worker.run()


def test_in_an_iterative_scope():
    """Partially ordered (``Product``) times: a countdown loop through ``map_async``."""
    service = FakeService(lambda x: 0.001)

    async def minus_one(x):
        return await service.call(x) // 2 - 1

    def build(scope):
        starts = scope.to_stream([3, 5])

        def body(loop):
            handle, looped = loop.feedback(1)
            counted = starts.enter(loop).concat(looped)
            after = counted.map_async(minus_one)
            after.filter(lambda x: x > 0).connect_loop(handle)
            return counted.leave().capture()

        return scope.iterative(body)

    assert pt.example(build).extract() == [(0, [1, 1, 2, 2, 3, 3, 4, 5])]


# --------------------------------------------------------------------------------------------
# backpressure


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
def test_calls_in_flight_never_exceed_max_in_flight(ordered):
    service = FakeService(lambda x: random.uniform(0, 0.005))
    seen = []
    pt.example(
        lambda s: (
            s.to_stream(range(300))
            .map_async(service.call, max_in_flight=7, ordered=ordered)
            .inspect(seen.append)
        )
    )
    assert service.peak == 7
    assert sorted(seen) == [2 * x for x in range(300)]


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
def test_a_slow_head_bounds_what_ordered_takes_in(ordered):
    """With ``ordered`` a finished result waiting behind the slow first call still counts
    against ``max_in_flight``: no more than that many records are taken meanwhile (the rest
    stay queued in the input).  Unordered, the other calls keep flowing."""
    started_before_head = []
    head_done = threading.Event()

    async def call(x):
        if not head_done.is_set():
            started_before_head.append(x)
        if x == 0:
            await asyncio.sleep(0.3)
            head_done.set()
        return x

    seen = []
    pt.example(
        lambda s: (
            s.to_stream(range(100))
            .map_async(call, max_in_flight=5, ordered=ordered)
            .inspect(seen.append)
        )
    )
    assert sorted(seen) == list(range(100))
    if ordered:
        assert len(started_before_head) == 5 and seen == list(range(100))
    else:
        assert len(started_before_head) == 100 and seen[-1] == 0


# --------------------------------------------------------------------------------------------
# errors


def test_an_exception_names_the_operator_the_function_and_the_record():
    async def lookup(x):
        await asyncio.sleep(0.001 * x)
        if x == 3:
            raise ValueError("no such user")
        return x

    with pytest.raises(OperatorError) as info:
        pt.example(lambda s: s.to_stream(range(10)).map_async(lookup, name="Lookup").capture())
    message = str(info.value)
    assert message.startswith("map_async 'Lookup': function lookup @ test_map_async.py:")
    assert message.endswith("raised ValueError: no such user on record 3 at time 0")
    assert info.value.operator == "Lookup"
    assert isinstance(info.value.__cause__, ValueError)


def test_a_timeout_names_the_operator_and_the_record():
    async def hang(record):
        await asyncio.sleep(0 if record["id"] < 2 else 10)
        return record

    started = time.monotonic()
    with pytest.raises(OperatorError) as info:
        pt.example(
            lambda s: (
                s.to_stream([{"id": i, "pad": "x" * 500} for i in range(3)])
                .map_async(hang, timeout=0.1)
                .capture()
            )
        )
    assert time.monotonic() - started < 5
    message = str(info.value)
    assert message.startswith("map_async 'MapAsync(hang @ test_map_async.py:")
    assert "function hang @ test_map_async.py:" in message
    assert "timed out after 0.1 s on record {'id': 2, 'pad': 'xxx" in message
    assert "...' at time 0" not in message and "... at time 0" in message  # the repr is cut
    assert len(message) < 400


def test_a_function_that_is_not_async_is_an_error():
    with pytest.raises(OperatorError, match="returned int, not an awaitable"):
        pt.example(lambda s: s.to_stream([1]).map_async(lambda x: x + 1).capture())


def test_bad_arguments():
    async def f(x):
        return x

    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="max_in_flight"):
            pt.example(lambda s: s.to_stream([1]).map_async(f, max_in_flight=bad))
    with pytest.raises(ValueError, match="timeout"):
        pt.example(lambda s: s.to_stream([1]).map_async(f, timeout=0))


def test_an_error_on_one_of_two_workers_fails_the_run():
    async def lookup(x):
        if x == 5:
            raise KeyError(x)
        return x

    def work(worker):
        def build(scope):
            inp, stream = scope.new_input()
            stream.map_async(lookup, name="Lookup").capture()
            return inp

        inp = worker.dataflow(build)
        for x in range(worker.index, 10, worker.peers):
            inp.send(x)

    with pytest.raises(WorkerFailure) as info:
        pt.execute(work, workers=2, timeout=40)
    message = str(info.value)
    assert "map_async 'Lookup': function lookup @ test_map_async.py:" in message
    assert "raised KeyError: 5 on record 5 at time 0" in message


# --------------------------------------------------------------------------------------------
# threads and parking


def test_the_worker_parks_while_calls_run():
    """Half a second of waiting for a call costs the worker a few steps and little CPU."""

    async def slow(x):
        await asyncio.sleep(0.5)
        return x

    worker = pt.Worker()
    inp, probe = worker.dataflow(
        lambda s: (lambda i, st: (i, st.map_async(slow).probe()))(*s.new_input())
    )
    inp.send(1)
    inp.close()
    steps, parks = worker.steps, worker.parks
    cpu, wall = time.process_time(), time.monotonic()
    worker.run()
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    assert wall >= 0.45
    assert worker.parks > parks
    assert worker.steps - steps < 20
    assert cpu < 0.2, f"{cpu:.3f} s of CPU while waiting {wall:.3f} s"


def test_one_loop_thread_per_worker_shared_and_stopped():
    threads = set()

    async def where(x):
        threads.add(threading.current_thread().name)
        threads.add(len(loop_threads()))
        return x

    def build(scope):
        nums = scope.to_stream(range(5))
        return nums.map_async(where).map_async(where).concat(nums.map_async(where)).capture()

    assert sorted(pt.example(build).extract()[0][1]) == sorted(list(range(5)) * 2)
    assert threads == {"pytimely-async-w0", 1}
    # a later dataflow starts a new one
    assert pt.example(lambda s: s.to_stream([1]).map_async(where).capture()).extract()
    assert not loop_threads()


def test_a_dataflow_without_records_starts_no_loop():
    async def never(x):
        raise AssertionError("not called")

    assert pt.example(lambda s: s.to_stream([]).map_async(never).capture()).extract() == []
