"""``ps.run`` from a classic session and from a Spark Connect session, side by side.

Both sessions live in this process on this machine: a classic ``local[4]`` session and a Spark
Connect server started from pyspark's own ``sbin/start-connect-server.sh`` over ``local[4]``
(:class:`pytimely.spark.standalone.ConnectServer`).  The jobs, each run ``--repeat`` times
alternately (classic, Connect, classic, ...) after one warm-up run of each:

* ``trivial``: two workers that return their index: the cost of placing workers (a barrier
  stage, one ``allGather``, the mesh) and bringing results back;
* ``keyed_count``: ``--words`` words (per worker) through ``map`` -> ``aggregate`` on two
  workers, exchanged by word: the same dataflow whichever session placed it;
* ``dataframe``: ``ps.run_on_dataframe`` over ``--rows`` rows ``(t, k, v)`` made by
  ``spark.range`` (100 times, keys ``id % 1000``), fed as Arrow batches, exchanged by column
  ``k`` and counted per worker: the data pipeline, reported also as rows/s through the call;
* ``streaming``: a :class:`~pytimely.spark.StreamingBridge` on two workers (``wait=True``: a
  micro-batch's ``foreachBatch`` returns once every worker has finished it) fed by Spark's
  ``rate`` source at ``--stream-rate`` rows/s with a 200 ms trigger, for ``--batches``
  micro-batches; besides the whole call (starting the workers, the query, stopping both) it
  reports the median of Spark's own ``addBatch`` duration per micro-batch: pushing a batch
  into the workers and seeing it complete, from the client (classic) or from the server's
  Python (Connect).

Reported per job and session: the median wall time of the ``ps.run`` call, every run's time,
and the Connect / classic ratio of the medians.  Wall time only: the work happens in the
server's and the executors' processes, not in this client, so its CPU time says nothing.  The
machine's load is reported, but ``others_cpus`` counts the Spark JVMs and Python workers of
both sessions (other processes than this one): ``quiet`` is false by construction.

    python bench/spark_connect.py [--repeat 5] [--words 400000]

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from pytimely import spark as ps
from pytimely.openloop import LoadReading, MachineLoad
from pytimely.spark.session import is_connect
from pytimely.spark.standalone import ConnectServer


def trivial(worker: Any) -> int:
    return worker.index


def keyed_count(words: int) -> Any:
    def work(worker: Any) -> int:
        vocabulary = [f"w{i}" for i in range(10_000)]

        def build(scope: Any) -> Any:
            inp, stream = scope.new_input()
            counts = stream.map(lambda w: (w, 1)).aggregate(
                lambda _k, v, acc: acc + v, lambda k, acc: (k, acc)
            )
            return inp, counts.probe()

        inp, _probe = worker.dataflow(build)
        for start in range(0, words, 1_000):
            inp.send_batch(vocabulary[start % 9_000 : start % 9_000 + 1_000])
            if start % 16_000 == 15_000:
                worker.step()
        inp.close()
        worker.run()
        return worker.index

    return work


def timed(spark: Any, fn: Any) -> float:
    start = time.perf_counter()
    results = fn(spark) if getattr(fn, "whole_call", False) else ps.run(spark, fn, workers=2)
    assert results == [0, 1] or fn is not trivial and getattr(fn, "whole_call", False), results
    return time.perf_counter() - start


def over_dataframe(rows: int) -> Any:
    """``run_on_dataframe`` of ``rows`` rows: every row is counted once, on some worker."""

    def call(spark: Any) -> list[int]:
        df = spark.range(rows).selectExpr("id % 100 as t", "id % 1000 as k", "id as v")

        def build(scope: Any, stream: Any) -> Any:
            seen = [0]
            stream.exchange(column="k").inspect_batch(
                lambda _t, batch: seen.__setitem__(0, seen[0] + batch.num_rows)
            )
            return seen

        counts = ps.run_on_dataframe(df, build, time="t", records="arrow", workers=2)
        assert sum(c[0] for c in counts) == rows, counts
        return [0, 1]

    call.whole_call = True  # type: ignore[attr-defined]
    return call


def streaming(batches: int, rate: int) -> Any:
    """A bridge fed by a ``rate`` source until ``batches`` micro-batches with rows completed;
    every row counted once; ``call.add_batch_ms[session]`` collects Spark's ``addBatch``
    durations of those micro-batches."""

    def call(spark: Any) -> list[int]:
        def build(scope: Any, stream: Any) -> Any:
            counted = [0]
            stream.inspect_batch(lambda _t, rows: counted.__setitem__(0, counted[0] + len(rows)))
            return counted

        def rows_of(progress: Any) -> int:  # a Connect progress has no top-level count
            return sum(int(source["numInputRows"] or 0) for source in progress["sources"])

        source = spark.readStream.format("rate").option("rowsPerSecond", rate).load()
        with ps.StreamingBridge(spark, build, workers=2, wait=True, records="tuples") as bridge:
            query = (
                source.writeStream.foreachBatch(bridge.foreach_batch)
                .trigger(processingTime="200 milliseconds")
                .start()
            )
            try:
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline and (
                    sum(1 for p in query.recentProgress if rows_of(p)) < batches
                ):
                    time.sleep(0.2)
                progress = [p for p in query.recentProgress if rows_of(p)][:batches]
            finally:
                query.stop()
        rows = sum(rows_of(p) for p in progress)
        assert sum(c[0] for c in bridge.results) >= rows, (bridge.results, rows)
        session = "connect" if is_connect(spark) else "classic"
        call.add_batch_ms.setdefault(session, []).extend(  # type: ignore[attr-defined]
            p["durationMs"]["addBatch"] for p in progress
        )
        return [0, 1]

    call.whole_call = True  # type: ignore[attr-defined]
    call.add_batch_ms = {}  # type: ignore[attr-defined]
    return call


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--words", type=int, default=400_000, help="words per worker")
    ap.add_argument("--rows", type=int, default=2_000_000, help="rows of the dataframe job")
    ap.add_argument("--batches", type=int, default=10, help="micro-batches of the streaming job")
    ap.add_argument("--stream-rate", type=int, default=20_000, help="rows/s of the rate source")
    args = ap.parse_args(argv)
    jobs = {
        "trivial": trivial,
        "keyed_count": keyed_count(args.words),
        "dataframe": over_dataframe(args.rows),
        "streaming": streaming(args.batches, args.stream_rate),
    }
    classic = ps.local_session(cores=4)
    with ConnectServer(cores=4) as server:
        remote = ps.connect(server.url, ship=False)
        sessions = {"classic": classic, "connect": remote}
        for spark in sessions.values():  # warm-up: JVM code paths, Python worker processes
            for fn in jobs.values():
                timed(spark, fn)
        jobs["streaming"].add_batch_ms.clear()  # type: ignore[attr-defined]
        before = LoadReading.now()
        runs: dict[str, dict[str, list[float]]] = {j: {s: [] for s in sessions} for j in jobs}
        for _ in range(args.repeat):
            for job, fn in jobs.items():
                for name, spark in sessions.items():
                    runs[job][name].append(round(timed(spark, fn), 3))
        load = MachineLoad.between(before, LoadReading.now())
        remote.stop()
    classic.stop()
    report: dict[str, Any] = {"benchmark": "spark_connect", "repeat": args.repeat, "jobs": {}}
    for job, by_session in runs.items():
        medians = {s: statistics.median(times) for s, times in by_session.items()}
        report["jobs"][job] = {
            "median_s": medians,
            "runs_s": by_session,
            "connect_over_classic": round(medians["connect"] / medians["classic"], 3),
        }
    report["jobs"]["dataframe"]["rows_per_s"] = {
        s: round(args.rows / m) for s, m in report["jobs"]["dataframe"]["median_s"].items()
    }
    add_batch = jobs["streaming"].add_batch_ms  # type: ignore[attr-defined]
    report["jobs"]["streaming"]["add_batch_median_ms"] = {
        s: statistics.median(ms) for s, ms in add_batch.items()
    }
    report["jobs"]["streaming"]["add_batch_connect_over_classic"] = round(
        statistics.median(add_batch["connect"]) / statistics.median(add_batch["classic"]), 3
    )
    report["words_per_worker"] = args.words
    report["rows"] = args.rows
    report["machine"] = load.to_dict()
    report["quiet"] = not load.under_load()
    print(load.describe(), file=sys.stderr)
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
