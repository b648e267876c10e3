"""A pure coordination loop: ``feedback(1)`` and a ``unary_notify`` that re-notifies itself.

Port of timely's ``barrier`` example (and of its ``barrier`` test).  The dataflow carries no
data at all.  A ``Barrier`` operator sits in a loop with a feedback edge; it asks to be notified
at times 0 and 1, and every time it is notified at ``t`` it asks for ``t + 1`` (up to
``iterations``).  A notification at ``t`` is delivered once no data at ``t`` can arrive any more;
because the operator's own pending notification at ``t + 1`` keeps a capability that reaches
its input (around the loop) only at ``t + 2``, notification ``t + 1`` must wait for progress
tracking to learn that ``t`` was released.  So each round costs one full trip of progress
information around the loop, and each invocation of the operator sees at most one notification.
With several workers, each round is a barrier between them.

    $ python examples/barrier.py                # 100 iterations
    $ python examples/barrier.py 100000 -w 2
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytimely as pt
from pytimely.communication.launch import parse_args


def run(
    iterations: int = 100,
    workers: int = 1,
    argv: Sequence[str] | None = None,
    out: Callable[[str], Any] | None = None,
) -> list[dict[str, Any]]:
    """Returns, per worker: ``notified`` (the times, in delivery order), ``most_per_call`` (the
    most notifications delivered in one invocation) and ``invocations``."""

    def work(worker: pt.Worker) -> dict[str, Any]:
        stats: dict[str, Any] = {"notified": [], "most_per_call": 0, "invocations": 0}

        def barrier(input: Any, output: Any, notificator: pt.Notificator) -> None:
            stats["invocations"] += 1
            delivered = 0
            for cap in notificator:
                delivered += 1
                t = cap.time
                stats["notified"].append(t)
                if t + 1 < iterations:
                    notificator.notify_at(cap.delayed(t + 1))
                cap.drop()
            stats["most_per_call"] = max(stats["most_per_call"], delivered)

        def build(scope: pt.Scope) -> None:
            handle, stream = scope.feedback(1)
            initial = [t for t in (0, 1) if t < iterations]
            stream.unary_notify(pt.Pipeline, "Barrier", initial, barrier).connect_loop(handle)

        start = time.perf_counter()
        worker.dataflow(build)
        worker.run()
        if out is not None:
            elapsed = time.perf_counter() - start
            out(f"worker {worker.index}: {iterations} iterations in {elapsed:.3f}s "
                f"({1e6 * elapsed / max(iterations, 1):.1f} us/iteration)")
        return stats

    if argv is not None:
        return pt.execute_from_args(work, argv)
    return pt.execute(work, workers=workers)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    argv = list(sys.argv[1:] if argv is None else argv)
    free = parse_args(argv, usage=__doc__).free
    return run(int(free[0]) if free else 100, argv=argv, out=print)


if __name__ == "__main__":
    main()
