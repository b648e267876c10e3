"""Distinct values per time, with a hand-written ``unary`` operator and an ``Exchange`` pact.

Port of timely's ``distinct`` example.  Worker 0 sends ``[0, 1, 2, 2, 2, 3, 3, 4]`` and worker 1
sends ``[0, 0, 3, 4, 4, 5, 7, 7]`` (other workers send nothing), every round.  The ``Distinct``
operator routes records by value (the ``Exchange`` pact), so equal values meet on one worker,
and keeps one set of seen values per time: the first occurrence of a value at a time is
forwarded, repeats are not.  It needs no frontier information — it answers as data arrive — so
it is a plain ``unary`` operator (never woken by time passing).  (A real operator would also
forget the sets of completed times; see ``wordcount.py`` for the frontier-driven idiom.)

    $ python examples/distinct.py          # worker 0: values 0 1 2 3 4
    $ python examples/distinct.py -w 2     # each value printed by the worker it hashes to
    $ python examples/distinct.py 3 -w 2   # three rounds (times 0, 1, 2)
"""

from collections.abc import Callable
from typing import Any

import pytimely as pt

INPUTS = ([0, 1, 2, 2, 2, 3, 3, 4], [0, 0, 3, 4, 4, 5, 7, 7])


def distinct(stream: pt.Stream) -> pt.Stream:
    """Per time, the first occurrence of every record (records must be hashable; the
    ``Exchange`` pact routes equal records to the same worker)."""

    def constructor(capability: pt.Capability, info: pt.OperatorInfo) -> Callable:
        capability.drop()  # we send with the capabilities that come with the data
        seen_by_time: dict[Any, set[Any]] = {}

        def logic(input: Any, output: Any) -> None:
            for cap, batch in input:
                seen = seen_by_time.setdefault(cap.time, set())
                fresh = []
                for x in batch:
                    if x not in seen:
                        seen.add(x)
                        fresh.append(x)
                if fresh:
                    output.session(cap).give_batch(fresh)

        return logic

    return stream.unary(pt.Exchange(lambda x: x), "Distinct", constructor)


def work(worker: pt.Worker, rounds: int) -> None:
    index = worker.index

    def build(scope: pt.Scope) -> tuple[pt.InputHandle, pt.ProbeHandle]:
        handle, stream = scope.new_input()
        shown = distinct(stream).inspect_time(
            lambda t, x: print(f"worker {index}:\tvalue {x} at time {t}")
        )
        return handle, shown.probe()

    handle, probe = worker.dataflow(build)
    for round_ in range(rounds):
        if index < len(INPUTS):
            handle.send_batch(list(INPUTS[index]))
        handle.advance_to(round_ + 1)
        worker.step_while(lambda: probe.less_than(handle.time))


if __name__ == "__main__":
    words = pt.args()
    rounds = int(words[0]) if words else 1
    pt.execute_from_args(lambda worker: work(worker, rounds))
