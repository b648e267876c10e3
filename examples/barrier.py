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

import time
from typing import Any

import pytimely as pt


def barrier(worker: pt.Worker, iterations: int) -> None:
    delivered = most_per_call = 0

    def logic(input: Any, output: Any, notificator: pt.Notificator) -> None:
        nonlocal delivered, most_per_call
        now = 0
        for cap in notificator:
            now += 1
            if cap.time + 1 < iterations:
                notificator.notify_at(cap.delayed(cap.time + 1))
            cap.drop()
        delivered += now
        most_per_call = max(most_per_call, now)

    def build(scope: pt.Scope) -> None:
        handle, stream = scope.feedback(1)
        initial = [t for t in (0, 1) if t < iterations]
        stream.unary_notify(pt.Pipeline, "Barrier", initial, logic).connect_loop(handle)

    start = time.perf_counter()
    worker.dataflow(build)
    worker.run()
    elapsed = time.perf_counter() - start
    print(
        f"worker {worker.index}: {delivered} notifications, at most {most_per_call} per call, "
        f"in {elapsed:.3f}s ({1e6 * elapsed / max(iterations, 1):.1f} us/iteration)"
    )


if __name__ == "__main__":
    words = pt.args()
    iterations = int(words[0]) if words else 100
    pt.execute_from_args(lambda worker: barrier(worker, iterations))
