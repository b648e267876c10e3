"""Progress edge cases: empty batches (timely-dataflow ``tests/gh_523.rs``), ``StuckError`` instead
of a hang, and frontier interest levels."""

from __future__ import annotations

import pytest

import pytimely as pt

from .helpers import probed_input


def test_gh523_empty_batches_do_not_block_progress():
    # A unary that emits an empty batch, then data, followed by exchange and probe: the probe
    # must complete after close().
    def ctor(cap, info):
        cap.drop()

        def logic(inp, out):
            for ref, batch in inp:
                out.session(ref).give_batch([])
                out.give_batch(ref, [])
                out.session(ref).give_batch(list(batch))

        return logic

    def build(scope):
        h, s = scope.new_input()
        out = s.unary(pt.Pipeline, "Empty", ctor).exchange(lambda x: x)
        return h, out.probe(), out.capture()

    for workers in (1, 2):

        def work(worker):
            h, probe, captured = worker.dataflow(build)
            h.send_batch([])
            h.send(worker.index)
            h.advance_to(1)
            worker.step_while(lambda: probe.less_than(1))
            h.close()
            worker.step_while(lambda: not probe.done())
            return captured.extract()

        merged = sorted(
            x for got in pt.execute(work, workers=workers) for _t, xs in got for x in xs
        )
        assert merged == list(range(workers))


def test_stuck_step_while_raises_instead_of_hanging():
    def work(worker):
        h, probe = worker.dataflow(probed_input)
        h.send(1)
        worker.step_while(lambda: probe.less_than(1))  # never advanced: can never finish

    with pytest.raises(pt.StuckError) as info:
        pt.execute(work)
    assert "Input" in str(info.value)  # it says what holds the frontier


def test_stuck_run_with_a_leaked_capability():
    leaked = []

    def ctor(cap, info):
        leaked.append(cap)  # never dropped

        def logic(inp, out):
            for _ in inp:
                pass

        return logic

    with pytest.raises(pt.StuckError, match="Hoarder"):
        pt.example(lambda s: s.to_stream([1]).unary(pt.Pipeline, "Hoarder", ctor).probe())


def test_step_while_timeout():
    def ticker(cap, info):
        act = info.activator()

        def logic(out):
            assert cap.valid  # held forever (an unreferenced token would be collected)
            act.activate_after(0.01)  # forever busy, never done

        return logic

    worker = pt.Worker()
    probe = worker.dataflow(lambda s: s.source("Forever", ticker).probe())
    with pytest.raises(TimeoutError):
        worker.step_while(lambda: not probe.done(), timeout=0.1)


def test_frontier_interest_levels():
    calls = {"never": 0, "if_cap": 0, "always": 0}

    def counting(key, hold):
        def ctor(cap, info):
            if not hold:
                cap.drop()

            def logic(inp, out):
                calls[key] += 1
                for _ in inp:
                    pass
                if hold and not inp.frontier and cap.valid:
                    cap.drop()

            return logic

        return ctor

    def work(worker):
        def build(scope):
            h, s = scope.new_input()
            s.unary(pt.Pipeline, "Never", counting("never", False))
            s.unary_frontier(
                pt.Pipeline,
                "IfCapIdle",
                counting("if_cap", False),
                interest=pt.FrontierInterest.IF_CAPABILITY,
            )
            s.unary_frontier(pt.Pipeline, "Always", counting("always", True))
            return h

        h = worker.dataflow(build)
        for _ in range(3):
            worker.step()
        start = dict(calls)
        for r in range(10):
            h.advance_to(r + 1)
            for _ in range(3):
                worker.step()
        return {k: calls[k] - start[k] for k in calls}

    got = pt.execute(work)[0]
    assert got["never"] == 0  # only time moved
    assert got["if_cap"] == 0  # holds nothing
    assert got["always"] == 10  # once per frontier change
