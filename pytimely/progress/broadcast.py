"""Exchanging a scope's progress batches between workers (timely's ``progress/broadcast.rs``).

Every worker sends each batch of its progress updates for a scope to every worker, itself
included, over FIFO channels; every worker applies whatever it has received (the protocol of
Abadi et al., "Formal analysis of a distributed algorithm for tracking progress", FMOODS/FORTE
2013, as implemented by timely-dataflow's ``progress/broadcast.rs``).  A worker's own batches
take a short cut: they are appended to its inbox at once, in order.

A :class:`Progcaster` ("progress broadcaster", timely's name) owns both ends of its channel:
``send`` hands a batch to every other worker through one call of a ``send(targets, batch)``
callable (the communication layer's allocator, bound to this scope's channel, which can
serialize the batch once for all of them; with one worker there are no others), and
``receive`` is what the communication layer calls when a batch from another worker arrives for
this channel.  ``recv`` hands everything received so far to the scope.

Invariant: batches are never split or merged with another worker's, and each worker's batches
reach every inbox in the order they were sent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Progcaster"]


def _noop() -> None:
    pass


class Progcaster:
    """One scope's progress exchange on one worker.

    ``inbox`` (read-only for others) is truthy while batches wait for ``recv``.
    """

    __slots__ = ("inbox", "_send", "_others", "_on_receive")

    def __init__(
        self,
        send: Callable[[Sequence[int], Any], None] | None = None,
        others: Sequence[int] = (),
    ) -> None:
        if others and send is None:
            raise ValueError("a Progcaster with other workers needs a send(targets, batch)")
        self.inbox: list[list[tuple[Any, int]]] = []
        self._send = send
        self._others = list(others)
        self._on_receive: Callable[[], None] = _noop

    def on_receive(self, wake: Callable[[], None]) -> None:
        """Call ``wake()`` whenever a batch from another worker arrives (the scope's
        activation: received progress must be applied at its next opportunity)."""
        self._on_receive = wake

    def send(self, batch: list[tuple[Any, int]]) -> None:
        """Broadcast one batch (consolidated ``((location, time), delta)`` pairs)."""
        self.inbox.append(batch)
        if self._send is not None and self._others:
            self._send(self._others, batch)

    def receive(self, batch: list[tuple[Any, int]]) -> None:
        """A batch sent by another worker arrived (called by the communication layer)."""
        self.inbox.append(batch)
        self._on_receive()

    def recv(self) -> list[list[tuple[Any, int]]]:
        """Every batch received since the last call, in arrival order."""
        if not self.inbox:
            return []
        got, self.inbox = self.inbox, []
        return got
