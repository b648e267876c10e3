"""``ChangeBatch``: a consolidating multiset of ``(key, delta)`` changes.

Progress tracking talks in counts: "+1 capability at (location, t)", "-3 messages at (location,
t)".  Many of these cancel (a capability downgraded from ``t`` to ``t+1`` and back, a message
produced and consumed in the same step).  A ``ChangeBatch`` accumulates changes and exposes only
the *net* non-zero ones, so that everything downstream pays per net change rather than per
action.

Implementation choice: a ``dict`` from key to accumulated delta, deleting keys whose delta
reaches zero.  Rust's crate appends to a vector and sorts to compact, amortised; in Python the
hash table is the faster structure (one C-level lookup per update, no sort) and it is always
consolidated, so there is no separate compaction step.  Iteration order is insertion order of
the surviving keys, which keeps runs deterministic.

Invariant: no stored delta is zero.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

__all__ = ["ChangeBatch"]


class ChangeBatch:
    """A consolidated collection of ``(key, delta)`` pairs with non-zero deltas."""

    __slots__ = ("_counts",)

    def __init__(self, changes: Iterable[tuple[Any, int]] | None = None) -> None:
        self._counts: dict[Any, int] = {}
        if changes is not None:
            self.extend(changes)

    def update(self, key: Any, delta: int) -> None:
        """Add ``delta`` to ``key``'s accumulated count (dropping it if the sum is zero)."""
        if delta:
            counts = self._counts
            total = counts.get(key, 0) + delta
            if total:
                counts[key] = total
            else:
                del counts[key]

    def extend(self, changes: Iterable[tuple[Any, int]]) -> None:
        """Apply many updates."""
        counts = self._counts
        for key, delta in changes:
            if delta:
                total = counts.get(key, 0) + delta
                if total:
                    counts[key] = total
                else:
                    del counts[key]

    def drain(self) -> list[tuple[Any, int]]:
        """Return the consolidated changes and leave the batch empty."""
        counts = self._counts
        if not counts:
            return []
        self._counts = {}
        return list(counts.items())

    def drain_located_into(self, into: ChangeBatch, locations: Sequence[tuple[Any, int]]) -> None:
        """Move every ``(t, delta)`` into ``into`` as ``((loc, t), delta * weight)`` for each
        ``(loc, weight)`` of ``locations``, and leave this batch empty.

        The scope's per-invocation path (a child's counts become located pointstamp counts):
        one call per batch, whether or not it holds anything, so an empty batch costs no
        second call to ask.
        """
        counts = self._counts
        if not counts:
            return
        self._counts = {}
        target = into._counts
        get = target.get
        for t, delta in counts.items():
            for loc, weight in locations:
                key = (loc, t)
                total = get(key, 0) + delta * weight
                if total:
                    target[key] = total
                else:
                    del target[key]

    def drain_at_into(self, into: ChangeBatch, loc: Any, weight: int) -> None:
        """``drain_located_into`` with the single location ``loc``: ``(loc, t)`` gets
        ``delta * weight``."""
        counts = self._counts
        if not counts:
            return
        self._counts = {}
        target = into._counts
        get = target.get
        for t, delta in counts.items():
            key = (loc, t)
            total = get(key, 0) + delta * weight
            if total:
                target[key] = total
            else:
                del target[key]

    def drain_into(self, other: ChangeBatch) -> None:
        """Move every change into ``other``."""
        if not self._counts:
            return
        if not other._counts:
            other._counts, self._counts = self._counts, other._counts
        else:
            other.extend(self._counts.items())
            self._counts = {}

    def count(self, key: Any) -> int:
        """The accumulated delta for ``key`` (0 if absent)."""
        return self._counts.get(key, 0)

    def is_empty(self) -> bool:
        """No net change is left (every key's changes cancelled, or none was made)."""
        return not self._counts

    def clear(self) -> None:
        """Drop every accumulated change."""
        self._counts = {}

    def __iter__(self) -> Iterator[tuple[Any, int]]:
        return iter(list(self._counts.items()))

    def __len__(self) -> int:
        return len(self._counts)

    def __bool__(self) -> bool:
        return bool(self._counts)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ChangeBatch):
            return self._counts == other._counts
        return NotImplemented

    def __repr__(self) -> str:
        return f"ChangeBatch({list(self._counts.items())!r})"
