"""The new user's job, end to end on Spark: one hour of clicks sessionized by event time.

One hour of ``--clicks`` (default 1,000,000) synthetic clicks of ``--users`` (20,000) users;
each click has an arrival time (uniform over the hour) and an event time up to 5 s earlier
(``ts_ms``, so the rows are out of event-time order by up to 5 s), and an ``epoch`` column, the
arrival second.  The clicks are written to Parquet before the clock starts (generation
excluded), then:

* **pytimely** (the documented job of docs/spark.md): ``spark.read.parquet`` ->
  ``ps.run_on_dataframe(df, build, time="ts_ms", delay=5_000, key="user",
  records="tuples", workers=2)`` on ``local[4]``, where ``build`` is
  ``window_count(pt.Session(30_000), key=user, event_time=ts_ms)`` ->
  ``ps.write_parquet(...)``.  Reported: the whole call's wall time, the dataflow's (first
  Arrow batch in to last session written, the slower worker) and its CPU time summed over the
  workers (``time.process_time``), clicks/s by each, and the Parquet files written per worker.
* **pandas** on the same data (one core): sort by user and event time, a new session where the
  gap to the user's previous click is at least 30 s, group.  The sessions must be equal.
* ``--baseline``: also the job as a new user wrote it before event-time input existed (an
  ``epoch`` column of arrival seconds as the time, ``lateness=5_000``), on ``--baseline-clicks``
  clicks (default 100,000: it pays per epoch).

Prints JSON; ``--repeat N`` alternates the configurations N times and reports medians, with
the machine's load average.  Target (issue "time is free"): >= 500,000 clicks/s through the
dataflow on 2 workers, <= 4 Parquet files per worker, sessions equal to pandas'.

    python bench/pipeline.py [--clicks N] [--workers 2] [--repeat 3] [--baseline]
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
from operator import itemgetter
from typing import Any

import numpy as np

import pytimely as pt

HOUR_MS = 3_600_000
GAP_MS = 30_000
DISORDER_MS = 5_000


def clicks(n: int, users: int, seed: int = 7) -> Any:
    """``n`` clicks as an Arrow table: ``user``, ``ts_ms`` (event time), ``epoch`` (arrival
    second), in arrival order."""
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    arrival = np.sort(rng.integers(0, HOUR_MS, n))
    ts = np.maximum(arrival - rng.integers(0, DISORDER_MS + 1, n), 0)
    return pa.table(
        {
            "user": rng.integers(0, users, n).astype(np.int64),
            "ts_ms": ts.astype(np.int64),
            "epoch": (arrival // 1000).astype(np.int64),
        }
    )


def pandas_sessions(table: Any) -> tuple[set, float]:
    """The sessions ``(user, start, end, clicks)`` computed with pandas, and the seconds it
    took (the table's conversion to a DataFrame excluded)."""
    frame = table.select(["user", "ts_ms"]).to_pandas()
    started = time.perf_counter()
    frame = frame.sort_values(["user", "ts_ms"], kind="stable")
    user = frame["user"].to_numpy()
    ts = frame["ts_ms"].to_numpy()
    new = np.ones(len(ts), dtype=bool)
    new[1:] = (user[1:] != user[:-1]) | (ts[1:] - ts[:-1] >= GAP_MS)
    frame["session"] = np.cumsum(new)
    grouped = frame.groupby("session", sort=False).agg(
        user=("user", "first"), start=("ts_ms", "min"), last=("ts_ms", "max"), n=("ts_ms", "size")
    )
    seconds = time.perf_counter() - started
    found = set(
        zip(
            grouped["user"].tolist(),
            grouped["start"].tolist(),
            (grouped["last"] + GAP_MS).tolist(),
            grouped["n"].tolist(),
        )
    )
    return found, seconds


class Clock(dict):
    """A worker's clock readings; pickled (to go back to the driver) once the worker's
    dataflow is done (every session committed to Parquet), and reads its clocks then, as
    ``wall_end`` and ``cpu_end``."""

    def __reduce__(self) -> tuple:
        return (dict, (dict(self, wall_end=time.time(), cpu_end=time.process_time()),))


def build_sessions(out: str, event_time_input: bool) -> Any:
    """The job's dataflow (rows are ``(user, ts_ms, epoch)`` tuples)."""
    from pytimely import spark as ps

    def build(scope: Any, stream: Any) -> dict[str, float]:
        clock = Clock()

        def first_in(batch: list) -> list:
            if "wall0" not in clock:
                clock["wall0"], clock["cpu0"] = time.time(), time.process_time()
            return batch

        sessions = stream.map_batch(first_in, name="Clock").window_count(
            pt.Session(GAP_MS),
            key=itemgetter(0),
            event_time=itemgetter(1),
            lateness=0 if event_time_input else DISORDER_MS,
        )
        ps.write_parquet(sessions.output, out, columns=["user", "start", "end", "clicks"])
        return clock

    return build


def run_job(
    spark: Any, data: str, out: str, workers: int, baseline: bool, step_rows: int | None = None
) -> dict[str, Any]:
    from pytimely import spark as ps

    shutil.rmtree(out, ignore_errors=True)
    df = spark.read.parquet(data)
    started = time.perf_counter()
    if baseline:
        clocks = ps.run_on_dataframe(
            df, build_sessions(out, False), time="epoch", key="user", records="tuples",
            workers=workers, progress=False,
        )  # fmt: skip
    else:
        clocks = ps.run_on_dataframe(
            df, build_sessions(out, True), time="ts_ms", delay=DISORDER_MS, key="user",
            records="tuples", workers=workers, progress=False, step_rows=step_rows,
        )  # fmt: skip
    job_s = time.perf_counter() - started
    # The dataflow's time: from the first Arrow batch any worker received until the last
    # worker's dataflow was done (every session committed).  Its CPU time: every worker
    # process's over its own part of that span.  (The clocks are cloud-pickled back once a
    # worker is done; the workers share this machine's clock.)
    dataflow_s = max(c["wall_end"] for c in clocks) - min(c["wall0"] for c in clocks)
    cpu_s = sum(c["cpu_end"] - c["cpu0"] for c in clocks)
    files = {}
    for base, _dirs, names in os.walk(out):
        shown = [n for n in names if n.endswith(".parquet") and not n.startswith(".")]
        if shown:
            files[os.path.basename(base)] = len(shown)
    return {"job_s": job_s, "dataflow_s": dataflow_s, "cpu_s": cpu_s, "files": files}


def read_sessions(out: str) -> set:
    import pyarrow.dataset as ds

    table = ds.dataset(out, format="parquet", partitioning="hive").to_table(
        columns=["user", "start", "end", "clicks"]
    )
    return set(zip(*(table.column(c).to_pylist() for c in ("user", "start", "end", "clicks"))))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clicks", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cores", type=int, default=4, help="local[N] Spark")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline", action="store_true", help="also the epoch-column job")
    parser.add_argument("--baseline-clicks", type=int, default=100_000)
    parser.add_argument(
        "--step-rows", type=int, default=None, help="rows fed between two steps of a worker"
    )
    args = parser.parse_args(argv)

    import pyarrow.parquet as pq

    from pytimely import spark as ps

    scratch = tempfile.mkdtemp(prefix="pytimely-pipeline-")
    try:
        table = clicks(args.clicks, args.users)
        data = os.path.join(scratch, "clicks.parquet")
        pq.write_table(table, data)
        expected, _ = pandas_sessions(table)
        small = None
        if args.baseline:
            small = os.path.join(scratch, "clicks-small.parquet")
            small_table = clicks(args.baseline_clicks, args.users)
            pq.write_table(small_table, small)
            small_expected, _ = pandas_sessions(small_table)
        spark = ps.local_session(cores=args.cores)
        out = os.path.join(scratch, "sessions")
        runs: dict[str, list[dict[str, Any]]] = {"pytimely": [], "pandas": [], "baseline": []}
        load_before = os.getloadavg()
        run_job(spark, data, out, args.workers, False)  # warm the JVM and the Python workers
        for _ in range(args.repeat):
            r = run_job(spark, data, out, args.workers, False, args.step_rows)
            r["equal_to_pandas"] = read_sessions(out) == expected
            runs["pytimely"].append(r)
            _, seconds = pandas_sessions(table)
            runs["pandas"].append({"seconds": seconds})
            if small is not None:
                b = run_job(spark, small, out, args.workers, True)
                b["equal_to_pandas"] = read_sessions(out) == small_expected
                runs["baseline"].append(b)
        load_after = os.getloadavg()

        def summary(rs: list[dict[str, Any]], n: int) -> dict[str, Any]:
            job = statistics.median(r["job_s"] for r in rs)
            flow = statistics.median(r["dataflow_s"] for r in rs)
            cpu = statistics.median(r["cpu_s"] for r in rs)
            return {
                "clicks": n,
                "job_s": round(job, 3),
                "dataflow_s": round(flow, 3),
                "dataflow_cpu_s": round(cpu, 3),
                "clicks_per_s_dataflow": round(n / flow),
                "clicks_per_cpu_s": round(n / cpu),
                "clicks_per_s_job": round(n / job),
                "files_per_worker": rs[-1]["files"],
                "equal_to_pandas": all(r["equal_to_pandas"] for r in rs),
                "runs_dataflow_s": [round(r["dataflow_s"], 3) for r in rs],
            }

        pandas_s = statistics.median(r["seconds"] for r in runs["pandas"])
        report: dict[str, Any] = {
            "benchmark": "pipeline",
            "workers": args.workers,
            "spark": f"local[{args.cores}]",
            "sessions": len(expected),
            "pytimely": summary(runs["pytimely"], args.clicks),
            "pandas": {
                "seconds": round(pandas_s, 3),
                "clicks_per_s": round(args.clicks / pandas_s),
            },
            "machine": {
                "cpus": os.cpu_count(),
                "load_before": [round(x, 2) for x in load_before],
                "load_after": [round(x, 2) for x in load_after],
            },
        }
        flow = report["pytimely"]
        report["dataflow_vs_pandas"] = round(pandas_s / flow["dataflow_s"], 3)
        if runs["baseline"]:
            report["baseline_epoch_column"] = summary(runs["baseline"], args.baseline_clicks)
        most = max(flow["files_per_worker"].values(), default=0)
        report["ok"] = (
            flow["clicks_per_s_dataflow"] >= 500_000 and most <= 4 and flow["equal_to_pandas"]
        )
        print(json.dumps(report, indent=1))
        return report
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
