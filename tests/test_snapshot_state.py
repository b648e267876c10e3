"""Operator state snapshots (:mod:`pytimely.dataflow.snapshot`): the stateful operators' state,
taken at a completed epoch on some number of workers and restored onto another, continues
exactly as a clean run -- re-partitioned by key."""

from __future__ import annotations

import collections
import pickle

import pytest

import pytimely as pt
from pytimely.dataflow.snapshot import StateRegistry, partition
from pytimely.errors import OperatorError, TimelyError
from pytimely.graph import describe, operators

CUT = 15  # the snapshot epoch: every record before it is in, nothing at or after it
END = 30
# Records sit at even times and every window, session and timer ends at an even time, so no
# output is due exactly at CUT: what the first run emitted before CUT and what the restored run
# emits from CUT on must add up to the clean run, with no overlap to argue about.


def records(t):
    """The ``(key, value)`` records at time ``t``."""
    if t % 2:
        return []
    return [(f"k{j}", t * 10 + j) for j in range(6) if (t + j) % 3]


def process(ctx, key, value):
    if ctx.state is None:
        ctx.set_timer(ctx.time + 6)
    ctx.state = (ctx.state or 0) + 1


def on_timer(ctx, key, t):
    ctx.emit((key, ctx.state))
    ctx.clear()


def dataflow(scope):
    inp, stream = scope.new_input()
    outputs = {
        "windows": stream.window_count(pt.Tumbling(10)).output,
        "sessions": stream.window_collect(pt.Session(gap=4)).output,
        "session_counts": stream.window_count(pt.Session(gap=4)).output,
        "running": stream.stateful_map(int, lambda s, v: (s + v, s + v)),
        "timers": stream.keyed_process(process, on_timer),
        "joined": stream.filter(lambda r: r[1] // 10 % 4 == 0).join(
            stream.filter(lambda r: r[1] // 10 % 4 == 2), within=6
        ),
        "outer_joined": stream.filter(lambda r: r[1] // 10 % 4 == 0).join(
            stream.filter(lambda r: r[1] // 10 % 4 == 2), within=4, how="outer", name="Outer"
        ),
        "count_windows": stream.window_collect(pt.Count(3, every=2), name="Threes").output,
        "expiring_process": stream.keyed_process(
            lambda ctx, k, v: ctx.emit((k, v)),
            ttl=6,
            on_expire=lambda ctx, k: ctx.emit((k, "gone")),
            name="ExpiringProcess",
        ),
        "expiring": stream.map(lambda r: (r[0], 1)).stateful_map(
            int, lambda n, v: (n + v, n + v), ttl=6, on_expire=lambda k, n: -n, name="Expiring"
        ),
        "asof": stream.filter(lambda r: r[1] // 10 % 4 == 0).asof_join(
            stream.filter(lambda r: r[1] // 10 % 4 == 2)
        ),
    }
    captures = {name: s.capture() for name, s in outputs.items()}
    probes = [s.probe() for s in outputs.values()]
    return inp, captures, probes


def feed(worker, inp, times):
    for t in times:
        inp.advance_to(t)
        if worker.index == 0:
            inp.send_batch(records(t))


def outputs(results, keep=lambda t: True):
    """``Counter`` of ``(output, time, record)`` over every worker's captures."""
    found = collections.Counter()
    for captures in results:
        for name, handle in captures.items():
            for t, batch in handle.extract():
                if keep(t):
                    found.update((name, t, repr(r)) for r in batch)
    return found


def clean_run():
    def work(worker):
        inp, captures, _probes = worker.dataflow(dataflow)
        feed(worker, inp, range(END))
        return captures

    return outputs(pt.execute(work, workers=2, timeout=60))


def first_run(workers):
    """Run to CUT, snapshot; returns every worker's snapshot records and captured outputs."""

    def work(worker):
        registry = StateRegistry()
        with registry.building():
            inp, captures, probes = worker.dataflow(dataflow)
        feed(worker, inp, range(CUT))
        inp.advance_to(CUT)
        worker.step_while(lambda: any(p.less_than(CUT) for p in probes), timeout=30)
        return registry.snapshot(), captures

    results = pt.execute(work, workers=workers, timeout=60)
    snapshot = [record for records, _ in results for record in records]
    return snapshot, [captures for _, captures in results]


def restored_run(snapshot, workers):
    def work(worker):
        registry = StateRegistry(partition(snapshot, worker.index, worker.peers))
        with registry.building():
            inp, captures, _probes = worker.dataflow(dataflow)
        assert registry.unclaimed() == []
        feed(worker, inp, range(CUT, END))
        return captures

    return pt.execute(work, workers=workers, timeout=60)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("before", "after"), [(2, 2), (2, 1), (1, 3)])
def test_state_restored_onto_any_number_of_workers_continues_as_a_clean_run(before, after):
    clean = clean_run()
    assert not [o for o in clean if o[1] == CUT]  # the premise of the comparison
    assert {o[0] for o in clean} == {
        "windows",
        "sessions",
        "session_counts",
        "running",
        "timers",
        "joined",
        "outer_joined",
        "count_windows",
        "asof",
        "expiring",
        "expiring_process",
    }
    snapshot, first = first_run(before)
    operators = {operator for operator, _key, _blob in snapshot}
    assert len(operators) == 11  # every stateful operator had state at the cut
    resumed = outputs(first, lambda t: t < CUT) + outputs(restored_run(snapshot, after))
    assert resumed == clean


def test_a_snapshot_while_records_wait_for_an_earlier_time_is_refused():
    """Records stashed by ``stateful_map`` (a later time, an earlier one still open) mean the
    epoch is not complete: a snapshot then would lose them, so it is an error naming the
    operator."""

    def work(worker):
        registry = StateRegistry()

        def build(scope):
            early, first = scope.new_input()
            late, second = scope.new_input()
            first.concat(second).stateful_map(int, lambda s, v: (s + v, s), name="Totals")
            return early, late

        with registry.building():
            early, late = worker.dataflow(build)
        late.advance_to(5)
        late.send(("ann", 1))  # waits: ``early`` is still at 0
        late.advance_to(6)  # (sends it)
        for _ in range(5):
            worker.step()
        with pytest.raises(OperatorError, match="stateful_map 'Totals'.*completed epoch"):
            registry.snapshot()
        early.close()
        late.close()
        worker.run()  # every epoch complete: the stash is applied
        return [(key, pickle.loads(blob)) for _op, key, blob in registry.snapshot()]

    assert pt.execute(work, workers=1, timeout=30) == [[("ann", 1)]]


def test_a_snapshot_while_session_counts_wait_for_an_earlier_time_is_refused():
    """``window_count(pt.Session)`` applies batches in timestamp order: one stashed behind an
    open earlier time is not yet in its sessions, so a snapshot then is an error naming the
    operator; once every epoch is complete the stash is applied and the snapshot holds it."""

    def work(worker):
        registry = StateRegistry()

        def build(scope):
            early, first = scope.new_input()
            late, second = scope.new_input()
            first.concat(second).window_count(pt.Session(3), name="Visits")
            return early, late

        with registry.building():
            early, late = worker.dataflow(build)
        late.advance_to(5)
        late.send(("ann", "home"))  # waits: ``early`` is still at 0
        late.advance_to(6)
        for _ in range(5):
            worker.step()
        with pytest.raises(OperatorError, match="window_count 'Visits'.*completed epoch"):
            registry.snapshot()
        early.advance_to(6)
        for _ in range(5):
            worker.step()
        snapped = [(key, pickle.loads(blob)) for _op, key, blob in registry.snapshot()]
        early.close()
        late.close()
        worker.run()
        return snapped

    assert pt.execute(work, workers=1, timeout=30) == [[("ann", [(5, 5, 1)])]]


def test_state_for_an_operator_the_build_no_longer_makes_is_reported():
    registry = StateRegistry({"Gone@0.9": [("k", b"")]})

    def work(worker):
        with registry.building():
            worker.dataflow(dataflow)
        return registry.unclaimed()

    assert pt.execute(work, workers=1, timeout=30) == [["Gone@0.9"]]


def test_without_a_registry_operators_attach_nothing():
    registry = StateRegistry()

    def work(worker):
        worker.dataflow(dataflow)  # not inside registry.building()
        return registry.operators

    assert pt.execute(work, workers=1, timeout=30) == [[]]
    registry.attach("Op@0.1", list)
    with pytest.raises(TimelyError, match="two stateful operators"):
        registry.attach("Op@0.1", list)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("before", "after"), [(2, 1), (1, 3)])
def test_event_time_sessions_restored_onto_another_worker_count_continue_as_a_clean_run(
    before, after
):
    """``window_count(pt.Session, event_time=f)`` keeps its own session store: its state too
    is snapshotted at a completed epoch and restored, re-partitioned by key."""

    def build(scope):
        inp, stream = scope.new_input()
        counted = stream.window_count(pt.Session(gap=40), event_time=lambda r: r[1], lateness=10)
        return inp, counted.output.capture(), counted.output.probe()

    def run(times, registry=None):
        def work(worker):
            reg = registry(worker) if registry is not None else StateRegistry()
            with reg.building():
                inp, out, probe = worker.dataflow(build)
            if registry is not None:
                assert reg.unclaimed() == []
            feed(worker, inp, times)
            if times[-1] < CUT:
                inp.advance_to(CUT)
                worker.step_while(lambda: probe.less_than(CUT), timeout=30)
                return reg.snapshot(), out
            return None, out

        return pt.execute(work, workers=before if registry is None else after, timeout=60)

    def found(handles, keep=lambda t: True):
        return collections.Counter(
            (t, r) for h in handles for t, batch in h.extract() if keep(t) for r in batch
        )

    clean = found(pt.execute(lambda worker: _run_all(worker, build), workers=2, timeout=60))
    first = run(list(range(CUT)))
    snapshot = [record for records, _ in first for record in records]
    assert snapshot  # open sessions at the cut
    restored = run(
        list(range(CUT, END)),
        lambda worker: StateRegistry(partition(snapshot, worker.index, worker.peers)),
    )
    resumed = found((out for _s, out in first), lambda t: t < CUT) + found(
        out for _s, out in restored
    )
    assert resumed == clean


def _run_all(worker, build):
    inp, out, _probe = worker.dataflow(build)
    feed(worker, inp, range(END))
    return out


def total(s, v):
    return s + v, s + v


def total_moved(s, v):  # the same step, defined on another line: as after editing the file
    return s + v, s + v


def tally(ctx, key, value):
    ctx.state = (ctx.state or 0) + 1


def test_functions_name_the_operators_but_state_survives_an_edit_that_moves_them():
    """``stateful_map`` and ``keyed_process`` are named after the user's function (its file
    and line), like ``map``; their snapshot state is filed under the operator kind, so a
    restore after an edit that moves the function still finds it."""

    def run(step, restore):
        def work(worker):
            registry = StateRegistry(restore)

            def build(scope):
                inp, stream = scope.new_input()
                running = stream.stateful_map(int, step)
                stream.keyed_process(tally)
                return inp, running.capture()

            with registry.building():
                inp, running = worker.dataflow(build)
            names = [op["name"] for op in operators(describe(worker.dataflow_scopes()))]
            assert registry.unclaimed() == []
            inp.send(("ann", 2))
            inp.close()
            worker.run()
            snapshot = {op: pickle.loads(blob) for op, _key, blob in registry.snapshot()}
            return names, snapshot, running.extract()

        [result] = pt.execute(work, workers=1, timeout=30)
        return result

    names, snapshot, _ = run(total, {})
    line = total.__code__.co_firstlineno
    assert f"StatefulMap(total @ test_snapshot_state.py:{line})" in names
    assert any(n.startswith("KeyedProcess(tally @ test_snapshot_state.py:") for n in names)
    assert sorted(op.split("@")[0] for op in snapshot) == ["KeyedProcess", "StatefulMap"]
    restore = {op: [("ann", pickle.dumps(state))] for op, state in snapshot.items()}
    _names, _snapshot, running = run(total_moved, restore)
    assert running == [(0, [("ann", 4)])]  # 2 restored + 2 sent
