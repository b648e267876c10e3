"""``bench/latency.py`` without Bytewax: pytimely's side of the open-loop comparison runs and
reports every quantile (a smoke test of the benchmark's shape; its figures are the benchmark's
business)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "latency.py"


def test_pytimely_side_reports_its_quantiles_per_rate() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--rates", "2000,5000", "--duration", "0.3", "--repeat", "1",
         "--parked"],
        capture_output=True, text=True, timeout=100,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert set(report["rates"]) == {"2000", "5000"}
    assert report["pytimely_quantum_log2"] == 16 and report["pytimely_sink_quantum_log2"] == 20
    for systems in report["rates"].values():
        # no --bytewax: its side not run
        assert set(systems) == {"pytimely", "pytimely_sink", "pytimely_sink_parked"}
        for runs in systems.values():  # each run's CPU seconds (a run lasts 0.8 s)
            assert 0 < runs["cpu_s"] < 30 and runs["every_run"][0]["cpu_s"] == runs["cpu_s"]
        figures = systems["pytimely"]
        assert figures["runs"] == 1
        if not figures["dnf_runs"]:  # a busy machine may DNF; then no quantile is claimed
            assert 0 < figures["p50_ms"] <= figures["p99_ms"] <= figures["max_ms"]
            # A result reaches the sink before the system can say its time is complete.
            assert 0 < figures["seen_p50_ms"] <= figures["p50_ms"]
            assert figures["seen_p50_ms"] <= figures["seen_p99_ms"] <= figures["seen_max_ms"]
        for sink in (systems["pytimely_sink"], systems["pytimely_sink_parked"]):
            assert sink["runs"] == 1 and "p50_ms" not in sink
            if not sink["dnf_runs"]:
                assert 0 < sink["seen_p50_ms"] <= sink["seen_p999_ms"] <= sink["seen_max_ms"]


def test_a_wrong_rate_is_a_usage_error_not_a_traceback() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--rates", "100000,fast"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "argument --rates: not a comma-separated list of numbers" in done.stderr
    assert "Traceback" not in done.stderr
