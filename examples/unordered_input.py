"""An unordered input: the caller holds the input's capability and mints times at will.

Port of timely's ``unordered_input`` example.  ``scope.new_unordered_input()`` returns a handle
and an ``ActivateCapability``, a token that wakes the input operator whenever it changes.  Each
round sends one record at the token's time with ``handle.session(cap)``, then replaces the token
by one for the next time (``delayed``) and drops the old one — which is how the times complete.
Unlike an ``InputHandle``, nothing forces the times to be used in order: a program may hold
several tokens and send at any of them.

    $ python examples/unordered_input.py        # 0 -> [0] ... 9 -> [9]
    $ python examples/unordered_input.py 20
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

import pytimely as pt


def run(rounds: int = 10, out: Callable[[str], Any] | None = None) -> list[tuple[int, list[int]]]:
    """Returns the captured stream: ``[(i, [i]) for i in range(rounds)]``."""

    def work(worker: pt.Worker) -> pt.CaptureHandle:
        def build(scope: pt.Scope) -> tuple[Any, Any, pt.CaptureHandle]:
            (handle, cap), stream = scope.new_unordered_input()
            if out is not None:
                stream = stream.inspect_batch(lambda t, batch: out(f"{t!r} -> {batch!r}"))
            return handle, cap, stream.capture()

        handle, cap, captured = worker.dataflow(build)
        for round_ in range(rounds):
            handle.session(cap).give(round_)
            later = cap.delayed(round_ + 1)
            cap.drop()
            cap = later
            worker.step()
        cap.drop()  # no more times: lets the dataflow complete
        return captured

    captured = pt.execute(work)[0]
    return captured.extract()


def main(argv: Sequence[str] | None = None) -> list[tuple[int, list[int]]]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("rounds", nargs="?", type=int, default=10, help="times to send at")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    return run(args.rounds, out=print)


if __name__ == "__main__":
    main()
