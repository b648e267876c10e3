"""A user-defined timestamp type: a total order (``Tick``) and a partial order (``Pair``)."""

from __future__ import annotations

import functools

import pytest

import pytimely as pt
from pytimely.testing import assert_frontier


@functools.total_ordering
class Tick:
    """An integer epoch wrapped in a class: the timestamp protocol, nothing more."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    @classmethod
    def minimum(cls) -> Tick:
        return cls(0)

    def less_equal(self, other: Tick) -> bool:
        return self.n <= other.n

    def less_than(self, other: Tick) -> bool:
        return self.n < other.n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tick) and other.n == self.n

    def __lt__(self, other: Tick) -> bool:
        return self.n < other.n

    def __hash__(self) -> int:
        return hash(("Tick", self.n))

    def __repr__(self) -> str:
        return f"Tick({self.n})"

    class Summary:
        __slots__ = ("k",)

        def __init__(self, k: int = 0) -> None:
            self.k = k

        def results_in(self, t: Tick) -> Tick:
            return Tick(t.n + self.k)

        def followed_by(self, other: Tick.Summary) -> Tick.Summary:
            return Tick.Summary(self.k + other.k)

        def less_equal(self, other: Tick.Summary) -> bool:
            return self.k <= other.k

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Tick.Summary) and other.k == self.k

        def __lt__(self, other: Tick.Summary) -> bool:
            return self.k < other.k

        def __hash__(self) -> int:
            return hash(("Tick.Summary", self.k))


@functools.total_ordering
class Pair:
    """Two counters under the product partial order (``<`` is lexicographic: a linear
    extension).  Incomparable pairs make frontiers with several elements."""

    __slots__ = ("a", "b")

    def __init__(self, a: int, b: int) -> None:
        self.a, self.b = a, b

    @classmethod
    def minimum(cls) -> Pair:
        return cls(0, 0)

    def less_equal(self, other: Pair) -> bool:
        return self.a <= other.a and self.b <= other.b

    def less_than(self, other: Pair) -> bool:
        return self.less_equal(other) and self != other

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Pair) and (other.a, other.b) == (self.a, self.b)

    def __lt__(self, other: Pair) -> bool:
        return (self.a, self.b) < (other.a, other.b)

    def __hash__(self) -> int:
        return hash(("Pair", self.a, self.b))

    def __repr__(self) -> str:
        return f"Pair({self.a}, {self.b})"

    class Summary:
        __slots__ = ("da", "db")

        def __init__(self, da: int = 0, db: int = 0) -> None:
            self.da, self.db = da, db

        def results_in(self, t: Pair) -> Pair:
            return Pair(t.a + self.da, t.b + self.db)

        def followed_by(self, other: Pair.Summary) -> Pair.Summary:
            return Pair.Summary(self.da + other.da, self.db + other.db)

        def less_equal(self, other: Pair.Summary) -> bool:
            return self.da <= other.da and self.db <= other.db

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Pair.Summary) and (other.da, other.db) == (self.da, self.db)

        def __hash__(self) -> int:
            return hash(("Pair.Summary", self.da, self.db))


def test_user_timestamp_rounds_loop_and_count():
    def work(worker):
        def build(scope):
            h, s = scope.new_input()
            handle, looped = scope.feedback(Tick.Summary(1))
            body = s.concat(looped).map(lambda x: x - 1)
            body.filter(lambda x: x > 0).connect_loop(handle)
            return h, body.capture(), s.count().capture(), body.probe()

        h, body, counts, probe = worker.dataflow(build, timestamp=Tick)
        assert h.time == Tick(0)
        for r in range(3):
            h.send(3)
            h.send(1)
            h.advance_to(Tick(r + 1))
            worker.step_while(lambda: probe.less_than(h.time))
            assert_frontier(probe, [Tick(r + 1)])
        return body.extract(), counts.extract()

    body, counts = pt.execute(work)[0]
    # Each round: 3 -> 2 (t), 2 -> 1 (t+1), 1 -> 0 (t+2); and 1 -> 0 (t).
    assert body == [
        (Tick(0), [0, 2]),
        (Tick(1), [0, 1, 2]),
        (Tick(2), [0, 0, 1, 2]),
        (Tick(3), [0, 1]),
        (Tick(4), [0]),
    ]
    assert counts == [(Tick(0), [2]), (Tick(1), [2]), (Tick(2), [2])]


def test_user_timestamp_partial_order_frontier():
    def work(worker):
        def build(scope):
            (handle, cap), stream = scope.new_unordered_input()
            return handle, cap, stream.capture(), stream.probe()

        handle, cap, captured, probe = worker.dataflow(build, timestamp=Pair)
        x = cap.delayed(Pair(1, 0))
        y = cap.delayed(Pair(0, 1))
        cap.drop()
        handle.session(x).give("x")
        handle.session(y).give("y")
        worker.step_while(lambda: probe.less_equal(Pair(0, 0)))
        assert_frontier(probe, [Pair(0, 1), Pair(1, 0)])  # two incomparable minima
        assert probe.less_equal(Pair(1, 1)) and not probe.less_equal(Pair(0, 0))
        x.downgrade(Pair(2, 0))
        worker.step_while(lambda: probe.less_equal(Pair(1, 0)))
        assert_frontier(probe, [Pair(0, 1), Pair(2, 0)])
        x.drop()
        worker.step_while(lambda: probe.less_equal(Pair(5, 0)))
        assert_frontier(probe, [Pair(0, 1)])
        y.drop()
        worker.step_while(lambda: not probe.done())
        return captured.extract()

    assert pt.execute(work)[0] == [(Pair(0, 1), ["y"]), (Pair(1, 0), ["x"])]


def test_user_timestamp_type_must_follow_the_protocol():
    class NotATime:
        pass

    with pytest.raises(TypeError):
        pt.Worker().dataflow(lambda s: None, timestamp=NotATime)
