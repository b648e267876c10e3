"""The open sessions of a ``window_count(pt.Session(gap))`` instance, kept column-wise so a
batch is counted with array operations instead of per-key Python work.

Every open session has a *slot*: an index into the parallel arrays ``start``, ``last``,
``count`` and ``emit`` (its emission time ``last + gap + lateness``).  ``slot_of`` maps every
key with an open session to its *latest* one (the greatest ``last``); a key's earlier open
sessions — records far apart in event time, or a session whose close is still pending when
the key returns — are listed in ``older`` (rare, and released first: they end earlier).

A batch of counts at one event time ``x`` (the timestamps-as-event-times case, or one group
of an event-time batch) is applied in vectorized steps: keys whose latest session
``[start, last + gap)`` takes ``x`` (``start - gap < x < last + gap``, and, when older
sessions exist, ``x >= older_end`` — past their ``last + gap`` — so ``x`` cannot bridge to
one) extend it in place; keys with no session, and keys whose sessions all end before ``x``
(``x >= last + gap``: the latest becomes an older one), open a session each; the rest go
through :meth:`SessionCounts.add`, which merges the sessions a record bridges.  Keys are
looked up in a :class:`KeyIndex`, a numpy table for small int keys.

**Tokens** are those of the session windows (:mod:`pytimely.dataflow.operators.windowing`): a
:class:`~pytimely.dataflow.operators.tokens.LeastToken` counts the live sessions emitted at
each pending emission time ``E`` and holds one capability, at the least such ``E`` (not one per
``E``: with event times in milliseconds nearly every session has its own). A batch re-counts
them once per distinct old ``E`` and once per new one; :meth:`release` emits each ready ``E``
at ``E`` and then moves the token once. ``closing[E]`` holds the slots that were sent to ``E``
(possibly stale: moved later, merged away or freed); :meth:`release` keeps those still live and
aimed at ``E``.

Event times live in ``int64`` arrays while they stay within ``±2**61`` (every time the
library's users report — ns since 1970 included — does); a time beyond that widens the arrays
to Python objects, slower but exact.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from itertools import repeat
from typing import TYPE_CHECKING, Any

import numpy as np

from ..tokens import LeastToken

if TYPE_CHECKING:
    from ...capability import Capability, CapabilityRef
    from ...ports import Frontier

__all__ = ["KeyIndex", "SessionCounts"]

_INT64_SAFE = 2**61  # |time| and gap + lateness below this cannot overflow int64 when added
_EMPTY = np.zeros(0, dtype=np.int64)
_COLUMNS = ("start", "last", "count", "emit", "used", "has_older", "older_end", "key_at")

_DENSE_LIMIT = 1 << 20  # int keys below this are table-indexed (at most 8 MB of int64)


def _tally(values: np.ndarray) -> list[tuple[int, int]]:
    """``(value, occurrences)`` for the distinct ``values``: a ``bincount`` over their range
    when it is small (emission times of one batch usually span at most ``gap``), else a sort."""
    if values.dtype != object:
        lo = int(values.min())
        span = int(values.max()) - lo
        if span < 4 * len(values) + 1024:
            counts = np.bincount(values - lo)
            present = np.flatnonzero(counts)
            return list(zip((present + lo).tolist(), counts[present].tolist()))
    distinct, counts = np.unique(values, return_counts=True)
    return list(zip(distinct.tolist(), counts.tolist()))


class KeyIndex:
    """Key -> slot of its one open session.

    While every key seen is an ``int`` in ``[0, 2**20)`` (user, item or sensor ids, typically;
    not tuples of them)
    the index is a numpy table indexed by the key (``-1``: no session), so a batch of keys is
    looked up, assigned and forgotten with one array operation and no hashing; the first other
    key turns it into a dict for good.  (Bools and numpy ints, equal to ints as dict keys, take
    the dict too when they come alone.)
    """

    __slots__ = ("table", "slots", "n")

    def __init__(self) -> None:
        self.table: np.ndarray | None = np.full(1024, -1, dtype=np.int64)
        self.slots: dict[Any, int] = {}
        self.n = 0  # keys in the table

    def _dense_array(self, keys: list) -> np.ndarray | None:
        """``keys`` as an int array if the table can hold them all (grown as needed), else
        ``None`` after switching to the dict."""
        table = self.table
        if table is None:
            return None
        if not keys:
            return _EMPTY
        ka = np.array(keys)
        if ka.ndim == 1 and ka.dtype.kind in "iu" and ka.min() >= 0 and ka.max() < _DENSE_LIMIT:
            self._grow(int(ka.max()))
            return ka
        self._to_dict()
        return None

    def _dense_key(self, k: Any) -> bool:
        if self.table is None:
            return False
        if type(k) is int and 0 <= k < _DENSE_LIMIT:
            self._grow(k)
            return True
        self._to_dict()
        return False

    def _grow(self, top: int) -> None:
        table = self.table
        if top >= len(table):
            grown = np.full(max(2 * len(table), top + 1), -1, dtype=np.int64)
            grown[: len(table)] = table
            self.table = grown

    def _to_dict(self) -> None:
        table = self.table
        keys = np.flatnonzero(table >= 0)
        self.slots = dict(zip(keys.tolist(), table[keys].tolist()))
        self.table = None

    def get(self, k: Any) -> int | None:
        """``k``'s slot, or ``None``."""
        if self._dense_key(k):
            i = int(self.table[k])
            return i if i >= 0 else None
        return self.slots.get(k)

    def set(self, k: Any, i: int) -> None:
        """Map ``k`` to slot ``i``."""
        if self._dense_key(k):
            self.n += int(self.table[k] < 0)
            self.table[k] = i
        else:
            self.slots[k] = i

    def pop(self, k: Any) -> None:
        """Forget ``k`` if present."""
        if self._dense_key(k):
            self.n -= int(self.table[k] >= 0)
            self.table[k] = -1
        else:
            self.slots.pop(k, None)

    def lookup(self, keys: list) -> np.ndarray:
        """The slots of ``keys`` (``-1`` for a key without one) as an int64 array."""
        ka = self._dense_array(keys)
        if ka is not None:
            return self.table[ka]
        return np.fromiter(map(self.slots.get, keys, repeat(-1)), np.int64, len(keys))

    def assign(self, keys: list, slots: np.ndarray) -> None:
        """``set`` for distinct ``keys`` that have no slot yet."""
        ka = self._dense_array(keys)
        if ka is not None:
            self.table[ka] = slots
            self.n += len(ka)
        else:
            self.slots.update(zip(keys, slots.tolist()))

    def reassign(self, keys: list, slots: np.ndarray) -> None:
        """``set`` for distinct ``keys`` that all have a slot already."""
        ka = self._dense_array(keys)
        if ka is not None:
            self.table[ka] = slots
        else:
            self.slots.update(zip(keys, slots.tolist()))

    def forget(self, keys: list) -> None:
        """``pop`` for distinct ``keys`` that all have a slot."""
        ka = self._dense_array(keys)
        if ka is not None:
            self.table[ka] = -1
            self.n -= len(ka)
        else:
            deque(map(self.slots.__delitem__, keys), maxlen=0)

    def __len__(self) -> int:
        return self.n if self.table is not None else len(self.slots)

    def items(self) -> list[tuple[Any, int]]:
        """Every ``(key, slot)``."""
        table = self.table
        if table is None:
            return list(self.slots.items())
        keys = np.flatnonzero(table >= 0)
        return list(zip(keys.tolist(), table[keys].tolist()))


class SessionCounts:
    """Open per-key session counts and their emission tokens (see the module docstring).

    Invariants: every slot in ``slot_of`` and ``older`` is ``used`` and belongs to that key
    (``key_at``); a key's open sessions are disjoint, ``slot_of`` holds its latest and
    ``older`` the others, and ``has_older[slot_of[k]]`` says whether there are any;
    ``token.count(E)`` is the number of used slots whose ``emit`` is ``E``, and ``closing``
    has an entry for exactly the ``E`` s the token has pending.
    """

    __slots__ = (
        "gap",
        "lateness",
        "slot_of",
        "older",
        "key_at",
        "start",
        "last",
        "count",
        "emit",
        "used",
        "has_older",
        "older_end",
        "free",
        "token",
        "closing",
    )

    def __init__(self, gap: int, lateness: int, capacity: int = 1024) -> None:
        self.gap = gap
        self.lateness = lateness
        self.slot_of = KeyIndex()
        self.older: dict[Any, list[int]] = {}
        self.key_at = np.empty(capacity, dtype=object)  # slot -> key (None: free)
        dtype: Any = np.int64 if gap + lateness < _INT64_SAFE else object
        self.start = np.zeros(capacity, dtype=dtype)
        self.last = np.zeros(capacity, dtype=dtype)
        self.count = np.zeros(capacity, dtype=dtype)
        self.emit = np.zeros(capacity, dtype=dtype)
        self.used = np.zeros(capacity, dtype=bool)
        self.has_older = np.zeros(capacity, dtype=bool)
        self.older_end = np.zeros(capacity, dtype=dtype)  # max(last) + gap of the older ones
        self.free: list[int] = list(range(capacity - 1, -1, -1))
        self.token = LeastToken()
        self.closing: dict[int, list[Any]] = {}  # E -> [slot arrays and single slots]

    # -- storage ------------------------------------------------------------------------------

    def _fit(self, lo: int, hi: int) -> None:
        """Widen the arrays to Python ints if event times in ``[lo, hi]`` could overflow."""
        if (lo <= -_INT64_SAFE or hi >= _INT64_SAFE) and self.start.dtype != object:
            for name in ("start", "last", "count", "emit", "older_end"):
                setattr(self, name, getattr(self, name).astype(object))

    def _take(self, n: int) -> list[int]:
        """``n`` free slots, growing the arrays (doubling) when needed."""
        free = self.free
        if len(free) < n:
            old = len(self.used)
            new = max(2 * old, old + n)
            for name in _COLUMNS:
                a = getattr(self, name)
                grown = (
                    np.empty(new, dtype=a.dtype) if a.dtype == object else np.zeros(new, a.dtype)
                )
                grown[:old] = a
                setattr(self, name, grown)
            free[:0] = range(new - 1, old - 1, -1)  # keep popping low slots first
        taken = free[-n:]
        del free[-n:]
        return taken

    def _ref_emit(self, ref: Capability | CapabilityRef, emit_at: int, n: int, slots: Any) -> None:
        """``n`` more live sessions (``slots``: an array, or one slot) emitted at ``emit_at``."""
        if self.token.hold(ref, emit_at, n):
            self.closing[emit_at] = [slots]
        else:
            self.closing[emit_at].append(slots)

    def _unref_emit(self, emit_at: int, n: int = 1) -> None:
        """``n`` fewer live sessions emitted at ``emit_at``."""
        if self.token.done(emit_at, n):
            del self.closing[emit_at]

    def _open(self, ref: Capability | CapabilityRef, k: Any, x: int, n: int) -> int:
        (i,) = self._take(1)
        self.key_at[i] = k
        self.start[i] = self.last[i] = x
        self.count[i] = n
        self.used[i] = True
        self.has_older[i] = False
        emit_at = x + self.gap + self.lateness
        self.emit[i] = emit_at
        self._ref_emit(ref, emit_at, 1, i)
        return i

    def _free(self, i: int) -> None:
        self.used[i] = False
        self.key_at[i] = None
        self.free.append(i)

    def _arrange(self, k: Any, slots: list[int]) -> None:
        """Record ``slots`` (non-empty) as ``k``'s open sessions: the latest in ``slot_of``,
        the rest in ``older``."""
        if len(slots) == 1:
            latest = slots[0]
            self.older.pop(k, None)
            self.has_older[latest] = False
        else:
            last = self.last
            latest = max(slots, key=lambda i: last[i])
            rest = self.older[k] = [i for i in slots if i != latest]
            self.has_older[latest] = True
            self.older_end[latest] = max(last[i] for i in rest) + self.gap
        self.slot_of.set(k, latest)

    # -- adding -------------------------------------------------------------------------------

    def add(self, ref: Capability | CapabilityRef, k: Any, x: int, n: int) -> None:
        """``n`` records of key ``k`` at event time ``x``: extend the session that takes
        ``x``, merging any other that ``x`` bridges, or open a new one."""
        self._fit(x, x)
        i = self.slot_of.get(k)
        if i is None:
            self.slot_of.set(k, self._open(ref, k, x, n))
            return
        slots = [i, *self.older[k]] if self.has_older[i] else [i]
        gap, start, last, count = self.gap, self.start, self.last, self.count
        hit = None
        merged = []
        for i in slots:
            s, e = start[i], last[i]
            if not s - gap < x < e + gap:
                continue
            if hit is None:
                hit = i
                old_emit = int(self.emit[i])
                if x < s:
                    start[i] = x
                elif x > e:
                    last[i] = x
                count[i] += n
            else:  # x bridges ``hit`` and ``i``: fold ``i`` into ``hit``
                if s < start[hit]:
                    start[hit] = s
                if e > last[hit]:
                    last[hit] = e
                count[hit] += count[i]
                self._unref_emit(int(self.emit[i]))
                self._free(i)
                merged.append(i)
        if hit is None:
            self._arrange(k, [*slots, self._open(ref, k, x, n)])
            return
        if len(slots) > 1:
            self._arrange(k, [i for i in slots if i not in merged])
        emit_at = int(last[hit]) + gap + self.lateness
        if emit_at != old_emit:
            self.emit[hit] = emit_at
            self._unref_emit(old_emit)
            self._ref_emit(ref, emit_at, 1, hit)

    def add_counts_at(
        self, ref: Capability | CapabilityRef, x: int, keys: list, counts: list[int]
    ) -> None:
        """Add ``counts[j]`` records of ``keys[j]`` at event time ``x`` for every ``j``
        (``keys`` distinct), vectorized over the keys whose latest session takes ``x`` and
        the keys without a session."""
        self._fit(x, x)
        if not keys:
            return
        gap = self.gap
        emit_at = x + gap + self.lateness
        slots = self.slot_of.lookup(keys)
        ns = np.array(counts, dtype=self.count.dtype)
        known = slots >= 0
        pos = np.flatnonzero(known)
        fresh = np.flatnonzero(~known)
        others = _EMPTY
        if len(pos):
            s = slots[pos]
            start, last = self.start[s], self.last[s]
            takes = (start - gap < x) & (x < last + gap)
            if self.older:  # and x cannot bridge to an older session
                takes &= ~self.has_older[s] | (self.older_end[s] <= x)
            if not takes.all():
                after = last + gap <= x  # a new latest session, after every other one
                renew = pos[after]
                if len(renew):
                    self._open_many(ref, keys, renew, x, ns, emit_at, s[after], last[after])
                others = pos[~takes & ~after]
                s, start, last = s[takes], start[takes], last[takes]
                pos = pos[takes]
            self.count[s] += ns[pos]
            earlier = x < start
            if earlier.any():
                self.start[s[earlier]] = x
            later = last < x
            if later.any():
                moved = s[later]
                self.last[moved] = x
                olds = self.emit[moved]
                self.emit[moved] = emit_at
                for old, n in _tally(olds):
                    self._unref_emit(old, n)
                self._ref_emit(ref, emit_at, len(moved), moved)
        for j in others.tolist():  # the general path, one key at a time
            self.add(ref, keys[j], x, counts[j])
        if len(fresh):
            self._open_many(ref, keys, fresh, x, ns, emit_at)

    def _open_many(
        self,
        ref: Capability | CapabilityRef,
        keys: list,
        which: np.ndarray,
        x: int,
        ns: np.ndarray,
        emit_at: int,
        latest: np.ndarray | None = None,
        latest_last: np.ndarray | None = None,
    ) -> None:
        """Open a session at ``x`` for each ``keys[j]``, ``j`` in ``which`` (counts ``ns[j]``):
        keys without a session, or (``latest`` given: their current latest slots, and
        ``latest_last`` those sessions' ``last``) keys whose sessions all end before ``x``,
        which then become older sessions."""
        new = self._take(len(which))
        idx = np.array(new, dtype=np.int64)
        opened = [keys[j] for j in which.tolist()]
        self.key_at[idx] = np.fromiter(opened, dtype=object, count=len(opened))
        self.start[idx] = x
        self.last[idx] = x
        self.count[idx] = ns[which]
        self.emit[idx] = emit_at
        self.used[idx] = True
        if latest is None:
            self.has_older[idx] = False
            self.slot_of.assign(opened, idx)
        else:
            self.has_older[idx] = True
            self.older_end[idx] = latest_last + self.gap
            self.slot_of.reassign(opened, idx)
            older = self.older
            for k, i in zip(opened, latest.tolist()):
                rest = older.get(k)
                if rest is None:
                    older[k] = [i]
                else:
                    rest.append(i)
        self._ref_emit(ref, emit_at, len(new), idx)

    # -- emitting -----------------------------------------------------------------------------

    def release(self, frontier: Frontier, emit: Callable[[Any, int, list], None]) -> None:
        """Emit and forget every session whose emission time has every earlier time complete
        (``not frontier.less_than(E)``), in emission-time order: ``emit(capability, E,
        results)`` with ``results`` the ``(key, start, end, count)`` of the sessions emitted at
        ``E``; then move the token once, to the least ``E`` still pending (or drop it).

        All the ready ``E`` s are retired together: their candidate slots are gathered (per
        ``E``, its slot arrays, then its single slots, in the order they were sent there),
        checked and read in one pass of array operations, and the results cut per ``E``.  With
        fine-grained event times nearly every session has an ``E`` of its own, so per-``E``
        array work would dominate."""
        token = self.token
        if token.cap is None:  # nothing pending
            return
        closing = self.closing
        times: list[int] = []  # the ready E's, least first
        lives: list[int] = []  # live sessions at each
        sizes: list[int] = []  # candidate slots of each
        pieces: list[Any] = []  # the candidates, as arrays; single slots gathered in ``flat``
        flat: list[int] = []
        while True:
            emit_at = token.least()
            if emit_at is None or frontier.less_than(emit_at):
                break
            times.append(emit_at)
            lives.append(token.discard(emit_at))
            chunks = closing.pop(emit_at)
            if len(chunks) == 1 and type(chunks[0]) is int:  # the fine-grained case
                flat.append(chunks[0])
                sizes.append(1)
                continue
            size = 0
            for c in chunks:
                if type(c) is not int:
                    if flat:
                        pieces.append(np.array(flat, dtype=np.int64))
                        flat = []
                    pieces.append(c)
                    size += len(c)
            for c in chunks:
                if type(c) is int:
                    flat.append(c)
                    size += 1
            sizes.append(size)
        if times:
            if flat:
                pieces.append(np.array(flat, dtype=np.int64))
            self._retire(times, lives, sizes, pieces, emit)
        token.settle()

    def _retire(
        self,
        times: list[int],
        lives: list[int],
        sizes: list[int],
        pieces: list[Any],
        emit: Callable[[Any, int, list], None],
    ) -> None:
        """Emit and free the live sessions among the candidates (``pieces`` concatenated,
        ``sizes[j]`` of them sent to ``times[j]``)."""
        cands = np.concatenate(pieces) if len(pieces) > 1 else pieces[0].astype(np.int64)
        which = np.repeat(np.arange(len(times)), sizes)  # the E (index) of each candidate
        labels = np.array(times, dtype=self.emit.dtype)[which]
        keep = self.used[cands] & (self.emit[cands] == labels)
        done, which = cands[keep], which[keep]
        per = np.bincount(which, minlength=len(times))
        if (per != np.array(lives)).any():
            # A freed slot reused for a session sent to the same E again: the E's live
            # sessions are its distinct slots (in slot order, as np.unique gives them).
            parts, marks = [], []
            bounds = np.concatenate(([0], np.cumsum(per)))
            for j, live in enumerate(lives):
                seg = done[bounds[j] : bounds[j + 1]]
                if len(seg) != live:
                    seg = np.unique(seg)
                parts.append(seg)
                marks.append(len(seg))
            done = np.concatenate(parts)
            per = np.array(marks)
        keys = self.key_at[done].tolist()
        results = list(
            zip(
                keys,
                self.start[done].tolist(),
                (self.last[done] + self.gap).tolist(),
                self.count[done].tolist(),
            )
        )
        self.used[done] = False
        self.key_at[done] = None
        self.free.extend(done.tolist())
        if self.older:
            # A key's older sessions end first, so a released latest session is its only one
            # (released after its older ones); a released older session leaves the latest in
            # place.
            latest = self.slot_of.lookup(keys) == done
            if not latest.all():
                for j in np.flatnonzero(~latest).tolist():  # the older ones only
                    k = keys[j]
                    rest = self.older[k]
                    rest.remove(int(done[j]))
                    if not rest:
                        del self.older[k]
                        self.has_older[self.slot_of.get(k)] = False
                keys = [k for k, m in zip(keys, latest.tolist()) if m]
        self.slot_of.forget(keys)
        cap, i = self.token.cap, 0
        for emit_at, n in zip(times, per.tolist()):
            emit(cap, emit_at, results[i : i + n])
            i += n

    # -- introspection and snapshots ------------------------------------------------------------

    def size(self) -> int:
        """Open sessions plus pending emission times."""
        return len(self.token) + len(self.slot_of) + sum(map(len, self.older.values()))

    def per_key(self) -> list[tuple[Any, list[tuple[int, int, int]]]]:
        """The open sessions by key, ``(key, [(start, last, count), ...])``: this operator's
        state for a snapshot (:mod:`pytimely.dataflow.snapshot`)."""
        start, last, count, older = self.start, self.last, self.count, self.older
        return [
            (k, [(int(start[i]), int(last[i]), int(count[i])) for i in [j, *older.get(k, ())]])
            for k, j in self.slot_of.items()
        ]

    def restore(self, cap: Capability, pairs: list[tuple[Any, Any]]) -> None:
        """Reopen the sessions of ``per_key`` pairs, minting the token from ``cap``."""
        for k, sessions in pairs:
            slots = []
            for start, last, count in sessions:
                self._fit(start, last)
                i = self._open(cap, k, last, count)
                self.start[i] = start
                slots.append(i)
            self._arrange(k, slots)
