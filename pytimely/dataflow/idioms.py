"""Two ways an operator holds timestamp tokens for work it has not finished.

Beside :class:`~pytimely.dataflow.CapabilitySet` and :class:`~pytimely.dataflow.Notificator`,
these are the token idioms operators keep writing by hand:

* :class:`TimeStash` -- *stash per time*: state kept per time together with a capability
  retained from the first message at that time, released (in time order) once the input
  frontier has passed the time, when no more data at it can arrive.  This is how timely's
  ``aggregate`` and ``delay`` operators wait (timely-dataflow's
  ``dataflow/operators/aggregation/aggregate.rs`` and ``dataflow/operators/delay.rs``), and
  Naiad's ``OnNotify`` without the notificator ("Naiad: A Timely Dataflow System", SOSP 2013,
  section 2.2).
* :class:`MinToken` -- *one token at the least pending time*: instead of one token per pending
  time, hold a single capability at the minimum and downgrade it as the minimum advances; the
  operator sends everything it releases at that one time.  This is the token discipline of
  "Megaphone: Latency-conscious state migration for distributed streaming dataflows" (Hoffmann
  et al., PVLDB 12(9), 2019), and it keeps progress traffic independent of the number
  of pending times.

Both are plain helpers used inside an operator's ``logic``; neither touches the operator's
internals, and both hold only capabilities the operator was given.  The library's own operators
(windows, sessions, ``stateful_map``, ``keyed_process``) use
:class:`~pytimely.dataflow.operators.tokens.LeastToken`, a :class:`MinToken` that also keeps
the multiset of pending times, pops the ready ones in order and settles the token once per
invocation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from .capability import Capability, CapabilityRef
    from .ports import Frontier

__all__ = ["MinToken", "TimeStash"]

S = TypeVar("S")
X = TypeVar("X")


class TimeStash(Generic[S]):
    """State per pending time, each with a capability at that time.

    Invariant: for every stashed time ``t`` the stash holds exactly one capability at ``t``, from
    the first :meth:`at` / :meth:`fold` for ``t`` until :meth:`ready` hands the state back and
    the caller's loop body has run (the capability is dropped then).  :meth:`ready` releases the
    times its ``frontier`` no longer ``less_equal`` s, in the total order of times, so with
    partially ordered times results appear in an order consistent with the partial order.

    A per-time count, as ``stream.count()`` computes it::

        >>> import pytimely as pt
        >>> from pytimely.dataflow.idioms import TimeStash
        >>> from pytimely.dataflow.operators.generic import unary_frontier
        >>> def counts(cap, info):
        ...     cap.drop()
        ...     stash = TimeStash(int)
        ...     def logic(inp, out):
        ...         for ref, batch in inp:
        ...             stash.fold(ref, lambda n, b: n + len(b), batch)
        ...         for held, n in stash.ready(inp.frontier):
        ...             out.give(held, n)
        ...     return logic
        >>> def build(scope):
        ...     inp, words = scope.new_input()
        ...     out = unary_frontier(words, pt.Pipeline, "Counts", counts).capture()
        ...     inp.send_batch(["a", "b"])
        ...     inp.advance_to(1)
        ...     inp.send("c")
        ...     return out
        >>> pt.example(build).extract()
        [(0, [2]), (1, [1])]
    """

    __slots__ = ("_init", "_pending")

    def __init__(self, init: Callable[[], S]) -> None:
        """``init()`` makes the state of a time when its first message arrives."""
        self._init = init
        self._pending: dict[Any, list[Any]] = {}

    def at(self, ref: CapabilityRef, time: Any = None) -> S:
        """The state of ``time`` (default: ``ref.time``), for the caller to update in place.

        On the first use of a time the stash takes a capability from the message's ``ref``:
        ``ref.retain()`` for its own time, ``ref.delayed(time)`` for a later one (which must not
        be earlier than ``ref.time``; :class:`~pytimely.errors.CapabilityError` otherwise).
        """
        return self._entry(ref, time)[1]

    def fold(self, ref: CapabilityRef, f: Callable[[S, X], S], x: X, time: Any = None) -> S:
        """Replace the state of ``time`` (default ``ref.time``) by ``f(state, x)``; return it.

        For immutable states (numbers, tuples); capabilities are taken as by :meth:`at`.
        """
        entry = self._entry(ref, time)
        entry[1] = state = f(entry[1], x)
        return state

    def _entry(self, ref: CapabilityRef, time: Any) -> list[Any]:
        """``[capability, state]`` of ``time`` (default ``ref.time``), made on first use."""
        t = ref.time if time is None else time
        entry = self._pending.get(t)
        if entry is None:
            cap = ref.retain() if time is None else ref.delayed(time)
            entry = self._pending[t] = [cap, self._init()]
        return entry

    def ready(self, frontier: Frontier) -> Iterable[tuple[Any, S]]:
        """Pop the times ``frontier`` has passed, in time order, as ``(capability, state)``.

        Iterate it at once: each capability is valid in the loop body that receives it and is
        dropped when the loop moves on (or stops).  Cheap when nothing is pending or ready.
        """
        pending = self._pending
        if not pending:
            return ()
        times = [t for t in pending if not frontier.less_equal(t)]
        if not times:
            return ()
        times.sort()
        return self._release(times)

    def _release(self, times: list[Any]) -> Iterator[tuple[Any, S]]:
        pending = self._pending
        for t in times:
            held, state = pending.pop(t)
            try:
                yield held, state
            finally:
                held.drop()

    def __len__(self) -> int:
        """The number of pending times."""
        return len(self._pending)

    def times(self) -> list[Any]:
        """The pending times, in time order."""
        return sorted(self._pending)


class MinToken:
    """One capability held at the least pending time, for totally ordered (integer) times.

    ``cover(ref, t)`` makes sure the token is ``<= t``, taking a new one from the message
    ``ref`` (``ref.delayed(t)``) when ``t`` is below the held time; ``settle(t_min)`` downgrades
    the token to the new least pending time, or drops it when nothing is pending (``None``).
    Invariant: while anything is pending, ``cap`` is held at ``time`` and ``time`` is at most
    the least pending time; otherwise ``cap`` is ``None`` and ``time`` is ``math.inf`` (so
    ``t < token.time`` is the cheap test for "must cover ``t``").

        >>> import pytimely as pt
        >>> from pytimely.dataflow.idioms import MinToken
        >>> from pytimely.dataflow.operators.generic import unary_frontier
        >>> def smallest_pending(cap, info):  # emit each record once its time completes
        ...     cap.drop()
        ...     token, pending = MinToken(), []
        ...     def logic(inp, out):
        ...         for ref, batch in inp:
        ...             pending.extend((ref.time, x) for x in batch)
        ...             token.cover(ref, ref.time)
        ...         done = [r for r in pending if not inp.frontier.less_equal(r[0])]
        ...         if done:
        ...             out.session(token.cap).give_batch(sorted(done))
        ...             pending[:] = [r for r in pending if r not in done]
        ...         token.settle(min((t for t, _ in pending), default=None))
        ...     return logic
        >>> def build(scope):
        ...     inp, xs = scope.new_input()
        ...     out = unary_frontier(xs, pt.Pipeline, "Smallest", smallest_pending).capture()
        ...     inp.send_batch([3, 1])
        ...     inp.advance_to(5)
        ...     inp.send(2)
        ...     return out
        >>> pt.example(build).extract()  # everything at the token's time, 0
        [(0, [(0, 1), (0, 3), (5, 2)])]
    """

    __slots__ = ("cap", "time")

    def __init__(self) -> None:
        self.cap: Capability | None = None
        self.time: Any = math.inf

    def cover(self, ref: CapabilityRef, t: Any) -> None:
        """Hold a token at ``t`` or earlier, taking it from the message ``ref`` if needed."""
        if t < self.time:
            new = ref.delayed(t)
            if self.cap is not None:
                self.cap.drop()
            self.cap = new
            self.time = t

    def settle(self, t_min: Any) -> None:
        """Move the token to the least pending time ``t_min`` (``None``: drop it)."""
        cap = self.cap
        if cap is None:
            return
        if t_min is None:
            cap.drop()
            self.cap = None
            self.time = math.inf
        elif t_min > self.time:
            cap.downgrade(t_min)
            self.time = t_min
