"""Flow control (:mod:`pytimely.communication.flow`): a slow consumer slows its producers, a loop
across workers under a tiny bound still completes, and a sender waiting on a dead peer fails."""

from __future__ import annotations

import os
import pickle
import signal
import time

import pytest

import pytimely as pt
from pytimely.communication.flow import MAX_IN_FLIGHT, MAX_IN_FLIGHT_ENV, FlowLedger
from pytimely.errors import CommunicationError, WorkerFailure

# --- the ledger -------------------------------------------------------------------------------


def test_ledger_counts_backlog_and_acknowledges_every_quarter_bound():
    sender, receiver = FlowLedger(2, max_in_flight=100), FlowLedger(2, max_in_flight=100)
    sender.sent(1, 60)
    assert (sender.backlog(1), sender.over_bound(1)) == (60, False)
    sender.sent(1, 60)
    assert (sender.backlog(1), sender.over_bound(1)) == (120, True)
    receiver.consumed(0, 20)
    assert receiver.acknowledgements_due() == []  # under a quarter of the bound: not yet
    receiver.consumed(0, 10)
    assert receiver.acknowledgements_due() == [(0, 30)]  # a running total...
    assert receiver.acknowledgements_due() == []  # ...sent once
    sender.acknowledged(1, 30)
    sender.acknowledged(1, 25)  # a stale total never raises the backlog again
    assert (sender.backlog(1), sender.over_bound(1)) == (90, False)
    assert sender.statistics()["peak_backlog"] == [0, 120]


def test_bound_defaults_to_64_mb_and_the_environment_overrides_it(monkeypatch):
    monkeypatch.delenv(MAX_IN_FLIGHT_ENV, raising=False)
    assert FlowLedger(2).max_in_flight == MAX_IN_FLIGHT == 64 << 20
    monkeypatch.setenv(MAX_IN_FLIGHT_ENV, "4096")
    assert FlowLedger(2).max_in_flight == 4096
    monkeypatch.setenv(MAX_IN_FLIGHT_ENV, "lots")
    with pytest.raises(ValueError, match=MAX_IN_FLIGHT_ENV):
        FlowLedger(2)
    with pytest.raises(ValueError, match="positive"):
        pt.Worker(max_in_flight=0)


# --- across processes -------------------------------------------------------------------------

TINY = 2048  # bytes in flight per peer: a few batches


def _collatz_steps(n):
    steps = 0
    while n > 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def _collatz_under_a_tiny_bound(worker):
    """Collatz sequences in a loop whose every trip exchanges by value across the workers."""
    results = []

    def build(scope):
        handle, starts = scope.new_input()

        def body(inner):
            back, looped = inner.feedback(1)
            values = (
                starts.exchange(lambda n: n // 7)
                .enter(inner)
                .map(lambda n: (n, n, 0))
                .concat(looped)
            )
            done, going = values.branch(lambda t, p: p[1] > 1)
            going.map(
                lambda p: (p[0], p[1] // 2 if p[1] % 2 == 0 else 3 * p[1] + 1, p[2] + 1)
            ).exchange(lambda p: p[1]).connect_loop(back)
            return done.leave()

        scope.iterative(body, name="Collatz").inspect(lambda p: results.append((p[0], p[2])))
        return handle

    handle = worker.dataflow(build)
    mine = list(range(1 + worker.index, 4001, worker.peers))
    for i in range(0, len(mine), 50):
        handle.send_batch(mine[i : i + 50])
    handle.close()
    worker.run()
    return {
        "results": results,
        "waits": worker.flow_waits,
        "flow": worker.allocator.flow_statistics(),
    }


def test_a_loop_across_two_workers_completes_under_a_tiny_bound():
    """Only inputs wait; the loop's operators send regardless and both workers keep stepping,
    so the iteration finishes, with every answer right, although the bound was hit."""
    out = pt.execute(_collatz_under_a_tiny_bound, workers=2, timeout=60, max_in_flight=TINY)
    results = sorted(r for worker in out for r in worker["results"])
    assert results == [(n, _collatz_steps(n)) for n in range(1, 4001)]
    assert all(worker["flow"]["max_in_flight"] == TINY for worker in out)
    assert sum(worker["waits"] for worker in out) > 0  # the bound really was in force
    assert all(worker["flow"]["acks_received"] > 0 for worker in out)


BATCH = 200
BATCHES = 300


def _slow_consumer(worker):
    """Worker 0 sends as fast as it can; worker 1 consumes slowly (it sleeps per batch)."""
    seen = [0]

    def build(scope):
        handle, numbers = scope.new_input()

        def consume(batch):
            time.sleep(0.0005)
            seen[0] += len(batch)

        numbers.exchange(lambda n: 1).inspect_batch(lambda t, batch: consume(batch))
        return handle

    handle = worker.dataflow(build)
    if worker.index == 0:
        for i in range(BATCHES):
            handle.send_batch(list(range(i * BATCH, (i + 1) * BATCH)))
    handle.close()
    worker.run()
    return {"seen": seen[0], "waits": worker.flow_waits, "flow": worker.allocator.flow_statistics()}


def test_a_slow_consumer_keeps_its_producers_backlog_under_the_bound():
    producer, consumer = pt.execute(_slow_consumer, workers=2, timeout=60, max_in_flight=TINY * 4)
    assert consumer["seen"] == BATCH * BATCHES
    flow = producer["flow"]
    one_batch = max(flow["sent_bytes"][1] // BATCHES, 1) * 2  # a batch (and its progress)
    assert flow["sent_bytes"][1] > 10 * flow["max_in_flight"]  # far more than the bound went
    assert flow["peak_backlog"][1] <= flow["max_in_flight"] + one_batch  # ...yet it held
    assert producer["waits"] > 0
    assert consumer["flow"]["acks_sent"] >= flow["sent_bytes"][1] // flow["max_in_flight"]


def _blocked_on_a_dead_peer(worker):
    def build(scope):
        handle, numbers = scope.new_input()
        numbers.exchange(lambda n: 1).inspect(lambda n: None)
        return handle

    handle = worker.dataflow(build)
    if worker.index == 1:  # never steps, so never acknowledges; then dies
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)
    while True:  # sends for ever: only flow control can stop it
        handle.send_batch(list(range(1000)))


def test_a_sender_waiting_on_a_dead_peer_gets_worker_failure():
    started = time.monotonic()
    with pytest.raises(WorkerFailure) as info:
        pt.execute(_blocked_on_a_dead_peer, workers=2, timeout=30, max_in_flight=TINY)
    assert time.monotonic() - started < 20
    assert info.value.worker == 1
    assert "WorkerFailure" in info.value.outcomes[0] and "worker 1" in info.value.outcomes[0]


class _OneEventPerPoll:
    """A capture reader with ``BATCHES`` batches at time 0, one per ``poll``."""

    def __init__(self):
        from pytimely.capture import Messages, Progress

        self.events = [Messages(0, list(range(i * BATCH, (i + 1) * BATCH))) for i in range(BATCHES)]
        self.events.append(Progress([(0, -1)]))
        self.done = False

    def poll(self):
        if not self.events:
            self.done = True
            return []
        return [self.events.pop(0)]


def _slow_replay(worker):
    """Worker 0 replays a capture as fast as it polls; worker 1 consumes slowly."""
    from pytimely.capture import replay_into

    seen = [0]

    def consume(batch):
        time.sleep(0.0005)
        seen[0] += len(batch)

    def build(scope):
        readers = [_OneEventPerPoll()] if worker.index == 0 else []
        replay_into(readers, scope, period=0.0001).exchange(lambda n: 1).inspect_batch(
            lambda t, batch: consume(batch)
        )

    worker.dataflow(build)
    worker.run()
    return {"seen": seen[0], "flow": worker.allocator.flow_statistics()}


def test_replay_holds_back_while_a_peer_is_congested():
    producer, consumer = pt.execute(_slow_replay, workers=2, timeout=60, max_in_flight=TINY * 4)
    assert consumer["seen"] == BATCH * BATCHES
    flow = producer["flow"]
    one_batch = max(flow["sent_bytes"][1] // BATCHES, 1) * 2
    assert flow["sent_bytes"][1] > 10 * flow["max_in_flight"]
    assert flow["peak_backlog"][1] <= flow["max_in_flight"] + one_batch


def _peer_busy_in_user_code(allocator):
    worker = pt.Worker(allocator, max_in_flight=TINY, flow_timeout=1.0)

    def build(scope):
        handle, numbers = scope.new_input()
        numbers.exchange(lambda n: 1).inspect(lambda n: None)
        return handle

    handle = worker.dataflow(build)
    if worker.index == 1:  # alive (it heartbeats) but not stepping, so not consuming
        time.sleep(4.0)
        return None
    try:
        for _ in range(1000):
            handle.send_batch(list(range(1000)))
    except CommunicationError as exc:
        return str(exc)
    return "never waited"


def test_a_peer_that_never_drains_is_named_after_the_flow_timeout():
    from pytimely.communication import run_processes

    message, _ = run_processes(_peer_busy_in_user_code, 2, timeout=30)
    assert message.startswith("input 'Input' on worker 0: worker 1 acknowledged none of the")
    assert "for 1 s" in message and f"bound {TINY} bytes" in message


# --- what one step decodes ----------------------------------------------------------------------


def _is_batch(payload: object) -> bool:
    """A data message ``(time, records)`` of the exchange (not a progress batch)."""
    return isinstance(payload, tuple) and len(payload) == 2 and isinstance(payload[1], list)


def _receive_sizes_work(batches: int, size: int):
    """Worker 0 sends ``batches`` batches of ``size`` ints to worker 1 before worker 1 steps;
    each worker returns (records it counted, data messages per ``receive()`` call)."""

    def work(worker: pt.Worker) -> tuple[int, list[int]]:
        allocator = worker.allocator
        taken: list[int] = []
        receive = allocator.receive

        def counting_receive():
            got = receive()
            taken.append(sum(1 for _c, source, p in got if source != worker.index and _is_batch(p)))
            return got

        allocator.receive = counting_receive  # observe what each step decodes
        seen = [0]

        def build(scope):
            inp, stream = scope.new_input()
            counted = stream.exchange(lambda x: 1).inspect_batch(
                lambda t, b: seen.__setitem__(0, seen[0] + len(b))
            )
            return inp, counted.probe()

        inp, probe = worker.dataflow(build)
        if worker.index == 0:
            for _ in range(batches):
                inp.send_batch(list(range(size)))
                inp.flush()
                worker.step()
        else:
            time.sleep(1.0)  # let everything arrive before the first receive
        inp.advance_to(1)
        worker.step_while(lambda: probe.less_than(1), timeout=60)
        inp.close()
        return seen[0], [n for n in taken if n]

    return work


@pytest.mark.timeout(90)
def test_a_step_decodes_a_bounded_slice_of_what_arrived(monkeypatch):
    from pytimely.communication import tcp

    # 40 batches against a budget of about six of them: several steps, nothing lost.
    size = len(pickle.dumps((0, list(range(10_000))), protocol=5))
    monkeypatch.setattr(tcp, "RECEIVE_BUDGET", 6 * size)  # inherited by the forked workers
    (_, _), (records, taken) = pt.execute(_receive_sizes_work(40, 10_000), workers=2, timeout=60)
    assert records == 40 * 10_000
    assert sum(taken) == 40 and len(taken) >= 6 and max(taken) <= 7, taken
