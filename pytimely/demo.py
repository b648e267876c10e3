"""The main job (``make demo``): NEXMark on pytimely workers placed by Spark, end to end.

On an embedded Spark (``local[workers + 2]``) the default workload, ``nexmark``,

1. has **Spark generate the NEXMark events**: ``--generators`` Spark tasks (``mapInArrow``)
   each run one of the canonical generator's streams (:mod:`pytimely.nexmark.spark`) and Spark
   writes the ``--rows`` events as one Parquet table (``events/``: ``event_number, kind,
   date_time`` and ``person`` / ``auction`` / ``bid`` structs);
2. runs **NEXMark Q1-Q8** (timestamp tokens, :mod:`pytimely.nexmark.queries`) on ``--workers``
   pytimely workers in one Spark barrier stage (:func:`pytimely.spark.run_on_dataframe`): Spark
   reads the table, cuts event time into ``--epochs`` epochs (an ``epoch`` column: ``date_time``
   rounded down to the epoch length, in ns) and streams each worker its partition in epoch
   order as Arrow batches, which the workers turn back into NEXMark event batches;
3. has every worker write each query's results as Parquet **as the epochs complete**, rolled
   into a few files per worker with an ``epoch`` column
   (``results/qN/worker=i/part-<first>-<last>.parquet``, :func:`pytimely.spark.write_parquet`)
   and capture Q7's output stream, data and progress, as Parquet (``capture/q7/``);
4. reads the events and results back with Spark and checks them: the events against
   :func:`pytimely.nexmark.generate`, every query's rows against the batch reference
   (:mod:`pytimely.nexmark.reference`) on the same events, that every row was written no later
   than its logical time's epoch, and that the Q7 capture replays to the same rows;
5. stops Spark, then measures the open-loop latency of Q4 and Q7 with tokens, notifications
   and watermarks at ``--latency-rates`` (:mod:`pytimely.nexmark.latency`, on a local
   worker, the median of ``--latency-repeats`` runs each), prints the table next to the
   machine's load (flagged UNRELIABLE if other processes were busy) and plots it
   (``latency.png``);
6. prints a summary table and where the files are (``summary.json`` holds it all).

The NEXMark workload lives with NEXMark, in :mod:`pytimely.nexmark.workload`; this module is
the harness (:func:`run_demo`, which hands each workload a :class:`Context`: the
:class:`~pytimely.nexmark.workload.RunContext` defined there) and the command line.  Workloads are
pluggable (:data:`WORKLOADS`: anything with ``name``, ``summary``, ``rows``,
``epochs`` and ``run(ctx)``).  ``--workload wordcount`` runs the earlier demo, a keyed count per
epoch checked against Spark's ``groupBy().count()`` (:class:`Workload`).
``python -m pytimely.demo --help`` lists the options.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .nexmark.workload import NEXMARK, NEXMARK_QUERIES, NexmarkWorkload, RunContext
from .spark.executor import worker_placement

__all__ = [
    "NEXMARK",
    "NEXMARK_QUERIES",
    "WORDCOUNT",
    "WORKLOADS",
    "Context",
    "NexmarkWorkload",
    "Workload",
    "main",
    "run_demo",
]


# The context a workload's ``run`` gets is defined beside the workload contract, where the NEXMark
# workload (which does not import this harness) can name it.
Context = RunContext


def _timings_line(timings: dict[str, float], total: float) -> str:
    return ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()) + f"; total {total:.1f} s"


# --- the wordcount workload: a keyed count per epoch, checked with Spark ----------------------

VOCABULARY = (
    "the",
    "timely",
    "dataflow",
    "model",
    "moves",
    "records",
    "with",
    "logical",
    "timestamps",
    "through",
    "operators",
    "that",
    "hold",
    "capabilities",
    "while",
    "progress",
    "tracking",
    "tells",
    "every",
    "input",
    "which",
    "times",
    "may",
    "still",
    "arrive",
    "so",
    "epochs",
    "complete",
    "one",
    "after",
    "another",
    "on",
    "many",
    "workers",
)


@dataclass(frozen=True)
class Workload:
    """A dataflow over a Spark-built dataset whose results Spark can compute itself.

    * ``dataset(spark, rows, epochs)`` -- the input DataFrame (built with Spark);
    * ``time`` -- its epoch column; ``key`` -- columns to place rows on workers by (or None);
      ``records`` -- how the workers receive rows ("arrow", "rows" or "tuples");
    * ``build(results_dir, capture_dir)`` -- returns ``build(scope, stream)`` for
      :func:`pytimely.spark.run_on_dataframe`; it must write the results with
      :func:`pytimely.spark.write_parquet` and capture them with
      :func:`pytimely.spark.capture_parquet`, and return :func:`worker_placement` (the
      summary's ``placement``: where each worker ran);
    * ``reference(df)`` -- Spark's own answer, with the columns the results have (incl. epoch);
    * ``columns`` -- the result columns, ``describe(rows)`` -- a line about a few result rows;
    * ``rows``, ``epochs`` -- the default input size.
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
    rows: int = 200_000
    epochs: int = 10

    def run(self, ctx: Context) -> dict[str, Any]:
        """Build the dataset, run the dataflow on Spark, check it against Spark, replay the
        capture -- one method per stage, each adding to the summary; returns it (``ok``: all
        checks passed; :func:`run_demo` prints :meth:`report` of it)."""
        summary: dict[str, Any] = {
            "dirs": {name: os.path.join(ctx.out, name) for name in ("input", "results", "capture")},
        }
        df = self.make_dataset(ctx, summary)
        self.run_dataflow(ctx, df, summary)
        result_rows = self.check_with_spark(ctx, df, summary)
        self.replay_capture(ctx, result_rows, summary)
        summary["ok"] = (
            summary["missing"] == 0
            and summary["extra"] == 0
            and summary["replay_ok"]
            and summary["rows"] > 0
        )
        return summary

    def make_dataset(self, ctx: Context, summary: dict[str, Any]) -> Any:
        """Stage 1: Spark builds the input and writes it as Parquet; returns it read back."""
        data_dir = summary["dirs"]["input"]
        self.dataset(ctx.spark, ctx.rows, ctx.epochs).write.parquet(data_dir)
        df = ctx.spark.read.parquet(data_dir)
        ctx.lap("dataset")
        ctx.say(
            f"dataset: {ctx.rows:,} rows in {ctx.epochs} epochs, written by Spark to {data_dir}"
        )
        return df

    def run_dataflow(self, ctx: Context, df: Any, summary: dict[str, Any]) -> None:
        """Stage 2: the dataflow on Spark-placed workers.  Adds ``placement``."""
        from pytimely import spark as ps

        ctx.say(
            f"running '{self.name}' on {ctx.workers} pytimely workers in one Spark barrier "
            "stage ..."
        )
        ctx.announce_dashboard()
        summary["placement"] = ps.run_on_dataframe(
            df,
            self.build(summary["dirs"]["results"], summary["dirs"]["capture"]),
            time=self.time,
            key=self.key,
            records=self.records,
            workers=ctx.workers,
            dashboard=ctx.dashboard,
        )
        ctx.lap("dataflow")

    def check_with_spark(self, ctx: Context, df: Any, summary: dict[str, Any]) -> list[Any]:
        """Stage 3: the result files against Spark's own answer; returns the result rows.
        Adds ``rows``, ``missing``, ``extra``, ``per_worker`` and ``sample``."""
        results = ctx.spark.read.parquet(summary["dirs"]["results"])
        ours = results.select(*self.columns)
        theirs = self.reference(df).select(*self.columns)
        summary["missing"] = theirs.exceptAll(ours).count()
        summary["extra"] = ours.exceptAll(theirs).count()
        result_rows = ours.collect()
        summary["rows"] = len(result_rows)
        summary["per_worker"] = dict(
            sorted((r["worker"], r["count"]) for r in results.groupBy("worker").count().collect())
        )
        summary["sample"] = self.describe(result_rows) if result_rows else "empty"
        ctx.lap("check with Spark")
        return result_rows

    def replay_capture(self, ctx: Context, result_rows: list[Any], summary: dict[str, Any]) -> None:
        """Stage 4: the capture replayed locally must equal the result files.  Adds
        ``capture_kinds`` and ``replay_ok``."""
        import pytimely as pt
        from pytimely import spark as ps
        from pytimely.capture import replay_into

        capture_dir = summary["dirs"]["capture"]
        captured = ctx.spark.read.parquet(capture_dir)
        summary["capture_kinds"] = {
            r["kind"]: r["count"] for r in captured.groupBy("kind").count().collect()
        }
        replayed = pt.example(
            lambda scope: replay_into(ps.capture_readers(capture_dir), scope).capture()
        ).extract()
        from_replay = sorted((t_, *rec) for t_, recs in replayed for rec in recs)
        summary["replay_ok"] = from_replay == sorted(tuple(r) for r in result_rows)
        ctx.lap("capture replay")

    def report(self, summary: dict[str, Any]) -> list[str]:
        """The printed summary, from the summary dict alone."""
        dirs, kinds = summary["dirs"], summary["capture_kinds"]
        missing, extra = summary["missing"], summary["extra"]
        return [
            f"pytimely on Spark: {self.summary}",
            f"  results   {summary['rows']:,} rows (worker: rows {summary['per_worker']}) in "
            f"{dirs['results']}",
            f"            {summary['sample']}",
            f"  check     equal to Spark's groupBy: {missing == 0 and extra == 0} "
            f"(missing {missing}, extra {extra})",
            f"  capture   {kinds.get('messages', 0):,} record rows + {kinds.get('progress', 0)} "
            f"progress rows in {dirs['capture']}",
            f"            replayed locally, identical to the results: {summary['replay_ok']}",
            f"  read them: spark.read.parquet({dirs['results']!r})",
        ]


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

            table = pa.Table.from_batches([batch]).group_by("word").aggregate([("word", "count")])
            return list(
                zip(table.column("word").to_pylist(), table.column("word_count").to_pylist())
            )

        counts = stream.map_batch(partial_counts, name="PartialCounts").aggregate(
            lambda word, n, total: total + n, lambda word, total: (word, total), name="Count"
        )
        ps.capture_parquet(counts, capture_dir)
        ps.write_parquet(counts, results_dir, columns=["word", "count"])
        return worker_placement()

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


WORKLOADS: dict[str, Any] = {NEXMARK.name: NEXMARK, WORDCOUNT.name: WORDCOUNT}


# --- the job ------------------------------------------------------------------------------------


def run_demo(
    workload: Any = NEXMARK,
    *,
    workers: int = 2,
    rows: int | None = None,
    epochs: int | None = None,
    out: str = os.path.join("out", "demo"),
    spark: Any = None,
    master: str | None = None,
    conf: dict[str, str] | None = None,
    say: Callable[[str], Any] = print,
    stop_spark: bool | None = None,
    dashboard: int | None = None,
) -> dict[str, Any]:
    """Run ``workload`` (module docstring) on ``workers`` Spark-placed workers over ``rows``
    input rows in ``epochs`` epochs (None: the workload's defaults), writing into ``out``
    (replaced); ``spark``: a session to use (None: :func:`pytimely.spark.connect` to ``master``
    with ``conf``, or start ``local[workers + 2]`` when ``master`` is None too); ``dashboard``:
    a port on which worker 0 serves the live dashboard while the dataflow runs.  Returns the
    workload's summary dict with ``timings`` and ``out``; ``ok`` says if all checks passed.

    Stages: ``workload.run(ctx)`` (everything that needs Spark), then Spark is stopped
    (``stop_spark``; None: only a session this call started), then the workload's optional
    ``after_spark(ctx, summary)`` (measurements that must not compete with the JVM for the
    CPUs, e.g. latency), then the report, printed from the summary alone
    (``workload.report(summary)``).
    """
    from pytimely import spark as ps

    t0 = time.perf_counter()
    out = os.path.abspath(out)
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    if spark is None and master is not None:
        say(f"connecting to Spark at {master} ...")
        spark = ps.connect(master, app_name="pytimely-demo", conf=conf)
    elif spark is None:
        say(f"starting Spark (local[{workers + 2}]) ...")
        spark = ps.local_session(cores=workers + 2, app_name="pytimely-demo", conf=conf)
    else:
        stop_spark = bool(stop_spark)  # a session the caller supplied is the caller's
    if stop_spark is None:
        stop_spark = True
    ctx = Context(
        spark=spark,
        out=out,
        workers=workers,
        rows=workload.rows if rows is None else rows,
        epochs=workload.epochs if epochs is None else epochs,
        say=say,
        dashboard=dashboard,
        _mark=t0,
    )
    ctx.lap("spark start")
    summary = workload.run(ctx)
    after_spark = getattr(workload, "after_spark", None)
    if stop_spark:
        spark.stop()
        ctx.spark = None
        ctx.lap("spark stop")
    if after_spark is not None:
        after_spark(ctx, summary)
    report = getattr(workload, "report", None)
    if report is not None:
        say("")
        for line in report(summary):
            say(line)
    total = time.perf_counter() - t0
    summary["timings"] = {k: round(v, 3) for k, v in ctx.timings.items()}
    summary["total_s"] = round(total, 3)
    summary["out"] = out
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=str)
    say("  timings   " + _timings_line(ctx.timings, total))
    say(f"  summary   {os.path.join(out, 'summary.json')}")
    say("OK" if summary["ok"] else "FAILED")
    return summary


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(float(x)) for x in text.replace(" ", "").split(",") if x and x != "none")


# The NEXMark workload's numeric settings on the command line: option, type and help.  An
# option's default is the workload's field of the same name (``--in-flight``: ``in_flight``),
# which the option replaces.
_NEXMARK_NUMBERS: tuple[tuple[str, type, str], ...] = (
    ("--rate", int, "events per second of event time"),
    ("--in-flight", int, "in-flight auctions (small: auctions close within seconds)"),
    ("--generators", int, "generator streams = Spark tasks generating the events"),
    ("--latency-seconds", float, "measured seconds per latency run"),
    ("--latency-repeats", int, "runs per latency configuration (the table shows the median)"),
)


def _field(option: str) -> str:
    """The workload field a command-line option sets (and the ``argparse`` destination):
    ``--in-flight`` gives ``in_flight``."""
    return option[2:].replace("-", "_")


def main(argv: list[str] | None = None) -> int:
    """Run the demo; ``argv`` are its options (None: all defaults, as ``pytimely demo``)."""
    parser = argparse.ArgumentParser(
        prog="python -m pytimely.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default=NEXMARK.name)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--rows",
        "--events",
        type=int,
        default=None,
        help=f"input rows: events for nexmark (default {NEXMARK.rows:,}), words "
        f"for wordcount (default {WORDCOUNT.rows:,})",
    )
    parser.add_argument(
        "--epochs",
        type=int,
        default=None,
        help=f"epochs the input is cut into (defaults {NEXMARK.epochs} / {WORDCOUNT.epochs})",
    )
    parser.add_argument(
        "--out",
        default=os.path.join("out", "demo"),
        help="output directory (replaced; on a cluster, a path every executor and the driver see)",
    )
    parser.add_argument(
        "--master",
        default=None,
        help="Spark master URL, e.g. spark://host:7077 (default: an embedded "
        "local[workers + 2]); the secret of spark.authenticate comes from "
        "SPARK_AUTHENTICATE_SECRET or --conf spark.authenticate.secret=...",
    )
    parser.add_argument(
        "--remote",
        default=None,
        metavar="sc://HOST:PORT",
        help="run through a Spark Connect server instead (e.g. sc://127.0.0.1:15002; "
        "the server's executors need numpy and pyarrow); --conf does not apply",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting (repeatable)",
    )
    parser.add_argument(
        "--dashboard",
        type=int,
        default=None,
        metavar="PORT",
        help="serve the live dashboard of the workers on "
        "http://127.0.0.1:PORT/ (from worker 0's executor) while the "
        "dataflow runs",
    )
    nx = parser.add_argument_group("nexmark")
    nx.add_argument(
        "--queries", default=",".join(NEXMARK.queries), help="queries to run (default all of q1-q8)"
    )
    nx.add_argument(
        "--latency-rates",
        default=",".join(str(r) for r in NEXMARK.latency_rates),
        help="offered events/s for the Q4/Q7 latency runs ('none': skip them)",
    )
    for option, kind, text in _NEXMARK_NUMBERS:
        nx.add_argument(option, type=kind, default=getattr(NEXMARK, _field(option)), help=text)
    args = parser.parse_args([] if argv is None else argv)
    workload = WORKLOADS[args.workload]
    if isinstance(workload, NexmarkWorkload):
        workload = dataclasses.replace(
            workload,
            queries=tuple(q.strip().lower() for q in args.queries.split(",") if q.strip()),
            latency_rates=_ints(args.latency_rates),
            **{_field(option): getattr(args, _field(option)) for option, *_ in _NEXMARK_NUMBERS},
        )
    from pytimely.spark import SparkSetupError

    if args.remote is not None:
        if not args.remote.startswith("sc://"):
            parser.error(f"--remote takes a Spark Connect URL sc://host:port, not {args.remote!r}")
        if args.master is not None:
            parser.error("give --master or --remote, not both")
        args.master = args.remote
    try:
        conf = dict(item.split("=", 1) for item in args.conf)
        summary = run_demo(
            workload,
            workers=args.workers,
            rows=args.rows,
            epochs=args.epochs,
            out=args.out,
            master=args.master,
            conf=conf or None,
            dashboard=args.dashboard,
        )
    except SparkSetupError as exc:  # no Java, no master or server there, too few slots, ...
        print(f"pytimely demo: {exc}", file=sys.stderr)
        return 2
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
