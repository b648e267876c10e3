"""Exchanging a scope's progress batches between workers.

Every worker sends each batch of its progress updates for a scope to every worker, itself
included, over FIFO channels; every worker applies whatever it has received (seed 000).  A
worker's own batches take a short cut: they are appended to its inbox at once, in order.  The
transport for the others is a ``send(target, batch)`` callable (the communication layer's
allocator, bound to this scope's channel); with one worker there are no others.

Invariant: batches are never split or merged with another worker's, and each worker's batches
reach every inbox in the order they were sent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Progcaster"]


class Progcaster:
    """One scope's progress exchange on one worker."""

    __slots__ = ("inbox", "_send", "_others")

    def __init__(
        self,
        send: Callable[[int, Any], None] | None = None,
        others: Sequence[int] = (),
    ) -> None:
        self.inbox: list[list[tuple[Any, int]]] = []
        self._send = send
        self._others = list(others)

    def send(self, batch: list[tuple[Any, int]]) -> None:
        """Broadcast one batch (consolidated ``((location, time), delta)`` pairs)."""
        self.inbox.append(batch)
        send = self._send
        for w in self._others:
            send(w, batch)

    def recv(self) -> list[list[tuple[Any, int]]]:
        """Every batch received since the last call, in arrival order."""
        if not self.inbox:
            return []
        got, self.inbox = self.inbox, []
        return got
