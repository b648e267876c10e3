"""Closed auctions and what Q4 and Q6 make of them: the closing stage shared by both (an
auction's winning bid once it expires), then Q4's running average price per category and Q6's
average of a seller's (or bidder's) last ten winning prices, each with tokens, and Q4 also with
notifications and watermarks."""

from __future__ import annotations

import heapq
from collections import deque
from typing import Any, Unpack

from ..dataflow.idioms import MinToken
from ..dataflow.operators.generic import (
    binary_frontier,
    unary_frontier,
)
from ..dataflow.operators.notify import binary_notify, unary_notify
from ..dataflow.operators.watermarks import (
    WStream,
)
from ..dataflow.pacts import Exchange
from .blocks import IF_CAP, INF, IdiomOptions, by_idiom, first, fmin, per_batch
from .events import auctions_of, bids_of
from .reference import Q6_HISTORY

__all__ = ["closed_auctions", "q4", "q6"]

# ---------------------------------------------------------------------------------------------
# Closed auctions (Q4, Q6): the closing stage


class _AuctionCloser:
    """The state of the closing operator on one worker (auctions and bids exchanged by auction
    id), shared by the three idioms.

    * ``open``: auction id -> ``[reserve, date_time, expires, category, seller, best price,
      best bid time, best bidder]`` (best price -1: no valid bid yet).
    * ``early``: auction id -> bids that arrived before their auction.
    * ``heap``: ``(time, auction id, kind)``: kind 0 closes the auction at ``expires``; kind 1
      at a buffered bid's ``date_time`` discards buffered bids that can no longer become valid
      (an auction arriving after the frontier passed ``t`` has ``date_time > t``).

    Closing rows: ``(expires, auction, category, seller, bidder, price)``.
    """

    __slots__ = ("early", "heap", "open")

    def __init__(self) -> None:
        self.open: dict[int, list[int]] = {}
        self.early: dict[int, list[Any]] = {}
        self.heap: list[tuple[int, int, int]] = []

    def add_auctions(self, batch: Any, times: list[int] | None = None) -> Any:
        """Returns the least new pending time (``inf`` if none); appends each to ``times``."""
        open_ = self.open
        early = self.early
        heap = self.heap
        least = INF
        for a in batch:
            aid = a[0]
            exp = a[6]
            st = [a[4], a[5], exp, a[8], a[7], -1, 0, 0]
            open_[aid] = st
            heapq.heappush(heap, (exp, aid, 0))
            least = min(least, exp)
            if times is not None:
                times.append(exp)
            if early:
                bids = early.pop(aid, None)
                if bids:
                    self._apply(st, bids)
        return least

    @staticmethod
    def _apply(st: list[int], bids: Any) -> None:
        reserve, adt, exp = st[0], st[1], st[2]
        for b in bids:
            p = b[2]
            if p >= reserve:
                d = b[3]
                if adt <= d < exp and (p > st[5] or (p == st[5] and d < st[6])):
                    st[5] = p
                    st[6] = d
                    st[7] = b[1]

    def add_bids(self, batch: Any, times: list[int] | None = None) -> Any:
        """Returns the least new pending time (``inf`` if none); appends each to ``times``."""
        open_get = self.open.get
        early = self.early
        least = INF
        for b in batch:
            st = open_get(b[0])
            if st is None:
                aid = b[0]
                d = b[3]
                buffered = early.get(aid)
                if buffered is None:
                    early[aid] = [b]
                else:
                    buffered.append(b)
                heapq.heappush(self.heap, (d, aid, 1))
                least = min(least, d)
                if times is not None:
                    times.append(d)
                continue
            p = b[2]
            if p >= st[0]:
                d = b[3]
                if st[1] <= d < st[2] and (p > st[5] or (p == st[5] and d < st[6])):
                    st[5] = p
                    st[6] = d
                    st[7] = b[1]
        return least

    def close_before(self, limit: Any) -> list[tuple]:
        """Pop every pending entry with time ``< limit``; the closing rows, in order."""
        heap = self.heap
        rows = []
        open_ = self.open
        early = self.early
        while heap and heap[0][0] < limit:
            t, aid, kind = heapq.heappop(heap)
            if kind == 0:
                st = open_.pop(aid, None)
                if st is not None and st[5] >= 0:
                    rows.append((t, aid, st[3], st[4], st[7], st[5]))
            else:
                buffered = early.get(aid)
                if buffered is not None:
                    keep = [b for b in buffered if b[3] >= limit]
                    if keep:
                        early[aid] = keep
                    else:
                        del early[aid]
        return rows

    def least(self) -> int | None:
        return self.heap[0][0] if self.heap else None


def _split_q4(events: Any) -> tuple[Any, Any]:
    return (per_batch(events, "Q4 Bids", bids_of), per_batch(events, "Q4 Auctions", auctions_of))


def closed_auctions(
    scope: Any, events: Any, idiom: str = "tokens", per_call: int | None = None
) -> Any:
    """The closing stage shared by Q4 and Q6 (Beam's Q9): rows ``(expires, auction, category,
    seller, winning bidder, winning price)`` for every auction that closes with a valid bid,
    once the input frontier is strictly past ``expires`` (see ``reference.closed_auctions``;
    the winner's tie-break by date_time suffices because event times are distinct).

    ``idiom="tokens"``: one token at the least pending time, results batched at its time.
    ``idiom="notifications"``: one notification per distinct expiry (and per buffered bid's
    time), results at exactly ``expires``.
    """
    bids, auctions = _split_q4(events)
    by_auction = Exchange(first)
    if idiom == "tokens":

        def ctor(cap: Any, info: Any) -> Any:
            cap.drop()
            closer = _AuctionCloser()
            token = MinToken()

            def logic(bin_: Any, ain: Any, out: Any) -> None:
                for ref, batch in ain:
                    least = closer.add_auctions(batch)
                    if least < token.time:
                        token.cover(ref, least)
                for ref, batch in bin_:
                    least = closer.add_bids(batch)
                    if least < token.time:
                        token.cover(ref, least)
                heap = closer.heap
                if heap:
                    limit = min(fmin(bin_.frontier), fmin(ain.frontier))
                    if heap[0][0] < limit:
                        rows = closer.close_before(limit)
                        if rows:
                            out.session(token.cap).give_batch(rows)
                        token.settle(closer.least())

            return logic

        return binary_frontier(
            bids, auctions, by_auction, by_auction, "Q4 Close", ctor, interest=IF_CAP
        )

    if idiom == "notifications":
        closer = None

        def logic(bin_: Any, ain: Any, out: Any, notificator: Any) -> None:
            nonlocal closer
            if closer is None:
                closer = _AuctionCloser()
            times: list[int] = []
            for ref, batch in ain:
                closer.add_auctions(batch, times)
                for t in times:
                    notificator.notify_at(ref.delayed(t))
                times.clear()
            for ref, batch in bin_:
                closer.add_bids(batch, times)
                for t in times:
                    notificator.notify_at(ref.delayed(t))
                times.clear()
            for cap in notificator:
                rows = closer.close_before(cap.time + 1)
                if rows:
                    out.session(cap).give_batch(rows)
                cap.drop()

        return binary_notify(
            bids,
            auctions,
            by_auction,
            by_auction,
            "Q4 Close (notify)",
            (),
            logic,
            per_call=per_call,
        )

    raise ValueError(f"closed_auctions: unknown idiom {idiom!r}")


class _RunningAverage:
    """Q4's average: per category, over every auction closed so far."""

    __slots__ = ("sums",)

    def __init__(self) -> None:
        self.sums: dict[int, list[int]] = {}

    def __call__(self, c: tuple) -> tuple:
        acc = self.sums.get(c[2])
        if acc is None:
            acc = self.sums[c[2]] = [0, 0]
        acc[0] += c[5]
        acc[1] += 1
        return (c[0], c[1], c[2], acc[0] // acc[1])


class _LastTen:
    """Q6's average of the last 10 winning prices per key (bidder: row[4], seller: row[3])."""

    __slots__ = ("field", "hist")

    def __init__(self, field: int) -> None:
        self.field = field
        self.hist: dict[int, deque] = {}

    def __call__(self, c: tuple) -> tuple:
        k = c[self.field]
        h = self.hist.get(k)
        if h is None:
            h = self.hist[k] = deque(maxlen=Q6_HISTORY)
        h.append(c[5])
        return (c[0], c[1], k, sum(h) // len(h))


def _ordered_apply(closings: Any, field: int, apply: Any, name: str) -> Any:
    """Exchange closings by ``row[field]`` and apply ``apply`` to them in ``(expires, auction)``
    order, each once the frontier is strictly past its ``expires`` (all closings up to it have
    arrived: they are sent at times ``<=`` their ``expires``).  One token at the least pending
    ``expires``; each activation's rows go out in one batch at that token's time."""

    def ctor(cap: Any, info: Any) -> Any:
        cap.drop()
        pending: list[tuple] = []  # heap of closings (expires, auction, ...)
        token = MinToken()

        def logic(inp: Any, out: Any) -> None:
            for ref, batch in inp:
                least = INF
                for c in batch:
                    heapq.heappush(pending, c)
                    least = min(least, c[0])
                if least < token.time:
                    token.cover(ref, least)
            if pending:
                limit = fmin(inp.frontier)
                if pending[0][0] < limit:
                    rows = []
                    while pending and pending[0][0] < limit:
                        rows.append(apply(heapq.heappop(pending)))
                    out.session(token.cap).give_batch(rows)
                    token.settle(pending[0][0] if pending else None)

        return logic

    key = lambda r: r[field]
    return unary_frontier(closings, Exchange(key), name, ctor, interest=IF_CAP)


def _ordered_apply_notify(
    closings: Any, field: int, apply: Any, name: str, per_call: int | None
) -> Any:
    """:func:`_ordered_apply` with notifications: closings arrive at exactly ``expires``; one
    notification per distinct time, rows at that time, in auction order."""
    pending: dict[int, list[tuple]] = {}

    def logic(inp: Any, out: Any, notificator: Any) -> None:
        for ref, batch in inp:
            t = ref.time
            waiting = pending.get(t)
            if waiting is None:
                pending[t] = list(batch)
                notificator.notify_at(ref.retain())
            else:
                waiting.extend(batch)
        for cap in notificator:
            closings_at = pending.pop(cap.time)
            closings_at.sort()
            out.session(cap).give_batch([apply(c) for c in closings_at])
            cap.drop()

    key = lambda r: r[field]
    return unary_notify(closings, Exchange(key), name, (), logic, per_call=per_call)


# ---------------------------------------------------------------------------------------------
# Q4


def q4(scope: Any, events: Any, idiom: str = "tokens", **options: Unpack[IdiomOptions]) -> Any:
    """Average closing price per category (running, over all auctions closed so far):
    ``(expires, auction, category, avg)`` per closed auction, in ``(expires, auction)`` order
    per category, once the frontier is strictly past ``expires``.

    Dataflow: bids and auctions exchanged by auction id into the closing operator; closings
    exchanged by category into the averaging operator.  ``idiom``: ``"tokens"``,
    ``"notifications"`` or ``"watermarks"``, with the ``options`` of :class:`.IdiomOptions`.
    """
    return by_idiom(
        "q4",
        events,
        idiom,
        options,
        tokens=lambda: _q4_tokens(scope, events),
        notifications=lambda per_call: _q4_notifications(scope, events, per_call),
        watermarks=_q4_watermarks,
    )


def _q4_tokens(scope: Any, events: Any) -> Any:
    """Q4 with timestamp tokens: closings averaged in canonical order."""
    closings = closed_auctions(scope, events, "tokens")
    return _ordered_apply(closings, 2, _RunningAverage(), "Q4 Average")


def _q4_notifications(scope: Any, events: Any, per_call: int | None) -> Any:
    """Q4 with Naiad-style notifications (at most ``per_call`` delivered per invocation)."""
    closings = closed_auctions(scope, events, "notifications", per_call)
    return _ordered_apply_notify(closings, 2, _RunningAverage(), "Q4 Average (notify)", per_call)


def _q4_watermarks(ws: WStream) -> WStream:
    """Q4 with watermarks: the same closing and averaging logic, driven by event-time timers
    that fire when the input watermark passes them."""
    auctions = ws.map_batch(auctions_of, name="Q4 Auctions")
    bids = ws.map_batch(bids_of, name="Q4 Bids")
    closer = _AuctionCloser()

    def on_data(port: int, batch: Any) -> None:
        if port == 0:
            closer.add_auctions(batch)
        else:
            closer.add_bids(batch)

    def on_watermark(w: int) -> list[tuple]:
        return closer.close_before(w)

    closings = auctions.process2(
        bids, on_data, on_watermark, key1=first, key2=first, name="Q4 Close (watermarks)"
    )
    average = _RunningAverage()
    pending: list[tuple] = []

    def on_closings(batch: Any) -> None:
        for c in batch:
            heapq.heappush(pending, c)

    def fire(w: int) -> list[tuple]:
        rows = []
        while pending and pending[0][0] < w:
            rows.append(average(heapq.heappop(pending)))
        return rows

    return closings.process(on_closings, fire, key=_category, name="Q4 Average (watermarks)")


def _category(r: Any) -> Any:
    return r[2]


# ---------------------------------------------------------------------------------------------
# Q6


def q6(scope: Any, events: Any, key: str = "bidder") -> Any:
    """Average selling price: per key (winning ``bidder``, or ``seller``), the average of its
    last 10 winning prices after each closing: ``(expires, auction, key, avg)``."""
    if key not in ("bidder", "seller"):
        raise ValueError(f"q6 key must be 'bidder' or 'seller', got {key!r}")
    field = 4 if key == "bidder" else 3
    closings = closed_auctions(scope, events, "tokens")
    return _ordered_apply(closings, field, _LastTen(field), "Q6 Average")
