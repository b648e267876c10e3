"""Collections: streams of ``(data, time, diff)`` updates.

A differential *collection* is a multiset that changes over (partially ordered) time.  It is
represented by its changes: a stream of updates ``(data, time, diff)`` -- "at ``time`` the
count of ``data`` changes by ``diff``" (an ``int``, negative for retractions).  The
collection at time ``t`` is the sum of the diffs of the updates at times ``<= t``.

Each update carries its own time; the timely message that carries it is sent at a time at or
before it (for instance an input session sends all the updates of a flush, whatever their
times, at its current time).  That is what lets an operator handle updates at many distinct
times with one token, at the least of them, and everything its frontier has passed in one go.

The operators here are the stateless ones (``map``, ``filter``, ``concat``, ``negate``,
``enter``/``leave`` ...), one timely operator each and one list comprehension per batch; the
stateful ones build an arrangement first (:mod:`.arrange`) and work on it (:mod:`.join`,
:mod:`.reduce`), and ``iterate`` is in :mod:`.iterate`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..order import to_inner, to_outer

if TYPE_CHECKING:
    from ..dataflow.operators.probe import ProbeHandle
    from ..dataflow.scope import Scope
    from ..dataflow.stream import Stream
    from .arrange import Arrangement
    from .results import Captured

__all__ = ["Collection"]


class Collection:
    """A changing collection: a timely stream of ``(data, time, diff)`` updates.

    >>> import pytimely as pt
    >>> import pytimely.differential as dd
    >>> def build(scope):
    ...     session, words = dd.new_input(scope)
    ...     lengths = words.map(len).filter(lambda n: n > 1).capture()
    ...     for w in ["a", "bb", "ccc"]:
    ...         session.insert(w)
    ...     session.advance_to(1)
    ...     session.remove("bb")
    ...     session.close()
    ...     return lengths
    >>> cap = pt.example(build)
    >>> cap.as_of(0), cap.as_of(1)
    ([(2, 1), (3, 1)], [(3, 1)])
    """

    __slots__ = ("stream",)

    def __init__(self, stream: Stream) -> None:
        self.stream = stream

    @property
    def scope(self) -> Scope:
        """The scope of the collection's stream."""
        return self.stream.scope

    # -- record by record --------------------------------------------------------------------

    def _batchwise(self, f: Callable[[list], list], name: str) -> Collection:
        return Collection(self.stream.map_batch(f, name=name))

    def map(self, f: Callable[[Any], Any]) -> Collection:
        """``f(data)`` for every record.

        >>> import pytimely.differential as dd
        >>> dd.example([1, 2, 3], lambda c: c.map(lambda x: x % 2))
        [(0, 1), (1, 2)]
        """
        return self._batchwise(lambda b: [(f(d), t, r) for d, t, r in b], "Map")

    def flat_map(self, f: Callable[[Any], Iterable[Any]]) -> Collection:
        """Every record of ``f(data)`` for every record, with the record's count.

        >>> import pytimely.differential as dd
        >>> dd.example(["ab", "b"], lambda c: c.flat_map(list))
        [('a', 1), ('b', 2)]
        """
        return self._batchwise(lambda b: [(e, t, r) for d, t, r in b for e in f(d)], "FlatMap")

    def filter(self, predicate: Callable[[Any], bool]) -> Collection:
        """The records for which ``predicate(data)`` is true.

        >>> import pytimely.differential as dd
        >>> dd.example([1, 2, 3], lambda c: c.filter(lambda x: x > 1))
        [(2, 1), (3, 1)]
        """
        return self._batchwise(lambda b: [u for u in b if predicate(u[0])], "Filter")

    def negate(self) -> Collection:
        """Every count negated: ``a.concat(b.negate())`` is ``a`` minus ``b``.

        >>> import pytimely.differential as dd
        >>> dd.example([1, 2], lambda c: c.concat(c.filter(lambda x: x > 1).negate()))
        [(1, 1)]
        """
        return self._batchwise(lambda b: [(d, t, -r) for d, t, r in b], "Negate")

    def concat(self, *others: Collection) -> Collection:
        """The sum of this collection and ``others`` (same scope).

        >>> import pytimely.differential as dd
        >>> dd.example([1, 2], lambda c: c.concat(c.map(lambda x: x + 1)))
        [(1, 1), (2, 2), (3, 1)]
        """
        if not others:
            return self
        return Collection(self.stream.concatenate([o.stream for o in others], name="Concat"))

    def inspect(self, f: Callable[[tuple[Any, Any, int]], Any]) -> Collection:
        """Call ``f((data, time, diff))`` for every update; pass the collection through.

        >>> import pytimely.differential as dd
        >>> _ = dd.example(["x"], lambda c: c.inspect(print))
        ('x', 0, 1)
        """

        def see(batch: list) -> list:
            for u in batch:
                f(u)
            return batch

        return self._batchwise(see, "Inspect")

    def map_times(self, f: Callable[[Any], Any]) -> Collection:
        """Every update's time replaced by ``f(time)``, which must not be earlier (a delay).

        >>> import pytimely as pt
        >>> import pytimely.differential as dd
        >>> def build(scope):
        ...     session, c = dd.new_input(scope)
        ...     captured = c.map_times(lambda t: t + 3).capture()
        ...     session.insert("x")
        ...     return captured
        >>> pt.example(build).updates()
        [('x', 3, 1)]
        """
        return self._batchwise(lambda b: [(d, f(t), r) for d, t, r in b], "MapTimes")

    # -- scopes -------------------------------------------------------------------------------

    def enter(self, scope: Scope) -> Collection:
        """The collection inside ``scope``, a child of its scope (times get a loop counter 0
        in an iterative scope).

        >>> import pytimely.differential as dd
        >>> def f(c):
        ...     return c.scope.iterative(lambda inner: c.enter(inner).map(str).leave())
        >>> dd.example([1], f)
        [('1', 1)]
        """
        outer, inner = self.scope.domain, scope.domain
        entered = self.stream.enter(scope)
        if outer == inner:
            return Collection(entered)
        return Collection(
            entered.map_batch(
                lambda b: [(d, to_inner(outer, inner, t), r) for d, t, r in b], name="EnterTimes"
            )
        )

    def leave(self) -> Collection:
        """The collection in the parent scope (the loop counter dropped: the sum over every
        round).  See :meth:`enter`.

        >>> import pytimely.differential as dd
        >>> def f(c):
        ...     return c.scope.region(lambda inner: c.enter(inner).negate().leave())
        >>> dd.example([1], f)
        [(1, -1)]
        """
        scope = self.scope
        outer, inner = scope.parent.domain, scope.domain
        if outer == inner:
            return Collection(self.stream.leave())
        inside = self.stream.map_batch(
            lambda b: [(d, to_outer(outer, inner, t), r) for d, t, r in b], name="LeaveTimes"
        )
        return Collection(inside.leave())

    # -- results ------------------------------------------------------------------------------

    def probe(self) -> ProbeHandle:
        """A probe on the collection's stream (``less_than(t)``: updates before ``t`` may
        still come).

        >>> import pytimely as pt
        >>> import pytimely.differential as dd
        >>> def build(scope):
        ...     session, c = dd.new_input(scope)
        ...     return c.probe()
        >>> pt.example(build).done()
        True
        """
        return self.stream.probe()

    def capture(self) -> Captured:
        """Record the updates (see :class:`~pytimely.differential.Captured`).

        >>> import pytimely as pt
        >>> import pytimely.differential as dd
        >>> def build(scope):
        ...     session, c = dd.new_input(scope)
        ...     captured = c.capture()
        ...     session.update_at("x", 3, 2)
        ...     return captured
        >>> pt.example(build).as_of(3)
        [('x', 2)]
        """
        from .results import _capture

        return _capture(self)

    # -- arrangements and the operators on them -----------------------------------------------

    def arrange_by_key(self, name: str = "ArrangeByKey") -> Arrangement:
        """Index the ``(key, val)`` records by key, on the worker ``key`` routes to.

        >>> import pytimely.differential as dd
        >>> arranged = dd.example([("a", 1)], lambda c: c.arrange_by_key().as_collection())
        >>> arranged
        [(('a', 1), 1)]
        """
        from .arrange import arrange

        return arrange(self, by_self=False, name=name)

    def arrange_by_self(self, name: str = "ArrangeBySelf") -> Arrangement:
        """Index the records by themselves (values are ``()``).

        >>> import pytimely.differential as dd
        >>> dd.example(["a", "a"], lambda c: c.arrange_by_self().as_collection(lambda k, v: k))
        [('a', 2)]
        """
        from .arrange import arrange

        return arrange(self, by_self=True, name=name)

    def consolidate(self) -> Collection:
        """The same collection with updates to one ``(data, time)`` added up and zeros
        dropped (once the frontier passes their time; routed by data).

        >>> import pytimely.differential as dd
        >>> c = dd.example(["a", "b"], lambda c: c.concat(c.negate(), c).consolidate())
        >>> c
        [('a', 1), ('b', 1)]
        """
        from .arrange import arrange

        return arrange(self, by_self=True, name="Consolidate", keep=False).as_collection(
            lambda k, _v: k
        )

    def join(self, other: Collection) -> Collection:
        """``(key, (v1, v2))`` for every ``(key, v1)`` here and ``(key, v2)`` in ``other``,
        at the join of their times, with the product of their counts.

        >>> import pytimely.differential as dd
        >>> def f(c):
        ...     return c.join(c.map(lambda kv: (kv[0], kv[1] * 10)))
        >>> dd.example([("a", 1), ("b", 2)], f)
        [(('a', (1, 10)), 1), (('b', (2, 20)), 1)]
        """
        return self.arrange_by_key().join(other.arrange_by_key())

    def join_map(self, other: Collection, f: Callable[[Any, Any, Any], Any]) -> Collection:
        """``f(key, v1, v2)`` for every pair that :meth:`join` would produce.

        >>> import pytimely.differential as dd
        >>> dd.example([("a", 1)], lambda c: c.join_map(c, lambda k, x, y: x + y))
        [(2, 1)]
        """
        return self.arrange_by_key().join_map(other.arrange_by_key(), f)

    def semijoin(self, keys: Collection) -> Collection:
        """The ``(key, val)`` records whose key is in ``keys`` (times its count there).

        >>> import pytimely.differential as dd
        >>> def f(c):
        ...     return c.semijoin(c.map(lambda kv: kv[0]).filter(lambda k: k == "a").distinct())
        >>> dd.example([("a", 1), ("b", 2)], f)
        [(('a', 1), 1)]
        """
        return self.arrange_by_key().join_map(keys.arrange_by_self(), lambda k, v, _u: (k, v))

    def antijoin(self, keys: Collection) -> Collection:
        """The ``(key, val)`` records whose key is not in ``keys`` (a set: use ``distinct``).

        >>> import pytimely.differential as dd
        >>> def f(c):
        ...     return c.antijoin(c.map(lambda kv: kv[0]).filter(lambda k: k == "a").distinct())
        >>> dd.example([("a", 1), ("b", 2)], f)
        [(('b', 2), 1)]
        """
        return self.concat(self.semijoin(keys).negate())

    def reduce(
        self, logic: Callable[[Any, list[tuple[Any, int]]], list[tuple[Any, int]]]
    ) -> Collection:
        """Per key of ``(key, val)`` records: ``logic(key, [(val, count), ...])`` (the key's
        values with nonzero counts, sorted) returns the ``[(out, count), ...]`` the output
        holds for the key, as ``(key, out)`` records.

        >>> import pytimely.differential as dd
        >>> total = lambda key, vals: [(sum(v * c for v, c in vals), 1)]
        >>> dd.example([("a", 1), ("a", 2), ("b", 5)], lambda c: c.reduce(total))
        [(('a', 3), 1), (('b', 5), 1)]
        """
        return self.arrange_by_key().reduce(logic).as_collection()

    def count(self) -> Collection:
        """``(record, count)`` for every record present.

        Over ``int`` times a running count per record (:func:`~.total.count_total`: no
        arrangement, no history read); inside loops a ``reduce`` of the arranged records.

        >>> import pytimely.differential as dd
        >>> dd.example(["a", "b", "a"], lambda c: c.count())
        [(('a', 2), 1), (('b', 1), 1)]
        """
        from .total import count_total, totally_ordered

        if totally_ordered(self):
            return count_total(self)
        return (
            self.arrange_by_self()
            .reduce(lambda k, vals: [(vals[0][1], 1)], name="Count")
            .as_collection()
        )

    def distinct(self) -> Collection:
        """Every record with a positive count, once.

        >>> import pytimely.differential as dd
        >>> dd.example(["a", "b", "a"], lambda c: c.distinct())
        [('a', 1), ('b', 1)]
        """
        from .reduce import positive

        return self.threshold(positive, name="Distinct")

    def threshold(self, f: Callable[[int], int], name: str = "Threshold") -> Collection:
        """Every record with its count replaced by ``f(count)`` (``f`` sees nonzero counts).

        Over ``int`` times a running count per record (:func:`~.total.threshold_total`);
        inside loops a ``reduce`` of the arranged records.

        >>> import pytimely.differential as dd
        >>> dd.example(["a", "b", "a"], lambda c: c.threshold(lambda n: n - 1))
        [('a', 1)]
        """
        from .total import threshold_total, totally_ordered

        if totally_ordered(self):
            return threshold_total(self, f, name=name)

        from .reduce import threshold_records

        # The records indexed for this operator alone, as they arrive (no trace).
        return threshold_records(self, f, name)

    def min(self) -> Collection:
        """Per key of ``(key, val)`` records, ``(key, least val)``.

        >>> import pytimely.differential as dd
        >>> dd.example([("a", 3), ("a", 1), ("b", 2)], lambda c: c.min())
        [(('a', 1), 1), (('b', 2), 1)]
        """
        return self.reduce(_least)

    def max(self) -> Collection:
        """Per key of ``(key, val)`` records, ``(key, greatest val)``.

        >>> import pytimely.differential as dd
        >>> dd.example([("a", 3), ("a", 1), ("b", 2)], lambda c: c.max())
        [(('a', 3), 1), (('b', 2), 1)]
        """
        return self.reduce(_greatest)

    def iterate(self, logic: Callable[[Collection], Collection]) -> Collection:
        """The fixed point of ``logic`` from this collection (see
        :func:`pytimely.differential.iterate`).

        >>> import pytimely.differential as dd
        >>> def halve(c):
        ...     return c.iterate(lambda x: x.map(lambda n: n // 2).concat(x).distinct())
        >>> dd.example([20], halve)
        [(0, 1), (1, 1), (2, 1), (5, 1), (10, 1), (20, 1)]
        """
        from .iterate import iterate

        return iterate(self, logic)

    def __repr__(self) -> str:
        return f"Collection({self.stream!r})"


def _least(key: Any, vals: list[tuple[Any, int]]) -> list[tuple[Any, int]]:
    present = [v for v, c in vals if c > 0]
    return [(min(present), 1)] if present else []


def _greatest(key: Any, vals: list[tuple[Any, int]]) -> list[tuple[Any, int]]:
    present = [v for v, c in vals if c > 0]
    return [(max(present), 1)] if present else []
