"""The columnar fast path: :class:`WorkerStream` and :func:`generate` produce
:class:`~.model.EventBatch` es value-identical to the scalar reference (:mod:`.scalar`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from .model import (
    AUCTION,
    AUCTION_ID_LEAD,
    AUCTION_PROPORTION,
    BID,
    CITIES,
    FIRST_AUCTION_ID,
    FIRST_CATEGORY_ID,
    FIRST_PERSON_ID,
    HOT_BATCH,
    NUM_ACTIVE_PEOPLE,
    NUM_CATEGORIES,
    PERSON,
    PERSON_ID_LEAD,
    PERSON_PROPORTION,
    PROPORTION_DENOMINATOR,
    STATES,
    AuctionColumns,
    BidColumns,
    EventBatch,
    NexmarkConfig,
    PersonColumns,
)
from .rng import _M32, _U64, MASK64, _mulhi_vv, prices_from_u24, raw_draws

# =============================================================================================
# Fast path: columnar batches.
#
# How it works.  All workers share the same seed, hence the same raw PCG output stream
# ``x[0], x[1], ...`` (``x[j]`` is the output after ``j + 1`` state multiplications).  A worker's
# events consume that stream left to right; which draws an event uses depends only on the
# event number and on where its first draw is (``start position``).  So generation splits in
# three steps, for one *segment* of the raw stream at a time:
#
# 1. the raw stream ``x[base : base + L]`` is computed vectorised: ``s_j = s_0 * M**j`` with a
#    cached table of ``M**i`` and 128-bit products in 32-bit limbs, then XSL-RR;
# 2. the *skeleton*: the start position of each event.  This is the only sequential part (the
#    number of draws per event is variable and depends on the draws themselves, so it cannot
#    be vectorised across events).  For the bid moduli 2, 4 and 1010 a table "next accepted
#    draw at or after position p" is precomputed (vectorised), and two composite tables give,
#    for a bid starting at ``p``, the position after all its draws (hot auction) or after its
#    first draw (non-hot auction: then one scalar rejection check with the block's modulus and
#    one more look-up).  A short Python loop walks the events in runs of same-kind events,
#    doing about one look-up per bid; persons and auctions (8 %) use scalar rejection checks;
#    a run that would read past the segment is dropped and redone in the next segment;
# 3. every field of every event is computed vectorised from the start positions.
# =============================================================================================

_SEG_MAX = 1 << 20  # raw draws per segment
_MARGIN = 512  # an event is only started if at least this many draws remain in the segment

__all__ = [
    "generate",
    "WorkerStream",
]


def _zone(m: int) -> int:
    return ((m << (64 - m.bit_length())) - 1) & MASK64


def _zones(m: np.ndarray) -> np.ndarray:
    """Vectorised rejection zones ``(m << clz(m)) - 1`` for uint64 ``m`` with ``1 <= m < 2**53``."""
    _, bl = np.frexp(m.astype(np.float64))  # exact: m < 2**53, so bit_length == exponent
    return (m << (64 - bl).astype(np.uint64)) - _U64(1)


class _Segment:
    """A window ``x[base : base + L]`` of the shared raw stream and its look-up tables.

    Positions inside the segment are relative (0..L-1).  Index tables are int32 of length
    ``L + 2``; ``L`` means "no accepted draw before the end of the segment" and
    ``INV = L + 1`` marks a parse that does not fit in the segment (absorbing).
    """

    def __init__(self, config: NexmarkConfig, base: int, length: int) -> None:
        self.config = config
        self.base = base
        self.L = L = length
        self.INV = L + 1
        # x padded with two zeros so that sentinel indices can be gathered harmlessly.
        self.xp = raw_draws(config.seed_state, base, L, pad=2)
        self.x = self.xp[:L]
        self._nxt: dict[int, np.ndarray] = {}

    def nxt(self, m: int) -> np.ndarray:
        """``nxt[p]`` = first position ``>= p`` whose draw ``range(m)`` accepts (else ``L``)."""
        t = self._nxt.get(m)
        if t is None:
            L = self.L
            acc = (self.x * _U64(m)) <= _U64(_zone(m))
            idx = np.flatnonzero(acc).astype(np.int32)
            cnt = np.empty(L + 2, dtype=np.int32)  # accepted positions before p
            cnt[0] = 0
            np.cumsum(acc, dtype=np.int32, out=cnt[1 : L + 1])
            cnt[L + 1] = cnt[L]
            # the first accepted position >= p is the cnt[p]-th accepted one (or L)
            t = np.append(idx, np.int32(L))[cnt]
            self._nxt[m] = t
        return t

    def bid_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """``(C, B2)`` over positions ``0..L+1`` for bids once ``nextPerson``'s modulus is 1010.

        * ``B2[q]``: position after the bidder and price draws of a bid when they start at ``q``.
        * ``C[p]``: for a bid starting at ``p``: if its auction is hot, the position after the
          whole bid; otherwise ``-q`` where ``q`` is the position after its ``range(2)`` draw
          (``nextAuction`` must be drawn from ``q``, then ``B2`` applies).
        """
        L, INV, x = self.L, self.INV, self.x
        ar = np.arange(2, L + 2, dtype=np.int32)  # j + 2
        # E[j]: end of a bid whose range(4) (bidder) draw is accepted at j.
        n1010 = self.nxt(NUM_ACTIVE_PEOPLE + PERSON_ID_LEAD)
        e = np.empty(L + 2, dtype=np.int32)
        np.minimum(np.where(x >= _U64(1 << 62), ar, n1010[1 : L + 1] + 2), INV, out=e[:L])
        e[L:] = INV
        b2 = e[self.nxt(4)]
        # D[j]: C for a bid whose range(2) (hot auction?) draw is accepted at j.
        d = np.empty(L + 2, dtype=np.int32)
        d[:L] = np.where(x >= _U64(1 << 63), b2[1 : L + 1], 1 - ar)
        d[L:] = INV
        return d[self.nxt(2)], b2


class _NoFit(Exception):
    """A run of events needed draws past the end of the segment."""


_Z10, _Z6, _Z5 = _zone(len(CITIES)), _zone(len(STATES)), _zone(NUM_CATEGORIES)


def _skeleton(seg: _Segment, worker: int, k: int, k_end: int, p: int) -> tuple[list[int], int, int]:
    """Walk worker ``worker``'s events ``k .. k_end-1`` from relative position ``p``.

    Returns ``(starts, k', p')``: the start positions of the events that fit in the segment,
    the next event index and its start position.  Events are walked in *runs* (maximal groups
    of consecutive same-kind events of one 50-block); a run that does not fit entirely in the
    segment (an index past the segment raises IndexError, or a table yields ``INV``) is
    dropped and the walk stops before it.
    """
    cfg = seg.config
    P = cfg.workers
    L = seg.L
    limit = L - _MARGIN
    c_a, b2_a = seg.bid_tables()
    ctab = memoryview(c_a)
    b2 = memoryview(b2_a)
    n2 = memoryview(seg.nxt(2))
    n4 = memoryview(seg.nxt(4))
    xm = memoryview(seg.x)
    inflight = cfg.in_flight
    K = cfg.auction_horizon_events
    delta = cfg.delta
    warm_end = (NUM_ACTIVE_PEOPLE - 1) * PROPORTION_DENOMINATOR  # from here nextPerson m = 1010
    HOT4 = 1 << 62
    M64 = MASK64
    z10, z6, z5 = _Z10, _Z6, _Z5
    zones: dict[int, int] = {}
    starts: list[int] = []
    append = starts.append
    n = worker + k * P
    n_end = worker + k_end * P
    while n < n_end and p < limit:
        blk, r = divmod(n, 50)
        mark = len(starts)
        p0 = p
        try:
            if r >= 4:  # a run of bids
                cnt = min((49 - r) // P + 1, (n_end - n + P - 1) // P)
                hi = 3 * blk + 2
                lo = 0 if hi < inflight else hi - inflight
                mA = hi - lo + 1 + AUCTION_ID_LEAD
                zA = ((mA << (64 - mA.bit_length())) - 1) & M64
                if n >= warm_end:
                    for _ in range(cnt):
                        append(p)
                        v = ctab[p]
                        if v < 0:
                            q = -v
                            while (xm[q] * mA) & M64 > zA:
                                q += 1
                            v = b2[q + 1]
                        p = v
                else:
                    mP = min(blk + 1, NUM_ACTIVE_PEOPLE) + PERSON_ID_LEAD
                    zP = _zone(mP)
                    for _ in range(cnt):
                        append(p)
                        j = n2[p]
                        q = j + 1
                        if not (xm[j] >> 63):
                            while (xm[q] * mA) & M64 > zA:
                                q += 1
                            q += 1
                        j = n4[q]
                        q = j + 1
                        if xm[j] < HOT4:
                            while (xm[q] * mP) & M64 > zP:
                                q += 1
                            q += 1
                        xm[q]  # the price draw must exist
                        p = q + 1
            elif r == 0:  # a person
                cnt = 1
                append(p)
                while (xm[p] * 10) & M64 > z10:
                    p += 1
                p += 1
                while (xm[p] * 6) & M64 > z6:
                    p += 1
                p += 1
            else:  # a run of auctions
                cnt = min((3 - r) // P + 1, (n_end - n + P - 1) // P)
                mP = min(blk + 1, NUM_ACTIVE_PEOPLE) + PERSON_ID_LEAD
                zP = _zone(mP)
                na = n
                for _ in range(cnt):
                    append(p)
                    j = n4[p + 1]  # after the initial price
                    q = j + 1
                    if xm[j] < HOT4:
                        while (xm[q] * mP) & M64 > zP:
                            q += 1
                        q += 1
                    xm[q]
                    q += 1  # reserve price
                    mE = max(2 * (int(float(na + K) * delta) - int(float(na) * delta)), 1)
                    zE = zones.get(mE)
                    if zE is None:
                        zE = zones[mE] = _zone(mE)
                    while (xm[q] * mE) & M64 > zE:
                        q += 1
                    q += 1
                    while (xm[q] * 5) & M64 > z5:
                        q += 1
                    p = q + 1
                    na += P
            if p > L:
                raise _NoFit
        except (IndexError, _NoFit):
            del starts[mark:]
            p = p0
            break
        n += cnt * P
    return starts, (n - worker) // P, p


def _vrange(xp: np.ndarray, q: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised ``range(m)`` starting at positions ``q`` (int64), per-element ``m`` (uint64).

    Returns ``(value, accepted_position)``."""
    m = np.asarray(m, dtype=np.uint64)
    if m.ndim == 0:
        m = np.full(len(q), m, dtype=np.uint64)
    zone = _zones(m)
    pos = q.copy()
    val = np.empty(len(q), dtype=np.uint64)
    act = np.arange(len(q))
    L = len(xp) - 2
    while act.size:
        pa = pos[act]
        if pa.size and pa.max() >= L:
            raise AssertionError("nexmark generator: rejection loop ran past its segment")
        v = xp[pa]
        ma = m[act]
        ok = (v * ma) <= zone[act]
        done = act[ok]
        val[done] = _mulhi_vv(v[ok], ma[ok])
        act = act[~ok]
        pos[act] += 1
    return val, pos


def _extract(seg: _Segment, worker: int, k0: int, starts: np.ndarray, p_after: int) -> EventBatch:
    """Compute every field of worker ``worker``'s events ``k0, k0+1, ...`` whose draws start at
    the relative positions ``starts``; ``p_after`` is where the next event starts (used for a
    consistency check of the skeleton)."""
    cfg = seg.config
    P = cfg.workers
    xp = seg.xp
    cnt = len(starts)
    n = worker + (k0 + np.arange(cnt, dtype=np.int64)) * P
    r = n % PROPORTION_DENOMINATOR
    blk = n // PROPORTION_DENOMINATOR
    kind = np.where(r == 0, PERSON, np.where(r < 4, AUCTION, BID)).astype(np.int8)
    t = cfg.ts_array(n)
    end = np.empty(cnt, dtype=np.int64)  # position after each event (for the check)

    # Persons
    sel = np.flatnonzero(kind == PERSON)
    p = starts[sel]
    city, j1 = _vrange(xp, p, _U64(len(CITIES)))
    state, j2 = _vrange(xp, j1 + 1, _U64(len(STATES)))
    city, state = city.astype(np.uint8), state.astype(np.uint8)
    end[sel] = j2 + 1
    persons = PersonColumns(n[sel], FIRST_PERSON_ID + blk[sel], city, state, t[sel])

    def next_person(q, blk_sel):
        mP = (np.minimum(blk_sel + 1, NUM_ACTIVE_PEOPLE) + PERSON_ID_LEAD).astype(np.uint64)
        val, acc = _vrange(xp, q, mP)
        base = np.maximum(blk_sel + 1 - NUM_ACTIVE_PEOPLE, 0)
        return base + val.astype(np.int64), acc + 1

    def price_at(q):
        return prices_from_u24((xp[q] & _M32) >> _U64(8))

    # Auctions
    sel = np.flatnonzero(kind == AUCTION)
    p = starts[sel]
    na, ba, ra, ta = n[sel], blk[sel], r[sel], t[sel]
    initial = price_at(p)
    j = seg.nxt(4)[p + 1]
    hot = xp[j] >= _U64(1 << 62)
    q = j + 1
    seller = (ba // HOT_BATCH) * HOT_BATCH
    cold = np.flatnonzero(~hot)
    if cold.size:
        v, q[cold] = next_person(q[cold], ba[cold])
        seller[cold] = v
    reserve = initial + price_at(q)
    q = q + 1
    horizon = cfg.ts_array(na + cfg.auction_horizon_events) - ta
    mE = np.maximum(2 * horizon, 1).astype(np.uint64)
    v, acc = _vrange(xp, q, mE)
    expires = ta + 1 + v.astype(np.int64)
    v, j = _vrange(xp, acc + 1, _U64(NUM_CATEGORIES))
    category = FIRST_CATEGORY_ID + v.astype(np.int64)
    end[sel] = j + 1
    auctions = AuctionColumns(
        na,
        FIRST_AUCTION_ID + AUCTION_PROPORTION * ba + ra - 1,
        initial,
        reserve,
        ta,
        expires,
        FIRST_PERSON_ID + seller,
        category,
    )

    # Bids
    sel = np.flatnonzero(kind == BID)
    p = starts[sel]
    nb, bb = n[sel], blk[sel]
    j = seg.nxt(2)[p]
    hot = (xp[j] >> _U64(63)) != 0
    q = j + 1
    last_auction = AUCTION_PROPORTION * bb + 2
    auction = (last_auction // HOT_BATCH) * HOT_BATCH
    cold = np.flatnonzero(~hot)
    if cold.size:
        hi = last_auction[cold]
        lo = np.where(hi < cfg.in_flight, 0, hi - cfg.in_flight)
        v, acc = _vrange(xp, q[cold], (hi - lo + 1 + AUCTION_ID_LEAD).astype(np.uint64))
        auction[cold] = lo + v.astype(np.int64)
        q[cold] = acc + 1
    j = seg.nxt(4)[q]
    hot = xp[j] >= _U64(1 << 62)
    q = j + 1
    bidder = (bb // HOT_BATCH) * HOT_BATCH + 1
    cold = np.flatnonzero(~hot)
    if cold.size:
        v, q[cold] = next_person(q[cold], bb[cold])
        bidder[cold] = v
    price = price_at(q)
    end[sel] = q + 1
    bids = BidColumns(nb, FIRST_AUCTION_ID + auction, FIRST_PERSON_ID + bidder, price, t[sel])

    # The skeleton and the field computation must agree on every event boundary.
    if cnt and not (
        np.array_equal(end[:-1], starts[1:]) and int(end[-1]) == p_after
    ):  # pragma: no cover - an internal invariant
        raise AssertionError("nexmark generator: skeleton and field extraction disagree")
    return EventBatch(n, kind, t, persons, auctions, bids)


# ---------------------------------------------------------------------------------------------
# Per-worker streams and checkpoints

# (config, worker) -> {k: absolute raw position of event k's first draw}; lets ``seek`` skip
# the already-walked prefix of a stream.
_CHECKPOINTS: dict[tuple[NexmarkConfig, int], dict[int, int]] = {}
_CHECKPOINT_LOCK = threading.Lock()
_MAX_CHECKPOINTS = 4096


def _record_checkpoint(config: NexmarkConfig, worker: int, k: int, pos: int) -> None:
    with _CHECKPOINT_LOCK:
        d = _CHECKPOINTS.setdefault((config, worker), {})
        if len(d) < _MAX_CHECKPOINTS:
            d[k] = pos


def _best_checkpoint(config: NexmarkConfig, worker: int, k: int) -> tuple[int, int]:
    with _CHECKPOINT_LOCK:
        d = _CHECKPOINTS.get((config, worker), {})
        best = max((kk for kk in d if kk <= k), default=0)
        return (best, d[best]) if best else (0, 0)


class WorkerStream:
    """The events of worker ``worker`` (``n = worker (mod P)``), produced in columnar batches.

    The stream is sequential: it remembers its position (``next_number``) and each call returns
    the events that follow.  ``seek`` may jump forward (it walks the skipped prefix without
    computing fields, reusing cached checkpoints of earlier walks of the same configuration).

    ``block_events`` is the internal generation granularity for ``next_batch``: small requests
    (e.g. one 1 ms tick of events) are served from a buffer filled ``block_events`` at a time.
    """

    def __init__(self, config: NexmarkConfig, worker: int, *, block_events: int = 1 << 16):
        if not 0 <= worker < config.workers:
            raise ValueError(f"worker {worker} out of range 0..{config.workers - 1}")
        self.config = config
        self.worker = worker
        self.block_events = max(1, int(block_events))
        self._k = 0  # next event (index among this worker's events) not yet generated
        self._pos = 0  # absolute raw position of event _k's first draw
        self._buf: EventBatch | None = None  # generated, not yet returned
        self._buf_off = 0

    # -- positions -----------------------------------------------------------------------

    @property
    def next_number(self) -> int:
        """Event number of the next event ``next_batch`` will return."""
        if self._buf is not None and self._buf_off < len(self._buf):
            return int(self._buf.event_number[self._buf_off])
        return self.worker + self._k * self.config.workers

    def _k_for(self, n: int) -> int:
        """Index of this worker's first event with number ``>= n``."""
        P, w = self.config.workers, self.worker
        return max(0, -((w - n) // P))

    def seek(self, n: int) -> None:
        """Skip to this worker's first event with number ``>= n`` (forward only)."""
        k = self._k_for(n)
        if self._buf is not None:
            # Drop buffered events before n.
            en = self._buf.event_number
            self._buf_off = max(self._buf_off, int(np.searchsorted(en, n)))
            if self._buf_off < len(en):
                return
            self._buf = None
            self._buf_off = 0
        if k <= self._k:
            return
        ck, cpos = _best_checkpoint(self.config, self.worker, k)
        if ck > self._k:
            self._k, self._pos = ck, cpos
        self._walk(k, extract=False)

    # -- generation ----------------------------------------------------------------------

    def _walk(self, k_end: int, extract: bool) -> list[EventBatch]:
        """Advance the stream to event index ``k_end``; return the batches if ``extract``."""
        out = []
        while self._k < k_end:
            remaining = k_end - self._k
            L = min(_SEG_MAX, int(remaining * 7) + 4 * _MARGIN)
            seg = _Segment(self.config, self._pos, L)
            starts, k_next, p_next = _skeleton(seg, self.worker, self._k, k_end, 0)
            if not starts:  # pragma: no cover - one event needing > L - MARGIN draws
                raise AssertionError("nexmark generator: segment too short for one event")
            if extract:
                out.append(
                    _extract(seg, self.worker, self._k, np.asarray(starts, np.int64), p_next)
                )
            self._k = k_next
            self._pos += p_next
            _record_checkpoint(self.config, self.worker, self._k, self._pos)
        return out

    def generate_until(self, n_end: int) -> EventBatch:
        """All not-yet-returned events of this worker with number ``< n_end`` (unbuffered)."""
        parts = []
        if self._buf is not None:
            en = self._buf.event_number
            hi = int(np.searchsorted(en, n_end))
            if hi > self._buf_off:
                parts.append(_slice(self._buf, self._buf_off, hi))
            self._buf_off = max(self._buf_off, hi)
            if self._buf_off < len(en):
                return EventBatch.concat(parts)
            self._buf = None
            self._buf_off = 0
        parts.extend(self._walk(self._k_for(n_end), extract=True))
        return EventBatch.concat(parts) if len(parts) != 1 else parts[0]

    def next_batch(self, n_end: int) -> EventBatch:
        """All not-yet-returned events of this worker with number ``< n_end``, served from an
        internal buffer generated ``block_events`` events at a time."""
        parts = []
        while self.next_number < n_end:
            if self._buf is None or self._buf_off >= len(self._buf):
                k_target = max(self._k_for(n_end), self._k + self.block_events)
                self._buf = EventBatch.concat(self._walk(k_target, extract=True))
                self._buf_off = 0
            en = self._buf.event_number
            hi = int(np.searchsorted(en, n_end))
            parts.append(_slice(self._buf, self._buf_off, hi))
            self._buf_off = hi
        return EventBatch.concat(parts) if len(parts) != 1 else parts[0]

    def take(self, count: int) -> EventBatch:
        """The next ``count`` events of this worker."""
        n_end = self.next_number + count * self.config.workers
        return self.next_batch(n_end)


def _slice(b: EventBatch, lo: int, hi: int) -> EventBatch:
    """Events ``lo:hi`` (positions in ``b``) as a new batch."""
    if lo == 0 and hi == len(b):
        return b
    if hi <= lo:
        return EventBatch.empty()
    n_lo, n_hi = int(b.event_number[lo]), int(b.event_number[hi - 1]) + 1

    def sub(table, tcls):
        en = table.event_number
        a, z = np.searchsorted(en, n_lo), np.searchsorted(en, n_hi)
        return tcls(*[c[a:z] for c in table])

    return EventBatch(
        b.event_number[lo:hi],
        b.kind[lo:hi],
        b.date_time[lo:hi],
        sub(b.persons, PersonColumns),
        sub(b.auctions, AuctionColumns),
        sub(b.bids, BidColumns),
    )


def _kind_counts_before(n: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Numbers of persons, auctions and bids among the events ``0 .. n-1``."""
    blk, r = np.divmod(n, PROPORTION_DENOMINATOR)
    persons = blk + (r > 0)
    auctions = AUCTION_PROPORTION * blk + np.clip(r - PERSON_PROPORTION, 0, AUCTION_PROPORTION)
    bids = n - persons - auctions
    return persons, auctions, bids


def _interleave(parts: Sequence[EventBatch], start: int, end: int) -> EventBatch:
    """Merge per-worker batches that together hold exactly the events ``[start, end)``: every
    event's row is known arithmetically, so this scatters instead of sorting."""
    parts = [b for b in parts if len(b)]
    if len(parts) <= 1:
        return parts[0] if parts else EventBatch.empty()
    N = end - start
    base = [int(c[0]) for c in _kind_counts_before(np.array([start]))]
    event_number = np.arange(start, end, dtype=np.int64)
    kind = np.empty(N, dtype=np.int8)
    date_time = np.empty(N, dtype=np.int64)
    tables = []
    for ti, (attr, tcls) in enumerate(
        (("persons", PersonColumns), ("auctions", AuctionColumns), ("bids", BidColumns))
    ):
        total = sum(len(getattr(b, attr).event_number) for b in parts)
        cols = [np.empty(total, dtype=c.dtype) for c in getattr(parts[0], attr)]
        for b in parts:
            t = getattr(b, attr)
            rows = _kind_counts_before(t.event_number)[ti] - base[ti]
            for dst, src in zip(cols, t, strict=True):
                dst[rows] = src
        tables.append(tcls(*cols))
    for b in parts:
        rows = b.event_number - start
        kind[rows] = b.kind
        date_time[rows] = b.date_time
    return EventBatch(event_number, kind, date_time, *tables)


def generate(config: NexmarkConfig, start: int, end: int) -> EventBatch:
    """Events ``start <= n < end`` of all ``P`` workers, columnar, sorted by event number.

    Each worker's stream is walked from its start (or from a cached checkpoint of an earlier
    call with the same configuration), so the first call for a range far from 0 costs a
    field-less walk of the prefix (see ``WorkerStream.seek``).
    """
    if not 0 <= start <= end:
        raise ValueError(f"bad event range [{start}, {end})")
    parts = []
    for w in range(config.workers):
        s = WorkerStream(config, w)
        s.seek(start)
        parts.append(s.generate_until(end))
    return _interleave(parts, start, end)
