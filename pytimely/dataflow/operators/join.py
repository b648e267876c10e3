"""A running inner equi-join of two streams, keyed state on both sides.

Both inputs are exchanged by key, so the records of one key meet on one worker.  Each side keeps
its records per key, grouped by timestamp (``key -> {time: [values]}``).  A record arriving on
one side pairs at once with the stored records of the same key on the other side, and is then
stored on its own side; so every matching pair is produced exactly once, by whichever of its two
records is processed second, whatever the arrival order across inputs, times and workers.

A pair is emitted at the **later** of its records' timestamps, ``max(t, t_other)``.  The arriving
record's capability (at ``t``) covers it: at ``t`` directly, or through a capability
``delayed`` to ``t_other > t``, minted and dropped in the same invocation.  The join never waits
for a frontier, so it holds no capability between invocations and adds no latency.

Memory: without ``within`` every record is kept (an inner join over all of history needs them
all).  ``within=d`` (integer times) restricts pairs to records whose timestamps differ by at
most ``d`` — an *interval join* — and forgets a record at ``t`` once the other input's
frontier has passed ``t + d`` (no partner can arrive any more); a key whose records are all
forgotten leaves no trace.  Forgetting happens whenever the operator runs (it is not woken by
frontier changes alone), so memory stays bounded on an unbounded stream with bounded live keys
and a bounded rate.

**Outer joins** (with ``within``).  ``how="left"`` (``"right"``, ``"outer"``) also emits
``(key, left, None)`` for a left record at ``t`` that found no partner (``(key, None, right)``
the other way round), at timestamp ``t + within``, once the other input's frontier has passed
that time: then no partner can come any more.  Such a record holds a capability at
``t + within`` until then (so a probe or a checkpoint at an earlier time never waits for it).
Records of one key and timestamp are matched together (a partner of one is a partner of all).
Without ``within`` no partner is ever ruled out before the other stream ends, so an outer
join needs it.

Times are integers, or partially ordered times (loop scopes' products), where "the later" is
the least upper bound of the two; ``within`` needs integers.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...order import Product, less_equal
from ...progress.operate import FrontierInterest
from .. import snapshot
from ..pacts import Exchange
from .generic import binary, binary_frontier
from .keyed import StateStats, checked_key, failure, split_key

if TYPE_CHECKING:
    from ..capability import Capability, CapabilityRef
    from ..operator import OperatorInfo
    from ..ports import Frontier, InputPort, OutputPort
    from ..stream import Stream

__all__ = ["join"]

_IF_CAPABILITY = FrontierInterest.IF_CAPABILITY


class _Side:
    """The stored records of one input: ``key -> {time: [values]}``, and (for ``within``) when
    each time's records may be forgotten."""

    __slots__ = ("records", "count", "expiry", "expiry_times")

    def __init__(self) -> None:
        self.records: dict[Any, dict[Any, list[Any]]] = {}
        self.count = 0
        self.expiry: dict[Any, set[Any]] = {}  # time -> keys holding records at that time
        self.expiry_times: list[Any] = []  # heap of the times in ``expiry``

    def store(self, k: Any, t: Any, v: Any, track: bool) -> None:
        by_time = self.records.get(k)
        if by_time is None:
            by_time = self.records[k] = {}
        values = by_time.get(t)
        if values is None:
            by_time[t] = [v]
            if track:
                keys = self.expiry.get(t)
                if keys is None:
                    self.expiry[t] = {k}
                    heapq.heappush(self.expiry_times, t)
                else:
                    keys.add(k)
        else:
            values.append(v)
        self.count += 1

    def forget(self, within: int, other_frontier: Frontier) -> None:
        """Drop the records no future record of the other side can pair with."""
        times = self.expiry_times
        while times and not other_frontier.less_equal(times[0] + within):
            t = heapq.heappop(times)
            for k in self.expiry.pop(t):
                by_time = self.records[k]
                self.count -= len(by_time.pop(t))
                if not by_time:
                    del self.records[k]


def least_upper_bound(a: Any, b: Any) -> Any:
    """The earliest time at or after both ``a`` and ``b`` (for products, per coordinate).

    >>> from pytimely.order import Product
    >>> least_upper_bound(3, 5), least_upper_bound(Product(1, 4), Product(2, 3))
    (5, (2, 4))
    """
    if less_equal(a, b):
        return b
    if less_equal(b, a):
        return a
    if isinstance(a, Product) and isinstance(b, Product):
        return Product(least_upper_bound(a[0], b[0]), least_upper_bound(a[1], b[1]))
    raise TypeError(f"times {a!r} and {b!r} have no common later time")


def join(
    stream: Stream,
    other: Stream,
    key: Callable[[Any], Any] | None = None,
    other_key: Callable[[Any], Any] | None = None,
    within: int | None = None,
    name: str = "Join",
    stats: StateStats | None = None,
    how: str = "inner",
) -> Stream:
    """Running inner equi-join: ``(key, left, right)`` once for every pair of records with
    equal keys, at the later of their two timestamps.

    Records are ``(key, value)`` pairs (``left``/``right`` are the values), or with ``key=`` /
    ``other_key=`` any records (then ``left``/``right`` are the whole records); ``other_key``
    defaults to ``key``.  ``within=d`` joins only records at most ``d`` time units apart and
    keeps memory bounded (see the module docstring).  With ``within``, ``how="left" |
    "right" | "outer"`` also emits each record that found no partner, with ``None`` for the
    other side, at its timestamp plus ``within``, when no partner can come any more.

    >>> import pytimely as pt
    >>> def build(scope):
    ...     orders = scope.to_stream([("ann", "book"), ("bob", "pen")])
    ...     users = scope.to_stream([("ann", "Paris")]).delay(lambda r, t: 5)
    ...     return orders.join(users).capture()
    >>> pt.example(build).extract()
    [(5, [('ann', 'book', 'Paris')])]
    """
    if other_key is None:
        other_key = key
    if within is not None and (not isinstance(within, int) or within < 0):
        raise ValueError(f"join {name!r}: within must be a non-negative int, got {within!r}")
    if how not in ("inner", "left", "right", "outer"):
        raise ValueError(
            f"join {name!r}: how must be 'inner', 'left', 'right' or 'outer', got {how!r}"
        )
    if how != "inner" and within is None:
        raise ValueError(
            f"join {name!r}: how={how!r} needs within=: without it no partner is ever ruled "
            "out before the other stream ends, so unmatched records could never be emitted"
        )
    op = "join"
    outer_left, outer_right = how in ("left", "outer"), how in ("right", "outer")
    left_key, left_pairs = split_key(key)
    right_key, right_pairs = split_key(other_key)

    def ctor(cap: Capability, info: OperatorInfo) -> Callable[..., None]:
        left, right = _Side(), _Side()
        track = within is not None
        # Outer sides: records no partner met yet (time -> key -> values), and a capability
        # per such time.
        unmatched: tuple[_Unmatched | None, _Unmatched | None] = (
            _Unmatched(within) if outer_left and within is not None else None,
            _Unmatched(within) if outer_right and within is not None else None,
        )

        def per_key() -> list[tuple[Any, Any]]:
            """The state for a snapshot: ``(key, (left {time: values}, right {time: values},
            left unmatched {emission time: values}, right unmatched {emission time:
            values}))``."""
            keys = {**left.records, **right.records}
            for u in unmatched:
                if u is not None:
                    keys.update(dict.fromkeys(u.keys()))
            return [
                (k, (left.records.get(k, {}), right.records.get(k, {}),
                     *(u.of_key(k) if u is not None else {} for u in unmatched)))
                for k in keys
            ]  # fmt: skip

        for k, sides in snapshot.attach(info, per_key) or ():
            for side, by_time in zip((left, right), sides[:2]):
                for t, values in by_time.items():
                    for v in values:
                        side.store(k, t, v, track)
            for u, by_time in zip(unmatched, sides[2:]):
                for t, values in by_time.items():
                    if u is not None:
                        u.add(k, t - u.within, values, cap)
        cap.drop()  # pairs are sent with the arriving record's capability

        def arrive(
            ref: CapabilityRef,
            batch: Any,
            key_of: Any,
            pairs: bool,
            mine: _Side,
            theirs: _Side,
            is_left: bool,
            out: OutputPort,
        ) -> None:
            t = ref.time
            total = type(t) is int
            by_out_time: dict[Any, list[Any]] = {}
            here = by_out_time[t] = []
            stored = theirs.records
            mine_waiting, theirs_waiting = unmatched if is_left else (unmatched[1], unmatched[0])
            r = None
            try:
                for r in batch:
                    if pairs:
                        k, v = r
                    else:
                        k, v = key_of(r), r
                    partners = stored.get(k)
                    met = False
                    if partners:
                        for t2, values in partners.items():
                            if track and abs(t2 - t) > within:  # type: ignore[operator]
                                continue
                            met = True
                            if theirs_waiting is not None:
                                theirs_waiting.met(k, t2)
                            if not total:
                                t2 = least_upper_bound(t, t2)
                            if t < t2:
                                dest = by_out_time.get(t2)
                                if dest is None:
                                    dest = by_out_time[t2] = []
                            else:
                                dest = here
                            if is_left:
                                dest.extend([(k, v, w) for w in values])
                            else:
                                dest.extend([(k, w, v) for w in values])
                    mine.store(k, t, v, track)
                    if mine_waiting is not None and not met:
                        mine_waiting.add(k, t, [v], ref)
            except Exception as exc:
                raise failure(op, name, key_of, key_of, pairs, r, t, exc, info.address) from exc
            for t_out, results in by_out_time.items():
                if not results:
                    continue
                if t_out == t:
                    out.give_batch(ref, results)
                else:
                    later = ref.delayed(t_out)
                    out.give_batch(later, results)
                    later.drop()

        def logic(inp1: InputPort, inp2: InputPort, out: OutputPort) -> None:
            for ref, batch in inp1:
                arrive(ref, batch, left_key, left_pairs, left, right, True, out)
            for ref, batch in inp2:
                arrive(ref, batch, right_key, right_pairs, right, left, False, out)
            if unmatched[0] is not None:
                unmatched[0].release(inp2.frontier, out, lambda k, v: (k, v, None))
            if unmatched[1] is not None:
                unmatched[1].release(inp1.frontier, out, lambda k, v: (k, None, v))
            if track:
                left.forget(within, inp2.frontier)  # type: ignore[arg-type]
                right.forget(within, inp1.frontier)  # type: ignore[arg-type]
            if stats is not None:
                keys = len(left.records) + sum(1 for k in right.records if k not in left.records)
                stats.record(keys, left.count + right.count, len(left.expiry) + len(right.expiry))

        return logic

    pacts = (
        Exchange(checked_key(left_key, left_pairs, op, name)),
        Exchange(checked_key(right_key, right_pairs, op, name)),
    )
    if how == "inner":
        return binary(stream, other, *pacts, name, ctor)
    return binary_frontier(stream, other, *pacts, name, ctor, _IF_CAPABILITY)


class _Unmatched:
    """An outer side's records that no partner met yet, by the time they leave unmatched if
    none does (their timestamp plus ``within``): ``time -> {key: values}``, with one
    capability per such time."""

    __slots__ = ("within", "waiting", "caps")

    def __init__(self, within: int) -> None:
        self.within = within
        self.waiting: dict[Any, dict[Any, list[Any]]] = {}
        self.caps: dict[Any, Capability] = {}

    def add(self, k: Any, t: Any, values: list[Any], holder: Any) -> None:
        """Records ``values`` of key ``k`` at ``t`` wait (``holder``: a capability or message
        reference at or before ``t``)."""
        due = t + self.within
        by_key = self.waiting.get(due)
        if by_key is None:
            by_key = self.waiting[due] = {}
            self.caps[due] = holder.delayed(due)
        by_key.setdefault(k, []).extend(values)

    def met(self, k: Any, t: Any) -> None:
        """A partner met the records of ``k`` at ``t``."""
        by_key = self.waiting.get(t + self.within)
        if by_key is not None:
            by_key.pop(k, None)

    def keys(self) -> set[Any]:
        return {k for by_key in self.waiting.values() for k in by_key}

    def of_key(self, k: Any) -> dict[Any, list[Any]]:
        return {t: by_key[k] for t, by_key in self.waiting.items() if k in by_key}

    def release(self, other: Frontier, out: OutputPort, row: Callable[..., Any]) -> None:
        """Send the records no partner can meet any more (the other input passed their
        ``t + within``), at that time, and drop its capability."""
        for due in [due for due in self.waiting if not other.less_equal(due)]:
            rows = [row(k, v) for k, values in self.waiting.pop(due).items() for v in values]
            cap = self.caps.pop(due)
            if rows:
                out.give_batch(cap, rows)
            cap.drop()
