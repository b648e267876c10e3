"""The as-of join: each left record with the latest right record of its key at or before its
event time (``pandas.merge_asof``'s backward direction, as a running operator); and the lookup
join, the same on timestamps against a table of updates and deletes (:func:`lookup_join`).

Both inputs are exchanged by key.  Event times are the timestamps (``event_time=None``) or
read from the records (``event_time=`` / ``other_event_time=``, ints; a record's timestamp
must then be at or before its event time, as ``io.read(event_time=...)`` stamps them).

**When a left record is answered.**  A left record of event time ``e`` waits until the right
input's frontier has passed ``e``: then every right record of event time ``<= e`` has arrived
(its timestamp is at or before its event time), and the answer -- the right record of the
greatest event time ``<= e`` (ties: the last to arrive), or ``None`` if there is none or it is
more than ``tolerance`` older -- can no longer change.  The result ``(key, left, right)`` is
sent at the left record's event time ``e`` (at its timestamp, if that is later: a late
record); the operator holds a capability there until then, so the frontier downstream never
passes a left record that is still waiting, and the rest of the dataflow (a checkpoint at a
time before ``e``, say) never waits for it.  Every left record is answered exactly once (a
left outer join, like ``merge_asof``).

**Memory.**  Pending left records wait only for the right frontier.  Per key, right records
are kept in event-time order, and those older than the newest one at or before the *horizon*
-- the least event time a left record can still have (the least pending one, and the left
frontier) -- are forgotten when the key gets a new right record: no future answer needs them.
So a key keeps its right records newer than the horizon, plus one.

**Late records.**  A right record whose event time is below the right frontier when it
arrives (a late one) may come after left records that it should have answered; they keep
their answers.  A left record already behind the right frontier is answered at once.

>>> import pytimely as pt
>>> def build(scope):
...     trades = scope.to_stream([("AAPL", 10), ("AAPL", 25), ("MSFT", 3)])
...     trades = trades.delay(lambda r, t: r[1])          # the event time is the timestamp
...     quotes = scope.to_stream([("AAPL", 9), ("AAPL", 20), ("AAPL", 26)])
...     quotes = quotes.delay(lambda r, t: r[1])
...     return trades.asof_join(quotes).capture()
>>> pt.example(build).extract()
[(3, [('MSFT', 3, None)]), (10, [('AAPL', 10, 9)]), (25, [('AAPL', 25, 20)])]
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...progress.operate import FrontierInterest
from .. import snapshot
from ..pacts import Exchange
from .generic import binary_frontier
from .keyed import checked_key, failure, split_key

if TYPE_CHECKING:
    from ..capability import Capability
    from ..operator import OperatorInfo
    from ..ports import InputPort, OutputPort
    from ..stream import Stream

__all__ = ["asof_join", "lookup_join"]


def asof_join(
    stream: Stream,
    other: Stream,
    key: Callable[[Any], Any] | None = None,
    other_key: Callable[[Any], Any] | None = None,
    event_time: Callable[[Any], int] | None = None,
    other_event_time: Callable[[Any], int] | None = None,
    tolerance: int | None = None,
    name: str = "AsofJoin",
) -> Stream:
    """Each record of this stream with the latest record of ``other`` with the same key at or
    before its event time: ``(key, left, right)``, ``right`` being ``None`` when there is no
    such record or it is more than ``tolerance`` older (see :mod:`.asof`).

    Records are ``(key, value)`` pairs (``left``/``right`` are the values), or with ``key=`` /
    ``other_key=`` any records (then the whole records); ``other_key`` defaults to ``key``.
    Event times are the timestamps unless ``event_time`` / ``other_event_time`` read them from
    the records.  The result leaves at the left record's event time (or its timestamp, if
    later) once the other stream's frontier has passed that event time.

    >>> import pytimely as pt
    >>> def build(scope):
    ...     clicks = scope.to_stream([("ann", 5), ("bob", 7)])
    ...     prices = scope.to_stream([("ann", (1, 9.5)), ("ann", (4, 9.9)), ("bob", (2, 3.0))])
    ...     at = lambda r: r[1] if isinstance(r[1], int) else r[1][0]
    ...     joined = clicks.asof_join(prices, event_time=at, other_event_time=at, tolerance=3)
    ...     return joined.capture()
    >>> pt.example(build).extract()
    [(5, [('ann', 5, (4, 9.9))]), (7, [('bob', 7, None)])]
    """
    return _asof(stream, other, key, other_key, event_time, other_event_time, tolerance, name,
                 "asof_join", inner=False)  # fmt: skip


def lookup_join(
    stream: Stream,
    table: Stream,
    key: Callable[[Any], Any] | None = None,
    table_key: Callable[[Any], Any] | None = None,
    how: str = "left",
    name: str = "LookupJoin",
) -> Stream:
    """Enrich each record with the value its key has in a changing table, as of the record's
    timestamp: ``(key, record, value)``.

    ``table`` carries ``(key, value)`` updates (with ``table_key=``: any record, the whole
    record being the value) applied in timestamp order (updates of one timestamp in arrival
    order); a value of ``None`` deletes the key.  A record at timestamp ``t`` sees every
    update at or before ``t``, and is answered -- at ``t`` -- once the table's frontier has
    passed ``t``.  ``how="left"`` (default) answers ``None`` for a key with no value;
    ``how="inner"`` drops such records.  This is :func:`asof_join` on timestamps, with deletes.

    >>> import pytimely as pt
    >>> def build(scope):
    ...     orders = scope.to_stream([("ann", "book"), ("bob", "pen")]).delay(lambda r, t: 5)
    ...     users = scope.to_stream([("ann", "Paris"), ("bob", "Rome")])
    ...     moved = scope.to_stream([("ann", "Oslo"), ("bob", None)]).delay(lambda r, t: 3)
    ...     return orders.lookup_join(users.concat(moved)).capture()
    >>> pt.example(build).extract()
    [(5, [('ann', 'book', 'Oslo'), ('bob', 'pen', None)])]
    """
    if how not in ("left", "inner"):
        raise ValueError(f"lookup_join {name!r}: how must be 'left' or 'inner', got {how!r}")
    return _asof(stream, table, key, table_key, None, None, None, name, "lookup_join",
                 inner=how == "inner")  # fmt: skip


def _asof(
    stream: Stream,
    other: Stream,
    key: Callable[[Any], Any] | None,
    other_key: Callable[[Any], Any] | None,
    event_time: Callable[[Any], int] | None,
    other_event_time: Callable[[Any], int] | None,
    tolerance: int | None,
    name: str,
    op: str,
    inner: bool,
) -> Stream:
    """The operator of :func:`asof_join` and :func:`lookup_join` (``inner``: drop records
    answered ``None``)."""
    if other_key is None:
        other_key = key
    if tolerance is not None and (type(tolerance) is not int or tolerance < 0):
        raise ValueError(f"{op} {name!r}: tolerance must be a non-negative int, got {tolerance!r}")
    left_key, left_pairs = split_key(key)
    right_key, right_pairs = split_key(other_key)
    left_at, right_at = event_time, other_event_time  # of whole records

    def ctor(cap: Capability, info: OperatorInfo) -> Callable[..., None]:
        # Right records per key, in event-time order: parallel lists of (event time, order of
        # arrival) and values.
        right: dict[Any, tuple[list[tuple[int, int]], list[Any]]] = {}
        # Left records waiting for the right frontier: a heap of (event time, order, time, key,
        # value), and the capabilities they hold: time -> [capability, records].
        waiting: list[tuple[int, int, Any, Any, Any]] = []
        held: dict[Any, list[Any]] = {}
        order = itertools.count()

        def per_key() -> list[tuple[Any, Any]]:
            """Snapshot: ``(key, (right [(event time, value)], waiting [(event time, time of
            the answer, value)]))``."""
            state: dict[Any, tuple[list, list]] = {}
            for k, (times, values) in right.items():
                state[k] = ([(e, v) for (e, _n), v in zip(times, values)], [])
            for e, _n, t, k, v in sorted(waiting):
                state.setdefault(k, ([], []))[1].append((e, t, v))
            return list(state.items())

        restored = snapshot.attach(info, per_key)

        def store_right(k: Any, e: int, v: Any, horizon: int | None) -> None:
            stamp = (e, next(order))  # ties in event time: in order of arrival
            entry = right.get(k)
            if entry is None:
                right[k] = ([stamp], [v])
                return
            times, values = entry
            at = bisect.bisect_right(times, stamp)
            times.insert(at, stamp)
            values.insert(at, v)
            if horizon is not None:  # forget what no future answer needs
                keep_from = bisect.bisect_right(times, (horizon, float("inf"))) - 1
                if keep_from > 0:
                    del times[:keep_from], values[:keep_from]

        def answer(k: Any, e: int) -> Any:
            entry = right.get(k)
            if entry is None:
                return None
            times, values = entry
            at = bisect.bisect_right(times, (e, float("inf"))) - 1
            if at < 0 or (tolerance is not None and e - times[at][0] > tolerance):
                return None
            return values[at]

        def horizon(left_frontier: Any) -> int | None:
            """The least event time a left record can still have (``None``: no bound known,
            so nothing is forgotten)."""
            least = [min(left_frontier.elements())] if not left_frontier.is_empty() else []
            if waiting:
                least.append(waiting[0][0])
            return min(least) if least else None

        def logic(inp1: InputPort, inp2: InputPort, out: OutputPort) -> None:
            limit = horizon(inp1.frontier)
            for ref, batch in inp2:
                r = None
                fn: Any = right_key
                try:
                    for r in batch:
                        fn = right_key
                        k, v = r if right_pairs else (right_key(r), r)
                        fn = right_at
                        e = ref.time if right_at is None else right_at(r)
                        store_right(k, e, v, limit)
                except Exception as exc:
                    raise failure(op, name, fn, right_key, right_pairs, r, ref.time, exc,
                                  info.address) from exc  # fmt: skip
            for ref, batch in inp1:
                t = ref.time
                r = None
                fn = left_key
                try:
                    for r in batch:
                        fn = left_key
                        k, v = r if left_pairs else (left_key(r), r)
                        fn = left_at
                        e = t if left_at is None else left_at(r)
                        at = e if e > t else t  # where the answer will leave
                        heapq.heappush(waiting, (e, next(order), at, k, v))
                        h = held.get(at)
                        if h is None:
                            held[at] = [ref.delayed(at), 1]
                        else:
                            h[1] += 1
                except Exception as exc:
                    raise failure(op, name, fn, left_key, left_pairs, r, t, exc,
                                  info.address) from exc  # fmt: skip
            release(inp2.frontier, out)

        def release(right_frontier: Any, out: OutputPort) -> None:
            ready: dict[Any, list[Any]] = {}
            while waiting and not right_frontier.less_equal(waiting[0][0]):
                e, _n, t, k, v = heapq.heappop(waiting)
                ready.setdefault(t, []).append((k, v, answer(k, e)))
            for t, results in ready.items():
                h = held[t]
                h[1] -= len(results)
                if inner:
                    results = [r for r in results if r[2] is not None]
                if results:
                    out.give_batch(h[0], results)
                if h[1] == 0:
                    h[0].drop()
                    del held[t]

        for k, (rights, lefts) in restored or ():
            for e, v in rights:
                store_right(k, e, v, None)
            for e, t, v in lefts:
                heapq.heappush(waiting, (e, next(order), t, k, v))
                h = held.get(t)
                if h is None:
                    held[t] = [cap.delayed(t), 1]
                else:
                    h[1] += 1
        cap.drop()  # hold a capability only where a left record waits
        return logic

    return binary_frontier(
        stream,
        other,
        Exchange(checked_key(left_key, left_pairs, op, name)),
        Exchange(checked_key(right_key, right_pairs, op, name)),
        name,
        ctor,
        interest=FrontierInterest.IF_CAPABILITY,
    )
