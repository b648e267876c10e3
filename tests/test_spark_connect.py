"""``ps.run`` from a classic session and from a Spark Connect session: the same results, the
same errors, retries and staged outputs (:mod:`pytimely.spark.remote` on Connect: a barrier
``mapInArrow`` stage, no RDD, no ``SparkContext``, no driver-side server)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

import pytimely as pt
from pytimely import spark as ps
from pytimely.errors import WorkerFailure

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]


def counted(worker):
    """Counts of ``x % 5`` over 0..99, exchanged by key; each worker returns its own."""

    def build(scope):
        inp, numbers = scope.new_input()
        out = []
        (
            numbers.map(lambda x: (x % 5, 1))
            .aggregate(lambda _k, v, acc: acc + v, lambda k, acc: (k, acc))
            .inspect(out.append)
        )
        return inp, out

    inp, out = worker.dataflow(build)
    inp.send_batch(list(range(worker.index, 100, worker.peers)))
    inp.close()
    worker.run()
    return sorted(out)


def test_results_come_back_in_worker_order(any_spark):
    results = ps.run(any_spark, counted, workers=2)
    assert len(results) == 2
    assert sorted(pair for part in results for pair in part) == [(k, 20) for k in range(5)]
    assert results[0] == [(0, 20), (2, 20), (4, 20)]  # even keys live on worker 0


def raising_on_worker_1(worker):
    if worker.index == 1:
        raise ValueError("no such user: 'ann'")
    worker.step_while(lambda: True, timeout=60)


def test_a_failing_worker_is_named_with_its_traceback(any_spark):
    start = time.monotonic()
    with pytest.raises(WorkerFailure) as err:
        ps.run(any_spark, raising_on_worker_1, workers=2)
    assert time.monotonic() - start < 30
    message = str(err.value)
    assert message.startswith("worker 1 failed: ValueError: no such user: 'ann'")
    assert "test_spark_connect.py" in message and "raising_on_worker_1" in message
    assert err.value.worker == 1


def forever(worker):
    worker.step_while(lambda: True, timeout=600)


def test_the_timeout_stops_the_workers(any_spark):
    start = time.monotonic()
    with pytest.raises(ps.SparkJobFailed, match="timeout") as err:
        ps.run(any_spark, forever, workers=2, timeout=3)
    assert time.monotonic() - start < 40
    assert err.value.retryable is False
    # The slots are free again: the next run starts and finishes.
    assert len(ps.run(any_spark, counted, workers=2)) == 2


def test_a_retried_run_leaves_exactly_the_clean_run_s_files(any_spark, tmp_path):
    flag, out = str(tmp_path / "failed-once"), str(tmp_path / "counts")

    def work(worker):
        def build(scope):
            inp, numbers = scope.new_input()
            counts = numbers.map(lambda x: (x % 5, 1)).aggregate(
                lambda _k, v, acc: acc + v, lambda k, acc: (k, acc)
            )
            written = ps.write_parquet(counts, out, columns=["k", "count"], roll_seconds=0.2)
            return inp, written.probe()

        inp, probe = worker.dataflow(build)
        inp.send_batch(list(range(worker.index, 100, worker.peers)))
        inp.advance_to(1)
        worker.step_while(lambda: probe.less_than(1), timeout=60)
        if worker.index == 1 and not os.path.exists(flag):
            open(flag, "w").close()
            raise RuntimeError("first attempt fails after writing epoch 0")
        return worker.index

    assert ps.run(any_spark, work, workers=2, attempts=2) == [0, 1]
    table = ps.read_output(out, columns=["k", "count"])
    rows = sorted(zip(table["k"].to_pylist(), table["count"].to_pylist()))
    assert rows == [(k, 20) for k in range(5)]  # each count once: the failed attempt discarded
    staging = os.path.join(out, "_pytimely_staging")
    assert not os.path.exists(staging) or os.listdir(staging) == []


def test_run_to_dataframe(any_spark):
    df = ps.run_to_dataframe(any_spark, counted, workers=2, schema="k long, count long")
    assert sorted(tuple(r) for r in df.collect()) == [(k, 20) for k in range(5)]


def test_run_on_dataframe_sessionizes_each_partition(any_spark):
    rows = [(user, t) for user in range(6) for t in (510, 0, 20, 10, 500)]
    df = any_spark.createDataFrame(rows, "user long, ts long")

    def build(scope, stream):
        sessions = stream.window_count(
            pt.Session(100), key=lambda r: r[0], event_time=lambda r: r[1]
        )
        found = []
        sessions.output.inspect(found.append)
        return found

    results = ps.run_on_dataframe(
        df, build, time="ts", delay=0, key="user", records="tuples", workers=2
    )
    assert len(results) == 2 and all(results)  # both workers had users
    expected = [(user, 0, 120, 3) for user in range(6)] + [(u, 500, 610, 2) for u in range(6)]
    assert sorted(s for part in results for s in part) == sorted(expected)


def test_a_streaming_bridge_without_a_slot_beside_its_workers_is_said_at_once(connect_spark):
    start = time.monotonic()
    with pytest.raises(ps.NotEnoughSlots, match=r"4 pytimely workers \+ 1 for Spark jobs"):
        ps.StreamingBridge(connect_spark, lambda scope, stream: stream.probe(), workers=4)
    with pytest.raises(ValueError, match=r"options \['dashboard'\] are not available"):
        ps.StreamingBridge(connect_spark, lambda scope, stream: None, workers=1, dashboard=0)
    assert time.monotonic() - start < 5


def test_too_few_slots_on_a_local_connect_server_is_said_at_once(connect_spark):
    start = time.monotonic()
    with pytest.raises(ps.NotEnoughSlots, match=r"local\[4\]"):
        ps.run(connect_spark, counted, workers=5)
    assert time.monotonic() - start < 5


@pytest.mark.timeout(300)
def test_the_demo_runs_through_a_connect_server(connect_server, tmp_path):
    """``python -m pytimely.demo --remote sc://...``: the word count and NEXMark's queries, the
    data written and checked by Spark through the Connect session, in a process of its own
    (pure Connect: no classic session beside it)."""
    for workload, size in (("wordcount", ["--rows", "20000"]), ("nexmark", ["--events", "20000"])):
        out = tmp_path / workload
        done = subprocess.run(
            [sys.executable, "-m", "pytimely.demo", "--remote", connect_server.url,
             "--workload", workload, "--out", str(out), *size, "--latency-rates", "none"],
            capture_output=True, text=True, timeout=240, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        summary = json.loads((out / "summary.json").read_text())
        assert summary["ok"], summary
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nobody = f"sc://127.0.0.1:{s.getsockname()[1]}"
    refused = subprocess.run(
        [sys.executable, "-m", "pytimely.demo", "--remote", nobody, "--workload", "wordcount"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    said = f"pytimely demo: no Spark Connect server answers at '{nobody}'"
    assert refused.stderr.startswith(said)
    assert "--remote takes a Spark Connect URL" in subprocess.run(
        [sys.executable, "-m", "pytimely.demo", "--remote", "spark://127.0.0.1:7077"],
        capture_output=True, text=True, timeout=60, check=False,
    ).stderr  # fmt: skip
