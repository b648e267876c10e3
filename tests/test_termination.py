"""Global quiescence detection on its own: a verdict only when every worker stayed idle with
nothing in flight across two consecutive rounds, and always then."""

from __future__ import annotations

import time

import pytest

from pytimely.communication.allocator import Allocator
from pytimely.termination import QuiescenceDetector, Status

pytestmark = pytest.mark.timeout(60)


class FakeMesh:
    """Control queues between in-memory workers, delivered at once."""

    def __init__(self, peers):
        self.queues = {w: [] for w in range(peers)}
        self.gone = {}


class FakeAllocator(Allocator):
    def __init__(self, mesh, index, peers):
        self.mesh, self.index, self.peers = mesh, index, peers

    def send_control(self, target, message):
        self.mesh.queues[target].append((self.index, message))

    def control_messages(self):
        out, self.mesh.queues[self.index] = self.mesh.queues[self.index], []
        return out

    def farewells(self):
        return dict(self.mesh.gone)

    send = broadcast = flush = receive = await_events = wake = close = None  # unused


class FakeWorker:
    def __init__(self, mesh, index, peers):
        self.index, self.peers = index, peers
        self.idle, self.epoch = True, 0
        self.sent, self.received = [0] * peers, [0] * peers
        self.detector = QuiescenceDetector(FakeAllocator(mesh, index, peers), stuck_after=0.04)

    def status(self):
        return Status(
            self.index,
            self.idle,
            self.epoch,
            list(self.sent),
            list(self.received),
            ["D"],
            "pointstamps",
            f"held by {self.index}",
        )


def run(workers, seconds, tick=None):
    """Tend every idle worker until a verdict or ``seconds`` pass; returns the verdicts."""
    deadline = time.monotonic() + seconds
    verdicts = {}
    while time.monotonic() < deadline and len(verdicts) < len(workers):
        if tick is not None:
            tick()
        for w in workers:
            if w.idle and w.index not in verdicts:
                verdict = w.detector.tend(w.status)
                if verdict is not None:
                    verdicts[w.index] = verdict
        time.sleep(0.005)
    return verdicts


def mesh_of(n):
    mesh = FakeMesh(n)
    return mesh, [FakeWorker(mesh, i, n) for i in range(n)]


def test_all_idle_and_balanced_is_stuck_on_every_worker():
    _mesh, workers = mesh_of(3)
    workers[0].sent[1] = workers[1].received[0] = 5
    verdicts = run(workers, 5)
    assert sorted(verdicts) == [0, 1, 2]
    message = verdicts[1].message
    assert verdicts[1].kind == "stuck"
    assert all(f"worker {i} holds:\n  held by {i}" in message for i in range(3))


def test_a_message_in_flight_is_never_stuck():
    _mesh, workers = mesh_of(2)
    workers[0].sent[1] = 1  # worker 1 has not taken delivery of it
    assert run(workers, 0.5) == {}


def test_a_busy_worker_is_never_stuck():
    _mesh, workers = mesh_of(2)
    workers[1].idle = False  # in user code or stepping: it never answers
    assert run(workers, 0.5) == {}


def test_a_worker_active_between_rounds_postpones_the_verdict():
    """Two snapshots that each look quiescent, with activity in between, are not enough."""
    _mesh, workers = mesh_of(2)
    start = time.monotonic()

    def churn():  # worker 1 keeps doing (balanced) work for 0.4 s
        if time.monotonic() - start < 0.4:
            workers[1].epoch += 1

    verdicts = run(workers, 5, churn)
    assert sorted(verdicts) == [0, 1]
    assert time.monotonic() - start >= 0.4


def test_different_numbers_of_dataflows_are_a_graph_verdict():
    _mesh, workers = mesh_of(2)
    workers[1].status = lambda: Status(1, True, 0, [0, 0], [0, 0], [], "", "")
    verdicts = run(workers, 5)
    assert verdicts[0].kind == "graph"
    assert "worker 1 never built dataflow 0 ('D')" in verdicts[0].message


def test_a_departed_worker_counts_as_idle_with_its_final_counts():
    mesh, workers = mesh_of(3)
    mesh.gone[0] = {"sent": [0, 2, 0], "received": [0, 0, 0], "note": {"dataflows": ["D"]}}
    live = workers[1:]
    workers[1].received[0] = 1  # one of worker 0's last two messages is still in flight
    assert run(live, 0.5) == {}
    workers[1].received[0] = 2
    verdicts = run(live, 5)
    assert sorted(verdicts) == [1, 2]  # worker 1 coordinates now
    assert "worker 0: finished" in verdicts[2].message
