"""Hello, timely: an input, an exchange, an inspect and a probe, driven round by round.

Port of timely's ``hello`` example.  Each worker builds the same dataflow; worker 0 sends one
record per round, the exchange routes it to the worker its key hashes to, which prints it.  The
input is then advanced to the next round and the worker steps until the probe says the round is
complete everywhere — the pattern of every interactive timely program.

    $ python examples/hello.py            # worker 0:  hello 0 ... hello 9
    $ python examples/hello.py -w 2       # two worker processes; each record printed once
    $ python examples/hello.py 100 -w 2   # 100 rounds
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import pytimely as pt
from pytimely.communication.launch import parse_args


def run(
    rounds: int = 10,
    workers: int = 1,
    argv: Sequence[str] | None = None,
    out: Callable[[str], Any] | None = None,
) -> list[list[tuple[int, int]]]:
    """Returns, per worker, the ``(round, record)`` pairs it saw, in the order it saw them."""

    def work(worker: pt.Worker) -> list[tuple[int, int]]:
        index = worker.index
        seen: list[tuple[int, int]] = []

        def hello(t: int, x: int) -> None:
            seen.append((t, x))
            if out is not None:
                out(f"worker {index}:\thello {x}")

        def build(scope: pt.Scope) -> tuple[pt.InputHandle, pt.ProbeHandle]:
            handle, stream = scope.new_input()
            probe = stream.exchange(lambda x: x).inspect_time(hello).probe()
            return handle, probe

        handle, probe = worker.dataflow(build)
        for round_ in range(rounds):
            if index == 0:
                handle.send(round_)
            handle.advance_to(round_ + 1)
            worker.step_while(lambda: probe.less_than(handle.time))
        return seen

    if argv is not None:
        return pt.execute_from_args(work, argv)
    return pt.execute(work, workers=workers)


def main(argv: Sequence[str] | None = None) -> list[list[tuple[int, int]]]:
    argv = list(sys.argv[1:] if argv is None else argv)
    free = parse_args(argv, usage=__doc__).free
    rounds = int(free[0]) if free else 10
    return run(rounds, argv=argv, out=print)


if __name__ == "__main__":
    main()
