"""The internal interfaces between the dataflow layer, its scopes and the worker.

The scope–child contract (``Operate``), the progress exchange owning both ends of its channel,
the tracker's drain methods, the worker services, and the named operator fast paths
(``OutputPort.forward``, ``InputPort.frontier_elements``, ``OperatorBuilder.raw``,
``InputHandle.on_close``).
"""

from __future__ import annotations

import inspect

import pytest

import pytimely as pt
from pytimely.dataflow.operator import OperatorCore
from pytimely.dataflow.operators.generic import OperatorBuilder
from pytimely.dataflow.operators.watermarks import END, watermark_input
from pytimely.progress import Builder
from pytimely.progress.broadcast import Progcaster
from pytimely.progress.operate import Operate
from pytimely.progress.subgraph import Subgraph
from pytimely.worker import Worker, WorkerServices


def _protocol_methods(protocol: type) -> set[str]:
    return {
        name
        for name, value in vars(protocol).items()
        if inspect.isfunction(value) and not name.startswith("_")
    }


@pytest.mark.parametrize("child", [OperatorCore, Subgraph])
def test_operators_and_scopes_implement_every_operate_method(child):
    methods = _protocol_methods(Operate)
    assert {"attach", "bind_frontiers", "initial_internals", "built", "schedule"} <= methods
    missing = {m for m in methods if not callable(getattr(child, m, None))}
    assert not missing, f"{child.__name__} lacks {sorted(missing)}"


def test_worker_implements_worker_services():
    methods = _protocol_methods(WorkerServices)
    assert {
        "allocate_channel",
        "register_data_channel",
        "progcaster",
        "activate_after",
        "track_input",
    } <= methods
    assert all(callable(getattr(Worker, m, None)) for m in methods)


def test_progcaster_receive_queues_and_wakes_its_listener():
    sent = []
    woken = []
    pc = Progcaster(lambda ws, batch: sent.extend((w, batch) for w in ws), others=[1, 2])
    pc.on_receive(lambda: woken.append(True))
    pc.send([(("a", 0), 1)])
    # one call for every other worker; our own batch goes to our inbox, without a wake-up
    assert sent == [(1, [(("a", 0), 1)]), (2, [(("a", 0), 1)])] and not woken
    pc.receive([(("b", 0), -1)])
    assert woken == [True]
    assert pc.recv() == [[(("a", 0), 1)], [(("b", 0), -1)]]
    assert pc.recv() == []


def _chain_tracker():
    b = Builder(int)
    b.add_node(0, 0, 0, [])
    b.add_node(1, 0, 1, [], "src")
    b.add_node(2, 1, 1, [[[0]]], "op")
    b.add_edge((1, 0), (2, 0))
    return b.build()


def test_tracker_drains_pushed_and_released_once_and_reports_inputs_done():
    t = _chain_tracker()
    assert t.propagate_all() is False  # nothing buffered
    t.update_source(1, 0, 3, 1)
    assert t.propagate_all() is True
    pushed = t.drain_pushed()
    assert {(t.location(loc), time, d) for loc, time, d in pushed} >= {
        (pt.progress.Target(2, 0), 3, 1)
    }
    assert t.drain_pushed() == []
    assert not t.inputs_done(2)
    t.update_source(1, 0, 3, -1)
    t.propagate_all()
    assert t.drain_released() == [1]
    assert t.drain_released() == []
    assert t.inputs_done(2)


def test_forward_sends_at_the_message_time_and_is_counted():
    seen = []

    def ctor(cap, info):
        cap.drop()

        def logic(inp, out):
            for t, batch in inp.drain_batches():
                out.forward(t, [x * 10 for x in batch])
                out.forward(t, [])  # an empty batch is not sent

        return logic

    def build(scope):
        inp, stream = scope.new_input()
        stream.unary(pt.Pipeline, "Times10", ctor).inspect_batch(
            lambda t, b: seen.append((t, list(b)))
        ).probe()
        return inp

    worker = Worker()
    inp = worker.dataflow(build)
    inp.send(1)
    inp.advance_to(1)
    inp.send(2)
    inp.close()
    worker.run()  # completes: every forwarded record was counted and consumed
    assert seen == [(0, [10]), (1, [20])]


def test_frontier_elements_is_the_live_input_frontier():
    shown = []

    def build(scope):
        inp, stream = scope.new_input()

        def logic(port):
            for _ in port.drain_batches():
                pass
            shown.append(list(port.frontier_elements()))

        stream.sink(pt.Pipeline, "Watch", logic)
        return inp

    worker = Worker()
    inp = worker.dataflow(build)
    worker.step()
    inp.advance_to(5)
    worker.step()
    inp.close()
    worker.run()
    assert shown[0] == [0] and [5] in shown and shown[-1] == []


def test_raw_operator_is_installed_and_runs_its_logic():
    runs = []

    def build(scope):
        core = OperatorBuilder.raw(scope, "Raw")
        (cap,) = core.mint_initial()
        port = core.output_ports[0]

        def logic():
            runs.append(core.invocations)
            if cap.valid:
                port.forward(cap.time, ["x"])
                cap.drop()

        core.set_logic(logic)
        out = []
        stream = pt.dataflow.Stream(scope, (core.index, 0), port.tee)
        stream.inspect(out.append)
        return out

    worker = Worker()
    out = worker.dataflow(build)
    worker.run()
    assert out == ["x"] and runs


def test_on_close_runs_before_the_capability_is_released_even_when_the_worker_closes():
    events = []

    def fn(worker):
        def build(scope):
            inp, stream = scope.new_input()
            stream.inspect_time(lambda t, x: events.append((t, x)))
            return inp

        inp = worker.dataflow(build)

        def last_words():
            inp.advance_to(7)
            inp.send("bye")  # still open: allowed

        inp.on_close(last_words)
        inp.send("hi")
        return events  # execute closes the input (no explicit close here)

    (got,) = pt.execute(fn, timeout=30)
    assert got == [(0, "hi"), (7, "bye")]


def test_watermark_input_left_open_still_sends_end_when_the_worker_closes_it():
    def fn(worker):
        def build(scope):
            wi, ws = watermark_input(scope)
            return wi, ws.probe()

        wi, probe = worker.dataflow(build)
        wi.send(1)
        wi.advance_to(3)
        return probe

    (probe,) = pt.execute(fn, timeout=30)
    assert probe.watermark == END
