"""``bench/chain.py`` compares nothing observed, statistics and full logging in one run.

A smoke test of the benchmark's shape only: its speed is the benchmark's business (timed
tests on a shared machine would be noise).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "chain.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=100
    )


def test_one_run_reports_every_configuration_and_its_overhead_ratio() -> None:
    done = _run("--lengths", "4,16", "--rounds", "12", "--block", "5")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["operator"] == "map_batch"  # ordinary operators: the scheduling is measured
    assert [r["length"] for r in report["results"]] == [4, 16]
    for result in report["results"]:
        configs = result["configs"]
        assert list(configs) == ["off", "statistics", "log"]
        assert {f["rounds"] for f in configs.values()} == {12}
        assert configs["log"]["events_logged"] > 0
        assert "events_logged" not in configs["statistics"]
        assert set(result["overhead"]) == {"statistics", "log"}
        for ratios in result["overhead"].values():
            assert ratios["cpu"] > 0 and ratios["wall"] > 0


def test_unknown_configuration_is_refused_by_name() -> None:
    done = _run("--lengths", "4", "--rounds", "2", "--configs", "off,verbose")
    assert done.returncode != 0
    assert "verbose" in done.stderr


def test_maps_builds_the_chain_of_map() -> None:
    done = _run("--lengths", "4", "--rounds", "4", "--block", "2", "--configs", "off,log", "--maps")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["operator"] == "map"
    (result,) = report["results"]
    # Logged, the maps forward in invocations of their own: every one of them is logged.
    assert result["configs"]["log"]["events_logged"] >= 4 * 4
