"""Chain benchmark: one input -> N no-op maps -> probe, one record per round.

Reports the median and p99 round latency (send one record, advance the input, step until the
probe passes the round), the cost per operator, and the CPU time per operator per round
(``time.process_time`` over the same warm rounds: on a shared machine it moves less than the
wall clock), for N in {8, 64, 256, 1000}.  Prints JSON.
Target (issue 13): <= 4 us per operator per round on the 2-core machine (Rust: ~1 us).

    python bench/chain.py [--rounds R] [--lengths 8,64,256,1000] [--workers W] [--log]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import pytimely as pt


def run_chain(worker: pt.Worker, length: int, rounds: int) -> dict:
    def build(scope):
        inp, stream = scope.new_input()
        for _ in range(length):
            stream = stream.map(lambda x: x)
        return inp, stream.probe()

    t0 = time.perf_counter()
    inp, probe = worker.dataflow(build)
    build_s = time.perf_counter() - t0
    lat = []
    warmup = rounds // 10
    cpu_start = 0.0
    for r in range(rounds):
        if r == warmup:
            cpu_start = time.process_time()
        start = time.perf_counter()
        if worker.index == 0:
            inp.send(r)
        inp.advance_to(r + 1)
        worker.step_while(lambda: probe.less_than(inp.time))
        lat.append(time.perf_counter() - start)
    cpu_s = time.process_time() - cpu_start
    inp.close()
    warm = lat[warmup:]
    warm.sort()
    med = statistics.median(warm)
    return {
        "length": length,
        "rounds": rounds,
        "build_s": round(build_s, 4),
        "median_round_us": round(med * 1e6, 1),
        "p99_round_us": round(warm[int(len(warm) * 0.99) - 1] * 1e6, 1),
        "us_per_operator": round(med * 1e6 / length, 2),
        "cpu_us_per_operator": round(cpu_s * 1e6 / max(1, rounds - warmup) / length, 2),
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--lengths", default="8,64,256,1000")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument(
        "--log", action="store_true", help="record every event (Worker.log_to) and count them"
    )
    args = ap.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")]
    logged = [0]

    def count(events):
        logged[0] += len(events)

    def work(worker):
        if args.log:
            worker.log_to(count)
        return [run_chain(worker, n, args.rounds) for n in lengths]

    results = pt.execute(work, workers=args.workers)
    out = {
        "benchmark": "chain",
        "workers": args.workers,
        "python": sys.version.split()[0],
        "results": results[0],
        "target_us_per_operator": 4.0,
        "logging": args.log,
        "events_logged": logged[0],
    }
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
