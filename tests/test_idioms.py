"""Coordination idioms built on timestamp tokens: Naiad-style notifications (``notify.py``),
Flink-style watermarks (``watermarks.py``) and the paper's tumbling-window average
(``window.py``)."""

from __future__ import annotations

from typing import Any

import pytest

import pytimely as pt
from pytimely.dataflow.operators.watermarks import (
    END,
    EventTimeTimers,
    Markers,
    Watermark,
    WatermarkStats,
    watermark_input,
)
from pytimely.dataflow.operators.windowing.tumbling_average import tumbling_average, window_end


def settle(worker: pt.Worker) -> None:
    """Step a single worker until nothing is active."""
    worker.step()
    while worker._active:
        worker.step()


# ---------------------------------------------------------------------------------------------
# Notificator


def _notify_dataflow(
    requests: dict[int, list[int]],
    re_request: dict[int, int] | None = None,
    per_call: int | None = None,
):
    """One worker; an operator that, for a record ``r`` at time ``t``, requests notifications at
    ``requests[r]`` (times >= t); on delivery of ``t`` it optionally requests ``re_request[t]``.
    Returns (worker, input, log) with log = list of per-invocation delivery lists."""
    worker = pt.Worker()
    log: list[list[int]] = []

    def logic(inp: Any, out: Any, n: pt.Notificator) -> None:
        for ref, batch in inp:
            for r in batch:
                for t in requests[r]:
                    n.notify_at(ref.delayed(t))
        delivered = []
        for cap in n:
            delivered.append(cap.time)
            out.session(cap).give(cap.time)
            if re_request and cap.time in re_request:
                n.notify_at(cap.delayed(re_request[cap.time]))
            cap.drop()
        log.append(delivered)

    def build(scope: Any) -> Any:
        inp, s = scope.new_input()
        out = s.unary_notify(pt.Pipeline, "Notify", (), logic, per_call=per_call)
        return inp, out.capture()

    inp, cap = worker.dataflow(build)
    return worker, inp, log, cap


def test_notifications_in_time_order_once_per_time_after_frontier():
    worker, inp, log, cap = _notify_dataflow({0: [7, 3, 5, 3, 7], 1: [5, 12]})
    inp.send(0)
    inp.advance_to(1)
    inp.send(1)
    settle(worker)
    assert [t for call in log for t in call] == []  # frontier at 1: nothing complete
    inp.advance_to(4)
    settle(worker)
    assert [t for call in log for t in call] == [3]  # 3 < 4 complete; 5 is not
    inp.advance_to(5)
    settle(worker)
    assert [t for call in log for t in call] == [3]  # frontier {5}: 5 may still arrive
    inp.advance_to(10)
    settle(worker)
    assert [t for call in log for t in call] == [3, 5, 7]  # each requested time once
    inp.close()
    worker.run()
    delivered = [t for call in log for t in call]
    assert delivered == [3, 5, 7, 12]
    assert delivered == sorted(set(delivered))
    # Several ready times go out in one invocation, in order.
    assert [5, 7] in log
    assert cap.extract() == [(3, [3]), (5, [5]), (7, [7]), (12, [12])]


def test_notifications_requested_during_iteration_are_delivered_in_it():
    worker, inp, log, _ = _notify_dataflow({0: [2]}, re_request={2: 3, 3: 8})
    inp.send(0)
    inp.advance_to(6)
    settle(worker)
    # 2 is delivered; its re-request 3 is complete too and is delivered in the same loop;
    # 8 is not complete yet.
    assert [2, 3] in log
    assert [t for call in log for t in call] == [2, 3]
    inp.close()
    worker.run()
    assert [t for call in log for t in call] == [2, 3, 8]


def test_notifications_wait_for_every_input_frontier():
    worker = pt.Worker()
    delivered: list[int] = []

    def logic(in1: Any, in2: Any, out: Any, n: pt.Notificator) -> None:
        for inp in (in1, in2):
            for ref, _batch in inp:
                n.notify_at(ref.retain())
        for cap in n:
            delivered.append(cap.time)
            cap.drop()

    def build(scope: Any) -> Any:
        a, sa = scope.new_input()
        b, sb = scope.new_input()
        sa.binary_notify(sb, pt.Pipeline, pt.Pipeline, "Notify2", (), logic)
        return a, b

    a, b = worker.dataflow(build)
    a.advance_to(5)
    a.send("x")
    a.advance_to(20)
    settle(worker)
    assert delivered == []  # input 2 still at 0
    b.advance_to(5)
    settle(worker)
    assert delivered == []  # input 2 at 5: time 5 may still arrive there
    b.advance_to(6)
    settle(worker)
    assert delivered == [5]
    a.close()
    b.close()
    worker.run()


def test_notifications_per_call_one_reproduces_naiad_scheduling():
    worker, inp, log, _cap = _notify_dataflow({0: [1, 2, 3, 4]}, per_call=1)
    inp.send(0)
    inp.advance_to(10)
    settle(worker)
    assert [t for call in log for t in call] == [1, 2, 3, 4]
    assert max(len(call) for call in log) == 1
    inp.close()
    worker.run()


def test_notificator_statistics_and_pending():
    seen: dict[str, Any] = {}

    def build(scope: Any) -> Any:
        i, s = scope.new_input()

        def logic(inp_: Any, out: Any, n: pt.Notificator) -> None:
            got = False
            for ref, _b in inp_:
                got = True
                for t in (4, 4, 6):
                    n.notify_at(ref.delayed(t))
            if got:
                seen["pending"] = n.pending()
                seen["requested"] = n.requested
            for c in n:
                c.drop()
            seen["delivered"] = n.delivered

        s.unary_notify(pt.Pipeline, "N", (), logic)
        return i

    w = pt.Worker()
    i = w.dataflow(build)
    i.send_batch([1])
    settle(w)
    assert seen == {"pending": [4, 6], "requested": 3, "delivered": 0}
    i.close()
    w.run()
    assert seen["delivered"] == 2


# ---------------------------------------------------------------------------------------------
# Watermarks


def test_watermark_chain_forwards_markers_and_data():
    worker = pt.Worker()
    stats = WatermarkStats()
    got: list[Any] = []

    def build(scope: Any) -> Any:
        wi, ws = watermark_input(scope, stats=stats)
        chain = ws.map(lambda x: x * 10).filter(lambda x: x != 20).noop().noop()
        probe = chain.probe()
        chain.data().inspect_batch(lambda t, b: got.extend((t, x) for x in b))
        tprobe = chain.data().probe()
        return wi, probe, tprobe

    wi, probe, tprobe = worker.dataflow(build)
    wi.send_batch([1, 2, 3])
    wi.advance_to(5)
    settle(worker)
    assert probe.watermark == 5
    assert probe.less_than(6) and not probe.less_than(5)
    assert sorted(got) == [(0, 10), (0, 30)]
    # The system frontier is correct too: every operator holds a token at its watermark.
    assert not tprobe.less_than(5) and tprobe.less_than(6)
    wi.send(4)
    wi.advance_to(9)
    settle(worker)
    assert probe.watermark == 9
    assert sorted(got) == [(0, 10), (0, 30), (5, 40)]
    # One worker, all pipelined: each operator received and sent one marker per advance.
    ops = [s for name, s in stats.ops.items() if name != "WatermarkInput" and name != "WProbe"]
    assert len(ops) == 4
    assert all(s.markers_in == 2 and s.markers_out == 2 and s.advances == 2 for s in ops)
    wi.close()
    worker.run()
    assert probe.done() and probe.watermark == END


def test_watermark_operator_invoked_per_advance_even_without_data():
    worker = pt.Worker()
    stats = WatermarkStats()

    def build(scope: Any) -> Any:
        wi, ws = watermark_input(scope, stats=stats)
        ws.noop(name="Idle").noop(name="Idle2").probe()
        return wi

    wi = worker.dataflow(build)
    for t in range(1, 21):
        wi.advance_to(t)
        settle(worker)
    assert stats.ops["Idle"].invocations >= 20
    assert stats.ops["Idle2"].advances == 20
    wi.close()
    worker.run()


def test_watermark_is_min_over_inputs_and_timers_fire():
    worker = pt.Worker()
    fired: list[tuple[int, int]] = []

    def build(scope: Any) -> Any:
        stats = WatermarkStats()
        a, wa = watermark_input(scope, "A", stats)
        b, wb = watermark_input(scope, "B", stats)
        timers = EventTimeTimers()

        def on_data(port: int, batch: Any) -> None:
            for t in batch:
                timers.register(t, port)

        def on_watermark(w: int) -> list[tuple[int, int]]:
            return timers.due(w)

        joined = wa.process2(wb, on_data, on_watermark, name="Join")
        joined.data().inspect_batch(lambda t, batch: fired.extend(batch))
        return a, b, joined.probe()

    a, b, probe = worker.dataflow(build)
    a.send_batch([3, 12])
    b.send_batch([7])
    a.advance_to(10)
    settle(worker)
    assert probe.watermark == 0  # B has not advanced
    b.advance_to(5)
    settle(worker)
    assert probe.watermark == 5 and fired == [(3, 0)]
    b.advance_to(50)
    settle(worker)
    assert probe.watermark == 10 and fired == [(3, 0), (7, 1)]
    a.close()
    b.close()
    worker.run()
    assert fired == [(3, 0), (7, 1), (12, 0)]
    assert probe.done()


def test_assign_watermarks_from_frontier():
    worker = pt.Worker()
    stats = WatermarkStats()

    def build(scope: Any) -> Any:
        inp, s = scope.new_input()
        ws = s.assign_watermarks(stats=stats)
        return inp, ws.noop().probe()

    inp, probe = worker.dataflow(build)
    inp.send(1)
    inp.advance_to(7)
    settle(worker)
    assert probe.watermark == 7
    inp.close()
    worker.run()
    assert probe.done()
    assert stats.ops["AssignWatermarks"].advances == 2


def test_event_time_timers():
    timers = EventTimeTimers()
    for t, x in [(5, "a"), (3, "b"), (5, "c"), (9, "d")]:
        timers.register(t, x)
    assert timers.peek() == 3
    assert timers.due(5) == [(3, "b")]
    assert timers.due(5, inclusive=True) == [(5, "a"), (5, "c")]
    assert len(timers) == 1


def _chain_markers(workers: int, length: int, exchange: bool, advances: int = 5) -> list[Any]:
    def work(worker: pt.Worker) -> Any:
        stats = WatermarkStats()

        def build(scope: Any) -> Any:
            wi, ws = watermark_input(scope, stats=stats)
            for i in range(length):
                ws = ws.noop(key=(lambda x: x) if exchange else None, name=f"Noop{i}")
            return wi, ws.probe(all_workers=True)

        wi, probe = worker.dataflow(build)
        if worker.index == 0:
            wi.send_batch(list(range(100)))
        for t in range(1, advances + 1):
            wi.advance_to(t)
            worker.step_while(lambda t=t: probe.less_than(t))
        wi.close()
        worker.step_while(lambda: not probe.done())
        ops = [s for name, s in stats.ops.items() if name.startswith("Noop")]
        return {
            "markers_in": sum(s.markers_in for s in ops),
            "markers_out": sum(s.markers_out for s in ops),
            "records": probe.records,
        }

    return pt.execute(work, workers=workers)


def test_watermarks_x_marker_counts_grow_with_chain_length_and_workers():
    # One worker: one marker per operator per advance (5 advances + END).
    short = _chain_markers(1, 2, exchange=True)[0]
    long = _chain_markers(1, 6, exchange=True)[0]
    assert short["markers_in"] == 2 * 6 and long["markers_in"] == 6 * 6
    # Two workers, exchanging (watermarks-X): each of the P instances of each operator receives
    # P markers per advance, so the total is L * P * P per advance.
    x2 = _chain_markers(2, 3, exchange=True)
    assert sum(r["markers_in"] for r in x2) == 3 * 2 * 2 * 6
    assert sum(r["records"] for r in x2) == 100
    x4 = _chain_markers(2, 6, exchange=True)
    assert sum(r["markers_in"] for r in x4) == 6 * 2 * 2 * 6
    # Pipelined (watermarks-P): markers never leave their worker, L * P per advance.  (Only the
    # last operator broadcasts, to the all-workers probe.)
    p2 = _chain_markers(2, 3, exchange=False)
    assert sum(r["markers_in"] for r in p2) == 3 * 2 * 6
    assert sum(r["records"] for r in p2) == 100


def test_watermark_min_over_upstream_workers():
    def work(worker: pt.Worker) -> Any:
        def build(scope: Any) -> Any:
            wi, ws = watermark_input(scope)
            probe = ws.noop(key=lambda x: x).probe()
            b_in, b_stream = scope.new_input()
            return wi, probe, b_in, b_stream.probe()

        wi, probe, b_in, b_probe = worker.dataflow(build)
        mine = 100 if worker.index == 0 else 50
        wi.advance_to(mine)
        worker.step_while(lambda: probe.less_than(50))
        seen = probe.watermark
        # Barrier: nobody closes (which would send END) before both have looked.
        b_in.advance_to(1)
        worker.step_while(lambda: b_probe.less_than(1))
        return seen

    assert pt.execute(work, workers=2) == [50, 50]


def test_exchanged_data_arrive_before_the_markers_sent_after_them():
    # Each worker sends data and then advances its watermark, many times, without stepping in
    # between, so one invocation of the pipelined map forwards data and markers alternately.
    # The exchange after it holds the data for the other worker until the step ends, while the
    # markers go to the channel as they come.  FIFO per channel is the markers' promise: every
    # marker from worker ``s`` must arrive after all data ``s`` sent at earlier times.  (Inputs
    # send what is held before each batch, so the map is needed to show it.)
    from pytimely.dataflow.operators.watermarks import WatermarkExchange

    def work(worker: pt.Worker) -> Any:
        arrivals: list[Any] = []  # in the order the receiving input yields them

        def logger(cap: Any, info: Any) -> Any:
            cap.drop()

            def logic(inp: Any, out: Any) -> None:
                for _ref, batch in inp:
                    if type(batch) is Markers:
                        arrivals.extend(("marker", m.src, m.time) for m in batch)
                    else:
                        arrivals.extend(("data", src, t) for t, _k, src in batch)

            return logic

        def build(scope: Any) -> Any:
            wi, ws = watermark_input(scope)
            mapped = ws.map(lambda r: r)
            probe = mapped.process(None, key=lambda r: r[1]).probe()  # markers go to all workers
            mapped.stream.unary(WatermarkExchange(lambda r: r[1]), "Arrivals", logger)
            return wi, probe

        wi, probe = worker.dataflow(build)
        for t in range(40):
            wi.send_batch([(t, k, worker.index) for k in range(16)])
            wi.advance_to(t + 1)
        wi.close()
        worker.run()
        assert probe.done()
        return arrivals

    both = pt.execute(work, workers=2)
    assert sum(kind == "data" for arrivals in both for kind, *_ in arrivals) == 2 * 40 * 16
    for arrivals in both:
        promised = {0: 0, 1: 0}  # per source worker: no data before this time may come
        for kind, src, t in arrivals:
            if kind == "marker":
                promised[src] = max(promised[src], t)
            else:
                assert t >= promised[src], f"data at {t} from worker {src} after its marker"
        data_from = {src for kind, src, _t in arrivals if kind == "data"}
        assert data_from == {0, 1}  # data crossed both ways


def test_markers_batch_type():
    m = Markers(Watermark(5, 0, d) for d in range(3))
    assert type(m) is Markers and len(m) == 3 and m[2] == Watermark(5, 0, 2)


# ---------------------------------------------------------------------------------------------
# Tumbling-window average


def _run_window(feed: list[tuple[int, list[Any]]], **kwargs: Any) -> list[tuple[int, list[Any]]]:
    def build(scope: Any) -> Any:
        inp, s = scope.new_input()
        return inp, tumbling_average(s, **kwargs).capture()

    worker = pt.Worker()
    inp, cap = worker.dataflow(build)
    for t, batch in feed:
        inp.advance_to(t)
        inp.send_batch(batch)
    inp.close()
    worker.run()
    return cap.extract()


def test_tumbling_average_known_answers():
    feed = [(0, [1, 2, 3]), (4, [6]), (9, [8]), (10, [10]), (35, [1, 2])]
    assert _run_window(feed, width=10) == [(10, [4.0]), (20, [10.0]), (40, [1.5])]
    assert window_end(9, 10) == 10 and window_end(10, 10) == 20 and window_end(3, 10, 5) == 5


def test_tumbling_average_keyed_and_event_time():
    feed = [(0, [("a", 1), ("b", 10), ("a", 3)]), (12, [("a", 5)])]
    out = _run_window(feed, width=10, key=lambda r: r[0], value=lambda r: r[1])
    assert out == [(10, [("a", 2.0), ("b", 10.0)]), (20, [("a", 5.0)])]
    # Windows by a record's own time (>= its message time).
    feed2 = [(0, [(3, 1.0), (15, 3.0), (17, 5.0)])]
    out2 = _run_window(feed2, width=10, value=lambda r: r[1], event_time=lambda r: r[0])
    assert out2 == [(10, [1.0]), (20, [4.0])]


def test_tumbling_average_retires_several_windows_at_once_and_holds_one_token_per_window():
    worker = pt.Worker()
    calls: list[int] = []

    def build(scope: Any) -> Any:
        inp, s = scope.new_input()
        out = tumbling_average(s, 10)
        out.inspect_batch(lambda t, b: calls.append(t))
        return inp, out.probe(), out.capture()

    inp, probe, cap = worker.dataflow(build)
    for t in (1, 12, 25, 33):
        inp.advance_to(t)
        inp.send_batch([t, t + 1])
    inp.advance_to(34)
    settle(worker)
    # Four open windows, each with a token at its end: the output frontier is the input's
    # (34), windows are held at 10, 20, 30 and 40... and 10, 20, 30 are already complete.
    assert calls == [10, 20, 30]
    assert probe.less_than(40)
    before = worker.steps
    inp.advance_to(100)
    worker.step()
    assert calls == [10, 20, 30, 40]
    assert worker.steps == before + 1
    # No window open: nothing is held, the output frontier follows the input.
    assert not probe.less_than(100) and probe.less_equal(100)
    inp.close()
    worker.run()
    assert [t for t, _ in cap.extract()] == [10, 20, 30, 40]
    assert [v for _, (v,) in cap.extract()] == [1.5, 12.5, 25.5, 33.5]


def test_tumbling_average_frontier_jump_retires_all_in_one_invocation():
    worker = pt.Worker()
    batches: list[int] = []

    def build(scope: Any) -> Any:
        data, s = scope.new_input()
        hold, h = scope.new_input()  # holds the frontier at 0 while windows fill
        out = tumbling_average(s.concat(h), 5)
        out.inspect_batch(lambda t, b: batches.append(t))
        return data, hold, out.probe()

    data, hold, probe = worker.dataflow(build)
    for t in range(0, 50, 5):
        data.advance_to(t)
        data.send(t)
    data.advance_to(1000)
    settle(worker)
    assert batches == [] and probe.less_than(1)
    hold.advance_to(1000)
    worker.step()  # one step: one invocation retires all ten windows, in order
    assert batches == list(range(5, 51, 5))
    assert not probe.less_than(1000)
    data.close()
    hold.close()
    worker.run()


def test_tumbling_average_several_workers_global_average():
    def work(worker: pt.Worker) -> Any:
        def build(scope: Any) -> Any:
            inp, s = scope.new_input()
            return inp, tumbling_average(s, 10).capture()

        inp, cap = worker.dataflow(build)
        inp.send_batch([worker.index * 10, worker.index * 10 + 2])  # worker 0: 0, 2; 1: 10, 12
        inp.advance_to(15)
        inp.send(100)
        inp.close()
        worker.run()
        return cap.extract()

    out = pt.execute(work, workers=2)
    assert out[0] == [(10, [6.0]), (20, [100.0])]
    assert out[1] == []


def test_tumbling_average_rejects_bad_width():
    with pytest.raises(ValueError):
        pt.example(lambda scope: tumbling_average(scope.to_stream([1]), 0))
