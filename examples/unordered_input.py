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

import pytimely as pt


def work(worker: pt.Worker, rounds: int) -> None:
    def build(scope: pt.Scope) -> tuple[pt.UnorderedHandle, pt.ActivateCapability]:
        (handle, cap), stream = scope.new_unordered_input()
        stream.inspect_batch(lambda t, batch: print(f"{t!r} -> {batch!r}"))
        return handle, cap

    handle, cap = worker.dataflow(build)
    for round_ in range(rounds):
        handle.session(cap).give(round_)
        later = cap.delayed(round_ + 1)
        cap.drop()
        cap = later
        worker.step()
    cap.drop()  # no more times: lets the dataflow complete


if __name__ == "__main__":
    words = pt.args()
    rounds = int(words[0]) if words else 10
    pt.execute_from_args(lambda worker: work(worker, rounds))
