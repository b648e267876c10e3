"""bench/manyflows.py, small: its report, and the laziness of its ``--arrange dd`` mode.

In that mode D dataflows share one differential arrangement (``pytimely.differential``), each
importing it by its trace handle: IMPORT -> SELECT -> REGION{FILTER x (L-1)} -> PROBE.  Each
round one update goes into the shared arrangement, for one dataflow's key; the others' regions
must not be visited nor their filters run (counted in invocations, not timed).
"""

from __future__ import annotations

import importlib.util
import os

import pytimely as pt
from pytimely.dataflow.operator import OperatorCore
from pytimely.progress.subgraph import Subgraph

BENCH = os.path.join(os.path.dirname(__file__), "..", "bench", "manyflows.py")


def _load():
    spec = importlib.util.spec_from_file_location("bench_manyflows", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_manyflows_small_with_the_dd_arrangement(capsys):
    out = _load().main(
        ["--dataflows", "20", "--length", "10", "--rounds", "20", "--always-rounds", "5",
         "--arrange", "dd"]
    )  # fmt: skip
    assert [r["interest"] for r in out["results"]] == ["IF_CAPABILITY", "ALWAYS", "DD_ARRANGE"]
    shared = out["results"][2]
    assert shared["dataflows"] == 20 and shared["length"] == 10 and shared["rounds"] == 20
    for key in ("build_s", "median_round_ms", "p99_round_ms", "peak_rss_mb"):
        assert shared[key] > 0
    assert shared["median_steps_per_round"] >= 1
    assert out["dd_arrange_over_if_capability"] > 0
    assert out["always_over_dd_arrange"] > 0
    assert '"benchmark": "manyflows"' in capsys.readouterr().out


def test_dd_arrangement_idle_dataflows_run_no_filter():
    manyflows = _load()
    dataflows, length = 12, 8
    worker = pt.Worker()
    session, handle, probes = manyflows.build_dd_flows(worker, dataflows, length)
    regions: list[Subgraph] = []
    ops: list[list[OperatorCore]] = []
    for d in range(dataflows):
        root = worker._dataflows[d + 1]  # dataflow 0 is the source with the arrangement
        (region,) = [c for c in root.children if isinstance(c, Subgraph)]
        names = [getattr(c, "name", "") for c in root.children[1:]]
        assert names == ["Import(SharedArrange)", "Select", "Region", "Probe"]
        inner = list(region.children[1:])
        assert [op.name.partition("(")[0] for op in inner] == ["Filter"] * (length - 1)
        regions.append(region)
        ops.append(inner)
    while worker._active:
        worker.step()

    def filters() -> list[list[int]]:
        return [
            [region.invocations] + [op.invocations for op in inner]
            for region, inner in zip(regions, ops)
        ]

    for r in range(3 * dataflows):
        touched = r % dataflows
        before = filters()
        session.update((touched, r), 1)
        session.advance_to(r + 1)
        handle.set_logical_compaction([r + 1])
        steps = 0
        while any(p.less_than(r + 1) for p in probes):
            worker.step()
            steps += 1
            assert steps < 100, "round does not complete"
        after = filters()
        for d in range(dataflows):
            ran = [a - b for a, b in zip(after[d], before[d])]
            if d == touched:
                assert ran[0] >= 1 and ran[1:] == [1] * (length - 1), (r, d)  # once per filter
            else:
                assert not any(ran), (r, d)  # idle: its region is not even visited
    # The shared trace compacted as the handle advanced: one update per live (key, value).
    assert handle.trace.statistics()["since"] == [3 * dataflows]
    assert handle.trace.statistics()["updates"] == 3 * dataflows
    session.close()
    worker.run()
    assert all(region.invocations > 0 for region in regions)
