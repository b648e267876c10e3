"""``bench/scaling.py --quick`` runs on 1 worker and 2 processes and gets every answer right.

A smoke test of the benchmark's shape and answers only: its speed is the benchmark's business
(timed tests on a shared machine would be noise).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "scaling.py"
WORKLOADS = {"keyed_count", "batch_count", "components", "bfs", "pagerank", "cpu_map"}


def test_quick_run_reports_every_workload_with_correct_answers(tmp_path: Path) -> None:
    out = tmp_path / "scaling.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--repeat", "2", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert json.loads(done.stdout) == report
    assert report["benchmark"] == "scaling"
    assert set(report["workloads"]) == WORKLOADS
    for name, figures in report["workloads"].items():
        assert figures["ok"] is True, name
        assert set(figures) == {"1", "2", "cpu_efficiency", "speedup", "runs", "ok"}
        assert len(figures["runs"]) == 2  # --repeat 2: the median of two runs
        efficiencies = sorted(run["cpu_efficiency"] for run in figures["runs"])
        assert figures["cpu_efficiency"] == pytest.approx(sum(efficiencies) / 2)
        assert len(figures["2"]["cpu_per_process_s"]) == 2
        for side in ("1", "2"):
            assert figures[side]["wall_s"] >= 0 and figures[side]["cpu_s"] >= 0
        assert figures["cpu_efficiency"] > 0 and figures["speedup"] > 0
    # The machine's load over the runs is in the report, so a reader can tell a quiet run.
    machine = report["machine"]
    assert machine["cpus"] >= 1 and machine["seconds"] > 0
    assert set(machine) == {"cpus", "seconds", "others_cpus", "loadavg_before", "loadavg_after"}
    assert isinstance(report["quiet"], bool)
    assert "machine: " in done.stderr and "CPUs" in done.stderr


def test_unknown_workload_is_refused_by_name() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--workloads", "keyed_count,nonesuch"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "unknown workloads ['nonesuch']" in done.stderr


def test_workers_reports_cpu_per_record_and_messages_for_each_count() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--repeat", "1", "--workers", "1,3",
         "--workloads", "keyed_count,batch_count"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["benchmark"] == "scaling-growth" and report["workers"] == [1, 3]
    for name in ("keyed_count", "batch_count"):
        rows = report["workloads"][name]
        assert set(rows) == {"1", "3"}
        assert all(row["ok"] and row["cpu_ns_per_record"] > 0 for row in rows.values())
        assert rows["1"]["messages"] == 0 and rows["3"]["messages"] > 0


def test_equal_load_runs_the_smaller_count_beside_stand_ins_and_reports_it_apart() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--repeat", "1", "--workers", "1,3",
         "--workloads", "batch_count", "--equal-load"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["workloads"]["batch_count"]
    assert set(rows) == {"1", "3", "equal_load"}
    equal = rows["equal_load"]
    assert list(equal) == ["1", "3"]
    assert equal["1"]["stand_ins"] == 2 and equal["3"]["stand_ins"] == 0
    assert equal["1"]["ok"] and equal["1"]["messages"] == 0 and equal["1"]["cpu_ns_per_record"] > 0
    # The largest count is its own equal load: the same figures as its plain row.
    assert {k: v for k, v in equal["3"].items() if k != "stand_ins"} == rows["3"]


def test_equal_load_without_workers_and_a_wrong_count_are_usage_errors() -> None:
    for argv, says in (
        (["--equal-load"], "--equal-load compares the counts of --workers"),
        (["--workers", "1,two"], "--workers takes positive numbers of workers"),
    ):
        done = subprocess.run(
            [sys.executable, str(SCRIPT), "--quick", *argv],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr
