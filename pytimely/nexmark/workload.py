"""The NEXMark workload of the main job (``make demo``, :mod:`pytimely.demo`): Spark generates
the events, pytimely workers placed by Spark run the queries and write their results as Parquet,
Spark checks them against the batch reference, and the open-loop latency of Q4 and Q7 is
measured once Spark has stopped (the steps are those of :mod:`pytimely.demo`'s docstring).

The demo's harness hands :meth:`NexmarkWorkload.run` a context (:class:`RunContext`: the Spark
session, the output directory, the sizes, ``say`` and ``lap``), the one defined here: this
module does not import the harness.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..spark.executor import worker_placement

__all__ = ["NEXMARK", "NEXMARK_QUERIES", "NexmarkWorkload", "RunContext"]


@dataclass
class RunContext:
    """What a workload's ``run`` gets from the demo's harness (:func:`pytimely.demo.run_demo`,
    which calls it ``Context``): the Spark session (``None`` in ``after_spark`` once the harness
    stopped it), the (emptied) output directory, the number of workers, the input size
    (``rows``, ``epochs``), ``say`` for progress lines, ``lap(name)`` to time its stages
    (``timings``), and the port on which worker 0 serves the live dashboard while the dataflow
    runs (``dashboard``, or None)."""

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

    def announce_dashboard(self) -> None:
        """Say where the live dashboard is, if one was asked for."""
        if self.dashboard is not None:
            where = f"http://127.0.0.1:{self.dashboard}/"
            self.say(f"  dashboard {where} (worker 0, while the dataflow runs)")


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

    def run(self, ctx: RunContext) -> dict[str, Any]:
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

    def generate_events(self, ctx: RunContext, summary: dict[str, Any]) -> Any:
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

    def run_queries(self, ctx: RunContext, events_df: Any, summary: dict[str, Any]) -> list[Any]:
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
        ctx.announce_dashboard()
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
        self, ctx: RunContext, events_df: Any, stats: list[Any], summary: dict[str, Any]
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

    def replay_captures(self, ctx: RunContext, summary: dict[str, Any]) -> None:
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

    def after_spark(self, ctx: RunContext, summary: dict[str, Any]) -> None:
        """The stage that must not share the machine with Spark: the open-loop latency of
        ``latency_queries`` (into ``summary["latency"]``, :meth:`measure_latency`)."""
        summary["latency"] = self.measure_latency(ctx)

    def measure_latency(self, ctx: RunContext) -> dict[str, Any]:
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
