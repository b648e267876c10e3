"""One timestamp token for many pending times: :class:`LeastToken` (its documentation says
what, why and how), :class:`TokenPerTime` (the same interface, one token per time, for
partially ordered times) and :func:`tokens_for` (which of the two a scope's times need).

>>> import pytimely as pt
>>> type(tokens_for(0)).__name__, type(tokens_for(pt.Product(0, 0))).__name__
('LeastToken', 'TokenPerTime')
"""

from __future__ import annotations

from collections.abc import Iterator
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any

from ...errors import CapabilityError
from ..idioms import MinToken

if TYPE_CHECKING:
    from ..capability import Capability, CapabilityRef
    from ..ports import Frontier, OutputPort, Session

__all__ = ["LeastToken", "TokenPerTime", "tokens_for"]


class LeastToken(MinToken):
    """One capability at the least of a multiset of pending ``int`` times: a
    :class:`~pytimely.dataflow.idioms.MinToken` that also keeps the pending times.

    **What.**  An operator that will send at many different times (a window's result at its end,
    a record released at its own timestamp, a timer at its deadline) needs the right to send at
    each of them.  The obvious way is one capability per pending time.  :class:`LeastToken` holds
    *one* capability instead, at the least of the pending times, for a multiset of pending
    ``int`` times: ``hold(ref, t)`` says that something is pending at ``t``, ``done(t)`` that it
    no longer is, :meth:`ready` pops the times whose predecessors are complete, and
    :meth:`settle` -- once per invocation, after everything ready has been sent -- moves the token
    to the new least pending time (one ``downgrade``), or drops it when nothing is pending.  While
    something is pending at ``t``, the token's time is ``<= t``, so it allows sending at ``t``:
    ``token.session(out, t)`` (``out.session(token.cap, t)``).

    **Why.**  Progress tracking costs per distinct *pointstamp*, not per record: every capability
    minted or dropped is a count change that the operator reports, the scope's tracker applies
    and every worker receives.  With event times in milliseconds every pending time is distinct,
    and one capability per pending time turns the timestamp granularity into the operator's
    progress traffic.  "Timestamp tokens" (Lattuada, McSherry, Liagouris, SoCC 2022, section 6.2,
    *fine-grained timestamps*) describes the way out that differential dataflow takes: an
    operator "retains the least timestamp tokens for the times of un-batched messages it holds,
    and as the operator's frontier advances [...] uses its current timestamp tokens to produce any
    output corresponding to the batch, and then downgrades its timestamp tokens once, to the new
    lower envelope of its un-batched messages".  The operator, not the system, decides the
    granularity at which it talks to progress tracking: here, at most one pointstamp per operator
    output and one change per invocation, however many times are pending.

    **Invariants.**  At every moment, ``time <= t`` for every pending ``t`` (so the token allows
    sending at every pending time).  After :meth:`settle`, the token exists iff something is
    pending, and then ``time`` is exactly the least pending time (a token that is lower than
    needed would hold back downstream frontiers).  :meth:`hold` keeps both: a time below the
    token's takes a new token from the message (``ref.delayed(t)``; a held :class:`Capability`
    works too) and drops the old one -- never a downgrade backwards.  :meth:`done` and
    :meth:`ready` never touch the token: a time just popped by :meth:`ready` can still be sent
    at until :meth:`settle`.

    **Scope.**  Times must be totally ordered, which in pytimely means ``int``: with partially
    ordered times (the :class:`~pytimely.Product` times of iterative scopes) the least time in
    Python's total order need not be ``<=`` every pending time in the partial order, and the
    single token would not allow sending at them.  :meth:`LeastToken.hold` refuses any other
    time with a ``TypeError``; :class:`TokenPerTime` has the same interface with one capability
    per distinct pending time, and :func:`tokens_for` picks the right one from a scope's time.

    One token while three things are pending at two times (a stand-in for capabilities prints
    what happens to them):

    >>> class Cap:
    ...     def __init__(self, t): self.time = t
    ...     def delayed(self, t): print("take", t); return Cap(t)
    ...     def downgrade(self, t): print("downgrade", self.time, "->", t); self.time = t
    ...     def drop(self): print("drop", self.time)
    >>> class Frontier:
    ...     def __init__(self, f): self.f = f
    ...     def less_than(self, t): return self.f < t
    >>> message = Cap(0)  # the capability of a message at time 0
    >>> token = LeastToken()
    >>> token.hold(message, 30), token.hold(message, 20), token.hold(message, 30)
    take 30
    take 20
    drop 30
    (True, True, False)
    >>> token.time, token.times()  # one token, at 20; 20 and 30 (twice) pending
    (20, [20, 30])
    >>> list(token.ready(Frontier(25)))  # every time before 20 is complete: send at 20 now
    [20]
    >>> token.settle()  # once, after sending: up to the least time still pending
    downgrade 20 -> 30
    >>> token.done(30), token.done(30)
    (False, True)
    >>> token.settle()
    drop 30
    >>> token.cap is None
    True

    In a dataflow, an operator that delays every record by 10 time units, holding one
    capability however many records wait:

    >>> import pytimely as pt
    >>> from pytimely.dataflow.operators.generic import unary_frontier
    >>> def delay_by_10(cap, info):
    ...     cap.drop()
    ...     token, waiting = LeastToken(), {}
    ...     def logic(inp, out):
    ...         for ref, batch in inp:
    ...             t = ref.time + 10
    ...             if token.hold(ref, t):
    ...                 waiting[t] = []
    ...             waiting[t].extend(batch)
    ...         for t in token.ready(inp.frontier):
    ...             token.session(out, t).give_batch(waiting.pop(t))
    ...         token.settle()
    ...     return logic
    >>> def build(scope):
    ...     inp, xs = scope.new_input()
    ...     out = unary_frontier(xs, pt.Pipeline, "Delay", delay_by_10).capture()
    ...     for t in range(3):
    ...         inp.advance_to(t)
    ...         inp.send(t)
    ...     return out
    >>> pt.example(build).extract()
    [(10, [0]), (11, [1]), (12, [2])]

    ``cap`` is the held :class:`~pytimely.dataflow.Capability` (``None`` when none is held)
    and ``time`` its time (``math.inf`` when none is held, so ``t < token.time`` is the test
    for "would need a new token").
    """

    __slots__ = ("_count", "_heap")

    def __init__(self) -> None:
        super().__init__()
        self._count: dict[int, int] = {}  # pending time -> multiplicity (> 0)
        self._heap: list[int] = []  # the pending times, and stale ones (skipped when met)

    def hold(self, ref: CapabilityRef | Capability, t: int, n: int = 1) -> bool:
        """Record ``n`` more things pending at ``t``; returns whether ``t`` is newly pending.

        ``ref`` (a message's :class:`CapabilityRef` or a held :class:`Capability`, at or
        before ``t``) mints the token when none is held or ``t`` is below the held one's time
        (the old one is dropped then); otherwise nothing but a count changes.
        """
        count = self._count
        c = count.get(t)
        if c is not None:
            count[t] = c + n
            return False
        if type(t) is not int:
            raise TypeError(
                f"LeastToken holds int times only (a total order), got {t!r}; use "
                "TokenPerTime (or tokens_for(time)) for partially ordered times"
            )
        count[t] = n
        heappush(self._heap, t)
        self.cover(ref, t)  # type: ignore[arg-type]  # a held Capability mints just as well
        return True

    def done(self, t: int, n: int = 1) -> bool:
        """Record ``n`` fewer things pending at ``t``; returns whether nothing is left there.
        The token moves only at :meth:`settle`."""
        count = self._count
        c = count[t] - n
        if c > 0:
            count[t] = c
            return False
        if c < 0:
            count[t] = c + n
            raise ValueError(f"done({t!r}, {n}): only {c + n} pending at {t!r}")
        del count[t]
        return True

    def discard(self, t: int) -> int:
        """Forget everything pending at ``t``; returns how much was (``0`` if nothing).  The
        token still allows sending at ``t`` until :meth:`settle`."""
        return self._count.pop(t, 0)

    def least(self) -> int | None:
        """The least pending time, or ``None``."""
        heap, count = self._heap, self._count
        while heap:
            t = heap[0]
            if t in count:
                return t
            heappop(heap)  # stale: done with, discarded, or a duplicate
        return None

    def ready(self, frontier: Frontier) -> Iterator[int]:
        """Pop, least first, every pending time ``t`` whose predecessors are all complete
        (``not frontier.less_than(t)``), yielding it; send at it in the loop body (the token
        allows it until :meth:`settle`)."""
        return self._pop_until(frontier.less_than)

    def passed(self, frontier: Frontier) -> Iterator[int]:
        """Like :meth:`ready`, for the pending times ``frontier`` has passed
        (``not frontier.less_equal(t)``: nothing at ``t`` can arrive any more)."""
        return self._pop_until(frontier.less_equal)

    def _pop_until(self, stop: Any) -> Iterator[int]:
        """Pop and yield the pending times, least first, until ``stop(t)`` holds."""
        heap, count = self._heap, self._count
        while heap:
            t = heap[0]
            if t not in count:
                heappop(heap)
                continue
            if stop(t):
                return
            heappop(heap)
            del count[t]
            yield t

    def settle(self) -> None:
        """Move the token to the least pending time (one ``downgrade``), or drop it when
        nothing is pending.  Call once per invocation, after sending what was ready."""
        if self.cap is not None:
            super().settle(self.least())

    def cap_for(self, t: int) -> Capability:
        """The capability to send at ``t`` with (at ``t`` or before): the token."""
        cap = self.cap
        if cap is None:
            raise CapabilityError(f"LeastToken holds no token: nothing is pending at {t!r}")
        return cap

    def session(self, out: OutputPort, t: int) -> Session:
        """A session on ``out`` sending at the pending (or just released) time ``t``."""
        return out.session(self.cap_for(t), t)

    def count(self, t: int) -> int:
        """How much is pending at ``t``."""
        return self._count.get(t, 0)

    def times(self) -> list[int]:
        """The distinct pending times, least first."""
        return sorted(self._count)

    def __len__(self) -> int:
        """The number of distinct pending times."""
        return len(self._count)

    def __bool__(self) -> bool:
        return bool(self._count)

    def __contains__(self, t: Any) -> bool:
        return t in self._count

    def __repr__(self) -> str:
        held = "no token" if self.cap is None else f"token at {self.time!r}"
        return f"<{type(self).__name__} {held}, {len(self._count)} pending times>"


class TokenPerTime(LeastToken):
    """:class:`LeastToken`'s interface with one capability per distinct pending time: for
    times that are not ``int`` s (partially ordered :class:`~pytimely.Product` times, user
    timestamp types), where one token at the least time is not enough.  Times are popped in
    Python's total order (which extends the partial order).  A time's capability is dropped
    at :meth:`settle` once nothing is pending there.

    >>> class Cap:
    ...     def __init__(self, t): self.time = t
    ...     def delayed(self, t): print("take", t); return Cap(t)
    ...     def drop(self): print("drop", self.time)
    >>> tokens = TokenPerTime()
    >>> message = Cap((0, 0))
    >>> tokens.hold(message, (0, 5)), tokens.hold(message, (1, 0))
    take (0, 5)
    take (1, 0)
    (True, True)
    >>> tokens.cap_for((1, 0)).time
    (1, 0)
    >>> tokens.done((0, 5))
    True
    >>> tokens.settle()
    drop (0, 5)
    """

    __slots__ = ("_caps", "_retired")

    def __init__(self) -> None:
        super().__init__()
        self._caps: dict[Any, Capability] = {}
        self._retired: dict[Any, Capability] = {}  # no longer pending: dropped at settle

    def hold(self, ref: CapabilityRef | Capability, t: Any, n: int = 1) -> bool:
        """Record ``n`` more things pending at ``t``, taking a capability at ``t`` from
        ``ref`` when ``t`` is newly pending; returns whether it is."""
        count = self._count
        c = count.get(t)
        if c is not None:
            count[t] = c + n
            return False
        count[t] = n
        heappush(self._heap, t)
        self._caps[t] = ref.delayed(t)
        return True

    def done(self, t: Any, n: int = 1) -> bool:
        """Record ``n`` fewer things pending at ``t``; returns whether nothing is left there
        (its capability is then dropped at :meth:`settle`)."""
        emptied = super().done(t, n)
        if emptied:
            self._retire(t)
        return emptied

    def discard(self, t: Any) -> int:
        """Forget everything pending at ``t``; its capability lasts until :meth:`settle`."""
        n = self._count.pop(t, 0)
        if n:
            self._retire(t)
        return n

    def _retire(self, t: Any) -> None:
        old = self._retired.get(t)
        if old is not None:  # retired, held again and retired again before a settle
            old.drop()
        self._retired[t] = self._caps.pop(t)

    def ready(self, frontier: Frontier) -> Iterator[Any]:
        """Pop the pending times ``frontier`` no longer ``less_than`` s, in Python's total
        order (stopping at the first that is not ready)."""
        for t in super().ready(frontier):
            self._retire(t)
            yield t

    def passed(self, frontier: Frontier) -> Iterator[Any]:
        """Pop the pending times ``frontier`` has passed, in Python's total order (stopping
        at the first that it has not)."""
        for t in super().passed(frontier):
            self._retire(t)
            yield t

    def settle(self) -> None:
        """Drop the capabilities of the times no longer pending."""
        retired = self._retired
        if retired:
            self._retired = {}
            for cap in retired.values():
                cap.drop()

    def cap_for(self, t: Any) -> Capability:
        """The capability at ``t`` (pending, or popped since the last :meth:`settle`)."""
        cap = self._caps.get(t)
        if cap is None:
            cap = self._retired.get(t)
        if cap is None:
            raise CapabilityError(f"TokenPerTime holds no capability at {t!r}")
        return cap

    @property
    def held(self) -> int:
        """Capabilities held (pending times, plus those popped since the last settle)."""
        return len(self._caps) + len(self._retired)


def tokens_for(time: Any) -> LeastToken:
    """The token holder for a scope whose times look like ``time`` (an operator's initial
    capability's, say): :class:`LeastToken` for ``int`` times, else :class:`TokenPerTime`.

    >>> import pytimely as pt
    >>> type(tokens_for(0)).__name__, type(tokens_for(pt.Product(0, 0))).__name__
    ('LeastToken', 'TokenPerTime')
    """
    return LeastToken() if type(time) is int else TokenPerTime()
