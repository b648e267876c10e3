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

With ``--connect`` the ``spark`` mode also runs from a Spark Connect session (a server started
from pyspark's own ``sbin/start-connect-server.sh`` over ``local[cores]``, configured as the
classic session, the JVMs' optimizing compiler on in both), the two sessions alternately
``--repeat`` times after one warm-up run each; ``connect`` holds the Connect runs, and
``connect_over_classic`` the ratios of the medians of the slowest worker's rows/s in and out
and of the stage's wall time (target, issue 26: rows/s within 20%).

    python bench/spark_feed.py [--rows N] [--epochs E] [--workers 1,2] [--connect]
                               [--repeat R] [--out DIR]

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

import numpy as np
import pyarrow as pa

import pytimely as pt
from pytimely import spark as ps
from pytimely.openloop import LoadReading, MachineLoad


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


def checked(result: dict[str, Any], args: Any) -> dict[str, Any]:
    """``result``, once every row went in and out."""
    assert result["rows_in"] == args.rows, result
    assert result["rows_out"] == args.rows, result
    return result


#: The figures of a ``spark`` run compared across runs and sessions.
FIGURES = ("in_min_per_worker", "out_min_per_worker", "stage_s")


def median_of(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of every figure over ``results`` (runs of one configuration), with the
    runs' slowest-worker rates beside it."""
    summary: dict[str, Any] = {k: statistics.median(r[k] for r in results) for k in FIGURES}
    summary["rows_in"] = results[0]["rows_in"]
    summary["rows_out"] = results[0]["rows_out"]
    summary["runs"] = [{k: r[k] for k in FIGURES} for r in results]
    return summary


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
    parser.add_argument(
        "--connect",
        action="store_true",
        help="also run the spark mode from a Spark Connect session, alternating with classic",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each session and worker count"
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
    conf = {"spark.sql.execution.arrow.maxRecordsPerBatch": str(args.batch_rows)}
    spark = ps.local_session(
        cores=max(counts) + 1, app_name="bench-spark-feed", fast_start=False, conf=conf
    )
    server = None
    sessions = {"spark": spark}
    try:
        if args.connect:
            from pytimely.spark.standalone import ConnectServer

            server = ConnectServer(cores=max(counts) + 1, conf=conf, fast_start=False).start()
            sessions["connect"] = ps.connect(server.url, ship=False)
            report["connect"] = {}
        before = LoadReading.now()
        for n in counts:
            out_dir = os.path.join(scratch, f"out-memory-{n}")
            shutil.rmtree(out_dir, ignore_errors=True)
            report["memory"][n] = checked(run_memory(table, n, out_dir, args.batch_rows), args)
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in sessions}
            warmup = 1 if args.repeat > 1 else 0  # the JVMs' first run of a plan is slow
            for i in range(warmup + args.repeat):
                for name, session in sessions.items():
                    out_dir = os.path.join(scratch, f"out-{name}-{n}")
                    shutil.rmtree(out_dir, ignore_errors=True)
                    result = checked(run_spark(session, data, n, out_dir), args)
                    if i >= warmup:
                        runs[name].append(result)
            for name, results in runs.items():
                report[name][n] = results[0] if len(results) == 1 else median_of(results)
            if args.connect:
                report.setdefault("connect_over_classic", {})[n] = {
                    key: round(report["connect"][n][key] / report["spark"][n][key], 3)
                    for key in FIGURES
                }
        report["load"] = MachineLoad.between(before, LoadReading.now()).to_dict()
    finally:
        for session in sessions.values():
            session.stop()
        if server is not None:
            server.stop()
        if args.out is None:
            shutil.rmtree(scratch, ignore_errors=True)
    report["target_per_worker"] = 500_000
    json.dump(report, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
