"""A real Spark standalone cluster: a master and two 1-core workers as separate JVMs on
127.0.0.1, with authentication; the documented ``python -m pytimely.demo --master`` command
runs the keyed count and the NEXMark main job on it, each with its two pytimely workers in
different executors, and the cluster's processes are all gone afterwards."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

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
    done = subprocess.run(
        cluster.demo_command("--out", str(out), *options),
        env=cluster.driver_environment(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        return json.load(f)


def assert_two_executors(summary):
    placed = summary["placement"]
    assert len(placed) == 2
    assert len({p["executor"] for p in placed}) == 2  # two executor JVMs
    assert len({p["pid"] for p in placed}) == 2


KILL_EXECUTOR_JOB = r"""
import json, os, signal, sys
from pytimely import spark as ps

master, flag, out, conf = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
spark = ps.connect(master, conf=conf)


def executor_jvm():
    pid = os.getpid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"CoarseGrainedExecutorBackend" in f.read():
                return pid
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    raise RuntimeError("no executor JVM above this process")


def work(worker):
    first_attempt = not os.path.exists(flag)

    def build(scope):
        inp, stream = scope.new_input()
        counts = (stream.exchange(lambda x: x).map(lambda x: (x % 3, 1))
                  .aggregate(lambda k, v, acc: acc + v, lambda k, acc: (k, acc)))
        written = ps.write_parquet(counts, out, columns=["k", "count"], roll_seconds=0.2)
        return inp, written.probe()

    inp, probe = worker.dataflow(build)
    for epoch in range(4):
        inp.send_batch(list(range(worker.index, 30, worker.peers)))
        inp.advance_to(epoch + 1)
        if epoch == 1:
            worker.step_while(lambda: probe.less_than(2), timeout=60)
            if first_attempt and worker.index == 1:
                open(flag, "w").close()
                os.kill(executor_jvm(), signal.SIGKILL)
    return worker.index


results = ps.run(spark, work, workers=2, attempts=2, grace=3)
rows = sorted(tuple(r) for r in spark.read.parquet(out).select("epoch", "k", "count").collect())
print(json.dumps({"results": results, "rows": rows}))
"""


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_attempts_survive_a_killed_executor_on_the_cluster(standalone, tmp_path):
    flag, out = str(tmp_path / "killed-once"), str(tmp_path / "counts")
    argv = [
        sys.executable,
        "-c",
        KILL_EXECUTOR_JOB,
        standalone.master_url,
        flag,
        out,
        json.dumps(standalone.application_conf()),
    ]
    done = subprocess.run(
        argv,
        env=standalone.driver_environment(),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-6000:]
    assert os.path.exists(flag)  # an executor was killed in the first attempt
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["results"] == [0, 1]
    want = sorted([e, k, 10] for e in range(4) for k in range(3))
    assert report["rows"] == want  # a clean run's output: nothing lost, nothing twice
    files = sorted(
        os.path.relpath(os.path.join(b, f), out) for b, _d, fs in os.walk(out) for f in fs
    )
    # Only the committed files of the attempt that succeeded (rolling files of the epochs).
    assert files and all(re.fullmatch(r"worker=[01]/part-\d+-\d+\.parquet", f) for f in files)


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_keyed_count_and_nexmark_on_a_standalone_cluster(standalone, tmp_path):
    groups = set(standalone.pids())
    assert len(groups) == 3  # the master and two workers

    counts = run_demo(
        standalone,
        tmp_path / "wordcount",
        "--workload",
        "wordcount",
        "--rows",
        "20000",
        "--epochs",
        "4",
    )
    assert counts["ok"] and counts["missing"] == counts["extra"] == 0 and counts["replay_ok"]
    assert_two_executors(counts)

    nexmark = run_demo(
        standalone,
        tmp_path / "nexmark",
        "--workload",
        "nexmark",
        "--events",
        "20000",
        "--epochs",
        "4",
        "--latency-rates",
        "none",
    )
    assert nexmark["ok"] and nexmark["events_ok"]
    assert all(q["equal"] for q in nexmark["queries"].values())
    assert_two_executors(nexmark)

    members = group_members(groups)
    assert set(standalone.pids()) <= set(members)
    standalone.stop()
    assert group_members(groups) == []
