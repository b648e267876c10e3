"""The worker keeps dataflow graphs out of the cyclic collector's sight (``gc.freeze``): a
dataflow that completes must not hand the live ones back to it, and completed graphs must be
reclaimed (nothing of the worker's may keep them alive)."""

import gc

import pytest

import pytimely as pt
from pytimely.dataflow.operator import OperatorCore
from pytimely.worker import FROZEN_GARBAGE_OPERATORS


@pytest.fixture(autouse=True)
def _thawed():
    """Each test starts and ends with nothing frozen (other tests' objects included)."""
    gc.unfreeze()
    yield
    gc.unfreeze()


def _in_step(stream):
    """``stream`` behind an ordinary operator, so that a ``map`` on it runs within a step (a
    ``map`` right behind an input handle runs inline, within ``send``)."""
    return stream.map_batch(lambda batch: batch)


def _chain(length: int):
    def build(scope):
        inp, stream = scope.new_input()
        for _ in range(length):
            stream = stream.map(lambda x: x)
        return inp, stream.probe()

    return build


def test_a_short_dataflow_completing_leaves_the_live_graph_frozen() -> None:
    worker = pt.Worker()
    live_input, _ = worker.dataflow(_chain(200))
    frozen = gc.get_freeze_count()
    assert frozen > 0
    short_input, short_probe = worker.dataflow(_chain(2))
    short_input.close()
    worker.step_while(lambda: not short_probe.done())
    worker.step()  # the short dataflow is removed as completed
    assert 1 not in worker.installed_dataflows()
    # Still frozen (objects freed since leave the count: hence not all of it); unfreezing at
    # completion, as the worker used to, left nothing frozen.
    assert gc.get_freeze_count() > 0.9 * frozen
    live_input.close()
    worker.run()


def _operators_alive() -> int:
    gc.collect()
    return sum(isinstance(o, OperatorCore) for o in gc.get_objects())


@pytest.mark.parametrize("freeze_gc", [False, True])
def test_completed_graphs_are_reclaimed(freeze_gc: bool) -> None:
    """Eighty dataflows of 52 operators built and run to completion one after the other: their
    graphs are reclaimed (the worker used to keep every input handle, and with it every graph)."""
    worker = pt.Worker(freeze_gc=freeze_gc)
    before = _operators_alive()
    frozen = []
    for _ in range(80):
        inp, _probe = worker.dataflow(_chain(50))
        inp.send(1)
        inp.close()
        worker.run()
        frozen.append(gc.get_freeze_count())
    del inp, _probe
    if freeze_gc:
        # Completed graphs are let go in bulk once they hold more than FROZEN_GARBAGE_OPERATORS
        # operators: the frozen count grows by one graph per dataflow, then falls back.
        per_graph = frozen[5] - frozen[4]
        graphs = FROZEN_GARBAGE_OPERATORS // 52 + 2
        assert max(frozen) < frozen[0] + graphs * per_graph
        assert any(b < a - per_graph for a, b in zip(frozen, frozen[1:]))
        gc.unfreeze()  # what is still frozen is the garbage of the last graphs
    assert _operators_alive() - before == 0


def test_no_freezing_when_switched_off() -> None:
    worker = pt.Worker(freeze_gc=False)
    inp, _ = worker.dataflow(_chain(10))
    assert gc.get_freeze_count() == 0
    inp.close()
    worker.run()


def test_a_completed_dataflows_operator_state_is_freed_at_once() -> None:
    # The graph of a completed dataflow may stay frozen until enough completed graphs pile up
    # (FROZEN_GARBAGE_OPERATORS), but what its logic holds, often the bulk of the memory, must
    # not wait for that: it is freed by reference counting when the dataflow completes.
    import weakref

    class State(dict):
        """An operator's state (a dict subclass, so that it can be weakly referenced)."""

    worker = pt.Worker()
    alive = []

    def build(scope):
        inp, stream = scope.new_input()
        state = State()
        alive.append(weakref.ref(state))

        def remember(x):
            state[x] = x  # the logic holds the state
            return x

        return inp, _in_step(stream).map(remember).probe()

    for _ in range(3):
        inp, probe = worker.dataflow(build)
        inp.send_batch(list(range(100)))
        inp.close()
        worker.step_while(lambda: not probe.done(), timeout=20)
        worker.step()  # removed as completed
    assert gc.get_freeze_count() > 0  # the completed graphs are still frozen...
    assert [ref() is None for ref in alive] == [True, True, True]  # ...but their state is gone


def _collector_seen_by_an_operator(worker: pt.Worker) -> list[bool]:
    """Run a dataflow whose map records, per record, whether the collector was enabled."""
    seen: list[bool] = []

    def build(scope):
        inp, stream = scope.new_input()
        _in_step(stream).map(lambda x: seen.append(gc.isenabled()) or x).probe()
        return inp

    inp = worker.dataflow(build)
    inp.send_batch([1, 2, 3])
    inp.close()
    worker.run()
    return seen


def test_the_collector_is_paused_while_a_step_runs_and_resumed_after() -> None:
    assert gc.isenabled()
    assert _collector_seen_by_an_operator(pt.Worker()) == [False, False, False]
    assert gc.isenabled()  # switched back on when the step ended


def test_a_program_that_manages_the_collector_keeps_its_choice() -> None:
    assert _collector_seen_by_an_operator(pt.Worker(freeze_gc=False)) == [True, True, True]
    gc.disable()
    try:
        assert _collector_seen_by_an_operator(pt.Worker()) == [False, False, False]
        assert not gc.isenabled()  # not switched on by the worker
    finally:
        gc.enable()


def test_cyclic_garbage_of_a_step_is_collected_after_it() -> None:
    """Reference cycles made by an operator during a step are reclaimed once the step is over
    (by the next collection), not left for ever."""
    import weakref

    class Node:
        pass

    refs = []

    def make_cycle(x):
        a, b = Node(), Node()
        a.other, b.other = b, a
        refs.append(weakref.ref(a))
        return x

    worker = pt.Worker()

    def build(scope):
        inp, stream = scope.new_input()
        _in_step(stream).map(make_cycle).probe()
        return inp

    inp = worker.dataflow(build)
    inp.send_batch(list(range(100)))
    inp.close()
    worker.run()
    assert gc.isenabled()
    # No explicit collection: allocating enough containers triggers the collector by itself
    # (it would not, had the worker left it paused).
    junk = [[] for _ in range(20 * gc.get_threshold()[0])]
    del junk
    assert len(refs) == 100 and all(r() is None for r in refs)


def _state_builder(per_step: int, cycles: bool):
    """A dataflow whose map keeps ``per_step`` new lists per record it sees (state that
    outlives the step), as pairs that refer to each other if ``cycles``, dropping the previous
    record's; returns ``(input, probe, weak references to the first object of each pair)``."""
    import weakref

    class Cell(list):
        """A list that can be weakly referenced."""

    kept: list = []
    refs: list = []

    def keep(x):
        fresh = []
        for _ in range(per_step // 2):
            a, b = Cell(), Cell()
            if cycles:
                a.append(b)
                b.append(a)
            refs.append(weakref.ref(a))
            fresh.append((a, b))
        kept[:] = fresh  # the previous record's objects are now garbage (cyclic: for the GC)
        return x

    def build(scope):
        inp, stream = scope.new_input()
        return inp, _in_step(stream).map(keep).probe()

    return build, refs


def test_what_a_long_step_leaves_is_frozen_at_once() -> None:
    """State a long step builds (here 30,000 objects) is moved out of the collector's sight
    when the step ends, not rescanned by the young collections that follow."""
    build, _refs = _state_builder(30_000, cycles=False)
    worker = pt.Worker()
    inp, probe = worker.dataflow(build)
    before = gc.get_freeze_count()
    inp.send(0)
    inp.advance_to(1)
    worker.step_while(lambda: probe.less_than(1), timeout=20)
    assert gc.get_freeze_count() >= before + 30_000
    inp.close()
    worker.run()


def test_cyclic_garbage_left_by_long_steps_is_collected_in_the_end() -> None:
    """Frozen survivors are not scanned, so their cycles would stay for ever: once the steps
    have frozen enough (STEP_SURVIVORS_FULL), everything is collected and what lives frozen
    again.  Forty steps that each leave 20,000 objects and drop the previous step's as cyclic
    garbage: all but the recent ones are reclaimed."""
    from pytimely.worker import STEP_SURVIVORS_FULL

    per_step = 20_000
    build, refs = _state_builder(per_step, cycles=True)
    worker = pt.Worker()
    inp, probe = worker.dataflow(build)
    steps = 40
    for t in range(steps):
        inp.send(t)
        inp.advance_to(t + 1)
        worker.step_while(lambda t=t: probe.less_than(t + 1), timeout=20)
    inp.close()
    worker.run()
    alive = sum(r() is not None for r in refs)
    assert steps * per_step >= 2 * STEP_SURVIVORS_FULL  # the rule had to fire
    # Never more than what one full-collection period freezes (each pair is at least two
    # objects), plus the live record's.
    assert alive <= STEP_SURVIVORS_FULL // 2 + per_step, alive
