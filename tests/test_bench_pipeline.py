"""``bench/pipeline.py`` on a small hour of clicks: the sessions equal pandas', a file per
worker, and the report carries what the README quotes.

A smoke test of the benchmark's shape and answers only: its speed is the benchmark's business
(timed tests on a shared machine would be noise).  It runs in-process on the session's Spark
(``local_session`` reuses the running context).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "pipeline.py"


@pytest.mark.spark
@pytest.mark.timeout(240)
def test_a_small_run_equals_pandas_with_one_file_per_worker(spark, capsys):
    spec = importlib.util.spec_from_file_location("bench_pipeline", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    report = bench.main(["--clicks", "4000", "--users", "60", "--repeat", "1", "--baseline",
                         "--baseline-clicks", "1000"])  # fmt: skip
    ours = report["pytimely"]
    assert ours["equal_to_pandas"] and report["baseline_epoch_column"]["equal_to_pandas"]
    assert ours["files_per_worker"] == {"worker=0": 1, "worker=1": 1}
    assert ours["dataflow_s"] > 0 and ours["dataflow_cpu_s"] > 0 and report["sessions"] > 60
    assert set(report["machine"]) == {"cpus", "load_before", "load_after"}
    assert '"benchmark": "pipeline"' in capsys.readouterr().out
