"""Naiad-style notifications, as a library on top of timestamp tokens.

``notify_at(cap)`` asks to be told when the input frontier(s) no longer allow ``cap.time``;
notifications are delivered in time order, at most one per time, once every input frontier
has passed it.  The notificator holds the capability meanwhile, so it can be used to send at the
notified time.  This is exactly the "hold capabilities in a map keyed by time and compare with
the input frontiers" idiom, packaged; operators built this way are woken on every frontier
change (``ALWAYS``), which is the cost the paper measures.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ...progress.operate import FrontierInterest
from ..capability import Capability
from ..stream import Stream
from .generic import binary_frontier, unary_frontier

__all__ = ["Notificator", "unary_notify", "binary_notify"]


class Notificator:
    """Pending notifications: capabilities by time, released as the frontiers pass them."""

    __slots__ = ("_frontiers", "_pending", "_heap")

    def __init__(self, frontiers: list[Any]) -> None:
        self._frontiers = frontiers
        self._pending: dict[Any, Capability] = {}
        self._heap: list[Any] = []

    def notify_at(self, cap: Capability) -> None:
        """Request a notification at ``cap.time`` (the notificator takes ``cap``)."""
        t = cap.time
        held = self._pending.get(t)
        if held is None:
            self._pending[t] = cap
            heapq.heappush(self._heap, t)
        else:
            cap.drop()

    def _ready(self, t: Any) -> bool:
        for f in self._frontiers:
            if f.less_equal(t):
                return False
        return True

    def next(self) -> Capability | None:
        """The earliest deliverable notification (its capability, now yours), or ``None``."""
        heap = self._heap
        while heap:
            t = heap[0]
            if not self._ready(t):
                # The smallest pending time may be blocked while a later, incomparable one is
                # ready (partial orders): look at the rest in order.
                for cand in sorted(heap):
                    if self._ready(cand):
                        heap.remove(cand)
                        heapq.heapify(heap)
                        return self._pending.pop(cand)
                return None
            heapq.heappop(heap)
            return self._pending.pop(t)
        return None

    def __iter__(self) -> Iterator[Capability]:
        while True:
            cap = self.next()
            if cap is None:
                return
            yield cap

    def pending(self) -> list[Any]:
        return sorted(self._pending)

    def __len__(self) -> int:
        return len(self._pending)


def unary_notify(
    stream: Stream,
    pact: Any,
    name: str,
    init: Iterable[Any],
    logic: Callable[[Any, Any, Notificator], Any],
) -> Stream:
    """``logic(input, output, notificator)``; ``init``: times to be notified at initially.

    Each delivered notification is a capability: use it to send, then drop it (or
    ``notify_at`` it again at a later time).
    """

    def ctor(cap: Capability, info: Any) -> Any:
        state: dict[str, Any] = {"n": None}

        def run(inp: Any, out: Any) -> None:
            n = state["n"]
            if n is None:
                n = state["n"] = Notificator([inp.frontier])
                for t in init:
                    n.notify_at(cap.delayed(t))
                cap.drop()
            logic(inp, out, n)

        return run

    return unary_frontier(stream, pact, name, ctor, interest=FrontierInterest.ALWAYS)


def binary_notify(
    stream: Stream,
    other: Stream,
    pact1: Any,
    pact2: Any,
    name: str,
    init: Iterable[Any],
    logic: Callable[[Any, Any, Any, Notificator], Any],
) -> Stream:
    """``logic(input1, input2, output, notificator)``; notified once both frontiers pass."""

    def ctor(cap: Capability, info: Any) -> Any:
        state: dict[str, Any] = {"n": None}

        def run(in1: Any, in2: Any, out: Any) -> None:
            n = state["n"]
            if n is None:
                n = state["n"] = Notificator([in1.frontier, in2.frontier])
                for t in init:
                    n.notify_at(cap.delayed(t))
                cap.drop()
            logic(in1, in2, out, n)

        return run

    return binary_frontier(stream, other, pact1, pact2, name, ctor, interest=FrontierInterest.ALWAYS)
