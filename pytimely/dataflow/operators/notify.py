"""Naiad-style notifications, as a library on top of timestamp tokens.

``notify_at(cap)`` asks to be told when the input frontier(s) no longer allow ``cap.time``;
notifications are delivered in time order, at most one per time, once every input frontier
has passed it (no frontier element ``<=`` the time).  The notificator holds the capability
meanwhile, so it can be used to send at the notified time.  This is exactly the "hold
capabilities in a map keyed by time and compare with the input frontiers" idiom, packaged;
operators built this way are woken on every frontier change (``ALWAYS``), which is the cost the
paper measures (Lattuada, McSherry, Liagouris, "Timestamp tokens", SoCC 2022, section 7):
every distinct requested time is a capability the *system* tracks, and every delivery is a
round trip between operator and system.

Semantics, precisely (these are what ``tests/test_idioms.py`` checks):

* A time is delivered only when no input frontier ``less_equal`` s it.
* Pending times are delivered in the total order of the time type (for partially ordered
  times: a linear extension of the partial order; a blocked minimum does not hold back a
  later, incomparable time that is ready).
* A time requested several times before delivery is delivered once (the extra capabilities
  are dropped on the spot).
* Requests made while iterating (``for cap in notificator``) are considered by the same
  iteration: if they are already complete, they are delivered in it.
* A delivered capability is the caller's: send with it, then ``drop()`` it, or hand it back
  with ``notify_at`` (for a later time, use ``cap.delayed(t)`` and drop ``cap``).

``Notificator(frontiers, per_call=n)`` delivers at most ``n`` notifications per operator
invocation and re-activates the operator for the rest: with ``n = 1`` this reproduces Naiad's
"one notification per callback" scheduling (the same paper, section 4), at the price of one
scheduling round per time.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ...progress.operate import FrontierInterest
from ..capability import Capability
from .generic import binary_frontier, unary_frontier

if TYPE_CHECKING:
    from ..operator import OperatorInfo
    from ..pacts import Pact
    from ..ports import InputPort, OutputPort
    from ..stream import Stream

__all__ = ["Notificator", "binary_notify", "unary_notify"]


class Notificator:
    """Pending notifications: capabilities by time, released as the frontiers pass them.

    ``frontiers``: the operator's input frontiers (live views, e.g. ``[inp.frontier]``).
    ``per_call``: deliver at most this many notifications per operator invocation (``None``:
    all that are ready); ``activator`` (from ``info.activator()``) re-schedules the operator
    when some ready notifications were held back.
    """

    __slots__ = (
        "_activator",
        "_delivered",
        "_frontiers",
        "_heap",
        "_pending",
        "_per_call",
        "_total",
        "delivered",
        "requested",
    )

    def __init__(
        self, frontiers: list[Any], per_call: int | None = None, activator: Any = None
    ) -> None:
        if per_call is not None and per_call < 1:
            raise ValueError("Notificator: per_call must be None or >= 1")
        if per_call is not None and activator is None:
            raise ValueError("Notificator: per_call needs an activator (info.activator())")
        self._frontiers = frontiers
        self._pending: dict[Any, Capability] = {}
        self._heap: list[Any] = []
        self._total: bool | None = None  # times are ints (totally ordered): a fast path
        self._per_call = per_call
        self._activator = activator
        self._delivered = 0  # in the current invocation (see ``new_call``)
        self.requested = 0  # statistics: notify_at calls / deliveries
        self.delivered = 0

    def notify_at(self, cap: Capability) -> None:
        """Request a notification at ``cap.time`` (the notificator takes ``cap``)."""
        t = cap.time
        self.requested += 1
        if t in self._pending:
            cap.drop()
            return
        if self._total is None:
            self._total = type(t) is int
        self._pending[t] = cap
        heapq.heappush(self._heap, t)

    def _ready(self, t: Any) -> bool:
        for f in self._frontiers:
            if f.less_equal(t):
                return False
        return True

    def new_call(self) -> None:
        """Start of an operator invocation (resets the ``per_call`` budget)."""
        self._delivered = 0

    def next(self) -> Capability | None:
        """The earliest deliverable notification (its capability, now yours), or ``None``."""
        heap = self._heap
        if not heap:
            return None
        per_call = self._per_call
        if per_call is not None and self._delivered >= per_call:
            if self._ready(heap[0]) or not self._total:
                self._activator.activate()  # more may be ready: come back for them
            return None
        t = heap[0]
        if self._ready(t):
            heapq.heappop(heap)
        elif self._total:
            return None  # total order: nothing after a blocked minimum can be ready
        else:
            # The smallest pending time may be blocked while a later, incomparable one is
            # ready (partial orders): look at the rest in order.
            for cand in sorted(heap):
                if self._ready(cand):
                    heap.remove(cand)
                    heapq.heapify(heap)
                    t = cand
                    break
            else:
                return None
        self._delivered += 1
        self.delivered += 1
        return self._pending.pop(t)

    def __iter__(self) -> Iterator[Capability]:
        while True:
            cap = self.next()
            if cap is None:
                return
            yield cap

    def frontier(self, i: int = 0) -> Any:
        """Input ``i``'s frontier."""
        return self._frontiers[i]

    def pending(self) -> list[Any]:
        """The requested, not yet delivered times, in order."""
        return sorted(self._pending)

    def __len__(self) -> int:
        return len(self._pending)

    def __repr__(self) -> str:
        return f"Notificator(pending={self.pending()!r})"


def unary_notify(
    stream: Stream,
    pact: Pact,
    name: str,
    init: Iterable[Any],
    logic: Callable[[Any, Any, Notificator], Any],
    per_call: int | None = None,
) -> Stream:
    """``logic(input, output, notificator)``; ``init``: times to be notified at initially.

    Each delivered notification is a capability: use it to send, then drop it (or
    ``notify_at`` it again at a later time).  ``per_call``: see :class:`Notificator`.

    >>> import pytimely as pt
    >>> def logic(inp, out, notificator):
    ...     for ref, batch in inp:
    ...         notificator.notify_at(ref.retain())
    ...     for cap in notificator:  # times the input can no longer produce
    ...         out.give(cap, f"done {cap.time}")
    ...         cap.drop()
    >>> def build(s):
    ...     return s.to_stream("ab").unary_notify(pt.Pipeline, "Done", [], logic).capture()
    >>> pt.example(build).extract()
    [(0, ['done 0'])]
    """

    def ctor(cap: Capability, info: OperatorInfo) -> Callable[..., None]:
        state: dict[str, Any] = {"n": None}
        activator = info.activator()

        def run(inp: InputPort, out: OutputPort) -> None:
            n = state["n"]
            if n is None:
                n = state["n"] = Notificator([inp.frontier], per_call, activator)
                for t in init:
                    n.notify_at(cap.delayed(t))
                cap.drop()
            n.new_call()
            logic(inp, out, n)

        return run

    return unary_frontier(stream, pact, name, ctor, interest=FrontierInterest.ALWAYS)


def binary_notify(
    stream: Stream,
    other: Stream,
    pact1: Pact,
    pact2: Pact,
    name: str,
    init: Iterable[Any],
    logic: Callable[[Any, Any, Any, Notificator], Any],
    per_call: int | None = None,
) -> Stream:
    """``logic(input1, input2, output, notificator)``; notified once both frontiers pass.

    >>> import pytimely as pt
    >>> def logic(left, right, out, notificator):
    ...     for ref, batch in [*left, *right]:
    ...         notificator.notify_at(ref.retain())
    ...     for cap in notificator:
    ...         out.give(cap, cap.time)
    ...         cap.drop()
    >>> def build(s):
    ...     return s.to_stream([1]).binary_notify(s.to_stream([2]), pt.Pipeline, pt.Pipeline,
    ...                                           "Both", [], logic).capture()
    >>> pt.example(build).extract()
    [(0, [0])]
    """

    def ctor(cap: Capability, info: OperatorInfo) -> Callable[..., None]:
        state: dict[str, Any] = {"n": None}
        activator = info.activator()

        def run(in1: InputPort, in2: InputPort, out: OutputPort) -> None:
            n = state["n"]
            if n is None:
                n = state["n"] = Notificator([in1.frontier, in2.frontier], per_call, activator)
                for t in init:
                    n.notify_at(cap.delayed(t))
                cap.drop()
            n.new_call()
            logic(in1, in2, out, n)

        return run

    return binary_frontier(
        stream, other, pact1, pact2, name, ctor, interest=FrontierInterest.ALWAYS
    )
