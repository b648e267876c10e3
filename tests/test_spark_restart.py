"""State that survives restarts: a streaming bridge whose worker is killed mid-stream, restarted
from the same checkpoint, ends with exactly the output of a clean run (nothing lost, nothing
twice).  Each test runs from the session's classic ``local[4]`` Spark and from a Spark
Connect session on a ``local[4]`` server (``conftest.py``): on Connect the ``foreachBatch``
function runs in the server's Python and talks to the workers over control sessions."""

from __future__ import annotations

import collections
import os
import signal
import time

import pytest

import pytimely as pt
from pytimely import spark as ps

WIDTH = 50


def window_files(directory):
    """``{(worker, end, key): count}`` of every window row written under ``directory``."""
    import pyarrow.parquet as pq

    found = {}
    for base, _dirs, files in os.walk(directory):
        for name in files:
            if name.endswith(".parquet") and not name.startswith("."):
                worker = int(os.path.basename(base).split("=")[1])
                t = pq.read_table(os.path.join(base, name))
                for k, end, count in zip(
                    t["k"].to_pylist(), t["end"].to_pylist(), t["count"].to_pylist()
                ):
                    assert (worker, end, k) not in found
                    found[worker, end, k] = count
    return found


def clean_windows(rows, workers):
    """What a clean run over the rate source's rows ``0 .. rows-1`` writes."""
    counts = collections.Counter((v // WIDTH * WIDTH + WIDTH, v % 2) for v in range(rows))
    return {(k % workers, end, k): c for (end, k), c in counts.items()}


def start(spark, out, checkpoint, workers, snapshot_every=1):
    def build(scope, stream):
        counted = stream.window_count(
            pt.Tumbling(WIDTH), key=lambda r: r["value"] % 2, event_time=lambda r: r["value"]
        )
        return ps.write_parquet(counted.output, out, columns=["k", "start", "end", "count"])

    bridge = ps.StreamingBridge(
        spark,
        build,
        workers=workers,
        event_time="value",
        checkpoint=checkpoint,
        snapshot_every=snapshot_every,
        grace=3,
    )
    source = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 200)
        .option("numPartitions", 2)
        .load()
    )
    query = (
        source.writeStream.foreachBatch(bridge.foreach_batch)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    return bridge, query


def delivered_rows(bridge):
    """Rows the dataflow has consumed in all runs: those in the restored snapshot, then those
    replayed and delivered in this run -- the rate source's values ``0 .. rows-1``."""
    restored = bridge.restored["rows"] if bridge.restored is not None else 0
    return restored + sum(s["rows"] for s in bridge.stats)


def logged_batches(checkpoint):
    folder = os.path.join(checkpoint, "pytimely", "input")
    return sorted(
        int(name.split("=")[1]) for name in os.listdir(folder) if name.startswith("batch=")
    )


def wait_until(condition, timeout):
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
    return condition()


@pytest.mark.spark
@pytest.mark.timeout(240)
def test_kill_a_worker_mid_stream_and_restart_from_the_checkpoint(any_spark, tmp_path):
    out, checkpoint = str(tmp_path / "windows"), str(tmp_path / "checkpoint")

    bridge, query = start(any_spark, out, checkpoint, workers=2)
    try:
        assert wait_until(lambda: bridge.completed >= 3 and bridge.watermark > WIDTH, 90)
        _host, pid = bridge.worker_processes()[1]
        os.kill(pid, signal.SIGKILL)  # mid-stream: window state lives on both workers
        wait_until(lambda: not query.isActive, 60)
    finally:
        query.stop()
        bridge.cancel()
    before = bridge.watermark

    bridge, query = start(any_spark, out, checkpoint, workers=2)
    try:
        assert bridge.restored is not None  # the state came back from a snapshot ...
        assert bridge.completed >= bridge.restored["batch"]  # ... and so did its epoch, not -1
        assert all(b > bridge.restored["batch"] for b in bridge.replayed)
        assert wait_until(lambda: bridge.watermark >= before + 2 * WIDTH, 90)
    finally:
        query.stop()
    results = bridge.stop()
    assert results == [None, None]
    assert window_files(out) == clean_windows(delivered_rows(bridge), 2)


@pytest.mark.spark
@pytest.mark.timeout(240)
def test_restart_on_fewer_workers_repartitions_the_state_by_key(any_spark, tmp_path):
    out, checkpoint = str(tmp_path / "windows"), str(tmp_path / "checkpoint")
    bridge, query = start(any_spark, out, checkpoint, workers=2)
    try:
        assert wait_until(lambda: bridge.completed >= 3 and bridge.watermark > WIDTH, 90)
    finally:
        query.stop()
    bridge.stop()
    before = bridge.watermark

    bridge, query = start(any_spark, out, checkpoint, workers=1)
    try:
        assert wait_until(lambda: bridge.watermark >= before + 2 * WIDTH, 90)
    finally:
        query.stop()
    bridge.stop()
    assert bridge.restored is not None and bridge.restored["workers"] == 2
    # Windows that ended before the snapshot's time were written by the first run, by key on
    # both workers, and are not written again; from then on the one worker holds both keys'
    # windows, with the counts of a clean run: the odd key's state, built on worker 1 before
    # the restart, was restored onto worker 0.  What the first run wrote after its snapshot
    # is gone, also from worker 1's folder, which no worker writes to any more: a reader of
    # the directory sees every window exactly once.
    then = bridge.restored["then"]
    found = window_files(out)
    merged: dict = {}
    for (_w, end, k), c in found.items():
        assert (end, k) not in merged, f"window ({end}, {k}) written twice"
        merged[end, k] = c
    assert any(w == 1 and end < then and k == 1 for w, end, k in found)  # not written again
    assert not any(w == 1 and end >= then for w, end, _k in found)
    clean = clean_windows(delivered_rows(bridge), 1)
    assert merged == {(end, k): c for (_w, end, k), c in clean.items()}


@pytest.mark.spark
@pytest.mark.timeout(240)
def test_a_restart_replays_only_the_input_after_the_last_snapshot(any_spark, tmp_path):
    out, checkpoint = str(tmp_path / "windows"), str(tmp_path / "checkpoint")
    bridge, query = start(any_spark, out, checkpoint, workers=2, snapshot_every=3)
    try:
        assert wait_until(lambda: len(bridge.snapshots) >= 3 and bridge.watermark > WIDTH, 120)
        _host, pid = bridge.worker_processes()[0]
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not query.isActive, 60)
    finally:
        query.stop()
        bridge.cancel()
    # The log holds only what came after the last committed snapshot: it does not grow with
    # the stream.
    snapshot = bridge.snapshots[-1]
    assert all(b > snapshot for b in logged_batches(checkpoint))
    before = bridge.watermark

    bridge, query = start(any_spark, out, checkpoint, workers=2, snapshot_every=3)
    try:
        assert wait_until(lambda: bridge.watermark >= before + WIDTH, 90)
    finally:
        query.stop()
    bridge.stop()
    assert bridge.restored["batch"] == snapshot
    # Replayed: exactly the logged batches after the snapshot, in order, none before it.
    assert bridge.replayed == list(range(snapshot + 1, snapshot + 1 + len(bridge.replayed)))
    assert len(bridge.replayed) <= 2 * 3 + 2  # about a snapshot interval, not the stream
    assert window_files(out) == clean_windows(delivered_rows(bridge), 2)
