"""The main job's NEXMark workload (``pytimely.demo``) at a tiny size on the session's Spark,
checked against ``pytimely.nexmark.reference`` on the same events; and the Arrow conversions it
relies on (``pytimely.nexmark.spark``), without Spark."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pyarrow as pa
import pytest

import pytimely as pt
from pytimely.nexmark import EventBatch, NexmarkConfig, generate
from pytimely.nexmark import reference as ref
from pytimely.nexmark import spark as nxs

CONFIG = NexmarkConfig(rate=200, workers=3, in_flight_auctions=50)


def same_events(a: EventBatch, b: EventBatch) -> bool:
    if len(a) != len(b):
        return False
    pairs = [(getattr(a, f), getattr(b, f)) for f in ("event_number", "kind", "date_time")]
    for table in ("persons", "auctions", "bids"):
        pairs += list(zip(getattr(a, table), getattr(b, table), strict=True))
    return all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in pairs)


def test_events_round_trip_through_arrow_in_any_order():
    events = generate(CONFIG, 0, 5_000)
    batch = nxs.events_to_arrow(events)
    assert batch.schema.equals(nxs.EVENT_SCHEMA)
    assert same_events(nxs.arrow_to_events(batch), events)
    order = np.random.default_rng(1).permutation(len(events))
    shuffled = pa.Table.from_batches(
        [batch.take(pa.array(order[:1234])), batch.take(pa.array(order[1234:]))]
    )
    assert same_events(nxs.arrow_to_events(shuffled), events)
    assert len(nxs.arrow_to_events(batch.slice(0, 0))) == 0
    bids_only = batch.slice(10, 3)  # events 10..12 are bids
    assert nxs.arrow_to_events(bids_only).to_records() == events.to_records()[10:13]
    rows = batch.to_pylist()
    assert rows[0]["person"]["city"] and rows[0]["auction"] is None and rows[0]["bid"] is None


def test_generator_tasks_make_exactly_the_canonical_events():
    task = nxs.generator_task(CONFIG, 5_000, chunk=700)
    ids = pa.record_batch([pa.array(range(CONFIG.workers), pa.int64())], names=["id"])
    parts = list(task(iter([ids])))
    assert len(parts) > CONFIG.workers  # chunked
    assert same_events(
        nxs.arrow_to_events(pa.Table.from_batches(parts)), generate(CONFIG, 0, 5_000)
    )


def test_align_to_epochs_moves_batches_up_to_the_next_multiple():
    worker = pt.Worker()

    def build(scope):
        inp, stream = scope.new_input()
        return inp, nxs.align_to_epochs(stream, 10).capture()

    inp, captured = worker.dataflow(build)
    for t in (0, 3, 10, 11, 25):
        inp.advance_to(t)
        inp.send_batch([t])
        worker.step()
    inp.close()
    worker.run()
    out = [(t, sorted(batch)) for t, batch in captured.extract()]
    assert out == [(0, [0]), (10, [3, 10]), (20, [11]), (30, [25])]


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_demo_nexmark_on_spark_equals_the_reference(spark, tmp_path):
    from pytimely.demo import NEXMARK, run_demo

    workload = dataclasses.replace(
        NEXMARK,
        rate=CONFIG.rate,
        generators=CONFIG.workers,
        in_flight=CONFIG.in_flight_auctions,
        latency_queries=("q7",),
        latency_rates=(20_000,),
        latency_seconds=0.2,
        latency_warmup=0.1,
        latency_quiet_wait=0.0,
    )
    n, out = 12_000, tmp_path / "demo"
    lines: list[str] = []
    summary = run_demo(workload, rows=n, epochs=12, out=str(out), spark=spark, say=lines.append)
    report = "\n".join(lines)
    assert summary["ok"], report
    assert lines[-1] == "OK"
    assert summary["events_ok"] and summary["replay_ok"]
    assert summary["epoch_ns"] == 5 * 10**9  # 60 s of event time in 12 epochs
    # The printed report is made from the summary alone.
    table = workload.report(summary)
    after_blank = lines[len(lines) - 1 - lines[::-1].index("") + 1 :]
    assert after_blank[: len(table)] == table
    assert table[0].startswith("NEXMark on Spark: 12,000 events")

    # Independently of the demo's own checks: the events Spark wrote are the canonical ones,
    # and every query's results read back with Spark equal the batch reference on them.
    events = generate(CONFIG, 0, n)
    written = nxs.arrow_to_events(spark.read.parquet(str(out / "events")).toArrow())
    assert same_events(written, events)
    records = events.to_records()
    assert set(summary["queries"]) == set(nxs.RESULT_COLUMNS)
    for q, columns in nxs.RESULT_COLUMNS.items():
        names = [c for c, _ in columns]
        df = spark.read.parquet(str(out / "results" / q))
        assert {"epoch", "worker"} <= set(df.columns)
        ours = sorted(tuple(r) for r in df.select(*names).collect())
        theirs = sorted(getattr(ref, q)(records))
        assert ours == theirs, q
        assert summary["queries"][q]["rows"] == len(theirs)
    assert any(summary["queries"][q]["rows"] for q in ("q4", "q6"))  # auctions did close
    assert summary["queries"]["q7"]["rows"] == 6  # 60 s in 10 s windows

    # Results were written as epochs completed, rolled into few files per worker (one each:
    # the run is far shorter than roll_seconds), rows no later than their logical time's
    # epoch; Q7's capture exists; the latency plot was saved.
    q7_files = sorted(
        os.listdir(out / "results" / "q7" / "worker=0")
        + os.listdir(out / "results" / "q7" / "worker=1")
    )
    assert q7_files and all(f.startswith("part-") and f.endswith(".parquet") for f in q7_files)
    assert all(summary["queries"][q]["files"] <= 2 for q in summary["queries"])
    assert os.path.isdir(out / "capture" / "q7")
    assert summary["latency"]["runs"] and len(summary["latency"]["runs"]) == 3
    assert all(len(r["repeats"]) == 3 for r in summary["latency"]["runs"])  # median of 3
    assert summary["latency"]["load"]["cpus"] == os.cpu_count()
    assert any(line.strip().startswith("machine:") for line in lines)
    assert os.path.getsize(out / "latency.png") > 0
    assert os.path.exists(out / "summary.json")


# --- the latency stage, without Spark ------------------------------------------------------------


class _FakeSpark:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def stop(self) -> None:
        self.log.append("spark stopped")


@dataclasses.dataclass(frozen=True)
class _StagedWorkload:
    """Records the order of the demo's stages."""

    log: list[str]
    name: str = "staged"
    rows: int = 1
    epochs: int = 1

    def run(self, ctx):
        self.log.append("run with spark" if ctx.spark is not None else "run without spark")
        return {"ok": True}

    def after_spark(self, ctx, summary):
        self.log.append("after spark" if ctx.spark is None else "after spark, spark still up")
        summary["measured"] = True


def test_demo_measures_after_stopping_spark(tmp_path):
    from pytimely.demo import run_demo

    log: list[str] = []
    summary = run_demo(
        _StagedWorkload(log),
        out=str(tmp_path / "d"),
        spark=_FakeSpark(log),
        stop_spark=True,
        say=lambda line: None,
    )
    assert log == ["run with spark", "spark stopped", "after spark"]
    assert summary["measured"] and "spark stop" in summary["timings"]
    # A session the caller supplied is the caller's: not stopped unless asked.
    log.clear()
    run_demo(
        _StagedWorkload(log), out=str(tmp_path / "e"), spark=_FakeSpark(log), say=lambda line: None
    )
    assert log == ["run with spark", "after spark, spark still up"]


def _latency_workload(busy_cpus: float):
    from pytimely.demo import NEXMARK

    return dataclasses.replace(
        NEXMARK,
        latency_queries=("q7",),
        latency_rates=(20_000,),
        latency_seconds=0.1,
        latency_warmup=0.05,
        latency_repeats=3,
        latency_quiet_wait=0.0,
        latency_busy_cpus=busy_cpus,
    )


@pytest.mark.timeout(120)
def test_latency_table_is_a_median_printed_beside_the_machine_load(tmp_path):
    from pytimely.demo import Context

    lines: list[str] = []
    ctx = Context(spark=None, out=str(tmp_path), workers=1, rows=1, epochs=1, say=lines.append)
    # An impossible load limit: whatever else runs, the table counts as taken on a quiet
    # machine.
    workload = _latency_workload(busy_cpus=1e9)
    out = workload.measure_latency(ctx)
    lines += workload.latency_report(out)
    assert out["reliable"] and out["repeats"] == 3
    assert [r["idiom"] for r in out["runs"]] == ["tokens", "notifications", "watermarks"]
    for run in out["runs"]:
        assert len(run["repeats"]) == 3
        if not run["dnf"]:
            p50s = sorted(r["p50_ms"] for r in run["repeats"])
            assert run["p50_ms"] == p50s[1]
    text = "\n".join(lines)
    assert "median of 3 runs" in text and "measured after Spark stopped" in text
    machine = next(line for line in lines if line.strip().startswith("machine:"))
    assert f"{os.cpu_count()} CPUs" in machine and "load average" in machine
    assert "UNRELIABLE" not in text
    assert os.path.exists(tmp_path / "latency.json")


@pytest.mark.timeout(120)
def test_latency_table_taken_under_load_is_flagged_unreliable(tmp_path):
    from pytimely.demo import Context

    lines: list[str] = []
    ctx = Context(spark=None, out=str(tmp_path), workers=1, rows=1, epochs=1, say=lines.append)
    # A negative limit: any machine counts as loaded.
    workload = _latency_workload(busy_cpus=-1.0)
    out = workload.measure_latency(ctx)
    lines += workload.latency_report(out)
    assert not out["reliable"]
    assert any(line.startswith("  UNRELIABLE") for line in lines)
    assert all(
        table[0].endswith("UNRELIABLE: taken under load") for table in out["tables"].values()
    )
