"""Latency of a keyed count under an open loop, pytimely beside Bytewax in alternating runs.

The workload, on one worker: record ``i`` is offered at ``start + i / rate`` whatever the
system does (an open loop: queueing shows), ``map`` makes ``(i % --keys, 1)``, a running count
per key follows (pytimely: ``stateful_map``; Bytewax: ``stateful_map``), and a record's latency
is the moment its result is out minus its scheduled instant.  pytimely's side is
:func:`pytimely.openloop.run_open_loop` (records stamped with their scheduled nanosecond rounded
down to a multiple of ``2**--quantum``, 65 us by default; a result is out when the output's
frontier has passed its time); Bytewax's side is
``bench/latency_bytewax.py``, run by ``--bytewax PYTHON`` (a Python with Bytewax installed; a
scratch environment outside the repository) when given.  For each rate of ``--rates`` the two
run alternately ``--repeat`` times; each figure is the median over the runs.  A run whose
latency passes 1 s (or that yields no sample) is DNF.  Prints JSON with the machine's load.

    python bench/latency.py [--rates 20000,50000,100000,200000] [--duration 2] [--repeat 3]
                            [--quantum 16] [--bytewax /tmp/bwx/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess

import pytimely as pt
from pytimely.openloop import LoadReading, MachineLoad, merge_results, run_open_loop

METRICS = ("p50_ms", "p99_ms", "p999_ms", "max_ms")
HERE = os.path.dirname(os.path.abspath(__file__))


def pytimely_run(rate: float, duration: float, keys: int, quantum: int) -> dict:
    """One run of the workload on one pytimely worker, timestamps in ns rounded down to a
    multiple of ``2**quantum``."""

    def build(scope, stream):
        pairs = stream.map(lambda i: (i % keys, 1))
        return pairs.stateful_map(int, lambda n, one: (n + one, n + one))

    results = pt.execute(
        lambda w: run_open_loop(w, build, rate=rate, duration=duration, quantum_log2=quantum)
    )
    out = merge_results(results)
    out["system"] = "pytimely"
    return out


def bytewax_run(python: str, rate: float, duration: float, keys: int) -> dict:
    """One run of the same workload by Bytewax, in its own process."""
    done = subprocess.run(
        [python, os.path.join(HERE, "latency_bytewax.py"), "--rate", str(rate),
         "--duration", str(duration), "--keys", str(keys)],
        capture_output=True, text=True, timeout=duration * 20 + 60,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the Bytewax run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def medians(runs: list[dict]) -> dict:
    finished = [r for r in runs if not r["dnf"]]
    out: dict = {"runs": len(runs), "dnf_runs": len(runs) - len(finished)}
    for m in METRICS:
        values = [r[m] for r in finished if r.get(m) is not None]
        out[m] = round(statistics.median(values), 4) if values else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rates", default="20000,50000,100000,200000")
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keys", type=int, default=1_000)
    ap.add_argument(
        "--quantum",
        type=int,
        default=16,
        help="pytimely's timestamps: scheduled ns rounded down to a multiple of 2**QUANTUM",
    )
    ap.add_argument("--bytewax", help="a Python with Bytewax installed, to run its side")
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",") if r]
    before = LoadReading.now()
    report: dict = {}
    for rate in rates:
        runs: dict[str, list[dict]] = {"pytimely": [], "bytewax": []}
        for _ in range(args.repeat):
            runs["pytimely"].append(pytimely_run(rate, args.duration, args.keys, args.quantum))
            if args.bytewax:
                runs["bytewax"].append(bytewax_run(args.bytewax, rate, args.duration, args.keys))
        report[str(int(rate))] = {
            system: {**medians(rs), "every_run": rs} for system, rs in runs.items() if rs
        }
    load = MachineLoad.between(before, LoadReading.now())
    print(
        json.dumps(
            {
                "benchmark": "latency",
                "workload": "open loop -> map(i -> (i % keys, 1)) -> running count per key",
                "duration_s": args.duration,
                "keys": args.keys,
                "pytimely_quantum_log2": args.quantum,
                "rates": report,
                "machine": load.to_dict(),
                "quiet": not load.under_load(),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
