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

Workloads are pluggable (:data:`WORKLOADS`: anything with ``name``, ``summary``, ``rows``,
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
from dataclasses import dataclass, field
from typing import Any

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


@dataclass
class Context:
    """What a workload's ``run`` gets: the Spark session (``None`` in ``after_spark`` once
    :func:`run_demo` stopped it), the (emptied) output directory, the number of workers, the
    input size (``rows``, ``epochs``), ``say`` for progress lines, ``lap(name)`` to time its
    stages (``timings``), and the port on which worker 0 serves the live dashboard while the
    dataflow runs (``dashboard``, or None)."""

    spark: Any
    out: str
    workers: int
    rows: int
    epochs: int
    say: Callable[[str], Any]
    dashboard: int | None = None
    timings: dict[str, float] = field(default_factory=dict)
    _mark: float = field(default_factory=time.perf_counter)

    def lap(self, name: str) -> float:
        """Record the time since the last lap as stage ``name``; returns it in seconds."""
        now = time.perf_counter()
        took = now - self._mark
        self.timings[name] = self.timings.get(name, 0.0) + took
        self._mark = now
        return took


def _announce_dashboard(ctx: Context) -> None:
    if ctx.dashboard is not None:
        ctx.say(
            f"  dashboard http://127.0.0.1:{ctx.dashboard}/ (worker 0, while the dataflow runs)"
        )


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
        _announce_dashboard(ctx)
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


def worker_placement() -> dict[str, Any]:
    """Where the calling pytimely worker runs (inside its Spark barrier task): its process id
    and its executor's address (distinct executors have distinct addresses)."""
    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    return {"pid": os.getpid(), "executor": ctx.getTaskInfos()[ctx.partitionId()].address}


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


# --- the NEXMark workload --------------------------------------------------------------------

NEXMARK_QUERIES: dict[str, str] = {
    "q1": "currency conversion: every bid, price * 89 // 100",
    "q2": "selection: bids on auctions with id % 123 == 0",
    "q3": "join: category-10 auctions of sellers in OR/ID/CA",
    "q4": "average closing price per category (running)",
    "q5": "hot items: most-bid auction, 60 s window every 1 s",
    "q6": "average of a bidder's last 10 winning prices",
    "q7": "highest bid per 10 s tumbling window",
    "q8": "new users: auctions by sellers registered < 12 h ago",
}


def _nexmark_build(
    queries: tuple[str, ...],
    capture: tuple[str, ...],
    epoch_ns: int,
    results_dir: str,
    capture_dir: str,
) -> Callable[[Any, Any], Any]:
    """``build(scope, stream)`` for :func:`pytimely.spark.run_on_dataframe`: Arrow slices of
    the event table -> NEXMark event batches -> every query -> rows moved to their epoch ->
    rolling Parquet files (and a capture of the ``capture`` queries).  Returns a dict of the
    worker's statistics (filled in while it runs; cloud-pickled back when it ends)."""

    def build(scope: Any, stream: Any) -> dict[str, Any]:
        from pytimely import spark as ps
        from pytimely.nexmark import spark as nxs
        from pytimely.nexmark.queries import build_query

        stats: dict[str, Any] = {
            "worker": scope.index,
            "events": 0,
            "first": None,
            "last": None,
            "rows": dict.fromkeys(queries, 0),
            "placement": worker_placement(),
        }

        def to_events(batch: Any) -> Any:
            if stats["first"] is None:
                stats["first"] = time.perf_counter()
            events = nxs.arrow_to_events(batch)
            stats["events"] += len(events)
            return events

        events = stream.map_batch(to_events, name="ArrowToNexmark")
        for q in queries:
            rows = nxs.align_to_epochs(
                build_query(q, scope, events), epoch_ns, name=f"{q.upper()} ToEpochs"
            )
            if q in capture:
                ps.capture_parquet(rows, os.path.join(capture_dir, q))
            table = rows.map_batch(nxs.rows_to_arrow(q), name=f"{q.upper()} ToArrow")
            written = ps.write_parquet(
                table,
                os.path.join(results_dir, q),
                schema=nxs.RESULT_SCHEMAS[q],
                name=f"{q.upper()} Parquet",
            )

            def seen(t: Any, batch: Any, q: str = q) -> None:
                stats["rows"][q] += batch.num_rows
                stats["last"] = time.perf_counter()

            written.inspect_batch(seen, name=f"{q.upper()} Written")
        return stats

    return build


def _read_parquet(spark: Any, directory: str) -> tuple[Any, int]:
    """``(Arrow table or None, number of files)`` of a :func:`write_parquet` directory, read
    with Spark."""
    from pytimely.spark import output_files

    files = output_files(directory)
    if not files:
        return None, 0
    return spark.read.parquet(directory).toArrow(), len(files)


def _same_events(a: Any, b: Any) -> bool:
    import numpy as np

    if len(a) != len(b):
        return False
    for name in ("event_number", "kind", "date_time"):
        if not np.array_equal(getattr(a, name), getattr(b, name)):
            return False
    for table in ("persons", "auctions", "bids"):
        for x, y in zip(getattr(a, table), getattr(b, table), strict=True):
            if not np.array_equal(x, y):
                return False
    return True


def _fmt_s(ns: int) -> str:
    return f"{ns / 1e9:g} s"


@dataclass(frozen=True)
class NexmarkWorkload:
    """NEXMark on Spark (the module docstring).  ``rows`` events at ``rate`` events/s of event
    time from ``generators`` generator streams (= Spark tasks), ``in_flight`` auctions (small:
    auctions close within seconds, so Q4/Q6 have results), cut into ``epochs`` epochs; the
    ``queries`` run with tokens and ``capture`` of them are captured.  Latency: ``latency_queries``
    x idioms x ``latency_rates`` (empty: skip), ``latency_repeats`` runs of
    ``latency_seconds`` each after ``latency_warmup``, on ``latency_workers`` local workers,
    once Spark has stopped (:meth:`after_spark`); a table measured while other processes used
    more than ``latency_busy_cpus`` CPUs is flagged unreliable."""

    name: str = "nexmark"
    summary: str = "NEXMark queries over Spark-generated events"
    rows: int = 500_000
    epochs: int = 50
    rate: int = 2_000
    in_flight: int = 1_000
    generators: int = 4
    queries: tuple[str, ...] = tuple(NEXMARK_QUERIES)
    capture: tuple[str, ...] = ("q7",)
    latency_queries: tuple[str, ...] = ("q4", "q7")
    latency_rates: tuple[int, ...] = (100_000, 200_000)
    latency_seconds: float = 1.5
    latency_warmup: float = 0.5
    latency_workers: int = 1
    latency_in_flight: int = 10_000
    latency_repeats: int = 3
    latency_busy_cpus: float = 0.5
    latency_quiet_wait: float = 30.0

    def config(self) -> Any:
        """The generator's configuration: this workload's rate, streams and in-flight auctions."""
        from pytimely.nexmark import NexmarkConfig

        return NexmarkConfig(
            rate=self.rate, workers=self.generators, in_flight_auctions=self.in_flight
        )

    def epoch_ns(self, rows: int, epochs: int) -> int:
        """The epoch length: the event time of ``rows`` events cut into ``epochs`` (ns)."""
        span = self.config().ts(rows)
        return max(1, -(-span // max(1, epochs)))

    def run(self, ctx: Context) -> dict[str, Any]:
        """The stages in order (module docstring), each adding its part to the summary; then
        the report, printed from the summary alone."""
        unknown = [q for q in self.queries if q not in NEXMARK_QUERIES]
        if unknown or not self.queries:
            raise ValueError(
                f"unknown NEXMark queries {unknown or '(none)'}; known: "
                f"{', '.join(NEXMARK_QUERIES)}"
            )
        cfg = self.config()
        epoch_ns = self.epoch_ns(ctx.rows, ctx.epochs)
        span_ns = cfg.ts(ctx.rows)
        summary: dict[str, Any] = {
            "events": ctx.rows,
            "workers": ctx.workers,
            "epoch_ns": epoch_ns,
            "span_ns": span_ns,
            "epochs": -(-span_ns // epoch_ns),
            "queries_run": list(self.queries),
            "captured": [q for q in self.capture if q in self.queries],
            "dirs": {
                name: os.path.join(ctx.out, name) for name in ("events", "results", "capture")
            },
        }
        events_df = self.generate_events(ctx, summary)
        stats = self.run_queries(ctx, events_df, summary)
        self.check_results(ctx, events_df, stats, summary)
        self.replay_captures(ctx, summary)
        summary["latency"] = {}  # measured once Spark has stopped (after_spark)
        checks, replay = summary["queries"], summary["replay"]
        summary["replay_ok"] = all(r["identical"] for r in replay.values())
        summary["ok"] = (
            summary["events_ok"]
            and sum(summary["worker_events"].values()) == ctx.rows
            and all(c["equal"] and c["on_time"] == 1.0 for c in checks.values())
            and summary["replay_ok"]
            and any(c["rows"] for c in checks.values())
        )
        return summary

    def generate_events(self, ctx: Context, summary: dict[str, Any]) -> Any:
        """Stage 1: Spark generates the events and writes them as Parquet; returns them read
        back.  Adds ``kinds`` (events per kind) to ``summary``."""
        from pytimely.nexmark import spark as nxs

        cfg = self.config()
        events_dir = summary["dirs"]["events"]
        nxs.events_dataframe(ctx.spark, cfg, ctx.rows).write.parquet(events_dir)
        events_df = ctx.spark.read.parquet(events_dir)
        kinds = {r["kind"]: r["count"] for r in events_df.groupBy("kind").count().collect()}
        summary["kinds"] = {
            "persons": kinds.get(0, 0),
            "auctions": kinds.get(1, 0),
            "bids": kinds.get(2, 0),
        }
        ctx.lap("generate events")
        ctx.say(
            f"events: {ctx.rows:,} NEXMark events ({kinds.get(0, 0):,} persons, "
            f"{kinds.get(1, 0):,} auctions, {kinds.get(2, 0):,} bids; "
            f"{_fmt_s(summary['span_ns'])} of event time at {self.rate:,}/s), generated by "
            f"{cfg.workers} Spark tasks, written to {events_dir}"
        )
        return events_df

    def run_queries(self, ctx: Context, events_df: Any, summary: dict[str, Any]) -> list[Any]:
        """Stage 2: the queries on Spark-placed workers, epoch by epoch; returns the workers'
        statistics.  Adds ``dataflow``, ``worker_events`` and ``placement`` to ``summary``."""
        from pyspark.sql import functions as F

        from pytimely import spark as ps

        epoch_ns = summary["epoch_ns"]
        df = events_df.withColumn("epoch", F.expr(f"date_time div {epoch_ns} * {epoch_ns}"))
        ctx.say(
            f"running {', '.join(q.upper() for q in self.queries)} on {ctx.workers} "
            f"pytimely workers in one Spark barrier stage: {summary['epochs']} epochs of "
            f"{_fmt_s(epoch_ns)} ..."
        )
        _announce_dashboard(ctx)
        started = time.perf_counter()
        stats = ps.run_on_dataframe(
            df,
            _nexmark_build(
                self.queries,
                tuple(summary["captured"]),
                epoch_ns,
                summary["dirs"]["results"],
                summary["dirs"]["capture"],
            ),
            time="epoch",
            workers=ctx.workers,
            records="arrow",
            dashboard=ctx.dashboard,
        )
        stage_s = time.perf_counter() - started
        ctx.lap("dataflow")
        busy = [
            s["last"] - s["first"]
            for s in stats
            if s["first"] is not None and s["last"] is not None
        ]
        busy_s = max(busy) if busy and max(busy) > 0 else 0.0
        summary["dataflow"] = {
            "stage_s": round(stage_s, 3),
            "busy_s": round(busy_s, 3),
            "events_per_s": round(ctx.rows / busy_s) if busy_s else None,
        }
        summary["worker_events"] = {s["worker"]: s["events"] for s in stats}
        summary["placement"] = [s["placement"] for s in stats]
        return stats

    def check_results(
        self, ctx: Context, events_df: Any, stats: list[Any], summary: dict[str, Any]
    ) -> None:
        """Stage 3: the events against the generator, every query's results against the
        reference.  Adds ``events_ok`` and ``queries`` to ``summary``."""
        import numpy as np

        from pytimely.nexmark import generate
        from pytimely.nexmark import reference as nexmark_reference
        from pytimely.nexmark import spark as nxs

        epoch_ns = summary["epoch_ns"]
        events = nxs.arrow_to_events(events_df.toArrow())
        summary["events_ok"] = _same_events(events, generate(self.config(), 0, ctx.rows))
        records = events.to_records()
        checks: dict[str, dict[str, Any]] = {}
        for q in self.queries:
            table, files = _read_parquet(ctx.spark, os.path.join(summary["dirs"]["results"], q))
            ours = nxs.result_rows(table, q)
            theirs = sorted(getattr(nexmark_reference, q)(records))
            on_time = 1.0
            if table is not None and table.num_rows:
                logical = table.column(0).to_numpy()
                epoch = table.column("epoch").to_numpy()
                on_time = float(np.mean(epoch <= -(-logical // epoch_ns) * epoch_ns))
            per_worker = {w: s["rows"][q] for w, s in enumerate(stats)}
            checks[q] = {
                "rows": len(ours),
                "reference": len(theirs),
                "equal": ours == theirs,
                "on_time": on_time,
                "files": files,
                "worker_rows": per_worker,
                "sample": [list(r) for r in ours[:3]],
            }
        summary["queries"] = checks
        ctx.lap("check with reference")

    def replay_captures(self, ctx: Context, summary: dict[str, Any]) -> None:
        """Stage 4: every captured query replayed locally must give the same rows at the same
        epochs as its result files.  Adds ``replay`` to ``summary``."""
        import pytimely as pt
        from pytimely import spark as ps
        from pytimely.capture import replay_into
        from pytimely.nexmark import spark as nxs

        replay: dict[str, Any] = {}
        for q in summary["captured"]:
            directory = os.path.join(summary["dirs"]["capture"], q)
            replayed = pt.example(
                lambda scope, d=directory: replay_into(ps.capture_readers(d), scope).capture()
            ).extract()
            from_replay = sorted((t, *rec) for t, recs in replayed for rec in recs)
            table, _ = _read_parquet(ctx.spark, os.path.join(summary["dirs"]["results"], q))
            from_files = (
                []
                if table is None
                else sorted(
                    zip(
                        table.column("epoch").to_pylist(),
                        *(table.column(c).to_pylist() for c, _ in nxs.RESULT_COLUMNS[q]),
                    )
                )
            )
            replay[q] = {"rows": len(from_replay), "identical": from_replay == from_files}
        summary["replay"] = replay
        ctx.lap("capture replay")

    def report(self, summary: dict[str, Any]) -> list[str]:
        """The printed summary, from the summary dict alone (``summary.json`` reproduces it)."""
        dirs, flow = summary["dirs"], summary["dataflow"]
        n = summary["events"]
        lines = [
            f"NEXMark on Spark: {n:,} events, {_fmt_s(summary['span_ns'])} of event time in "
            f"{summary['epochs']} epochs of {_fmt_s(summary['epoch_ns'])}, "
            f"{summary['workers']} pytimely workers placed by Spark",
            f"  {'query':<6}{'what':<54}{'rows':>9}{'reference':>11}{'equal':>7}{'on time':>9}"
            f"{'files':>7}",
        ]
        for q, c in summary["queries"].items():
            lines.append(
                f"  {q.upper():<6}{NEXMARK_QUERIES[q]:<54}{c['rows']:>9,}{c['reference']:>11,}"
                f"{'yes' if c['equal'] else 'NO':>7}{c['on_time']:>9.0%}{c['files']:>7}"
            )
        lines.append(
            "  (equal: the same rows as pytimely.nexmark.reference on the same events; "
            "on time: written with the epoch of the row's logical time or earlier)"
        )
        lines.append(
            f"  events    equal to pytimely.nexmark.generate: {summary['events_ok']}; "
            f"per worker {dict(sorted(summary['worker_events'].items()))} in "
            f"{dirs['events']}"
        )
        throughput = (
            (
                f"; workers busy {flow['busy_s']:.1f} s: {flow['events_per_s']:,} events/s "
                f"through {len(summary['queries'])} queries"
            )
            if flow["busy_s"]
            else ""
        )
        lines.append(
            f"  dataflow  Spark stage {flow['stage_s']:.1f} s (reading, shuffle, worker "
            f"start, the queries){throughput}"
        )
        for q, r in summary["replay"].items():
            lines.append(
                f"  capture   {q.upper()}: {r['rows']:,} rows replayed locally from "
                f"{os.path.join(dirs['capture'], q)}, identical to the results: "
                f"{r['identical']}"
            )
        lines.extend(self.latency_report(summary["latency"]))
        lines.append(
            f"  files     {dirs['events']} (events), {dirs['results']}/qN (results per "
            f"worker, with their epoch), {dirs['capture']}"
        )
        lines.append(f"  read them: spark.read.parquet({os.path.join(dirs['results'], 'q7')!r})")
        return lines

    def after_spark(self, ctx: Context, summary: dict[str, Any]) -> None:
        """The stage that must not share the machine with Spark: the open-loop latency of
        ``latency_queries`` (into ``summary["latency"]``, :meth:`measure_latency`)."""
        summary["latency"] = self.measure_latency(ctx)

    def measure_latency(self, ctx: Context) -> dict[str, Any]:
        """Q4/Q7 x idioms x rates, each ``latency_repeats`` times (median), on a local worker,
        with the machine's load beside it, flagged unreliable if other processes were busy
        (:meth:`pytimely.openloop.MachineLoad.under_load` with ``latency_busy_cpus``); saves
        ``latency.json`` and ``latency.png`` and returns the dict :meth:`latency_report`
        prints.

        Latency is queueing: measured beside a busy JVM it shows the JVM's CPU use (tokens
        then looked slower than watermarks), on a quiet machine the idioms' own costs.  So
        the stage first waits (up to ``latency_quiet_wait`` s) for the machine to calm down.
        """
        if not self.latency_rates or not self.latency_queries:
            return {}
        from pytimely import openloop
        from pytimely.nexmark import latency as lat

        say = ctx.say
        quiet = openloop.wait_until_quiet(self.latency_quiet_wait, self.latency_busy_cpus)
        if quiet is not None and quiet.under_load(self.latency_busy_cpus, own_cpus=0.0):
            say(
                f"latency: the machine is still busy after {self.latency_quiet_wait:g} s "
                f"({quiet.describe()}); measuring anyway"
            )
        say(
            f"latency: {', '.join(q.upper() for q in self.latency_queries)} x "
            f"{', '.join(lat.IDIOMS)} at {', '.join(f'{r:,}' for r in self.latency_rates)} "
            f"events/s, {self.latency_repeats} runs each, open loop on "
            f"{self.latency_workers} local worker(s) ..."
        )
        runs, load = lat.sweep(
            self.latency_queries,
            self.latency_rates,
            repeats=self.latency_repeats,
            workers=self.latency_workers,
            duration=self.latency_seconds,
            in_flight=self.latency_in_flight,
            warmup=self.latency_warmup,
        )
        reliable = not load.under_load(self.latency_busy_cpus, own_cpus=self.latency_workers)
        caveat = "" if reliable else "  -- UNRELIABLE: taken under load"
        out: dict[str, Any] = {
            "runs": runs,
            "repeats": self.latency_repeats,
            "workers": self.latency_workers,
            "seconds": self.latency_seconds,
            "warmup": self.latency_warmup,
            "busy_cpus": self.latency_busy_cpus,
            "after_spark": ctx.spark is None,
            "reliable": reliable,
            "load": load.to_dict(),
            "machine": load.describe(),
            "tables": {q: lat.table(runs, q, caveat=caveat) for q in self.latency_queries},
        }
        try:
            title = f"pytimely NEXMark open-loop latency ({self.latency_workers} worker)"
            out["plot"] = lat.plot(
                runs,
                os.path.join(ctx.out, "latency.png"),
                title=title if reliable else title + " - UNRELIABLE: under load",
            )
        except ImportError as exc:  # matplotlib is a dependency; tolerate its absence anyway
            say(f"latency: no plot ({exc})")
        with open(os.path.join(ctx.out, "latency.json"), "w") as f:
            json.dump(out, f, indent=1)
        ctx.lap("latency")
        return out

    @staticmethod
    def latency_report(latency: dict[str, Any]) -> list[str]:
        """The latency part of the report, from :meth:`measure_latency`'s dict alone: how it
        was measured, the machine's load beside it, an UNRELIABLE banner if other processes
        were busy, the tables and the plot (nothing if latency was not measured)."""
        if not latency.get("runs"):
            return []
        where = (
            "measured after Spark stopped"
            if latency["after_spark"]
            else "measured with the caller's Spark session still running"
        )
        lines = [
            f"  latency   open loop, {latency['workers']} local worker(s), median of "
            f"{latency['repeats']} runs of {latency['seconds']:g} s after "
            f"{latency['warmup']:g} s warm-up, {where}",
            f"            {latency['machine']}",
        ]
        if not latency["reliable"]:
            lines.append(
                "  UNRELIABLE: other processes kept the machine busy while latency was measured "
                f"(more than {latency['busy_cpus']:g} CPUs besides ours); the numbers below "
                "show that load, not pytimely: not a result. Rerun on a quiet machine."
            )
        for table in latency["tables"].values():
            lines.extend(f"            {line}" for line in table)
        if latency.get("plot"):
            lines.append(f"  plot      {latency['plot']}")
        return lines


NEXMARK = NexmarkWorkload()

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
        "--rate", type=int, default=NEXMARK.rate, help="events per second of event time"
    )
    nx.add_argument(
        "--in-flight",
        type=int,
        default=NEXMARK.in_flight,
        help="in-flight auctions (small: auctions close within seconds)",
    )
    nx.add_argument(
        "--generators",
        type=int,
        default=NEXMARK.generators,
        help="generator streams = Spark tasks generating the events",
    )
    nx.add_argument(
        "--latency-rates",
        default=",".join(str(r) for r in NEXMARK.latency_rates),
        help="offered events/s for the Q4/Q7 latency runs ('none': skip them)",
    )
    nx.add_argument(
        "--latency-seconds",
        type=float,
        default=NEXMARK.latency_seconds,
        help="measured seconds per latency run",
    )
    nx.add_argument(
        "--latency-repeats",
        type=int,
        default=NEXMARK.latency_repeats,
        help="runs per latency configuration (the table shows the median)",
    )
    args = parser.parse_args([] if argv is None else argv)
    workload = WORKLOADS[args.workload]
    if isinstance(workload, NexmarkWorkload):
        workload = dataclasses.replace(
            workload,
            queries=tuple(q.strip().lower() for q in args.queries.split(",") if q.strip()),
            rate=args.rate,
            in_flight=args.in_flight,
            generators=args.generators,
            latency_rates=_ints(args.latency_rates),
            latency_seconds=args.latency_seconds,
            latency_repeats=args.latency_repeats,
        )
    from pytimely.spark import JavaUnavailable

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
    except JavaUnavailable as exc:
        print(f"pytimely demo: {exc}", file=sys.stderr)
        return 2
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
