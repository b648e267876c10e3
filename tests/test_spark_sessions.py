"""The new user's job through Spark: clicks sessionized by their millisecond event times.

Runs docs/spark.md's sessionization block as written, on small data, and checks its sessions
against a plain computation; then the ways a time column can be wrong.  Uses the session's
``local[4]`` Spark (``conftest.py``).
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path

import pytest

import pytimely as pt
from pytimely import spark as ps
from pytimely.spark.dataframe import functions_for

ROOT = Path(__file__).resolve().parent.parent
GAP = 30_000


def _doc_block() -> str:
    """The ```python block of docs/spark.md under "Event time: sessionizing clicks"."""
    text = (ROOT / "docs" / "spark.md").read_text()
    section = text[text.index("## Event time: sessionizing clicks") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _clicks(n: int, users: int, seed: int = 5) -> list[tuple[int, int, int]]:
    """``(user, ts_ms, page)`` in arrival order, event times up to 5 s before arrival."""
    rng = random.Random(seed)
    arrivals = sorted(rng.randrange(600_000) for _ in range(n))
    out = []
    for a in arrivals:
        out.append((rng.randrange(users), max(0, a - rng.randrange(5_001)), rng.randrange(9)))
    return out


def _sessions(clicks) -> set[tuple[int, int, int, int]]:
    """``(user, start, end, clicks)`` computed plainly: a new session after a gap >= GAP."""
    by_user: dict[int, list[int]] = {}
    for user, ts, _page in clicks:
        by_user.setdefault(user, []).append(ts)
    out = set()
    for user, times in by_user.items():
        times.sort()
        start = last = times[0]
        n = 0
        for x in times:
            if x - last >= GAP:
                out.add((user, start, last + GAP, n))
                start, n = x, 0
            last, n = x, n + 1
        out.add((user, start, last + GAP, n))
    return out


@pytest.mark.spark
@pytest.mark.timeout(240)
def test_the_docs_sessionization_job_equals_a_plain_computation(any_spark, tmp_path):
    import pyarrow.dataset as ds

    clicks = _clicks(3_000, 40)
    source, out = str(tmp_path / "clicks"), str(tmp_path / "out" / "sessions")
    any_spark.createDataFrame(clicks, "user long, ts_ms long, page long").write.parquet(source)
    # The block as written, its relative paths made absolute (Spark's JVM and its Python
    # workers do not share the test's working directory).
    code = _doc_block().replace('parquet("clicks")', f"parquet({source!r})")
    code = code.replace('"out/sessions"', repr(out))
    exec(compile(code, "docs/spark.md", "exec"), {"spark": any_spark})
    table = ds.dataset(out, format="parquet", partitioning="hive").to_table()
    rows = set(zip(*(table[c].to_pylist() for c in ("user", "start", "end", "clicks"))))
    assert rows == _sessions(clicks)
    assert table["epoch"].to_pylist() == table["end"].to_pylist()  # each at its own time
    files = [n for _b, _d, names in os.walk(out) for n in names if n.endswith(".parquet")]
    assert 1 <= len(files) <= 2  # one file per worker, not one per millisecond


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_timestamp_time_columns_are_read_as_milliseconds(any_spark):
    F = functions_for(any_spark)  # Connect's module for a Connect session

    df = any_spark.createDataFrame([(0, 1_500), (1, 900), (2, 2_000)], "k long, ms long").select(
        "k", F.timestamp_millis("ms").alias("at")
    )

    def build(scope, stream):
        seen: list = []
        stream.inspect_batch(lambda t, batch: seen.extend((t, r) for r in batch))
        return seen

    exact = ps.run_on_dataframe(df, build, time="at", workers=1, records="tuples", timeout=120)
    assert exact == [[(900, (1, 900)), (1_500, (0, 1_500)), (2_000, (2, 2_000))]]
    watermark = ps.run_on_dataframe(
        df, build, time="at", delay=100, workers=1, records="tuples", timeout=120
    )
    assert [r for _t, r in watermark[0]] == [(1, 900), (0, 1_500), (2, 2_000)]
    assert {t for t, _r in watermark[0]} == {0}  # one Arrow batch: one time, the watermark


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_bad_time_columns_are_named_before_or_when_they_fail(any_spark):
    def build(scope, stream):
        return None

    text = any_spark.createDataFrame([("a", 1)], "t string, v long")
    with pytest.raises(TypeError, match="time column 't' is string"):
        ps.run_on_dataframe(text, build, time="t", timeout=60)
    with pytest.raises(ValueError, match="delay must be None or an int >= 0"):
        ps.run_on_dataframe(text, build, time="t", delay=-1, timeout=60)
    nulls = any_spark.createDataFrame([(1, 1), (None, 2)], "t long, v long")
    with pytest.raises(pt.errors.WorkerFailure, match=r"time column 't' has a null in row 0"):
        ps.run_on_dataframe(nulls, build, time="t", workers=1, timeout=120)
