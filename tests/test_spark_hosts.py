"""Spark across three hosts: network namespaces on a private bridge (``tests/netns.py``).

Host 0 runs the standalone master and the driver, hosts 1, 2 and 3 a Spark worker each (one
core: each of the two pytimely workers lands in an executor of its own, on its own host, and
one host is spare).  Nothing binds
loopback: the launcher's defaults (listen on every interface of the host, advertise the
executor's address) must carry the mesh and the control connections between hosts.  A host
cut off mid-run (its link down) is named within the heartbeat timeout, never a hang."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from netns import Hosts, available

from pytimely.spark.standalone import Host, StandaloneCluster

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def cluster():
    why = available()
    if why is not None:  # pragma: no cover - CI runs the suite as root
        pytest.skip(why)
    with Hosts(4) as hosts:
        placed = [Host(a, tuple(hosts.prefix(i))) for i, a in enumerate(hosts.addresses)]
        with StandaloneCluster(workers=3, master_host=placed[0], worker_hosts=placed[1:]) as sc:
            yield hosts, sc


def run_driver(sc, argv, timeout=300):
    """Run ``argv`` (a command for the master's host) with the driver's environment."""
    done = subprocess.run(
        argv,
        env=sc.driver_environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_the_keyed_count_runs_with_one_worker_on_each_host(cluster, tmp_path):
    hosts, sc = cluster
    out = tmp_path / "wordcount"
    run_driver(sc, sc.demo_command("--out", str(out), "--workload", "wordcount", "--rows", "20000"))
    with open(out / "summary.json", encoding="utf-8") as f:
        summary = json.load(f)
    assert summary["ok"] and summary["missing"] == summary["extra"] == 0 and summary["replay_ok"]
    executors = {p["executor"].rsplit(":", 1)[0] for p in summary["placement"]}
    assert len(executors) == 2 and executors <= set(hosts.addresses[1:])  # a host each


def test_nexmark_runs_with_one_worker_on_each_host(cluster, tmp_path):
    # Q1-Q8 across the hosts, each query's output checked by the demo against Spark's own
    # answer over the same events, and the capture replayed.
    hosts, sc = cluster
    out = tmp_path / "nexmark"
    argv = ["--workload", "nexmark", "--events", "20000", "--epochs", "4"]
    run_driver(sc, sc.demo_command("--out", str(out), *argv, "--latency-rates", "none"))
    with open(out / "summary.json", encoding="utf-8") as f:
        summary = json.load(f)
    assert summary["ok"], {k: v for k, v in summary.items() if k != "placement"}
    executors = {p["executor"].rsplit(":", 1)[0] for p in summary["placement"]}
    assert len(executors) == 2 and executors <= set(hosts.addresses[1:])  # a host each


def partition_worker_0(hosts, driver, marker):
    """Once worker 0 wrote its host into ``marker``, cut that host off until ``driver`` ends;
    the driver's output and the time of the cut."""
    cut = None
    try:
        deadline = time.monotonic() + 180
        while not marker.exists() and time.monotonic() < deadline and driver.poll() is None:
            time.sleep(0.1)
        assert marker.exists(), driver.communicate(timeout=30)
        cut = hosts.addresses.index(marker.read_text())
        cut_at = time.time()
        hosts.cut(cut)
        stdout, stderr = driver.communicate(timeout=180)
    finally:
        if cut is not None:
            hosts.heal(cut)
        if driver.poll() is None:
            driver.kill()
    return stdout, stderr, cut_at


PARTITIONED = r"""
import json, os, sys, time
import pytimely as pt
from pytimely import spark as ps
from pytimely.spark.executor import worker_placement

master, conf, marker, attempts = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
spark = ps.connect(master, conf=conf)
retried = marker + ".retry"

def work(worker):
    def build(scope):
        inp, stream = scope.new_input()
        return inp, stream.exchange(lambda x: x).probe()
    inp, probe = worker.dataflow(build)
    epoch = 0
    again = os.path.exists(retried)  # the second attempt: finish, say where it ran
    while not again or epoch < 20:  # the first: until the partition stops it
        inp.send_batch(list(range(100)))
        epoch += 1
        inp.advance_to(epoch)
        worker.step_while(lambda: probe.less_than(epoch), timeout=300)
        if epoch == 20 and worker.index == 0 and not again:
            open(retried, "w").close()
            with open(marker + ".tmp", "w") as f:
                f.write(worker_placement()["executor"].rsplit(":", 1)[0])
            os.replace(marker + ".tmp", marker)
        time.sleep(0.05)
    return worker_placement()["executor"].rsplit(":", 1)[0]

try:
    hosts = ps.run(spark, work, workers=2, timeout=240, grace=5, attempts=attempts)
    print(json.dumps({"error": None, "hosts": hosts, "at": time.time()}))
except Exception as e:
    print(json.dumps({"error": type(e).__name__, "message": str(e)[:2000], "at": time.time()}))
"""


#: The workers' heartbeat timeout for the partition test (the default is 20 s).
HEARTBEAT = {"spark.executorEnv.PYTIMELY_HEARTBEAT_TIMEOUT": "5"}


def start_partitioned(sc, marker, attempts):
    return subprocess.Popen(
        [
            *sc.driver_prefix(),
            sys.executable,
            "-c",
            PARTITIONED,
            sc.master_url,
            json.dumps({**sc.application_conf(), **HEARTBEAT}),
            str(marker),
            str(attempts),
        ],
        env=sc.driver_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_partitioned_host_is_named_within_the_heartbeat_timeout(cluster, tmp_path):
    hosts, sc = cluster
    marker = tmp_path / "running"
    driver = start_partitioned(sc, marker, attempts=1)
    stdout, stderr, cut_at = partition_worker_0(hosts, driver, marker)
    report = json.loads(stdout.strip().splitlines()[-1])
    assert report["error"] == "WorkerFailure", stderr[-3000:]
    # Named within the heartbeat timeout, plus its check period and the driver's reaction.
    assert report["at"] - cut_at < 5 + 5, (report["at"] - cut_at, report["message"])
    assert "heartbeat timeout 5 s" in report["message"]
    assert "worker" in report["message"]


def test_a_second_attempt_runs_on_the_hosts_that_remain(cluster, tmp_path):
    """``attempts=2``: after the partition is named, the stage runs again from scratch; the
    lost executor's slot still looks busy to Spark, so the workers land on the two hosts that
    can reach each other, and the run finishes."""
    hosts, sc = cluster
    marker = tmp_path / "running"
    driver = start_partitioned(sc, marker, attempts=2)
    stdout, stderr, cut_at = partition_worker_0(hosts, driver, marker)
    report = json.loads(stdout.strip().splitlines()[-1])
    assert report["error"] is None, (report, stderr[-3000:])
    cut_host = marker.read_text()
    assert len(set(report["hosts"])) == 2 and cut_host not in report["hosts"]
    assert report["at"] - cut_at < 60
