"""The main job (``make demo``): a pytimely dataflow on Spark-placed workers, end to end.

On an embedded Spark (``local[workers + 2]``) it

1. builds a dataset with Spark (``--rows`` rows of words in ``--epochs`` epochs) and stores it
   as Parquet;
2. runs the workload's dataflow on ``--workers`` pytimely workers placed by one Spark barrier
   stage, each reading its partition of the dataset as Arrow batches, epoch after epoch
   (:func:`pytimely.spark.run_on_dataframe`);
3. has every worker write its results as Parquet per epoch as soon as the epoch completes
   (``results/worker=i/epoch=e.parquet``) and capture its output stream, data and progress,
   as Parquet (``capture/worker=i/capture.parquet``);
4. reads both back with Spark, checks the results against Spark's own computation on the same
   dataset, replays the captured streams into a local dataflow and checks they are identical;
5. prints a summary and where the files are.

Workloads are pluggable (:class:`Workload`, :data:`WORKLOADS`); the default is a keyed count
per epoch (word count).  ``python -m pytimely.demo --help`` lists the options.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["WORKLOADS", "Workload", "main", "run_demo"]

VOCABULARY = (
    "the", "timely", "dataflow", "model", "moves", "records", "with", "logical", "timestamps",
    "through", "operators", "that", "hold", "capabilities", "while", "progress", "tracking",
    "tells", "every", "input", "which", "times", "may", "still", "arrive", "so", "epochs",
    "complete", "one", "after", "another", "on", "many", "workers",
)


@dataclass(frozen=True)
class Workload:
    """What the demo runs.

    * ``dataset(spark, rows, epochs)`` -- the input DataFrame (built with Spark);
    * ``time`` -- its epoch column; ``key`` -- columns to place rows on workers by (or None);
      ``records`` -- how the workers receive rows ("arrow", "rows" or "tuples");
    * ``build(results_dir, capture_dir)`` -- returns ``build(scope, stream)`` for
      :func:`pytimely.spark.run_on_dataframe`; it must write the results with
      :func:`pytimely.spark.write_parquet` and capture them with
      :func:`pytimely.spark.capture_parquet`;
    * ``reference(df)`` -- Spark's own answer, with the columns the results have (incl. epoch);
    * ``columns`` -- the result columns, ``describe(rows)`` -- a line about a few result rows.
    """

    name: str
    summary: str
    dataset: Callable[[Any, int, int], Any]
    time: str
    key: Any
    records: str
    build: Callable[[str, str], Callable[[Any, Any], Any]]
    reference: Callable[[Any], Any]
    columns: tuple[str, ...]
    describe: Callable[[list[Any]], str]


# --- the default workload: a keyed count per epoch --------------------------------------------


def _words_dataset(spark: Any, rows: int, epochs: int) -> Any:
    from pyspark.sql import functions as F

    words = F.array(*[F.lit(w) for w in VOCABULARY])
    # Skewed word frequencies: a power of a uniform number picks low indices more often.
    pick = (F.pow(F.rand(seed=7), F.lit(2.5)) * len(VOCABULARY)).cast("int") + 1
    return spark.range(rows).select(
        (F.col("id") * epochs / rows).cast("long").alias("epoch"),
        F.element_at(words, pick).alias("word"),
    )


def _wordcount_build(results_dir: str, capture_dir: str) -> Callable[[Any, Any], Any]:
    from pytimely import spark as ps

    def build(scope: Any, stream: Any) -> Any:
        # Each Arrow batch holds the rows of one epoch: count words in it (vectorized), then
        # sum the partial counts per word across workers (exchange by word) per epoch.
        def partial_counts(batch: Any) -> list[tuple[str, int]]:
            import pyarrow as pa

            table = pa.Table.from_batches([batch]).group_by("word").aggregate(
                [("word", "count")]
            )
            return list(zip(table.column("word").to_pylist(),
                            table.column("word_count").to_pylist()))

        counts = stream.map_batch(partial_counts, name="PartialCounts").aggregate(
            lambda word, n, total: total + n, lambda word, total: (word, total), name="Count"
        )
        ps.capture_parquet(counts, capture_dir)
        return ps.write_parquet(counts, results_dir, columns=["word", "count"])

    return build


def _wordcount_reference(df: Any) -> Any:
    return df.groupBy("epoch", "word").count()


def _wordcount_describe(rows: list[Any]) -> str:
    last = max(r["epoch"] for r in rows)
    top = sorted((r for r in rows if r["epoch"] == last), key=lambda r: -r["count"])[:4]
    words = ", ".join(f"{r['word']}={r['count']}" for r in top)
    return f"epoch {last} top words: {words}"


WORDCOUNT = Workload(
    name="wordcount",
    summary="keyed count per epoch (word count) over a skewed vocabulary",
    dataset=_words_dataset,
    time="epoch",
    key=None,
    records="arrow",
    build=_wordcount_build,
    reference=_wordcount_reference,
    columns=("epoch", "word", "count"),
    describe=_wordcount_describe,
)

WORKLOADS: dict[str, Workload] = {WORDCOUNT.name: WORDCOUNT}


# --- the job ------------------------------------------------------------------------------------


def run_demo(
    workload: Workload,
    *,
    workers: int = 2,
    rows: int = 200_000,
    epochs: int = 10,
    out: str = os.path.join("out", "demo"),
    spark: Any = None,
    say: Callable[[str], Any] = print,
) -> dict[str, Any]:
    """Run the demo (module docstring); returns a summary dict (``ok`` says if all checks
    passed)."""
    import pytimely as pt
    from pytimely import spark as ps
    from pytimely.capture import replay_into

    t0 = time.perf_counter()
    out = os.path.abspath(out)
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    data_dir = os.path.join(out, "input")
    results_dir = os.path.join(out, "results")
    capture_dir = os.path.join(out, "capture")
    timings: dict[str, float] = {}

    def lap(name: str, since: float) -> float:
        now = time.perf_counter()
        timings[name] = now - since
        return now

    if spark is None:
        say(f"starting Spark (local[{workers + 2}]) ...")
        spark = ps.local_session(cores=workers + 2, app_name="pytimely-demo")
    t = lap("spark start", t0)

    workload.dataset(spark, rows, epochs).write.parquet(data_dir)
    df = spark.read.parquet(data_dir)
    t = lap("dataset", t)
    say(f"dataset: {rows:,} rows in {epochs} epochs, written by Spark to {data_dir}")

    say(f"running '{workload.name}' on {workers} pytimely workers in one Spark barrier stage ...")
    ps.run_on_dataframe(
        df,
        workload.build(results_dir, capture_dir),
        time=workload.time,
        key=workload.key,
        records=workload.records,
        workers=workers,
    )
    t = lap("dataflow", t)

    results = spark.read.parquet(results_dir)
    ours = results.select(*workload.columns)
    theirs = workload.reference(df).select(*workload.columns)
    missing = theirs.exceptAll(ours).count()
    extra = ours.exceptAll(theirs).count()
    result_rows = ours.collect()
    per_worker = {r["worker"]: r["count"] for r in results.groupBy("worker").count().collect()}
    t = lap("check with Spark", t)

    captured = spark.read.parquet(capture_dir)
    kinds = {r["kind"]: r["count"] for r in captured.groupBy("kind").count().collect()}
    replayed = pt.example(
        lambda scope: replay_into(ps.capture_readers(capture_dir), scope).capture()
    ).extract()
    from_replay = sorted((t_, *rec) for t_, recs in replayed for rec in recs)
    from_files = sorted(tuple(r) for r in result_rows)
    replay_ok = from_replay == from_files
    lap("capture replay", t)

    ok = missing == 0 and extra == 0 and replay_ok and bool(result_rows)
    total = time.perf_counter() - t0
    say("")
    say(f"pytimely on Spark: {workload.summary}")
    say(f"  results   {len(result_rows):,} rows (worker: rows {dict(sorted(per_worker.items()))}) "
        f"in {results_dir}")
    say(f"            {workload.describe(result_rows) if result_rows else 'empty'}")
    say(f"  check     equal to Spark's groupBy: {missing == 0 and extra == 0} "
        f"(missing {missing}, extra {extra})")
    say(f"  capture   {kinds.get('messages', 0):,} record rows + {kinds.get('progress', 0)} "
        f"progress rows in {capture_dir}")
    say(f"            replayed locally, identical to the results: {replay_ok}")
    say("  timings   " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items())
        + f"; total {total:.1f} s")
    say(f"  read them: spark.read.parquet({results_dir!r})")
    say("OK" if ok else "FAILED")
    return {
        "ok": ok,
        "rows": len(result_rows),
        "missing": missing,
        "extra": extra,
        "replay_ok": replay_ok,
        "timings": timings,
        "out": out,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the demo; ``argv`` are its options (None: all defaults, as ``pytimely demo``)."""
    parser = argparse.ArgumentParser(prog="python -m pytimely.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="wordcount")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--out", default=os.path.join("out", "demo"),
                        help="output directory (replaced)")
    args = parser.parse_args([] if argv is None else argv)
    from pytimely.spark import JavaUnavailable

    try:
        summary = run_demo(
            WORKLOADS[args.workload],
            workers=args.workers,
            rows=args.rows,
            epochs=args.epochs,
            out=args.out,
        )
    except JavaUnavailable as exc:
        print(f"pytimely demo: {exc}", file=sys.stderr)
        return 2
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
