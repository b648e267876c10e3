"""Many mostly idle dataflows: D of INPUT -> REGION{STASH -> FILTER x (L-1)} -> PROBE.

STASH buffers records per time under a retained capability and releases them when its input
frontier passes; FILTER keeps every record.  Round r: one record at time r into input r mod D,
advance every input to r+1, step until every probe has passed r.  We build the whole thing once
per interest level and report build time, peak RSS, median/p99 step time, and the ratio of
ALWAYS to IF_CAPABILITY.  Prints JSON.

Targets (issue 3) at D=1000, L=1000 (one million operators): build <= 30 s, peak RSS <= 6 GB,
IF_CAPABILITY median round <= 60 ms, ALWAYS/IF_CAPABILITY >= 30x.

``--arrange dd`` adds a third configuration (issue 29) whose ARRANGE is differential
dataflow's (``pytimely.differential``): one source dataflow arranges live ``(key, value)``
updates by key (``arrange_by_key``) and the D dataflows share that one trace, each importing it
by its trace handle: IMPORT -> SELECT -> REGION{FILTER x (L-1)} -> PROBE, where SELECT passes
on the updates of the dataflow's own key (dataflow d owns key d) and sends nothing otherwise.
Round r: one update ``(r mod D, r)`` into the shared arrangement at time r, advance to r+1,
step until every probe has passed r.  Every dataflow's IMPORT and SELECT see the round's batch
(it is one shared arrangement), but the regions of the D-1 dataflows it does not concern are
not visited and their filters not invoked.  It reports the ratio of its median round to
IF_CAPABILITY's.  (With SELECT inside the region, as STASH is, every batch wakes every region
and a round costs what ALWAYS costs.)

    python bench/manyflows.py [--dataflows D] [--length L] [--rounds R] [--always-rounds R2]
                              [--arrange dd]
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


def select(key):
    """SELECT: the updates of ``key`` from the arrangement's batches, and nothing (no message
    at all) when the batches hold none; woken by data only."""

    def ctor(capability, info):
        capability.drop()

        def logic(input, output):
            for t, batches in input.drain_batches():
                mine = [u for b in batches for u in b.data.get(key, ())]
                if mine:
                    output.forward(t, mine)

        return logic

    return ctor


def build_dd_flows(worker, dataflows: int, length: int):
    """The source dataflow (a ``dd`` input session arranged by key, kept by a trace handle)
    and D dataflows importing its trace: ``(session, handle, probes)``."""
    import pytimely.differential as dd

    def source(scope):
        session, updates = dd.new_input(scope)
        return session, updates.arrange_by_key("SharedArrange").trace_handle()

    session, handle = worker.dataflow(source)
    probes = []
    for d in range(dataflows):

        def build(scope, d=d):
            imported = handle.import_into(scope)
            # SELECT reads the shared batches before the region: a region is visited only
            # when its dataflow's key changed (inside, every batch would wake every region).
            selected = imported.stream.unary(pt.Pipeline, "Select", select(d))

            def region(inner):
                s = selected.enter(inner)
                for _ in range(length - 1):
                    s = s.filter(lambda x: True)
                return s.leave()

            return scope.region(region).probe()

        probes.append(worker.dataflow(build))
    return session, handle, probes


def run_dd(worker, dataflows: int, length: int, rounds: int) -> dict:
    """The ``--arrange dd`` configuration: D dataflows sharing one arrangement (see above)."""
    gc.collect()
    t0 = time.perf_counter()
    session, handle, probes = build_dd_flows(worker, dataflows, length)
    build_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    while worker._active:
        worker.step()
    settle_s = time.perf_counter() - t1
    times, steps = [], []
    for r in range(rounds):
        start = time.perf_counter()
        s0 = worker.steps
        session.update((r % dataflows, r), 1)
        session.advance_to(r + 1)
        handle.set_logical_compaction([r + 1])  # the imports are built: let the trace compact
        target = probes[r % dataflows]
        worker.step_while(
            lambda: target.less_than(r + 1) or any(p.less_than(r + 1) for p in probes)
        )
        times.append(time.perf_counter() - start)
        steps.append(worker.steps - s0)
    session.close()
    worker.run()
    times.sort()
    return {
        "interest": "DD_ARRANGE",
        "dataflows": dataflows,
        "length": length,
        "operators": dataflows * (length + 3) + 3,
        "rounds": rounds,
        "build_s": round(build_s, 2),
        "first_run_s": round(settle_s, 2),
        "median_round_ms": round(statistics.median(times) * 1e3, 3),
        "p99_round_ms": round(times[max(0, int(len(times) * 0.99) - 1)] * 1e3, 3),
        "median_steps_per_round": statistics.median(steps),
    }


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
    worker = pt.Worker()
    if args.interest == "DD_ARRANGE":
        result = run_dd(worker, args.dataflows, args.length, args.rounds)
    else:
        interest = pt.FrontierInterest[args.interest]
        result = run(worker, args.dataflows, args.length, args.rounds, interest)
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(result))
    sys.stdout.flush()
    os._exit(0)  # skip tearing down a million objects


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--dataflows", type=int, default=1000)
    ap.add_argument("--length", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--always-rounds", type=int, default=5)
    ap.add_argument(
        "--arrange",
        choices=("dd",),
        help="also run D dataflows sharing one pytimely.differential arrangement",
    )
    ap.add_argument("--interest", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.interest:
        _child(args)
    results = []
    # Each configuration runs in its own process: a clean heap and its own peak RSS.
    configurations = [("IF_CAPABILITY", args.rounds), ("ALWAYS", args.always_rounds)]
    if args.arrange == "dd":
        configurations.append(("DD_ARRANGE", args.rounds))
    for interest, rounds in configurations:
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
    lazy, eager = results[:2]
    out = {
        "benchmark": "manyflows",
        "python": sys.version.split()[0],
        "results": results,
        "always_over_if_capability": round(eager["median_round_ms"] / lazy["median_round_ms"], 1),
        "targets": {"build_s": 30, "peak_rss_mb": 6144, "if_capability_median_ms": 60, "ratio": 30},
    }
    if args.arrange == "dd":
        shared = results[2]
        out["dd_arrange_over_if_capability"] = round(
            shared["median_round_ms"] / lazy["median_round_ms"], 2
        )
        out["always_over_dd_arrange"] = round(
            eager["median_round_ms"] / shared["median_round_ms"], 1
        )
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
