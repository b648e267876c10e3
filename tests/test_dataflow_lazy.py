"""Laziness in counts, not time: idle regions are not visited when only time moves.

The set-up of Frank McSherry's "Speeding up Timely Dataflow by 100x"
(https://github.com/frankmcsherry/blog), scaled down: ``DATAFLOWS`` dataflows, each

    input -> region { Stash -> Filter ^ LENGTH } -> probe

where ``Stash`` is a frontier-driven operator (the user guide's "Writing an operator"; it holds
a capability only while it has stashed records) and the filters never care about time.  Each
round sends one record into one dataflow (round ``r`` feeds dataflow ``r % DATAFLOWS``),
advances *every* input, and steps until every probe has passed the round.

We count operator invocations (``OperatorCore.invocations``, ``Subgraph.invocations``) per
round instead of timing anything:

* with ``IF_CAPABILITY`` on the stash, a region whose stash holds nothing is not scheduled
  when only time moves: in the 99 untouched dataflows neither the region nor any operator in it
  runs; in the touched one every filter runs exactly once (for the record);
* with ``ALWAYS`` on the stash, every region (and its stash) *is* scheduled every round — the
  taint the post describes — though the filters of untouched dataflows still do not run.
"""

from __future__ import annotations

from typing import Any

import pytest

import pytimely as pt
from pytimely.dataflow.operator import OperatorCore
from pytimely.progress.subgraph import Subgraph

DATAFLOWS = 100
LENGTH = 100


def stash(capability: pt.Capability, info: Any) -> Any:
    capability.drop()  # hold nothing while idle
    pending: dict[Any, tuple[pt.Capability, list[Any]]] = {}

    def logic(input: Any, output: Any) -> None:
        for cap, batch in input:
            held = pending.get(cap.time)
            if held is None:
                pending[cap.time] = (cap.retain(), list(batch))
            else:
                held[1].extend(batch)
        for t in sorted(pending):
            if not input.frontier.less_equal(t):  # no more data at t can arrive
                cap, records = pending.pop(t)
                output.session(cap).give_batch(records)
                cap.drop()

    return logic


class Harness:
    """The dataflows, their handles, and references to every region and its operators."""

    def __init__(
        self, interest: pt.FrontierInterest, dataflows: int = DATAFLOWS, length: int = LENGTH
    ) -> None:
        self.worker = pt.Worker()
        self.inputs: list[pt.InputHandle] = []
        self.probes: list[pt.ProbeHandle] = []
        self.outputs: list[list[tuple[int, int]]] = []
        self.regions: list[Subgraph] = []
        self.stashes: list[OperatorCore] = []
        self.filters: list[list[OperatorCore]] = []
        for d in range(dataflows):
            seen: list[tuple[int, int]] = []

            def build(scope: pt.Scope, seen: list = seen) -> tuple[Any, Any]:
                handle, stream = scope.new_input()

                def body(region: pt.Scope, stream: pt.Stream = stream) -> pt.Stream:
                    s = stream.enter(region).unary_frontier(
                        pt.Pipeline, "Stash", stash, interest=interest
                    )
                    for _ in range(length):
                        s = s.filter(lambda x: True)
                    return s.leave()

                probe = (
                    scope.region(body, name="Region")
                    .inspect_time(lambda t, x: seen.append((t, x)))
                    .probe()
                )
                return handle, probe

            handle, probe = self.worker.dataflow(build)
            self.inputs.append(handle)
            self.probes.append(probe)
            self.outputs.append(seen)
            root = self.worker._dataflows[d]
            (subgraph,) = [c for c in root.children if isinstance(c, Subgraph)]
            ops = list(subgraph.children[1:])
            assert [op.name.partition("(")[0] for op in ops] == ["Stash"] + ["Filter"] * length
            self.regions.append(subgraph)
            self.stashes.append(ops[0])
            self.filters.append(ops[1:])
        # Settle construction: every operator runs once at the start.
        for _ in range(3):
            self.worker.step()
        self.time = 0

    def counts(self) -> list[tuple[int, int, list[int]]]:
        """Per dataflow: (region invocations, stash invocations, filter invocations)."""
        return [
            (region.invocations, stash_.invocations, [f.invocations for f in filters])
            for region, stash_, filters in zip(self.regions, self.stashes, self.filters)
        ]

    def round(self, record_into: int | None) -> tuple[int, list[tuple[int, int, list[int]]]]:
        """One round; returns (steps taken, per-dataflow invocation deltas)."""
        before = self.counts()
        t = self.time
        if record_into is not None:
            self.inputs[record_into].send(t)
        self.time = t + 1
        for handle in self.inputs:
            handle.advance_to(self.time)
        steps = 0
        while any(p.less_than(self.time) for p in self.probes):
            self.worker.step()
            steps += 1
            assert steps < 100, "round does not complete"
        after = self.counts()
        deltas = [
            (ra - rb, sa - sb, [a - b for a, b in zip(fa, fb)])
            for (rb, sb, fb), (ra, sa, fa) in zip(before, after)
        ]
        return steps, deltas


def test_if_capability_untouched_regions_do_not_run():
    h = Harness(pt.FrontierInterest.IF_CAPABILITY)
    rounds = 2 * DATAFLOWS
    for r in range(rounds):
        touched = r % DATAFLOWS
        steps, deltas = h.round(touched)
        assert steps <= 2
        for d, (region, stash_, filters) in enumerate(deltas):
            if d == touched:
                assert region >= 1
                assert stash_ == 2  # once for the record, once when its time completes
                assert filters == [1] * LENGTH  # the record passes each filter once
            else:
                # Only time moved here: the region is not even visited.
                assert (region, stash_) == (0, 0), (r, d)
                assert not any(filters), (r, d)
    # Every record came out of its dataflow, at its round.
    for d, seen in enumerate(h.outputs):
        assert seen == [(r, r) for r in range(rounds) if r % DATAFLOWS == d]


def test_if_capability_rounds_without_records_visit_no_region():
    h = Harness(pt.FrontierInterest.IF_CAPABILITY, dataflows=50, length=50)
    for _ in range(20):
        steps, deltas = h.round(None)
        assert steps <= 1
        assert all(d == (0, 0, [0] * 50) for d in deltas)


def test_always_regions_are_scheduled_every_round():
    h = Harness(pt.FrontierInterest.ALWAYS, length=LENGTH)
    for r in range(30):
        touched = r % DATAFLOWS
        steps, deltas = h.round(touched)
        assert steps <= 2
        for d, (region, stash_, filters) in enumerate(deltas):
            # The stash wants every frontier change, so its region must be visited.
            assert region >= 1, (r, d)
            assert stash_ >= 1, (r, d)
            if d == touched:
                assert filters == [1] * LENGTH
            else:
                assert not any(filters), (r, d)  # the filters still never run for time alone


@pytest.mark.parametrize(
    "interest", [pt.FrontierInterest.IF_CAPABILITY, pt.FrontierInterest.ALWAYS]
)
def test_filter_invocations_total_one_per_record(interest):
    h = Harness(interest, dataflows=10, length=20)
    start = [sum(f) for _r, _s, f in h.counts()]
    for r in range(25):
        h.round(r % 10 if r % 3 else None)  # some rounds carry no record
    records = [sum(1 for r in range(25) if r % 3 and r % 10 == d) for d in range(10)]
    totals = [sum(f) - s for (_r, _s, f), s in zip(h.counts(), start)]
    assert totals == [20 * n for n in records]
