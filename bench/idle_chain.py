"""Experiment 3 ("Timestamp tokens", SoCC 2022, section 7.3): chains of idle no-op operators.

An input that mostly just advances time (a trickle of records, timestamps quantized to 2**20 ns,
about one new time per millisecond) feeds a chain of ``L`` no-op operators, ``L`` in 8..256, on
2 worker processes.  Tokens and notifications never invoke an idle operator just because time
moved; watermarks must invoke every operator to forward every watermark, broadcasting it to
every worker when the edges exchange (watermarks-X) or not (watermarks-P).  Reports latency
per chain length; writes ``docs/results/idle_chain.json`` / ``idle_chain.png``.

    python bench/idle_chain.py [--lengths 8,16,32,64,128,256] [--workers 2] [--duration 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import idioms  # noqa: E402
import plotting  # noqa: E402

import pytimely as pt  # noqa: E402
from pytimely.openloop import merge_results, run_open_loop  # noqa: E402

CHAIN_IDIOMS = ("tokens", "notifications", "watermarks-X", "watermarks-P")


def measure(idiom: str, length: int, workers: int, rate: float, q: int, duration: float) -> dict:
    build = idioms.noop_chain(idiom, length)
    results = pt.execute(lambda w: run_open_loop(w, build, rate, duration, q), workers=workers)
    out = merge_results(results)
    out.update(
        {"idiom": idiom, "length": length, "workers": workers, "rate": rate, "quantum_log2": q}
    )
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lengths", default="8,16,32,64,128,256")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rate", type=float, default=1000)
    ap.add_argument("--quantum", type=int, default=20)
    ap.add_argument("--duration", type=float, default=2.0)
    args = ap.parse_args(argv)
    runs = []
    for idiom in CHAIN_IDIOMS:
        for length in (int(x) for x in args.lengths.split(",")):
            r = measure(idiom, length, args.workers, args.rate, args.quantum, args.duration)
            print(json.dumps(r), file=sys.stderr)
            runs.append(r)
    out = {"experiment": "idle_chain", "duration_s": args.duration, "runs": runs}
    with open(plotting.path("idle_chain.json"), "w") as f:
        json.dump(out, f, indent=1)
    plt = plotting.plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), squeeze=False)
    for col, metric in enumerate(("p50_ms", "p999_ms")):
        ax = axes[0][col]
        for idiom in CHAIN_IDIOMS:
            sel = [r for r in runs if r["idiom"] == idiom]
            plotting.latency_lines(ax, [r["length"] for r in sel], sel, idiom, metric)
        ax.set_xscale("log", base=2)
        plotting.finish(
            ax,
            "no-op operators in the chain",
            f"{metric.replace('_ms', '')} latency (ms)",
            f"{args.workers} workers, {int(args.rate)} records/s, quantum 2^{args.quantum} ns",
        )
    out["plot"] = plotting.save(fig, "idle_chain.png")
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
