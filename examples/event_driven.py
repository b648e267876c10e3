"""Many idle dataflows cost (almost) nothing: event-driven, lazy scheduling.

Port of timely's ``event_driven`` example (``timely/examples/event_driven.rs``).  It builds
``dataflows`` copies of

    input -> region { map ^ length } -> probe

and then, each round, sends one record into one dataflow (round ``r`` feeds dataflow
``r % dataflows``), advances *every* input, and steps until every probe has seen the round
complete.  Only the dataflow with the record has work to do; in all others only time moves.
The maps never care about time passing (``FrontierInterest.NEVER``) and hold no capabilities, so
their regions are not scheduled at all when only time moves: the frontier change reaches each
probe through progress tracking, without visiting the ``length`` operators in between.  A round
completes in a couple of worker steps, however many idle operators there are: the last line
says how many it took at most.

    $ python examples/event_driven.py                   # 100 dataflows x 100 maps, 1000 rounds
    $ python examples/event_driven.py 1000 100 1000     # dataflows, length, rounds
    $ python examples/event_driven.py 100 100 1000 norecord   # only advance times
"""

import time

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


def work(worker: pt.Worker, dataflows: int, length: int, rounds: int, record: bool) -> None:
    start = time.perf_counter()
    inputs, probes = build_dataflows(worker, dataflows, length)
    print(f"{time.perf_counter() - start:.3f}s\tdataflows built ({dataflows} x {length})")
    most_steps = 0
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
        most_steps = max(most_steps, steps)
        if (round_ + 1) % 100 == 0:
            elapsed = time.perf_counter() - start
            print(
                f"{elapsed:.3f}s\tround {round_} complete in {steps} steps "
                f"({1e3 * elapsed / (round_ + 1):.2f} ms/round)"
            )
    print(f"every round completed in at most {most_steps} steps")


if __name__ == "__main__":
    words = pt.args()
    numbers = [int(word) for word in words if word.isdigit()]
    dataflows, length, rounds = (numbers + [100, 100, 1000][len(numbers) :])[:3]
    record = "norecord" not in words
    pt.execute_from_args(lambda worker: work(worker, dataflows, length, rounds, record))
