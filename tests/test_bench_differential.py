"""bench/differential.py, small and pytimely only: the report's shape and right answers.

The benchmark checks every run's final answer (the counts per key; the reachable set) against
a plain-Python computation from scratch and exits non-zero when one differs; here it runs in a
few seconds (no Pathway in the suite).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

BENCH = os.path.join(os.path.dirname(__file__), "..", "bench", "differential.py")


def _bench(*args: str) -> dict:
    done = subprocess.run(
        [sys.executable, BENCH, *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_differential_bench_small():
    out = _bench(
        "--updates", "20000", "--batch", "2000", "--keys", "300",
        "--edges", "3000", "--rounds", "6", "--changes", "100", "--repeat", "2",
    )  # fmt: skip
    assert out["benchmark"] == "differential" and out["workers"] == 1
    assert out["correct"] is True
    assert out["parameters"]["reach"] == {
        "edges": 3000, "nodes": 1500, "roots": 3, "rounds": 6, "changes": 100,
    }  # fmt: skip
    assert len(out["machine"]["loadavg_before"]) == 3 and len(out["loadavg_end"]) == 3
    assert out["notes"]

    count = out["results"]["count"]
    # count() and the reduce it uses inside loops; no Pathway without --pathway
    assert set(count) == {"pytimely", "pytimely_reduce", "live_keys"}
    assert 0 < count["live_keys"] <= 300
    for mine in (count["pytimely"], count["pytimely_reduce"]):
        assert mine["correct"] is True and mine["runs"] == 2 and len(mine["every_run"]) == 2
        for key in ("wall_s", "cpu_s", "updates_per_s", "peak_rss_mb"):
            assert mine[key] > 0
        for run in mine["every_run"]:
            assert run["updates"] == 20000 and run["live_keys"] == count["live_keys"]
    for run in count["pytimely_reduce"]["every_run"]:
        # The keys' arrangement, compacted, is within a small factor of the live keys.
        assert count["live_keys"] <= run["trace_updates"] <= 20000

    reach = out["results"]["reach"]
    mine = reach["pytimely"]
    assert mine["correct"] is True and mine["runs"] == 2
    assert mine["initial_s"] > 0
    assert 0 < mine["round_p50_ms"] <= mine["round_p90_ms"] <= mine["round_max_ms"]
    assert 0 < mine["round_first10_mean_ms"] <= mine["round_max_ms"]
    assert 0 < mine["round_mean_ms"] <= mine["round_max_ms"]
    assert 0 < mine["round_last10_mean_ms"] <= mine["round_max_ms"]
    assert reach["reachable"] > 3
    for run in mine["every_run"]:
        assert run["reachable"] == reach["reachable"]
        assert run["trace_updates"] >= 3000  # the live edges, at least


def test_differential_bench_help():
    done = subprocess.run([sys.executable, BENCH, "--help"], capture_output=True, text=True)
    assert done.returncode == 0
    assert "--pathway PYTHON" in done.stdout and "Pathway" in done.stdout
