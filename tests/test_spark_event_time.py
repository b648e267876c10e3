"""The streaming bridge in event time: windows follow an event-time column and the watermark,
not micro-batch ids.  Uses the session's ``local[4]`` Spark (``conftest.py``)."""

from __future__ import annotations

import os
import time

import pytest

import pytimely as pt
from pytimely import spark as ps

WIDTH = 50


def window_files(directory):
    """``{(end, key): count}`` of every window file written under ``directory``."""
    import pyarrow.parquet as pq

    found = {}
    for base, _dirs, files in os.walk(directory):
        for name in files:
            if name.endswith(".parquet") and not name.startswith("."):
                t = pq.read_table(os.path.join(base, name))
                for k, end, count in zip(
                    t["k"].to_pylist(), t["end"].to_pylist(), t["count"].to_pylist()
                ):
                    found[end, k] = count
    return found


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_windows_close_with_the_event_time_watermark(spark, tmp_path):
    out = str(tmp_path / "windows")

    def build(scope, stream):
        counted = stream.window_count(
            pt.Tumbling(WIDTH), key=lambda r: r["value"] % 2, event_time=lambda r: r["value"]
        )
        return ps.write_parquet(counted.output, out, columns=["k", "start", "end", "count"])

    seen = {}

    def on_epoch(batch):
        seen[batch] = window_files(out)  # what is on disk when the batch is complete

    with ps.StreamingBridge(
        spark, build, workers=2, on_epoch=on_epoch, event_time="value", delay=10
    ) as bridge:
        source = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", 200)
            .option("numPartitions", 2)
            .load()
        )
        query = (
            source.writeStream.foreachBatch(bridge.foreach_batch)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="300 milliseconds")
            .start()
        )
        try:
            deadline = time.monotonic() + 90
            while (bridge.completed < 3 or bridge.watermark < 3 * WIDTH) and (
                time.monotonic() < deadline
            ):
                time.sleep(0.1)
        finally:
            query.stop()
        assert bridge.watermark >= 3 * WIDTH
    delivered = sum(s["rows"] for s in bridge.stats)
    # The rate source numbers rows 0, 1, 2, ... and every closed batch was delivered whole.
    assert delivered > 3 * WIDTH
    watermarks = bridge.watermarks
    # Spark's rule: the largest event time delivered minus the delay.
    assert bridge.watermark == (delivered - 1) - 10
    assert list(watermarks.values()) == sorted(watermarks.values())
    for batch, files in seen.items():
        # Every window that ended at or before the watermark after this batch is final on disk
        # when the batch is reported complete, with its exact count.
        for e in range(WIDTH, watermarks[batch] + 1, WIDTH):
            assert files[e, 0] == files[e, 1] == WIDTH // 2, (batch, watermarks[batch], e)
    # Windows are emitted at their end (the watermark passing it), not at a batch id.
    assert all(e % WIDTH == 0 for e, _k in window_files(out))
    assert any(files for files in seen.values())  # windows were final while streaming
    # After the input closed, every row is in exactly one window.
    everything = window_files(out)
    assert sum(everything.values()) == delivered


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_the_event_time_bridge_runs_from_a_connect_session(connect_spark, tmp_path):
    """The same job from Spark Connect: its ``foreachBatch`` function runs in the server's
    Python, finds the workers in the rendezvous folder and closes batches over control
    sessions; the client learns completions from the workers themselves."""
    out = str(tmp_path / "windows")

    def build(scope, stream):
        counted = stream.window_count(
            pt.Tumbling(WIDTH), key=lambda r: r["value"] % 2, event_time=lambda r: r["value"]
        )
        return ps.write_parquet(counted.output, out, columns=["k", "start", "end", "count"])

    with pytest.raises(ValueError, match="on_epoch is called on the driver"):
        ps.StreamingBridge(connect_spark, build, workers=2, on_epoch=print)
    with ps.StreamingBridge(
        connect_spark, build, workers=2, event_time="value", delay=10, rendezvous=str(tmp_path)
    ) as bridge:
        assert sorted(bridge.worker_processes()) == [0, 1]
        source = (
            connect_spark.readStream.format("rate")
            .option("rowsPerSecond", 200)
            .option("numPartitions", 2)
            .load()
        )
        query = (
            source.writeStream.foreachBatch(bridge.foreach_batch)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="300 milliseconds")
            .start()
        )
        try:
            deadline = time.monotonic() + 90
            while (bridge.completed < 3 or bridge.watermark < 3 * WIDTH) and (
                time.monotonic() < deadline
            ):
                time.sleep(0.2)
            # Windows are final on disk once the watermark after a completed batch passed them.
            done = bridge.completed
            final = window_files(out)
            for e in range(WIDTH, bridge.watermarks[done] + 1, WIDTH):
                assert final[e, 0] == final[e, 1] == WIDTH // 2, (done, e)
            # Each completed batch's latency, measured in the server's process, reaches the
            # client through the workers.
            wait_until = time.monotonic() + 10
            while not set(range(done + 1)) <= set(latencies := bridge.latencies):
                assert time.monotonic() < wait_until, (done, latencies)
                time.sleep(0.2)
            assert all(0 < s < 90 for s in latencies.values()), latencies
        finally:
            query.stop()
        assert bridge.watermark >= 3 * WIDTH
    delivered = sum(s["rows"] for s in bridge.stats)
    assert delivered > 3 * WIDTH
    assert bridge.watermark == (delivered - 1) - 10
    assert list(bridge.watermarks.values()) == sorted(bridge.watermarks.values())
    everything = window_files(out)
    assert all(e % WIDTH == 0 for e, _k in everything)
    assert sum(everything.values()) == delivered
    assert not os.listdir(tmp_path / next(d for d in os.listdir(tmp_path) if len(d) == 12))
