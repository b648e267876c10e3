"""``ChangeBatch``: a consolidating multiset of ``(key, delta)`` changes.

Progress tracking talks in counts: "+1 capability at (location, t)", "-3 messages at (location,
t)".  Many of these cancel (a capability downgraded from ``t`` to ``t+1`` and back, a message
produced and consumed in the same step).  A ``ChangeBatch`` accumulates changes and exposes only
the *net* non-zero ones, so that everything downstream pays per net change rather than per
action.

Implementation choice: the batch *is* a ``dict`` from key to accumulated delta (a subclass),
deleting keys whose delta reaches zero.  Rust's crate appends to a vector and sorts to compact,
amortised; in Python the hash table is the faster structure (one C-level lookup per update, no
sort) and it is always consolidated, so there is no separate compaction step.  Being the dict
itself (rather than holding one) makes the questions asked of every batch after every operator
invocation -- ``bool(batch)``, ``len(batch)`` -- C calls that run no Python frame.  Iteration
yields ``(key, delta)`` pairs (not keys, as a plain dict would), in insertion order of the
surviving keys, which keeps runs deterministic.  Only the methods below are meant to change
it; ``dict``'s own mutators would bypass the invariant.

Invariant: no stored delta is zero.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

__all__ = ["ChangeBatch"]


class ChangeBatch(dict):  # type: ignore[type-arg]
    """A consolidated collection of ``(key, delta)`` pairs with non-zero deltas."""

    __slots__ = ()

    def __init__(self, changes: Iterable[tuple[Any, int]] | None = None) -> None:
        super().__init__()
        if changes is not None:
            self.extend(changes)

    def update(self, key: Any, delta: int) -> None:  # type: ignore[override]
        """Add ``delta`` to ``key``'s accumulated count (dropping it if the sum is zero)."""
        if delta:
            total = self.get(key, 0) + delta
            if total:
                self[key] = total
            else:
                del self[key]

    def extend(self, changes: Iterable[tuple[Any, int]]) -> None:
        """Apply many updates."""
        get = self.get
        for key, delta in changes:
            if delta:
                total = get(key, 0) + delta
                if total:
                    self[key] = total
                else:
                    del self[key]

    def drain(self) -> list[tuple[Any, int]]:
        """Return the consolidated changes and leave the batch empty."""
        if not self:
            return []
        changes = list(self.items())
        self.clear()
        return changes

    def drain_located_into(self, into: ChangeBatch, locations: Sequence[tuple[Any, int]]) -> None:
        """Move every ``(t, delta)`` into ``into`` as ``((loc, t), delta * weight)`` for each
        ``(loc, weight)`` of ``locations``, and leave this batch empty.

        The scope's per-invocation path (a child's counts become located pointstamp counts).
        """
        get = into.get
        for t, delta in self.items():
            for loc, weight in locations:
                key = (loc, t)
                total = get(key, 0) + delta * weight
                if total:
                    into[key] = total
                else:
                    del into[key]
        self.clear()

    def drain_at_into(self, into: ChangeBatch, loc: Any, weight: int) -> None:
        """``drain_located_into`` with the single location ``loc``: ``(loc, t)`` gets
        ``delta * weight``."""
        get = into.get
        for t, delta in self.items():
            key = (loc, t)
            total = get(key, 0) + delta * weight
            if total:
                into[key] = total
            else:
                del into[key]
        self.clear()

    def drain_into(self, other: ChangeBatch) -> None:
        """Move every change into ``other``."""
        if self:
            other.extend(self.items())
            self.clear()

    def count(self, key: Any) -> int:
        """The accumulated delta for ``key`` (0 if absent)."""
        return self.get(key, 0)

    def is_empty(self) -> bool:
        """No net change is left (every key's changes cancelled, or none was made)."""
        return not self

    def __iter__(self) -> Iterator[tuple[Any, int]]:  # type: ignore[override]
        """The ``(key, delta)`` pairs, from a copy (the batch may change meanwhile)."""
        return iter(list(self.items()))

    def __repr__(self) -> str:
        return f"ChangeBatch({list(self.items())!r})"
