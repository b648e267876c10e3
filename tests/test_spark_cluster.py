"""A real Spark standalone cluster: a master and two 1-core workers as separate JVMs on
127.0.0.1, with authentication; the documented ``python -m pytimely.demo --master`` command
runs the keyed count and the NEXMark main job on it, each with its two pytimely workers in
different executors, and the cluster's processes are all gone afterwards."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from pytimely.spark.standalone import StandaloneCluster


def group_members(groups):
    """Pids of every live process whose process group is one of ``groups`` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        state, pgid = fields[0], int(fields[2])
        if pgid in groups and state not in ("Z", "X"):
            found.append(int(entry))
    return found


@pytest.fixture(scope="module")
def standalone():
    cluster = StandaloneCluster(workers=2, cores=1).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def run_demo(cluster, out, *options):
    done = subprocess.run(cluster.demo_command("--out", str(out), *options),
                          env=cluster.driver_environment(), capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        return json.load(f)


def assert_two_executors(summary):
    placed = summary["placement"]
    assert len(placed) == 2
    assert len({p["executor"] for p in placed}) == 2  # two executor JVMs
    assert len({p["pid"] for p in placed}) == 2


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_keyed_count_and_nexmark_on_a_standalone_cluster(standalone, tmp_path):
    groups = set(standalone.pids())
    assert len(groups) == 3  # the master and two workers

    counts = run_demo(standalone, tmp_path / "wordcount", "--workload", "wordcount",
                      "--rows", "20000", "--epochs", "4")
    assert counts["ok"] and counts["missing"] == counts["extra"] == 0 and counts["replay_ok"]
    assert_two_executors(counts)

    nexmark = run_demo(standalone, tmp_path / "nexmark", "--workload", "nexmark",
                       "--events", "20000", "--epochs", "4", "--latency-rates", "none")
    assert nexmark["ok"] and nexmark["events_ok"]
    assert all(q["equal"] for q in nexmark["queries"].values())
    assert_two_executors(nexmark)

    members = group_members(groups)
    assert set(standalone.pids()) <= set(members)
    standalone.stop()
    assert group_members(groups) == []
