"""Feeding a DataFrame into pytimely workers through Spark, against the same dataflow fed from
memory: rows/s in and out, on 1 and 2 workers.

The dataflow (the same in both modes): Arrow record batches ``(t, k, v)`` enter one input at
the epochs of column ``t``, are exchanged by column ``k`` (``Exchange(column="k")``: vectorized
routing), and every epoch's rows are appended to the worker's rolling Parquet file when the
epoch completes (:func:`pytimely.spark.write_parquet`).  No operator touches a row in Python.

* ``spark``: :func:`pytimely.spark.run_on_dataframe` over a DataFrame of ``--rows`` rows read
  from Parquet (``records="arrow"``: worker ``i`` gets partition ``i`` as Arrow batches, each
  run of equal times sent as one columnar batch).
* ``memory``: the same Arrow batches, split across the workers as Spark would, fed by
  :func:`pytimely.spark.feed_batches` from memory into ``pytimely.execute`` workers.

Rates are measured inside the workers: *in* is rows fed / seconds from the first batch to the
input's end; *out* is rows written / seconds from the first batch to the last epoch written.
The ``spark`` stage wall time (job start, read, shuffle, sort) is reported separately.
Target (issue 15): >= 500k rows/s per worker in and out through Spark.

    python bench/spark_feed.py [--rows N] [--epochs E] [--workers 1,2] [--out DIR]

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

import numpy as np
import pyarrow as pa

import pytimely as pt
from pytimely import spark as ps


def make_table(rows: int, epochs: int, seed: int = 3) -> pa.Table:
    rng = np.random.default_rng(seed)
    t = np.sort(rng.integers(0, epochs, rows)).astype(np.int64)
    return pa.table({"t": t, "k": rng.integers(0, 10_000, rows), "v": rng.random(rows)})


def build_dataflow(out_dir: str) -> Any:
    """``build(scope, stream)``: exchange by ``k``, write each epoch as Parquet; returns the
    worker's counters (rows in/out and when)."""

    def build(scope: Any, stream: Any) -> dict[str, Any]:
        stats: dict[str, Any] = {
            "worker": scope.index,
            "in": 0,
            "out": 0,
            "first": None,
            "fed": None,
            "last": None,
        }

        def fed(t: Any, batch: Any) -> None:
            if stats["first"] is None:
                stats["first"] = time.perf_counter()
            stats["in"] += batch.num_rows
            stats["fed"] = time.perf_counter()

        def written(t: Any, batch: Any) -> None:
            stats["out"] += batch.num_rows
            stats["last"] = time.perf_counter()

        routed = stream.inspect_batch(fed).exchange(column="k")
        ps.write_parquet(routed, out_dir).inspect_batch(written)
        return stats

    return build


def rates(stats: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-worker and total rows/s in and out (first batch -> input end / last write)."""
    per_in, per_out = [], []
    for s in stats:
        if s["first"] is None:
            continue
        per_in.append(s["in"] / max(s["fed"] - s["first"], 1e-9))
        per_out.append(s["out"] / max(s["last"] - s["first"], 1e-9))
    return {
        "rows_in": sum(s["in"] for s in stats),
        "rows_out": sum(s["out"] for s in stats),
        "in_per_worker": [round(r) for r in per_in],
        "out_per_worker": [round(r) for r in per_out],
        "in_min_per_worker": round(min(per_in)) if per_in else None,
        "out_min_per_worker": round(min(per_out)) if per_out else None,
    }


def run_spark(spark: Any, data: str, workers: int, out_dir: str) -> dict[str, Any]:
    df = spark.read.parquet(data)
    started = time.perf_counter()
    stats = ps.run_on_dataframe(
        df, build_dataflow(out_dir), time="t", workers=workers, records="arrow"
    )
    result = rates(stats)
    result["stage_s"] = round(time.perf_counter() - started, 3)
    return result


def run_memory(table: pa.Table, workers: int, out_dir: str, batch_rows: int) -> dict[str, Any]:
    # Split as run_on_dataframe would: round-robin rows to workers, each part sorted by t.
    parts = [table.take(np.arange(i, table.num_rows, workers)) for i in range(workers)]
    build = build_dataflow(out_dir)

    def work(worker: Any) -> dict[str, Any]:
        def dataflow(scope: Any) -> Any:
            handle, stream = scope.new_input()
            return handle, build(scope, stream)

        handle, stats = worker.dataflow(dataflow)
        ps.feed_batches(worker, handle, parts[worker.index].to_batches(batch_rows), "t", "arrow")
        handle.close()
        worker.run()
        return stats

    return rates(pt.execute(work, workers=workers, timeout=600))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument(
        "--batch-rows",
        type=int,
        default=100_000,
        help="Arrow batch size (spark.sql.execution.arrow.maxRecordsPerBatch)",
    )
    parser.add_argument("--out", default=None, help="scratch directory (default: a temp dir)")
    args = parser.parse_args(argv)
    counts = [int(w) for w in args.workers.split(",")]
    scratch = args.out or tempfile.mkdtemp(prefix="spark-feed-")
    os.makedirs(scratch, exist_ok=True)
    table = make_table(args.rows, args.epochs)
    data = os.path.join(scratch, "input")
    shutil.rmtree(data, ignore_errors=True)
    os.makedirs(data)
    import pyarrow.parquet as pq

    pq.write_table(table, os.path.join(data, "part-0.parquet"))
    report: dict[str, Any] = {
        "rows": args.rows,
        "epochs": args.epochs,
        "batch_rows": args.batch_rows,
        "spark": {},
        "memory": {},
    }
    spark = ps.local_session(
        cores=max(counts) + 1,
        app_name="bench-spark-feed",
        fast_start=False,
        conf={"spark.sql.execution.arrow.maxRecordsPerBatch": str(args.batch_rows)},
    )
    try:
        for n in counts:
            for mode in ("memory", "spark"):
                out_dir = os.path.join(scratch, f"out-{mode}-{n}")
                shutil.rmtree(out_dir, ignore_errors=True)
                if mode == "spark":
                    report[mode][n] = run_spark(spark, data, n, out_dir)
                else:
                    report[mode][n] = run_memory(table, n, out_dir, args.batch_rows)
                assert report[mode][n]["rows_in"] == args.rows
                assert report[mode][n]["rows_out"] == args.rows
    finally:
        spark.stop()
        if args.out is None:
            shutil.rmtree(scratch, ignore_errors=True)
    report["target_per_worker"] = 500_000
    json.dump(report, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
