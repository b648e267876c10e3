"""Session counts over event times carried in the records, with one token.

``window_count(pt.Session(gap), event_time=f)`` reads every record's event time with ``f``;
the timestamp is the watermark (:mod:`.windowing`).  Event times here are as fine as the
source's clock (milliseconds, nanoseconds): nearly every record has an event time of its own
and nearly every session a closing time of its own.  :class:`~.session_counts.SessionCounts`
vectorizes a batch *at one event time*, which is the wrong shape for that; this module keeps
the open sessions in plain dicts and lists and pays a few dictionary operations per record.

**State.**  ``latest[k]`` is key ``k``'s latest open session, a list ``[start, last, count,
alive]``; ``older[k]`` lists its earlier sessions whose emission is still pending (rare: a key
that returns after a gap while its previous session waits for the watermark).  A session
``[start, last + gap)`` takes a record of event time ``x`` iff ``start - gap < x < last +
gap``; a record that two sessions take merges them.  Sessions of one key are disjoint.

**Emission** follows the windowing rule: a session is emitted at ``E = last + gap +
lateness`` once the input frontier has passed every time before ``E``.  ``due[E]`` lists the
sessions (with their keys) filed under ``E``, and ``times`` is a heap of the ``E`` s that have a
list.  A session is filed when it opens and *not* when it grows: sessions only move later, so
the ``E`` it is filed under is at most its own.  When ``E`` comes due its list is checked: a
dead (merged) session is skipped, a grown one is filed again under its new ``E``, and the
rest are emitted, all at ``E``.  A record costs a dictionary look-up and a few list updates; a
session, a list append and a look at it when due, plus a heap operation per distinct ``E``
(coarse event times share them).

**One token** (seed 004, section 6.2: hold only the least token): the operator holds at most
one capability, at a time no later than every filed ``E``.  A message at watermark ``t`` can
open sessions no earlier than ``E > t`` (an on-time record has ``x >= t - lateness``), so when
``t`` is before the token, the token is replaced by one taken from the message; after
every invocation it is downgraded to the least filed ``E``, or dropped when nothing is
pending (a :class:`~pytimely.dataflow.idioms.MinToken`).  Results are sent at their own ``E``
with that token.  Invariant: the token is held iff ``times`` is non-empty, and
``token.time <= times[0]``.

>>> import pytimely as pt
>>> def build(scope):
...     inp, clicks = scope.new_input()
...     sessions = clicks.window_count(pt.Session(10), event_time=lambda r: r[1])
...     inp.send_batch([("ann", 1), ("bob", 3), ("ann", 8), ("ann", 30)])
...     return sessions.output.capture()
>>> pt.example(build).extract()
[(13, [('bob', 3, 13, 1)]), (18, [('ann', 1, 18, 2)]), (40, [('ann', 30, 40, 1)])]
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..idioms import MinToken

if TYPE_CHECKING:
    from ..capability import Capability, CapabilityRef
    from ..operator import Frontier, OutputPort

__all__ = ["EventTimeSessions"]


class EventTimeSessions:
    """The open session counts of one ``window_count(pt.Session(gap), event_time=f)``
    instance (see the module docstring for the state, the emission rule and the token)."""

    __slots__ = ("gap", "lateness", "latest", "older", "due", "times", "token")

    def __init__(self, gap: int, lateness: int) -> None:
        self.gap = gap
        self.lateness = lateness
        self.latest: dict[Any, list[Any]] = {}
        self.older: dict[Any, list[list[Any]]] = {}
        self.due: dict[int, list[tuple[list[Any], Any]]] = {}  # E -> [(session, key)]
        self.times: list[int] = []  # heap of the E s in ``due``
        self.token = MinToken()  # the one capability, at or before every filed E

    # -- adding ------------------------------------------------------------------------------

    def hold(self, ref: Capability | CapabilityRef) -> None:
        """Make sure the token is at or before ``ref``'s time (call before adding the records
        of ``ref``'s message: every session they open is emitted after it)."""
        self.token.cover(ref, ref.time)

    def add(self, keys: list, times: list) -> None:
        """Count records of ``keys[j]`` at event time ``times[j]`` (on time, after
        :meth:`hold`)."""
        gap, latest, older = self.gap, self.latest, self.older
        due = gap + self.lateness
        file, filed = self._file, self.due
        for k, x in zip(keys, times):
            s = latest.get(k)
            if s is None:
                s = latest[k] = [x, x, 1, True]
                listed = filed.get(x + due)
                if listed is None:
                    file(x + due, s, k)
                else:
                    listed.append((s, k))
            elif s[0] <= x:
                # At or after the latest session's start: no older session can take ``x``
                # (they all end at least ``gap`` before that start).
                if x < s[1] + gap:
                    if x > s[1]:
                        s[1] = x
                    s[2] += 1
                else:  # a new latest session; ``s`` waits for its emission
                    new = latest[k] = [x, x, 1, True]
                    rest = older.get(k)
                    if rest is None:
                        older[k] = [s]
                    else:
                        rest.append(s)  # still ordered by ``last``
                    listed = filed.get(x + due)
                    if listed is None:
                        file(x + due, new, k)
                    else:
                        listed.append((new, k))
            elif x > s[0] - gap and k not in older:
                s[0] = x
                s[2] += 1
            else:
                self._add_general(k, x, s)

    def _add_general(self, k: Any, x: int, s: list[Any]) -> None:
        """The record ``(k, x)`` when ``k``'s latest session ``s`` does not simply take it:
        a new session, or one that ``x`` merges with others."""
        gap = self.gap
        sessions = [s, *self.older.get(k, ())]
        hit = [o for o in sessions if o[0] - gap < x < o[1] + gap]
        if not hit:
            new = [x, x, 1, True]
            self._file(x + gap + self.lateness, new, k)
            sessions.append(new)
        else:
            keep = hit[0]
            keep[0] = min(x, *(o[0] for o in hit))
            keep[1] = max(x, *(o[1] for o in hit))
            keep[2] = sum(o[2] for o in hit) + 1
            for o in hit[1:]:
                o[3] = False  # merged into ``keep``: skipped when its time comes due
            sessions = [o for o in sessions if o[3]]
        self._arrange(k, sessions)

    def _file(self, emit_at: int, s: list[Any], k: Any) -> None:
        """File session ``s`` of key ``k`` under emission time ``emit_at``."""
        listed = self.due.get(emit_at)
        if listed is None:
            self.due[emit_at] = [(s, k)]
            heapq.heappush(self.times, emit_at)
        else:
            listed.append((s, k))

    def _arrange(self, k: Any, sessions: list[list[Any]]) -> None:
        """Record ``sessions`` (live, non-empty) as ``k``'s: the latest and the older ones."""
        if len(sessions) == 1:
            self.latest[k] = sessions[0]
            self.older.pop(k, None)
            return
        sessions.sort(key=lambda o: o[1])
        self.latest[k] = sessions[-1]
        self.older[k] = sessions[:-1]

    # -- emitting ----------------------------------------------------------------------------

    def release(self, frontier: Frontier, out: OutputPort) -> None:
        """Send every session whose emission time the frontier has passed, each at its own
        time, in time order; then move the token to the least pending time (or drop it)."""
        times, filed, gap = self.times, self.due, self.gap
        due = gap + self.lateness
        pop, file = heapq.heappop, self._file
        sends: list[tuple[int, list[Any]]] = []  # (E, sessions emitted at E), E increasing
        bound = frontier.int_bound()  # E is passed iff E <= bound (int times)
        if bound is None:
            raise TypeError(f"session windows need integer timestamps, not {frontier!r}")
        latest, older = self.latest, self.older
        while times and times[0] <= bound:
            emit_at = pop(times)
            batch = []
            for s, k in filed.pop(emit_at):
                if not s[3]:
                    continue  # merged into another session
                now = s[1] + due
                if now != emit_at:  # grew since it was filed: due later (maybe in this loop)
                    listed = filed.get(now)
                    if listed is None:
                        file(now, s, k)
                    else:
                        listed.append((s, k))
                    continue
                s[3] = False
                if k in older:
                    self._forget(k, s)
                else:
                    del latest[k]  # its only session
                batch.append((k, s[0], s[1] + gap, s[2]))
            if batch:
                sends.append((emit_at, batch))
        if sends:
            out.give_timed(self.token.cap, sends)
        self.token.settle(times[0] if times else None)

    def _forget(self, k: Any, s: list[Any]) -> None:
        """Remove the emitted session ``s`` from ``k``'s sessions."""
        rest = self.older.get(k)
        if self.latest.get(k) is s:
            if rest:
                self._arrange(k, rest)
            else:
                del self.latest[k]
        elif rest is not None:
            rest.remove(s)
            if not rest:
                del self.older[k]

    # -- introspection and snapshots -----------------------------------------------------------

    def size(self) -> int:
        """Open sessions plus pending emission times."""
        return len(self.times) + len(self.latest) + sum(map(len, self.older.values()))

    def per_key(self) -> list[tuple[Any, list[tuple[int, int, int]]]]:
        """The open sessions by key, ``(key, [(start, last, count), ...])``: the operator's
        state for a snapshot (the format of :meth:`SessionCounts.per_key`)."""
        return [
            (k, [(o[0], o[1], o[2]) for o in [s, *self.older.get(k, ())]])
            for k, s in self.latest.items()
        ]

    def restore(self, cap: Capability, pairs: list[tuple[Any, Any]]) -> None:
        """Reopen the sessions of ``per_key`` pairs; the token is minted from ``cap``."""
        due = self.gap + self.lateness
        for k, sessions in pairs:
            opened = []
            for start, last, n in sessions:
                s = [start, last, n, True]
                self._file(last + due, s, k)
                opened.append(s)
            self._arrange(k, opened)
        if self.times:
            self.token.cover(cap, self.times[0])  # type: ignore[arg-type]


def event_session_logic(
    op: str,
    keys_of: Callable[[list], list],
    times_of: Callable[[list], list],
    lateness: int,
    state: EventTimeSessions,
    check_time: Callable[[str, Any], None],
) -> Callable[..., None]:
    """The logic of ``window_count(pt.Session(gap), event_time=f)`` over ``state``:
    ``keys_of(batch)`` and ``times_of(batch)`` give the records' keys and checked event
    times; late records (``x < t - lateness``) go to the second output unchanged."""

    def logic(inp: Any, out: OutputPort, late_out: OutputPort) -> None:
        for ref, batch in inp:
            t = ref.time
            check_time(op, t)
            keys = keys_of(batch)
            times = times_of(batch)
            floor = t - lateness  # on time iff x >= t - lateness
            if times and min(times) < floor:
                late = [r for r, x in zip(batch, times) if x < floor]
                late_out.session(ref).give_batch(late)
                keep = [x >= floor for x in times]
                keys = [k for k, ok in zip(keys, keep) if ok]
                times = [x for x, ok in zip(times, keep) if ok]
            if times:
                state.hold(ref)
                state.add(keys, times)
        state.release(inp.frontier, out)

    return logic
