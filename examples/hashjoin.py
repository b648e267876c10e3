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

import random
import time
from collections.abc import Callable
from typing import Any

import pytimely as pt


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


Pairs = list[tuple[int, int]]


def generate(keys: int, vals: int, seed: int) -> tuple[Pairs, Pairs]:
    """The two sides: ``vals`` pairs each, keys drawn from ``range(keys)``."""
    rng = random.Random(seed)
    left = [(rng.randrange(keys), rng.randrange(1 << 30)) for _ in range(vals)]
    right = [(rng.randrange(keys), rng.randrange(1 << 30)) for _ in range(vals)]
    return left, right


def main() -> None:
    words = [int(word) for word in pt.args()]
    keys, vals, batch = (words + [1000, 10000, 1000][len(words) :])[:3]
    left_all, right_all = generate(keys, vals, seed=0)

    def work(worker: pt.Worker) -> int:
        results = 0

        def count(_t: int, batch: list[Any]) -> None:
            nonlocal results
            results += len(batch)

        def build(scope: pt.Scope) -> tuple[pt.InputHandle, pt.InputHandle, pt.ProbeHandle]:
            in1, left = scope.new_input()
            in2, right = scope.new_input()
            return in1, in2, hash_join(left, right).inspect_batch(count).probe()

        in1, in2, probe = worker.dataflow(build)
        left = left_all[worker.index :: worker.peers]
        right = right_all[worker.index :: worker.peers]
        start = time.perf_counter()
        for round_, offset in enumerate(range(0, max(len(left), len(right)), batch), start=1):
            in1.send_batch(left[offset : offset + batch])
            in2.send_batch(right[offset : offset + batch])
            in1.advance_to(round_)
            in2.advance_to(round_)
            worker.step_while(lambda: probe.less_than(in1.time))
            print(
                f"{time.perf_counter() - start:.3f}s\tworker {worker.index} batch {round_} "
                f"complete ({results} results so far)"
            )
        return results

    print(f"{sum(pt.execute_from_args(work))} join results")


if __name__ == "__main__":
    main()
