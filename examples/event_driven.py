"""Many idle dataflows cost (almost) nothing: event-driven, lazy scheduling.

Port of timely's ``event_driven`` example (see seed 003).  It builds ``dataflows`` copies of

    input -> region { map ^ length } -> probe

and then, each round, sends one record into one dataflow (round ``r`` feeds dataflow
``r % dataflows``), advances *every* input, and steps until every probe has seen the round
complete.  Only the dataflow with the record has work to do; in all others only time moves.
The maps never care about time passing (``FrontierInterest.NEVER``) and hold no capabilities, so
their regions are not scheduled at all when only time moves: the frontier change reaches each
probe through progress tracking, without visiting the ``length`` operators in between.  A round
completes in a couple of worker steps, however many idle operators there are.

    $ python examples/event_driven.py                   # 100 dataflows x 100 maps, 1000 rounds
    $ python examples/event_driven.py 1000 100 1000     # dataflows, length, rounds
    $ python examples/event_driven.py 100 100 1000 norecord   # only advance times
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytimely as pt


def build_dataflows(worker: pt.Worker, dataflows: int, length: int) -> tuple[list, list]:
    """``dataflows`` copies of input -> region{map^length} -> probe; returns inputs, probes."""
    inputs, probes = [], []

    def build(scope: pt.Scope) -> tuple[pt.InputHandle, pt.ProbeHandle]:
        handle, stream = scope.new_input()

        def body(region: pt.Scope) -> pt.Stream:
            s = stream.enter(region)
            for _ in range(length):
                s = s.map(lambda x: x)
            return s.leave()

        return handle, scope.region(body).probe()

    for _ in range(dataflows):
        handle, probe = worker.dataflow(build)
        inputs.append(handle)
        probes.append(probe)
    return inputs, probes


def run(
    dataflows: int = 100,
    length: int = 100,
    rounds: int = 1000,
    record: bool = True,
    out: Callable[[str], Any] | None = None,
) -> list[int]:
    """Returns the number of worker steps each round took to complete."""

    def work(worker: pt.Worker) -> list[int]:
        start = time.perf_counter()
        inputs, probes = build_dataflows(worker, dataflows, length)
        if out is not None:
            out(f"{time.perf_counter() - start:.3f}s\tdataflows built ({dataflows} x {length})")
        steps_per_round = []
        start = time.perf_counter()
        for round_ in range(rounds):
            if record:
                inputs[round_ % dataflows].send(round_)
            for handle in inputs:
                handle.advance_to(round_ + 1)
            steps = 0
            while any(p.less_than(round_ + 1) for p in probes):
                worker.step()
                steps += 1
            steps_per_round.append(steps)
            if out is not None and (round_ + 1) % 100 == 0:
                elapsed = time.perf_counter() - start
                out(f"{elapsed:.3f}s\tround {round_} complete in {steps} steps "
                    f"({1e3 * elapsed / (round_ + 1):.2f} ms/round)")
        return steps_per_round

    return pt.execute(work)[0]


def main(argv: Sequence[str] | None = None) -> list[int]:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--help" in args:
        print(__doc__.strip())
        raise SystemExit(0)
    numbers = [int(a) for a in args if a.isdigit()]
    dataflows = numbers[0] if numbers else 100
    length = numbers[1] if len(numbers) > 1 else 100
    rounds = numbers[2] if len(numbers) > 2 else 1000
    return run(dataflows, length, rounds, record="norecord" not in args, out=print)


if __name__ == "__main__":
    main()
