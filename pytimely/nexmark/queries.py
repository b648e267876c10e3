"""NEXMark Q0..Q8 as pytimely dataflows, written with timestamp tokens; Q4 and Q7 also with
Naiad-style notifications and Flink-style watermarks; Q5, Q7 and Q8 also with the library's
event-time windows (``window_count``, ``window_fold``, ``window_join``), a few lines each.

Every query matches :mod:`pytimely.nexmark.reference` exactly: its output records are the
reference's rows (logical time first), so ``sorted(all output records) ==
reference.qN(events)`` after the input closes, and, with the input frontier at ``F``, the rows
output so far are ``reference.qN(events, frontier=F)`` (the "emitted once the input frontier F
..." column of the reference's table).  See the reference docstrings for the row layouts.
One exception: Q8 as a window join emits a row when its window closes, 12 to 24 h after the
reference's rule (see :func:`_q8_library`); its final rows are the reference's.

Interface
---------

``build_query(name, scope, events, idiom="tokens", **params) -> Stream`` builds query ``name``
(``"q0"`` .. ``"q8"``) reading the events stream ``events`` (see :mod:`.events`: batches of
``EventBatch`` or of ``Person``/``Auction``/``Bid`` records) and returns the stream of result
rows.  ``idiom`` is ``"tokens"`` for every query, also ``"notifications"`` or
``"watermarks"`` for Q4 and Q7, and ``"library"`` for Q5, Q7 and Q8 (:data:`IDIOMS`).
Parameters: ``rows`` (Q0: output reference
rows instead of passing the event batches through), ``key`` (Q6: ``"bidder"`` or
``"seller"``), ``notify_per_call`` (notifications: deliver at most this many per invocation,
``1`` = Naiad's scheduling), ``watermark_stats`` / ``watermark_probe`` (watermarks: a
:class:`~pytimely.dataflow.operators.watermarks.WatermarkStats` to count markers into, a
:class:`~pytimely.dataflow.operators.watermarks.WatermarkProbe` attached to the result).

Time
----

Each event is sent at a dataflow time ``t <= date_time`` (typically ``date_time`` rounded down
to a quantum, e.g. the harness' 1 ms tick; see :func:`.events.time_batches`); the queries work
with any quantum.  Event-time logic uses the records' ``date_time``/``expires`` fields; the
dataflow timestamp only bounds them (input frontier ``F`` => every event with ``date_time < F``
has arrived, none that arrives later has).  Output timestamps are never later than the row's
logical time; they equal it where that is free (Q5, Q7: one message per window or boundary);
operators that close many things with distinct ns times (Q4, Q6 and the Q4 closing stage)
send each activation's results in one batch at their held token's time, which is ``<=`` every
result's logical time (Megaphone's choice: no per-result coordination).

Design (tokens)
---------------

* First stage on each worker (``Pipeline``): extract the records a query needs from the event
  batches (numpy columns for ``EventBatch``), then ``Exchange`` by the query's key: auction id
  (Q4 closing, Q5 counts), seller / person id (Q3, Q8), category (Q4 average), bidder or
  seller (Q6), window (Q7).  Everything is correct on any number of workers.
* Operators that wait for event time keep their pending work in a heap keyed by time and hold
  **one token, at the minimum pending time** (:class:`~pytimely.dataflow.idioms.MinToken`,
  Megaphone's priority queue of tokens): taken from an incoming message's token with
  ``delayed`` when something earlier arrives, downgraded to the new minimum after releasing
  work, dropped when nothing is pending.
  Their interest is ``IF_CAPABILITY``: time passing is none of their business while idle.
* Q7 pre-aggregates per worker (numpy max per window per batch), holding one token per open
  window at the window's end, and exchanges only the partial maxima (one record per window per
  worker) to the worker that owns the window.
* Running aggregates whose result depends on the order of closings (Q4 average, Q6) buffer
  closings until the frontier passes their time and apply them in canonical ``(expires,
  auction id)`` order, so the output is deterministic and equals the reference on any number
  of workers.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable
from typing import Any, Unpack

import numpy as np

from ..dataflow.idioms import MinToken
from ..dataflow.operators.generic import (
    binary,
    unary_frontier,
)
from ..dataflow.operators.notify import unary_notify
from ..dataflow.operators.watermarks import (
    WStream,
)
from ..dataflow.pacts import Exchange, Pipeline
from ..windows import Sliding, Tumbling
from .auctions import closed_auctions, q4, q6
from .blocks import IF_CAP, INF, IdiomOptions, by_idiom, first, fmin, per_batch, third
from .events import auctions_of, bid_columns, event_rows, persons_of
from .generator import Bid, EventBatch
from .reference import Q3_CATEGORY, Q3_STATES, Q5_SLIDE, Q5_WINDOW, Q7_WINDOW, Q8_WINDOW

QUERIES = ("q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8")
IDIOMS: dict[str, tuple[str, ...]] = {q: ("tokens",) for q in QUERIES}
IDIOMS["q4"] = ("tokens", "notifications", "watermarks")
IDIOMS["q5"] = IDIOMS["q8"] = ("tokens", "library")
IDIOMS["q7"] = ("tokens", "notifications", "watermarks", "library")

__all__ = ["IDIOMS", "QUERIES", "build_query", "closed_auctions", *QUERIES]  # and q0 .. q8

# ---------------------------------------------------------------------------------------------
# Building blocks


# ---------------------------------------------------------------------------------------------
# Q0 - Q2: per record


def q0(scope: Any, events: Any, rows: bool = False) -> Any:
    """Pass-through.  ``rows=False``: the event batches themselves (what Megaphone measures);
    ``rows=True``: reference rows ``(date_time, kind, *record)``."""
    if rows:
        return per_batch(events, "Q0 Rows", event_rows)
    return per_batch(events, "Q0 PassThrough", lambda batch: batch)


def _q1_rows(batch: Any) -> list[tuple]:
    if type(batch) is EventBatch:
        b = batch.bids
        return list(
            zip(
                b.date_time.tolist(),
                b.auction.tolist(),
                b.bidder.tolist(),
                (b.price * 89 // 100).tolist(),
            )
        )
    return [(e[3], e[0], e[1], e[2] * 89 // 100) for e in batch if type(e) is Bid]


def q1(scope: Any, events: Any) -> Any:
    """Currency conversion: ``(date_time, auction, bidder, price * 89 // 100)`` per bid."""
    return per_batch(events, "Q1 Map", _q1_rows)


def _q2_rows(batch: Any) -> list[tuple]:
    if type(batch) is EventBatch:
        b = batch.bids
        keep = b.auction % 123 == 0
        return list(
            zip(b.date_time[keep].tolist(), b.auction[keep].tolist(), b.price[keep].tolist())
        )
    return [(e[3], e[0], e[2]) for e in batch if type(e) is Bid and e[0] % 123 == 0]


def q2(scope: Any, events: Any) -> Any:
    """Selection: ``(date_time, auction, price)`` for bids with ``auction % 123 == 0``."""
    return per_batch(events, "Q2 Filter", _q2_rows)


# ---------------------------------------------------------------------------------------------
# Q3: incremental join


def _q3_persons(batch: Any) -> list[tuple]:
    # Every person goes to the join (persons are 2 % of events): a person outside the states
    # resolves the auctions waiting for it as "no match" instead of leaving them pending.
    return [(p[0], p[1], p[4], p[5], p[6]) for p in persons_of(batch)]


def _q3_auctions(batch: Any) -> list[tuple]:
    return [(a[0], a[5], a[7]) for a in auctions_of(batch) if a[8] == Q3_CATEGORY]


def q3(scope: Any, events: Any) -> Any:
    """Local item suggestion: auctions of category 10 joined with persons from OR/ID/CA on
    ``seller == person.id``; row ``(max(a.t, p.t), name, city, state, auction id)`` when the
    later of the two arrives.  Persons are exchanged by id, auctions by seller; persons are kept
    forever, an auction waits only until its seller is known.  No tokens are held: rows are sent
    at the arriving record's timestamp."""
    persons = per_batch(events, "Q3 Persons", _q3_persons)
    auctions = per_batch(events, "Q3 Auctions", _q3_auctions)

    def ctor(cap: Any, info: Any) -> Any:
        cap.drop()
        known: dict[int, Any] = {}  # person id -> (name, city, state, date_time) or None
        waiting: dict[int, list[tuple[int, int]]] = {}  # seller -> [(auction id, date_time)]

        def logic(pin: Any, ain: Any, out: Any) -> None:
            for ref, batch in pin:
                rows = []
                for pid, name, city, state, pdt in batch:
                    match = (name, city, state, pdt) if state in Q3_STATES else None
                    known[pid] = match
                    waiting_auctions = waiting.pop(pid, None)
                    if waiting_auctions and match is not None:
                        for aid, adt in waiting_auctions:
                            rows.append((max(adt, pdt), name, city, state, aid))
                if rows:
                    out.session(ref).give_batch(rows)
            for ref, batch in ain:
                rows = []
                for aid, adt, seller in batch:
                    if seller in known:
                        p = known[seller]
                        if p is not None:
                            rows.append((max(adt, p[3]), p[0], p[1], p[2], aid))
                    else:
                        waiting.setdefault(seller, []).append((aid, adt))
                if rows:
                    out.session(ref).give_batch(rows)

        return logic

    return binary(persons, auctions, Exchange(first), Exchange(third), "Q3 Join", ctor)


# ---------------------------------------------------------------------------------------------
# Q5: hot items


def _q5_bids(batch: Any) -> list[tuple]:
    if type(batch) is EventBatch:
        b = batch.bids
        return list(zip(b.auction.tolist(), b.date_time.tolist()))
    return [(e[0], e[3]) for e in batch if type(e) is Bid]


def q5(scope: Any, events: Any, idiom: str = "tokens") -> Any:
    """Hot items: 60 s window sliding every 1 s, the auction with most bids (ties: larger id),
    at every boundary ``t`` where a non-empty 1 s slice enters or leaves and the window is not
    empty; ``(t, auction, count)`` once the frontier is strictly past ``t``.

    Stage 1 (bids exchanged by auction): per worker, per-slice counts; at each boundary the
    worker reports its local best ``(t, auction, count, changed)``.  One token, at the next
    boundary the worker must report.  Stage 2 (all reports to worker 0): the global maximum at
    every boundary where some worker's window changed.  Since an auction's bids all meet on one
    worker, the global best is the best of the local bests.  ``idiom="library"``:
    :func:`_q5_library`.
    """
    if idiom == "library":
        return _q5_library(events)
    if idiom != "tokens":
        raise ValueError(f"q5: unknown idiom {idiom!r}")
    slide, window = Q5_SLIDE, Q5_WINDOW
    bids = per_batch(events, "Q5 Bids", _q5_bids)

    def count_ctor(cap: Any, info: Any) -> Any:
        cap.drop()
        slices: dict[int, Counter] = {}  # slice end -> counts (pending or in the window)
        pending_ends: list[int] = []  # heap: slices not yet entered
        counts: Counter = Counter()  # the window at the last processed boundary
        cursor = [None]  # next boundary to process while the window is non-empty
        token = MinToken()

        def next_boundary() -> int | None:
            if counts:
                return cursor[0]
            return pending_ends[0] if pending_ends else None

        def logic(inp: Any, out: Any) -> None:
            for ref, batch in inp:
                least = INF
                for auction, d in batch:
                    s = (d // slide + 1) * slide
                    c = slices.get(s)
                    if c is None:
                        c = slices[s] = Counter()
                        heapq.heappush(pending_ends, s)
                        least = min(least, s)
                    c[auction] += 1
                if least < token.time:
                    token.cover(ref, least)
            limit = fmin(inp.frontier)
            t = next_boundary()
            if t is None or t >= limit:
                return
            while t is not None and t < limit:
                changed = False
                if pending_ends and pending_ends[0] == t:
                    heapq.heappop(pending_ends)
                    counts.update(slices[t])
                    changed = True
                leaving = slices.pop(t - window, None)
                if leaving:
                    counts.subtract(leaving)
                    for a in leaving:
                        if counts[a] <= 0:
                            del counts[a]
                    changed = True
                if counts:
                    best_a, best_n = max(counts.items(), key=_count_then_id)
                    out.give(token.cap, (t, best_a, best_n, changed), time=t)
                elif changed:
                    out.give(token.cap, (t, -1, 0, True), time=t)
                cursor[0] = t + slide
                t = next_boundary()
            token.settle(t)

        return logic

    reports = unary_frontier(bids, Exchange(first), "Q5 Count", count_ctor, interest=IF_CAP)

    def max_ctor(cap: Any, info: Any) -> Any:
        cap.drop()
        pending: dict[int, list[Any]] = {}  # boundary -> [token, reports]

        def logic(inp: Any, out: Any) -> None:
            for ref, batch in inp:
                entry = pending.get(ref.time)
                if entry is None:
                    pending[ref.time] = [ref.retain(), list(batch)]
                else:
                    entry[1].extend(batch)
            if not pending:
                return
            frontier = inp.frontier
            for t in sorted(t for t in pending if not frontier.less_equal(t)):
                cap_t, reps = pending.pop(t)
                if any(r[3] for r in reps):
                    live = [r for r in reps if r[2] > 0]
                    if live:
                        best = max(live, key=lambda r: (r[2], r[1]))
                        out.give(cap_t, (t, best[1], best[2]))
                cap_t.drop()

        return logic

    return unary_frontier(reports, Exchange(route=_to_zero), "Q5 Max", max_ctor, interest=IF_CAP)


def _q5_library(events: Any) -> Any:
    """Q5 on the library's windows.  ``window_count`` over ``Sliding(60 s, 1 s)`` counts each
    auction's bids in ``[t - 60 s, t)``, emitted at ``t``.  The reference reports only
    boundaries where a non-empty 1 s slice enters or leaves, so a ``Tumbling(1 s)`` count marks
    each non-empty slice's end ``t`` and (``delay``-ed) ``t + 60 s``.  ``aggregate`` then picks,
    per boundary, the hottest auction (ties: larger id) once the frontier passes ``t``: the
    reference's ``F > t``."""
    bids = per_batch(events, "Q5 Bids", _q5_bids)  # (auction, date_time)
    counts = bids.window_count(Sliding(Q5_WINDOW, Q5_SLIDE), event_time=_second, name="Q5 Counts")
    slices = bids.window_count(
        Tumbling(Q5_SLIDE), key=_slice_of, event_time=_second, name="Q5 Slices"
    )
    marks = slices.output.flat_map(_enter_and_leave).delay(_at_boundary)
    candidates = counts.output.map(_count_at_boundary)
    hottest = candidates.concat(marks).aggregate(_hotter, _q5_row, init=_nothing_hot)
    return hottest.filter(_is_row)


def _second(r: Any) -> Any:
    return r[1]


def _slice_of(bid: tuple[int, int]) -> int:
    return bid[1] // Q5_SLIDE


def _enter_and_leave(window_count: tuple) -> list[tuple[int, None]]:
    """The boundaries where a non-empty slice ``[start, end)`` enters and leaves Q5's window."""
    end = window_count[2]
    return [(end, None), (end + Q5_WINDOW, None)]


def _at_boundary(mark: tuple[int, None], _t: int) -> int:
    return mark[0]


def _count_at_boundary(window_count: tuple) -> tuple[int, tuple[int, int]]:
    auction, _start, end, n = window_count
    return end, (n, auction)


def _nothing_hot() -> tuple[bool, tuple[int, int]]:
    return False, (0, -1)  # (a slice entered or left, the best (count, auction) so far)


def _hotter(_t: int, candidate: tuple[int, int] | None, acc: tuple) -> tuple:
    changed, best = acc
    if candidate is None:  # a boundary mark
        return True, best
    return changed, max(best, candidate)  # (count, auction): ties -> the larger id


def _q5_row(t: int, acc: tuple) -> tuple[int, int, int] | None:
    changed, (n, auction) = acc
    return (t, auction, n) if changed and n else None


def _is_row(row: Any) -> bool:
    return row is not None


def _count_then_id(kv: tuple[int, int]) -> tuple[int, int]:
    return (kv[1], kv[0])


def _to_zero(_r: Any) -> int:
    return 0


# ---------------------------------------------------------------------------------------------
# Q7: highest bid per 10 s tumbling window


def _window_maxima(batch: Any, width: int) -> list[tuple[int, int]]:
    """``[(window end, max price)]`` of the bids in one batch (numpy for ``EventBatch``)."""
    dts, prices = bid_columns(batch)
    n = len(dts)
    if not n:
        return []
    if type(dts) is np.ndarray:
        first = int(dts.min()) // width
        if first == int(dts.max()) // width:  # the common case: the batch is in one window
            return [((first + 1) * width, int(prices.max()))]
        idx = dts // width
        order = np.argsort(idx, kind="stable")
        idx_sorted = idx[order]
        starts = np.flatnonzero(np.r_[True, idx_sorted[1:] != idx_sorted[:-1]])
        maxima = np.maximum.reduceat(prices[order], starts)
        return [((int(i) + 1) * width, int(m)) for i, m in zip(idx_sorted[starts], maxima)]
    out: dict[int, int] = {}
    for d, p in zip(dts, prices):
        e = (d // width + 1) * width
        m = out.get(e)
        if m is None or p > m:
            out[e] = p
    return list(out.items())


class _WindowMax:
    """Open windows of one operator instance: end -> [token or None, max]."""

    __slots__ = ("ends", "windows")

    def __init__(self) -> None:
        self.windows: dict[int, list[Any]] = {}
        self.ends: list[int] = []

    def add(self, e: int, m: int) -> list[Any] | None:
        """Fold ``m`` into window ``e``; returns the new entry if the window is new."""
        entry = self.windows.get(e)
        if entry is None:
            entry = self.windows[e] = [None, m]
            heapq.heappush(self.ends, e)
            return entry
        entry[1] = max(entry[1], m)
        return None

    def complete(self, reached: Callable[[int], bool]) -> list[tuple[int, list[Any]]]:
        out = []
        ends = self.ends
        while ends and reached(ends[0]):
            e = heapq.heappop(ends)
            out.append((e, self.windows.pop(e)))
        return out


def q7(scope: Any, events: Any, idiom: str = "tokens", **options: Unpack[IdiomOptions]) -> Any:
    """Highest bid: per 10 s tumbling window ``[e - 10 s, e)`` with bids, ``(e, max price)``
    once the frontier reaches ``e``.

    Stage 1 (``Pipeline``): per-worker maxima, computed per batch with numpy.  Stage 2
    (``Exchange`` by ``e // 10 s``): the maximum of the partial maxima.

    * Tokens: one token per open window per stage.  Stage 1 holds it at ``e - 1`` (the window's
      last time) and sends its partial there once its frontier reaches ``e``; stage 2 holds it
      at ``e`` and emits once its frontier is past ``e - 1``.  (Partials must not travel *at*
      ``e``: a frontier that has reached ``e`` may still have messages at ``e`` in flight from
      other workers, so stage 2 could not tell when the last partial has arrived.)
    * Notifications: one per window per stage, at ``e - 1``; stage 2 emits at ``e``.
    * Watermarks: windows fire when the watermark reaches ``e``.
    * Library: :func:`_q7_library`.

    The ``options`` are those of :class:`.IdiomOptions`.
    """
    return by_idiom(
        "q7",
        events,
        idiom,
        options,
        tokens=lambda: _q7_tokens(events),
        notifications=lambda per_call: _q7_notifications(events, per_call),
        watermarks=_q7_watermarks,
        library=lambda: _q7_library(events),
    )


def _q7_tokens(events: Any) -> Any:
    """Q7 with timestamp tokens: one token per open window per stage (see :func:`q7`)."""
    width = Q7_WINDOW

    def pre_ctor(cap: Any, info: Any) -> Any:
        cap.drop()
        state = _WindowMax()

        def logic(inp: Any, out: Any) -> None:
            for ref, batch in inp:
                for e, m in _window_maxima(batch, width):
                    entry = state.add(e, m)
                    if entry is not None:
                        entry[0] = ref.delayed(e - 1)
            if state.ends:
                frontier = inp.frontier
                # Complete once the frontier reaches e: every bid of it has date_time < e.
                for e, (tok, m) in state.complete(lambda e: not frontier.less_than(e)):
                    out.give(tok, (e, m))  # at e - 1
                    tok.drop()

        return logic

    partial = unary_frontier(events, Pipeline, "Q7 PreReduce", pre_ctor, interest=IF_CAP)

    def all_ctor(cap: Any, info: Any) -> Any:
        cap.drop()
        state = _WindowMax()

        def logic(inp: Any, out: Any) -> None:
            for ref, batch in inp:
                for e, m in batch:
                    entry = state.add(e, m)
                    if entry is not None:
                        entry[0] = ref.delayed(e)
            if state.ends:
                frontier = inp.frontier
                # Partials travel at e - 1: all have arrived once the frontier is past it.
                for e, (tok, m) in state.complete(lambda e: not frontier.less_equal(e - 1)):
                    out.give(tok, (e, m))
                    tok.drop()

        return logic

    return unary_frontier(partial, Exchange(_window_key), "Q7 AllReduce", all_ctor, interest=IF_CAP)


def _q7_notifications(events: Any, notify_per_call: int | None) -> Any:
    """Q7 with Naiad-style notifications: one per window per stage, at ``e - 1``."""
    width = Q7_WINDOW
    pre_windows: dict[int, int] = {}  # window end -> partial max

    def pre_logic(inp: Any, out: Any, notificator: Any) -> None:
        for ref, batch in inp:
            for e, m in _window_maxima(batch, width):
                cur = pre_windows.get(e)
                if cur is None:
                    pre_windows[e] = m
                    notificator.notify_at(ref.delayed(e - 1))
                elif m > cur:
                    pre_windows[e] = m
        for cap in notificator:
            e = cap.time + 1
            out.give(cap, (e, pre_windows.pop(e)))  # at e - 1
            cap.drop()

    partial = unary_notify(
        events, Pipeline, "Q7 PreReduce (notify)", (), pre_logic, per_call=notify_per_call
    )
    all_windows: dict[int, int] = {}

    def all_logic(inp: Any, out: Any, notificator: Any) -> None:
        for ref, batch in inp:
            for e, m in batch:
                cur = all_windows.get(e)
                if cur is None:
                    all_windows[e] = m
                    notificator.notify_at(ref.retain())  # partials travel at e - 1
                elif m > cur:
                    all_windows[e] = m
        for cap in notificator:
            e = cap.time + 1
            out.give(cap, (e, all_windows.pop(e)), time=e)
            cap.drop()

    return unary_notify(
        partial,
        Exchange(_window_key),
        "Q7 AllReduce (notify)",
        (),
        all_logic,
        per_call=notify_per_call,
    )


def _q7_watermarks(ws: WStream) -> WStream:
    """Q7 with watermarks: per-worker then global maxima of the windows the watermark closes."""
    width = Q7_WINDOW
    pre_state = _WindowMax()

    def pre_data(batch: Any) -> None:
        for e, m in _window_maxima(batch, width):
            pre_state.add(e, m)

    def pre_fire(w: int) -> list[tuple[int, int]]:
        return [(e, entry[1]) for e, entry in pre_state.complete(lambda e: e <= w)]

    partial = ws.process(pre_data, pre_fire, name="Q7 PreReduce (watermarks)")
    all_state = _WindowMax()

    def all_data(batch: Any) -> None:
        for e, m in batch:
            all_state.add(e, m)

    def all_fire(w: int) -> list[tuple[int, int]]:
        return [(e, entry[1]) for e, entry in all_state.complete(lambda e: e <= w)]

    return partial.process(all_data, all_fire, key=_window_key, name="Q7 AllReduce (watermarks)")


def _window_key(r: Any) -> int:
    return r[0] // Q7_WINDOW


def _q7_library(events: Any) -> Any:
    """Q7 on the library's windows: ``window_fold`` of the maximum price over
    ``Tumbling(10 s)``, keyed by window (so windows spread over the workers), emitted at the
    window's end ``e`` once the frontier reaches it: the reference's ``e <= F``."""
    bids = per_batch(events, "Q7 Bids", _q7_bids)  # (date_time, price)
    highest = bids.window_fold(
        Tumbling(Q7_WINDOW), int, _higher_price, key=_window_key, event_time=first, name="Q7 Max"
    )
    return highest.output.map(_end_and_result)


def _q7_bids(batch: Any) -> list[tuple[int, int]]:
    dts, prices = bid_columns(batch)
    if type(dts) is np.ndarray:
        return list(zip(dts.tolist(), prices.tolist()))
    return list(zip(dts, prices))


def _higher_price(highest: int, bid: tuple[int, int]) -> int:
    return max(highest, bid[1])  # from 0: prices are positive


def _end_and_result(window: tuple) -> tuple[int, Any]:
    return window[2], window[3]


# ---------------------------------------------------------------------------------------------
# Q8: monitor new users


def _q8_persons(batch: Any) -> list[tuple]:
    if type(batch) is EventBatch:
        p = batch.persons
        return list(zip(p.id.tolist(), p.date_time.tolist()))
    return [(p[0], p[6]) for p in persons_of(batch)]


def _q8_auctions(batch: Any) -> list[tuple]:
    if type(batch) is EventBatch:
        a = batch.auctions
        return list(zip(a.seller.tolist(), a.date_time.tolist()))
    return [(a[7], a[5]) for a in auctions_of(batch)]


def q8(scope: Any, events: Any, idiom: str = "tokens") -> Any:
    """Monitor new users: ``(a.date_time, seller)`` for each auction whose seller registered
    within the previous 12 h (``p.t <= a.t < p.t + 12 h``).

    Persons exchanged by id, auctions by seller; persons are kept forever.  An auction whose
    seller is already known is decided on arrival; otherwise it waits for the seller, and is
    discarded once the frontier passes its time (a person arriving later is younger than the
    auction).  Rows go out when decided, at the arriving record's timestamp: no tokens held.
    ``idiom="library"``: :func:`_q8_library` (same rows, emitted when a window closes).
    """
    if idiom == "library":
        return _q8_library(events)
    if idiom != "tokens":
        raise ValueError(f"q8: unknown idiom {idiom!r}")
    persons = per_batch(events, "Q8 Persons", _q8_persons)
    auctions = per_batch(events, "Q8 Auctions", _q8_auctions)
    horizon = Q8_WINDOW

    def ctor(cap: Any, info: Any) -> Any:
        cap.drop()
        registered: dict[int, int] = {}
        waiting: dict[int, list[int]] = {}  # seller -> [auction date_time]
        expiry: list[tuple[int, int]] = []  # heap (auction date_time, seller)

        def logic(pin: Any, ain: Any, out: Any) -> None:
            for ref, batch in pin:
                rows = []
                for pid, pdt in batch:
                    registered[pid] = pdt
                    ws = waiting.pop(pid, None)
                    if ws:
                        rows.extend((adt, pid) for adt in ws if pdt <= adt < pdt + horizon)
                if rows:
                    out.session(ref).give_batch(rows)
            for ref, batch in ain:
                rows = []
                for seller, adt in batch:
                    pdt = registered.get(seller)
                    if pdt is None:
                        w = waiting.get(seller)
                        if w is None:
                            waiting[seller] = [adt]
                        else:
                            w.append(adt)
                        heapq.heappush(expiry, (adt, seller))
                    elif pdt <= adt < pdt + horizon:
                        rows.append((adt, seller))
                if rows:
                    out.session(ref).give_batch(rows)
            if expiry:
                limit = min(fmin(pin.frontier), fmin(ain.frontier))
                while expiry and expiry[0][0] < limit:
                    adt, seller = heapq.heappop(expiry)
                    w = waiting.get(seller)
                    if w is not None:
                        w = [x for x in w if x >= limit]
                        if w:
                            waiting[seller] = w
                        else:
                            del waiting[seller]

        return logic

    return binary(persons, auctions, Exchange(first), Exchange(first), "Q8 Join", ctor)


def _q8_library(events: Any) -> Any:
    """Q8 as a ``window_join`` of persons ``(id, date_time)`` and auctions ``(seller,
    date_time)`` in ``Sliding(24 h, 12 h)`` windows.  A person registered at ``p`` lies in the
    first half of exactly one window, ``[p - p % 12 h, ... + 24 h)``, which holds every auction
    of ``[p, p + 12 h)``; a pair is kept only there, so each row comes out exactly once.

    Unlike the reference's rule (``a.date_time < F``), a row is emitted at its window's end,
    ``p - p % 12 h + 24 h``: a window join answers when the window closes.  Final rows equal
    the reference's."""
    persons = per_batch(events, "Q8 Persons", _q8_persons)
    auctions = per_batch(events, "Q8 Auctions", _q8_auctions)
    joined = persons.window_join(
        auctions,
        Sliding(2 * Q8_WINDOW, Q8_WINDOW),
        event_time=_second,
        other_event_time=_second,
        name="Q8 WindowJoin",
    )
    return joined.output.flat_map(_new_seller_row)


def _new_seller_row(pair: tuple) -> list[tuple[int, int]]:
    seller, start, _end, registered, created = pair
    if start <= registered < start + Q8_WINDOW and registered <= created < registered + Q8_WINDOW:
        return [(created, seller)]
    return []


# ---------------------------------------------------------------------------------------------
# Uniform entry point


def build_query(name: str, scope: Any, events: Any, idiom: str = "tokens", **params: Any) -> Any:
    """Build query ``name`` (``"q0"``..``"q8"``) on ``events`` with ``idiom``; returns the
    stream of result rows (see the module docstring for parameters)."""
    name = name.lower()
    if name not in IDIOMS:
        raise ValueError(f"unknown NEXMark query {name!r}; known: {', '.join(QUERIES)}")
    if idiom not in IDIOMS[name]:
        raise ValueError(
            f"query {name} has no {idiom!r} variant; available: {', '.join(IDIOMS[name])}"
        )
    if name in ("q4", "q5", "q7", "q8"):
        fn = {"q4": q4, "q5": q5, "q7": q7, "q8": q8}[name]
        return fn(scope, events, idiom=idiom, **params)
    fn = {"q0": q0, "q1": q1, "q2": q2, "q3": q3, "q6": q6}[name]
    return fn(scope, events, **params)
