"""Experiment 2 ("Timestamp tokens", SoCC 2022, section 7.2.2): scaling the rolling word count
over 1 and 2 processes.

Strong scaling: the same total rate on 1 and 2 workers.  Weak scaling: the same rate per worker.
Two timestamp quanta (coarse 2**20 ns, fine 2**8 ns) and the three idioms.  Writes
``docs/results/scaling.json`` / ``scaling.png`` and prints the JSON.

    python bench/process_scaling.py [--rate 40000] [--duration 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import granularity  # noqa: E402
import idioms  # noqa: E402
import plotting  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rate", type=float, default=40000)
    ap.add_argument("--quanta", default="8,20")
    ap.add_argument("--duration", type=float, default=2.0)
    args = ap.parse_args(argv)
    runs = []
    for q in (int(x) for x in args.quanta.split(",")):
        for idiom in idioms.IDIOMS:
            for mode in ("strong", "weak"):
                for workers in (1, 2):
                    rate = args.rate if mode == "strong" else args.rate * workers
                    r = granularity.measure(idiom, rate, q, args.duration, workers)
                    r["mode"] = mode
                    print(json.dumps(r), file=sys.stderr)
                    runs.append(r)
    out = {"experiment": "scaling", "duration_s": args.duration, "runs": runs}
    with open(plotting.path("scaling.json"), "w") as f:
        json.dump(out, f, indent=1)
    quanta = sorted({r["quantum_log2"] for r in runs})
    plt = plotting.plt
    fig, axes = plt.subplots(len(quanta), 2, figsize=(11, 3.6 * len(quanta)), squeeze=False)
    for row, q in enumerate(quanta):
        for col, mode in enumerate(("strong", "weak")):
            ax = axes[row][col]
            for idiom in idioms.IDIOMS:
                sel = [
                    r
                    for r in runs
                    if r["quantum_log2"] == q and r["mode"] == mode and r["idiom"] == idiom
                ]
                plotting.latency_lines(ax, [r["workers"] for r in sel], sel, idiom, "p50_ms")
            ax.set_xticks([1, 2])
            plotting.finish(
                ax,
                "worker processes",
                "p50 latency (ms)",
                f"{mode} scaling, quantum 2^{q} ns (x = DNF)",
            )
    out["plot"] = plotting.save(fig, "scaling.png")
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
