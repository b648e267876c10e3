"""Mesh formation while 100 hostile callers hammer the listeners: runs and successes.

Each run starts worker 0 of ``--workers``, lets a crowd of ``--hostile`` callers (silent,
slowloris, garbage bytes, wrong secret; each replaced as soon as it is hung up on) settle in
on the listening ports, then starts the other workers and waits at most ``--timeout`` seconds
for the mesh.  The crowd and the run are the ones ``tests/test_communication.py`` uses (its
test repeats them three times); this script repeats them more often and prints the tally.

    python bench/mesh_under_attack.py [--runs 20] [--workers 3] [--hostile 100] [--timeout 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
)

from test_communication import form_mesh_under_attack  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--hostile", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=8.0)
    args = parser.parse_args(argv)
    successes, seconds = 0, []
    for run in range(args.runs):
        formed, took, connections, errors = form_mesh_under_attack(
            args.workers, args.hostile, args.timeout
        )
        successes += formed
        seconds.append(took)
        outcome = "formed" if formed else f"FAILED: {errors[0]}"[:200]
        print(f"run {run + 1}: {outcome} in {took:.2f} s ({connections} hostile connections)")
    print(
        f"{successes}/{args.runs} runs formed the mesh of {args.workers} workers under "
        f"{args.hostile} hostile callers; median {statistics.median(seconds):.2f} s, "
        f"max {max(seconds):.2f} s"
    )
    return 0 if successes == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
