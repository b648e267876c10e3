"""Session windows over records: the general store (``Sessions``, any kind) and the logic
that feeds the count stores (:mod:`.session_counts`, :mod:`.event_sessions`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from ....naming import describe_function
from ....windows import Session
from ..keyed import InTimeOrder
from ..tokens import LeastToken
from .checks import apply_user, check_time, check_times, user_error
from .kinds import Kind
from .session_counts import SessionCounts

if TYPE_CHECKING:
    from ...capability import Capability, CapabilityRef
    from ...ports import Frontier, InputPort, OutputPort

_first = itemgetter(0)
_second = itemgetter(1)


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
        self.emit_at: int | None = None  # set by Sessions._retarget
        self.agg = agg
        self.alive = True


class Sessions:
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
        """Pending emission times plus open sessions."""
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


def split_keys(op: str, key: Any, batch: list, values: bool) -> tuple[list, Any]:
    """The keys of ``batch`` and (``values``) its values: ``(key, value)`` pairs when ``key``
    is ``None``, else ``key(record)`` and the whole record."""
    if key is None:
        return list(map(_first, batch)), list(map(_second, batch)) if values else None
    return apply_user(op, "key", key, batch), batch


def read_event_times(op: str, event_time: Callable, batch: list) -> list:
    """``event_time`` of every record of ``batch``, checked to be ints."""
    times = apply_user(op, "event_time", event_time, batch)
    return check_times(op, times, batch, describe_function(event_time))


def session_logic(
    op: str,
    windower: Session,
    kind: Kind,
    key: Any,
    event_time: Any,
    lateness: int,
    state: Sessions,
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
            raise user_error(op, "fold", fold, (s.key, v), exc) from exc
        return acc

    def emit(out: OutputPort, cap: Capability, emit_at: int, done: list) -> None:
        results = [(s.key, s.start, s.last + gap, result(s)) for s in done]
        out.give_batch(cap, results, emit_at)

    def logic(inp: InputPort, out: OutputPort, late_out: OutputPort) -> None:
        add = state.add
        for ref, batch in inp:
            t = ref.time
            check_time(op, t)
            keys, values = split_keys(op, key, batch, True)
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
            for r, k, v, x in zip(batch, keys, values, read_event_times(op, event_time, batch)):
                if t <= x + lateness:
                    add(ref, k, x, [(x, v)])
                else:
                    late.append(r)
            if late:
                late_out.session(ref).give_batch(late)
        state.release(inp.frontier, lambda cap, e, done: emit(out, cap, e, done))

    return logic


def drained_first(
    op: str, name: str, waiting: InTimeOrder, per_key: Callable[[], list]
) -> Callable[[], list]:
    """``per_key`` for a snapshot, refused (naming the operator) while batches are stashed:
    a snapshot is taken at a completed epoch, when nothing waits for an earlier time."""

    def source() -> list:
        waiting.check_drained(op, name)
        return per_key()

    return source


def session_count_logic(op: str, key: Any, state: SessionCounts, waiting: InTimeOrder) -> Callable:
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
        check_time(op, t)
        counts = Counter(split_keys(op, key, batch, False)[0])
        state.add_counts_at(send, t, list(counts), list(counts.values()))

    def logic(inp: InputPort, out: OutputPort, late_out: OutputPort) -> None:
        frontier = inp.frontier
        waiting.apply_ready(frontier, count_at, None)
        waiting.admit(inp, count_at, None)
        state.release(frontier, lambda cap, e, results: out.give_batch(cap, results, e))

    return logic
