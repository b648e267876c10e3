"""Antichains and frontiers.

A *frontier* is the set of minimal timestamps that may still appear somewhere: every time that
can still arrive is ``>=`` some element of it.  With partially ordered times a frontier can have
several incomparable minima, so it is an *antichain* (no element ``<=`` another).

* :class:`Antichain` is a plain antichain: insert keeps only minimal elements.
* :class:`MutableAntichain` is a multiset of times with counts (which may be transiently
  negative) whose *frontier* is the antichain of minimal times with **positive** count.  Its
  ``update_iter`` takes count changes and returns the frontier changes they cause, as
  ``(time, +1)`` for an element that joined the frontier and ``(time, -1)`` for one that left.
  Progress tracking is built from chains of these: counts in, frontier changes out, and the
  frontier changes of one become the count changes of the next.

Cost model: an update that cannot change the frontier (a count added at a time strictly
beyond the frontier, or removed at a time not in the frontier) is O(1); only updates that may
matter trigger a rebuild, which scans the positive counts once.  Integer-only antichains have
at most one element and take a faster path.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from typing import Any

from ..order import less_equal

__all__ = ["Antichain", "MutableAntichain", "frontier_changes"]


def frontier_changes(old: Iterable[Any], new: Iterable[Any]) -> list[tuple[Any, int]]:
    """The ``(t, -1)`` / ``(t, +1)`` changes that turn frontier ``old`` into ``new``."""
    old, new = list(old), list(new)
    changes = [(t, -1) for t in old if t not in new]
    changes.extend((t, 1) for t in new if t not in old)
    return changes


def _sorted(elements: list[Any]) -> list[Any]:
    """``elements`` sorted by ``<`` if the type has one, else in insertion order.

    Timestamps always have a total order, but an ``Antichain`` also holds path summaries, and
    the summary protocol (``results_in``, ``followed_by``, ``less_equal``) promises no ``<``.
    """
    try:
        return sorted(elements)
    except TypeError:
        return list(elements)


class _Minima:
    """What :class:`Antichain` and :class:`MutableAntichain` share: ``_elements``, mutually
    incomparable times (a list in an Antichain, a tuple replaced on every change in a
    MutableAntichain), and the comparisons every frontier check makes.

    Defined once for both classes and inherited, so a check costs no extra call.
    """

    __slots__ = ("_elements",)

    _elements: list[Any] | tuple[Any, ...]

    def less_equal(self, t: Any) -> bool:
        """Some element is ``<= t``: ``t`` may still appear (it is at or beyond the frontier)."""
        if type(t) is int:
            for e in self._elements:
                if e <= t:
                    return True
            return False
        for e in self._elements:
            if less_equal(e, t):
                return True
        return False

    def less_than(self, t: Any) -> bool:
        """Some element is strictly ``< t``."""
        if type(t) is int:
            for e in self._elements:
                if e < t:
                    return True
            return False
        for e in self._elements:
            if less_equal(e, t) and e != t:
                return True
        return False

    def is_empty(self) -> bool:
        """No elements (for a frontier: nothing can appear any more)."""
        return not self._elements


class Antichain(_Minima):
    """A set of mutually incomparable timestamps (the minimal elements of what was inserted)."""

    __slots__ = ()

    def __init__(self, elements: Iterable[Any] = ()) -> None:
        self._elements: list[Any] = []
        for e in elements:
            self.insert(e)

    @classmethod
    def from_elem(cls, element: Any) -> Antichain:
        """The antichain holding the single element ``element``."""
        a = cls()
        a._elements.append(element)
        return a

    def insert(self, t: Any) -> bool:
        """Insert ``t`` unless some element is ``<=`` it; evict elements ``>=`` it.

        Returns whether ``t`` was added.
        """
        elements = self._elements
        if type(t) is int:
            for e in elements:
                if e <= t:
                    return False
            self._elements = [e for e in elements if not t <= e]
            self._elements.append(t)
            return True
        for e in elements:
            if less_equal(e, t):
                return False
        self._elements = [e for e in elements if not less_equal(t, e)]
        self._elements.append(t)
        return True

    def dominates(self, other: Antichain) -> bool:
        """Every element of ``other`` is ``>=`` some element of ``self``."""
        return all(self.less_equal(t) for t in other)

    def elements(self) -> list[Any]:
        """The elements, sorted by the total order (insertion order if there is none)."""
        return _sorted(self._elements)

    def clear(self) -> None:
        """Remove every element."""
        self._elements = []

    def __iter__(self) -> Iterator[Any]:
        return iter(_sorted(self._elements))

    def __len__(self) -> int:
        return len(self._elements)

    def __bool__(self) -> bool:
        return bool(self._elements)

    def __contains__(self, t: Any) -> bool:
        return t in self._elements

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Antichain):
            return set(self._elements) == set(other._elements)
        if isinstance(other, (list, tuple, set, frozenset)):
            return set(self._elements) == set(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(frozenset(self._elements))

    def __repr__(self) -> str:
        return f"Antichain({_sorted(self._elements)!r})"


class MutableAntichain(_Minima):
    """Counts per timestamp, and the antichain of minimal times with positive count.

    Invariant: ``frontier()`` equals the minimal elements of ``{t : count_for(t) > 0}``.

    Memory: most frontiers of a large dataflow hold a single time for their whole life (an
    operator's input and output frontiers, its initial capability), so the counts are held in
    two slots, ``_time`` and ``_count`` (``_count == 0``: no time at all), until a second
    distinct time arrives; only then is a dict made, and it is dropped again once it empties.
    The frontier is a tuple (shared ``()`` when empty).  ``_counts`` is that dict or ``None``.

    >>> m = MutableAntichain()
    >>> m.update_iter([(1, +1)])
    [(1, 1)]
    >>> m.update_iter([(1, -1), (2, +7)])
    [(1, -1), (2, 1)]
    >>> list(m.frontier())
    [2]
    """

    __slots__ = ("_counts", "_heap", "_time", "_count")  # and _elements: the frontier

    def __init__(self) -> None:
        self._counts: dict[Any, int] | None = None
        self._time: Any = None
        self._count = 0
        self._elements: tuple[Any, ...] = ()  # type: ignore[assignment]
        # Integer path only: a min-heap holding (at least) every time with a positive count,
        # plus stale entries removed lazily; ``None`` until first needed (or after the general
        # path changed counts), then rebuilt once.  Makes retracting the frontier element
        # O(log n) instead of a scan of all counts (n pending notifications: O(n log n), not
        # O(n^2)).
        self._heap: list[int] | None = None

    @classmethod
    def from_elem(cls, t: Any) -> MutableAntichain:
        """A frontier at ``t`` alone: ``t`` with count 1."""
        m = cls()
        m._time = t
        m._count = 1
        m._elements = (t,)
        return m

    def _counts_dict(self) -> dict[Any, int]:
        """The counts as a dict, made from the single time if there is none yet (the caller
        is about to hold more than one time, or to change counts off the single-time path)."""
        counts = self._counts
        if counts is None:
            counts = self._counts = {self._time: self._count} if self._count else {}
            self._time = None
            self._count = 0
            self._heap = None
        return counts

    def _forget_counts(self) -> None:
        """The dict of counts emptied: back to the single-time form, holding nothing (and no
        heap, whose entries would not cover a time added to the single-time form)."""
        self._counts = None
        self._heap = None

    def update_one(self, t: Any, d: int) -> tuple[tuple[Any, int], ...] | list[tuple[Any, int]]:
        """Apply one count change; return the frontier changes it causes.

        Integer times take a path that never scans the counts except when the frontier's only
        element is retracted.
        """
        counts = self._counts
        if counts is None:
            before = self._count
            if not before or t == self._time:
                # At most the one time ``_time``, and ``t`` is that time (or there is none):
                # the frontier is ``(t,)`` exactly when its count is positive.  (Inline: this
                # is most updates of most frontiers.)
                c = before + d
                self._time = t
                self._count = c
                if before > 0:
                    if c > 0:
                        return ()
                    self._elements = ()
                    return ((t, -1),)
                if c > 0:
                    self._elements = (t,)
                    return ((t, 1),)
                return ()
            counts = self._counts_dict()
        c = counts.get(t, 0) + d
        if c:
            counts[t] = c
        elif t in counts:
            del counts[t]
            if not counts:
                self._forget_counts()
        else:
            return ()
        frontier = self._elements
        if type(t) is int:
            if d > 0:
                heap = self._heap
                if heap is not None and c > 0 and c - d <= 0:
                    heapq.heappush(heap, t)  # newly positive
                    if len(heap) > 2 * len(counts) + 16:
                        self._heap = None  # mostly stale entries: rebuild when next needed
                if frontier:
                    f = frontier[0]
                    if f <= t or c <= 0:
                        return ()
                    self._elements = (t,)
                    return ((f, -1), (t, 1))
                if c > 0:
                    self._elements = (t,)
                    return ((t, 1),)
                return ()
            if c > 0 or not frontier or frontier[0] != t:
                return ()
            if not counts:
                # The only time left: nothing can replace it, and a heap of stale entries
                # is not worth keeping (the common case of a frontier that just advances).
                self._heap = None
                self._elements = ()
                return ((t, -1),)
            heap = self._heap
            if heap is None:
                heap = self._heap = [k for k, v in counts.items() if v > 0]
                heapq.heapify(heap)
            while heap and counts.get(heap[0], 0) <= 0:
                heapq.heappop(heap)
            m = heap[0] if heap else None
            if m is None:
                self._elements = ()
                return ((t, -1),)
            self._elements = (m,)
            return ((t, -1), (m, 1))
        self._heap = None
        if d > 0:
            for f in frontier:
                if less_equal(f, t):
                    return ()
        elif t not in frontier:
            return ()
        return self._rebuild()

    def update_iter(self, updates: Iterable[tuple[Any, int]]) -> list[tuple[Any, int]]:
        """Apply count changes; return the resulting frontier changes (each ±1)."""
        frontier = self._elements
        if type(updates) is list and updates and type(updates[0][0]) is int:
            # Integer times: apply one by one on the scan-free path.  The concatenated
            # changes are a valid (if not minimal) description of the frontier's movement.
            if len(updates) == 1:
                t, d = updates[0]
                return list(self.update_one(t, d)) if d else []
            out: list[tuple[Any, int]] = []
            one = self.update_one
            for t, d in updates:
                if d:
                    out.extend(one(t, d))
            return out
        counts = self._counts_dict()
        rebuild = False
        self._heap = None  # counts change off the integer path: rebuild the heap when needed
        for t, d in updates:
            if not d:
                continue
            c = counts.get(t, 0) + d
            if c:
                counts[t] = c
            else:
                del counts[t]
            if rebuild:
                continue
            if d > 0:
                # Matters unless some frontier element is <= t.
                if type(t) is int:
                    if not frontier or frontier[0] > t:
                        rebuild = True
                else:
                    for f in frontier:
                        if less_equal(f, t):
                            break
                    else:
                        rebuild = True
            else:
                # Matters only if t is itself in the frontier.
                if t in frontier:
                    rebuild = True
        if not counts:
            self._forget_counts()
        if not rebuild:
            return []
        return self._rebuild()

    def _rebuild(self) -> list[tuple[Any, int]]:
        old = self._elements
        counts = self._counts
        if counts is None:
            positive = [self._time] if self._count > 0 else []
        else:
            positive = [t for t, c in counts.items() if c > 0]
        if not positive:
            new: tuple[Any, ...] = ()
        elif type(positive[0]) is int:
            new = (min(positive),)
        else:
            positive.sort()
            minimal: list[Any] = []
            for t in positive:
                # Sorted by a total order extending the partial order: t can only be
                # dominated by elements already kept.
                for e in minimal:
                    if less_equal(e, t):
                        break
                else:
                    minimal.append(t)
            new = tuple(minimal)
        self._elements = new
        if old == new:
            return []
        return frontier_changes(old, new)

    def frontier(self) -> Antichain:
        """A copy of the current frontier: the minimal times whose count is positive."""
        a = Antichain()
        a._elements = list(self._elements)
        return a

    def frontier_list(self) -> tuple[Any, ...]:
        """The frontier elements: the live tuple, replaced (never mutated) on every change."""
        return self._elements

    def count_for(self, t: Any) -> int:
        """The accumulated count of ``t`` itself (0 if absent), frontier or not."""
        counts = self._counts
        if counts is None:
            return self._count if self._count and self._time == t else 0
        return counts.get(t, 0)

    def counts(self) -> dict[Any, int]:
        """A copy of the non-zero counts."""
        counts = self._counts
        if counts is None:
            return {self._time: self._count} if self._count else {}
        return dict(counts)

    def __iter__(self) -> Iterator[Any]:
        return iter(sorted(self._elements))

    def __repr__(self) -> str:
        return f"MutableAntichain(frontier={sorted(self._elements)!r})"
