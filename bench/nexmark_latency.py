"""Experiment 4 ("Timestamp tokens", SoCC 2022, section 7.4): NEXMark Q4 and Q7 latency,
three idioms, several rates.

Events come from the canonical generator (``pytimely.nexmark``), offered open loop by the harness:
event ``n`` is scheduled at ``n / rate`` seconds and stamped with that instant in nanoseconds
(quantized to ``2**quantum`` ns), which is also its NEXMark ``date_time``.  Q4 (average closing
price per category) and Q7 (highest bid per 10 s window) are built with timestamp tokens, with
Naiad-style notifications and with Flink-style watermarks.  Prints the latency tables as JSON,
writes ``docs/results/nexmark.json`` and ``nexmark.png``.

    python bench/nexmark_latency.py [--rates 50000,100000,200000] [--workers 1] [--duration 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import plotting  # noqa: E402

from pytimely.nexmark.latency import measure, table  # noqa: E402

IDIOMS = ("tokens", "notifications", "watermarks")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--queries", default="q4,q7")
    ap.add_argument("--rates", default="50000,100000,200000")
    ap.add_argument("--workers", default="1")
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--quantum", type=int, default=16, help="log2 ns of the timestamp quantum")
    ap.add_argument(
        "--in-flight",
        type=int,
        default=10_000,
        help="in-flight auctions (small: auctions close during the run)",
    )
    args = ap.parse_args(argv)
    runs = []
    for query in args.queries.split(","):
        for workers in (int(w) for w in args.workers.split(",")):
            for rate in (float(r) for r in args.rates.split(",")):
                for idiom in IDIOMS:
                    r = measure(
                        query, idiom, rate, workers, args.duration, args.quantum, args.in_flight
                    )
                    print(json.dumps(r), file=sys.stderr)
                    runs.append(r)
    out = {
        "experiment": "nexmark",
        "duration_s": args.duration,
        "quantum_log2": args.quantum,
        "runs": runs,
    }
    out["tables"] = {q: table(runs, q) for q in args.queries.split(",")}
    with open(plotting.path("nexmark.json"), "w") as f:
        json.dump(out, f, indent=1)
    plt = plotting.plt
    queries = args.queries.split(",")
    fig, axes = plt.subplots(1, len(queries), figsize=(5.5 * len(queries), 4), squeeze=False)
    for col, query in enumerate(queries):
        ax = axes[0][col]
        for idiom in IDIOMS:
            sel = [
                r
                for r in runs
                if r["query"] == query
                and r["idiom"] == idiom
                and r["workers"] == min(r2["workers"] for r2 in runs)
            ]
            plotting.latency_lines(ax, [r["rate"] for r in sel], sel, idiom, "p999_ms")
        ax.set_xscale("log")
        plotting.finish(
            ax, "offered events/s", "p999 latency (ms)", f"NEXMark {query.upper()} (x = DNF)"
        )
    out["plot"] = plotting.save(fig, "nexmark.png")
    for q in queries:
        print("\n".join(out["tables"][q]), file=sys.stderr)
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
