"""Keyed state on timestamp tokens: ``stateful_map`` and ``keyed_process`` (event-time timers).

Both operators exchange records by key (:class:`~pytimely.dataflow.Exchange`), so every key
lives on exactly one worker, and keep per-key state in a plain ``dict``.  Records are
``(key, value)`` pairs, or whole records with ``key=f`` giving the key function.

Order: per key, records are applied in **timestamp order**, records of one timestamp in arrival
order.  The operators get it from the input frontier, stashing what must wait:

* A record at ``t`` is applied as soon as the input frontier has *reached* ``t`` — no element
  strictly before ``t`` remains, so every earlier time is complete and already applied — and no
  earlier-stashed time precedes it.  Records at ``t`` that arrive later (from other workers, or
  later batches) are then applied after, which is exactly arrival order within ``t``.
* Otherwise the batch is stashed under its time and applied once the frontier reaches that
  time.  The stash holds **one** capability, at its least waiting time (a
  :class:`~.tokens.LeastToken`, the "least token" of the timestamp-tokens paper, section
  6.2): every time it applies sends at that time with it, and after applying everything
  ready it moves once, to the next waiting time, or is dropped.  So millisecond timestamps
  cost no capability (and no progress update) each.

Latency: none for input that arrives in time order (the common case: a source that sends at
its current epoch), and for an out-of-order record, until every earlier time is complete.
Output is sent at the record's own timestamp.  Interest is ``IF_CAPABILITY``: an operator that
stashes nothing is not woken by frontier changes.

On one worker, behind an operator whose ``map`` would run inline (see
:mod:`pytimely.dataflow.inline`), ``stateful_map`` runs inline too (:class:`InlineInTimeOrder`):
a batch it may apply at once is applied within the sender's call, and only a batch that must
wait is stashed for an invocation of its own.

Times follow their total order (``sorted``); integer times are the intended use.  With other
times (the partially ordered ``Product`` times of iterative scopes) one token at the least
time would not allow sending at every waiting time, and the operators hold one capability per
waiting time instead (:class:`~.tokens.TokenPerTime`).

``keyed_process`` adds **event-time timers** (Flink's ``KeyedProcessFunction``): a timer set at
``T`` fires once the input frontier has *passed* ``T`` (it no longer ``less_equal`` s ``T``: no
record at ``T`` or earlier can still arrive), exactly once, and its output is sent at ``T``.  The
timers hold one capability, at the least pending timer time, minted from the capability of the
record (or timer) that set the earliest one, moved on once per invocation as timers fire or are
cancelled, and dropped when none is pending.  Per key, records and timers are handled in time
order; a record at ``T`` comes before a timer at ``T``.
"""

from __future__ import annotations

import heapq
import itertools
import time as _time
from collections.abc import Callable
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from ...errors import OperatorError
from ...naming import describe_function, operator_name
from ...order import less_equal
from ...progress.operate import FrontierInterest
from .. import snapshot
from ..capability import Capability
from ..inline import InlineDelivery, inline_depth_after
from ..pacts import Exchange
from .generic import OperatorBuilder, unary_frontier
from .tokens import LeastToken, tokens_for

if TYPE_CHECKING:
    from ..capability import Capability, CapabilityRef
    from ..operator import OperatorInfo
    from ..ports import Frontier, InputPort, OutputPort
    from ..stream import Stream

__all__ = ["EventTimers", "KeyedContext", "StateStats", "keyed_process", "stateful_map"]

_IF_CAP = FrontierInterest.IF_CAPABILITY
_FIRST = itemgetter(0)


class StateStats:
    """How much state a keyed operator holds on this worker, refreshed after every invocation.

    ``keys``: keys with state; ``entries``: stored items (states, timers or joined records,
    depending on the operator); ``pending_times``: times stashed or waited for.  ``peak_keys``
    and ``peak_entries`` are the maxima seen.  Pass one as ``stats=`` to watch memory stay
    bounded.

    A running balance per user; a user whose balance returns to 0 is forgotten:

    >>> import pytimely as pt
    >>> stats = StateStats()
    >>> def build(scope):
    ...     moves = scope.to_stream([("ann", 1), ("bob", 1), ("ann", -1)])
    ...     balance = lambda b, v: (b + v or None, b + v)
    ...     return moves.stateful_map(int, balance, stats=stats).capture()
    >>> pt.example(build).extract()
    [(0, [('ann', 0), ('ann', 1), ('bob', 1)])]
    >>> stats.keys  # only bob has state left
    1
    """

    __slots__ = ("keys", "entries", "pending_times", "peak_keys", "peak_entries")

    def __init__(self) -> None:
        self.keys = self.entries = self.pending_times = 0
        self.peak_keys = self.peak_entries = 0

    def record(self, keys: int, entries: int, pending_times: int) -> None:
        """Note the current sizes (called by the operator).

        >>> stats = StateStats()
        >>> stats.record(3, 5, 1)
        >>> stats.record(1, 2, 0)
        >>> stats
        StateStats(keys=1, entries=2, pending_times=0, peak_keys=3)
        """
        self.keys, self.entries, self.pending_times = keys, entries, pending_times
        if keys > self.peak_keys:
            self.peak_keys = keys
        if entries > self.peak_entries:
            self.peak_entries = entries

    def __repr__(self) -> str:
        return (
            f"StateStats(keys={self.keys}, entries={self.entries}, "
            f"pending_times={self.pending_times}, peak_keys={self.peak_keys})"
        )


def user_error(
    op: str,
    name: str,
    role: str,
    fn: Any,
    record: Any,
    t: Any,
    exc: BaseException,
    address: tuple = (),
) -> OperatorError:
    """An :class:`OperatorError` naming the operator, the user function and the record.

    >>> print(user_error("join", "Orders", "function", len, ("ann", 1), 3, ValueError("bad")))
    join 'Orders': function len raised ValueError: bad on record ('ann', 1) at time 3
    """
    at = "" if t is None else f" at time {t!r}"
    return OperatorError(
        f"{op} {name!r}: {role} {describe_function(fn)} raised {type(exc).__name__}: {exc} "
        f"on record {record!r}{at}",
        name,
        address,
    )


def checked_key(
    key_of: Callable[[Any], Any], pairs: bool, op: str, name: str
) -> Callable[[Any], Any]:
    """``key_of`` for an :class:`Exchange`, re-raising its errors with the operator and the
    record named (the exchange runs in the upstream operator, which knows neither).

    >>> route = checked_key(lambda r: r["user"], False, "stateful_map", "Clicks")
    >>> route({"user": "ann"})
    'ann'
    >>> route(("ann", 1))
    Traceback (most recent call last):
    ...
    pytimely.errors.OperatorError: stateful_map 'Clicks': key function <lambda> @ ... raised ...
    """

    def route(record: Any) -> Any:
        try:
            return key_of(record)
        except Exception as exc:
            raise failure(op, name, key_of, key_of, pairs, record, None, exc, ()) from exc

    return route


def failure(
    op: str,
    name: str,
    fn: Any,
    key_of: Any,
    pairs: bool,
    record: Any,
    t: Any,
    exc: BaseException,
    address: tuple,
) -> OperatorError:
    """The error for user code ``fn`` raising on ``record``: the key function (``fn is
    key_of``; with ``pairs``, the record was not a ``(key, value)`` pair) or the user's
    function.

    >>> first = lambda r: r[0]
    >>> print(failure("join", "Ord", first, first, True, 7, 2, TypeError("no"), ()))
    join 'Ord': records must be (key, value) pairs (or pass key=), got 7 at time 2 (TypeError: no)
    """
    if fn is not key_of:
        return user_error(op, name, "function", fn, record, t, exc, address)
    if not pairs:
        return user_error(op, name, "key function", fn, record, t, exc, address)
    return OperatorError(
        f"{op} {name!r}: records must be (key, value) pairs (or pass key=), got {record!r}"
        f"{'' if t is None else f' at time {t!r}'} ({type(exc).__name__}: {exc})",
        name,
        address,
    )


def split_key(key: Callable[[Any], Any] | None) -> tuple[Callable[[Any], Any], bool]:
    """``(key function, records are pairs)``: ``key=None`` means ``(key, value)`` records.

    >>> key_of, pairs = split_key(None)
    >>> key_of(("ann", "click")), pairs
    ('ann', True)
    >>> split_key(len)
    (<built-in function len>, False)
    """
    return (_FIRST, True) if key is None else (key, False)


class InTimeOrder:
    """Batches waiting for every earlier time to complete: what makes ``stateful_map``,
    ``keyed_process`` and session counts (:mod:`.windowing`) apply records in timestamp order.
    ``pending`` maps each waiting time to its batches; ``tokens`` (a
    :class:`~.tokens.LeastToken` for ``int`` times, chosen at the first stash;
    :class:`~.tokens.TokenPerTime` for others) holds one capability, at the least waiting
    time, and orders the times.

    >>> waiting = InTimeOrder()
    >>> len(waiting), waiting.first()  # nothing waits: in-order batches are applied at once
    (0, None)
    """

    __slots__ = ("pending", "tokens")

    def __init__(self) -> None:
        self.pending: dict[Any, list[Any]] = {}
        self.tokens: LeastToken | None = None

    def __len__(self) -> int:
        return len(self.pending)

    def first(self) -> Any:
        """The earliest waiting time, or ``None``."""
        tokens = self.tokens
        return None if tokens is None else tokens.least()

    def pop_first(self) -> tuple[Any, Capability, list[Any]]:
        """Take the earliest waiting time (there must be one): ``(time, capability,
        batches)``.  The capability (at ``time`` or before) allows sending at ``time`` until
        :meth:`settle`."""
        tokens = self.tokens
        assert tokens is not None
        t = tokens.least()
        assert t is not None
        tokens.discard(t)
        return t, tokens.cap_for(t), self.pending.pop(t)

    def settle(self) -> None:
        """Move the token to the earliest time still waiting, or drop it (once per
        invocation, after applying)."""
        if self.tokens is not None:
            self.tokens.settle()

    def apply_ready(self, frontier: Any, apply: Callable[..., None], out: Any) -> None:
        """Apply, earliest first, the batches of every waiting time ``frontier`` no longer
        precedes (``apply(capability, t, batch, out)``; the capability allows sending at
        ``t``), then move the token once."""
        tokens = self.tokens
        if tokens is None:
            return
        pending = self.pending
        for t in tokens.ready(frontier):
            held = tokens.cap_for(t)
            for batch in pending.pop(t):
                apply(held, t, batch, out)
        tokens.settle()

    def admit(
        self, inp: InputPort, apply: Callable[..., None], out: Any, frontier: Any = None
    ) -> None:
        """Every batch of ``inp``: applied at once (``apply(ref, t, batch, out)``) if no
        earlier time can still arrive and none is waiting, else stashed under its time.
        ``frontier``: ``inp.frontier`` when the caller has it already."""
        if frontier is None:
            frontier = inp.frontier
        pending = self.pending
        for ref, batch in inp:
            t = ref.time
            if not frontier.less_than(t) and (not pending or t < self.first()):
                apply(ref, t, batch, out)
                continue
            self.stash(ref, t, batch)

    def stash(self, ref: Any, t: Any, batch: Any) -> None:
        """Keep ``batch`` until every time before ``t`` is complete (``ref``, a capability or
        message ref at or before ``t``, mints the token if need be)."""
        entry = self.pending.get(t)
        if entry is None:
            tokens = self.tokens
            if tokens is None:
                tokens = self.tokens = tokens_for(t)
            tokens.hold(ref, t)
            self.pending[t] = [batch]
        else:
            entry.append(batch)

    def check_drained(self, op: str, name: str) -> None:
        """A snapshot is taken at a completed epoch, when no record can be waiting for an
        earlier time: stashed records mean the caller snapshots mid-epoch, which would lose
        them."""
        if self.pending:
            raise OperatorError(
                f"{op} {name!r}: snapshot requested while records at times "
                f"{sorted(self.pending)!r} wait for earlier times; snapshots must be taken at a "
                "completed epoch",
                name,
            )


class InlineInTimeOrder(InlineDelivery):
    """The delivery point of a ``stateful_map`` that runs inline, on one worker (see the module
    docstring): a batch the frontier lets through, with nothing earlier waiting, is applied
    within the sender's call and its results handed to the consumers (where its scope counted
    the records already, as for any inline operator); a batch that must wait leaves the
    consumers' count for the stash (a ``-n`` in the operator's own ``produced`` batch) under a
    capability at its time, and the operator asks to be scheduled, so that the scope drains
    both in the same pass or the next, while the sender's count (or token) holds the time.  Its
    invocations apply what the frontier has released, as the scheduled operator does.

    Once observed (statistics, the event log), deliveries wait for the operator's own
    invocation, as an inline ``map``'s do (:class:`~pytimely.dataflow.inline.InlineDelivery`).

    >>> import pytimely as pt
    >>> def build(scope):
    ...     inp, clicks = scope.new_input()
    ...     counts = clicks.stateful_map(int, lambda n, _one: (n + 1, n + 1))
    ...     return inp, scope.inline_depth(counts.source), counts.capture()
    >>> worker = pt.Worker()
    >>> inp, depth, cap = worker.dataflow(build)
    >>> depth  # the first operator of an inline chain behind the input
    1
    >>> inp.send_batch([("ann", 1), ("ann", 1)])
    >>> inp.close()
    >>> worker.run()
    >>> cap.extract()
    [(0, [('ann', 1), ('ann', 2)])]
    """

    __slots__ = ("_waiting", "_results_of")

    def __init__(self, core: Any) -> None:
        super().__init__(core)
        self._waiting: InTimeOrder = InTimeOrder()
        self._results_of: Callable[[Any, Any], list[Any]] = _unbound

    def bind(self, waiting: InTimeOrder, results_of: Callable[[Any, Any], list[Any]]) -> None:
        """The operator's stash and its function from ``(t, batch)`` to results (which
        updates the state): set by its constructor, after the push was wired."""
        self._waiting = waiting
        self._results_of = results_of

    def _deliver(self, t: Any, batch: Any) -> None:
        waiting = self._waiting
        if not self._inp.frontier.less_than(t) and (not waiting.pending or t < waiting.first()):
            self._hand_on(t, batch, self._results_of(t, batch))
            return
        n = len(batch)
        if n:
            self._produced.update(t, -n)  # not at the consumers yet: in the stash
        cap = Capability(t, self._out)
        waiting.stash(cap, t, batch)
        cap.drop()
        self._core.activate()

    def run(self, apply: Callable[..., None]) -> Callable[[InputPort, OutputPort], None]:
        """The operator's logic: apply what the frontier released (``apply(cap, t, batch,
        out)`` sends with the stash's token), then what waited while observed."""
        waiting = self._waiting

        def logic(inp: InputPort, out: OutputPort) -> None:
            waiting.apply_ready(inp.frontier, apply, out)
            self._run_deferred()

        return logic


def _unbound(t: Any, batch: Any) -> list[Any]:  # pragma: no cover - replaced before any data
    raise AssertionError("InlineInTimeOrder used before its operator was constructed")


def stateful_map(
    stream: Stream,
    init: Callable[[], Any],
    f: Callable[[Any, Any], tuple[Any, Any]],
    key: Callable[[Any], Any] | None = None,
    name: str | None = None,
    stats: StateStats | None = None,
    ttl: int | None = None,
    ttl_seconds: float | None = None,
    on_expire: Callable[[Any, Any], Any] | None = None,
) -> Stream:
    """Per-key running state: ``new_state, output = f(state, value)``, emitting ``(key, output)``
    at the record's timestamp.

    A key's state starts as ``init()``; returning ``None`` as the new state forgets the key
    (its next record starts from ``init()`` again), so memory is bounded by the live keys.
    Records are ``(key, value)`` pairs, or with ``key=`` any record (the whole record is the
    value).  Per key, updates are applied in timestamp order, records of one timestamp in
    arrival order; see the module docstring for how, and for the latency.  The operator is
    named ``StatefulMap(f @ file.py:line)`` unless ``name`` is given; its snapshot state is
    filed under ``name`` or ``"StatefulMap"``, so editing the file does not orphan it.

    **State that expires.**  ``ttl=d`` (integer times) forgets a key once the input frontier
    has passed ``t + d``, ``t`` being the timestamp of its last record; with ``on_expire=g``
    it then emits ``(key, g(key, state))`` at timestamp ``t + d`` (the operator holds one
    capability, at the least such time, while keys with ``on_expire`` are pending).
    ``ttl_seconds=s`` forgets a key ``s`` seconds of the worker's clock after its last record
    (woken by a timer, not by polling; nothing is emitted).  Either way memory is bounded by
    the keys seen within the TTL, however many keys the stream brings over time.

    >>> import pytimely as pt
    >>> def build(scope):
    ...     clicks = scope.to_stream([(1, "ann"), (0, "bob"), (0, "ann")])  # (time, user)
    ...     timed = clicks.delay(lambda r, t: r[0])
    ...     running = timed.stateful_map(int, lambda n, r: (n + 1, n + 1), key=lambda r: r[1])
    ...     return running.capture()
    >>> pt.example(build).extract()
    [(0, [('ann', 1), ('bob', 1)]), (1, [('ann', 2)])]
    """
    op = "stateful_map"
    state_name = name if name is not None else "StatefulMap"
    name = operator_name(name, "StatefulMap", f)
    key_of, pairs = split_key(key)
    if ttl is not None and (type(ttl) is not int or ttl < 0):
        raise ValueError(f"{op} {name!r}: ttl must be a non-negative int, got {ttl!r}")
    if ttl_seconds is not None and not ttl_seconds > 0:
        raise ValueError(f"{op} {name!r}: ttl_seconds must be positive, got {ttl_seconds!r}")
    if ttl is not None and ttl_seconds is not None:
        raise ValueError(f"{op} {name!r}: give ttl (event time) or ttl_seconds, not both")
    if on_expire is not None and ttl is None:
        raise ValueError(f"{op} {name!r}: on_expire needs ttl= (event time)")
    if ttl is not None or ttl_seconds is not None:
        return _expiring_stateful_map(
            stream, init, f, key_of, pairs, op, name, state_name, stats, ttl, ttl_seconds,
            on_expire,
        )  # fmt: skip

    def ctor(
        cap: Capability, info: OperatorInfo, inline: InlineInTimeOrder | None = None
    ) -> Callable[[InputPort, OutputPort], None]:
        cap.drop()  # hold nothing until a record must wait
        states: dict[Any, Any] = {}
        waiting = InTimeOrder()

        def per_key() -> list[tuple[Any, Any]]:
            """The state for a snapshot: ``(key, state)`` (nothing may be stashed then)."""
            waiting.check_drained(op, name)
            return list(states.items())

        restored = snapshot.attach(info, per_key, state_name)
        if restored:
            states.update(restored)

        def results_of(t: Any, batch: Any) -> list[Any]:
            """The outputs of ``batch``'s records, at ``t``, the state updated."""
            results: list[Any] = []
            emit = results.append
            get = states.get
            r = None
            fn: Any = key_of
            try:
                for r in batch:
                    fn = key_of
                    if pairs:
                        k, v = r
                    else:
                        k, v = key_of(r), r
                    fn = f
                    s = get(k)
                    if s is None:
                        s = init()
                    s, o = f(s, v)
                    if s is None:
                        states.pop(k, None)
                    else:
                        states[k] = s
                    emit((k, o))
            except Exception as exc:
                raise failure(op, name, fn, key_of, pairs, r, t, exc, info.address) from exc
            return results

        def apply(send: Capability | CapabilityRef, t: Any, batch: Any, out: OutputPort) -> None:
            out.give_batch(send, results_of(t, batch), t)

        if inline is not None:
            inline.bind(waiting, results_of)
            return inline.run(apply)

        def logic(inp: InputPort, out: OutputPort) -> None:
            frontier = inp.frontier
            waiting.apply_ready(frontier, apply, out)
            waiting.admit(inp, apply, out, frontier)
            if stats is not None:
                stats.record(len(states), len(states), len(waiting))

        return logic

    pact = Exchange(checked_key(key_of, pairs, op, name))
    scope = stream.scope
    # Inline on one worker only (elsewhere the exchange moves records), and not with ``stats``,
    # which are recorded per invocation.
    depth = inline_depth_after(stream) if scope.worker.peers == 1 else None
    if stats is None and depth is not None:
        made: list[InlineInTimeOrder] = []

        def push_of(core: Any) -> Callable[[Any, Any], None]:
            made.append(InlineInTimeOrder(core))
            return pact.connect(scope.worker, made[0].push, name)  # the key checks first

        b = OperatorBuilder(name, scope)
        b.new_input(stream, pact, interest=_IF_CAP)
        b.new_output()
        return b.build(
            lambda caps, info: ctor(caps[0], info, made[0]),
            _inline=push_of,
            _inline_depth=depth,
        )[0]
    return unary_frontier(stream, pact, name, ctor, interest=_IF_CAP)


def _expiring_stateful_map(
    stream: Stream,
    init: Callable[[], Any],
    f: Callable[[Any, Any], tuple[Any, Any]],
    key_of: Any,
    pairs: bool,
    op: str,
    name: str,
    state_name: str,
    stats: StateStats | None,
    ttl: int | None,
    ttl_seconds: float | None,
    on_expire: Callable[[Any, Any], Any] | None,
) -> Stream:
    """:func:`stateful_map` with ``ttl`` or ``ttl_seconds`` (its docstring).  Per key the
    state and when it expires (``last time + ttl``, or a ``time.monotonic()`` deadline); a
    heap of ``(expiry, key)`` entries, an entry being stale when the key's expiry moved on."""
    event_time = ttl is not None

    def ctor(cap: Capability, info: OperatorInfo) -> Callable[[InputPort, OutputPort], None]:
        states: dict[Any, Any] = {}
        expires: dict[Any, Any] = {}
        heap: list[tuple[Any, int, Any]] = []
        order = itertools.count()
        waiting = InTimeOrder()
        held: list[Capability] = []  # with on_expire: one capability, at the least expiry
        activator = info.activator()

        def per_key() -> list[tuple[Any, Any]]:
            """Snapshot: ``(key, (state, expiry))`` -- for ``ttl_seconds`` the seconds left."""
            waiting.check_drained(op, name)
            if event_time:
                return [(k, (s, expires[k])) for k, s in states.items()]
            now = _time.monotonic()
            return [(k, (s, max(0.0, expires[k] - now))) for k, s in states.items()]

        def expire_at(k: Any, when: Any, holder: Any) -> None:
            expires[k] = when
            heapq.heappush(heap, (when, next(order), k))
            if on_expire is not None and (not held or when < held[0].time):
                fresh = holder.delayed(when)
                if held:
                    held[0].drop()
                    held[0] = fresh
                else:
                    held.append(fresh)

        for k, (s, when) in snapshot.attach(info, per_key, state_name) or ():
            states[k] = s
            expire_at(k, when if event_time else _time.monotonic() + when, cap)
        cap.drop()

        def apply(send: Any, t: Any, batch: Any, out: OutputPort) -> None:
            results: list[Any] = []
            emit = results.append
            get = states.get
            r = None
            fn: Any = key_of
            when = t + ttl if event_time else _time.monotonic() + ttl_seconds  # type: ignore[operator]
            if event_time and heap and heap[0][0] < t:
                expire(None, out, before=t)  # keys that expired before this record's time
            try:
                for r in batch:
                    fn = key_of
                    if pairs:
                        k, v = r
                    else:
                        k, v = key_of(r), r
                    fn = f
                    s = get(k)
                    if s is None:
                        s = init()
                    s, o = f(s, v)
                    if s is None:
                        states.pop(k, None)
                        expires.pop(k, None)
                    else:
                        states[k] = s
                        if expires.get(k) != when:
                            expire_at(k, when, send)
                    emit((k, o))
            except Exception as exc:
                raise failure(op, name, fn, key_of, pairs, r, t, exc, info.address) from exc
            out.give_batch(send, results, t)

        def expire(frontier: Any, out: OutputPort, before: Any = None) -> None:
            """Forget (and report) the keys whose expiry is due: in event time, once the
            frontier has passed it and no record taken but not applied is at or before it --
            or, with ``before=t`` (records at ``t`` are about to be applied, in time order),
            every expiry before ``t``."""
            now = _time.monotonic()
            gone: dict[Any, list[Any]] = {}
            stashed = waiting.first()  # records taken from the input, not yet applied
            while heap:
                when, _n, k = heap[0]
                if before is not None:
                    due = when < before
                elif event_time:
                    due = not frontier.less_equal(when) and (stashed is None or stashed > when)
                else:
                    due = when <= now
                if not due:
                    break
                heapq.heappop(heap)
                if expires.get(k) != when:
                    continue  # stale: the key was seen again, or forgotten
                del expires[k]
                s = states.pop(k)
                if on_expire is not None:
                    try:
                        gone.setdefault(when, []).append((k, on_expire(k, s)))
                    except Exception as exc:
                        raise failure(op, name, on_expire, key_of, pairs, (k, s), when, exc,
                                      info.address) from exc  # fmt: skip
            for when, results in sorted(gone.items()):
                at = held[0].delayed(when)
                out.give_batch(at, results)
                at.drop()
            while heap and expires.get(heap[0][2]) != heap[0][0]:
                heapq.heappop(heap)  # stale entries on top: the least live expiry is on top
            if held:
                if not heap:
                    held.pop().drop()
                elif heap[0][0] > held[0].time:
                    held[0].downgrade(heap[0][0])
            if not event_time and heap:
                activator.activate_after(max(0.0, heap[0][0] - now))

        def logic(inp: InputPort, out: OutputPort) -> None:
            # Expire first: a record at a time after a key's expiry (which the frontier has
            # then passed: the record holds the frontier at its time) starts the key afresh.
            expire(inp.frontier, out)
            waiting.apply_ready(inp.frontier, apply, out)
            waiting.admit(inp, apply, out)
            expire(inp.frontier, out)  # what the frontier already passed of the new expiries
            if stats is not None:
                stats.record(len(states), len(states), len(waiting))

        return logic

    route = checked_key(key_of, pairs, op, name)
    return unary_frontier(stream, Exchange(route), name, ctor, interest=_IF_CAP)


class EventTimers:
    """Pending event-time timers of one operator instance: per distinct time, the keys with a
    timer there (a dict: insertion order, no duplicates), and one token holder for all the
    times (:class:`~.tokens.LeastToken` for ``int`` times: one capability, at the least
    pending timer time; chosen at the first timer), which also orders them.

    With a stand-in for the capabilities (the operator passes real ones) and a frontier:

    >>> from pytimely.progress.antichain import Antichain
    >>> class Cap:
    ...     def __init__(self, t): self.time = t
    ...     def delayed(self, t): return Cap(t)
    ...     def downgrade(self, t): print("token moved to", t); self.time = t
    ...     def drop(self): print("dropped the token at", self.time)
    >>> timers = EventTimers()
    >>> timers.set(10, "ann", Cap(0)); timers.set(10, "bob", Cap(0)); timers.set(20, "ann", Cap(5))
    >>> len(timers), timers.times(), timers.tokens.time  # three timers, two times, one token
    (3, 2, 10)
    >>> timers.next_due(Antichain([10])) is None  # a frontier at 10 has not passed 10
    True
    >>> token, keys = timers.pop(timers.next_due(Antichain([11])))
    >>> token.time, list(keys)  # send at 10 with the token, then settle
    (10, ['ann', 'bob'])
    >>> timers.settle()
    token moved to 20
    >>> timers.cancel(20, "ann")
    >>> timers.settle()
    dropped the token at 20
    >>> len(timers), timers.times()
    (0, 0)
    """

    __slots__ = ("_at", "_count", "tokens")

    def __init__(self) -> None:
        self._at: dict[Any, dict[Any, None]] = {}  # time -> {key: None}
        self._count = 0
        self.tokens: LeastToken | None = None

    def set(self, t: Any, key: Any, cap: Capability | CapabilityRef) -> None:
        """A timer for ``key`` at ``t``; ``cap`` (at or before ``t``) mints the token if the
        holder needs one."""
        keys = self._at.get(t)
        if keys is None:
            tokens = self.tokens
            if tokens is None:
                tokens = self.tokens = tokens_for(t)
            tokens.hold(cap, t)
            self._at[t] = {key: None}
            self._count += 1
        elif key not in keys:
            keys[key] = None
            self._count += 1

    def cancel(self, t: Any, key: Any) -> None:
        """Remove ``key``'s timer at ``t``; the token moves (or goes) at :meth:`settle`."""
        keys = self._at.get(t)
        if keys is not None and key in keys:
            del keys[key]
            self._count -= 1
            if not keys:
                del self._at[t]
                self.tokens.done(t)  # type: ignore[union-attr]

    def next_due(self, frontier: Frontier) -> Any:
        """The earliest pending time the frontier has passed, or ``None``."""
        tokens = self.tokens
        if tokens is None:
            return None
        t = tokens.least()
        if t is not None and not frontier.less_equal(t):
            return t
        return None

    def pop(self, t: Any) -> tuple[Capability, Any]:
        """Take the timers at ``t`` (the earliest pending time): ``(capability, keys)``; the
        capability (at ``t`` or before) allows sending at ``t`` until :meth:`settle`."""
        tokens = self.tokens
        assert tokens is not None
        tokens.discard(t)
        keys = self._at.pop(t)
        self._count -= len(keys)
        return tokens.cap_for(t), keys

    def settle(self) -> None:
        """Move the token to the earliest pending timer, or drop it (once per invocation)."""
        if self.tokens is not None:
            self.tokens.settle()

    def by_key(self) -> dict[Any, list[Any]]:
        """The pending timers as ``key -> [times]`` (for a snapshot)."""
        keyed: dict[Any, list[Any]] = {}
        for t, keys in self._at.items():
            for k in keys:
                keyed.setdefault(k, []).append(t)
        return keyed

    def times(self) -> int:
        """Distinct pending timer times."""
        return len(self._at)

    def __len__(self) -> int:
        """Pending timers."""
        return self._count


class KeyedContext:
    """What ``process`` and ``on_timer`` of :func:`keyed_process` see: the current key and
    time, the key's state, its timers, and the output.

    One context per operator instance, reused for every call (no per-record objects); valid
    only during the call.

    * ``key``, ``time``: the key being processed and the record's (or timer's) timestamp.
    * ``state``: the key's state (``None`` when it has none); assign to set it, assign
      ``None`` or call ``clear()`` to forget it.
    * ``set_timer(t)`` / ``cancel_timer(t)``: an event-time timer for this key at ``t >= time``
      (setting one twice is one timer); ``on_timer(ctx, key, t)`` runs once the input frontier
      has passed ``t``.
    * ``set_processing_timer(seconds)`` / ``cancel_processing_timer(deadline)``: a timer for
      this key ``seconds`` of the worker's clock from now (``set`` returns its deadline, a
      ``time.monotonic()`` reading); ``on_processing_timer(ctx, key, deadline)`` runs once it is
      due, woken by the worker's timer (no polling), with ``time`` the least time the input
      may still bring (what it emits goes there).
    * ``emit(x)``: send ``x`` at ``time``.

    An alert once a user has been idle for 5 time units (each click moves the timer):

    >>> import pytimely as pt
    >>> def on_click(ctx, user, _click):
    ...     if ctx.state is not None:
    ...         ctx.cancel_timer(ctx.state + 5)
    ...     ctx.state = ctx.time
    ...     ctx.set_timer(ctx.time + 5)
    >>> def idle(ctx, user, t):
    ...     ctx.emit((user, "idle since", ctx.state))
    ...     ctx.clear()
    >>> def build(scope):
    ...     clicks = scope.to_stream([(0, "ann"), (3, "ann"), (4, "bob")])
    ...     timed = clicks.delay(lambda r, t: r[0])
    ...     return timed.keyed_process(on_click, idle, key=lambda r: r[1]).capture()
    >>> pt.example(build).extract()
    [(8, [('ann', 'idle since', 3)]), (9, [('bob', 'idle since', 4)])]
    """

    __slots__ = ("key", "time", "_name", "_states", "_timers", "_cap", "_out", "_clock")

    def __init__(
        self,
        name: str,
        states: dict[Any, Any],
        timers: EventTimers,
        clock: ProcessingTimers | None = None,
    ) -> None:
        self.key: Any = None
        self.time: Any = None
        self._name = name
        self._states = states
        self._timers = timers
        self._clock = clock
        self._cap: Capability | CapabilityRef | None = None
        self._out: list[Any] = []

    def bind(self, t: Any, cap: Capability | CapabilityRef | None) -> list[Any]:
        """(For the operator.) Start calls at time ``t`` with capability ``cap``; returns the
        list that ``emit`` fills.

        >>> ctx = KeyedContext("Demo", {}, EventTimers())
        >>> sent = ctx.bind(5, None)
        >>> ctx.key = "ann"
        >>> ctx.emit("hello")
        >>> ctx.unbind()
        >>> sent, ctx.time
        (['hello'], 5)
        """
        self.time = t
        self._cap = cap
        self._out = []
        return self._out

    def unbind(self) -> None:
        """(For the operator.) Forget the capability of the last calls."""
        self._cap = None

    @property
    def state(self) -> Any:
        """The current key's state (``None`` when it has none); assigning ``None`` forgets it."""
        return self._states.get(self.key)

    @state.setter
    def state(self, value: Any) -> None:
        if value is None:
            self._states.pop(self.key, None)
        else:
            self._states[self.key] = value

    def clear(self) -> None:
        """Forget this key's state."""
        self._states.pop(self.key, None)

    def emit(self, record: Any) -> None:
        """Send ``record`` at the current time."""
        self._out.append(record)

    def set_timer(self, t: Any) -> None:
        """Fire ``on_timer`` for this key once the input frontier has passed ``t``."""
        if not less_equal(self.time, t):
            raise ValueError(
                f"keyed_process {self._name!r}: set_timer({t!r}) for key {self.key!r} is before "
                f"the current time {self.time!r}"
            )
        cap = self._cap
        if cap is None:
            raise RuntimeError(
                f"keyed_process {self._name!r}: set_timer() outside a call of process or on_timer"
            )
        self._timers.set(t, self.key, cap)

    def cancel_timer(self, t: Any) -> None:
        """Remove this key's timer at ``t`` (nothing happens if there is none)."""
        self._timers.cancel(t, self.key)

    def set_processing_timer(self, seconds: float) -> float:
        """Fire ``on_processing_timer`` for this key ``seconds`` from now (worker's clock);
        returns the deadline (a ``time.monotonic()`` reading) that names the timer."""
        if self._clock is None or self._cap is None:
            raise RuntimeError(
                f"keyed_process {self._name!r}: set_processing_timer() needs "
                "on_processing_timer= and a call of process or a timer handler"
            )
        return self._clock.set(_time.monotonic() + seconds, self.key, self._cap)

    def cancel_processing_timer(self, deadline: float) -> None:
        """Remove this key's processing-time timer of ``deadline`` (none: nothing happens)."""
        if self._clock is not None:
            self._clock.cancel(deadline, self.key)


class ProcessingTimers:
    """Pending processing-time timers of one :func:`keyed_process` instance: ``(deadline,
    key)`` pairs (a heap, and a set for cancelling), and one capability while any is pending,
    kept at the least time the input may still bring (so it never holds the output back more
    than the input does); what a timer emits goes at that capability's time.

    >>> clock = ProcessingTimers()
    >>> len(clock), clock.next_deadline()
    (0, None)
    """

    __slots__ = ("_heap", "_live", "cap")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Any]] = []
        self._live: set[tuple[float, Any]] = set()
        self.cap: Capability | None = None

    def __len__(self) -> int:
        return len(self._live)

    def set(self, deadline: float, key: Any, holder: Any) -> float:
        """A timer for ``key`` at ``deadline``; ``holder`` (a capability or message reference)
        mints the capability if none is held."""
        if (deadline, key) not in self._live:
            self._live.add((deadline, key))
            heapq.heappush(self._heap, (deadline, id(key), key))
            if self.cap is None:
                self.cap = holder.delayed(holder.time)
        return deadline

    def cancel(self, deadline: float, key: Any) -> None:
        self._live.discard((deadline, key))

    def next_deadline(self) -> float | None:
        """The earliest pending deadline (stale heap entries are dropped on the way)."""
        heap = self._heap
        while heap and (heap[0][0], heap[0][2]) not in self._live:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pop_due(self, now: float) -> list[tuple[float, Any]]:
        """The timers due at ``now``, earliest first, removed."""
        due = []
        while (deadline := self.next_deadline()) is not None and deadline <= now:
            _d, _i, key = heapq.heappop(self._heap)
            self._live.discard((deadline, key))
            due.append((deadline, key))
        return due

    def by_key(self) -> dict[Any, list[float]]:
        """Pending deadlines per key (for snapshots)."""
        out: dict[Any, list[float]] = {}
        for deadline, key in self._live:
            out.setdefault(key, []).append(deadline)
        return out

    def follow(self, frontier: Any) -> None:
        """Keep the capability at the least time the input may still bring, or drop it when
        no timer is pending."""
        cap = self.cap
        if cap is None:
            return
        if not self._live:
            cap.drop()
            self.cap = None
        elif not frontier.is_empty():
            least = min(frontier.elements())
            if less_equal(cap.time, least) and cap.time != least:
                cap.downgrade(least)


def keyed_process(
    stream: Stream,
    process: Callable[[KeyedContext, Any, Any], None],
    on_timer: Callable[[KeyedContext, Any, Any], None] | None = None,
    key: Callable[[Any], Any] | None = None,
    name: str | None = None,
    stats: StateStats | None = None,
    on_processing_timer: Callable[[KeyedContext, Any, float], None] | None = None,
    ttl: int | None = None,
    on_expire: Callable[[KeyedContext, Any], None] | None = None,
) -> Stream:
    """Per-key state and event-time timers: ``process(ctx, key, value)`` for every record,
    ``on_timer(ctx, key, time)`` for every timer (see :class:`KeyedContext`); with
    ``on_processing_timer``, also timers on the worker's clock
    (``ctx.set_processing_timer(seconds)``), which survive snapshots as the seconds they had
    left.  ``ttl=d`` (integer times) forgets a key's state once the input frontier has passed
    ``t + d``, ``t`` being its last record's time (a record at ``t + d`` still continues it),
    after calling ``on_expire(ctx, key)`` at ``t + d`` if given (``ctx.state`` still holds the
    state; what it emits goes at ``t + d``); the key's own timers are left as they are.

    Records are ``(key, value)`` pairs, or with ``key=`` any record (the whole record is the
    value).  Output is whatever ``ctx.emit`` sends, at the record's timestamp, or at the timer's
    time from ``on_timer``.  Guarantees (module docstring): per key, records in timestamp order
    (arrival order within a time), a timer at ``T`` after every record at or before ``T`` and
    before every record after ``T``; each timer fires exactly once, never before the input
    frontier has passed its time.  Named ``KeyedProcess(process @ file.py:line)`` unless
    ``name`` is given; snapshot state is filed under ``name`` or ``"KeyedProcess"``.

    Counting clicks per user, reported 10 time units after the user's first click:

    >>> import pytimely as pt
    >>> def on_click(ctx, user, _click):
    ...     if ctx.state is None:
    ...         ctx.set_timer(ctx.time + 10)
    ...     ctx.state = (ctx.state or 0) + 1
    >>> def report(ctx, user, t):
    ...     ctx.emit((user, ctx.state))
    ...     ctx.clear()
    >>> def build(scope):
    ...     clicks = scope.to_stream([(0, "ann"), (3, "ann"), (4, "bob"), (12, "ann")])
    ...     timed = clicks.delay(lambda r, t: r[0])
    ...     return timed.keyed_process(on_click, report, key=lambda r: r[1]).capture()
    >>> pt.example(build).extract()
    [(10, [('ann', 2)]), (14, [('bob', 1)]), (22, [('ann', 1)])]
    """
    op = "keyed_process"
    state_name = name if name is not None else "KeyedProcess"
    name = operator_name(name, "KeyedProcess", process)
    key_of, pairs = split_key(key)
    if ttl is not None and (type(ttl) is not int or ttl < 0):
        raise ValueError(f"{op} {name!r}: ttl must be a non-negative int, got {ttl!r}")
    if on_expire is not None and ttl is None:
        raise ValueError(f"{op} {name!r}: on_expire needs ttl=")

    def ctor(cap: Capability, info: OperatorInfo) -> Callable[[InputPort, OutputPort], None]:
        states: dict[Any, Any] = {}
        waiting = InTimeOrder()  # records waiting for earlier times
        timers = EventTimers()
        clock = ProcessingTimers() if on_processing_timer is not None else None
        ctx = KeyedContext(name, states, timers, clock)
        activator = info.activator()
        woken_for: list[float] = []  # the deadline the worker's timer will wake us for
        # With ttl: when each key expires, and those times as timers of their own.
        expiries = EventTimers() if ttl is not None else None
        expire_at: dict[Any, Any] = {}

        def per_key() -> list[tuple[Any, Any]]:
            """The state for a snapshot: ``(key, (state, [timer times]))``; with
            processing-time timers or a ttl, ``(key, (state, [timer times], [seconds left of
            each processing-time timer], expiry or None))``."""
            waiting.check_drained(op, name)
            keyed = timers.by_key()
            if clock is None and expiries is None:
                return [(k, (states.get(k), keyed.get(k, []))) for k in {**states, **keyed}]
            now = _time.monotonic()
            ticking = (
                {k: [max(0.0, d - now) for d in ds] for k, ds in clock.by_key().items()}
                if clock is not None
                else {}
            )
            return [
                (k, (states.get(k), keyed.get(k, []), ticking.get(k, []), expire_at.get(k)))
                for k in {**states, **keyed, **ticking, **expire_at}
            ]

        restored = snapshot.attach(info, per_key, state_name)
        for k, (state, timer_times, *rest) in restored or ():
            if state is not None:
                states[k] = state
            for t in timer_times:
                timers.set(t, k, cap)  # the timer's token, minted from the initial capability
            for seconds in rest[0] if rest and clock is not None else ():
                clock.set(_time.monotonic() + seconds, k, cap)  # type: ignore[union-attr]
            if len(rest) > 1 and rest[1] is not None and expiries is not None:
                expire_at[k] = rest[1]
                expiries.set(rest[1], k, cap)
        cap.drop()
        if clock is not None and len(clock):
            activator.activate()  # move the restored timers' capability to the input's time

        def apply(send: Capability | CapabilityRef, t: Any, batch: Any, out: OutputPort) -> None:
            if expiries is not None:
                expire_before(t, out)  # keys that expired before this time start afresh
            results = ctx.bind(t, send)
            r = None
            fn: Any = key_of
            try:
                for r in batch:
                    fn = key_of
                    if pairs:
                        k, v = r
                    else:
                        k, v = key_of(r), r
                    fn = process
                    ctx.key = k
                    process(ctx, k, v)
                    if expiries is not None:
                        new, old = t + ttl, expire_at.get(k)  # type: ignore[operator]
                        if new != old:
                            if old is not None:
                                expiries.cancel(old, k)
                            expiries.set(new, k, send)
                            expire_at[k] = new
            except Exception as exc:
                raise failure(op, name, fn, key_of, pairs, r, t, exc, info.address) from exc
            if results:
                out.give_batch(send, results, t)

        def expire_before(t: Any, out: OutputPort) -> None:
            assert expiries is not None
            while expiries.tokens is not None:
                least = expiries.tokens.least()
                if least is None or not least < t:
                    break
                expire(least, out)

        def expire(t: Any, out: OutputPort) -> None:
            """The keys whose ttl ends at ``t``: ``on_expire``, then their state goes."""
            assert expiries is not None
            held, keys = expiries.pop(t)
            results = ctx.bind(t, held)
            k = None
            try:
                for k in keys:
                    if expire_at.get(k) != t:
                        continue
                    del expire_at[k]
                    if on_expire is not None:
                        ctx.key = k
                        on_expire(ctx, k)
                    states.pop(k, None)
            except Exception as exc:
                raise OperatorError(
                    f"{op} {name!r}: on_expire {describe_function(on_expire)} raised "
                    f"{type(exc).__name__}: {exc} for key {k!r} at time {t!r}",
                    name,
                    info.address,
                ) from exc
            if results:
                out.give_batch(held, results, t)

        def fire(t: Any, out: OutputPort) -> None:
            held, keys = timers.pop(t)
            results = ctx.bind(t, held)
            k = None
            try:
                for k in keys:
                    ctx.key = k
                    on_timer(ctx, k, t)  # type: ignore[misc]
            except Exception as exc:
                raise OperatorError(
                    f"{op} {name!r}: on_timer {describe_function(on_timer)} raised "  # type: ignore[arg-type]
                    f"{type(exc).__name__}: {exc} for key {k!r} at time {t!r}",
                    name,
                    info.address,
                ) from exc
            if results:
                out.give_batch(held, results, t)

        def tick(out: OutputPort) -> None:
            """Fire the processing-time timers that are due (:func:`wake_for_next`, at the end
            of the invocation, schedules the next wake-up)."""
            assert clock is not None
            for deadline, k in clock.pop_due(_time.monotonic()):
                held = clock.cap
                assert held is not None
                results = ctx.bind(held.time, held)
                ctx.key = k
                try:
                    on_processing_timer(ctx, k, deadline)  # type: ignore[misc]
                except Exception as exc:
                    raise OperatorError(
                        f"{op} {name!r}: on_processing_timer "
                        f"{describe_function(on_processing_timer)} raised "
                        f"{type(exc).__name__}: {exc} for key {k!r}",
                        name,
                        info.address,
                    ) from exc
                if results:
                    out.give_batch(held, results, held.time)

        def wake_for_next(frontier: Any) -> None:
            """Keep the capability at the input's least time; ask the worker's clock to wake
            the operator at the next deadline (once per deadline)."""
            assert clock is not None
            clock.follow(frontier)
            now = _time.monotonic()
            if woken_for and woken_for[0] <= now:
                woken_for.clear()  # that wake-up has come
            nxt = clock.next_deadline()
            if nxt is not None and (not woken_for or nxt < woken_for[0]):
                woken_for[:] = [nxt]
                activator.activate_after(nxt - now)

        def logic(inp: InputPort, out: OutputPort) -> None:
            frontier = inp.frontier
            if clock is not None:
                tick(out)
            # Stashed records and due timers, merged in time order (records of a time first).
            while True:
                due = timers.next_due(frontier)
                gone = expiries.next_due(frontier) if expiries is not None else None
                first = waiting.first()
                if (
                    first is not None
                    and not frontier.less_than(first)
                    and (due is None or not due < first)
                    and (gone is None or not gone < first)
                ):
                    t, held, batches = waiting.pop_first()
                    for batch in batches:
                        apply(held, t, batch, out)
                elif due is not None and (gone is None or not gone < due):
                    fire(due, out)
                elif gone is not None:
                    expire(gone, out)
                else:
                    break
            waiting.admit(inp, apply, out)
            if expiries is not None:  # what the frontier already passed of the new expiries
                while (gone := expiries.next_due(frontier)) is not None:
                    expire(gone, out)
            if clock is not None:
                wake_for_next(frontier)
            ctx.unbind()
            waiting.settle()  # each holder's one token, moved once
            timers.settle()
            if expiries is not None:
                expiries.settle()
            if stats is not None:
                stats.record(len(states), len(timers), len(waiting) + timers.times())

        return logic

    if on_timer is None:
        on_timer = _no_timer_handler(name)
    route = checked_key(key_of, pairs, op, name)
    return unary_frontier(stream, Exchange(route), name, ctor, interest=_IF_CAP)


def _no_timer_handler(name: str) -> Callable[[KeyedContext, Any, Any], None]:
    def on_timer(ctx: KeyedContext, key: Any, t: Any) -> None:
        raise ValueError(f"keyed_process {name!r}: a timer fired but no on_timer was given")

    return on_timer
