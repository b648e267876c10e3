"""Batches, spines and traces: the indexed, shared, compacting state behind arrangements.

An *arrangement* (see :mod:`.arrange`) keeps a collection's updates indexed by key so that
many operators can look them up without each keeping a copy.  This module holds its state:

* a :class:`Batch` is an immutable set of updates, ``key -> [(val, time, diff), ...]``,
  consolidated (no two entries with the same ``(val, time)``, no zero diffs).  The arrange
  operator seals one each time its input frontier passes some of the updates it holds.
* a :class:`Trace` is the sequence of every batch sealed so far, kept as a *spine* in the
  manner of a log-structured merge tree: batches of similar size are merged into one, so
  that a trace of ``n`` updates has ``O(log n)`` batches and each update is merged
  ``O(log n)`` times.  Merging is *amortized*: a merge in progress advances by a bounded
  amount of work (fuel, counted in updates) each time a batch is inserted, so no single step
  pays for a large merge; until it ends, readers see its two inputs.
* merging also *compacts*: where both batches hold a key, its updates' times are advanced by
  the trace's compaction frontier (:func:`~.lattice.advance_by`) and updates that became
  equal are added up, so a trace over a long history shrinks to roughly one update per live
  ``(key, val)``.  A key only one batch holds keeps its list as it is (see :class:`_Merge`):
  a merge costs Python work for the smaller batch's keys only.

Sharing.  Every reader holds a :class:`TraceHandle`.  A handle names the times its reader
will still ask about (its *logical* frontier: it may ask for accumulations at times in the
future of that frontier only) and how many batches its reader has received through its
dataflow so far (its *acknowledged* count).  The trace compacts by the meet of all logical
frontiers, and merges only batches that every reader has acknowledged, so that a reader can
always see the trace exactly "as of the batches it has received" (:meth:`Trace.batches`):
joins need that to count every pair of updates once.

Batches are numbered in insertion order; a batch (sealed or merged) covers the numbers
``[seq_lo, seq_hi)``.  The alternatives not taken: sorted columnar batches (faster merges
with numpy, but keys and values here are arbitrary Python objects, and dict lookup by key is
what joins and reduces need), and eager merging (simple, but a step that triggers a large
merge would stall the worker for it).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from itertools import islice
from typing import Any

from .. import _native
from ..order import Product
from .lattice import TimeMemo, advance_by, less_equal, meet, meet_frontiers

__all__ = ["Batch", "Trace", "TraceHandle"]

#: Merge work (in updates) done per update inserted, and at least this much per insertion.
EFFORT_PER_UPDATE = 4
MIN_EFFORT = 256
#: How much larger an older batch may be than the newer one next to it before they merge, for
#: ``int`` times and for partially ordered ones (see ``Trace.merge_ratio``).
MERGE_RATIO_TOTAL = 2
MERGE_RATIO_PARTIAL = 4
#: Entries of a merge's larger batch copied (by one C call per chunk) per unit of fuel.
COPY_PER_FUEL = 16
#: Indexes up to this many keys are copied at once (about a millisecond), larger by chunks.
COPY_AT_ONCE = 1 << 16
#: A merge whose smaller batch holds up to this many updates is done in place (into the
#: larger batch's index, when nothing else holds it) and at once: about a millisecond.
IN_PLACE_AT_ONCE = 1 << 13
#: CPython's reference count (None elsewhere: merges then always copy).
_refcount = getattr(sys, "getrefcount", None)


class Batch:
    """Immutable, consolidated updates indexed by key: ``data[key] = [(val, time, diff)]``.
    (Immutable to everyone who can see it: a merge writes into the index of a batch only when
    nothing but the merge holds the batch any more, see :class:`_Merge`.)

    ``time`` is a time at or before every update's time (the batch's message time);
    ``seq_lo``/``seq_hi`` the insertion numbers it covers; ``size`` its number of updates.

    >>> b = Batch.from_updates([(("a", 1), 0, 1), (("a", 1), 0, 1), (("b", 2), 1, -1)], 0)
    >>> sorted(b.data.items()), b.size
    ([('a', [(1, 0, 2)]), ('b', [(2, 1, -1)])], 2)
    """

    __slots__ = ("data", "time", "seq_lo", "seq_hi", "size")

    def __init__(
        self, data: dict[Any, list[tuple[Any, Any, int]]], time: Any, size: int | None = None
    ) -> None:
        self.data = data
        self.time = time
        self.seq_lo = 0
        self.seq_hi = 0
        self.size = sum(map(len, data.values())) if size is None else size

    @classmethod
    def from_updates(cls, updates: list[tuple[Any, Any, int]], time: Any) -> Batch:
        """A batch of ``((key, val), time, diff)`` updates, consolidated (indexed by compiled
        code when the extension is built; :meth:`index` is the reference)."""
        compiled = _native.speedups
        if compiled is not None and type(updates) is list:
            indexed = compiled.index_updates(updates, time)
            if indexed is not None:
                return cls(indexed[0], time, indexed[1])
        return cls(cls.index(updates, time), time)

    @staticmethod
    def index(
        updates: list[tuple[Any, Any, int]], time: Any
    ) -> dict[Any, list[tuple[Any, Any, int]]]:
        """``key -> [(val, time, diff)]`` of ``((key, val), time, diff)`` updates, equal
        ``(key, val, time)`` added up and zero sums dropped, in the order of first occurrence.

        >>> Batch.index([(("a", 1), 0, 1), (("b", 2), 0, 1), (("a", 1), 0, -1)], 0)
        {'b': [(2, 0, 1)]}
        """
        sums: Any
        if updates and all(u[1] == time for u in updates):
            # One time (an epoch's updates, all at the batch's time): consolidate by record.
            by_record: dict[Any, int] = {}
            get_count = by_record.get
            for kv, _t, d in updates:
                by_record[kv] = get_count(kv, 0) + d
            sums = ((kv, time, d) for kv, d in by_record.items())
        else:
            acc: dict[tuple[Any, Any], int] = {}
            get = acc.get
            for kv, t, d in updates:
                kvt = (kv, t)
                acc[kvt] = get(kvt, 0) + d
            sums = ((kv, t, d) for (kv, t), d in acc.items())
        data: dict[Any, list[tuple[Any, Any, int]]] = {}
        for (k, v), t, d in sums:
            if d:
                entry = data.get(k)
                if entry is None:
                    data[k] = [(v, t, d)]
                else:
                    entry.append((v, t, d))
        return data

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return (
            f"Batch(keys={len(self.data)}, updates={self.size}, time={self.time!r}, "
            f"seq=[{self.seq_lo}, {self.seq_hi}))"
        )


def compact(
    updates: list[tuple[Any, Any, int]], since: list[Any] | None
) -> list[tuple[Any, Any, int]]:
    """``(val, time, diff)`` updates with times advanced by ``since`` (if given), consolidated.

    >>> compact([("x", 1, 1), ("x", 3, 1), ("y", 2, 1), ("y", 4, -1)], [5])
    [('x', 5, 2)]
    """
    return _Compactor(since or [])(updates)


def compactor(
    since: list[Any],
) -> Callable[[list[tuple[Any, Any, int]]], list[tuple[Any, Any, int]]]:
    """:func:`compact` by ``since`` for many lists: the advanced form of each distinct time is
    computed once for all of them.

    >>> by5 = compactor([5])
    >>> by5([("x", 1, 1), ("x", 3, 1)]), by5([("y", 2, 1), ("y", 6, 1)])
    ([('x', 5, 2)], [('y', 5, 1), ('y', 6, 1)])
    """
    return _Compactor(since)


class _Compactor:
    """Compaction by one frontier ``since``, called on many lists of ``(val, time, diff)``:
    each time is advanced (:func:`~.lattice.advance_by`) then equal ``(val, time)`` are added
    up and zero sums dropped.  The advanced form of each distinct time is computed once (a
    merge advances millions of updates but sees few distinct times, and ``advance_by`` of a
    ``Product`` is a Python call); a list of one update is advanced without a dict.
    """

    __slots__ = ("since", "floor", "advance")

    def __init__(self, since: list[Any]) -> None:
        self.since = since = list(since)
        # ``int`` times and a one-element frontier: advancing is ``max``, inline.
        self.floor = since[0] if len(since) == 1 and type(since[0]) is int else None
        self.advance = TimeMemo(lambda t: advance_by(t, since))

    def compiled_form(self) -> tuple[Any, dict[Any, Any] | None, Callable[[Any], Any]]:
        """``(floor, known, advance)``: this compaction as the compiled merges take it
        (``_speedups.merge_keys``): times advanced to ``max(t, floor)`` when ``floor`` is an
        ``int``, else by the memo ``advance`` whose answers ``known`` holds, and not at all
        when both are ``None`` (an empty frontier).

        >>> compactor([5]).compiled_form()[:2], compactor([]).compiled_form()[:2]
        ((5, None), (None, None))
        """
        since, memo = self.since, self.advance
        if not since or self.floor is not None:
            return self.floor, None, memo
        compiled = _native.speedups
        if compiled is not None and all(type(f) is Product for f in since):
            # Loop times advanced in C on a miss (a Python call for other shapes).
            return None, memo.known, partial(compiled.advance_product, tuple(since), Product, memo)
        return None, memo.known, memo

    def __call__(self, updates: list[tuple[Any, Any, int]]) -> list[tuple[Any, Any, int]]:
        since, f = self.since, self.floor
        if len(updates) == 1:  # consolidated already (nonzero): only its time may move
            v, t, d = updates[0]
            a = t if not since else (t if t >= f else f) if f is not None else self.advance(t)
            return list(updates) if a == t else [(v, a, d)]
        if f is not None and len(updates) <= 4:
            return _consolidate_few(updates, f)
        acc: dict[tuple[Any, Any], int] = {}
        get = acc.get
        if not since:
            for v, t, d in updates:
                vt = (v, t)
                acc[vt] = get(vt, 0) + d
        elif f is not None:
            for v, t, d in updates:
                vt = (v, t if t >= f else f)
                acc[vt] = get(vt, 0) + d
        else:
            advance = self.advance
            known = advance.known.get  # the memo's lookup inline, its call on a miss only
            for v, t, d in updates:
                a = known(t)
                if a is None:
                    a = advance(t)
                vt = (v, a)
                acc[vt] = get(vt, 0) + d
        return [(v, t, d) for (v, t), d in acc.items() if d]


def _consolidate_few(updates: list[tuple[Any, int, int]], f: int) -> list[tuple[Any, int, int]]:
    """:class:`_Compactor` for a handful of ``int``-time updates and the frontier ``[f]``: a
    scan of the (at most four) results beats building a dict.

    >>> _consolidate_few([("a", 5, 1), ("a", 7, -1), ("b", 7, 1)], 7)
    [('b', 7, 1)]
    """
    out: list[tuple[Any, int, int]] = []
    for v, t, d in updates:
        if t < f:
            t = f
        for i, (ov, ot, od) in enumerate(out):
            if ot == t and ov == v:
                od += d
                if od:
                    out[i] = (v, t, od)
                else:
                    del out[i]
                break
        else:
            out.append((v, t, d))
    return out


class _Merge:
    """Two adjacent batches being merged, a bounded amount of work per unit of fuel; reads
    see both until it ends.

    The batch with more keys is the *base*: its index is copied whole (at once up to
    :data:`COPY_AT_ONCE` keys, else in chunks of :data:`COPY_PER_FUEL` entries per unit of
    fuel), or written into in place when nothing but this merge holds the base and the other
    batch is small enough to merge in one call (:data:`IN_PLACE_AT_ONCE` updates).  Then
    each key of the other batch is merged (by ``_speedups.merge_keys`` when the extension is
    built, else by :meth:`_work`): a key the base lacks takes the other batch's list as it is
    (lists are immutable); a key in both gets the two lists concatenated (older first) and
    compacted by ``since``.  So a merge works key by key through the smaller batch
    only, and a key that no new update touched keeps its list, not advanced: its updates were
    consolidated when it was last touched, advancing alone changes no answer at a time in the
    future of ``since``, and the key is compacted again the next time an update meets it.
    """

    __slots__ = (
        "a",
        "b",
        "base",
        "started",
        "copying",
        "other",
        "keys",
        "pos",
        "data",
        "compact",
        "seq_lo",
        "seq_hi",
        "size",
        "base_is_a",
    )

    def __init__(self, a: Batch, b: Batch, since: list[Any]) -> None:
        self.a, self.b = a, b
        self.base_is_a = len(a.data) >= len(b.data)
        base, other = (a, b) if self.base_is_a else (b, a)
        self.base = base.data
        self.started = False
        self.copying: Any = None  # an iterator over the base's entries while it is copied
        self.other = other.data
        self.keys = list(other.data)
        self.pos = 0
        self.data: dict[Any, list[tuple[Any, Any, int]]] = {}
        self.compact = _Compactor(since)
        self.seq_lo, self.seq_hi = a.seq_lo, b.seq_hi
        self.size = a.size + b.size

    def parts(self) -> list[Batch]:
        return [self.a, self.b]

    def _may_merge_in_place(self) -> bool:
        """Whether the merge may write into the base's index instead of copying it: the other
        batch is small enough to merge in one call, and the base batch and its index are
        referenced by this merge alone (CPython's reference counts: nothing downstream, no
        import, no reader holds them)."""
        if _refcount is None:
            return False
        base, other = (self.a, self.b) if self.base_is_a else (self.b, self.a)
        if other.size > IN_PLACE_AT_ONCE:  # too long for one call
            return False
        # base: this merge's attribute, the name ``base``, the call's argument; its index:
        # base's attribute, ``self.base``, the call's argument.
        return _refcount(base) == 3 and _refcount(base.data) == 3

    def _start(self) -> None:
        """Start the merge: in place, into the base's index, when nothing else holds it and
        the other batch is small (then :meth:`work` finishes in one call: no reader may see
        the base half merged); else by a copy of the base's index."""
        self.started = True
        if self._may_merge_in_place():
            self.data = self.base
        else:
            self.copying = iter(self.base.items())

    def _copy(self, fuel: int) -> int:
        """Copy the base's entries while fuel lasts; the fuel left (the copy is done when
        ``copying`` is ``None``).  An index of up to :data:`COPY_AT_ONCE` keys is copied by
        one call (``dict.copy`` clones the table: twice the speed of copying by chunks)."""
        data = self.data
        if not data and len(self.base) <= COPY_AT_ONCE:
            self.data = self.base.copy()
            self.copying = None
            return fuel - len(self.base) // COPY_PER_FUEL
        chunk = max(fuel, 1) * COPY_PER_FUEL
        before = len(data)
        data.update(islice(self.copying, chunk))
        copied = len(data) - before
        if copied < chunk:
            self.copying = None
        return fuel - (copied + COPY_PER_FUEL - 1) // COPY_PER_FUEL

    def _work(self, pos: int, fuel: int) -> tuple[int, int]:
        """Merge the other batch's keys from ``pos`` until ``fuel`` updates are spent; the next
        position and the fuel left.  For ``int`` times and a one-time frontier ``f``
        (advancing is ``max``) a key with one update on each side is merged inline."""
        keys, data, compact_ = self.keys, self.data, self.compact
        f = compact_.floor
        base, other = self.base, self.other
        older_first = not self.base_is_a
        n = len(keys)
        size = self.size
        while pos < n and fuel > 0:
            key = keys[pos]
            pos += 1
            lo = other[key]
            lb = base.get(key)
            if lb is None:
                fuel -= 1
                data[key] = lo
                continue
            la, lb = (lo, lb) if older_first else (lb, lo)
            if f is not None and len(la) == 1 and len(lb) == 1:
                fuel -= 2
                va, ta, xa = la[0]
                vb, tb, xb = lb[0]
                if ta < f:
                    ta = f
                if tb < f:
                    tb = f
                if ta == tb and va == vb:
                    x = xa + xb
                    size -= 1 if x else 2
                    if x:
                        data[key] = [(va, ta, x)]
                    else:
                        del data[key]
                else:
                    data[key] = [(va, ta, xa), (vb, tb, xb)]
                continue
            updates = la + lb
            fuel -= len(updates)
            merged = compact_(updates)
            size -= len(updates) - len(merged)
            if merged:
                data[key] = merged
            else:
                del data[key]
        self.size = size
        return pos, fuel

    def work(self, fuel: int) -> tuple[int, Batch | None]:
        """Merge until ``fuel`` is spent; the fuel left and, once every key is merged, the
        merged batch."""
        if not self.started:
            self._start()
        in_place = self.data is self.base
        if in_place:  # all at once (bounded by the smaller batch)
            fuel = max(fuel, self.size + 1)
        if self.copying is not None:
            fuel = self._copy(fuel)
            if self.copying is not None:
                return 0, None
        compiled = _native.speedups
        if compiled is None:
            self.pos, fuel = self._work(self.pos, fuel)
        else:
            self.pos, fuel, dropped = compiled.merge_keys(
                self.keys,
                self.pos,
                fuel,
                self.other,
                self.base,
                self.data,
                not self.base_is_a,
                *self.compact.compiled_form(),
            )
            self.size -= dropped
        if self.pos < len(self.keys):
            assert not in_place, "an in-place merge ends in one call"
            return fuel, None
        batch = Batch(self.data, meet(self.a.time, self.b.time), self.size)
        batch.seq_lo, batch.seq_hi = self.seq_lo, self.seq_hi
        return max(fuel, 0), batch


class Trace:
    """Every batch of one arrangement on one worker, merged and compacted as readers allow.

    >>> t = Trace("demo", 0)
    >>> reader = t.handle(reads=True)
    >>> for i in range(4):
    ...     t.insert(Batch.from_updates([(("k", i), i, 1)], i))
    ...     reader.acknowledge(t.seq)
    >>> sorted(v for b in t.batches(reader.acked) for v, _t, _d in b.data["k"])
    [0, 1, 2, 3]
    >>> len(t.spine) < 4  # merged
    True
    """

    def __init__(self, name: str, minimum: Any) -> None:
        self.name = name
        self.spine: list[Batch | _Merge] = []
        self.seq = 0
        self.handles: list[TraceHandle] = []
        self.since: list[Any] = [minimum]
        self.upper: list[Any] = [minimum]
        self.minimum = minimum
        # Older batches are at most ``merge_ratio`` times the newer before they merge: more
        # batches cost readers a lookup each, fewer cost merges.  Under partially ordered times
        # (loops) a reduce reads each key's whole history, so reads weigh more (measured on
        # reachability: 4 beat 2 by 10%; on a count at int times 2 beat 4 by 7%).
        self.merge_ratio = MERGE_RATIO_TOTAL if type(minimum) is int else MERGE_RATIO_PARTIAL
        # Imports into other dataflows: each is told of every batch and upper, in order.
        self.listeners: list[Callable[[str, Any], None]] = []

    # -- writing ---------------------------------------------------------------------------

    def insert(self, batch: Batch) -> None:
        """Append a sealed batch (numbered next) and spend merge effort in proportion."""
        batch.seq_lo = self.seq
        self.seq += 1
        batch.seq_hi = self.seq
        self.spine.append(batch)
        for listener in self.listeners:
            listener("batch", batch)
        self.exert(EFFORT_PER_UPDATE * batch.size + MIN_EFFORT)

    def advance_upper(self, upper: list[Any]) -> None:
        """Record that every future batch holds only times in the future of ``upper``."""
        if upper != self.upper:
            self.upper = list(upper)
            for listener in self.listeners:
                listener("upper", self.upper)

    # -- reading ---------------------------------------------------------------------------

    def batches(self, acked: int | None = None) -> list[Batch]:
        """The batches numbered below ``acked`` (default: all), oldest first."""
        if acked is None:
            acked = self.seq
        out: list[Batch] = []
        for entry in self.spine:
            if entry.seq_hi <= acked:
                if type(entry) is _Merge:
                    out.append(entry.a)
                    out.append(entry.b)
                else:
                    out.append(entry)
            else:
                for part in entry.parts() if type(entry) is _Merge else [entry]:
                    if part.seq_hi <= acked:
                        out.append(part)
                    elif part.seq_lo < acked:
                        raise AssertionError(
                            f"trace {self.name!r}: batch {part!r} straddles acknowledged "
                            f"count {acked} (merged past a reader)"
                        )
                break
        return out

    def handle(self, reads: bool = False) -> TraceHandle:
        """A new handle at the current compaction frontier.  A reading handle (``reads``)
        also holds back merges past the batches it has acknowledged."""
        h = TraceHandle(self, list(self.since), reads)
        self.handles.append(h)
        return h

    # -- maintenance ------------------------------------------------------------------------

    def _physical(self) -> int:
        acked = [h.acked for h in self.handles if h.reads]
        return min(acked) if acked else self.seq

    def _refresh_since(self) -> None:
        frontiers = [h.frontier for h in self.handles if h.frontier]
        if frontiers:
            since = meet_frontiers(frontiers)
            # Never backwards: a new handle starts at the current since.
            if all(any(less_equal(s, t) for s in self.since) for t in since):
                self.since = since

    def exert(self, fuel: int) -> None:
        """Start merges the spine's shape asks for, then spend ``fuel`` on *each* merge in
        progress, replacing each finished one by its result.  (Sharing one budget oldest first
        let a large merge starve the small ones behind it: inside a loop the batches piled up
        and every reader scanned them all.)"""
        self._start_merges()
        spine = self.spine
        i = 0
        while i < len(spine):
            entry = spine[i]
            if type(entry) is _Merge:
                _left, done = entry.work(fuel)
                if done is not None:
                    if done.size:
                        spine[i] = done
                    else:
                        del spine[i]
                        continue
            i += 1
        self._start_merges()

    def _start_merges(self) -> None:
        # Geometric shape: sizes fall by more than ``merge_ratio`` from older to newer
        # batches.  Merge the newest adjacent pair of sealed batches that breaks it, if every
        # reader has acknowledged both, and repeat.
        physical = self._physical()
        spine = self.spine
        ratio = self.merge_ratio
        started = True
        while started:
            started = False
            for i in range(len(spine) - 1, 0, -1):
                a, b = spine[i - 1], spine[i]
                if (
                    type(a) is Batch
                    and type(b) is Batch
                    and b.seq_hi <= physical
                    and a.size <= ratio * b.size
                ):
                    spine[i - 1 : i + 1] = [_Merge(a, b, self.since)]
                    started = True
                    break

    def statistics(self) -> dict[str, Any]:
        """What the trace holds: batches, updates, merges in progress, frontiers.

        >>> Trace("t", 0).statistics()["batches"]
        0
        """
        return {
            "name": self.name,
            "batches": sum(2 if type(e) is _Merge else 1 for e in self.spine),
            "updates": sum(e.size for e in self.spine),
            "merging": sum(type(e) is _Merge for e in self.spine),
            "inserted": self.seq,
            "since": list(self.since),
            "upper": list(self.upper),
            "readers": len(self.handles),
        }

    def __repr__(self) -> str:
        s = self.statistics()
        return f"Trace({self.name!r}, batches={s['batches']}, updates={s['updates']})"


class TraceHandle:
    """A reader's hold on a shared :class:`Trace`.

    ``frontier`` is the logical compaction frontier: the reader asks only about times in its
    future, so the trace may advance older times up to it.  ``acked`` counts the batches the
    reader has received; a reading handle keeps the trace from merging batches past it.
    ``drop()`` releases both holds.  A handle obtained from
    :meth:`~pytimely.differential.Arrangement.trace_handle` can also bring the trace into
    another dataflow of the same worker (``import_into``).

    >>> t = Trace("demo", 0)
    >>> h = t.handle()
    >>> h.set_logical_compaction([3]); t.since
    [3]
    >>> h.drop(); t.handles
    []
    """

    __slots__ = ("trace", "frontier", "acked", "reads")

    def __init__(self, trace: Trace, frontier: list[Any], reads: bool) -> None:
        self.trace = trace
        self.frontier = frontier
        self.acked = 0
        self.reads = reads

    def set_logical_compaction(self, frontier: list[Any]) -> None:
        """Promise to ask only about times in the future of ``frontier`` from now on."""
        frontier = list(frontier)
        if frontier != self.frontier:
            self.frontier = frontier
            self.trace._refresh_since()

    def acknowledge(self, seq: int) -> None:
        """Record that the reader has received every batch numbered below ``seq``."""
        self.acked = seq

    def drop(self) -> None:
        """Release this handle's holds on the trace."""
        trace = self.trace
        if self in trace.handles:
            trace.handles.remove(self)
            trace._refresh_since()

    def clone(self) -> TraceHandle:
        """Another (non-reading) handle at this handle's frontier.

        >>> t = Trace("demo", 0)
        >>> t.handle().clone().frontier
        [0]
        """
        h = TraceHandle(self.trace, list(self.frontier), False)
        self.trace.handles.append(h)
        return h

    def accumulate(self, t: Any) -> list[tuple[tuple[Any, Any], int]]:
        """The trace's ``((key, val), count)`` at time ``t``, sorted (nonzero counts): right
        for any ``t`` in the future of this handle's frontier.

        >>> t = Trace("demo", 0)
        >>> h = t.handle()
        >>> t.insert(Batch.from_updates([(("k", "v"), 1, 1), (("k", "w"), 5, 1)], 1))
        >>> h.accumulate(2)
        [(('k', 'v'), 1)]
        """
        acc: dict[tuple[Any, Any], int] = {}
        for batch in self.trace.batches():
            for key, updates in batch.data.items():
                for v, u, d in updates:
                    if less_equal(u, t):
                        acc[key, v] = acc.get((key, v), 0) + d
        return sorted((kv, c) for kv, c in acc.items() if c)

    def import_into(self, scope: Any, name: str | None = None) -> Any:
        """The trace as an :class:`~pytimely.differential.Arrangement` of ``scope``, a
        dataflow of the same worker with the same kind of times: first what the trace holds
        now, then every batch the original dataflow adds.  What it holds may have been
        compacted up to this handle's frontier, so the imported arrangement is right at times
        in that frontier's future (hold the handle back as far as the new dataflow needs).

        >>> import pytimely as pt
        >>> import pytimely.differential as dd
        >>> def work(worker):
        ...     def first(scope):
        ...         session, people = dd.new_input(scope)
        ...         return session, people.arrange_by_key().trace_handle()
        ...     session, handle = worker.dataflow(first)
        ...     session.insert(("ann", "Paris")); session.advance_to(1); session.flush()
        ...     worker.step_while(lambda: handle.trace.upper == [0])
        ...     def second(scope):
        ...         imported = handle.import_into(scope)
        ...         return imported.as_collection().capture()
        ...     captured = worker.dataflow(second)
        ...     session.close()
        ...     return captured
        >>> pt.execute(work)[0].updates()
        [(('ann', 'Paris'), 0, 1)]
        """
        from .arrange import import_trace

        return import_trace(self, scope, name)

    def __repr__(self) -> str:
        return f"TraceHandle({self.trace.name!r}, frontier={self.frontier!r}, acked={self.acked})"
