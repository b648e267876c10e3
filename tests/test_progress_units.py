"""Unit tests of the progress layer: ``pytimely.order`` and ``pytimely.progress``.

Every public method of ``ChangeBatch``, ``Antichain``, ``MutableAntichain``, the timestamp
helpers of ``order.py``, and ``Builder`` / ``Tracker``; plus user-defined timestamp types that
implement the protocol (a lexicographic pair, a partially ordered pair whose summaries have no
``<``, and a bounded time whose summaries return ``None``).
"""

from __future__ import annotations

import pickle
from collections import Counter

import pytest

from pytimely.errors import CycleError, GraphError, TimelyError
from pytimely.order import (
    INT,
    IntDomain,
    PathSummary,
    Product,
    ProductDomain,
    ProductSummary,
    Timestamp,
    UserDomain,
    domain_of,
    followed_by,
    identity,
    less_equal,
    less_than,
    minimum,
    results_in,
    summarize,
    summary_less_equal,
    to_inner,
    to_outer,
)
from pytimely.progress import (
    Antichain,
    Builder,
    ChangeBatch,
    MutableAntichain,
    Source,
    Target,
    Tracker,
)

P = Product
PS = ProductSummary


# ============================================================================================
# User-defined timestamp types.


class Lex:
    """A pair under the *lexicographic* order (a total order, so also the partial order).

    Summaries ``Lex.Summary(k, j)``: with ``k == 0`` add ``j`` to the second coordinate; with
    ``k > 0`` add ``k`` to the first and *reset* the second to ``j`` (a loop counter restarting).
    Both advance lexicographically.  Summaries are ordered lexicographically on ``(k, j)``, which
    is exactly "for every time, my result is <= yours".
    """

    __slots__ = ("a", "b")

    def __init__(self, a: int, b: int) -> None:
        self.a = a
        self.b = b

    def _key(self) -> tuple[int, int]:
        return (self.a, self.b)

    def less_equal(self, other: Lex) -> bool:
        return self._key() <= other._key()

    def less_than(self, other: Lex) -> bool:
        return self._key() < other._key()

    def __lt__(self, other: Lex) -> bool:
        return self._key() < other._key()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Lex) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(("Lex",) + self._key())

    def __repr__(self) -> str:
        return f"Lex{self._key()}"

    @classmethod
    def minimum(cls) -> Lex:
        return cls(0, 0)

    class Summary:
        __slots__ = ("j", "k")

        def __init__(self, k: int = 0, j: int = 0) -> None:
            self.k = k
            self.j = j

        def results_in(self, t: Lex) -> Lex:
            if self.k == 0:
                return Lex(t.a, t.b + self.j)
            return Lex(t.a + self.k, self.j)

        def followed_by(self, other: Lex.Summary) -> Lex.Summary:
            if other.k == 0:
                return Lex.Summary(self.k, self.j + other.j)
            return Lex.Summary(self.k + other.k, other.j)

        def less_equal(self, other: Lex.Summary) -> bool:
            return (self.k, self.j) <= (other.k, other.j)

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Lex.Summary) and (self.k, self.j) == (other.k, other.j)

        def __hash__(self) -> int:
            return hash(("Lex.Summary", self.k, self.j))

        def __repr__(self) -> str:
            return f"Lex.Summary({self.k}, {self.j})"


class Pair:
    """A pair under the *product* order; its summaries deliberately have no ``<``/``__hash__``
    (the summary protocol does not promise them)."""

    __slots__ = ("a", "b")

    def __init__(self, a: int, b: int) -> None:
        self.a = a
        self.b = b

    def less_equal(self, other: Pair) -> bool:
        return self.a <= other.a and self.b <= other.b

    def less_than(self, other: Pair) -> bool:
        return self.less_equal(other) and self != other

    def __lt__(self, other: Pair) -> bool:
        return (self.a, self.b) < (other.a, other.b)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Pair) and (self.a, self.b) == (other.a, other.b)

    def __hash__(self) -> int:
        return hash((self.a, self.b))

    def __repr__(self) -> str:
        return f"Pair({self.a}, {self.b})"

    @classmethod
    def minimum(cls) -> Pair:
        return cls(0, 0)

    class Summary:
        def __init__(self, a: int = 0, b: int = 0) -> None:
            self.a = a
            self.b = b

        def results_in(self, t: Pair) -> Pair:
            return Pair(t.a + self.a, t.b + self.b)

        def followed_by(self, other: Pair.Summary) -> Pair.Summary:
            return Pair.Summary(self.a + other.a, self.b + other.b)

        def less_equal(self, other: Pair.Summary) -> bool:
            return self.a <= other.a and self.b <= other.b


LIMIT = 10


class Bounded:
    """An integer time that cannot exceed ``LIMIT``: summaries past it return ``None``."""

    __slots__ = ("v",)

    def __init__(self, v: int) -> None:
        self.v = v

    def less_equal(self, other: Bounded) -> bool:
        return self.v <= other.v

    def less_than(self, other: Bounded) -> bool:
        return self.v < other.v

    def __lt__(self, other: Bounded) -> bool:
        return self.v < other.v

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Bounded) and self.v == other.v

    def __hash__(self) -> int:
        return hash(("Bounded", self.v))

    def __repr__(self) -> str:
        return f"B{self.v}"

    @classmethod
    def minimum(cls) -> Bounded:
        return cls(0)

    class Summary:
        __slots__ = ("k",)

        def __init__(self, k: int = 0) -> None:
            self.k = k

        def results_in(self, t: Bounded) -> Bounded | None:
            v = t.v + self.k
            return Bounded(v) if v <= LIMIT else None

        def followed_by(self, other: Bounded.Summary) -> Bounded.Summary | None:
            k = self.k + other.k
            return Bounded.Summary(k) if k <= LIMIT else None

        def less_equal(self, other: Bounded.Summary) -> bool:
            return self.k <= other.k

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Bounded.Summary) and self.k == other.k

        def __hash__(self) -> int:
            return hash(("Bounded.Summary", self.k))

        def __repr__(self) -> str:
            return f"Bounded.Summary({self.k})"


# ============================================================================================
# ChangeBatch.


class TestChangeBatch:
    def test_empty(self):
        b = ChangeBatch()
        assert b.is_empty() and not b and len(b) == 0
        assert list(b) == [] and b.drain() == []
        assert b.count("x") == 0

    def test_update_accumulates_and_drops_zeros(self):
        b = ChangeBatch()
        b.update("a", 2)
        b.update("b", -1)
        b.update("a", 3)
        assert b.count("a") == 5 and b.count("b") == -1
        b.update("a", -5)
        assert b.count("a") == 0
        assert list(b) == [("b", -1)]
        b.update("c", 0)  # a zero delta is a no-op
        assert len(b) == 1 and "c" not in dict(b)

    def test_constructor_and_extend(self):
        b = ChangeBatch([(1, 1), (2, 2), (1, -1), (3, 0)])
        assert sorted(b) == [(2, 2)]
        b.extend([(2, -2), (4, 7), (4, 0), (5, 1), (5, -1)])
        assert list(b) == [(4, 7)]

    def test_iteration_is_consolidated_non_zero(self):
        b = ChangeBatch()
        for k in range(10):
            b.update(k % 3, 1 if k % 2 else -1)
        # 0: k=0,3,6,9 -> -1+1-1+1 = 0 ; 1: k=1,4,7 -> 1-1+1 = 1 ; 2: k=2,5,8 -> -1+1-1 = -1
        assert dict(b) == {1: 1, 2: -1}
        assert all(d != 0 for _, d in b)
        # Iteration is over a snapshot: mutation during iteration is safe.
        for k, d in b:
            b.update(k, -d)
        assert b.is_empty()

    def test_drain(self):
        b = ChangeBatch([("x", 1), ("y", -2), ("x", 1)])
        out = b.drain()
        assert sorted(out) == [("x", 2), ("y", -2)]
        assert b.is_empty() and b.drain() == []
        b.update("z", 1)  # the batch is reusable and the drained list is detached
        assert sorted(out) == [("x", 2), ("y", -2)]
        assert list(b) == [("z", 1)]

    def test_drain_into_empty_target(self):
        a = ChangeBatch([("x", 1)])
        b = ChangeBatch()
        a.drain_into(b)
        assert a.is_empty() and dict(b) == {"x": 1}
        a.update("y", 1)  # a and b do not share storage after the swap
        assert dict(b) == {"x": 1} and dict(a) == {"y": 1}

    def test_drain_into_non_empty_target_consolidates(self):
        a = ChangeBatch([("x", 1), ("y", 2)])
        b = ChangeBatch([("x", -1), ("z", 3)])
        a.drain_into(b)
        assert a.is_empty()
        assert dict(b) == {"y": 2, "z": 3}

    def test_drain_into_from_empty(self):
        a = ChangeBatch()
        b = ChangeBatch([("q", 1)])
        a.drain_into(b)
        assert dict(b) == {"q": 1} and a.is_empty()

    def test_drain_located_into_weights_each_location_and_consolidates(self):
        # A child's produced counts: 3 records at t=5 and 1 at t=6, on an output feeding
        # location 7 once and location 9 twice (a broadcast edge).
        produced = ChangeBatch([(5, 3), (6, 1)])
        into = ChangeBatch([((7, 5), -3), ((1, 6), 4)])
        produced.drain_located_into(into, ((7, 1), (9, 2)))
        assert produced.is_empty() and produced.drain() == []
        # (7, 5) cancelled to zero and is gone; everything else is weighted and located.
        assert dict(into) == {(1, 6): 4, (7, 6): 1, (9, 5): 6, (9, 6): 2}
        # A consumed batch: weight -1 at the input's location.
        consumed = ChangeBatch([(6, 1)])
        consumed.drain_located_into(into, ((7, -1),))
        assert (7, 6) not in dict(into)
        # Draining an empty batch changes nothing; the drained batch is reusable.
        consumed.drain_located_into(into, ((7, -1),))
        assert dict(into) == {(1, 6): 4, (9, 5): 6, (9, 6): 2}
        consumed.update(8, 1)
        assert dict(consumed) == {8: 1} and dict(into) == {(1, 6): 4, (9, 5): 6, (9, 6): 2}

    def test_drain_at_into_is_one_weighted_location(self):
        consumed = ChangeBatch([(5, 2), (6, 1)])
        into = ChangeBatch([((3, 5), 2)])
        consumed.drain_at_into(into, 3, -1)  # records consumed at location 3
        assert consumed.is_empty()
        assert dict(into) == {(3, 6): -1}  # (3, 5) cancelled
        consumed.drain_at_into(into, 3, -1)  # empty: nothing changes
        assert dict(into) == {(3, 6): -1}

    def test_clear_eq_repr(self):
        a = ChangeBatch([(1, 1)])
        b = ChangeBatch([(1, 2), (1, -1)])
        assert a == b and a != ChangeBatch()
        assert (a == 5) is False
        assert "ChangeBatch" in repr(a)
        a.clear()
        assert a.is_empty() and a == ChangeBatch()

    def test_product_keys(self):
        b = ChangeBatch()
        b.update((Target(1, 0), P(1, 2)), 1)
        b.update((Target(1, 0), P(1, 2)), 1)
        b.update((Source(1, 0), P(1, 2)), -1)  # a different location, even with equal fields
        assert b.count((Target(1, 0), P(1, 2))) == 2
        assert b.count((Source(1, 0), P(1, 2))) == -1


# ============================================================================================
# Antichain.


class TestAntichain:
    def test_insert_returns_whether_added(self):
        a = Antichain()
        assert a.insert(5) is True
        assert a.insert(7) is False  # dominated
        assert a.insert(5) is False  # already present
        assert a.insert(3) is True  # evicts 5
        assert list(a) == [3] and len(a) == 1

    def test_constructor_keeps_minimal(self):
        assert list(Antichain([4, 2, 9, 2])) == [2]
        assert Antichain().is_empty() and not Antichain()
        assert list(Antichain.from_elem(7)) == [7]

    def test_int_less_equal_less_than(self):
        a = Antichain([3])
        assert a.less_equal(3) and a.less_equal(4) and not a.less_equal(2)
        assert not a.less_than(3) and a.less_than(4) and not a.less_than(2)
        e = Antichain()
        assert not e.less_equal(0) and not e.less_than(100)

    def test_product_incomparable(self):
        a = Antichain()
        assert a.insert(P(1, 2))
        assert a.insert(P(2, 1))  # incomparable: both kept
        assert not a.insert(P(2, 2))  # dominated by both
        assert len(a) == 2
        assert list(a) == [P(1, 2), P(2, 1)]  # iteration is sorted by the total order
        assert a.elements() == [P(1, 2), P(2, 1)]
        assert a.less_equal(P(1, 5)) and a.less_equal(P(5, 1)) and a.less_equal(P(2, 1))
        assert not a.less_equal(P(0, 9)) and not a.less_equal(P(1, 1))
        assert a.less_than(P(1, 3)) and not a.less_than(P(1, 2)) and not a.less_than(P(0, 0))
        assert a.insert(P(1, 1))  # dominates both
        assert list(a) == [P(1, 1)]

    def test_nested_product(self):
        a = Antichain([P(P(0, 1), 0), P(P(1, 0), 0), P(P(0, 0), 3)])
        assert len(a) == 3
        assert a.less_equal(P(P(0, 1), 1)) and not a.less_equal(P(P(0, 0), 2))
        a.insert(P(P(0, 0), 0))
        assert a == [P(P(0, 0), 0)]

    def test_equality_regardless_of_order(self):
        a = Antichain([P(1, 2), P(2, 1)])
        b = Antichain([P(2, 1), P(1, 2)])
        assert a == b and hash(a) == hash(b)
        assert a == [P(2, 1), P(1, 2)] and a == {P(1, 2), P(2, 1)} and a == (P(1, 2), P(2, 1))
        assert a != Antichain([P(1, 2)])
        assert (a == 3) is False

    def test_contains_dominates_clear_repr(self):
        a = Antichain([P(1, 2), P(2, 1)])
        assert P(1, 2) in a and P(2, 2) not in a
        assert a.dominates(Antichain([P(3, 3), P(1, 2)]))
        assert not a.dominates(Antichain([P(0, 5)]))
        assert a.dominates(Antichain())
        assert "Antichain" in repr(a)
        a.clear()
        assert a.is_empty() and list(a) == []

    def test_summaries_without_total_order(self):
        # The summary protocol promises no ``<``: iterating must still work (insertion order).
        a = Antichain()
        s1, s2 = Pair.Summary(1, 0), Pair.Summary(0, 1)
        assert a.insert(s1) and a.insert(s2) and not a.insert(Pair.Summary(1, 1))
        assert set(map(id, a)) == {id(s1), id(s2)}
        assert len(a.elements()) == 2 and "Antichain" in repr(a)


# ============================================================================================
# MutableAntichain.


def net(changes: list) -> dict:
    """Consolidate frontier changes."""
    c: Counter = Counter()
    for t, d in changes:
        c[t] += d
    return {t: d for t, d in c.items() if d}


class TestMutableAntichain:
    def test_doc_example(self):
        m = MutableAntichain()
        assert m.update_iter([(1, +1)]) == [(1, 1)]
        assert sorted(m.update_iter([(1, -1), (2, +7)])) == [(1, -1), (2, 1)]
        assert list(m.frontier()) == [2]
        assert m.count_for(2) == 7 and m.count_for(1) == 0

    def test_no_change_for_updates_beyond_frontier(self):
        m = MutableAntichain()
        m.update_iter([(3, 1)])
        assert m.update_iter([(5, 1), (7, 2)]) == []
        assert m.update_iter([(5, -1)]) == []
        assert m.update_iter([(3, 1)]) == []  # count 2 at the frontier
        assert m.update_iter([(3, -1)]) == []  # still positive
        assert m.update_iter([(3, -1)]) == [(3, -1), (7, 1)]
        assert m.counts() == {7: 2}

    def test_transiently_negative_counts(self):
        m = MutableAntichain()
        assert m.update_iter([(1, -1)]) == []  # a removal heard before its addition
        assert m.is_empty() and m.count_for(1) == -1
        assert m.update_iter([(2, 1)]) == [(2, 1)]  # negative counts do not hold the frontier
        assert m.update_iter([(1, 1)]) == []  # back to zero: still not in the frontier
        assert m.count_for(1) == 0 and 1 not in m.counts()
        assert sorted(m.update_iter([(1, 1)])) == [(1, 1), (2, -1)]
        assert list(m) == [1]

    def test_negative_then_positive_in_one_batch(self):
        # A batch's frontier changes may be unconsolidated (integer batches are applied one
        # update at a time); their *sum* is the frontier's movement.
        m = MutableAntichain()
        assert net(m.update_iter([(4, -1), (4, 1)])) == {}
        assert net(m.update_iter([(4, 1), (4, -1), (5, 1)])) == {5: 1}
        assert net(m.update_iter([(5, -1), (5, 1)])) == {}
        assert m.frontier() == [5]
        p = MutableAntichain()
        assert net(p.update_iter([(P(4, 0), 1), (P(4, 0), -1), (P(5, 0), 1)])) == {P(5, 0): 1}
        assert p.update_iter([(P(5, 0), -1), (P(5, 0), 1)]) == []

    def test_changes_are_plus_minus_one(self):
        m = MutableAntichain()
        for batch in ([(3, 5)], [(1, 2), (3, -5)], [(1, -2), (0, -1), (2, 4)], [(0, 1)]):
            changes = m.update_iter(batch)
            assert all(d in (1, -1) for _t, d in changes)

    def test_zero_delta_ignored(self):
        m = MutableAntichain()
        assert m.update_iter([(1, 0)]) == []
        assert m.counts() == {}

    def test_product_frontier(self):
        m = MutableAntichain()
        ch = m.update_iter([(P(1, 2), 1), (P(2, 1), 1), (P(2, 2), 1)])
        assert sorted(ch) == [(P(1, 2), 1), (P(2, 1), 1)]
        assert m.frontier() == Antichain([P(2, 1), P(1, 2)])
        assert m.less_equal(P(2, 2)) and m.less_equal(P(1, 2)) and not m.less_equal(P(0, 5))
        assert m.less_than(P(2, 2)) and not m.less_than(P(1, 2))
        ch = m.update_iter([(P(1, 2), -1)])
        assert ch == [(P(1, 2), -1)]  # (2,2) is still dominated by (2,1)
        ch = m.update_iter([(P(2, 1), -1)])
        assert sorted(ch) == [(P(2, 1), -1), (P(2, 2), 1)]
        ch = m.update_iter([(P(0, 0), 1)])
        assert sorted(ch) == [(P(0, 0), 1), (P(2, 2), -1)]
        assert m.frontier_list() == (P(0, 0),)

    def test_int_less_equal_less_than(self):
        m = MutableAntichain.from_elem(3)
        assert m.frontier() == [3] and m.count_for(3) == 1
        assert m.less_equal(3) and not m.less_equal(2)
        assert m.less_than(4) and not m.less_than(3)
        assert not MutableAntichain().less_equal(0)
        assert not MutableAntichain().less_than(0)
        assert "MutableAntichain" in repr(m)

    def test_frontier_is_a_copy(self):
        m = MutableAntichain.from_elem(1)
        f = m.frontier()
        f.insert(0)
        assert list(m) == [1]


# ============================================================================================
# order.py


class TestOrder:
    def test_int_helpers(self):
        assert less_equal(1, 1) and less_equal(1, 2) and not less_equal(2, 1)
        assert less_than(1, 2) and not less_than(1, 1)
        assert results_in(2, 5) == 7 and followed_by(2, 3) == 5
        assert summary_less_equal(1, 2) and not summary_less_equal(3, 2)

    def test_product_partial_vs_lexicographic(self):
        a, b = P(1, 2), P(2, 1)
        assert not a.less_equal(b) and not b.less_equal(a)  # incomparable
        assert a < b  # but the total order (lexicographic) sorts them
        assert not less_equal(a, b) and not less_than(a, b)
        assert P(1, 1).less_equal(P(1, 2)) and P(1, 1).less_than(P(1, 2))
        assert P(1, 1).less_equal(P(1, 1)) and not P(1, 1).less_than(P(1, 1))
        assert less_than(P(0, 0), P(0, 1)) and not less_than(P(0, 1), P(0, 1))
        # The total order extends the partial order.
        times = [P(x, y) for x in range(3) for y in range(3)]
        for s in times:
            for t in times:
                if s.less_than(t):
                    assert s < t

    def test_product_fields_repr_pickle(self):
        t = P(3, 4)
        assert t.outer == 3 and t.inner == 4 and t == (3, 4) and hash(t) == hash((3, 4))
        assert repr(t) == "(3, 4)"
        u = pickle.loads(pickle.dumps(P(P(1, 2), 3)))
        assert type(u) is Product and type(u.outer) is Product and u == P(P(1, 2), 3)
        s = pickle.loads(pickle.dumps(PS(PS(0, 1), 2)))
        assert type(s) is ProductSummary and type(s.outer) is ProductSummary
        assert repr(PS(1, 2)) == "ProductSummary(1, 2)" and PS(1, 2).outer == 1
        assert PS(1, 2).inner == 2

    def test_nested_product(self):
        a, b = P(P(0, 1), 5), P(P(1, 0), 5)
        assert not a.less_equal(b) and not b.less_equal(a)
        assert P(P(0, 0), 5).less_equal(a) and P(P(0, 0), 5).less_equal(b)
        assert not P(P(0, 0), 6).less_equal(a)
        assert less_than(P(P(0, 0), 5), a)

    def test_product_summary(self):
        s = PS(1, 2)
        assert s.results_in(P(3, 4)) == P(4, 6) and type(s.results_in(P(3, 4))) is Product
        assert results_in(s, P(0, 0)) == P(1, 2)
        assert s.followed_by(PS(0, 1)) == PS(1, 3) and type(s.followed_by(PS(0, 1))) is PS
        assert followed_by(s, PS(2, 0)) == PS(3, 2)
        assert PS(0, 1).less_equal(PS(0, 2)) and not PS(0, 1).less_equal(PS(1, 0))
        assert summary_less_equal(PS(0, 0), PS(0, 1))
        # results_in composed equals followed_by then results_in.
        t = P(5, 7)
        assert PS(0, 1).followed_by(PS(2, 0)).results_in(t) == PS(2, 0).results_in(
            PS(0, 1).results_in(t)
        )

    def test_nested_product_summary(self):
        s = PS(PS(1, 0), 2)
        assert s.results_in(P(P(0, 0), 0)) == P(P(1, 0), 2)
        assert s.followed_by(PS(PS(0, 1), 1)) == PS(PS(1, 1), 3)
        assert PS(PS(0, 0), 1).less_equal(s) and not PS(PS(0, 1), 0).less_equal(s)

    def test_none_propagation(self):
        s = PS(0, Bounded.Summary(3))
        # A user summary inside a product: None when the bounded coordinate would overflow.
        assert s.results_in(P(0, Bounded(7))) == P(0, Bounded(10))
        assert s.results_in(P(0, Bounded(8))) is None
        assert results_in(s, P(0, Bounded(8))) is None
        assert s.followed_by(PS(1, Bounded.Summary(7))) == PS(1, Bounded.Summary(10))
        assert s.followed_by(PS(1, Bounded.Summary(8))) is None
        assert followed_by(s, PS(0, Bounded.Summary(8))) is None
        # None in the outer coordinate short-circuits too.
        o = PS(Bounded.Summary(20), 0)
        assert o.results_in(P(Bounded(0), 0)) is None
        assert o.followed_by(PS(Bounded.Summary(0), 0)) is None
        assert Bounded.Summary(11).results_in(Bounded(0)) is None

    def test_domains(self):
        assert domain_of(int) is INT and domain_of(INT) is INT and domain_of(IntDomain()) is INT
        assert INT == int and INT == IntDomain() and hash(INT) == hash(IntDomain())  # noqa: E721  (domain equality with the int type is the point)
        assert INT.minimum() == 0 and INT.identity() == 0 and repr(INT) == "int"
        assert INT.summary(3) == 3
        for bad in (-1, 1.5, "1", True):
            with pytest.raises(ValueError):
                INT.summary(bad)
        d = ProductDomain(int, int)
        assert domain_of(d) is d
        assert d.minimum() == P(0, 0) and type(d.minimum()) is Product
        assert d.identity() == PS(0, 0) and type(d.identity()) is PS
        assert d.summary(1) == PS(0, 1) and d.summary(PS(2, 3)) == PS(2, 3)
        assert d == ProductDomain(INT, int) and hash(d) == hash(ProductDomain(int, int))
        assert d != INT and repr(d) == "Product[int, int]"
        d2 = ProductDomain(d, int)
        assert d2.minimum() == P(P(0, 0), 0) and d2.identity() == PS(PS(0, 0), 0)
        assert d2 != d and d2 == ProductDomain(ProductDomain(int, int), int)
        u = domain_of(Lex)
        assert isinstance(u, UserDomain) and domain_of(u) is u
        assert u.minimum() == Lex(0, 0) and u.identity() == Lex.Summary()
        assert u == UserDomain(Lex) and u != UserDomain(Pair) and hash(u) == hash(Lex)
        assert repr(u) == "Lex" and u.summary(Lex.Summary(1, 0)) == Lex.Summary(1, 0)
        assert minimum(int) == 0 and minimum(d) == P(0, 0) and minimum(Lex) == Lex(0, 0)
        assert identity(int) == 0 and identity(d2) == PS(PS(0, 0), 0)
        pd = ProductDomain(int, Lex)
        assert pd.minimum() == P(0, Lex(0, 0)) and pd.summary(Lex.Summary(0, 1)) == PS(
            0, Lex.Summary(0, 1)
        )
        with pytest.raises(TypeError):
            domain_of(3)
        with pytest.raises(TypeError):
            domain_of(str)  # no minimum() / Summary

    def test_refinement(self):
        outer = INT
        inner = ProductDomain(int, int)
        assert to_inner(outer, outer, 5) == 5
        assert to_inner(outer, inner, 5) == P(5, 0) and type(to_inner(outer, inner, 5)) is P
        assert to_outer(outer, inner, P(5, 3)) == 5
        assert to_outer(outer, outer, 5) == 5
        assert summarize(outer, inner, PS(2, 7)) == 2 and summarize(outer, outer, 3) == 3
        # Nested: the product domain of a product domain.
        inner2 = ProductDomain(inner, int)
        assert to_inner(inner, inner2, P(1, 2)) == P(P(1, 2), 0)
        assert to_outer(inner, inner2, P(P(1, 2), 9)) == P(1, 2)
        assert summarize(inner, inner2, PS(PS(0, 1), 3)) == PS(0, 1)
        # A user inner domain starts at its own minimum.
        assert to_inner(INT, ProductDomain(int, Lex), 4) == P(4, Lex(0, 0))
        # Bare ``int`` works as a domain spec too.
        assert to_inner(int, int, 3) == 3

    def test_protocols(self):
        assert isinstance(P(1, 2), Timestamp) and isinstance(Lex(0, 0), Timestamp)
        assert isinstance(PS(0, 1), PathSummary) and isinstance(Lex.Summary(), PathSummary)
        assert not isinstance(3, Timestamp)


# ============================================================================================
# Builder and Tracker.


def cycle_builder(domain=int, summaries=(0, 0, 1)):
    """Nodes 1 -> 2 -> 3 -> 1 with the given internal summaries; node 0 an empty boundary."""
    b = Builder(domain)
    b.add_node(0, 0, 0, [], "scope")
    for n, s in zip((1, 2, 3), summaries):
        cell = s if isinstance(s, list) else [s]
        b.add_node(n, 1, 1, [[cell]], "ABC"[n - 1])
    b.add_edge((1, 0), (2, 0))
    b.add_edge((2, 0), (3, 0))
    b.add_edge((3, 0), (1, 0))
    return b


def frontiers(tracker: Tracker) -> dict:
    out = {}
    for n in range(len(tracker.node_inputs)):
        for i in range(tracker.node_inputs[n]):
            out[Target(n, i)] = list(tracker.target_frontier(n, i))
        for o in range(tracker.node_outputs[n]):
            out[Source(n, o)] = list(tracker.source_frontier(n, o))
    return out


class TestSourceTarget:
    def test_distinct_locations(self):
        assert Source(1, 0) != Target(1, 0) and (Source(1, 0) == Target(1, 0)) is False
        assert len({Source(1, 0), Target(1, 0)}) == 2
        assert Source(1, 0) == Source(1, 0) and hash(Source(1, 0)) == hash(Source(1, 0))
        assert Target(2, 1) == Target(2, 1) and Target(2, 1) != Target(2, 0)
        assert Source(1, 2).node == 1 and Source(1, 2).port == 2
        node, port = Target(3, 4)
        assert (node, port) == (3, 4)
        assert pickle.loads(pickle.dumps(Source(1, 2))) == Source(1, 2)


class TestBuilder:
    def test_cycle_example_frontiers(self):
        t = cycle_builder().build()
        t.update_source(1, 0, 17, 1)
        t.propagate_all()
        assert list(t.target_frontier(2, 0)) == [17]
        assert list(t.target_frontier(3, 0)) == [17]
        assert list(t.target_frontier(1, 0)) == [18]
        assert list(t.source_frontier(1, 0)) == [17]
        assert list(t.source_frontier(2, 0)) == [17]
        assert list(t.source_frontier(3, 0)) == [18]
        # Moving the capability forward moves every frontier; dropping it empties them.
        t.update_source(1, 0, 17, -1)
        t.update_source(1, 0, 20, 1)
        t.propagate_all()
        assert list(t.target_frontier(1, 0)) == [21] and list(t.target_frontier(3, 0)) == [20]
        t.update_source(1, 0, 20, -1)
        t.propagate_all()
        assert all(v == [] for v in frontiers(t).values())

    def test_cycle_example_compile(self):
        c = cycle_builder().compile()
        assert c[Source(1, 0)][Target(2, 0)] == [0]
        assert c[Source(1, 0)][Target(3, 0)] == [0]
        assert c[Source(1, 0)][Target(1, 0)] == [1]
        assert c[Source(1, 0)][Source(1, 0)] == [0]  # the identity (empty path)
        assert c[Target(1, 0)][Source(1, 0)] == [0]
        assert c[Target(3, 0)][Source(3, 0)] == [1]
        assert c[Source(3, 0)][Source(2, 0)] == [0]
        assert c[Target(2, 0)][Target(2, 0)] == [0]
        # Every location of the cycle reaches every other one.
        assert all(len(v) == 6 for v in c.values()) and len(c) == 6

    def test_non_advancing_cycle_raises_naming_operators(self):
        b = cycle_builder(summaries=(0, 0, 0))
        with pytest.raises(CycleError) as e:
            b.build()
        msg = str(e.value)
        for name in "ABC":
            assert name in msg
        assert isinstance(e.value, GraphError) and isinstance(e.value, TimelyError)
        with pytest.raises(CycleError):
            b.compile()
        with pytest.raises(CycleError):
            b.check_cycles()

    def test_cycle_with_identity_among_summaries_raises(self):
        # C's internal antichain {1, 0} is just {0}: a path through C need not advance.
        with pytest.raises(CycleError):
            cycle_builder(summaries=(0, 0, [1, 0])).build()
        d = ProductDomain(int, int)
        # {(0,1), (1,0)}: every path through C advances one coordinate or the other.
        cycle_builder(d, summaries=(PS(0, 0), PS(0, 0), [PS(0, 1), PS(1, 0)])).build()

    def test_self_loop(self):
        b = Builder(int)
        b.add_node(0, 0, 0, [])
        b.add_node(1, 1, 1, [[[0]]], "selfie")
        b.add_edge((1, 0), (1, 0))
        with pytest.raises(CycleError, match="selfie"):
            b.build()
        b2 = Builder(int)
        b2.add_node(0, 0, 0, [])
        b2.add_node(1, 1, 1, [[[2]]], "feedback")
        b2.add_edge((1, 0), (1, 0))
        t = b2.build()
        t.update_target(1, 0, 3, 1)
        t.propagate_all()
        assert list(t.target_frontier(1, 0)) == [3] and list(t.source_frontier(1, 0)) == [5]

    def test_product_loop_ok_but_outer_only_cycle_with_zero_inner_raises(self):
        b = cycle_builder(ProductDomain(int, int), summaries=(PS(0, 0), PS(0, 0), PS(0, 1)))
        t = b.build()
        t.update_source(1, 0, P(2, 5), 1)
        t.propagate_all()
        assert list(t.target_frontier(1, 0)) == [P(2, 6)]
        bad = cycle_builder(ProductDomain(int, int), summaries=(PS(0, 0),) * 3)
        with pytest.raises(CycleError):
            bad.build()

    def test_empty_summary_breaks_cycle(self):
        b = Builder(int)
        b.add_node(0, 0, 0, [])
        b.add_node(1, 1, 1, [[[0]]], "A")
        b.add_node(2, 1, 1, [[[]]], "B")  # no path from B's input to its output
        b.add_edge((1, 0), (2, 0))
        b.add_edge((2, 0), (1, 0))
        t = b.build()
        t.update_source(1, 0, 0, 1)
        t.propagate_all()
        assert list(t.target_frontier(2, 0)) == [0]
        assert list(t.source_frontier(2, 0)) == []
        assert list(t.target_frontier(1, 0)) == []

    def test_shape_errors(self):
        b = Builder(int)
        b.add_node(0, 0, 0, [])
        with pytest.raises(ValueError, match="twice"):
            b.add_node(0, 0, 0, [])
        with pytest.raises(ValueError):
            b.add_node(1, 1, 2, [[[0]]])  # one row of two antichains expected
        with pytest.raises(ValueError):
            b.add_node(1, 2, 1, [[[0]]])  # two rows expected
        b.add_node(2, 1, 1, [[[0]]])
        with pytest.raises(ValueError, match="0..1"):
            b.build()  # node 1 missing
        b.add_node(1, 1, 1, [[[0]]])
        b.add_edge((1, 1), (2, 0))
        with pytest.raises(ValueError, match="missing output"):
            b.build()
        b2 = Builder(int)
        b2.add_node(0, 0, 0, [])
        b2.add_node(1, 1, 1, [[[0]]])
        b2.add_edge((1, 0), (1, 3))
        with pytest.raises(ValueError, match="missing input"):
            b2.compile()
        b3 = Builder(int)
        b3.add_node(0, 0, 0, [])
        b3.add_edge((5, 0), (0, 0))
        with pytest.raises(ValueError, match="missing output"):
            b3.build()

    def test_nodes_in_any_order_and_names(self):
        b = Builder()
        b.add_node(2, 1, 0, [[]], "sink")
        b.add_node(0, 0, 0, [])
        b.add_node(1, 0, 1, [], "source")
        b.add_edge((1, 0), (2, 0))
        assert b.node_name(2) == "sink" and b.node_name(0) == "node 0"
        t = b.build()
        assert t.node_names == ["node 0", "source", "sink"]
        t.update_source(1, 0, 4, 1)
        t.propagate_all()
        assert list(t.target_frontier(2, 0)) == [4]

    def test_duplicate_edges_are_one_edge(self):
        b = Builder(int)
        b.add_node(0, 0, 0, [])
        b.add_node(1, 0, 1, [])
        b.add_node(2, 1, 0, [[]])
        b.add_edge((1, 0), (2, 0))
        b.add_edge((1, 0), (2, 0))
        t = b.build()
        t.update_source(1, 0, 1, 1)
        t.propagate_all()
        assert list(t.target_frontier(2, 0)) == [1]
        t.update_source(1, 0, 1, -1)
        t.propagate_all()
        assert list(t.target_frontier(2, 0)) == []

    def test_multiple_summaries_product(self):
        # One operator whose input reaches its output by two incomparable summaries.
        d = ProductDomain(int, int)
        b = Builder(d)
        b.add_node(0, 0, 0, [])
        b.add_node(1, 1, 1, [[[PS(1, 0), PS(0, 1)]]], "fork")
        b.add_node(2, 1, 0, [[]], "sink")
        b.add_edge((1, 0), (2, 0))
        c = b.compile()
        assert c[Target(1, 0)][Target(2, 0)] == [PS(1, 0), PS(0, 1)]
        t = b.build()
        t.update_target(1, 0, P(0, 0), 1)
        t.propagate_all()
        assert t.target_frontier(2, 0) == [P(1, 0), P(0, 1)]


def scope_builder():
    """A scope with 2 inputs and 2 outputs.

    input 0 (Source(0,0)) -> A (1) -> output 0 (Target(0,0)); A also feeds a loop
    A -> F (2, feedback +1) -> A's second input; input 1 (Source(0,1)) -> B (3) -> output 1.
    B's output also goes to output 0 via C (4) with summary 2.
    """
    b = Builder(int)
    b.add_node(0, 2, 2, [[[], []], [[], []]], "scope")
    b.add_node(1, 2, 1, [[[0]], [[0]]], "A")
    b.add_node(2, 1, 1, [[[1]]], "F")
    b.add_node(3, 1, 1, [[[0]]], "B")
    b.add_node(4, 1, 1, [[[2]]], "C")
    b.add_edge((0, 0), (1, 0))
    b.add_edge((1, 0), (0, 0))
    b.add_edge((1, 0), (2, 0))
    b.add_edge((2, 0), (1, 1))
    b.add_edge((0, 1), (3, 0))
    b.add_edge((3, 0), (0, 1))
    b.add_edge((3, 0), (4, 0))
    b.add_edge((4, 0), (0, 0))
    return b


class TestTracker:
    def test_scope_summary(self):
        t = scope_builder().build()
        assert t.scope_summary[0][0] == [0]
        assert t.scope_summary[0][1] == []  # no path from input 0 to output 1
        assert t.scope_summary[1][1] == [0]
        assert t.scope_summary[1][0] == [2]
        c = scope_builder().compile()
        for i in range(2):
            for q in range(2):
                assert t.scope_summary[i][q] == c[Source(0, i)].get(Target(0, q), Antichain())

    def test_scope_summary_product(self):
        d = ProductDomain(int, int)
        b = Builder(d)
        b.add_node(0, 1, 1, [[[]]], "scope")
        b.add_node(1, 2, 1, [[[PS(0, 0)]], [[PS(0, 0)]]], "head")
        b.add_node(2, 1, 1, [[[PS(0, 1)]]], "feedback")
        b.add_node(3, 1, 1, [[[PS(1, 0), PS(0, 3)]]], "odd")
        b.add_edge((0, 0), (1, 0))
        b.add_edge((1, 0), (2, 0))
        b.add_edge((2, 0), (1, 1))
        b.add_edge((1, 0), (3, 0))
        b.add_edge((3, 0), (0, 0))
        t = b.build()
        assert t.scope_summary[0][0] == [PS(1, 0), PS(0, 3)]

    def test_output_changes_projection(self):
        t = scope_builder().build()
        t.update_source(1, 0, 5, 1)  # A holds 5: output 0 may see 5
        t.update_source(2, 0, 3, 1)  # F holds 3 -> A at 3 -> output 0 at 3
        t.update_target(4, 0, 1, 1)  # a message at C at 1 -> output 0 at 3
        t.update_source(0, 0, 0, 1)  # the scope input: not projected (not our capability)
        t.update_target(0, 1, 7, 1)  # a message at output 1 itself
        t.propagate_all()
        assert dict(t.output_changes[0]) == {5: 1, 3: 2}
        assert dict(t.output_changes[1]) == {7: 1}
        # The implications, unlike the projection, include the scope input.
        assert list(t.target_frontier(0, 0)) == [0]
        for batch in t.output_changes:
            batch.clear()
        t.update_source(2, 0, 3, -1)
        t.propagate_all()
        assert dict(t.output_changes[0]) == {3: -1}
        assert dict(t.output_changes[1]) == {}

    def test_cap_counts_holds_capability_tracking_anything(self):
        t = scope_builder().build()
        assert not t.tracking_anything() and not t.has_pending()
        t.update_source(1, 0, 5, 1)
        assert t.has_pending() and t.tracking_anything()
        t.propagate_all()
        assert not t.has_pending()
        assert t.holds_capability(1) and not t.holds_capability(2)
        assert t.cap_counts[1] == 1 and t.total_counts == 1
        t.update_source(1, 0, 6, 1)  # beyond the frontier: no change in counts of frontiers
        t.update_target(3, 0, 2, 1)  # a message, not a capability
        t.propagate_all()
        assert t.cap_counts[1] == 1 and not t.holds_capability(3) and t.total_counts == 2
        t.update_source(1, 0, 5, -1)
        t.update_source(1, 0, 6, -1)
        t.propagate_all()
        assert not t.holds_capability(1) and t.tracking_anything()
        t.update_target(3, 0, 2, -1)
        t.propagate_all()
        assert not t.tracking_anything() and t.total_counts == 0

    def test_pushed_are_frontier_changes(self):
        t = cycle_builder().build()
        t.update_source(1, 0, 17, 1)
        t.propagate_all()
        acc = Counter()
        for loc, time, d in t.drain_pushed():
            acc[(t.location(loc), time)] += d
        assert {k: v for k, v in acc.items() if v} == {
            (Source(1, 0), 17): 1,
            (Target(2, 0), 17): 1,
            (Source(2, 0), 17): 1,
            (Target(3, 0), 17): 1,
            (Source(3, 0), 18): 1,
            (Target(1, 0), 18): 1,
        }
        t.drain_pushed()
        t.update_source(1, 0, 17, -1)
        t.update_source(1, 0, 19, 1)
        t.propagate_all()
        acc = Counter()
        for loc, time, d in t.drain_pushed():
            acc[(t.location(loc), time)] += d
        assert {k: v for k, v in acc.items() if v} == {
            (Source(1, 0), 17): -1,
            (Source(1, 0), 19): 1,
            (Target(2, 0), 17): -1,
            (Target(2, 0), 19): 1,
            (Source(2, 0), 17): -1,
            (Source(2, 0), 19): 1,
            (Target(3, 0), 17): -1,
            (Target(3, 0), 19): 1,
            (Source(3, 0), 18): -1,
            (Source(3, 0), 20): 1,
            (Target(1, 0), 18): -1,
            (Target(1, 0), 20): 1,
        }

    def test_no_change_no_push(self):
        t = cycle_builder().build()
        t.update_source(1, 0, 17, 1)
        t.propagate_all()
        t.drain_pushed()
        t.update_source(1, 0, 30, 1)  # beyond the frontier: nothing moves
        t.propagate_all()
        assert t.drain_pushed() == []
        t.propagate_all()  # nothing pending: a no-op
        assert t.drain_pushed() == []

    def test_transiently_negative(self):
        t = cycle_builder().build()
        t.update_target(2, 0, 4, -1)  # consumption heard before the send
        t.propagate_all()
        assert all(v == [] for v in frontiers(t).values())
        assert t.pointstamp_count(Target(2, 0), 4) == -1
        t.update_source(1, 0, 9, 1)
        t.propagate_all()
        assert list(t.target_frontier(2, 0)) == [9]
        t.update_target(2, 0, 4, 1)  # the send arrives: net zero at (Target(2,0), 4)
        t.propagate_all()
        assert list(t.target_frontier(2, 0)) == [9]
        assert t.pointstamp_count(Target(2, 0), 4) == 0

    def test_update_loc_location_id_positive_pointstamps(self):
        t = cycle_builder().build()
        loc = t.location_id(Target(3, 0))
        assert t.location(loc) == Target(3, 0) and type(t.location(loc)) is Target
        sloc = t.location_id(Source(3, 0))
        assert sloc != loc and t.location(sloc) == Source(3, 0)
        t.update_loc(loc, 2, 3)
        t.update_loc(sloc, 4, 1)
        t.propagate_all()
        assert t.pointstamp_count(Target(3, 0), 2) == 3
        assert t.pointstamp_count(Source(1, 0), 2) == 0
        assert sorted(t.positive_pointstamps(), key=repr) == sorted(
            [(Target(3, 0), 2, 3), (Source(3, 0), 4, 1)], key=repr
        )
        assert list(t.target_frontier(1, 0)) == [3]  # min(2 + 1, 4)

    def test_explain(self):
        t = cycle_builder().build()
        t.update_source(1, 0, 17, 1)
        t.update_source(2, 0, 25, 1)  # beyond the frontier everywhere: never "holding"
        t.propagate_all()
        # Node 1's input is at 18 because of A's capability at 17 (via C's +1).
        assert t.explain(Target(1, 0)) == [("A", Source(1, 0), 17)]
        assert t.explain(Target(3, 0)) == [("A", Source(1, 0), 17)]
        t.update_source(2, 0, 17, 1)
        t.propagate_all()
        held = t.explain(Target(3, 0))
        assert sorted(held, key=repr) == sorted(
            [("A", Source(1, 0), 17), ("B", Source(2, 0), 17)], key=repr
        )
        # Dropping everything: nothing holds anything.
        t.update_source(1, 0, 17, -1)
        t.update_source(2, 0, 17, -1)
        t.update_source(2, 0, 25, -1)
        t.propagate_all()
        assert t.explain(Target(3, 0)) == []

    def test_explain_ignores_unreachable(self):
        t = scope_builder().build()
        t.update_source(3, 0, 0, 1)  # B: reaches output 1 and (via C, +2) output 0
        t.update_source(1, 0, 1, 1)  # A: reaches output 0 only
        t.propagate_all()
        assert t.explain(Target(0, 1)) == [("B", Source(3, 0), 0)]
        assert list(t.target_frontier(0, 0)) == [1]
        assert t.explain(Target(0, 0)) == [("A", Source(1, 0), 1)]
        t.update_source(1, 0, 1, -1)
        t.propagate_all()
        assert list(t.target_frontier(0, 0)) == [2]
        assert t.explain(Target(0, 0)) == [("B", Source(3, 0), 0)]
        assert t.explain(Source(2, 0)) == []


# ============================================================================================
# User-defined timestamp types end to end.


class TestUserTimestamps:
    def test_lex_protocol(self):
        assert Lex(1, 5).less_equal(Lex(2, 0)) and Lex(1, 5) < Lex(2, 0)
        assert Lex(1, 5).less_than(Lex(1, 6)) and not Lex(1, 5).less_than(Lex(1, 5))
        assert less_equal(Lex(0, 9), Lex(1, 0)) and less_than(Lex(0, 9), Lex(1, 0))
        s = Lex.Summary(1, 2)
        assert s.results_in(Lex(3, 9)) == Lex(4, 2)
        assert Lex.Summary(0, 2).results_in(Lex(3, 9)) == Lex(3, 11)
        assert Lex.Summary().results_in(Lex(3, 9)) == Lex(3, 9)  # identity
        # Composition matches sequential application.
        for a in [Lex.Summary(0, 1), Lex.Summary(2, 0), Lex.Summary(1, 3)]:
            for b in [Lex.Summary(0, 2), Lex.Summary(1, 1), Lex.Summary()]:
                for t in [Lex(0, 0), Lex(2, 5)]:
                    assert a.followed_by(b).results_in(t) == b.results_in(a.results_in(t))

    def test_lex_antichains(self):
        a = Antichain([Lex(1, 3), Lex(0, 7), Lex(2, 0)])
        assert list(a) == [Lex(0, 7)]  # a total order: one minimal element
        assert a.less_equal(Lex(1, 0)) and not a.less_equal(Lex(0, 6))
        assert a.less_than(Lex(0, 8)) and not a.less_than(Lex(0, 7))
        m = MutableAntichain()
        assert m.update_iter([(Lex(1, 0), 1), (Lex(0, 5), 1)]) == [(Lex(0, 5), 1)]
        assert sorted(m.update_iter([(Lex(0, 5), -1)])) == [(Lex(0, 5), -1), (Lex(1, 0), 1)]
        assert m.update_iter([(Lex(0, 1), -1)]) == []  # negative: not in the frontier
        assert m.count_for(Lex(0, 1)) == -1 and list(m) == [Lex(1, 0)]

    def test_lex_builder_and_tracker(self):
        # An outer loop (F: Summary(1, 0) resets the inner counter) around an inner loop
        # (G: Summary(0, 1)); entry at node 1.
        b = Builder(Lex)
        b.add_node(0, 0, 0, [])
        b.add_node(1, 2, 1, [[[Lex.Summary()]], [[Lex.Summary()]]], "outer head")
        b.add_node(2, 2, 1, [[[Lex.Summary()]], [[Lex.Summary()]]], "inner head")
        b.add_node(3, 1, 2, [[[Lex.Summary()], [Lex.Summary()]]], "body")
        b.add_node(4, 1, 1, [[[Lex.Summary(0, 1)]]], "inner feedback")
        b.add_node(5, 1, 1, [[[Lex.Summary(1, 0)]]], "outer feedback")
        b.add_edge((1, 0), (2, 0))
        b.add_edge((2, 0), (3, 0))
        b.add_edge((3, 0), (4, 0))
        b.add_edge((4, 0), (2, 1))
        b.add_edge((3, 1), (5, 0))
        b.add_edge((5, 0), (1, 1))
        c = b.compile()
        assert c[Source(3, 0)][Target(2, 1)] == [Lex.Summary(0, 1)]
        assert c[Source(3, 1)][Target(1, 1)] == [Lex.Summary(1, 0)]
        # body -> inner head through the outer loop: Summary(1, 0) beats nothing; through the
        # inner loop Summary(0, 1) is smaller lexicographically.
        assert c[Source(3, 0)][Source(3, 0)] == [Lex.Summary()]
        assert c[Target(3, 0)][Target(3, 0)] == [Lex.Summary()]
        assert c[Source(3, 1)][Target(3, 0)] == [Lex.Summary(1, 0)]
        assert c[Source(3, 0)][Target(3, 0)] == [Lex.Summary(0, 1)]
        t = b.build()
        t.update_source(3, 0, Lex(2, 4), 1)
        t.propagate_all()
        assert list(t.target_frontier(2, 1)) == [Lex(2, 5)]
        assert list(t.target_frontier(3, 0)) == [Lex(2, 5)]
        assert list(t.target_frontier(1, 1)) == [Lex(3, 0)]  # via the body's second output
        t.update_source(1, 0, Lex(0, 0), 1)
        t.propagate_all()
        assert list(t.target_frontier(3, 0)) == [Lex(0, 0)]
        assert list(t.target_frontier(1, 1)) == [Lex(1, 0)]
        t.update_source(1, 0, Lex(0, 0), -1)
        t.update_source(3, 0, Lex(2, 4), -1)
        t.update_target(5, 0, Lex(7, 7), 1)
        t.propagate_all()
        assert list(t.target_frontier(3, 0)) == [Lex(8, 0)]
        assert t.explain(Target(3, 0)) == [("outer feedback", Target(5, 0), Lex(7, 7))]

    def test_lex_non_advancing_cycle(self):
        b = Builder(Lex)
        b.add_node(0, 0, 0, [])
        b.add_node(1, 1, 1, [[[Lex.Summary()]]], "loop")
        b.add_edge((1, 0), (1, 0))
        with pytest.raises(CycleError, match="loop"):
            b.build()

    def test_pair_summaries_without_lt(self):
        # Incomparable summaries that cannot be sorted must still compile and track.
        b = Builder(Pair)
        b.add_node(0, 0, 0, [])
        b.add_node(1, 1, 1, [[[Pair.Summary(1, 0), Pair.Summary(0, 1)]]], "fork")
        b.add_node(2, 1, 0, [[]], "sink")
        b.add_edge((1, 0), (2, 0))
        b.add_edge((1, 0), (1, 0))
        c = b.compile()
        got = sorted((s.a, s.b) for s in c[Target(1, 0)][Target(2, 0)])
        assert got == [(0, 1), (1, 0)]
        t = b.build()
        t.update_target(1, 0, Pair(0, 0), 1)
        t.propagate_all()
        assert t.target_frontier(2, 0) == [Pair(1, 0), Pair(0, 1)]
        assert list(t.target_frontier(1, 0)) == [Pair(0, 0)]
        assert t.explain(Target(2, 0)) == [("fork", Target(1, 0), Pair(0, 0))]

    def test_bounded_none_summaries(self):
        b = Builder(Bounded)
        b.add_node(0, 0, 0, [])
        b.add_node(1, 1, 1, [[[Bounded.Summary(3)]]], "plus3")
        b.add_node(2, 1, 0, [[]], "sink")
        b.add_edge((1, 0), (2, 0))
        t = b.build()
        t.update_target(1, 0, Bounded(8), 1)  # 8 + 3 > LIMIT: cannot reach the sink
        t.propagate_all()
        assert list(t.target_frontier(2, 0)) == []
        assert list(t.target_frontier(1, 0)) == [Bounded(8)]
        t.update_target(1, 0, Bounded(7), 1)
        t.propagate_all()
        assert list(t.target_frontier(2, 0)) == [Bounded(10)]
        # A composition past the limit is no path at all.
        b2 = Builder(Bounded)
        b2.add_node(0, 0, 0, [])
        b2.add_node(1, 1, 1, [[[Bounded.Summary(6)]]])
        b2.add_node(2, 1, 1, [[[Bounded.Summary(6)]]])
        b2.add_edge((1, 0), (2, 0))
        c = b2.compile()
        assert Source(2, 0) not in c[Target(1, 0)]
        assert c[Target(1, 0)][Target(2, 0)] == [Bounded.Summary(6)]
