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

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import pytimely as pt
from pytimely.communication.launch import parse_args


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


def run(
    rounds: int = 5,
    per_round: int = 20,
    workers: int = 1,
    argv: Sequence[str] | None = None,
    out: Callable[[str], Any] | None = None,
) -> list[list[tuple[int, int, int]]]:
    """Round ``r`` sends ``r*per_round+1 .. (r+1)*per_round`` (split between workers).
    Returns, per worker, the ``(round, start, steps)`` it saw leave the loop."""

    def work(worker: pt.Worker) -> list[tuple[int, int, int]]:
        index, peers = worker.index, worker.peers
        seen: list[tuple[int, int, int]] = []

        def show(t: int, pair: tuple[int, int]) -> None:
            seen.append((t, pair[0], pair[1]))

        def build(scope: pt.Scope) -> tuple[pt.InputHandle, pt.ProbeHandle]:
            handle, starts = scope.new_input()
            probe = collatz_steps(scope, starts).inspect_time(show).probe()
            return handle, probe

        handle, probe = worker.dataflow(build)
        for round_ in range(rounds):
            first = round_ * per_round + 1
            handle.send_batch(list(range(first + index, first + per_round, peers)))
            handle.advance_to(round_ + 1)
            worker.step_while(lambda: probe.less_than(handle.time))
            if out is not None:
                mine = [s for t, _n, s in seen if t == round_]
                longest = max(mine, default=0)
                out(
                    f"worker {index}:\tround {round_}: {len(mine)} numbers, longest {longest} steps"
                )
        return seen

    if argv is not None:
        return pt.execute_from_args(work, argv)
    return pt.execute(work, workers=workers)


def main(argv: Sequence[str] | None = None) -> list[list[tuple[int, int, int]]]:
    argv = list(sys.argv[1:] if argv is None else argv)
    free = parse_args(argv, usage=__doc__).free
    rounds = int(free[0]) if free else 5
    per_round = int(free[1]) if len(free) > 1 else 20
    return run(rounds, per_round, argv=argv, out=print)


if __name__ == "__main__":
    main()
