"""Chain benchmark: one input -> N no-op operators -> probe, one record per round.

The operators are ``map_batch(identity)``: ordinary operators, each queued, scheduled and
counted (a ``map`` on a pipeline runs inline, inside its sender's call, and would skip what
this measures; ``--maps`` builds the chain of ``map`` instead, to see that).

Measures the per-operator cost of scheduling and progress tracking, and what observing it
costs, in one run: for each N, three single-worker chains are built side by side -- ``off``
(nothing observed), ``statistics`` (``Worker.enable_statistics``) and ``log`` (every event
recorded, ``Worker.log_to`` with a listener that counts them) -- and driven in alternating
blocks of rounds (the order rotating per block), so that load on a shared machine hits every
configuration alike.  A round: send one record, advance the input, step until the probe passes
the round.

Prints JSON: per N and configuration the median and p99 round latency, the cost per operator
(wall), and the CPU time per operator per round (``time.process_time`` over the timed rounds:
on a shared machine it moves less than the wall clock); and per N the overhead of each
configuration against ``off`` as ratios (``cpu`` and ``wall``: 1.20 means 20% slower).
Targets: <= 4 us per operator per round at N=1000 with nothing observed (issue 13; Rust: ~1
us); event logging < 1.20x and nothing observed at no measurable cost (issue 16).

    python bench/chain.py [--rounds R] [--block B] [--lengths 8,64,256,1000]
                          [--configs off,statistics,log] [--maps]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import pytimely as pt

CONFIGS = ("off", "statistics", "log")


def _same(batch: Any) -> Any:
    return batch


class Chain:
    """One worker running one chain of ``length`` no-op operators (``map_batch``, or with
    ``maps`` ``map``), observed as ``config`` says."""

    def __init__(self, length: int, config: str, maps: bool = False) -> None:
        self.config = config
        self.events = 0
        self.worker = worker = pt.Worker()
        if config == "statistics":
            worker.enable_statistics()
        elif config == "log":
            worker.log_to(self._count)
        elif config != "off":
            raise ValueError(f"unknown configuration {config!r} (one of {', '.join(CONFIGS)})")

        def build(scope: pt.Scope) -> tuple[pt.InputHandle, pt.ProbeHandle]:
            inp, stream = scope.new_input()
            for _ in range(length):
                stream = stream.map(_same) if maps else stream.map_batch(_same)
            return inp, stream.probe()

        t0 = time.perf_counter()
        self.input, self.probe = worker.dataflow(build)
        self.build_s = time.perf_counter() - t0
        self.round = 0
        self.latencies: list[float] = []
        self.cpu_s = 0.0

    def _count(self, events: Any) -> None:
        self.events += len(events)

    def run(self, rounds: int, timed: bool = True) -> None:
        """Run ``rounds`` rounds; if ``timed``, add their latencies and CPU time."""
        inp, probe, worker = self.input, self.probe, self.worker
        passed: Callable[[], bool] = lambda: probe.less_than(inp.time)  # noqa: E731
        latencies = self.latencies
        clock = time.perf_counter
        cpu0 = time.process_time()
        for _ in range(rounds):
            start = clock()
            inp.send(self.round)
            self.round += 1
            inp.advance_to(self.round)
            worker.step_while(passed)
            if timed:
                latencies.append(clock() - start)
        if timed:
            self.cpu_s += time.process_time() - cpu0

    def close(self) -> None:
        self.input.close()
        self.worker.run()

    def figures(self, length: int) -> dict:
        lat = sorted(self.latencies)
        med = statistics.median(lat)
        return {
            "build_s": round(self.build_s, 4),
            "rounds": len(lat),
            "median_round_us": round(med * 1e6, 1),
            "p99_round_us": round(lat[max(0, int(len(lat) * 0.99) - 1)] * 1e6, 1),
            "us_per_operator": round(med * 1e6 / length, 2),
            "cpu_us_per_operator": round(self.cpu_s * 1e6 / len(lat) / length, 3),
            "cpu_s": round(self.cpu_s, 4),
            **({"events_logged": self.events} if self.config == "log" else {}),
        }


def compare(length: int, rounds: int, block: int, configs: list[str], maps: bool = False) -> dict:
    """Run the configurations' chains of ``length`` in alternating blocks of ``block``
    rounds until each has run ``rounds`` timed rounds (after a tenth as many untimed)."""
    chains = [Chain(length, c, maps) for c in configs]
    for chain in chains:
        chain.run(max(1, rounds // 10), timed=False)
    done = 0
    turn = 0
    while done < rounds:
        n = min(block, rounds - done)
        for k in range(len(chains)):  # rotate who goes first, so no one always follows GC
            chains[(turn + k) % len(chains)].run(n)
        done += n
        turn += 1
    for chain in chains:
        chain.close()
    figures = {c.config: c.figures(length) for c in chains}
    out: dict = {"length": length, "configs": figures}
    if "off" in figures:
        base = figures["off"]
        out["overhead"] = {
            c: {
                "cpu": round(f["cpu_us_per_operator"] / base["cpu_us_per_operator"], 3),
                "wall": round(f["us_per_operator"] / base["us_per_operator"], 3),
            }
            for c, f in figures.items()
            if c != "off"
        }
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=300, help="timed rounds per configuration")
    ap.add_argument("--block", type=int, default=10, help="rounds per turn of a configuration")
    ap.add_argument("--lengths", default="8,64,256,1000")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument(
        "--maps",
        action="store_true",
        help="chains of map (inline when unobserved) instead of map_batch (ordinary operators)",
    )
    args = ap.parse_args(argv)
    configs = [c for c in args.configs.split(",") if c]
    results = [
        compare(int(n), args.rounds, args.block, configs, args.maps)
        for n in args.lengths.split(",")
    ]
    out = {
        "benchmark": "chain",
        "operator": "map" if args.maps else "map_batch",
        "python": sys.version.split()[0],
        "results": results,
        "target_us_per_operator": 4.0,
        "target_log_overhead": 1.2,
    }
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
