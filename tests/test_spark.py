"""pytimely on Spark: barrier-stage workers, DataFrames in, Parquet out, streaming, failures.

All Spark tests share one ``local[4]`` session (``conftest.py``); each is bounded in time.
"""

from __future__ import annotations

import collections
import os
import time

import pytest

import pytimely as pt
from pytimely import spark as ps
from pytimely.capture import replay_into
from pytimely.errors import WorkerFailure
from pytimely.spark.dataframe import functions_for


def keyed_count(stream):
    return stream.aggregate(lambda k, v, acc: acc + v, lambda k, acc: (k, acc))


def epoch_rows(directory):
    """What write_parquet wrote, as sorted ``(epoch, key, count)``."""
    import pyarrow.parquet as pq

    rows = []
    for base, _dirs, files in os.walk(directory):
        for name in files:
            if name.endswith(".parquet"):
                t = pq.read_table(os.path.join(base, name))
                rows.extend(zip(t["epoch"].to_pylist(), t["k"].to_pylist(), t["count"].to_pylist()))
    return sorted(rows)


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (read from /proc, no psutil)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_gone(pids, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.2)
    return [p for p in pids if alive(p)]


def read_pids(directory):
    pids = []
    for i in range(2):
        with open(os.path.join(directory, f"pid-{i}"), encoding="utf-8") as f:
            pids.append(int(f.read()))
    return pids


# --- guards that need no Spark ---------------------------------------------------------------


class FakeConf(dict):
    def get(self, key, default=None):
        return super().get(key, default)


class FakeContext:
    def __init__(self, master, conf, slots=8):
        self.master = master
        self._conf = FakeConf(conf)
        self.pythonExec = "python3"
        self._slots = slots

    def getConf(self):
        return self._conf

    @property
    def _jsc(self):
        raise RuntimeError("no JVM here")


def test_dynamic_allocation_is_refused_before_submitting():
    sc = FakeContext("yarn", {"spark.dynamicAllocation.enabled": "true"})
    with pytest.raises(ps.SparkSetupError, match="dynamicAllocation.enabled=false"):
        ps.check_deployable(sc, 2)


def test_slot_count_from_master_url():
    with pytest.raises(ps.NotEnoughSlots, match=r"need 3 concurrent task slots.*has 2"):
        ps.check_deployable(_local_fake("local[2]"), 3)
    ps.check_deployable(_local_fake("local[2]"), 2)
    with pytest.raises(ps.NotEnoughSlots, match="local-cluster"):
        ps.check_deployable(_local_fake("local-cluster[2,1,1024]"), 2, extra_slots=1)


def _local_fake(master):
    import sys

    sc = FakeContext(master, {})
    sc.pythonExec = sys.executable
    return sc


def test_ship_package_zips_pytimely_for_executors(tmp_path):
    import zipfile

    added = []

    class FakeSpark:
        class sparkContext:
            @staticmethod
            def addPyFile(path):
                added.append(path)

    path = ps.ship_package(FakeSpark, str(tmp_path))
    assert added == [path]
    names = set(zipfile.ZipFile(path).namelist())
    assert {"pytimely/__init__.py", "pytimely/spark/launcher.py", "pytimely/py.typed"} <= names
    assert not any("__pycache__" in n for n in names)


# --- Spark ----------------------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_run_returns_worker_results_in_order(any_spark):
    def work(worker):
        def build(scope):
            inp, stream = scope.new_input()
            cap = stream.exchange(lambda x: x).map(lambda x: (x % 2, 1))
            return inp, keyed_count(cap).capture()

        inp, cap = worker.dataflow(build)
        for epoch in range(3):
            for x in range(worker.index, 20, worker.peers):
                inp.send(x)
            inp.advance_to(epoch + 1)
        inp.close()
        worker.run()
        return worker.index, worker.peers, os.getpid(), cap.extract()

    results = ps.run(any_spark, work, workers=2)
    assert [r[:2] for r in results] == [(0, 2), (1, 2)]
    assert results[0][2] != results[1][2] != os.getpid()  # two separate Python workers
    merged = collections.Counter()
    for *_ignored, extracted in results:
        for t, records in extracted:
            for k, c in records:
                merged[t, k] += c
    assert merged == {(t, k): 10 for t in range(3) for k in (0, 1)}

    assert ps.run(any_spark, lambda w: (w.index, w.peers), workers=1) == [(0, 1)]

    rows = ps.run_to_dataframe(
        any_spark, lambda w: [(w.index, w.peers)], workers=2, schema="index int, peers int"
    )
    assert sorted(tuple(r) for r in rows.collect()) == [(0, 2), (1, 2)]


def _processes() -> set[int]:
    return {int(name) for name in os.listdir("/proc") if name.isdigit()}


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_a_second_run_reuses_the_python_workers_of_the_first(any_spark, tmp_path):
    """Spark keeps a finished task's Python worker for the next task only if the task read
    all its input: a new worker costs a process and its imports, taken from the JVM feeding the
    others (on Spark Connect it made one partition's first batch 0.2 s late)."""
    df = any_spark.createDataFrame([(t, t % 3) for t in range(40)], "t long, k long")

    def build(scope, stream):
        ps.write_parquet(stream, str(tmp_path / "out"))
        return os.getpid()

    def jobs():
        yield lambda: ps.run(any_spark, lambda w: os.getpid(), workers=2)
        yield lambda: ps.run_on_dataframe(df, build, time="t", workers=2)  # and its commit

    for job in jobs():
        job()  # its workers, done, go back to Spark's pool (or exit)
        before = _processes()
        pids = job()
        assert set(pids) <= before, "a run started new Python workers instead of reusing"


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_keyed_count_over_dataframe_equals_spark_groupby(any_spark, tmp_path):
    F = functions_for(any_spark)  # Connect's module for a Connect session

    df = any_spark.range(20_000).select(
        (F.col("id") % 4).alias("t"),
        (F.hash("id") % 13).alias("k"),
    )
    out = str(tmp_path / "counts")

    def build(scope, stream):
        counts = keyed_count(stream.map(lambda row: (row["k"], 1)))
        return ps.write_parquet(counts, out, columns=["k", "count"])

    assert ps.run_on_dataframe(df, build, time="t", workers=2) == [None, None]
    ours = any_spark.read.parquet(out)
    assert set(ours.columns) == {"k", "count", "epoch", "worker"}
    got = sorted(tuple(r) for r in ours.select("epoch", "k", "count").collect())
    want = sorted(tuple(r) for r in df.groupBy("t", "k").count().collect())
    assert got == want
    # Every worker rolled all its epochs into one file (the run is far shorter than
    # roll_seconds), committed once the run succeeded: no staging folder, no temporary file.
    assert sorted(os.listdir(out)) == ["worker=0", "worker=1"]
    for w in (0, 1):
        assert os.listdir(os.path.join(out, f"worker={w}")) == ["part-0-3.parquet"]


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_arrow_batches_and_key_placement(any_spark):
    F = functions_for(any_spark)  # Connect's module for a Connect session

    df = any_spark.range(5_000).select((F.col("id") % 3).alias("t"), (F.col("id") % 7).alias("k"))

    def build(scope, stream):
        seen = {"times": [], "keys": set(), "rows": 0}

        def look(t, batch):
            seen["times"].append(t)
            seen["keys"].update(batch.column("k").to_pylist())
            seen["rows"] += batch.num_rows

        stream.for_each(look)
        return seen

    results = ps.run_on_dataframe(df, build, time="t", workers=2, key="k", records="arrow")
    assert sum(r["rows"] for r in results) == 5_000
    for r in results:
        assert r["times"] == sorted(r["times"])  # the input advanced with the partition's times
    # Partitioned by key the way pytimely's exchange routes it: key k starts on worker k % 2.
    assert results[0]["keys"] == {0, 2, 4, 6} and results[1]["keys"] == {1, 3, 5}
    three = ps.run_on_dataframe(df, build, time="t", workers=3, key="k", records="arrow")
    assert [r["keys"] for r in three] == [{0, 3, 6}, {1, 4}, {2, 5}]


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_capture_from_workers_reads_back_with_spark_and_replays(any_spark, tmp_path):
    F = functions_for(any_spark)  # Connect's module for a Connect session

    df = any_spark.range(3_000).select((F.col("id") % 5).alias("t"), (F.col("id") % 11).alias("k"))
    cap_dir = str(tmp_path / "capture")

    one_dir = str(tmp_path / "one-worker")

    def build(scope, stream):
        counts = keyed_count(stream.map(lambda row: (row["k"], 1)))
        ps.capture_parquet(counts, cap_dir)
        # Key 0 is counted on one worker: the other captures no records and writes no file
        # (which would otherwise keep Spark from reading the directory).
        ps.capture_parquet(counts.filter(lambda kc: kc[0] == 0), one_dir)
        return counts.capture()

    handles = ps.run_on_dataframe(df, build, time="t", workers=2)
    from_workers = sorted((t, r) for h in handles for t, recs in h.extract() for r in recs)

    captured = any_spark.read.parquet(cap_dir)
    assert {"seq", "kind", "time", "delta", "pos", "value", "worker"} <= set(captured.columns)
    messages = captured.where("kind = 'messages'").select("time", "value._1", "value._2")
    assert sorted((t, (k, c)) for t, k, c in messages.collect()) == from_workers
    # Every worker's capture ends with its frontier empty: the deltas sum to -1 per stream.
    sums = captured.where("kind = 'progress'").groupBy("worker").agg(F.sum("delta")).collect()
    assert sorted(tuple(r) for r in sums) == [(0, -1), (1, -1)]

    replayed = pt.example(
        lambda scope: replay_into(ps.capture_readers(cap_dir), scope).capture()
    ).extract()
    assert sorted((t, r) for t, recs in replayed for r in recs) == from_workers
    want = sorted((t, (k, c)) for t, k, c in df.groupBy("t", "k").count().collect())
    assert from_workers == want

    assert len(ps.capture_readers(one_dir)) == 1
    key0 = any_spark.read.parquet(one_dir).where("kind = 'messages'")
    got = sorted((t, (k, c)) for t, k, c in key0.select("time", "value._1", "value._2").collect())
    assert got == [x for x in from_workers if x[1][0] == 0]


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_streaming_bridge_one_epoch_per_micro_batch(spark, tmp_path):
    from pyspark.sql import functions as F

    out = str(tmp_path / "counts")

    def build(scope, stream):
        counts = keyed_count(stream.map(lambda row: (row["value"] % 3, 1)))
        return ps.write_parquet(counts, out, columns=["k", "count"])

    expected = {}
    reported = []
    first_files = {}

    def on_epoch(epoch):
        reported.append(epoch)
        # When an epoch is reported complete, every worker's file for it is on disk.
        first_files[epoch] = epoch_rows(out)

    with ps.StreamingBridge(spark, build, workers=2, on_epoch=on_epoch) as bridge:

        def each(batch_df, batch_id):
            counts = batch_df.groupBy((F.col("value") % 3).alias("k")).count().collect()
            bridge.foreach_batch(batch_df, batch_id)
            # Only batches delivered completely count (stopping the query may interrupt one).
            expected[batch_id] = sorted((batch_id, r["k"], r["count"]) for r in counts)

        source = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", 100)
            .option("numPartitions", 2)
            .load()
        )
        query = (
            source.writeStream.foreachBatch(each)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="300 milliseconds")
            .start()
        )
        try:
            deadline = time.monotonic() + 60
            while bridge.completed < 3 and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            query.stop()
        assert bridge.completed >= 3
    assert bridge.results == [None, None]
    closed = sorted(expected)
    assert reported == closed  # every closed epoch was reported, in order
    assert sum(s["rows"] for s in bridge.stats) == sum(
        c for e in expected.values() for _, _, c in e
    )
    assert epoch_rows(out) == sorted(r for e in expected.values() for r in e)
    for epoch in reported:
        assert [r for r in first_files[epoch] if r[0] == epoch] == expected[epoch]


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_failing_worker_fails_the_job_and_leaves_no_process(spark, tmp_path):
    pid_dir = str(tmp_path)

    def work(worker):
        with open(os.path.join(pid_dir, f"pid-{worker.index}"), "w") as f:
            f.write(str(os.getpid()))

        def build(scope):
            inp, stream = scope.new_input()
            return inp, stream.exchange(lambda x: x).probe()

        inp, probe = worker.dataflow(build)
        inp.send(worker.index)
        inp.advance_to(1)
        worker.step_while(lambda: probe.less_than(1), timeout=60)
        if worker.index == 1:
            raise ValueError("worker one gives up")
        inp.advance_to(2)
        worker.step_while(lambda: probe.less_than(2), timeout=60)  # never: worker 1 is gone
        return "unreachable"

    started = time.monotonic()
    with pytest.raises(WorkerFailure) as info:
        ps.run(spark, work, workers=2)
    assert time.monotonic() - started < 60
    error = info.value
    assert error.worker == 1
    text = str(error)
    assert text.startswith("worker 1 failed: ValueError: worker one gives up")
    assert "worker 0: stopped by WorkerFailure" in text
    assert "raise ValueError" in text  # worker 1's traceback
    pids = read_pids(pid_dir)
    assert wait_gone(pids) == []


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_attempts_resubmit_the_whole_stage(spark, tmp_path):
    flag = str(tmp_path / "failed-once")

    def work(worker):
        if worker.index == 0 and not os.path.exists(flag):
            with open(flag, "w", encoding="utf-8"):
                pass
            raise RuntimeError("the first attempt fails")
        return worker.index

    assert ps.run(spark, work, workers=2, attempts=2) == [0, 1]
    os.remove(flag)
    with pytest.raises(WorkerFailure, match="the first attempt fails"):
        ps.run(spark, work, workers=2)


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_timeout_cancels_the_job_group_and_stops_the_workers(spark, tmp_path):
    pid_dir = str(tmp_path)

    def work(worker):
        with open(os.path.join(pid_dir, f"pid-{worker.index}"), "w") as f:
            f.write(str(os.getpid()))
        while True:  # a busy worker that never looks at the mesh
            sum(range(1000))

    started = time.monotonic()
    with pytest.raises(ps.SparkJobFailed, match="timeout"):
        ps.run(spark, work, workers=2, timeout=4)
    assert time.monotonic() - started < 40
    pids = read_pids(pid_dir)
    assert wait_gone(pids) == []
    # The session is still usable afterwards.
    assert ps.run(spark, lambda w: w.index, workers=2) == [0, 1]


@pytest.mark.spark
@pytest.mark.timeout(60)
def test_not_enough_slots_fails_fast(spark):
    started = time.monotonic()
    with pytest.raises(ps.NotEnoughSlots) as info:
        ps.run(spark, lambda w: None, workers=5)
    assert time.monotonic() - started < 5
    assert "5 pytimely workers need 5 concurrent task slots" in str(info.value)
    assert "local[5]" in str(info.value)
    with pytest.raises(ps.NotEnoughSlots, match="alongside"):
        ps.StreamingBridge(spark, lambda scope, stream: None, workers=4)


@pytest.mark.spark
@pytest.mark.timeout(60)
def test_time_column_must_be_integer(any_spark):
    df = any_spark.range(3).selectExpr("cast(id as double) as t")
    with pytest.raises(TypeError, match="integer type"):
        ps.run_on_dataframe(df, lambda scope, stream: None, time="t", workers=2)
    with pytest.raises(ValueError, match="not among the columns"):
        ps.run_on_dataframe(df, lambda scope, stream: None, time="nope", workers=2)


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_demo_main_job_on_a_small_dataset(spark, tmp_path):
    from pytimely.demo import WORKLOADS, run_demo

    lines = []
    summary = run_demo(
        WORKLOADS["wordcount"],
        rows=6_000,
        epochs=4,
        out=str(tmp_path / "demo"),
        spark=spark,
        say=lines.append,
    )
    assert summary["ok"], "\n".join(lines)
    assert summary["missing"] == summary["extra"] == 0 and summary["replay_ok"]
    assert lines[-1] == "OK"
    assert os.path.isdir(tmp_path / "demo" / "results" / "worker=0")
