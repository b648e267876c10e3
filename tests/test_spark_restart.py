"""State that survives restarts: a streaming bridge whose worker is killed mid-stream, restarted
from the same checkpoint, ends with exactly the output of a clean run (nothing lost, nothing
twice).  Uses the session's ``local[4]`` Spark (``conftest.py``)."""

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
                for k, end, count in zip(t["k"].to_pylist(), t["end"].to_pylist(),
                                         t["count"].to_pylist()):
                    assert (worker, end, k) not in found
                    found[worker, end, k] = count
    return found


def clean_windows(rows, workers):
    """What a clean run over the rate source's rows ``0 .. rows-1`` writes."""
    counts = collections.Counter((v // WIDTH * WIDTH + WIDTH, v % 2) for v in range(rows))
    return {(k % workers, end, k): c for (end, k), c in counts.items()}


def start(spark, out, checkpoint, workers):
    def build(scope, stream):
        counted = stream.window_count(pt.Tumbling(WIDTH), key=lambda r: r["value"] % 2,
                                      event_time=lambda r: r["value"])
        return ps.write_parquet(counted.output, out, columns=["k", "start", "end", "count"])

    bridge = ps.StreamingBridge(spark, build, workers=workers, event_time="value",
                                checkpoint=checkpoint, grace=3)
    source = (spark.readStream.format("rate").option("rowsPerSecond", 200)
              .option("numPartitions", 2).load())
    query = (source.writeStream.foreachBatch(bridge.foreach_batch)
             .option("checkpointLocation", checkpoint)
             .trigger(processingTime="300 milliseconds").start())
    return bridge, query


def wait_until(condition, timeout):
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
    return condition()


@pytest.mark.spark
@pytest.mark.timeout(240)
def test_kill_a_worker_mid_stream_and_restart_from_the_checkpoint(spark, tmp_path):
    out, checkpoint = str(tmp_path / "windows"), str(tmp_path / "checkpoint")

    bridge, query = start(spark, out, checkpoint, workers=2)
    try:
        assert wait_until(lambda: bridge.completed >= 3 and bridge.watermark > WIDTH, 90)
        _host, pid = bridge.worker_processes()[1]
        os.kill(pid, signal.SIGKILL)  # mid-stream: window state lives on both workers
        wait_until(lambda: not query.isActive, 60)
    finally:
        query.stop()
        bridge.cancel()
    before = bridge.watermark

    bridge, query = start(spark, out, checkpoint, workers=2)
    try:
        assert wait_until(lambda: bridge.completed >= 0, 60)
        assert bridge.replayed  # the committed batches were replayed into the new workers
        assert wait_until(lambda: bridge.watermark >= before + 2 * WIDTH, 90)
    finally:
        query.stop()
    results = bridge.stop()
    assert results == [None, None]
    delivered = sum(s["rows"] for s in bridge.stats)  # replayed + new rows: 0 .. delivered-1
    assert window_files(out) == clean_windows(delivered, 2)


@pytest.mark.spark
@pytest.mark.timeout(240)
def test_restart_on_fewer_workers_repartitions_the_state_by_key(spark, tmp_path):
    out, checkpoint = str(tmp_path / "windows"), str(tmp_path / "checkpoint")
    bridge, query = start(spark, out, checkpoint, workers=2)
    try:
        assert wait_until(lambda: bridge.completed >= 3 and bridge.watermark > WIDTH, 90)
    finally:
        query.stop()
    bridge.stop()
    before = bridge.watermark

    bridge, query = start(spark, out, checkpoint, workers=1)
    try:
        assert wait_until(lambda: bridge.watermark >= before + 2 * WIDTH, 90)
    finally:
        query.stop()
    bridge.stop()
    assert bridge.replayed
    delivered = sum(s["rows"] for s in bridge.stats)
    # The one worker now holds both keys' windows, with the counts of a clean run: the odd
    # key's state, built on worker 1 before the restart, was replayed onto worker 0.
    written = {key: c for key, c in window_files(out).items() if key[0] == 0}
    assert written == clean_windows(delivered, 1)
