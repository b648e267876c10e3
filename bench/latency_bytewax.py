"""Bytewax's side of ``bench/latency.py``: the same open-loop workload, run by a Python that has
Bytewax (``pip install bytewax`` in a scratch environment; this file imports nothing of
pytimely).

Record ``i`` is scheduled at ``start + i / rate`` (nanoseconds, ``time.perf_counter_ns``); the
source partition hands out every record whose instant has passed and asks to be woken at the
next one (no spinning); ``map`` makes ``(key, scheduled)`` with ``--keys`` keys, a
``stateful_map`` keeps a running count per key, and the sink takes each record's latency: the
moment it sees the count minus the scheduled instant.  The first ``--warmup`` seconds are not
measured.  Prints one JSON object: ``p50_ms``, ``p99_ms``, ``p999_ms``, ``max_ms``,
``records``, ``offered``, ``dnf`` (a latency over 1 s, or no sample at all) and ``cpu_s``
(the process's CPU seconds while the dataflow ran).

    python bench/latency_bytewax.py --rate 100000 --duration 2
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime, timedelta

from bytewax import operators as op
from bytewax.dataflow import Dataflow
from bytewax.inputs import DynamicSource, StatelessSourcePartition
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from bytewax.testing import run_main

DNF_NS = 1_000_000_000


class _Offer(StatelessSourcePartition):
    def __init__(self, rate: float, seconds: float) -> None:
        self.period = 1e9 / rate
        self.start = time.perf_counter_ns()
        self.end = self.start + int(seconds * 1e9)
        self.sent = 0

    def next_batch(self) -> list[tuple[int, int]]:
        now = time.perf_counter_ns()
        if now >= self.end:
            raise StopIteration
        due = int((now - self.start) / self.period) + 1  # records 0 .. due - 1 are due by now
        start, period = self.start, self.period
        batch = [(i, start + int(i * period)) for i in range(self.sent, due)]
        self.sent = due
        return batch

    def next_awake(self) -> datetime | None:
        wait_ns = self.start + self.sent * self.period - time.perf_counter_ns()
        return datetime.now(UTC) + timedelta(seconds=max(0.0, wait_ns) / 1e9)


class _Source(DynamicSource):
    def __init__(self, rate: float, seconds: float, offers: list) -> None:
        self.rate, self.seconds, self.offers = rate, seconds, offers

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _Offer:
        part = _Offer(self.rate, self.seconds)
        self.offers.append(part)
        return part


class _Latencies(StatelessSinkPartition):
    def __init__(self, latencies: list[int], warm_ns: list[int]) -> None:
        self.latencies, self.warm_ns = latencies, warm_ns

    def write_batch(self, items: list) -> None:
        now = time.perf_counter_ns()
        warm = self.warm_ns[0]
        self.latencies.extend(now - sched for _key, (_count, sched) in items if sched >= warm)


class _Sink(DynamicSink):
    def __init__(self, latencies: list[int], warm_ns: list[int]) -> None:
        self.latencies, self.warm_ns = latencies, warm_ns

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _Latencies:
        return _Latencies(self.latencies, self.warm_ns)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=100_000)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--keys", type=int, default=1_000)
    args = ap.parse_args()
    keys = args.keys
    latencies: list[int] = []
    offers: list[_Offer] = []
    warm_ns = [time.perf_counter_ns() + int(args.warmup * 1e9)]

    def count(state: int | None, record: tuple[int, int]) -> tuple[int, tuple[int, int]]:
        n = (state or 0) + 1
        return n, (n, record[1])

    flow = Dataflow("latency")
    offered = op.input("offer", flow, _Source(args.rate, args.duration + args.warmup, offers))
    keyed = op.map("key", offered, lambda r: (str(r[0] % keys), r))
    counted = op.stateful_map("count", keyed, count)
    op.output("latency", counted, _Sink(latencies, warm_ns))
    warm_ns[0] = time.perf_counter_ns() + int(args.warmup * 1e9)
    cpu = time.process_time()
    run_main(flow)
    cpu = time.process_time() - cpu
    latencies.sort()
    n = len(latencies)

    def quantile(q: float) -> float | None:
        return round(latencies[min(n - 1, int(q * n))] / 1e6, 4) if n else None

    print(
        json.dumps(
            {
                "system": "bytewax",
                "rate": args.rate,
                "offered": sum(o.sent for o in offers),
                "records": n,
                "p50_ms": quantile(0.5),
                "p99_ms": quantile(0.99),
                "p999_ms": quantile(0.999),
                "max_ms": round(latencies[-1] / 1e6, 4) if n else None,
                "dnf": n == 0 or latencies[-1] > DNF_NS,
                "cpu_s": round(cpu, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
