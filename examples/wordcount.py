"""Word count with a frontier-driven operator: per-time queues released when time passes.

Port of timely's ``wordcount`` example.  Lines of text are split into ``(word, diff)`` pairs and
routed by word to a ``WordCount`` operator that keeps running totals.  The operator must apply
the updates of each time in time order, and only once a time is complete, so it

* stashes each arriving batch in a queue for its time, together with a capability *retained*
  from the message (the permission to report at that time later), and
* whenever it runs, releases every queued time that the input frontier has passed (no more data
  at it can arrive), in time order, emitting ``(word, new total)`` for every update, and drops
  the capability.

It holds capabilities only while something is queued, so it asks to be woken by frontier
changes only then (``FrontierInterest.IF_CAPABILITY``).

    $ python examples/wordcount.py              # seen: ('round', 1) ... ('round', 10)
    $ python examples/wordcount.py -w 2         # with W workers: counts r*W+1 .. (r+1)*W
    $ python examples/wordcount.py 5            # five rounds
"""

from collections.abc import Callable
from typing import Any

import pytimely as pt


def word_count(stream: pt.Stream) -> pt.Stream:
    """``(word, diff)`` records in; ``(word, cumulative count)`` out, once per update, each
    time's updates applied only after the time is complete."""

    def constructor(capability: pt.Capability, info: pt.OperatorInfo) -> Callable:
        capability.drop()
        queues: dict[Any, tuple[pt.Capability, list[Any]]] = {}  # time -> (token, batches)
        counts: dict[str, int] = {}

        def logic(input: Any, output: Any) -> None:
            for cap, batch in input:
                queued = queues.get(cap.time)
                if queued is None:
                    queues[cap.time] = (cap.retain(), [batch])
                else:
                    queued[1].append(batch)
            for t in sorted(queues):
                if input.frontier.less_equal(t):
                    continue  # more data at t may still arrive
                token, batches = queues.pop(t)
                session = output.session(token)
                for batch in batches:
                    for word, diff in batch:
                        total = counts.get(word, 0) + diff
                        counts[word] = total
                        session.give((word, total))
                token.drop()

        return logic

    return stream.unary_frontier(
        pt.Exchange(lambda pair: pair[0]),
        "WordCount",
        constructor,
        interest=pt.FrontierInterest.IF_CAPABILITY,
    )


def work(worker: pt.Worker, rounds: int, lines: list[str]) -> None:
    def build(scope: pt.Scope) -> tuple[pt.InputHandle, pt.ProbeHandle]:
        handle, text = scope.new_input()
        words = text.flat_map(lambda line: [(word, 1) for word in line.split()])
        shown = word_count(words).inspect_time(lambda t, pair: print(f"seen: {pair!r} at {t}"))
        return handle, shown.probe()

    handle, probe = worker.dataflow(build)
    for round_ in range(rounds):
        handle.send(lines[round_ % len(lines)])
        handle.advance_to(round_ + 1)
        worker.step_while(lambda: probe.less_than(handle.time))


if __name__ == "__main__":
    words = pt.args()
    rounds = int(words[0]) if words else 10
    pt.execute_from_args(lambda worker: work(worker, rounds, words[1:] or ["round"]))
