"""Lattice operations on timestamps: join, meet, frontiers and ``advance_by``.

Differential dataflow needs more of its timestamps than timely does.  Timely only compares
times (``less_equal``); differential also combines them:

* the **join** (least upper bound) of two times is when both of two updates have happened --
  a join's output pairs an update at ``a`` with one at ``b`` at ``join(a, b)``, and a reduce
  must look again at every join of its input times, where a key's accumulation may change;
* the **meet** (greatest lower bound) summarises a frontier of several times;
* ``advance_by(t, frontier)`` is the compaction rule: the least time that every time of the
  frontier's future sees exactly as it sees ``t``, namely the meet over the frontier of
  ``join(t, f)``.  For ``int`` times and a frontier ``[f]`` it is ``max(t, f)``.  Replacing
  ``t`` by it changes no accumulation at any time in the frontier's future, which is why
  arrangements may rewrite old updates to it and then add up updates that became equal.

Built in: ``int`` (a total order: join is ``max``, meet ``min``) and
:class:`pytimely.Product` (coordinate-wise, nestable).  A user timestamp class takes part by
defining ``join(other)`` and ``meet(other)`` methods as well as ``less_equal``.

A *frontier* here is a list of mutually incomparable times (an antichain); the empty list is
the frontier of a stream that is finished.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..order import Product

__all__ = [
    "join",
    "meet",
    "less_equal",
    "advance_by",
    "minimal",
    "in_future",
    "meet_frontiers",
    "TimeMemo",
]


def _product(pair: tuple[Any, Any]) -> Product:
    """A :class:`Product` from a pair, without ``Product.__new__``'s own frame."""
    return tuple.__new__(Product, pair)


def less_equal(a: Any, b: Any) -> bool:
    """The partial order: ``a`` is at or before ``b``.

    >>> from pytimely import Product
    >>> less_equal(Product(0, 3), Product(1, 3)), less_equal(Product(0, 3), Product(1, 2))
    (True, False)
    """
    if type(a) is int:
        return a <= b
    if type(a) is Product:
        a0, a1 = a
        b0, b1 = b
        if type(a0) is int and type(a1) is int:  # the common loop time, inline
            return a0 <= b0 and a1 <= b1
        return less_equal(a0, b0) and less_equal(a1, b1)
    return a.less_equal(b)


def join(a: Any, b: Any) -> Any:
    """The least upper bound of two times.

    >>> from pytimely import Product
    >>> join(3, 5), join(Product(0, 4), Product(2, 1))
    (5, (2, 4))
    """
    if type(a) is int:
        return a if a >= b else b
    if type(a) is Product:
        a0, a1 = a
        b0, b1 = b
        if type(a0) is int and type(a1) is int:
            if a0 >= b0 and a1 >= b1:
                return a
            if b0 >= a0 and b1 >= a1:
                return b
            return _product((a0 if a0 >= b0 else b0, a1 if a1 >= b1 else b1))
        return Product(join(a0, b0), join(a1, b1))
    return a.join(b)


def meet(a: Any, b: Any) -> Any:
    """The greatest lower bound of two times.

    >>> from pytimely import Product
    >>> meet(3, 5), meet(Product(0, 4), Product(2, 1))
    (3, (0, 1))
    """
    if type(a) is int:
        return a if a <= b else b
    if type(a) is Product:
        a0, a1 = a
        b0, b1 = b
        if type(a0) is int and type(a1) is int:
            if a0 <= b0 and a1 <= b1:
                return a
            if b0 <= a0 and b1 <= a1:
                return b
            return _product((a0 if a0 <= b0 else b0, a1 if a1 <= b1 else b1))
        return Product(meet(a0, b0), meet(a1, b1))
    return a.meet(b)


def advance_by(t: Any, frontier: list[Any]) -> Any:
    """``t`` advanced by ``frontier``: the meet over its elements ``f`` of ``join(t, f)``.

    Every time ``s`` in the future of ``frontier`` has ``t <= s`` exactly when
    ``advance_by(t, frontier) <= s``.  An empty frontier leaves ``t`` as it is.

    >>> from pytimely import Product
    >>> advance_by(2, [5]), advance_by(7, [5])
    (5, 7)
    >>> advance_by(Product(0, 3), [Product(1, 0)])
    (1, 3)
    """
    if not frontier:
        return t
    if type(t) is int:
        f = frontier[0]
        return t if t >= f else f
    if len(frontier) == 1:
        return join(t, frontier[0])
    if type(t) is Product and type(t[0]) is int and type(t[1]) is int:
        # The common loop time, inline: coordinate-wise min over the frontier of the max.
        t0, t1 = t
        r0 = r1 = None
        for f0, f1 in frontier:
            j0 = t0 if t0 >= f0 else f0
            j1 = t1 if t1 >= f1 else f1
            if r0 is None:
                r0, r1 = j0, j1
            else:
                if j0 < r0:
                    r0 = j0
                if j1 < r1:
                    r1 = j1
        return t if r0 == t0 and r1 == t1 else _product((r0, r1))
    it = iter(frontier)
    result = join(t, next(it))
    for f in it:
        result = meet(result, join(t, f))
    return result


def minimal(times: Iterable[Any]) -> list[Any]:
    """The minimal elements of ``times``: the frontier they form, sorted.

    >>> from pytimely import Product
    >>> minimal([4, 2, 9])
    [2]
    >>> minimal([Product(1, 0), Product(0, 2), Product(1, 3), Product(0, 2)])
    [(0, 2), (1, 0)]
    """
    ordered = sorted(set(times))
    if not ordered:
        return []
    if type(ordered[0]) is int:
        return ordered[:1]
    out: list[Any] = []
    # Sorted by a total order extending the partial order: a time can only be preceded (in
    # the partial order) by times before it in the list.
    for t in ordered:
        if not any(less_equal(m, t) for m in out):
            out.append(t)
    return out


def in_future(frontier: list[Any], t: Any) -> bool:
    """Whether ``t`` is at or after some element of ``frontier`` (may still be seen).

    >>> in_future([3], 5), in_future([3], 2), in_future([], 0)
    (True, False, False)
    """
    for f in frontier:
        if less_equal(f, t):
            return True
    return False


def meet_frontiers(frontiers: Iterable[list[Any]]) -> list[Any]:
    """The frontier at or before each of ``frontiers``: the minimal elements of their union.

    >>> meet_frontiers([[4], [2], [7]])
    [2]
    """
    return minimal(t for frontier in frontiers for t in frontier)


class TimeMemo:
    """``f`` of a time, computed once per distinct time (``known`` holds the answers): a merge
    or an operator's invocation handles many updates that share few times, and each lattice
    operation on a ``Product`` is a Python call.

    >>> calls = []
    >>> twice = TimeMemo(lambda t: calls.append(t) or 2 * t)
    >>> twice(3), twice(3), calls
    (6, 6, [3])
    """

    __slots__ = ("f", "known")

    def __init__(self, f: Callable[[Any], Any]) -> None:
        self.f = f
        self.known: dict[Any, Any] = {}

    def __call__(self, t: Any) -> Any:
        """``f(t)``, computed at the first call for ``t``."""
        known = self.known
        if t in known:
            return known[t]
        r = known[t] = self.f(t)
        return r
