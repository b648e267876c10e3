"""Logging streams and statistics: what a worker's dataflows did, as events and figures."""

from __future__ import annotations

from collections import Counter

import pytest

import pytimely as pt
from pytimely.capture import FileReader, FileWriter, replay_into
from pytimely.eventlog import (
    CapabilityEvent,
    MessagesEvent,
    OperatesEvent,
    ProgressEvent,
    ScheduleEvent,
    log_stream,
)

pytestmark = pytest.mark.timeout(60)


def _chain(scope):
    """Input -> Exchange -> Map -> Probe."""
    inp, stream = scope.new_input()
    out = stream.exchange(key=lambda x: x).map(lambda x: x + 1)
    return inp, out.probe()


def _rounds(worker, inp, probe, rounds, per_round=2):
    for r in range(rounds):
        if worker.index == 0:
            for k in range(per_round):
                inp.send(r * per_round + k)
        inp.advance_to(r + 1)
        worker.step_while(lambda: probe.less_than(inp.time), timeout=20)


def test_log_to_reports_every_kind_of_event():
    worker = pt.Worker()
    events = []
    worker.log_to(events.extend)
    inp, probe = worker.dataflow(_chain)
    _rounds(worker, inp, probe, rounds=3)

    # Default names carry the user function (``Map(<lambda> @ file:line)``): key by the kind.
    operates = {e.name.split("(")[0]: e for e in events if isinstance(e, OperatesEvent)}
    assert set(operates) == {"Input", "Exchange", "Map", "Probe"}
    assert operates["Map"].address == (0, 3)
    assert (operates["Map"].inputs, operates["Map"].outputs) == (1, 1)
    ids = {e.id for e in operates.values()}
    assert len(ids) == 4

    schedules = [e for e in events if isinstance(e, ScheduleEvent)]
    assert {e.id for e in schedules} <= ids
    map_runs = [e for e in schedules if e.id == operates["Map"].id]
    assert len(map_runs) >= 3
    assert all(e.duration >= 0 and e.time <= e.stop for e in map_runs)
    # Invocations do not overlap (one thread), and events are in the order they started.
    assert all(a.stop <= b.time for a, b in zip(map_runs, map_runs[1:]))
    times = [e.time for e in events if not isinstance(e, OperatesEvent)]
    assert times == sorted(times)

    # Every batch on the Exchange -> Map edge: two records per round.
    into_map = [e for e in events if isinstance(e, MessagesEvent) and e.channel == ((0,), 1)]
    assert [e.records for e in into_map] == [2, 2, 2]
    assert all(e.is_send and e.bytes == 0 for e in into_map)

    assert any(isinstance(e, ProgressEvent) and e.is_send and e.updates for e in events)
    assert any(isinstance(e, ProgressEvent) and not e.is_send for e in events)
    # The input's capability moves from round to round: +1 at r+1, -1 at r.
    input_caps = [
        (e.at, e.delta)
        for e in events
        if isinstance(e, CapabilityEvent) and e.id == operates["Input"].id
    ]
    assert (1, 1) in input_caps and (0, -1) in input_caps


def test_operators_built_before_log_to_are_announced():
    worker = pt.Worker()
    inp, probe = worker.dataflow(_chain)
    events = []
    worker.log_to(events.extend)
    _rounds(worker, inp, probe, rounds=1)
    names = [e.name.split("(")[0] for e in events if isinstance(e, OperatesEvent)]
    assert sorted(names) == ["Exchange", "Input", "Map", "Probe"]
    assert any(isinstance(e, ScheduleEvent) for e in events)


def test_no_listener_no_recording():
    worker = pt.Worker()
    inp, probe = worker.dataflow(_chain)
    _rounds(worker, inp, probe, rounds=2)
    stats = worker.statistics()
    assert "operators" not in stats and "channels" not in stats and "totals" not in stats


def test_statistics_per_operator_and_totals():
    worker = pt.Worker()
    worker.enable_statistics()
    inp, probe = worker.dataflow(_chain)
    _rounds(worker, inp, probe, rounds=4, per_round=3)
    stats = worker.statistics()
    ops = {op["name"].split("(")[0]: op for op in stats["operators"]}
    assert set(ops) == {"Input", "Exchange", "Map", "Probe"}
    m = ops["Map"]
    assert m["address"] == [0, 3]
    assert m["records_in"] == 12 and m["records_out"] == 12
    assert m["batches_in"] == 4 and m["batches_out"] == 4
    assert m["invocations"] >= 4
    assert 0 < m["time_max_s"] <= m["time_total_s"]
    assert ops["Input"]["records_out"] == 12 and ops["Input"]["records_in"] == 0
    # The input still holds its capability at the current round; nobody else holds any.
    assert ops["Input"]["capabilities"] == [{"output": 0, "time": 4, "count": 1}]
    assert ops["Map"]["capabilities"] == []
    assert stats["totals"]["steps"] == worker.steps > 0
    assert set(stats["totals"]) == {"steps", "parks", "parked_s"}
    assert stats["channels"] == []  # one worker: nothing crosses to another
    assert stats["index"] == 0 and "dataflows" in stats  # the keys that were there before


def test_parks_are_counted():
    worker = pt.Worker()
    worker.enable_statistics()
    worker.step_or_park(0.01)
    totals = worker.statistics()["totals"]
    assert totals["parks"] == 1 and totals["parked_s"] > 0


def test_log_stream_captured_to_a_file_and_replayed(tmp_path):
    path = tmp_path / "log.ptcap"

    def work(worker):
        worker.dataflow(lambda s: log_stream(s).capture_into(FileWriter(path, allow_pickle=True)))
        inp, probe = worker.dataflow(_chain)
        _rounds(worker, inp, probe, rounds=3)
        return None

    pt.execute(work, timeout=30)

    def replay(scope):
        events = replay_into([FileReader(path, allow_pickle=True)], scope)
        return events.map(lambda e: type(e).__name__).capture()

    kinds = Counter(rec for _t, batch in pt.example(replay).extract() for rec in batch)
    assert kinds["OperatesEvent"] == 4  # the logging dataflow itself is not logged
    assert kinds["ScheduleEvent"] >= 4
    assert kinds["MessagesEvent"] >= 3
    assert kinds["ProgressEvent"] > 0 and kinds["CapabilityEvent"] > 0


def test_log_stream_can_be_counted_in_a_dataflow():
    worker = pt.Worker()
    counts: Counter = Counter()

    def count(scope):
        log_stream(scope).map(lambda e: type(e).__name__).inspect(lambda k: counts.update([k]))

    worker.dataflow(count)
    inp, probe = worker.dataflow(_chain)
    _rounds(worker, inp, probe, rounds=2)
    for _ in range(3):
        worker.step()
    assert counts["OperatesEvent"] == 4
    assert counts["ScheduleEvent"] > 0


def _two_workers(worker):
    events = []
    worker.log_to(events.extend)
    inp, probe = worker.dataflow(_chain)
    _rounds(worker, inp, probe, rounds=3, per_round=4)
    remote = [e for e in events if isinstance(e, MessagesEvent) and e.source != e.target]
    return remote, worker.statistics()["channels"]


def test_remote_messages_carry_bytes_and_channel_statistics():
    results = pt.execute(_two_workers, workers=2, timeout=60)
    (remote0, channels0), (remote1, _channels1) = results
    # Worker 0 sends records 1, 3, 5, ... (odd keys) to worker 1 over the Exchange.
    sent = [e for e in remote0 if e.is_send and e.records and e.target == 1]
    assert sum(e.records for e in sent if e.channel == 2) >= 6
    assert all(e.bytes > 0 for e in sent)
    received = [e for e in remote1 if not e.is_send and e.source == 0 and e.channel == 2]
    assert sum(e.records for e in received) == 6
    exchange = next(c for c in channels0 if c["channel"] == 2)
    assert exchange["to"][1]["records"] == 6
    assert exchange["records_sent"] == 6 and exchange["bytes_sent"] == exchange["to"][1]["bytes"]
    assert exchange["bytes_sent"] > 0


def test_messages_are_summed_per_channel_and_step():
    """Two batches pushed on one edge within one step are one MessagesEvent of two batches."""
    worker = pt.Worker()
    events = []
    worker.log_to(events.extend)
    inp, probe = worker.dataflow(_chain)
    inp.send_batch([1, 2])
    inp.advance_to(1)
    inp.send_batch([3])  # a second batch, at another time, before the worker steps
    inp.advance_to(2)
    worker.step_while(lambda: probe.less_than(2), timeout=20)
    from_input = [e for e in events if isinstance(e, MessagesEvent) and e.channel == ((0,), 0)]
    assert [(e.records, e.batches) for e in from_input] == [(3, 2)]
    step_ends = [e.time for e in events if isinstance(e, ScheduleEvent)]
    assert from_input[0].time >= max(step_ends)  # stamped at the end of its step
    assert worker.statistics()["operators"][0]["batches_out"] == 2


def _exchange_figures(worker):
    worker.enable_statistics()
    inp, probe = worker.dataflow(_chain)
    _rounds(worker, inp, probe, rounds=3, per_round=4)  # worker 0 sends 0..11
    return {op["name"].split("(")[0]: op for op in worker.statistics()["operators"]}


def test_records_in_behind_an_exchange_are_what_the_operator_received():
    """The operator behind an Exchange counts what reached it on this worker (its own part and
    the records other workers sent), not what this worker pushed into the exchange."""
    ops0, ops1 = pt.execute(_exchange_figures, workers=2, timeout=60)
    for ops in (ops0, ops1):  # each worker gets the records whose key it owns: 6 of 12
        assert ops["Exchange"]["records_in"] == ops["Exchange"]["records_out"] == 6
        assert ops["Map"]["records_in"] == 6
    assert (ops0["Input"]["records_out"], ops1["Input"]["records_out"]) == (12, 0)
    assert ops0["Exchange"]["batches_in"] == 3 and ops1["Exchange"]["batches_in"] == 3


def test_nested_scopes_are_timed_around_their_operators_and_count_their_edges():
    """A region's invocation encloses its operators' (its ScheduleEvent comes first), and the
    edges into and out of it are counted for it: its figures are what crossed its boundary."""
    worker = pt.Worker()
    events = []
    worker.log_to(events.extend)

    def build(scope):
        inp, stream = scope.new_input()
        out = scope.region(lambda r: stream.enter(r).map(lambda x: x + 1).leave())
        return inp, out.map(lambda x: x).probe()

    inp, probe = worker.dataflow(build)
    for r in range(2):
        inp.send_batch([1, 2, 3])
        inp.advance_to(r + 1)
        worker.step_while(lambda: probe.less_than(inp.time), timeout=20)

    ops = {tuple(op["address"]): op for op in worker.statistics()["operators"]}
    for address in [(0, 2), (0, 2, 1), (0, 3)]:  # the region, the map in it, the map after
        figures = [ops[address][k] for k in ("records_in", "records_out", "batches_in")]
        assert figures + [ops[address]["batches_out"]] == [6, 6, 2, 2]
    ids = {e.address: e.id for e in events if isinstance(e, OperatesEvent)}
    runs = [e for e in events if isinstance(e, ScheduleEvent)]
    inner = [e for e in runs if e.id == ids[(0, 2, 1)]]
    assert inner
    for run in inner:
        region = [e for e in runs if e.id == ids[(0, 2)] and e.time <= run.time]
        assert region and run.stop <= region[-1].stop  # inside the region's invocation
        assert runs.index(region[-1]) < runs.index(run)
    into_region = [e for e in events if isinstance(e, MessagesEvent) and e.channel == ((0, 2), 0)]
    assert sum(e.records for e in into_region) == 6
