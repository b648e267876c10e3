"""Plain batch (non-streaming) reference computations of NEXMark Q0..Q8.

These follow Megaphone's native NEXMark queries and parameters (the ``nexmark`` queries of
https://github.com/strymon-system/megaphone), with two fixes (Q5, Q8; stated in their
docstrings) and deterministic tie-breaks.  They are the oracle a streaming implementation is
compared against.

Conventions shared by every function
------------------------------------

* **Input**: ``events`` is a sequence of :class:`~pytimely.nexmark.generator.Person` /
  ``Auction`` / ``Bid`` records **in event-number order** (the generator's order; the list
  position is used as the event number where ties are broken by it), or an
  :class:`~pytimely.nexmark.generator.EventBatch`.
* **Time**: integer nanoseconds of event time (``date_time``, ``expires``, window ends).
  ``SECOND = 10**9``.
* **Frontier** (``frontier=None`` or an int ``F``): ``None`` means the whole input is
  complete and everything is flushed (Megaphone at end of input).  With ``F``, the function
  answers "what must a streaming implementation have output once its input frontier is
  ``F``": it uses only the events with ``date_time < F`` (so the caller may pass the full
  list) and applies the per-query completeness rule:
  Q4/Q6 close an auction iff ``expires < F``; Q5 reports boundary ``t`` iff ``t < F``;
  Q7 reports window end ``e`` iff ``e <= F``; Q8 examines auction ``a`` iff
  ``a.date_time < F``; Q0-Q3 are per-record and output everything derived from the cut input.
* **Output**: a list of plain tuples, sorted (Python tuple order).  The first element of every
  row is the row's *logical time* in ns (the event-time instant the result belongs to), so
  ``sorted(streaming_rows) == reference_rows`` is the comparison, and
  ``q(events, frontier=F)`` is exactly the set of rows a streaming implementation must have
  produced once its input frontier is ``F``.  A streaming system's *timely timestamps* may be
  earlier than the logical time (an event's timestamp is <= its ``date_time``; the
  recommended stamping is ``floor(date_time / 1 ms) * 1 ms``; Megaphone's Q4 sends at
  its held token), so compare row contents, not timely timestamps.
* Integer division is floor division (``//``) everywhere, as in Megaphone.

Emission rule per query (what a streaming version outputs, and when):

====  ============================================  =========================================
 Q    row (logical time first)                      emitted once the input frontier F ...
====  ============================================  =========================================
 Q0   (date_time, kind, *record)                    passes the event (per record)
 Q1   (date_time, auction, bidder, price*89//100)   per record
 Q2   (date_time, auction, price)                   per record
 Q3   (max(a.t, p.t), name, city, state, a.id)      when the later side arrives (per record)
 Q4   (expires, auction, category, running avg)     F > expires
 Q5   (t, auction, count)  60 s / 1 s sliding       F > t
 Q6   (expires, auction, key, avg of last 10)       F > expires
 Q7   (e, max price)       10 s tumbling            F >= e
 Q8   (a.date_time, seller)  12 h "new" person      F > a.date_time
====  ============================================  =========================================
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from collections.abc import Sequence
from typing import NamedTuple

from .generator import Auction, Bid, EventBatch, Person

__all__ = [
    "Q5_SLIDE",
    "Q5_WINDOW",
    "Q6_HISTORY",
    "Q7_WINDOW",
    "Q8_TUMBLING_WINDOW",
    "Q8_WINDOW",
    "SECOND",
    "ClosedAuction",
    "closed_auctions",
    "q0",
    "q1",
    "q2",
    "q3",
    "q4",
    "q4_by_time",
    "q4_final",
    "q5",
    "q6",
    "q7",
    "q7_bids",
    "q8",
    "q8_tumbling",
    "q9",
    "worked_example",
]

SECOND = 1_000_000_000
Q5_WINDOW = 60 * SECOND  # Megaphone: 60 s sliding window ...
Q5_SLIDE = 1 * SECOND  # ... sliding every 1 s
Q6_HISTORY = 10  # Q6 averages the last 10 winning prices per key
Q7_WINDOW = 10 * SECOND  # Megaphone: 10 s tumbling windows
Q8_WINDOW = 12 * 3600 * SECOND  # Megaphone: a person is "new" for 12 h
Q8_TUMBLING_WINDOW = 10 * SECOND  # Beam / Flink-SQL Q8 variant

_KIND = {Person: 0, Auction: 1, Bid: 2}


def _records(events) -> Sequence:
    if isinstance(events, EventBatch):
        return events.to_records()
    return events


def _cut(events, frontier: int | None) -> list[tuple[int, object]]:
    """``(event_number, record)`` for the events visible at ``frontier``."""
    evs = _records(events)
    if frontier is None:
        return list(enumerate(evs))
    return [(i, e) for i, e in enumerate(evs) if e.date_time < frontier]


# ---------------------------------------------------------------------------------------------
# Q0 - Q3: per-record queries


def q0(events, frontier: int | None = None) -> list[tuple]:
    """Q0, pass-through: every event unchanged.

    Row: ``(date_time, kind, *record)`` with ``kind`` 0 = Person, 1 = Auction, 2 = Bid and
    ``record`` the event's fields in declaration order.  Logical time = ``date_time``.
    """
    return sorted((e.date_time, _KIND[type(e)], *e) for _, e in _cut(events, frontier))


def q1(events, frontier: int | None = None) -> list[tuple]:
    """Q1, currency conversion: for every bid, the same bid with ``price * 89 // 100``.

    Row: ``(date_time, auction, bidder, converted_price)``.  Logical time = the bid's
    ``date_time``.
    """
    return sorted(
        (e.date_time, e.auction, e.bidder, e.price * 89 // 100)
        for _, e in _cut(events, frontier)
        if type(e) is Bid
    )


def q2(events, frontier: int | None = None) -> list[tuple]:
    """Q2, selection: bids with ``auction % 123 == 0``.

    Row: ``(date_time, auction, price)`` (Megaphone outputs ``(auction, price)``).  Logical
    time = the bid's ``date_time``.
    """
    return sorted(
        (e.date_time, e.auction, e.price)
        for _, e in _cut(events, frontier)
        if type(e) is Bid and e.auction % 123 == 0
    )


Q3_STATES = frozenset({"OR", "ID", "CA"})
Q3_CATEGORY = 10


def q3(events, frontier: int | None = None) -> list[tuple]:
    """Q3, local item suggestion: unwindowed incremental join of auctions with
    ``category == 10`` and persons with ``state in {OR, ID, CA}`` on ``auction.seller ==
    person.id``; both sides are kept forever, so every matching (person, auction) pair is output
    exactly once, when the later of the two arrives.

    Row: ``(time, person.name, person.city, person.state, auction.id)`` with
    ``time = max(auction.date_time, person.date_time)`` (names are empty strings with
    Megaphone's generator).
    """
    persons: dict[int, Person] = {}
    auctions: list[Auction] = []
    for _, e in _cut(events, frontier):
        if type(e) is Person and e.state in Q3_STATES:
            persons[e.id] = e
        elif type(e) is Auction and e.category == Q3_CATEGORY:
            auctions.append(e)
    rows = []
    for a in auctions:
        p = persons.get(a.seller)
        if p is not None:
            rows.append((max(a.date_time, p.date_time), p.name, p.city, p.state, a.id))
    return sorted(rows)


# ---------------------------------------------------------------------------------------------
# Closed auctions (Beam's Q9), Q4, Q6


class ClosedAuction(NamedTuple):
    """An auction that closed with a winner."""

    expires: int  # closing time = logical output time (ns)
    auction: int  # auction id
    category: int
    seller: int
    reserve: int
    auction_date_time: int
    bidder: int  # winning bid's bidder
    price: int  # winning price
    bid_date_time: int  # winning bid's date_time
    bid_event: int  # winning bid's event number (position in the input)


def closed_auctions(events, frontier: int | None = None) -> list[ClosedAuction]:
    """Closed auctions with their winning bid (the stage Q4 and Q6 share; Beam's Q9).

    * A bid ``b`` is **valid** for auction ``a`` iff ``b.auction == a.id``,
      ``b.price >= a.reserve`` and ``a.date_time <= b.date_time < a.expires``.  Bids for
      unknown auctions, before the auction's creation, at/after its expiry or below reserve are
      ignored.
    * Auction ``a`` **closes** at ``a.expires``; it produces a row iff it has >= 1 valid bid.
      Winner = the valid bid with the highest price; ties -> earlier ``date_time``, then lower
      event number.
    * Completeness: with ``frontier=F`` an auction is closed iff ``expires < F`` (Megaphone
      closes once the frontier is *strictly* past ``expires``); ``None`` closes all.

    Sorted by ``(expires, auction id)`` - the canonical closing order.
    """
    cut = _cut(events, frontier)
    auctions: dict[int, Auction] = {}
    for _, e in cut:
        if type(e) is Auction:
            auctions[e.id] = e
    best: dict[int, tuple[int, int, int, Bid]] = {}  # id -> (-price, date_time, event, bid)
    for i, e in cut:
        if type(e) is not Bid:
            continue
        a = auctions.get(e.auction)
        if a is None or e.price < a.reserve or not (a.date_time <= e.date_time < a.expires):
            continue
        key = (-e.price, e.date_time, i, e)
        cur = best.get(a.id)
        if cur is None or key[:3] < cur[:3]:
            best[a.id] = key
    out = []
    for aid, (_, _, i, b) in best.items():
        a = auctions[aid]
        if frontier is not None and not a.expires < frontier:
            continue
        out.append(
            ClosedAuction(
                a.expires,
                a.id,
                a.category,
                a.seller,
                a.reserve,
                a.date_time,
                b.bidder,
                b.price,
                b.date_time,
                i,
            )
        )
    out.sort()
    return out


q9 = closed_auctions


def q4(events, frontier: int | None = None) -> list[tuple]:
    """Q4, average closing price per category (running, unwindowed).

    For each closed auction (see :func:`closed_auctions`) in ``(expires, auction id)`` order,
    emit the average winning price of **all** auctions of its category closed so far:
    ``avg = sum // count`` (Megaphone never forgets).

    Row: ``(expires, auction_id, category, avg)``.  Logical time = ``expires``; Megaphone
    emits ``(category, avg)`` (no auction id) once the frontier is strictly past ``expires``,
    at a timely timestamp <= ``expires``.  Because per-record running aggregates depend on
    the order in which closings are processed, streaming output for auctions closing at the
    same instant may differ in ``avg``; compare order-independent states with
    :func:`q4_final` / :func:`q4_by_time` where that matters.
    """
    sums: dict[int, int] = defaultdict(int)
    counts: dict[int, int] = defaultdict(int)
    rows = []
    for c in closed_auctions(events, frontier):
        sums[c.category] += c.price
        counts[c.category] += 1
        rows.append((c.expires, c.auction, c.category, sums[c.category] // counts[c.category]))
    return rows


def q4_final(events, frontier: int | None = None) -> dict[int, tuple[int, int, int]]:
    """Q4's state after all closings visible at ``frontier`` (``None``: all):
    ``{category: (sum, count, sum // count)}``.  Order independent."""
    state: dict[int, list[int]] = {}
    for c in closed_auctions(events, frontier):
        s = state.setdefault(c.category, [0, 0])
        s[0] += c.price
        s[1] += 1
    return {cat: (s, n, s // n) for cat, (s, n) in sorted(state.items())}


def q4_by_time(events, t: int) -> dict[int, tuple[int, int, int]]:
    """Q4's state after every closing with ``expires <= t`` (== ``q4_final(events, t + 1)``)."""
    return q4_final(events, t + 1)


def q6(events, frontier: int | None = None, key: str = "bidder") -> list[tuple]:
    """Q6, average selling price (Megaphone variant): from the closed auctions in
    ``(expires, auction id)`` order, keep the last 10 winning prices per key and emit
    ``sum // len`` of those after each closing.

    ``key="bidder"`` (default) keys by the **winning bidder** (Megaphone); ``key="seller"``
    keys by the auction's seller (original NEXMark / Beam).

    Row: ``(expires, auction_id, key_id, avg)``.  Logical time = ``expires``; completeness
    as for Q4 (closed iff ``expires < F``).
    """
    if key not in ("bidder", "seller"):
        raise ValueError(f"q6 key must be 'bidder' or 'seller', got {key!r}")
    hist: dict[int, deque] = defaultdict(lambda: deque(maxlen=Q6_HISTORY))
    rows = []
    for c in closed_auctions(events, frontier):
        k = c.bidder if key == "bidder" else c.seller
        h = hist[k]
        h.append(c.price)
        rows.append((c.expires, c.auction, k, sum(h) // len(h)))
    return rows


# ---------------------------------------------------------------------------------------------
# Q5: hot items


def q5(events, frontier: int | None = None) -> list[tuple]:
    """Q5, hot items: sliding window of 60 s advancing every 1 s.

    A bid at ``d`` belongs to the slice ending at ``s = (d // 1 s + 1) * 1 s``.  The window
    reported at boundary ``t`` (a multiple of 1 s) holds the slices ``s`` in ``(t - 60 s, t]``,
    i.e. the bids with ``d in [t - 60 s, t)``.  At every boundary where a non-empty slice
    enters (``t = s``) or leaves (``t = s + 60 s``) and the window is non-empty, output the
    auction with the most bids in the window; ties -> the larger auction id.  The maximum is
    global (Megaphone computes it per worker; this reference fixes that).

    Row: ``(t, auction, count)``; logical time = ``t``.  Completeness: boundary ``t`` is
    reported iff ``t < F`` (Megaphone emits once the frontier is strictly past ``t``).
    """
    slices: dict[int, Counter] = defaultdict(Counter)
    for _, e in _cut(events, frontier):
        if type(e) is Bid:
            s = (e.date_time // Q5_SLIDE + 1) * Q5_SLIDE
            slices[s][e.auction] += 1
    boundaries = sorted({s for s in slices} | {s + Q5_WINDOW for s in slices})
    counts: Counter = Counter()
    rows = []
    for t in boundaries:
        if frontier is not None and not t < frontier:
            break
        entering = slices.get(t)
        if entering:
            counts.update(entering)
        leaving = slices.get(t - Q5_WINDOW)
        if leaving:
            counts.subtract(leaving)
            for a in leaving:
                if counts[a] == 0:
                    del counts[a]
        if counts:
            auction, n = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
            rows.append((t, auction, n))
    return rows


# ---------------------------------------------------------------------------------------------
# Q7: highest bid


def _q7_windows(events, frontier):
    windows: dict[int, list[tuple[int, Bid]]] = defaultdict(list)
    for i, e in _cut(events, frontier):
        if type(e) is Bid:
            end = (e.date_time // Q7_WINDOW + 1) * Q7_WINDOW
            if frontier is None or end <= frontier:
                windows[end].append((i, e))
    return windows


def q7(events, frontier: int | None = None) -> list[tuple]:
    """Q7, highest bid: tumbling 10 s windows; window end ``e(d) = (d // 10 s + 1) * 10 s``.
    For each window with at least one bid, the maximum price of the bids with
    ``d in [e - 10 s, e)``.

    Row: ``(e, max_price)`` (Megaphone outputs only the price); logical time = ``e``.
    Completeness: window ``e`` is reported iff ``e <= F`` (all bids of it have
    ``date_time < e <= F``); Megaphone emits the price at timely time ``e`` as soon as no
    element of the input frontier is ``< e``.  Windows without bids produce nothing.
    """
    return sorted(
        (end, max(b.price for _, b in bids)) for end, bids in _q7_windows(events, frontier).items()
    )


def q7_bids(events, frontier: int | None = None) -> list[tuple]:
    """Q7, Beam/Flink flavour: every bid achieving its window's maximum price.

    Row: ``(e, price, auction, bidder, date_time, event_number)``; same windows and
    completeness as :func:`q7`.
    """
    rows = []
    for end, bids in _q7_windows(events, frontier).items():
        top = max(b.price for _, b in bids)
        rows.extend(
            (end, b.price, b.auction, b.bidder, b.date_time, i) for i, b in bids if b.price == top
        )
    return sorted(rows)


# ---------------------------------------------------------------------------------------------
# Q8: monitor new users


def q8(events, frontier: int | None = None) -> list[tuple]:
    """Q8, monitor new users (canonical, Megaphone parameters): for each auction ``a`` whose
    seller ``p`` registered within the last 12 h - ``p.date_time <= a.date_time <
    p.date_time + 12 h`` - output ``(a.date_time, a.seller)``.

    Persons are kept forever; an auction is examined once the frontier passes its time:
    completeness ``a.date_time < F``.  (Megaphone's own operator matches sellers against
    *auction ids* and omits ``p.date_time <= a.date_time``; this reference fixes both.)

    Row: ``(a.date_time, seller)``, one per qualifying auction; logical time =
    ``a.date_time``.
    """
    cut = _cut(events, frontier)
    registered = {e.id: e.date_time for _, e in cut if type(e) is Person}
    rows = []
    for _, e in cut:
        if type(e) is Auction:
            t = registered.get(e.seller)
            if t is not None and t <= e.date_time < t + Q8_WINDOW:
                rows.append((e.date_time, e.seller))
    return sorted(rows)


def q8_tumbling(events, frontier: int | None = None) -> list[tuple]:
    """Q8, Beam / Flink-SQL flavour: persons who created an auction in the same 10 s tumbling
    event-time window in which they registered.

    Window end ``e(d) = (d // 10 s + 1) * 10 s``.  Row: ``(e, person.id, person.name)``, one per
    (window, person) with at least one auction by that person in the window.  Completeness:
    window ``e`` is reported iff ``e <= F``.
    """
    cut = _cut(events, frontier)

    def end(d: int) -> int:
        return (d // Q8_TUMBLING_WINDOW + 1) * Q8_TUMBLING_WINDOW

    sellers = {(end(e.date_time), e.seller) for _, e in cut if type(e) is Auction}
    rows = set()
    for _, e in cut:
        if type(e) is Person:
            w = end(e.date_time)
            if (w, e.id) in sellers and (frontier is None or w <= frontier):
                rows.add((w, e.id, e.name))
    return sorted(rows)


# ---------------------------------------------------------------------------------------------
# Worked example


def worked_example() -> list:
    """The 16 events of a small worked example, in event order.

    Times in ns; ``S = 10**9``.  Strings other than city/state are empty.
    """
    S = SECOND

    def P(t, i, city, state):
        return Person(i, "", "", "", city, state, t)

    def A(t, i, initial, reserve, expires, seller, cat):
        return Auction(i, "", "", initial, reserve, t, expires, seller, cat)

    def B(t, auction, bidder, price):
        return Bid(auction, bidder, price, t)

    return [
        P(S // 2, 1000, "boise", "OR"),  # 0
        A(1 * S, 1000, 50, 100, 25 * S, 1000, 10),  # 1
        P(3 * S // 2, 1001, "bend", "WA"),  # 2
        A(2 * S, 1001, 400, 500, 12 * S, 1000, 10),  # 3
        B(5 * S // 2, 1002, 1001, 1000),  # 4: before auction 1002 exists
        A(3 * S, 1002, 10, 50, 31 * S, 1001, 11),  # 5
        B(4 * S, 1000, 1001, 90),  # 6: below reserve
        B(5 * S, 1001, 1000, 600),  # 7
        B(10 * S - 1, 1000, 1000, 150),  # 8
        B(11 * S, 1001, 1001, 700),  # 9
        B(12 * S, 1001, 1000, 900),  # 10: = expires of 1001, too late
        B(13 * S, 1003, 1000, 1_000_000),  # 11: unknown auction
        B(14 * S, 1107, 1001, 5),  # 12: 1107 = 9 * 123
        B(20 * S, 1002, 1001, 60),  # 13
        B(25 * S - 1, 1000, 1001, 150),  # 14: ties #8
        B(30 * S, 1002, 1000, 55),  # 15
    ]
