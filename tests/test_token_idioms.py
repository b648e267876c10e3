"""TimeStash and MinToken: the stash-per-time and one-token-at-the-minimum idioms."""

from __future__ import annotations

import doctest
import math
from unittest.mock import patch

import pytest

import pytimely as pt
from pytimely.dataflow import idioms, ports
from pytimely.dataflow.idioms import MinToken, TimeStash
from pytimely.dataflow.operators.generic import unary_frontier

pytestmark = pytest.mark.timeout(60)


class FakeCap:
    def __init__(self, time, log):
        self.time, self.log = time, log
        log.append(("take", time))

    def drop(self):
        self.log.append(("drop", self.time))

    def downgrade(self, t):
        self.log.append(("downgrade", self.time, t))
        self.time = t


class FakeRef:
    def __init__(self, time, log):
        self.time, self.log = time, log

    def retain(self):
        return FakeCap(self.time, self.log)

    def delayed(self, t):
        assert t >= self.time
        return FakeCap(t, self.log)


class Frontier:
    def __init__(self, *elements):
        self.elements = elements

    def less_equal(self, t):
        return any(e <= t for e in self.elements)


def test_docstring_examples_run():
    result = doctest.testmod(idioms)
    assert result.attempted >= 2 and result.failed == 0


def test_time_stash_holds_one_capability_per_time_and_releases_in_order():
    log = []
    stash = TimeStash(list)
    stash.at(FakeRef(5, log)).append("e")
    stash.at(FakeRef(2, log)).append("b")
    stash.at(FakeRef(2, log)).append("c")  # same time: no second capability
    stash.at(FakeRef(1, log), time=3).append("d")  # delayed to a later time
    assert stash.fold(FakeRef(2, log), lambda s, x: [*s, x], "z") == ["b", "c", "z"]
    assert log == [("take", 5), ("take", 2), ("take", 3)] and len(stash) == 3
    assert list(stash.ready(Frontier(2))) == []  # 2 is not complete while the frontier is at 2
    released = []
    for held, state in stash.ready(Frontier(4)):
        released.append((held.time, state, ("drop", held.time) in log))
    # In time order, and each capability still held while its loop body runs.
    assert released == [(2, ["b", "c", "z"], False), (3, ["d"], False)]
    assert log[3:] == [("drop", 2), ("drop", 3)]
    assert stash.times() == [5]


def test_time_stash_drops_the_capability_when_the_loop_stops_early():
    log = []
    stash = TimeStash(int)
    stash.at(FakeRef(1, log))
    stash.at(FakeRef(2, log))
    ready = stash.ready(Frontier())
    for _held, _state in ready:
        break
    ready.close()
    assert ("drop", 1) in log and stash.times() == [2]


def test_time_stash_in_a_dataflow_completes_and_emits_per_time():
    def ctor(cap, info):
        cap.drop()
        stash = TimeStash(list)

        def logic(inp, out):
            for ref, batch in inp:
                for x in batch:
                    stash.at(ref, ref.time + x).append(x)
            for held, xs in stash.ready(inp.frontier):
                out.give_batch(held, sorted(xs))

        return logic

    def build(scope):
        inp, xs = scope.new_input()
        out = unary_frontier(xs, pt.Pipeline, "DelayBy", ctor).capture()
        inp.send_batch([2, 0, 2])
        inp.advance_to(1)
        inp.send(1)
        return out

    assert pt.example(build).extract() == [(0, [0]), (2, [1, 2, 2])]


def test_min_token_covers_and_settles():
    log = []
    token = MinToken()
    assert token.cap is None and token.time == math.inf
    token.cover(FakeRef(3, log), 7)
    token.cover(FakeRef(3, log), 9)  # already covered: no new token
    assert log == [("take", 7)] and token.time == 7
    token.cover(FakeRef(2, log), 4)  # lower: a new token, the old one dropped
    assert log[1:] == [("take", 4), ("drop", 7)] and token.time == 4
    token.settle(4)  # unchanged minimum: nothing to do
    token.settle(6)
    assert log[3:] == [("downgrade", 4, 6)] and token.time == 6
    token.settle(None)
    assert log[4:] == [("drop", 6)] and token.cap is None and token.time == math.inf
    token.settle(None)  # nothing held: still nothing
    assert len(log) == 5


@pytest.mark.parametrize("counted", [False, True])
def test_give_timed_delivers_each_part_at_its_own_time(counted):
    """Results released at many times with one token reach a lone pipeline consumer as one
    bundle, which it reads back as its parts at their own times (``drain_batches``: here the
    bundle is all that is queued); with two consumers they go as separate messages.  Each
    list ``drain_batches`` returned stays as it was (an empty one once was the live queue,
    refilled by the next message)."""

    def ctor(cap, info):
        cap.drop()
        token = MinToken()

        def logic(inp, out):
            for ref, batch in inp:
                token.cover(ref, ref.time)
                parts = [(ref.time + x, [x]) for x in sorted(set(batch))]
                parts.append((ref.time + 100, []))  # an empty part is not sent
                if counted:
                    parts.pop()  # with ``records``, no part may be empty
                    out.give_timed(token.cap, parts, sum(len(b) for _t, b in parts))
                else:
                    out.give_timed(token.cap, parts)
            token.settle(None)

        return logic

    drained = []

    def build(scope):
        inp, xs = scope.new_input()
        released = unary_frontier(xs, pt.Pipeline, "Release", ctor)
        # The only consumer, so the release reaches it as one bundle.
        released.sink(pt.Pipeline, "Drain", lambda i: drained.append(i.drain_batches()))
        return inp

    bundles = []
    original = ports.Bundle.__init__

    def counting(self, parts, n):
        bundles.append(len(parts))
        original(self, parts, n)

    worker = pt.Worker()
    inp = worker.dataflow(build)
    inp.send_batch([3, 1, 2])
    inp.advance_to(10)
    with patch.object(ports.Bundle, "__init__", counting):
        worker.step_while(lambda: not any(drained), timeout=20)
    assert bundles == [3]
    inp.send_batch([5])
    inp.close()
    worker.run()
    assert [d for d in drained if d] == [[(1, [1]), (2, [2]), (3, [3])], [(15, [5])]]

    def build_two_consumers(scope):
        inp, xs = scope.new_input()
        released = unary_frontier(xs, pt.Pipeline, "Release", ctor)
        out = released.capture()
        released.probe()
        inp.send_batch([3, 1, 2])
        inp.advance_to(10)
        inp.send_batch([5])
        return out

    assert pt.example(build_two_consumers).extract() == [(1, [1]), (2, [2]), (3, [3]), (15, [5])]
