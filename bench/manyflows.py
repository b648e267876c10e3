"""Many mostly idle dataflows: D of INPUT -> REGION{STASH -> FILTER x (L-1)} -> PROBE.

STASH buffers records per time under a retained capability and releases them when its input
frontier passes; FILTER keeps every record.  Round r: one record at time r into input r mod D,
advance every input to r+1, step until every probe has passed r.  We build the whole thing once
per interest level and report build time, peak RSS, median/p99 step time, and the ratio of
ALWAYS to IF_CAPABILITY.  Prints JSON.

Targets (issue 3) at D=1000, L=1000 (one million operators): build <= 30 s, peak RSS <= 6 GB,
IF_CAPABILITY median round <= 60 ms, ALWAYS/IF_CAPABILITY >= 30x.

    python bench/manyflows.py [--dataflows D] [--length L] [--rounds R] [--always-rounds R2]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import pytimely as pt


def stash(capability, info):
    capability.drop()
    pending = {}

    def logic(input, output):
        for cap, batch in input:
            held = pending.get(cap.time)
            if held is None:
                pending[cap.time] = (cap.retain(), list(batch))
            else:
                held[1].extend(batch)
        if pending:
            for t in sorted(pending):
                if not input.frontier.less_equal(t):
                    cap, records = pending.pop(t)
                    output.session(cap).give_batch(records)
                    cap.drop()

    return logic


def build_flows(worker, dataflows: int, length: int, interest):
    inputs, probes = [], []
    for _ in range(dataflows):

        def build(scope):
            inp, stream = scope.new_input()

            def region(inner):
                s = stream.enter(inner).unary_frontier(
                    pt.Pipeline, "Stash", stash, interest=interest
                )
                for _ in range(length - 1):
                    s = s.filter(lambda x: True)
                return s.leave()

            return inp, scope.region(region).probe()

        inp, probe = worker.dataflow(build)
        inputs.append(inp)
        probes.append(probe)
    return inputs, probes


def run(worker, dataflows: int, length: int, rounds: int, interest) -> dict:
    gc.collect()
    t0 = time.perf_counter()
    inputs, probes = build_flows(worker, dataflows, length, interest)
    build_s = time.perf_counter() - t0
    # Settle: every operator runs once (to drop its initial capability) before we measure.
    t1 = time.perf_counter()
    while worker._active:
        worker.step()
    settle_s = time.perf_counter() - t1
    times, steps = [], []
    for r in range(rounds):
        start = time.perf_counter()
        s0 = worker.steps
        inputs[r % dataflows].send(r)
        for inp in inputs:
            inp.advance_to(r + 1)
        target = probes[r % dataflows]
        worker.step_while(
            lambda: target.less_than(r + 1) or any(p.less_than(r + 1) for p in probes)
        )
        times.append(time.perf_counter() - start)
        steps.append(worker.steps - s0)
    for inp in inputs:
        inp.close()
    worker.run()
    times.sort()
    return {
        "interest": interest.name,
        "dataflows": dataflows,
        "length": length,
        "operators": dataflows * (length + 3),
        "rounds": rounds,
        "build_s": round(build_s, 2),
        "first_run_s": round(settle_s, 2),
        "median_round_ms": round(statistics.median(times) * 1e3, 3),
        "p99_round_ms": round(times[max(0, int(len(times) * 0.99) - 1)] * 1e3, 3),
        "median_steps_per_round": statistics.median(steps),
    }


def _child(args) -> None:
    """Run one configuration in this process and print its JSON (with this process' peak RSS)."""
    interest = pt.FrontierInterest[args.interest]
    worker = pt.Worker()
    result = run(worker, args.dataflows, args.length, args.rounds, interest)
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(result))
    sys.stdout.flush()
    os._exit(0)  # skip tearing down a million objects


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dataflows", type=int, default=1000)
    ap.add_argument("--length", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--always-rounds", type=int, default=5)
    ap.add_argument("--interest", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.interest:
        _child(args)
    results = []
    # Each configuration runs in its own process: a clean heap and its own peak RSS.
    for interest, rounds in (("IF_CAPABILITY", args.rounds), ("ALWAYS", args.always_rounds)):
        cmd = [
            sys.executable,
            __file__,
            "--dataflows",
            str(args.dataflows),
            "--length",
            str(args.length),
            "--rounds",
            str(rounds),
            "--interest",
            interest,
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        result = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps(result), file=sys.stderr)
        results.append(result)
    lazy, eager = results
    out = {
        "benchmark": "manyflows",
        "python": sys.version.split()[0],
        "results": results,
        "always_over_if_capability": round(eager["median_round_ms"] / lazy["median_round_ms"], 1),
        "targets": {"build_s": 30, "peak_rss_mb": 6144, "if_capability_median_ms": 60, "ratio": 30},
    }
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
