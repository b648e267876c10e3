"""Building a dataflow costs a bounded number of bytes per operator.

A million-operator build is a common size (``bench/manyflows.py``: 1,000 dataflows of 1,000
operators), and there the bytes each operator costs decide both the memory and, since touching
fresh memory is what the build spends its time on, the build time.  The budget is counted by
``tracemalloc`` (allocations, not the clock), so it is deterministic.  It covers what building
and compiling leaves behind: the operator and its ports, its count batches, the scope's routes
and the tracker's locations and frontiers.
"""

from __future__ import annotations

import gc
import tracemalloc

import pytimely as pt

BYTES_PER_OPERATOR = 4750


def _keep(x: int) -> bool:
    return True


def _build_chains(worker: pt.Worker, dataflows: int, length: int) -> list:
    """``dataflows`` times: INPUT -> REGION{FILTER x length} -> PROBE (one shared predicate,
    so the user's own closures are not counted)."""
    kept = []
    for _ in range(dataflows):

        def build(scope):
            inp, stream = scope.new_input()

            def region(inner):
                s = stream.enter(inner)
                for _ in range(length):
                    s = s.filter(_keep)
                return s.leave()

            return inp, scope.region(region).probe()

        kept.append(worker.dataflow(build))
    return kept


def test_building_a_long_chain_stays_within_the_per_operator_budget() -> None:
    dataflows, length = 3, 300
    worker = pt.Worker()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = _build_chains(worker, dataflows, length)
        gc.collect()
        per_operator = (tracemalloc.get_traced_memory()[0] - before) / (dataflows * (length + 3))
    finally:
        tracemalloc.stop()
    assert per_operator <= BYTES_PER_OPERATOR, f"{per_operator:.0f} bytes per operator"
    # The dataflows built are whole and run: a record goes through every filter.
    (inp, probe), *_ = kept
    inp.send(7)
    inp.advance_to(1)
    worker.step_while(lambda: probe.less_than(1))
    assert not probe.less_than(1)
