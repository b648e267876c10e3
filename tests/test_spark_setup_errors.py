"""Spark set-up mistakes on a real standalone cluster are one clear error within seconds.

Without these checks, a master with no worker able to host an executor let ``ps.run`` wait 60 s
for task slots (Spark itself only warns "Initial job has not accepted any resources" and waits
forever), and executors on another Python minor version failed with PySpark's traceback
inside a ``SparkJobFailed`` about a barrier stage."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

from pytimely.spark.standalone import StandaloneCluster

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

JOB = r"""
import json, sys, time
import pytimely.spark as ps

master, conf = sys.argv[1], json.loads(sys.argv[2])
spark = ps.connect(master, conf=conf)
start = time.monotonic()
try:
    ps.run(spark, lambda worker: worker.index, workers=2)
    print(json.dumps({"error": None}))
except ps.SparkSetupError as e:
    print(json.dumps({"error": type(e).__name__, "message": str(e),
                      "seconds": time.monotonic() - start, "frames": e.jvm_frames}))
spark.stop()
"""


def run_job(cluster, conf):
    done = subprocess.run(
        [sys.executable, "-c", JOB, cluster.master_url, json.dumps(conf)],
        env=cluster.driver_environment(),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def other_python():
    """An interpreter of another minor version than this one, or None."""
    mine = f"{sys.version_info.major}.{sys.version_info.minor}"
    candidates = sorted(glob.glob("/root/.pyenv/versions/3.*/bin/python3.*"))
    candidates += sorted(glob.glob("/usr/bin/python3.*"))
    for path in candidates:
        name = os.path.basename(path)
        if name.count(".") == 1 and not name.endswith(mine) and os.access(path, os.X_OK):
            probe = subprocess.run(
                [path, "-c", "import sys; print(sys.version_info >= (3, 9))"],
                capture_output=True,
                text=True,
                check=False,
            )
            if probe.stdout.strip() == "True":  # PySpark's worker module must import
                return path
    return None


def test_a_master_without_workers_is_named_within_ten_seconds():
    with StandaloneCluster(workers=0) as cluster:
        report = run_job(cluster, cluster.application_conf())
    assert report["error"] == "NotEnoughSlots"
    assert report["seconds"] < 10
    message = report["message"]
    assert "no executor has registered" in message and cluster.master_url in message
    assert "start-worker.sh" in message


def test_executors_on_another_python_version_are_a_setup_error():
    python = other_python()
    if python is None:  # pragma: no cover - the CI image has pyenv's interpreters
        pytest.skip("no Python of another minor version on this machine")
    with StandaloneCluster(workers=1, cores=2) as cluster:
        conf = {**cluster.application_conf(), "spark.pyspark.python": python}
        report = run_job(cluster, conf)
    assert report["error"] == "SparkSetupError"
    assert report["seconds"] < 10
    mine = f"{sys.version_info.major}.{sys.version_info.minor}"
    message = report["message"]
    assert f"this driver Python {mine}" in message and python in message
    assert "\tat " not in message  # JVM frames are kept apart
