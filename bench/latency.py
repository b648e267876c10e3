"""Latency of a keyed count under an open loop, pytimely beside Bytewax in alternating runs.

The workload, on one worker: record ``i`` is offered at ``start + i / rate`` whatever the
system does (an open loop: queueing shows) as the pair ``(i, scheduled instant)``, ``map``
makes ``(i % --keys, scheduled instant)``, and a running count per key follows (pytimely:
``stateful_map``; Bytewax: ``stateful_map``) whose output carries the scheduled instant along.
pytimely's side is :func:`pytimely.openloop.run_open_loop`, Bytewax's ``bench/latency_bytewax.py``
run by ``--bytewax PYTHON`` (a Python with Bytewax installed; a scratch environment outside the
repository) when given.  Two latencies of a record:

* *at the sink* (``seen_*``, what Bytewax's driver measures): the moment the count's output
  reaches the end of the dataflow minus the record's scheduled instant;
* *complete* (pytimely only): the moment the output's frontier has passed the record's
  timestamp (every result up to that time is out, and the system says so) minus the scheduled
  instant.

pytimely stamps records with their scheduled nanosecond rounded down to a multiple of
``2**QUANTUM``.  Each rate runs pytimely at ``--quantum`` (16: 65 us, the complete latency's
granularity) and at ``--sink-quantum`` (20: 1 ms, the granularity of a sink that needs no
completeness; Bytewax's timestamps are its epochs, 10 s by default), then Bytewax, ``--repeat``
times in turn; each figure is the median over the runs.  A run whose latency passes 1 s (or
that yields no sample) is DNF.  Each run also reports ``cpu_s``, the CPU seconds its process
used: a pytimely worker polls through waits shorter than its spin threshold (50 us, see
``pytimely.communication.timers``) instead of parking, which buys latency with CPU; ``--parked``
adds a sink run whose worker parks for every wait (``pytimely_sink_parked``), to show both
sides of that trade.  Prints JSON with the machine's load.

    python bench/latency.py [--rates 20000,50000,100000,200000] [--duration 2] [--repeat 3]
                            [--quantum 16] [--sink-quantum 20] [--parked]
                            [--bytewax /tmp/bwx/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time

import pytimely as pt
from pytimely.openloop import LoadReading, MachineLoad, merge_results, run_open_loop

METRICS = ("p50_ms", "p99_ms", "p999_ms", "max_ms")
SEEN = tuple(f"seen_{m}" for m in METRICS)
HERE = os.path.dirname(os.path.abspath(__file__))


def pytimely_run(
    rate: float, duration: float, keys: int, quantum: int, spin_s: float | None = None
) -> dict:
    """One run of the workload on one pytimely worker, timestamps in ns rounded down to a
    multiple of ``2**quantum``; ``spin_s`` overrides the worker's spin threshold (``0``: park
    for every wait)."""

    def build(scope, stream):
        pairs = stream.map(lambda r: (r[0] % keys, r[1]))
        return pairs.stateful_map(int, lambda n, scheduled: (n + 1, (n + 1, scheduled)))

    def work(w: pt.Worker) -> dict:
        if spin_s is not None:
            w.spin_s = spin_s
        return run_open_loop(
            w, build, rate=rate, duration=duration, quantum_log2=quantum,
            seen=lambda counted: counted[1][1],
        )  # fmt: skip

    cpu = time.process_time()  # one worker: it runs in this process
    results = pt.execute(work)
    out = merge_results(results)
    out["cpu_s"] = round(time.process_time() - cpu, 3)
    out["system"] = "pytimely"
    out["quantum_log2"] = quantum
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


def rates_list(text: str) -> list[float]:
    """``--rates``: positive numbers, comma-separated."""
    try:
        rates = [float(r) for r in text.split(",") if r.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of numbers: {text!r}"
        ) from None
    if not rates or min(rates) <= 0:
        raise argparse.ArgumentTypeError(f"rates must be positive numbers: {text!r}")
    return rates


def medians(runs: list[dict], metrics: tuple[str, ...] = METRICS) -> dict:
    finished = [r for r in runs if not r["dnf"]]
    out: dict = {"runs": len(runs), "dnf_runs": len(runs) - len(finished)}
    for m in metrics:
        values = [r[m] for r in finished if r.get(m) is not None]
        out[m] = round(statistics.median(values), 4) if values else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--rates",
        type=rates_list,
        default="20000,50000,100000,200000",
        help="offered records/s, comma-separated",
    )
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keys", type=int, default=1_000)
    ap.add_argument(
        "--quantum",
        type=int,
        default=16,
        help="pytimely's timestamps: scheduled ns rounded down to a multiple of 2**QUANTUM",
    )
    ap.add_argument(
        "--sink-quantum",
        type=int,
        default=20,
        help="the second pytimely run's timestamps (latency at the sink): 2**SINK_QUANTUM ns",
    )
    ap.add_argument("--bytewax", help="a Python with Bytewax installed, to run its side")
    ap.add_argument(
        "--parked",
        action="store_true",
        help="also run the sink measure with a worker that parks for every wait "
        "(pytimely_sink_parked: spin threshold 0)",
    )
    args = ap.parse_args()
    rates = args.rates
    before = LoadReading.now()
    report: dict = {}
    for rate in rates:
        runs: dict[str, list[dict]] = {
            "pytimely": [], "pytimely_sink": [], "pytimely_sink_parked": [], "bytewax": []
        }  # fmt: skip
        for _ in range(args.repeat):
            runs["pytimely"].append(pytimely_run(rate, args.duration, args.keys, args.quantum))
            runs["pytimely_sink"].append(
                pytimely_run(rate, args.duration, args.keys, args.sink_quantum)
            )
            if args.parked:
                runs["pytimely_sink_parked"].append(
                    pytimely_run(rate, args.duration, args.keys, args.sink_quantum, spin_s=0.0)
                )
            if args.bytewax:
                runs["bytewax"].append(bytewax_run(args.bytewax, rate, args.duration, args.keys))
        report[str(int(rate))] = {
            name: {**medians(runs[name], metrics + ("cpu_s",)), "every_run": runs[name]}
            for name, metrics in (
                ("pytimely", METRICS + SEEN),
                ("pytimely_sink", SEEN),
                ("pytimely_sink_parked", SEEN),
            )
            if runs[name]
        }
        if runs["bytewax"]:
            bytewax = medians(runs["bytewax"], METRICS + ("cpu_s",))
            report[str(int(rate))]["bytewax"] = {
                **bytewax,
                **{seen: bytewax[m] for seen, m in zip(SEEN, METRICS)},  # at its sink
                "every_run": runs["bytewax"],
            }
    load = MachineLoad.between(before, LoadReading.now())
    print(
        json.dumps(
            {
                "benchmark": "latency",
                "workload": "open loop -> map((i, sched) -> (i % keys, sched)) -> running count",
                "duration_s": args.duration,
                "keys": args.keys,
                "pytimely_quantum_log2": args.quantum,
                "pytimely_sink_quantum_log2": args.sink_quantum,
                "rates": report,
                "machine": load.to_dict(),
                "quiet": not load.under_load(),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
