"""The clock of an observed operator: the compiled and the pure-Python one behave alike."""

from __future__ import annotations

import time

import pytest

import pytimely as pt
from pytimely import _native
from pytimely.dataflow.invocation import InvocationClock, invocation_clock
from pytimely.eventlog import MessagesEvent, ScheduleEvent

pytestmark = pytest.mark.timeout(60)

CLOCKS = [InvocationClock]
if _native.speedups is not None:
    CLOCKS.append(_native.speedups.InvocationClock)


class Port:
    """An output port's running counts, as a CountingOutputPort keeps them."""

    __slots__ = ("records", "batches")

    def __init__(self) -> None:
        self.records = 0
        self.batches = 0

    def send(self, n: int) -> None:
        self.records += n
        self.batches += 1


@pytest.mark.parametrize("make", CLOCKS, ids=lambda c: c.__module__)
def test_a_clock_times_invocations_and_logs_them_with_what_each_output_sent(make):
    a, b = Port(), Port()
    a.send(100)  # before logging: not reported
    clock = make(2)
    clock.start()
    assert clock.stop() is None  # not logging: timed only
    assert clock.total >= clock.longest >= 0.0

    schedules, sent, capabilities = [], [], ({}, {})
    clock.log_to(schedules, 7, capabilities, sent, (a, b), (("a1", "a2"), ()))
    before = time.perf_counter()
    clock.start()
    a.send(3)
    a.send(2)
    b.send(9)  # b feeds no edge (yet)
    assert clock.stop() is None
    after = time.perf_counter()
    assert schedules[0] == 7 and before <= schedules[1] <= schedules[1] + schedules[2] <= after
    assert sent == ["a1", 5, 2, "a2", 5, 2]

    clock.log_edges(1, ("b1",))
    schedules.clear(), sent.clear()
    clock.start()  # an invocation that sends nothing logs no message
    assert clock.stop() is None
    assert len(schedules) == 3 and sent == []

    b.send(1)
    capabilities[0]["t"] = 1  # the invocation changed capabilities: its stop time comes back
    clock.start()
    stopped = clock.stop()
    assert sent == ["b1", 1, 1]
    assert stopped == pytest.approx(schedules[-2] + schedules[-1])
    longest = clock.longest
    assert clock.total >= longest > 0.0

    clock.log_to(None)  # stop logging; timing goes on
    schedules.clear()
    clock.start()
    assert clock.stop() is None and schedules == []


@pytest.mark.parametrize("make", CLOCKS, ids=lambda c: c.__module__)
def test_a_clock_rejects_edges_that_do_not_match_its_outputs(make):
    clock = make(1)
    with pytest.raises(TypeError):
        clock.log_to([], 0, ({},), [], (Port(), Port()), ((), ()))
    with pytest.raises(TypeError):
        clock.log_to([], 0, ({},), [], (Port(),), ())


def test_the_compiled_clock_reads_the_clock_of_time_perf_counter():
    if _native.speedups is None:
        pytest.skip("the compiled extension is switched off")
    clock = invocation_clock(0)
    assert type(clock) is _native.speedups.InvocationClock
    schedules = []
    clock.log_to(schedules, 0, (), [], (), ())
    before = time.perf_counter()
    clock.start()
    clock.stop()
    after = time.perf_counter()
    assert before <= schedules[1] <= after


def test_an_operators_edge_is_logged_once_per_invocation_that_sent_on_it():
    worker = pt.Worker()
    events = []
    worker.log_to(events.extend)

    def build(scope):
        inp, stream = scope.new_input()
        return inp, stream.map(lambda x: x * 2).probe()

    inp, probe = worker.dataflow(build)
    for r in range(3):
        inp.send_batch([r, r + 1])
        inp.advance_to(r + 1)
        worker.step_while(lambda: probe.less_than(inp.time), timeout=20)
    map_edge = ((0,), 1)  # the edge out of the map (edge 0 leaves the input)
    on_map_edge = [e for e in events if isinstance(e, MessagesEvent) and e.channel == map_edge]
    assert [(e.records, e.batches) for e in on_map_edge] == [(2, 1)] * 3
    assert all(e.is_send and e.source == e.target == 0 and e.bytes == 0 for e in on_map_edge)
    (map_op,) = [e.id for e in events if getattr(e, "name", "").startswith("Map")]
    map_runs = [e for e in events if isinstance(e, ScheduleEvent) and e.id == map_op]
    assert len(map_runs) >= 3
    assert all(m.time >= max(r.stop for r in map_runs[: i + 1]) for i, m in enumerate(on_map_edge))


def _logged_run() -> tuple[list[tuple[str, int]], dict]:
    """A small dataflow run with every event logged: the (kind, count) of its events and its
    operator statistics without the timings."""
    worker = pt.Worker()
    events = []
    worker.log_to(events.extend)

    def build(scope):
        inp, stream = scope.new_input()
        counted = stream.map(lambda x: (x % 3, 1)).aggregate(lambda k, v, a: a + v, lambda k, a: a)
        return inp, counted.probe()

    inp, probe = worker.dataflow(build)
    for r in range(4):
        inp.send_batch(list(range(r * 10, r * 10 + 10)))
        inp.advance_to(r + 1)
        worker.step_while(lambda: probe.less_than(inp.time), timeout=20)
    kinds = sorted({type(e).__name__ for e in events})
    messages = sorted(
        (str(e.channel), e.records, e.batches) for e in events if isinstance(e, MessagesEvent)
    )
    stats = {
        op["name"]: (op["invocations"], op["records_in"], op["records_out"])
        for op in worker.statistics()["operators"]
    }
    return [(k, sum(type(e).__name__ == k for e in events)) for k in kinds], {
        "messages": messages,
        "stats": stats,
    }


def test_without_the_extension_operators_log_the_same_events(monkeypatch):
    if _native.speedups is None:
        pytest.skip("the compiled extension is switched off: one path only")
    compiled = _logged_run()
    monkeypatch.setattr(_native, "speedups", None)
    pure = _logged_run()
    assert pure == compiled
    assert dict(compiled[0])["MessagesEvent"] >= 8  # map and aggregate edges, four rounds
