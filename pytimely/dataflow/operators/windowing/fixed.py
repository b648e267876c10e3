"""Fixed windows (tumbling and sliding) over records: state per (key, window), released
when the frontier passes a window's emission time, with one token."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable
from itertools import compress, repeat
from operator import and_, floordiv, itemgetter, sub
from typing import TYPE_CHECKING, Any

from ....windows import Sliding, Tumbling
from ..tokens import LeastToken
from .checks import apply_user, check_time
from .kinds import Kind
from .sessions import read_event_times

if TYPE_CHECKING:
    from ...capability import Capability, CapabilityRef
    from ...ports import Frontier, InputPort, OutputPort

_first = itemgetter(0)
_second = itemgetter(1)


# -- fixed windows (tumbling, sliding) --------------------------------------------------------


class FixedWindows:
    """Open windows of one operator instance: emission time ``E`` -> ``key -> agg`` (for a
    fixed width, ``E`` identifies the window), and one :class:`LeastToken` at the least ``E``
    for all of them."""

    __slots__ = ("windows", "token")

    def __init__(self) -> None:
        self.windows: dict[int, dict] = {}
        self.token = LeastToken()

    def entry(self, ref: Capability | CapabilityRef, emit_at: int, kind: Kind) -> dict:
        """The aggregates of the window emitted at ``emit_at``, opened (noting ``emit_at`` as
        pending on the token, minted from the message ``ref`` if needed) if new."""
        aggs = self.windows.get(emit_at)
        if aggs is None:
            aggs = self.windows[emit_at] = kind.new_state()
            self.token.hold(ref, emit_at)
        return aggs

    def release(self, frontier: Frontier, emit: Callable[[Capability, int, dict], None]) -> None:
        """Emit and forget every window whose emission time ``E`` has every earlier time
        complete (``not frontier.less_than(E)``), in ``E`` order, each at ``E``; then move the
        token once, to the least ``E`` still open (or drop it)."""
        windows, token = self.windows, self.token
        if token.cap is None:  # nothing pending
            return
        for emit_at in token.ready(frontier):
            emit(token.cap, emit_at, windows.pop(emit_at))
        token.settle()

    def size(self) -> int:
        """Open windows plus their (key, aggregate) entries."""
        return len(self.windows) + sum(map(len, self.windows.values()))

    def per_key(self) -> list[tuple[Any, list[tuple[int, Any]]]]:
        """The open windows by key, ``(key, [(emission time, aggregate), ...])``: this
        operator's state for a snapshot (:mod:`pytimely.dataflow.snapshot`)."""
        by_key: dict[Any, list[tuple[int, Any]]] = {}
        for emit_at, aggs in self.windows.items():
            for k, agg in aggs.items():
                by_key.setdefault(k, []).append((emit_at, agg))
        return list(by_key.items())

    def restore(self, cap: Capability, pairs: list[tuple[Any, Any]], kind: Kind) -> None:
        """Reopen the windows of ``per_key`` pairs, minting the token from ``cap``."""
        for k, windows in pairs:
            for emit_at, agg in windows:
                self.entry(cap, emit_at, kind)[k] = agg


_MASK_WINDOWS = 4  # a batch spanning at most this many windows is split with one mask each


def _between(times: list, lo: int, hi: int, a: int, b: int) -> Any:
    """An iterator of ``a <= x < b`` for the ``times`` (in ``[lo, hi]``), in C: the one
    comparison that is needed when ``[a, b)`` covers one end of the range."""
    if a <= lo:
        return map(b.__gt__, times)
    if b > hi:
        return map(a.__le__, times)
    return map(and_, map(a.__le__, times), map(b.__gt__, times))


def fixed_logic(
    op: str,
    windower: Sliding,
    kind: Kind,
    key: Any,
    event_time: Any,
    lateness: int,
    state: FixedWindows,
) -> Callable:
    """Tumbling and sliding windows over records.

    With ``event_time=f`` a batch is grouped by window, not by record: ``f`` is mapped over
    the batch once; records before ``late_bound`` (the start of the first window still on
    time, see below) missed a window and go to ``.late``; the on-time windows that the
    batch's ``[min, max]`` event-time range meets are then filled with C-level iteration --
    the whole batch when it lies in one window (the common case), one comparison mask per
    window when it spans a few, a stable sort by window number for a tumbling batch spanning
    many -- so each window gets its records in arrival order, as a per-record loop would give
    them, and no Python code runs per record.
    """
    width, step, offset = windower.width, windower.step, windower.offset
    tumbling = isinstance(windower, Tumbling)
    ends_of = windower.ends_of
    name = kind.name
    with_values = name != "count"
    with_times = name == "collect"
    first_end_at = offset + width  # window ends are the times == first_end_at (mod step)

    def emit(out: OutputPort, cap: Capability, emit_at: int, aggs: dict) -> None:
        end = emit_at - lateness
        start = end - width
        if with_times:
            result = kind.result
            results = [(k, start, end, result(a)) for k, a in aggs.items()]
        else:  # counts and folds are their own results
            results = list(zip(aggs.keys(), repeat(start), repeat(end), aggs.values()))
        out.give_batch(cap, results, emit_at)

    def split(batch: list) -> tuple[list, Any]:
        if key is None:
            return list(map(_first, batch)), list(map(_second, batch)) if with_values else None
        return apply_user(op, "key", key, batch), batch

    def add(ref: CapabilityRef, emit_at: int, keys: Any, values: Any, times: Any) -> None:
        kind.add(op, state.entry(ref, emit_at, kind), keys, values, times)

    def add_masked(
        ref: CapabilityRef, emit_at: int, mask: Any, keys: list, values: Any, times: list
    ) -> None:
        """The records ``mask`` selects, if any (an empty window is never opened)."""
        mask = list(mask)
        if True not in mask:
            return
        kind.add(
            op,
            state.entry(ref, emit_at, kind),
            compress(keys, mask),
            compress(values, mask) if with_values else None,
            compress(times, mask) if with_times else None,
        )

    def add_sorted(
        ref: CapabilityRef, t: int, start: int, keys: Any, values: Any, times: Any
    ) -> None:
        """A tumbling batch spanning many windows: a stable sort by window number (arrival
        order within a window) and one slice per window; records before ``start`` are late."""
        number = list(map(floordiv, map(sub, times, repeat(offset)), repeat(width)))
        order = sorted(range(len(times)), key=number.__getitem__)
        pick = itemgetter(*order)
        numbers, keys = pick(number), pick(keys)
        values = pick(values) if with_values else None
        times = pick(times) if with_times else None
        n = len(numbers)
        i = bisect_left(numbers, (start - offset) // width)  # the first on-time window
        while i < n:
            w = numbers[i]
            j = bisect_right(numbers, w, i)
            add(
                ref,
                offset + (w + 1) * width + lateness,
                keys[i:j],
                values[i:j] if with_values else None,
                times[i:j] if with_times else None,
            )
            i = j

    def add_by_record(ref: CapabilityRef, t: int, keys: list, values: Any, times: list) -> None:
        """Sliding windows, a batch spanning many: group record indices by window."""
        groups: dict[int, list[int]] = {}
        for i, x in enumerate(times):
            for end in ends_of(x):
                emit_at = end + lateness
                if t < emit_at:
                    g = groups.get(emit_at)
                    if g is None:
                        groups[emit_at] = [i]
                    else:
                        g.append(i)
        for emit_at, idx in groups.items():
            add(
                ref,
                emit_at,
                [keys[i] for i in idx],
                [values[i] for i in idx] if with_values else None,
                [times[i] for i in idx] if with_times else None,
            )

    def by_event_time(ref: CapabilityRef, t: int, batch: list, late_out: OutputPort) -> None:
        times = read_event_times(op, event_time, batch)
        if not times:
            return
        lo, hi = min(times), max(times)
        # Window ``[e - width, e)`` is emitted at ``e + lateness``: on time iff that is
        # ``> t``, i.e. ``e > late_end``.  A record missed a window iff it missed its earliest
        # one, which ends at the first end ``> x``: iff ``x < late_bound``, the last end
        # ``<= late_end``.
        late_end = t - lateness
        late_bound = late_end - (late_end - first_end_at) % step
        if hi < late_bound:  # every record missed a window
            late_out.session(ref).give_batch(batch)
            if tumbling:
                return
        elif lo < late_bound:
            late_out.session(ref).give_batch(list(compress(batch, map(late_bound.__gt__, times))))
        # The on-time windows the records meet: ends ``e`` with ``e > max(lo, late_end)`` and
        # ``e - width <= hi``.
        m = lo if lo > late_end else late_end
        first = m - (m - first_end_at) % step + step
        last = hi + width - (hi - offset) % step
        if first > last:
            return
        keys, values = split(batch)
        if first == last and first - width <= lo:  # one window holds the whole batch
            add(ref, first + lateness, keys, values, times)
            return
        if last - first < _MASK_WINDOWS * step:
            for e in range(first, last + 1, step):
                a = e - width
                if a <= lo and e > hi:
                    add(ref, e + lateness, keys, values, times)
                else:
                    add_masked(
                        ref, e + lateness, _between(times, lo, hi, a, e), keys, values, times
                    )
        elif tumbling:
            add_sorted(ref, t, first - width, keys, values, times)
        else:
            add_by_record(ref, t, keys, values, times)

    def logic(inp: InputPort, out: OutputPort, late_out: OutputPort) -> None:
        for ref, batch in inp:
            t = ref.time
            check_time(op, t)
            if event_time is not None:
                by_event_time(ref, t, batch, late_out)
                continue
            keys, values = split(batch)  # the whole batch is in the same windows
            for end in ends_of(t):
                add(ref, end + lateness, keys, values, t)
        state.release(inp.frontier, lambda cap, e, aggs: emit(out, cap, e, aggs))

    return logic
