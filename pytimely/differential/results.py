"""Reading a changing collection: captured updates and the collection as of a time.

A collection is its updates; what a user asks is "what is in it at time ``t``": the sum of
the diffs of every update at a time ``<= t`` (in the partial order), per record, without the
records whose count is zero.  :func:`as_of` computes that from any updates;
:class:`Captured` records a collection's updates (and its frontier) as a dataflow runs, so
that tests and examples can compare the answer at every time the frontier has passed with a
computation from scratch.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..progress.operate import FrontierInterest
from .lattice import in_future, less_equal

if TYPE_CHECKING:
    from .collection import Collection

__all__ = ["Captured", "as_of", "consolidate_updates"]


def consolidate_updates(updates: Iterable[tuple[Any, Any, int]]) -> list[tuple[Any, Any, int]]:
    """``(data, time, diff)`` updates with equal ``(data, time)`` added up and zeros dropped,
    sorted.

    >>> consolidate_updates([("a", 0, 1), ("b", 1, 1), ("a", 0, 2), ("b", 1, -1)])
    [('a', 0, 3)]
    """
    acc: dict[tuple[Any, Any], int] = {}
    get = acc.get
    for d, t, r in updates:
        dt = (d, t)
        acc[dt] = get(dt, 0) + r
    return sorted((d, t, r) for (d, t), r in acc.items() if r)


def as_of(updates: Iterable[tuple[Any, Any, int]], time: Any) -> list[tuple[Any, int]]:
    """The collection at ``time``: ``(data, count)`` summed over updates at times ``<= time``,
    nonzero counts only, sorted.

    >>> as_of([("a", 0, 1), ("b", 1, 1), ("a", 2, -1)], 1)
    [('a', 1), ('b', 1)]
    >>> as_of([("a", 0, 1), ("b", 1, 1), ("a", 2, -1)], 2)
    [('b', 1)]
    """
    acc: dict[Any, int] = {}
    get = acc.get
    for d, t, r in updates:
        if less_equal(t, time):
            acc[d] = get(d, 0) + r
    return sorted((d, r) for d, r in acc.items() if r)


class Captured:
    """The updates of a collection, recorded on this worker as the dataflow runs.

    ``frontier`` is the collection's frontier as last seen: every time not in its future is
    complete, and :meth:`as_of` gives the final answer there.  A ``Captured`` holds only
    plain lists, so a worker may return it from :func:`pytimely.execute`.

    >>> import pytimely as pt
    >>> import pytimely.differential as dd
    >>> def build(scope):
    ...     session, xs = dd.new_input(scope)
    ...     captured = xs.capture()
    ...     session.insert("x"); session.advance_to(1); session.remove("x"); session.close()
    ...     return captured
    >>> cap = pt.example(build)
    >>> cap.updates(), cap.as_of(0), cap.as_of(1), cap.frontier
    ([('x', 0, 1), ('x', 1, -1)], [('x', 1)], [], [])
    """

    def __init__(self) -> None:
        self.raw: list[tuple[Any, Any, int]] = []
        self.frontier: list[Any] = []

    def updates(self) -> list[tuple[Any, Any, int]]:
        """Every captured update, consolidated and sorted."""
        return consolidate_updates(self.raw)

    def as_of(self, time: Any) -> list[tuple[Any, int]]:
        """The collection at ``time`` (see :func:`as_of`)."""
        return as_of(self.raw, time)

    def complete(self, time: Any) -> bool:
        """Whether the frontier has passed ``time`` (its answer there is final)."""
        return not in_future(self.frontier, time)

    def __repr__(self) -> str:
        return f"Captured(updates={len(self.raw)}, frontier={self.frontier!r})"


def _capture(collection: Collection, name: str = "CaptureUpdates") -> Captured:
    """A :class:`Captured` that records ``collection`` (see ``Collection.capture``)."""
    captured = Captured()
    raw = captured.raw

    def logic(inp: Any) -> None:
        for _t, batch in inp.drain_batches():
            raw.extend(batch)
        captured.frontier = inp.frontier.elements()

    from ..dataflow.pacts import Pipeline

    collection.stream.sink(Pipeline, name, logic, interest=FrontierInterest.ALWAYS)
    return captured
