"""A symmetric hash join: ``binary`` with ``Exchange`` pacts on both inputs.

Inspired by timely's ``hashjoin`` example.  Two streams of ``(key, value)`` pairs are routed by
key, so that equal keys meet on one worker.  The ``HashJoin`` operator keeps every pair it has
seen from each side in a hash map by key; a new pair on one side is joined with everything
stored for its key on the other side, then stored itself.  Each output ``(key, left, right)``
appears exactly once, at the time of whichever of its two inputs arrived later.  The operator
reacts to data only (``binary``: never woken by time passing) and sends with the capability
that comes with the message.

The driver sends ``batch`` pairs to each side per round, advancing the inputs and waiting on
the probe between rounds.

    $ python examples/hashjoin.py                   # 1000 keys, 10000 values, batches of 1000
    $ python examples/hashjoin.py 100000 1000000 10000 -w 2
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytimely as pt
from pytimely.communication.launch import parse_args


def hash_join(left: pt.Stream, right: pt.Stream) -> pt.Stream:
    """``(key, l, r)`` for every ``(key, l)`` of ``left`` and ``(key, r)`` of ``right``."""

    def constructor(capability: pt.Capability, info: pt.OperatorInfo) -> Callable:
        capability.drop()
        lefts: dict[Any, list[Any]] = {}
        rights: dict[Any, list[Any]] = {}

        def logic(input1: Any, input2: Any, output: Any) -> None:
            for cap, batch in input1:
                joined = []
                for key, value in batch:
                    for other in rights.get(key, ()):
                        joined.append((key, value, other))
                    lefts.setdefault(key, []).append(value)
                if joined:
                    output.session(cap).give_batch(joined)
            for cap, batch in input2:
                joined = []
                for key, value in batch:
                    for other in lefts.get(key, ()):
                        joined.append((key, other, value))
                    rights.setdefault(key, []).append(value)
                if joined:
                    output.session(cap).give_batch(joined)

        return logic

    by_key = pt.Exchange(lambda pair: pair[0])
    return left.binary(right, by_key, by_key, "HashJoin", constructor)


def generate(
    keys: int, vals: int, seed: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The two sides: ``vals`` pairs each, keys drawn from ``range(keys)``."""
    rng = random.Random(seed)
    left = [(rng.randrange(keys), rng.randrange(1 << 30)) for _ in range(vals)]
    right = [(rng.randrange(keys), rng.randrange(1 << 30)) for _ in range(vals)]
    return left, right


def run(
    keys: int = 1000,
    vals: int = 10000,
    batch: int = 1000,
    seed: int = 0,
    workers: int = 1,
    argv: Sequence[str] | None = None,
    out: Callable[[str], Any] | None = None,
) -> list[tuple[int, int, int]]:
    """Returns every join result ``(key, left value, right value)``, all workers merged."""
    left_all, right_all = generate(keys, vals, seed)

    def work(worker: pt.Worker) -> list[tuple[int, int, int]]:
        results: list[tuple[int, int, int]] = []

        def build(scope: pt.Scope) -> tuple[Any, Any, pt.ProbeHandle]:
            in1, left = scope.new_input()
            in2, right = scope.new_input()
            probe = hash_join(left, right).inspect_batch(lambda t, b: results.extend(b)).probe()
            return in1, in2, probe

        in1, in2, probe = worker.dataflow(build)
        left = left_all[worker.index :: worker.peers]
        right = right_all[worker.index :: worker.peers]
        start = time.perf_counter()
        offsets = range(0, max(len(left), len(right)), batch)
        for round_, offset in enumerate(offsets, start=1):
            in1.send_batch(left[offset : offset + batch])
            in2.send_batch(right[offset : offset + batch])
            in1.advance_to(round_)
            in2.advance_to(round_)
            worker.step_while(lambda: probe.less_than(in1.time))
            if out is not None:
                out(f"{time.perf_counter() - start:.3f}s\tworker {worker.index} batch {round_} "
                    f"complete ({len(results)} results so far)")
        return results

    per_worker = pt.execute_from_args(work, argv) if argv is not None else pt.execute(
        work, workers=workers
    )
    return [r for got in per_worker for r in got]


def main(argv: Sequence[str] | None = None) -> list[tuple[int, int, int]]:
    argv = list(sys.argv[1:] if argv is None else argv)
    free = parse_args(argv, usage=__doc__).free
    keys = int(free[0]) if free else 1000
    vals = int(free[1]) if len(free) > 1 else 10000
    batch = int(free[2]) if len(free) > 2 else 1000
    results = run(keys, vals, batch, argv=argv, out=print)
    print(f"{len(results)} join results")
    return results


if __name__ == "__main__":
    main()
