"""Event-time windows on timestamp tokens: ``window_fold``, ``window_count``,
``window_collect`` and ``window_join`` over the windowers of :mod:`pytimely.windows`.

Records are ``(key, value)`` pairs unless ``key=`` gives a key function (then the whole record
is the value).  They are exchanged by key (:class:`~pytimely.Exchange`: an int key to worker
``key % peers``, any other through ``stable_hash``), so every (key, window) lives on one worker.

**Event time and lateness.**  With ``event_time=None`` a record's timestamp *is* its event time
and nothing can be late.  With ``event_time=f``, ``f(record)`` (an int) is its event time and
the timestamp acts as the watermark:

* tumbling and sliding windows: a record is on time for its window ``[s, e)`` iff its
  timestamp is ``< e + lateness``.  A sliding record is added to every window it is on time
  for, and is sent (once, unchanged) to ``.late`` if it missed at least one of them — nothing
  leaves a window silently.
* sessions: a session ``[first, last + gap)`` may still grow by any record of event time up to
  ``last + gap - 1``, so a record of event time ``x`` is on time iff its timestamp is
  ``< x + 1 + lateness`` (``<= x + lateness``) — the tumbling rule for the unit window
  ``[x, x + 1)``.  This is what lets a closed session stay closed: no on-time record can reach
  it afterwards.

**Emission.**  The result of window ``[s, e)`` (a session's ``e`` is ``last + gap``) is
emitted at timestamp ``E = e + lateness``, exactly once, when the input frontier has *passed*
every time before ``E``: no frontier element is ``<= E - 1`` (``not frontier.less_than(E)``).
Every on-time record of the window has a timestamp ``<= E - 1``, so at that point all of them
have arrived — on every worker, since the frontier counts records in flight.  (Releasing when
the frontier merely *reaches* ``E - 1`` would be wrong: records at ``E - 1`` may still come.)

**Tokens.**  The operator drops its initial capability and holds at most **one**: a
:class:`~.tokens.LeastToken` at the least pending emission time ``E`` (minted from a received
message with ``delayed(E)``).  Every ready window or session is sent at its own ``E`` with it,
in ``E`` order; then, once per invocation, the token moves to the least ``E`` still pending, or
is dropped when nothing is.  So fine-grained event times (milliseconds, nanoseconds) cost no
capability, pointstamp or progress update per distinct ``E`` (the timestamp-tokens paper,
section 6.2): the operator talks to progress tracking once per invocation, however many
windows it closes.  Interest is ``IF_CAPABILITY``, so an idle windowing operator holds nothing
and is never woken.  State of an emitted window or session is deleted when it is emitted:
memory is bounded by the live (key, window) pairs (see :meth:`Windowed.state_size`).
``window_count(pt.Session(gap))`` with timestamps as event times counts in timestamp order (see
:func:`_session_count_logic`): batches that wait for an earlier time share one more token, at
the least waiting time.  ``window_count(pt.Session(gap), event_time=f)`` keeps its sessions
in dicts and its one token at the least pending heap entry
(:class:`~.event_sessions.EventTimeSessions`): event times as fine as the source's clock cost
a few dictionary operations per record.

**Grouping.**  With ``event_time=f``, a batch is assigned to windows as a whole where it can
be: one ``map`` of ``f``, then the whole batch into its window when its earliest and latest
event times share one (the common case), one C-level mask per window when it spans a few,
and a sort by window otherwise; records reach each window in arrival order either way, and
lateness is decided per window (see :func:`_fixed_logic`).

**Columnar path.**  When ``key`` is a column *name* (a ``str``), batches are numpy structured
arrays or Arrow record batches and ``window_count`` / ``window_fold`` aggregate vectorized:
the event-time column (``event_time=`` also a name, or ``None`` for the timestamp) is mapped to
windows with array arithmetic, keys are grouped with ``bincount`` (small non-negative int keys)
or a sort, and ``window_fold`` takes a numpy ufunc (``np.add``, ``np.maximum``, ...) over the
``value=`` column.  Results equal the record path with the same ufunc as ``fold``; late rows go
to ``.late`` as a batch of the input's type.
"""

from __future__ import annotations

import numbers
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Iterable
from itertools import compress, repeat
from operator import and_, floordiv, itemgetter, sub
from typing import TYPE_CHECKING, Any

from ...errors import OperatorError
from ...naming import describe_function
from ...progress.operate import FrontierInterest
from ...windows import Session, Sliding, Tumbling
from .. import snapshot
from ..channels import Exchange, Pact
from ..columnar import column, select
from ..stream import Stream
from .event_sessions import EventTimeSessions, event_session_logic
from .generic import OperatorBuilder
from .keyed import InTimeOrder
from .map import map_batch
from .session_counts import SessionCounts
from .tokens import LeastToken

if TYPE_CHECKING:
    from ..capability import Capability, CapabilityRef
    from ..operator import Frontier, InputPort, OperatorInfo, OutputPort

__all__ = [
    "Windowed",
    "WindowJoined",
    "window_fold",
    "window_count",
    "window_collect",
    "window_join",
]

_MISSING = object()
_first = itemgetter(0)
_second = itemgetter(1)


class Windowed:
    """What a windowing operator returns: ``output`` — ``(key, start, end, result)`` records,
    each at timestamp ``end + lateness`` — and ``late`` — the late records, unchanged, at
    their own timestamps.

    With ``lateness=5`` window ``[0, 10)`` takes records stamped up to 14 and answers at 15:

    >>> import pytimely as pt
    >>> def build(scope):
    ...     inp, clicks = scope.new_input()
    ...     counted = clicks.window_count(pt.Tumbling(10), event_time=lambda r: r[1], lateness=5)
    ...     out, late = counted.output.capture(), counted.late.capture()
    ...     inp.send(("ann", 3))
    ...     inp.advance_to(12)
    ...     inp.send(("ann", 8))  # on time: 12 < 10 + 5
    ...     inp.advance_to(15)
    ...     inp.send(("ann", 9))  # late
    ...     return out, late
    >>> out, late = pt.example(build)
    >>> out.extract(), late.extract()
    ([(15, [('ann', 0, 10, 2)])], [(15, [('ann', 9)])])
    """

    __slots__ = ("output", "late", "_state")

    def __init__(self, output: Stream, late: Stream, state: Any) -> None:
        self.output = output
        self.late = late
        self._state = state

    def state_size(self) -> int:
        """Live (key, window) aggregates plus pending emission times held by this worker's
        instance of the operator (``0`` when every window has been emitted).

        >>> import pytimely as pt
        >>> def build(scope):
        ...     inp, clicks = scope.new_input()
        ...     return inp, clicks.window_count(pt.Tumbling(10))
        >>> worker = pt.Worker()
        >>> inp, counted = worker.dataflow(build)
        >>> inp.send_batch([("ann", "home"), ("bob", "home"), ("ann", "cart")])
        >>> _ = worker.step()
        >>> counted.state_size()  # two counts in [0, 10), one emission time
        3
        >>> inp.close()
        >>> worker.run()
        >>> counted.state_size()
        0
        """
        return self._state.size()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} output={self.output!r} late={self.late!r}>"


class WindowJoined(Windowed):
    """What ``window_join`` returns: ``output`` — ``(key, start, end, left, right)`` — ``late``
    (late records of ``stream``) and ``other_late`` (late records of ``other``).

    >>> import pytimely as pt
    >>> def build(scope):
    ...     views_in, views = scope.new_input()
    ...     buys_in, buys = scope.new_input()
    ...     at = lambda r: r[1]
    ...     joined = views.window_join(buys, pt.Tumbling(10), event_time=at, other_event_time=at)
    ...     out, late = joined.output.capture(), joined.other_late.capture()
    ...     views_in.send(("ann", 2))
    ...     buys_in.send(("ann", 4))
    ...     views_in.advance_to(10)
    ...     buys_in.advance_to(10)
    ...     buys_in.send(("ann", 7))  # [0, 10) closed at 10: late
    ...     return out, late
    >>> out, late = pt.example(build)
    >>> out.extract(), late.extract()
    ([(10, [('ann', 0, 10, 2, 4)])], [(10, [('ann', 7)])])
    """

    __slots__ = ("other_late",)

    def __init__(self, output: Stream, late: Stream, other_late: Stream, state: Any) -> None:
        super().__init__(output, late, state)
        self.other_late = other_late


# -- checks and guarded user functions ----------------------------------------------------------


def _user_error(op: str, role: str, f: Any, record: Any, exc: BaseException) -> OperatorError:
    return OperatorError(
        f"{op}: {role} function {describe_function(f)} raised {type(exc).__name__}: {exc} "
        f"on record {record!r}",
        operator=op,
    )


def _apply(op: str, role: str, f: Callable, batch: list) -> list:
    """``[f(r) for r in batch]``, naming the operator, the function and the record on error."""
    try:
        return list(map(f, batch))
    except Exception as exc:
        for r in batch:
            try:
                f(r)
            except Exception:
                raise _user_error(op, role, f, r, exc) from exc
        raise


def _check_times(op: str, times: list, batch: list, what: str) -> list:
    """Event times must be ints (numpy integers are converted; bools refused)."""
    if list(map(type, times)).count(int) == len(times):  # all ints, checked in C
        return times
    out = []
    for x, r in zip(times, batch):
        if type(x) is int:
            out.append(x)
        elif isinstance(x, numbers.Integral) and not isinstance(x, bool):
            out.append(int(x))
        else:
            raise TypeError(f"{op}: event times must be ints, {what} gave {x!r} for record {r!r}")
    return out


def _check_windower(op: str, windower: Any, *, sessions: bool = True) -> None:
    if isinstance(windower, Sliding) or (sessions and isinstance(windower, Session)):
        return
    raise TypeError(
        f"{op}: windower must be pt.Tumbling, pt.Sliding or pt.Session, got {windower!r}"
    )


def _check_lateness(op: str, lateness: Any) -> int:
    if type(lateness) is not int or lateness < 0:
        raise ValueError(f"{op}: lateness must be a non-negative int, got {lateness!r}")
    return lateness


def _check_time(op: str, t: Any) -> None:
    if type(t) is not int:
        raise TypeError(
            f"{op}: windows need integer timestamps (event_time=None uses the timestamp), got {t!r}"
        )


# -- the aggregation kinds ------------------------------------------------------------------------


class _Kind:
    """How one (key, window) aggregate is built: ``count``, ``fold`` or ``collect``."""

    __slots__ = ("name", "init", "fold")

    def __init__(self, name: str, init: Any = None, fold: Any = None) -> None:
        self.name = name
        self.init = init
        self.fold = fold

    def new_state(self) -> dict:
        return Counter() if self.name == "count" else {}

    def add(self, op: str, state: dict, keys: Iterable, values: Any, times: Any) -> None:
        """Add records (parallel iterables of keys and values -- ``values`` is not read for
        counts; ``times`` their event times, an iterable or one int for all) to a window's
        ``key -> aggregate`` dict."""
        name = self.name
        if name == "count":
            state.update(keys)  # Counter: C-level counting
        elif name == "collect":
            if type(times) is int:
                for k, v in zip(keys, values):
                    lst = state.get(k)
                    if lst is None:
                        state[k] = [(times, v)]
                    else:
                        lst.append((times, v))
            else:
                for k, v, x in zip(keys, values, times):
                    lst = state.get(k)
                    if lst is None:
                        state[k] = [(x, v)]
                    else:
                        lst.append((x, v))
        else:
            init, fold, get = self.init, self.fold, state.get
            k = v = None
            try:
                for k, v in zip(keys, values):
                    acc = get(k, _MISSING)
                    if acc is _MISSING:
                        acc = init()
                    state[k] = fold(acc, v)
            except Exception as exc:
                raise _user_error(op, "fold", fold, (k, v), exc) from exc

    def result(self, aggregate: Any) -> Any:
        if self.name == "collect":
            aggregate.sort(key=_first)  # stable: ties keep arrival order
            return [v for _x, v in aggregate]
        return aggregate


# -- fixed windows (tumbling, sliding) --------------------------------------------------------


class _FixedWindows:
    """Open windows of one operator instance: emission time ``E`` -> ``key -> agg`` (for a
    fixed width, ``E`` identifies the window), and one :class:`LeastToken` at the least ``E``
    for all of them."""

    __slots__ = ("windows", "token")

    def __init__(self) -> None:
        self.windows: dict[int, dict] = {}
        self.token = LeastToken()

    def entry(self, ref: Capability | CapabilityRef, emit_at: int, kind: _Kind) -> dict:
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
        return len(self.windows) + sum(map(len, self.windows.values()))

    def per_key(self) -> list[tuple[Any, list[tuple[int, Any]]]]:
        """The open windows by key, ``(key, [(emission time, aggregate), ...])``: this
        operator's state for a snapshot (:mod:`pytimely.dataflow.snapshot`)."""
        by_key: dict[Any, list[tuple[int, Any]]] = {}
        for emit_at, aggs in self.windows.items():
            for k, agg in aggs.items():
                by_key.setdefault(k, []).append((emit_at, agg))
        return list(by_key.items())

    def restore(self, cap: Capability, pairs: list[tuple[Any, Any]], kind: _Kind) -> None:
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


def _fixed_logic(
    op: str,
    windower: Sliding,
    kind: _Kind,
    key: Any,
    event_time: Any,
    lateness: int,
    state: _FixedWindows,
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
        return _apply(op, "key", key, batch), batch

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
        times = _event_times(op, event_time, batch)
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
            _check_time(op, t)
            if event_time is not None:
                by_event_time(ref, t, batch, late_out)
                continue
            keys, values = split(batch)  # the whole batch is in the same windows
            for end in ends_of(t):
                add(ref, end + lateness, keys, values, t)
        state.release(inp.frontier, lambda cap, e, aggs: emit(out, cap, e, aggs))

    return logic


# -- sessions ------------------------------------------------------------------------------------


class _Session:
    """One open session of one key: ``[start, last + gap)``; ``agg`` is the list of its
    ``(event time, value)`` (``fold`` and ``collect``: a fold cannot merge two accumulators, so
    values are kept and folded in event-time order at emission).  Counts live column-wise in
    :class:`~.session_counts.SessionCounts`."""

    __slots__ = ("key", "start", "last", "emit_at", "agg", "alive")

    def __init__(self, key: Any, x: int, agg: Any) -> None:
        self.key = key
        self.start = x
        self.last = x
        self.emit_at: int | None = None  # set by _Sessions._retarget
        self.agg = agg
        self.alive = True


class _Sessions:
    """Open sessions of one ``window_fold`` / ``window_collect`` instance.

    * ``by_key``: key -> its open sessions (disjoint; usually one);
    * ``token``: a :class:`LeastToken` counting, per emission time ``E``, the live sessions
      emitted at ``E``, with one capability at the least such ``E``;
    * ``closing``: ``E`` -> sessions that were (and may still be) emitted at ``E``, for every
      ``E`` the token has pending.
    """

    __slots__ = ("gap", "lateness", "by_key", "token", "closing")

    def __init__(self, gap: int, lateness: int) -> None:
        self.gap = gap
        self.lateness = lateness
        self.by_key: dict[Any, list[_Session]] = {}
        self.token = LeastToken()
        self.closing: dict[int, list[_Session]] = {}

    def _retarget(self, s: _Session, ref: Capability | CapabilityRef) -> None:
        """Move ``s`` to the emission time its ``last`` now implies."""
        emit_at = s.last + self.gap + self.lateness
        old = s.emit_at
        if emit_at == old:
            return
        if old is not None:
            self._unref(old)
        s.emit_at = emit_at
        if self.token.hold(ref, emit_at):
            self.closing[emit_at] = [s]
        else:
            self.closing[emit_at].append(s)

    def _unref(self, emit_at: int) -> None:
        if self.token.done(emit_at):
            del self.closing[emit_at]

    def add(self, ref: Capability | CapabilityRef, k: Any, x: int, agg: list) -> None:
        """Add to ``k``'s sessions the records of ``agg`` (a list of ``(x, value)``), all at
        event time ``x``."""
        gap = self.gap
        sessions = self.by_key.get(k)
        if sessions is None:
            s = _Session(k, x, agg)
            self.by_key[k] = [s]
            self._retarget(s, ref)
            return
        hit = None
        for s in sessions:
            if s.start - gap < x < s.last + gap:
                if hit is None:
                    hit = s
                    if x < s.start:
                        s.start = x
                    elif x > s.last:
                        s.last = x
                    s.agg.extend(agg)
                else:  # x bridges ``hit`` and ``s``: merge ``s`` into ``hit``
                    hit.start = min(hit.start, s.start)
                    hit.last = max(hit.last, s.last)
                    hit.agg.extend(s.agg)
                    s.alive = False
                    self._unref(s.emit_at)
        if hit is None:
            s = _Session(k, x, agg)
            sessions.append(s)
            self._retarget(s, ref)
            return
        if len(sessions) > 1:
            sessions[:] = [s for s in sessions if s.alive]
        self._retarget(hit, ref)

    def release(self, frontier: Frontier, emit: Callable[[Capability, int, list], None]) -> None:
        """Emit and forget every session whose emission time has every earlier time
        complete, in emission-time order, each at its time; then move the token once."""
        token, closing, by_key = self.token, self.closing, self.by_key
        if token.cap is None:  # nothing pending
            return
        for emit_at in token.ready(frontier):
            done = [s for s in closing.pop(emit_at) if s.alive and s.emit_at == emit_at]
            for s in done:
                s.alive = False
                rest = [o for o in by_key[s.key] if o is not s]
                if rest:
                    by_key[s.key] = rest
                else:
                    del by_key[s.key]
            emit(token.cap, emit_at, done)
        token.settle()

    def size(self) -> int:
        return len(self.token) + sum(map(len, self.by_key.values()))

    def per_key(self) -> list[tuple[Any, list[tuple[int, int, Any]]]]:
        """The open sessions by key, ``(key, [(start, last, aggregate), ...])``: this
        operator's state for a snapshot (:mod:`pytimely.dataflow.snapshot`)."""
        return [
            (k, [(s.start, s.last, s.agg) for s in sessions]) for k, sessions in self.by_key.items()
        ]

    def restore(self, cap: Capability, pairs: list[tuple[Any, Any]]) -> None:
        """Reopen the sessions of ``per_key`` pairs, minting the token from ``cap``."""
        for k, sessions in pairs:
            for start, last, agg in sessions:
                s = _Session(k, start, agg)
                s.last = last
                self.by_key.setdefault(k, []).append(s)
                self._retarget(s, cap)


def _split_keys(op: str, key: Any, batch: list, values: bool) -> tuple[list, Any]:
    """The keys of ``batch`` and (``values``) its values: ``(key, value)`` pairs when ``key``
    is ``None``, else ``key(record)`` and the whole record."""
    if key is None:
        return list(map(_first, batch)), list(map(_second, batch)) if values else None
    return _apply(op, "key", key, batch), batch


def _event_times(op: str, event_time: Callable, batch: list) -> list:
    times = _apply(op, "event_time", event_time, batch)
    return _check_times(op, times, batch, describe_function(event_time))


def _session_logic(
    op: str,
    windower: Session,
    kind: _Kind,
    key: Any,
    event_time: Any,
    lateness: int,
    state: _Sessions,
) -> Callable:
    """Sessions that fold or collect values: each open session keeps its ``(x, value)`` pairs
    (a fold cannot merge two accumulators), folded in event-time order at emission."""
    gap = windower.gap

    def result(s: _Session) -> Any:
        if kind.name == "collect":
            return kind.result(s.agg)
        s.agg.sort(key=_first)
        init, fold = kind.init, kind.fold
        acc = init()
        v = None
        try:
            for _x, v in s.agg:
                acc = fold(acc, v)
        except Exception as exc:
            raise _user_error(op, "fold", fold, (s.key, v), exc) from exc
        return acc

    def emit(out: OutputPort, cap: Capability, emit_at: int, done: list) -> None:
        results = [(s.key, s.start, s.last + gap, result(s)) for s in done]
        out.give_batch(cap, results, emit_at)

    def logic(inp: InputPort, out: OutputPort, late_out: OutputPort) -> None:
        add = state.add
        for ref, batch in inp:
            t = ref.time
            _check_time(op, t)
            keys, values = _split_keys(op, key, batch, True)
            if event_time is None:
                # One event time for the whole batch: group by key first.
                grouped: dict[Any, list] = {}
                for k, v in zip(keys, values):
                    g = grouped.get(k)
                    if g is None:
                        grouped[k] = [(t, v)]
                    else:
                        g.append((t, v))
                for k, g in grouped.items():
                    add(ref, k, t, g)
                continue
            late = []
            for r, k, v, x in zip(batch, keys, values, _event_times(op, event_time, batch)):
                if t <= x + lateness:
                    add(ref, k, x, [(x, v)])
                else:
                    late.append(r)
            if late:
                late_out.session(ref).give_batch(late)
        state.release(inp.frontier, lambda cap, e, done: emit(out, cap, e, done))

    return logic


def _drained_first(
    op: str, name: str, waiting: InTimeOrder, per_key: Callable[[], list]
) -> Callable[[], list]:
    """``per_key`` for a snapshot, refused (naming the operator) while batches are stashed:
    a snapshot is taken at a completed epoch, when nothing waits for an earlier time."""

    def source() -> list:
        waiting.check_drained(op, name)
        return per_key()

    return source


def _session_count_logic(op: str, key: Any, state: SessionCounts, waiting: InTimeOrder) -> Callable:
    """Session counts with timestamps as event times: a batch is counted per key
    (``Counter``, in C) and applied to the column-wise :class:`SessionCounts` at its time.
    (Event times carried in the records go to :class:`~.event_sessions.EventTimeSessions`.)

    Batches are applied in timestamp order (``waiting`` stashes a batch until every earlier
    time is complete, holding one capability for all the stashed times, at the least).
    Workers' inputs are not in step: a worker ahead in time would otherwise open sessions that
    a lagging worker's records then arrive *before*, and every such record takes the slow
    one-key path of :meth:`SessionCounts.add` (2% to a fifth of them in a 2-worker run of
    ``bench/windows.py``, growing with the skew).  In order, every key takes the vectorized
    paths.  The stash adds no latency to results: a session holding a record at ``t`` is
    emitted at ``E > t``, once the frontier has passed ``E - 1 >= t``, and by then the record
    has been applied."""

    def count_at(send: Capability | CapabilityRef, t: int, batch: list, _out: Any) -> None:
        _check_time(op, t)
        counts = Counter(_split_keys(op, key, batch, False)[0])
        state.add_counts_at(send, t, list(counts), list(counts.values()))

    def logic(inp: InputPort, out: OutputPort, late_out: OutputPort) -> None:
        frontier = inp.frontier
        waiting.apply_ready(frontier, count_at, None)
        waiting.admit(inp, count_at, None)
        state.release(frontier, lambda cap, e, results: out.give_batch(cap, results, e))

    return logic


# -- the columnar path ---------------------------------------------------------------------------


def _group(keys: Any, values: Any, ufunc: Any) -> tuple[list, list]:
    """Distinct keys and, per key, the count (``ufunc is None``) or ``ufunc.reduce`` of its
    values, both as Python lists."""
    import numpy as np

    n = len(keys)
    if ufunc is None and keys.dtype.kind in "iu" and n:
        lo, hi = int(keys.min()), int(keys.max())
        if lo >= 0 and hi < 4 * n + 65536:  # dense small ids: O(n) counting
            counts = np.bincount(keys)
            present = np.flatnonzero(counts)
            return present.tolist(), counts[present].tolist()
    if ufunc is None:
        uniq, counts = np.unique(keys, return_counts=True)
        return uniq.tolist(), counts.tolist()
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    return sorted_keys[starts].tolist(), ufunc.reduceat(values[order], starts).tolist()


def _columnar_logic(
    op: str,
    windower: Sliding,
    kind: _Kind,
    key: str,
    event_time: Any,
    value: Any,
    lateness: int,
    state: _FixedWindows,
) -> Callable:
    import numpy as np

    width, step, offset = windower.width, windower.step, windower.offset
    n_windows = windower.max_windows()
    ufunc = kind.fold if kind.name == "fold" else None
    init = kind.init

    def merge(aggs: dict, keys: list, partials: list) -> None:
        get = aggs.get
        if ufunc is None:
            for k, c in zip(keys, partials):
                aggs[k] = get(k, 0) + c
        else:
            for k, p in zip(keys, partials):
                acc = get(k, _MISSING)
                aggs[k] = ufunc(init() if acc is _MISSING else acc, p)

    def emit(out: OutputPort, cap: Capability, emit_at: int, aggs: dict) -> None:
        end = emit_at - lateness
        start = end - width
        out.give_batch(
            cap, list(zip(aggs.keys(), repeat(start), repeat(end), aggs.values())), emit_at
        )

    def logic(inp: InputPort, out: OutputPort, late_out: OutputPort) -> None:
        for ref, batch in inp:
            t = ref.time
            _check_time(op, t)
            keys = column(batch, key)
            values = column(batch, value) if ufunc is not None else None
            if event_time is None:
                xs = None
                last = t - (t - offset) % step
                for j in range(n_windows):
                    s = last - j * step
                    if s <= t - width:
                        break
                    aggs = state.entry(ref, s + width + lateness, kind)
                    merge(aggs, *_group(keys, values, ufunc))
                continue
            xs = column(batch, event_time)
            if xs.dtype.kind not in "iu":
                raise TypeError(
                    f"{op}: event times must be integers, column {event_time!r} has dtype "
                    f"{xs.dtype} (first row {batch[:1]!r})"
                )
            last = xs - (xs - offset) % step  # latest window start containing each row
            missed = np.zeros(len(xs), dtype=bool)
            for j in range(n_windows):
                starts = last - j * step
                member = starts > xs - width
                emit_ats = starts + (width + lateness)
                on_time = member & (emit_ats > t)
                missed |= member & ~on_time
                if not on_time.any():
                    continue
                if on_time.all():
                    sel_e, sel_k, sel_v = emit_ats, keys, values
                else:
                    sel_e, sel_k = emit_ats[on_time], keys[on_time]
                    sel_v = values[on_time] if values is not None else None
                lo, hi = int(sel_e.min()), int(sel_e.max())
                if lo == hi:  # the common case: one window per batch and offset
                    merge(state.entry(ref, lo, kind), *_group(sel_k, sel_v, ufunc))
                    continue
                for e in np.unique(sel_e).tolist():
                    m = sel_e == e
                    merge(
                        state.entry(ref, e, kind),
                        *_group(sel_k[m], sel_v[m] if sel_v is not None else None, ufunc),
                    )
            if missed.any():
                late_out.session(ref).give_batch(select(batch, missed))
        state.release(inp.frontier, lambda cap, e, aggs: emit(out, cap, e, aggs))

    return logic


# -- building --------------------------------------------------------------------------------------


def _build(
    stream: Stream,
    op: str,
    windower: Any,
    kind: _Kind,
    key: Any,
    event_time: Any,
    lateness: int,
    name: str,
    value: Any = None,
) -> Windowed:
    _check_windower(op, windower)
    lateness = _check_lateness(op, lateness)
    state_source: Callable[[], list] | None = None  # for snapshots; else ``state.per_key``
    if isinstance(key, str):
        if not isinstance(windower, Sliding):
            raise TypeError(
                f"{op}: the columnar path (key={key!r}) supports pt.Tumbling and "
                f"pt.Sliding, not {windower!r}"
            )
        if event_time is not None and not isinstance(event_time, str):
            raise TypeError(f"{op}: with a key column, event_time must be a column name too")
        if kind.name == "fold":
            if not isinstance(value, str) or not hasattr(kind.fold, "reduceat"):
                raise TypeError(
                    f"{op}: the columnar path needs value=<column name> and a numpy ufunc as "
                    f"fold (np.add, np.maximum, ...), got value={value!r}, fold={kind.fold!r}"
                )
        elif kind.name == "collect":
            raise TypeError(f"{op}: window_collect has no columnar path; use a key function")
        pact: Pact = Exchange(column=key)
        state: Any = _FixedWindows()
        logic = _columnar_logic(op, windower, kind, key, event_time, value, lateness, state)
    else:
        if key is not None and not callable(key):
            raise TypeError(f"{op}: key must be a function or None, got {key!r}")
        if event_time is not None and not callable(event_time):
            raise TypeError(f"{op}: event_time must be a function or None, got {event_time!r}")
        pact = Exchange(_first) if key is None else Exchange(key)
        if isinstance(windower, Session) and kind.name == "count" and event_time is not None:
            # Event times in the records, as fine as the source's clock: sessions in dicts,
            # a few dictionary operations per record (:mod:`.event_sessions`).
            state = EventTimeSessions(windower.gap, lateness)
            logic = event_session_logic(
                op,
                lambda batch: _split_keys(op, key, batch, False)[0],
                lambda batch: _event_times(op, event_time, batch),
                lateness,
                state,
                _check_time,
            )
        elif isinstance(windower, Session) and kind.name == "count":
            state = SessionCounts(windower.gap, lateness)
            waiting = InTimeOrder()
            logic = _session_count_logic(op, key, state, waiting)
            state_source = _drained_first(op, name, waiting, state.per_key)
        elif isinstance(windower, Session):
            state = _Sessions(windower.gap, lateness)
            logic = _session_logic(op, windower, kind, key, event_time, lateness, state)
        else:
            state = _FixedWindows()
            logic = _fixed_logic(op, windower, kind, key, event_time, lateness, state)

    builder = OperatorBuilder(name, stream.scope)
    builder.new_input(stream, pact, interest=FrontierInterest.IF_CAPABILITY)
    builder.new_output()
    builder.new_output()

    def ctor(caps: list[Capability], info: OperatorInfo) -> Callable[..., None]:
        restored = snapshot.attach(info, state_source or state.per_key)
        if restored:
            if isinstance(state, (_Sessions, SessionCounts, EventTimeSessions)):
                state.restore(caps[0], restored)
            else:
                state.restore(caps[0], restored, kind)
        for cap in caps:
            cap.drop()  # hold nothing until a window opens
        return logic

    output, late = builder.build(ctor)
    return Windowed(output, late, state)


def window_fold(
    stream: Stream,
    windower: Any,
    init: Callable[[], Any],
    fold: Callable[[Any, Any], Any],
    key: Any = None,
    event_time: Any = None,
    lateness: int = 0,
    value: str | None = None,
    name: str = "WindowFold",
) -> Windowed:
    """Per key and window, ``acc = fold(acc, value)`` from ``init()`` (called once per
    (key, window)); ``output`` is ``(key, start, end, acc)`` at timestamp ``end + lateness``.

    Tumbling and sliding windows fold records as they arrive (arrival order: use an
    order-insensitive fold — sum, min, max — for results independent of batching, or
    ``window_collect``); sessions fold at emission in event-time order (ties in arrival order).
    Columnar: ``key``/``event_time``/``value`` name columns and ``fold`` is a numpy ufunc.
    See the module documentation for lateness and the emission rule.

    >>> import pytimely as pt
    >>> def build(scope):
    ...     clicks = scope.to_stream([("ann", 3), ("bob", 1), ("ann", 4)])
    ...     return clicks.window_fold(pt.Tumbling(10), int, lambda a, v: a + v).output.capture()
    >>> pt.example(build).extract()
    [(10, [('ann', 0, 10, 7), ('bob', 0, 10, 1)])]
    """
    return _build(
        stream,
        "window_fold",
        windower,
        _Kind("fold", init, fold),
        key,
        event_time,
        lateness,
        name,
        value,
    )


def window_count(
    stream: Stream,
    windower: Any,
    key: Any = None,
    event_time: Any = None,
    lateness: int = 0,
    name: str = "WindowCount",
) -> Windowed:
    """Per key and window, the number of records: ``(key, start, end, count)`` at timestamp
    ``end + lateness``.  Columnar when ``key`` names a column (see the module documentation).

    >>> import pytimely as pt
    >>> def build(scope):
    ...     inp, clicks = scope.new_input()
    ...     counted = clicks.window_count(pt.Sliding(4, 2), event_time=lambda r: r[1])
    ...     out, late = counted.output.capture(), counted.late.capture()
    ...     inp.send_batch([("ann", 1), ("ann", 2)])  # at timestamp 0
    ...     inp.advance_to(5)
    ...     inp.send(("ann", 0))  # window [-2, 2) closed at 2: late
    ...     return out, late
    >>> out, late = pt.example(build)
    >>> out.extract()
    [(2, [('ann', -2, 2, 1)]), (4, [('ann', 0, 4, 2)]), (6, [('ann', 2, 6, 1)])]
    >>> late.extract()
    [(5, [('ann', 0)])]
    """
    return _build(stream, "window_count", windower, _Kind("count"), key, event_time, lateness, name)


def window_collect(
    stream: Stream,
    windower: Any,
    key: Any = None,
    event_time: Any = None,
    lateness: int = 0,
    name: str = "WindowCollect",
) -> Windowed:
    """Per key and window, the list of values sorted by event time (ties in arrival order):
    ``(key, start, end, values)`` at timestamp ``end + lateness``.

    >>> import pytimely as pt
    >>> def build(scope):
    ...     inp, clicks = scope.new_input()
    ...     sessions = clicks.window_collect(pt.Session(gap=5)).output.capture()
    ...     for t, page in [(1, "home"), (4, "cart"), (8, "pay"), (20, "home")]:
    ...         inp.advance_to(t)
    ...         inp.send(("ann", page))
    ...     return sessions
    >>> pt.example(build).extract()
    [(13, [('ann', 1, 13, ['home', 'cart', 'pay'])]), (25, [('ann', 20, 25, ['home'])])]
    """
    return _build(
        stream, "window_collect", windower, _Kind("collect"), key, event_time, lateness, name
    )


def window_join(
    stream: Stream,
    other: Stream,
    windower: Any,
    key: Any = None,
    other_key: Any = None,
    event_time: Any = None,
    other_event_time: Any = None,
    lateness: int = 0,
    name: str = "WindowJoin",
) -> WindowJoined:
    """Pairs of records, one from each stream, with equal keys in the same window:
    ``(key, start, end, left, right)`` at the window's close timestamp ``end + lateness``.

    ``other_key`` defaults to ``key``.  Event times: both ``None`` (timestamps are event
    times) or both functions — mixing is refused.  Sessions are formed over the records of
    both streams together.  Late records of ``stream`` go to ``late``, those of ``other`` to
    ``other_late``.  Built on ``window_collect`` of the two streams tagged by side; pairs of a
    window come in event-time order of the left, then of the right record.

    >>> import pytimely as pt
    >>> def build(scope):
    ...     views = scope.to_stream([("ann", "home"), ("bob", "cart")])
    ...     buys = scope.to_stream([("ann", "book")])
    ...     return views.window_join(buys, pt.Tumbling(10)).output.capture()
    >>> pt.example(build).extract()
    [(10, [('ann', 0, 10, 'home', 'book')])]
    """
    op = "window_join"
    _check_windower(op, windower)
    if (event_time is None) != (other_event_time is None):
        raise ValueError(
            f"{op}: give both event_time and other_event_time, or neither (timestamps as "
            "event times on both sides)"
        )
    other_key = key if other_key is None else other_key
    left = _tagged(stream, 0, key, op, name)
    right = _tagged(other, 1, other_key, op, name)
    joined_time = None
    if event_time is not None:
        sides = (event_time, other_event_time)

        def joined_time(tagged: Any) -> Any:
            side, record = tagged[1]
            return sides[side](record)

        joined_time.__qualname__ = (
            f"event_time of side {{0: {describe_function(event_time)}, "
            f"1: {describe_function(other_event_time)}}}"
        )
    both = left.concat(right)
    collected = window_collect(both, windower, event_time=joined_time, lateness=lateness, name=name)
    key_given, other_key_given = key is not None, other_key is not None

    def pairs(result: Any) -> list:
        k, start, end, tagged = result
        lefts = [r if key_given else r[1] for side, r in tagged if side == 0]
        rights = [r if other_key_given else r[1] for side, r in tagged if side == 1]
        return [(k, start, end, a, b) for a in lefts for b in rights]

    output = collected.output.flat_map(pairs)
    late_left = collected.late.filter(lambda kv: kv[1][0] == 0).map(lambda kv: kv[1][1])
    late_right = collected.late.filter(lambda kv: kv[1][0] == 1).map(lambda kv: kv[1][1])
    return WindowJoined(output, late_left, late_right, collected._state)


def _tagged(stream: Stream, side: int, key: Any, op: str, name: str) -> Stream:
    """``(key, (side, record))`` for every record (``key=None``: records are pairs)."""

    def tag_batch(batch: list) -> list:
        keys = list(map(_first, batch)) if key is None else _apply(op, "key", key, batch)
        return [(k, (side, r)) for k, r in zip(keys, batch)]

    return map_batch(stream, tag_batch, name=f"{name}Tag{side}")
