"""Experiment 1 ("Timestamp tokens", SoCC 2022, section 7.2.1): timestamp granularity.

A rolling count of distinct words, fed open loop at a fixed rate; every record's timestamp is
its scheduled instant in nanoseconds rounded down to a multiple of ``2**q``.  For each quantum
and idiom (tokens, notifications, watermarks) we report p50/p999/max latency, or DNF.  Writes
``docs/results/granularity.json`` and ``granularity.png`` and prints the JSON.

    python bench/granularity.py [--rates 20000,50000] [--quanta 0,4,8,...] [--duration 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import idioms  # noqa: E402
import numpy as np  # noqa: E402
import plotting  # noqa: E402

import pytimely as pt  # noqa: E402
from pytimely.openloop import merge_results, run_open_loop  # noqa: E402


def words(first: int, count: int, times: np.ndarray) -> list[int]:
    return ((np.arange(first, first + count) * 2654435761) % 10_000).tolist()


def measure(idiom: str, rate: float, q: int, duration: float, workers: int = 1) -> dict:
    build = idioms.rolling_count(idiom)
    results = pt.execute(
        lambda w: run_open_loop(w, build, rate, duration, q, make_batch=words),
        workers=workers,
    )
    out = merge_results(results)
    out.update({"idiom": idiom, "rate": rate, "quantum_log2": q, "workers": workers})
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rates", default="20000,60000")
    ap.add_argument("--quanta", default="0,4,8,12,16,20,24,28")
    ap.add_argument("--duration", type=float, default=2.0)
    args = ap.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    quanta = [int(q) for q in args.quanta.split(",")]
    runs = []
    for rate in rates:
        for idiom in idioms.IDIOMS:
            for q in quanta:
                r = measure(idiom, rate, q, args.duration)
                print(json.dumps(r), file=sys.stderr)
                runs.append(r)
    out = {"experiment": "granularity", "duration_s": args.duration, "runs": runs}
    with open(plotting.path("granularity.json"), "w") as f:
        json.dump(out, f, indent=1)
    plt = plotting.plt
    fig, axes = plt.subplots(2, len(rates), figsize=(5.5 * len(rates), 7), squeeze=False)
    for col, rate in enumerate(rates):
        for row, metric in enumerate(("p50_ms", "max_ms")):
            ax = axes[row][col]
            for idiom in idioms.IDIOMS:
                sel = [r for r in runs if r["rate"] == rate and r["idiom"] == idiom]
                plotting.latency_lines(ax, [r["quantum_log2"] for r in sel], sel, idiom, metric)
            plotting.finish(
                ax,
                "timestamp quantum (log2 ns)",
                f"{metric.replace('_ms', '')} latency (ms)",
                f"{int(rate):,} records/s ({metric.split('_')[0]}; x = DNF)",
            )
    out["plot"] = plotting.save(fig, "granularity.png")
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
