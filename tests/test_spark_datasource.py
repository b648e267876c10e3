"""``spark.read.format("pytimely")``: capture files read by Spark through the Python data
source, from a classic session and from a Spark Connect session, checked record for record
against what the dataflow captured."""

from __future__ import annotations

import json
import os

import pytest

import pytimely as pt
from pytimely.capture import FileWriter
from pytimely.spark import register_data_source

pytestmark = pytest.mark.timeout(300)


def _capture(folder: str) -> list[tuple[int, object]]:
    """Two workers each capture their stream into ``folder/run/worker-<i>.ptc``; returns every
    ``(time, record)`` captured."""
    os.makedirs(os.path.join(folder, "run"))

    def work(worker):
        def build(scope):
            inp, stream = scope.new_input()
            stream.capture_into(
                FileWriter(os.path.join(folder, "run", f"worker-{worker.index}.ptc"))
            )
            return inp

        inp = worker.dataflow(build)
        sent = []
        for t in range(3):
            inp.advance_to(t)
            batch = [(f"w{worker.index}", t, i) for i in range(4)] + [{"k": t}]
            inp.send_batch(batch)
            sent += [(t, r) for r in batch]
        inp.close()
        worker.run()
        return sent

    return [x for per in pt.execute(work, workers=2) for x in per]


def _rows(df) -> list[tuple[str, str, str]]:
    return sorted((r.file, r.time, r.value) for r in df.collect())


@pytest.mark.parametrize("session", ["classic", "connect"])
def test_spark_reads_a_directory_of_captures_record_for_record(request, tmp_path, session):
    spark = request.getfixturevalue("spark" if session == "classic" else "connect_spark")
    sent = _capture(str(tmp_path))
    with open(tmp_path / "run" / "notes.txt", "w") as f:  # not a capture: skipped
        f.write("hello")
    register_data_source(spark)
    df = spark.read.format("pytimely").load(str(tmp_path))
    assert df.columns == ["file", "time", "value"]
    rows = _rows(df)
    assert {os.path.basename(f) for f, _t, _v in rows} == {"worker-0.ptc", "worker-1.ptc"}
    got = sorted((int(t), json.dumps(json.loads(v))) for _f, t, v in rows)
    assert got == sorted((t, json.dumps(json.loads(json.dumps(r)))) for t, r in sent)
    by_time = df.groupBy(df.time.cast("long").alias("t")).count().orderBy("t").collect()
    assert [(r.t, r["count"]) for r in by_time] == [(0, 10), (1, 10), (2, 10)]


def test_a_truncated_capture_fails_the_read_unless_asked_to_skip_the_rest(spark, tmp_path):
    _capture(str(tmp_path))
    path = tmp_path / "run" / "worker-0.ptc"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])  # the END frame and later records gone
    register_data_source(spark)
    with pytest.raises(Exception, match="worker-0.ptc"):
        spark.read.format("pytimely").load(str(path)).collect()
    rows = spark.read.format("pytimely").option("truncated", "skip").load(str(path)).collect()
    assert 0 < len(rows) < 15


def test_a_path_without_captures_is_named(spark, tmp_path):
    register_data_source(spark)
    with pytest.raises(Exception, match="no capture file under"):
        spark.read.format("pytimely").load(str(tmp_path)).collect()
