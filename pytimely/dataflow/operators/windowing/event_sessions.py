"""Session counts over event times carried in the records, with one token.

``window_count(pt.Session(gap), event_time=f)`` reads every record's event time with ``f``; the
timestamp is the watermark (:mod:`pytimely.dataflow.operators.windowing`). Event times here are
as fine as the source's clock (milliseconds, nanoseconds): nearly every record has an event
time of its own and nearly every session a closing time of its own.
:class:`~.session_counts.SessionCounts` vectorizes a batch *at one event time*, which is the
wrong shape for that; this module keeps the open sessions in plain dicts and lists and pays a
few dictionary operations per record.

**State.**  ``latest[k]`` is key ``k``'s latest open session, a list ``[start, last, count,
alive]``; ``older[k]`` lists its earlier sessions whose emission is still pending (rare: a key
that returns after a gap while its previous session waits for the watermark).  A session
``[start, last + gap)`` takes a record of event time ``x`` iff ``start - gap < x < last +
gap``; a record that two sessions take merges them.  Sessions of one key are disjoint.

**Emission** follows the windowing rule: a session is emitted at ``E = last + gap +
lateness`` once the input frontier has passed every time before ``E``.  Sessions are filed
in lists under *keys*: ``due[K]`` lists sessions (with their keys) whose ``E`` is at least
``K``, and ``times`` is a heap of the keys that have a list.  A new session is filed under the
start of its *bucket*, ``E`` rounded down to a multiple of ``2 ** shift`` (``shift`` chosen
so that a gap spans a few hundred buckets): at millisecond times most sessions close at a
millisecond of their own, and a bucket shares the dictionary entry and heap operation among
them.  A session is filed when it opens and *not* when it grows: sessions only move later,
so the key it is filed under stays at most its ``E``.  When the frontier passes a key, its list
is checked: a dead (merged) session is skipped, a session whose ``E`` has passed is emitted
at ``E``, and any other is filed again -- under its bucket's start if the frontier has not
reached it, else under ``E`` itself, so that a session is looked at a bounded number of times
(at most twice before its ``E`` passes, plus once per growth).

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

from ...idioms import MinToken

if TYPE_CHECKING:
    from ...capability import Capability, CapabilityRef
    from ...ports import Frontier, OutputPort

__all__ = ["EventTimeSessions"]

BUCKETS_PER_GAP = 256  # at most this many buckets span one session gap (see ``shift``)


class EventTimeSessions:
    """The open session counts of one ``window_count(pt.Session(gap), event_time=f)``
    instance (see the module docstring for the state, the emission rule and the token)."""

    __slots__ = ("gap", "lateness", "shift", "latest", "older", "due", "times", "token")

    def __init__(self, gap: int, lateness: int) -> None:
        self.gap = gap
        self.lateness = lateness
        # Buckets of 2**shift times, the largest power of two at most gap / 256 (1 if less).
        self.shift = max(0, (gap // BUCKETS_PER_GAP).bit_length() - 1)
        self.latest: dict[Any, list[Any]] = {}
        self.older: dict[Any, list[list[Any]]] = {}
        self.due: dict[int, list[tuple[list[Any], Any]]] = {}  # key -> [(session, key)]
        self.times: list[int] = []  # heap of the keys in ``due``
        self.token = MinToken()  # the one capability, at or before every filed E

    # -- adding ------------------------------------------------------------------------------

    def hold(self, ref: Capability | CapabilityRef) -> None:
        """Make sure the token is at or before ``ref``'s time (call before adding the records
        of ``ref``'s message: every session they open is emitted after it)."""
        self.token.cover(ref, ref.time)

    def add(self, keys: list, times: list) -> None:
        """Count records of ``keys[j]`` at event time ``times[j]`` (on time, after
        :meth:`hold`)."""
        gap, latest, older, shift = self.gap, self.latest, self.older, self.shift
        due = gap + self.lateness
        file, filed = self._file, self.due
        for k, x in zip(keys, times):
            s = latest.get(k)
            if s is None:
                s = latest[k] = [x, x, 1, True]
            elif s[0] <= x:
                # At or after the latest session's start: no older session can take ``x``
                # (they all end at least ``gap`` before that start).
                if x < s[1] + gap:
                    if x > s[1]:
                        s[1] = x
                    s[2] += 1
                    continue
                # A new latest session; ``s`` waits for its emission.
                rest = older.get(k)
                if rest is None:
                    older[k] = [s]
                else:
                    rest.append(s)  # still ordered by ``last``
                s = latest[k] = [x, x, 1, True]
            elif x > s[0] - gap and k not in older:
                s[0] = x
                s[2] += 1
                continue
            else:
                self._add_general(k, x, s)
                continue
            # ``s`` is a new session: filed under its bucket (inline: the common case).
            bucket = (x + due) >> shift << shift
            listed = filed.get(bucket)
            if listed is None:
                file(bucket, s, k)
            else:
                listed.append((s, k))

    def _add_general(self, k: Any, x: int, s: list[Any]) -> None:
        """The record ``(k, x)`` when ``k``'s latest session ``s`` does not simply take it:
        a new session, or one that ``x`` merges with others."""
        gap = self.gap
        sessions = [s, *self.older.get(k, ())]
        hit = [o for o in sessions if o[0] - gap < x < o[1] + gap]
        if not hit:
            new = [x, x, 1, True]
            self._file((x + gap + self.lateness) >> self.shift << self.shift, new, k)
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

    def _file(self, key: int, s: list[Any], k: Any) -> None:
        """File session ``s`` of key ``k`` under ``key`` (at most its emission time)."""
        listed = self.due.get(key)
        if listed is None:
            self.due[key] = [(s, k)]
            heapq.heappush(self.times, key)
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
        time; then move the token to the least pending key (or drop it)."""
        times, filed, gap, shift = self.times, self.due, self.gap, self.shift
        due = gap + self.lateness
        pop, file = heapq.heappop, self._file
        bound = frontier.int_bound()  # E is passed iff E <= bound (int times)
        if bound is None:
            raise TypeError(f"session windows need integer timestamps, not {frontier!r}")
        latest, older = self.latest, self.older
        # (E, sessions emitted at E), a part per run of equal E: a bucket of exact times
        # (coarse event times) is one part, a bucket of distinct milliseconds a part per session
        # -- without a dictionary to group them.
        sends: list[tuple[int, list[Any]]] = []
        emitted = 0
        last = None
        batch: list[Any] = []
        while times and times[0] <= bound:
            for s, k in filed.pop(pop(times)):
                if not s[3]:
                    continue  # merged into another session
                emit_at = s[1] + due
                if emit_at > bound:  # not yet: under its bucket, or under E once that started
                    key = emit_at >> shift << shift
                    file(emit_at if key <= bound else key, s, k)
                    continue
                s[3] = False
                emitted += 1
                if k in older:
                    self._forget(k, s)
                else:
                    del latest[k]  # its only session
                if emit_at == last:
                    batch.append((k, s[0], s[1] + gap, s[2]))
                else:
                    batch = [(k, s[0], s[1] + gap, s[2])]
                    sends.append((emit_at, batch))
                    last = emit_at
        if sends:
            out.give_timed(self.token.cap, sends, emitted)
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
        due, shift = self.gap + self.lateness, self.shift
        least = None
        for k, sessions in pairs:
            opened = []
            for start, last, n in sessions:
                s = [start, last, n, True]
                self._file((last + due) >> shift << shift, s, k)
                opened.append(s)
                least = last + due if least is None else min(least, last + due)
            self._arrange(k, opened)
        if least is not None:
            self.token.cover(cap, least)  # type: ignore[arg-type]


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
