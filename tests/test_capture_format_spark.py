"""Parquet captures are readable by Spark as they are, from a classic and from a Spark Connect
session (tests/conftest.py)."""

from __future__ import annotations

import pytest

from pytimely.capture import Messages, ParquetReader, ParquetWriter, Progress
from pytimely.order import Product


@pytest.mark.spark
@pytest.mark.timeout(120)
def test_spark_reads_parquet_capture(tmp_path, any_spark):
    P = Product
    evs = [
        Progress([(P(0, 0), -1), (P(1, 0), 1)]),
        Messages(P(1, 0), [(1, "a"), (2, "b")]),
        Messages(P(1, 2), [(3, None)]),
        Progress([(P(1, 0), -1)]),
    ]
    path = tmp_path / "cap.parquet"
    with ParquetWriter(path) as w:
        for e in evs:
            w.push(e)
            w.flush()
    assert ParquetReader(path).poll() == evs
    df = any_spark.read.parquet(str(path))
    assert df.columns == ["seq", "kind", "time", "delta", "pos", "value"]
    rows = (
        df.where("kind = 'messages'")
        .orderBy("seq", "pos")
        .select("time.outer", "time.inner", "value._1", "value._2")
        .collect()
    )
    assert [tuple(r) for r in rows] == [(1, 0, 1, "a"), (1, 0, 2, "b"), (1, 2, 3, None)]
    assert df.where("kind = 'progress'").groupBy().sum("delta").collect()[0][0] == -1
