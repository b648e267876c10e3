"""Collatz sequences in a loop: an iterative scope with a feedback edge.

Inspired by timely's ``loopdemo`` example.  Numbers enter an iterative scope, whose times are
``Product(round, iteration)``.  Each trip around the loop applies one Collatz step
(``n -> n / 2`` if even, ``3n + 1`` if odd); numbers that reached 1 leave the scope, the others
go around again through ``feedback(1)``, which advances the iteration counter.  So a number
leaves at iteration = its total stopping time, and the loop counter *is* the step count: we read
it from the time instead of carrying it in the record.

Every round sends a range of starting values, advances the input, and steps until the probe
says the round left the loop.

    $ python examples/loopdemo.py               # 5 rounds of 20 numbers
    $ python examples/loopdemo.py 3 1000 -w 2   # 3 rounds of 1000 numbers on 2 workers
"""

from collections.abc import Callable
from typing import Any

import pytimely as pt


def collatz_steps(scope: pt.Scope, starts: pt.Stream) -> pt.Stream:
    """``(start, steps to reach 1)`` for every ``start >= 1`` of ``starts``."""

    def body(inner: pt.Scope) -> pt.Stream:
        handle, looped = inner.feedback(1)
        # (start, current value); those already at 1 need no step.
        entering = starts.enter(inner).map(lambda n: (n, n))
        values = entering.concat(looped)
        done, going = values.branch(lambda t, pair: pair[1] > 1)
        stepped = going.map(lambda p: (p[0], p[1] // 2 if p[1] % 2 == 0 else 3 * p[1] + 1))
        stepped.connect_loop(handle)
        # The loop counter at which a pair is seen at 1 is its number of steps.
        finished = done.unary(pt.Pipeline, "Steps", _with_iteration)
        return finished.leave()

    return scope.iterative(body, name="Collatz")


def _with_iteration(capability: pt.Capability, info: pt.OperatorInfo) -> Callable:
    capability.drop()

    def logic(input: Any, output: Any) -> None:
        for cap, batch in input:
            steps = cap.time.inner
            output.session(cap).give_batch([(start, steps) for start, _one in batch])

    return logic


def work(worker: pt.Worker, rounds: int, per_round: int) -> None:
    index, peers = worker.index, worker.peers
    steps: dict[int, list[int]] = {}  # round -> steps of the numbers that finished

    def build(scope: pt.Scope) -> tuple[pt.InputHandle, pt.ProbeHandle]:
        handle, starts = scope.new_input()
        finished = collatz_steps(scope, starts).inspect_time(
            lambda t, pair: steps.setdefault(t, []).append(pair[1])
        )
        return handle, finished.probe()

    handle, probe = worker.dataflow(build)
    for round_ in range(rounds):
        first = round_ * per_round + 1
        handle.send_batch(list(range(first + index, first + per_round, peers)))
        handle.advance_to(round_ + 1)
        worker.step_while(lambda: probe.less_than(handle.time))
        mine = steps.pop(round_, [])
        longest = max(mine, default=0)
        print(f"worker {index}:\tround {round_}: {len(mine)} numbers, longest {longest} steps")


if __name__ == "__main__":
    words = pt.args()
    rounds = int(words[0]) if words else 5
    per_round = int(words[1]) if len(words) > 1 else 20
    pt.execute_from_args(lambda worker: work(worker, rounds, per_round))
