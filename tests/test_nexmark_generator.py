"""NEXMark generator: the test vectors of Megaphone's generator (PCG-64 as rand_pcg) and
equality of the scalar reference path with the fast columnar path."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pytimely.nexmark.generator as G
from pytimely.nexmark import (
    AUCTION,
    BID,
    PERSON,
    Auction,
    Bid,
    EventBatch,
    NexmarkConfig,
    Person,
    WorkerStream,
    generate,
    generate_scalar,
)
from pytimely.nexmark.generator import columnar
from pytimely.nexmark.generator import rng as prng

HARNESS_4M_4 = NexmarkConfig(rate=4_000_000, workers=4)


# ---------------------------------------------------------------------------------------------
# PRNG


def test_pcg_test_vector():
    G.pcg_selftest()
    rng = G.Pcg64Mcg(42)
    assert rng.state == 43
    assert [rng.next_u64() for _ in range(3)] == [
        0x63B4A3A813CE700A,
        0x382954200617AB24,
        0xA7FD85AE3FE950CE,
    ]


def test_seed_is_sixteen_bytes_of_p():
    for p in (1, 4, 12, 255):
        cfg = NexmarkConfig(workers=p)
        assert G.Pcg64Mcg.from_seed(bytes([p]) * 16).state == cfg.seed_state
        assert cfg.seed_state & 1 == 1


def test_raw_draws_match_scalar_pcg():
    seed = NexmarkConfig(workers=7).seed_state
    rng = G.Pcg64Mcg(seed)
    ref = [rng.next_u64() for _ in range(70_000)]
    assert G.raw_draws(seed, 0, 70_000).tolist() == ref
    # from an offset, across several internal chunks, with padding
    got = G.raw_draws(seed, 1234, 66_000, pad=2)
    assert got[:-2].tolist() == ref[1234:67_234]
    assert got[-2:].tolist() == [0, 0]


def test_gen_range_rejection_zone():
    # rand 0.6.5's conservative zone: range(4) accepts half the draws, range(5) 5/8.
    rng = G.Pcg64Mcg(G.NexmarkConfig(workers=3).seed_state)
    draws = [rng.next_u64() for _ in range(20_000)]
    for m, frac in ((2, 0.5), (4, 0.5), (5, 5 / 8), (6, 3 / 4), (10, 5 / 8)):
        zone = columnar._zone(m)
        acc = sum(((v * m) & G.MASK64) <= zone for v in draws) / len(draws)
        assert abs(acc - frac) < 0.02, (m, acc)
    # range(1) still consumes draws and returns 0
    rng = G.Pcg64Mcg(5)
    assert all(rng.gen_range(1) == 0 for _ in range(10))


# ---------------------------------------------------------------------------------------------
# Price


def test_price_check_values():
    for u, p in ((0, 100), (1 << 23, 100_000), ((1 << 24) - 1, 99_999_888)):
        assert G.price_from_u24(u) == p
        assert G.prices_from_u24(np.array([u]))[0] == p


def test_price_table_exhaustive():
    """All 2**24 prices: the spec's sum, range, monotonicity; and the scalar path (with its
    exact decimal fallback) on every input whose double ``pow`` is near a binary32 rounding
    midpoint, plus a random sample."""
    table = G.prices_from_u24(np.arange(1 << 24, dtype=np.uint32))
    assert int(table.sum()) == 121_437_367_826_399
    assert int(table.min()) == 100 and int(table.max()) == 99_999_888
    assert np.all(np.diff(table) >= 0)  # monotone in u
    near = []
    for c in range(0, 1 << 24, 1 << 20):
        u = np.arange(c, c + (1 << 20))
        y = (u * (6.0 * 2.0**-24)).astype(np.float32).astype(np.float64)
        near += (c + np.flatnonzero(prng._near_midpoint(np.power(10.0, y)))).tolist()
    assert near  # the fallback is exercised
    rnd = random.Random(7)
    us = near + [rnd.randrange(1 << 24) for _ in range(2000)]
    assert [G.price_from_u24(x) for x in us] == table[us].tolist()


def test_exact_pow10_path_agrees_away_from_midpoints():
    rnd = random.Random(8)
    for _ in range(300):
        yy = prng._f32(6.0 * (rnd.randrange(1 << 24) * 2.0**-24))
        assert prng._pow10_f32_exact(yy) == prng._f32(10.0**yy)


# ---------------------------------------------------------------------------------------------
# Golden rows, aggregates, derived properties (spec 1.7)


GOLDEN = [
    Person(1000, "", "", "", "redmond", "WA", 0),
    Auction(1000, "", "", 816717, 857163, 250, 19132688309698, 1000, 10),
    Auction(1001, "", "", 816717, 857163, 500, 19132688309948, 1000, 10),
    Auction(1002, "", "", 816717, 857163, 750, 19132688310198, 1000, 10),
    Bid(1000, 1007, 35879292, 1000),
    Bid(1004, 1001, 520547, 1250),
]


def test_golden_rows_scalar_and_vector():
    assert generate_scalar(HARNESS_4M_4, 0, 6) == GOLDEN
    assert generate(HARNESS_4M_4, 0, 6).to_records() == GOLDEN
    # worker w emits n = w (mod 4)
    g = G.ScalarWorkerGenerator(HARNESS_4M_4, 1)
    assert g.next_event() == (1, GOLDEN[1])
    assert g.next_event() == (5, GOLDEN[5])


AGGREGATES = {
    (4_000_000, 4): (
        657_610_566_862,
        297_455_177,
        172_054_227,
        84_963_279_672,
        255_394_772_809_071_791,
        71_963,
    ),
    (1_000_000, 1): (
        665_392_504_030,
        297_021_808,
        172_143_720,
        86_503_117_937,
        259_472_060_832_989_018,
        71_918,
    ),
    (8_000_000, 12): (
        647_026_204_710,
        296_023_468,
        171_500_889,
        83_534_135_228,
        259_249_066_152_212_858,
        72_094,
    ),
}


def _aggregates(batch: EventBatch):
    b, a = batch.bids, batch.auctions
    return tuple(
        int(c.sum()) for c in (b.price, b.auction, b.bidder, a.reserve, a.expires, a.category)
    )


@pytest.mark.parametrize("rate,workers", sorted(AGGREGATES))
def test_aggregates_first_100k(rate, workers):
    batch = generate(NexmarkConfig(rate=rate, workers=workers), 0, 100_000)
    assert len(batch) == 100_000
    assert _aggregates(batch) == AGGREGATES[(rate, workers)]


def test_aggregates_scalar_path():
    evs = generate_scalar(NexmarkConfig(rate=1_000_000, workers=1), 0, 100_000)
    bids = [e for e in evs if type(e) is Bid]
    aucs = [e for e in evs if type(e) is Auction]
    got = (
        sum(b.price for b in bids),
        sum(b.auction for b in bids),
        sum(b.bidder for b in bids),
        sum(a.reserve for a in aucs),
        sum(a.expires for a in aucs),
        sum(a.category for a in aucs),
    )
    assert got == AGGREGATES[(1_000_000, 1)]


def test_structure_and_derived_properties():
    cfg = HARNESS_4M_4
    start, end = 50_000, 250_000
    b = generate(cfg, start, end)
    n = np.arange(start, end)
    assert np.array_equal(b.event_number, n)
    assert np.array_equal(b.date_time, 250 * n)  # R = 4e6: 250 ns apart
    r = n % 50
    assert np.array_equal(b.kind, np.where(r == 0, PERSON, np.where(r < 4, AUCTION, BID)))
    # 1 : 3 : 46 per 50 events
    assert (len(b.persons.id), len(b.auctions.id), len(b.bids.price)) == (4000, 12000, 184000)
    p, a, bd = b.persons, b.auctions, b.bids
    assert np.array_equal(p.id, 1000 + p.event_number // 50)
    blk, ra = a.event_number // 50, a.event_number % 50
    assert np.array_equal(a.id, 1000 + 3 * blk + ra - 1)
    # prices and categories
    for col in (a.initial_bid, a.reserve - a.initial_bid, bd.price):
        assert col.min() >= 100 and col.max() <= 99_999_888
    assert set(np.unique(a.category).tolist()) == {10, 11, 12, 13, 14}
    # auctions live U[1 ns, 24 h]
    life = a.expires - a.date_time
    assert life.min() >= 1 and life.max() <= 2 * 43_200 * 10**9
    assert abs(life.mean() / (43_200 * 10**9) - 1) < 0.05
    # hot proportions: ~50 % hot auction, ~75 % hot bidder, ~75 % hot seller
    bblk = bd.event_number // 50
    hot_auction = 1000 + ((3 * bblk + 2) // 100) * 100
    assert abs(np.mean(bd.auction == hot_auction) - 0.5) < 0.01
    hot_bidder = 1000 + (bblk // 100) * 100 + 1
    assert abs(np.mean(bd.bidder == hot_bidder) - 0.75) < 0.01
    hot_seller = 1000 + (blk // 100) * 100
    assert abs(np.mean(a.seller == hot_seller) - 0.75) < 0.02
    # ids never run more than the lead (10) ahead of the newest person / auction
    assert np.all(bd.bidder < 1000 + bblk + 1 + 10)
    assert np.all(bd.auction < 1000 + 3 * bblk + 3 + 10)
    assert np.all(a.seller < 1000 + blk + 1 + 10)
    # city/state are valid indices
    assert p.city.max() < len(G.CITIES) and p.state.max() < len(G.STATES)


def test_short_auction_profile_exercises_nextauction_window():
    # I = 100: non-hot bids pick among the last I auctions (lo > 0 branch).
    cfg = NexmarkConfig(rate=10_000, workers=1, in_flight_auctions=100)
    b = generate(cfg, 0, 60_000)
    bd = b.bids
    last = 1000 + 3 * (bd.event_number // 50) + 2
    cold = bd.auction != 1000 + ((last - 1000) // 100) * 100
    lo = np.maximum(last - 1000 - 100, 0) + 1000
    assert np.all(bd.auction[cold] >= lo[cold])
    assert np.all(bd.auction <= last + 10)
    life = b.auctions.expires - b.auctions.date_time
    # K = 100*50//3 = 1666 events = 0.1666 s; lifetimes U[1 ns, 2*horizon]
    assert life.max() <= 2 * 166_600_000


def test_time_rounding_non_integer_delta():
    cfg = NexmarkConfig(rate=3_000_000, workers=1, base_time=17)
    b = generate(cfg, 0, 1000)
    assert b.date_time.tolist() == [17 + int(float(i) * (1e9 / 3e6)) for i in range(1000)]


# ---------------------------------------------------------------------------------------------
# Scalar path == fast path


@pytest.mark.parametrize(
    "cfg,start,end",
    [
        (NexmarkConfig(rate=1_000_000, workers=1), 0, 52_000),
        (NexmarkConfig(rate=3_000_000, workers=7, base_time=17), 23_457, 60_000),
        (NexmarkConfig(rate=10_000, workers=3, in_flight_auctions=100), 0, 40_000),
        (NexmarkConfig(rate=10_000, workers=2, in_flight_auctions=37), 45_000, 56_000),
        (NexmarkConfig(rate=8_000_000, workers=12), 40_001, 55_000),
        (NexmarkConfig(rate=7, workers=255), 0, 3_000),
    ],
)
def test_vector_equals_scalar(cfg, start, end):
    assert generate(cfg, start, end).to_records() == generate_scalar(cfg, start, end)


def test_vector_equals_scalar_across_many_segment_boundaries(monkeypatch):
    # Tiny segments: thousands of segment ends, runs dropped and redone at the boundary.
    cases = (
        (NexmarkConfig(rate=1_000_000, workers=1), 45_000, 60_000),  # warm-up -> fast bids
        (NexmarkConfig(rate=2_000_000, workers=3), 48_000, 64_000),
        (NexmarkConfig(rate=10_000, workers=5, in_flight_auctions=50), 0, 15_000),
    )
    normal = [generate(cfg, a, b).to_records() for cfg, a, b in cases]
    monkeypatch.setattr(columnar, "_SEG_MAX", 1200)
    monkeypatch.setattr(columnar, "_MARGIN", 8)  # runs often overflow the segment: dropped, redone
    monkeypatch.setattr(columnar, "_CHECKPOINTS", {})
    for (cfg, a, b), ref in zip(cases, normal, strict=True):
        assert generate(cfg, a, b).to_records() == ref
    cfg = NexmarkConfig(rate=3_000_000, workers=2)
    assert generate(cfg, 3_000, 9_000).to_records() == generate_scalar(cfg, 3_000, 9_000)


@settings(max_examples=12, deadline=None)
@given(
    rate=st.sampled_from([1, 999, 10_000, 3_000_000, 4_000_000]),
    workers=st.integers(1, 9),
    inflight=st.one_of(st.none(), st.integers(1, 500)),
    base=st.integers(0, 10**6),
    start=st.integers(0, 12_000),
    length=st.integers(0, 2_500),
)
def test_vector_equals_scalar_property(rate, workers, inflight, base, start, length):
    cfg = NexmarkConfig(rate=rate, workers=workers, in_flight_auctions=inflight, base_time=base)
    assert generate(cfg, start, start + length).to_records() == generate_scalar(
        cfg, start, start + length
    )


# ---------------------------------------------------------------------------------------------
# Stream API


def test_worker_stream_batches_compose():
    cfg = NexmarkConfig(rate=4_000_000, workers=3)
    whole = WorkerStream(cfg, 1).generate_until(120_000)
    assert np.all(whole.event_number % 3 == 1)
    s = WorkerStream(cfg, 1, block_events=5000)
    parts, n = [], 0
    rnd = random.Random(3)
    while n < 120_000:
        n = min(120_000, n + rnd.randrange(1, 4000))
        parts.append(s.next_batch(n))
        assert s.next_number >= n
    got = EventBatch.concat(parts)
    assert got.to_records() == whole.to_records()
    assert np.array_equal(got.event_number, whole.event_number)
    # take() continues where next_batch stopped
    t = s.take(10)
    assert t.event_number.tolist() == [120_001 + 3 * i for i in range(10)]


def test_seek_and_checkpoints():
    cfg = NexmarkConfig(rate=2_000_000, workers=2)
    ref = generate_scalar(cfg, 70_000, 70_100)
    assert generate(cfg, 70_000, 70_100).to_records() == ref  # walks the prefix
    assert generate(cfg, 70_000, 70_100).to_records() == ref  # from a checkpoint
    s = WorkerStream(cfg, 0)
    s.seek(70_001)
    assert s.next_number == 70_002
    b = s.next_batch(70_100)
    assert b.to_records() == [e for i, e in enumerate(ref) if (70_000 + i) % 2 == 0][1:]


def test_event_batch_helpers():
    assert len(EventBatch.empty()) == 0
    assert generate(HARNESS_4M_4, 5, 5).to_records() == []
    a = generate(HARNESS_4M_4, 0, 30)
    b = generate(HARNESS_4M_4, 30, 70)
    both = EventBatch.concat([b, a])  # out of order: re-sorted
    assert both.to_records() == generate(HARNESS_4M_4, 0, 70).to_records()


def test_config_validation():
    with pytest.raises(ValueError):
        NexmarkConfig(workers=0)
    with pytest.raises(ValueError):
        NexmarkConfig(workers=256)
    with pytest.raises(ValueError):
        NexmarkConfig(rate=0)
    with pytest.raises(ValueError):
        NexmarkConfig(in_flight_auctions=0)
    with pytest.raises(ValueError):
        WorkerStream(HARNESS_4M_4, 4)
    with pytest.raises(ValueError):
        generate(HARNESS_4M_4, 10, 5)
    cfg = NexmarkConfig(rate=4_000_000)
    assert cfg.in_flight == 2592 * 4_000_000
    assert cfg.auction_horizon_events == 43_200 * 4_000_000
    assert cfg.ts(cfg.auction_horizon_events) == 43_200 * 10**9


def test_events_before_inverts_ts():
    rnd = random.Random(11)
    for cfg in (
        NexmarkConfig(rate=3_000_000, base_time=5),
        NexmarkConfig(rate=4_000_000),
        NexmarkConfig(rate=7),
    ):
        for t in [0, 1, 5, 6, 250, 251, 10**9, 10**9 + 1] + [
            rnd.randrange(10**12) for _ in range(300)
        ]:
            n = cfg.events_before(t)
            assert (n == 0 or cfg.ts(n - 1) < t) and cfg.ts(n) >= t
    assert NexmarkConfig(rate=4_000_000).events_before(10**9) == 4_000_000
