"""Hello, timely: an input, an exchange, an inspect and a probe, driven round by round.

Port of timely's ``hello`` example.  Each worker builds the same dataflow; worker 0 sends one
record per round, the exchange routes it to the worker its key hashes to, which prints it.  The
input is then advanced to the next round and the worker steps until the probe says the round is
complete everywhere — the pattern of every interactive timely program.

    $ python examples/hello.py            # worker 0:  hello 0 ... hello 9
    $ python examples/hello.py -w 2       # two worker processes; each record printed once
    $ python examples/hello.py 100 -w 2   # 100 rounds
"""

import pytimely as pt


def hello(worker: pt.Worker, rounds: int) -> None:
    index = worker.index

    def build(scope: pt.Scope) -> tuple[pt.InputHandle, pt.ProbeHandle]:
        handle, stream = scope.new_input()
        shown = stream.exchange(lambda x: x).inspect(lambda x: print(f"worker {index}:\thello {x}"))
        return handle, shown.probe()

    handle, probe = worker.dataflow(build)
    for round_ in range(rounds):
        if index == 0:
            handle.send(round_)
        handle.advance_to(round_ + 1)
        worker.step_while(lambda: probe.less_than(handle.time))


if __name__ == "__main__":
    words = pt.args()
    rounds = int(words[0]) if words else 10
    pt.execute_from_args(lambda worker: hello(worker, rounds))
