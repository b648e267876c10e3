"""NEXMark batch reference queries: the spec's worked example (section 3) and sanity
properties on generated data (brute-force cross-checks, frontier-cut consistency)."""

from __future__ import annotations

import itertools
from collections import Counter, deque

import pytest

from pytimely.nexmark import Auction, Bid, NexmarkConfig, Person, generate
from pytimely.nexmark import reference as R

S = R.SECOND


@pytest.fixture(scope="module")
def ex():
    return R.worked_example()


# ---------------------------------------------------------------------------------------------
# Worked example (spec section 3)


def test_worked_example_shape(ex):
    assert len(ex) == 16
    assert [type(e).__name__[0] for e in ex] == list("PAPABABBBBBBBBBB")
    assert all(a.date_time <= b.date_time for a, b in itertools.pairwise(ex))


def test_worked_q0_q1_q2_q3(ex):
    q0 = R.q0(ex)
    assert len(q0) == 16 and q0[0] == (S // 2, 0, *ex[0])
    assert [r[3] for r in R.q1(ex)[:3]] == [890, 80, 534]
    assert R.q2(ex) == [(14 * S, 1107, 5)]
    assert R.q3(ex) == [(1 * S, "", "boise", "OR", 1000), (2 * S, "", "boise", "OR", 1001)]


def test_worked_q4(ex):
    assert R.q4(ex) == [
        (12 * S, 1001, 10, 700),
        (25 * S, 1000, 10, 425),
        (31 * S, 1002, 11, 60),
    ]
    closed = R.closed_auctions(ex)
    assert [(c.auction, c.price, c.bid_event) for c in closed] == [
        (1001, 700, 9),
        (1000, 150, 8),  # tie with #14: the earlier bid wins
        (1002, 60, 13),  # #4 predates the auction, #15 (55) is lower
    ]
    assert R.q9 is R.closed_auctions
    # Frontier cuts: 1000 expires at 25 s and closes only once the frontier is past it.
    assert R.q4(ex, frontier=25 * S) == [(12 * S, 1001, 10, 700)]
    assert R.q4(ex, frontier=25 * S + 1) == [(12 * S, 1001, 10, 700), (25 * S, 1000, 10, 425)]
    assert R.q4_final(ex) == {10: (850, 2, 425), 11: (60, 1, 60)}
    assert R.q4_by_time(ex, 25 * S) == {10: (850, 2, 425)}
    assert R.q4_by_time(ex, 25 * S - 1) == {10: (700, 1, 700)}


def test_worked_q5(ex):
    rows = R.q5(ex)
    assert len(rows) == 21
    assert rows[:6] == [
        (3 * S, 1002, 1),
        (5 * S, 1002, 1),
        (6 * S, 1002, 1),
        (10 * S, 1000, 2),
        (12 * S, 1001, 2),
        (13 * S, 1001, 3),
    ]
    assert rows[-1] == (85 * S, 1002, 1)
    assert R.q5(ex, frontier=13 * S) == rows[:5]  # boundary t only once t < F


def test_worked_q6(ex):
    assert [r[2:] for r in R.q6(ex)] == [(1001, 700), (1000, 150), (1001, 380)]
    assert [r[2:] for r in R.q6(ex, key="seller")] == [(1000, 700), (1000, 425), (1001, 60)]
    with pytest.raises(ValueError):
        R.q6(ex, key="auction")


def test_worked_q7(ex):
    full = [(10 * S, 1000), (20 * S, 1_000_000), (30 * S, 150), (40 * S, 55)]
    assert R.q7(ex) == full
    assert R.q7(ex, frontier=30 * S) == full[:3]  # window 30 complete at frontier 30
    assert R.q7(ex, frontier=30 * S - 1) == full[:2]
    assert [(r[0], r[1], r[5]) for r in R.q7_bids(ex)] == [
        (10 * S, 1000, 4),
        (20 * S, 1_000_000, 11),
        (30 * S, 150, 14),
        (40 * S, 55, 15),
    ]


def test_worked_q8(ex):
    assert R.q8(ex) == [(1 * S, 1000), (2 * S, 1000), (3 * S, 1001)]
    assert R.q8(ex, frontier=2 * S) == [(1 * S, 1000)]
    assert R.q8_tumbling(ex) == [(10 * S, 1000, ""), (10 * S, 1001, "")]


# ---------------------------------------------------------------------------------------------
# Generated data: brute-force cross-checks and frontier consistency

SHORT = NexmarkConfig(rate=10_000, workers=2, in_flight_auctions=100)  # auctions <= 0.33 s


@pytest.fixture(scope="module")
def short_events():
    return generate(SHORT, 0, 30_000).to_records()  # 3 s of event time


def _brute_closed(events, frontier=None):
    evs = [(i, e) for i, e in enumerate(events) if frontier is None or e.date_time < frontier]
    out = []
    for _, a in evs:
        if type(a) is not Auction or (frontier is not None and a.expires >= frontier):
            continue
        valid = [
            (i, b)
            for i, b in evs
            if type(b) is Bid
            and b.auction == a.id
            and b.price >= a.reserve
            and a.date_time <= b.date_time < a.expires
        ]
        if valid:
            i, b = min(valid, key=lambda ib: (-ib[1].price, ib[1].date_time, ib[0]))
            out.append((a.expires, a.id, b.bidder, b.price, i))
    return sorted(out)


def test_closed_auctions_brute_force(short_events):
    evs = short_events[:6000]
    for frontier in (None, 400_000_000):
        got = [
            (c.expires, c.auction, c.bidder, c.price, c.bid_event)
            for c in R.closed_auctions(evs, frontier)
        ]
        assert got == _brute_closed(evs, frontier)


def test_short_profile_closes_most_auctions(short_events):
    aucs = [e for e in short_events if type(e) is Auction]
    end = short_events[-1].date_time
    expired = [a for a in aucs if a.expires < end]
    closed = R.closed_auctions(short_events, frontier=end)
    assert 0.4 < len(closed) / len(expired) < 0.8  # spec 1.7: ~60 % close with a winner
    q4f = R.q4_final(short_events)
    assert sum(c for _, c, _ in q4f.values()) == len(R.closed_auctions(short_events))
    assert set(q4f) <= {10, 11, 12, 13, 14}
    # running averages: last row per category equals the final state
    last = {}
    for _, _, cat, avg in R.q4(short_events):
        last[cat] = avg
    assert last == {cat: v[2] for cat, v in q4f.items()}


def test_q6_brute_force(short_events):
    closed = R.closed_auctions(short_events)
    for key in ("bidder", "seller"):
        hist: dict[int, deque] = {}
        expect = []
        for c in closed:
            k = c.bidder if key == "bidder" else c.seller
            h = hist.setdefault(k, deque(maxlen=10))
            h.append(c.price)
            expect.append((c.expires, c.auction, k, sum(h) // len(h)))
        assert R.q6(short_events, key=key) == expect


def test_q5_brute_force(short_events):
    evs = short_events[:12_000]
    rows = R.q5(evs)
    bids = [e for e in evs if type(e) is Bid]
    ts = sorted(
        {(b.date_time // S + 1) * S for b in bids} | {(b.date_time // S + 61) * S for b in bids}
    )
    expect = []
    for t in ts:
        c = Counter(b.auction for b in bids if t - 60 * S <= b.date_time < t)
        if c:
            a, n = max(c.items(), key=lambda kv: (kv[1], kv[0]))
            expect.append((t, a, n))
    assert rows == expect


def test_q7_brute_force(short_events):
    bids = [e for e in short_events if type(e) is Bid]
    ends = sorted({(b.date_time // (10 * S) + 1) * (10 * S) for b in bids})
    expect = [(e, max(b.price for b in bids if e - 10 * S <= b.date_time < e)) for e in ends]
    assert R.q7(short_events) == expect


def test_q3_q8_brute_force(short_events):
    evs = short_events[:10_000]
    persons = [e for e in evs if type(e) is Person]
    aucs = [e for e in evs if type(e) is Auction]
    q3 = sorted(
        (max(a.date_time, p.date_time), p.name, p.city, p.state, a.id)
        for a in aucs
        for p in persons
        if a.category == 10 and p.state in ("OR", "ID", "CA") and a.seller == p.id
    )
    assert R.q3(evs) == q3
    q8 = sorted(
        (a.date_time, a.seller)
        for a in aucs
        for p in persons
        if a.seller == p.id and p.date_time <= a.date_time < p.date_time + 12 * 3600 * S
    )
    assert R.q8(evs) == q8 and q8  # hot sellers are recent persons


def test_frontier_cuts_are_prefixes(short_events):
    full = {
        "q1": R.q1(short_events),
        "q4": R.q4(short_events),
        "q5": R.q5(short_events),
        "q7": R.q7(short_events),
        "q8": R.q8(short_events),
    }
    for F in (700_000_000, 1_500_000_000, 2_000_000_001):
        assert R.q1(short_events, F) == [r for r in full["q1"] if r[0] < F]
        assert R.q4(short_events, F) == [r for r in full["q4"] if r[0] < F]
        assert R.q5(short_events, F) == [r for r in full["q5"] if r[0] < F]
        assert R.q7(short_events, F) == [r for r in full["q7"] if r[0] <= F]
        assert R.q8(short_events, F) == [r for r in full["q8"] if r[0] < F]


def test_q2_and_q1_shapes():
    evs = generate(NexmarkConfig(rate=1_000_000, workers=1), 0, 25_000)
    recs = evs.to_records()
    assert R.q1(evs) == R.q1(recs)  # EventBatch input accepted
    assert len(R.q1(recs)) == len(evs.bids.price)
    q2 = R.q2(recs)
    assert q2 and all(a % 123 == 0 for _, a, _ in q2)
