"""The canonical NEXMark event generator (Megaphone's, reproduced value for value).

Everything here follows ``shared/reference/nexmark.md`` section 1.  Summary of the model:

* Global event number ``n = 0, 1, 2, ...``.  ``kind(n)``: with ``r = n % 50``, ``r == 0`` is a
  Person, ``1 <= r <= 3`` an Auction, ``r >= 4`` a Bid (1 : 3 : 46).
* Event time ``ts(n) = base_time + trunc(float(n) * delta)`` **integer nanoseconds**, where
  ``delta = 1e9 / rate`` (an IEEE double) and ``rate`` is the total number of events per second
  over all generating workers.
* ``P`` generating workers; worker ``w`` generates the events ``n = w, w + P, w + 2P, ...`` in that
  order with its own PCG-64 (MCG, XSL-RR) generator.  **Every worker is seeded identically** with
  16 bytes of value ``P``, so event *contents* depend on ``P`` (ids, kinds and times do not).
* The number of PRNG draws per event is variable (rejection sampling in ``range``), so a worker's
  stream is inherently sequential: the contents of its k-th event depend on all its previous
  events.

Two implementations live here:

``ScalarWorkerGenerator`` / ``generate_scalar``
    A clear per-event transcription of the spec on Python integers (the reference path).

``WorkerStream`` / ``generate``
    The fast path.  The only inherently sequential part (where each event's draws start in the
    worker's raw PCG output stream) is computed by a tight loop over precomputed numpy tables;
    the PCG output stream itself, the rejection-sampling acceptance tables and every field value
    are computed with vectorised numpy (uint64 arithmetic, 128-bit products split in 32-bit
    limbs).  Results are columnar (:class:`EventBatch`).  Both paths are value-identical; the
    tests check it.

Time unit everywhere: integer nanoseconds (``date_time``, ``expires``).
"""

from __future__ import annotations

import itertools
import math
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, localcontext
from typing import NamedTuple

import numpy as np

__all__ = [
    "AUCTION",
    "BID",
    "CITIES",
    "PERSON",
    "STATES",
    "Auction",
    "AuctionColumns",
    "Bid",
    "BidColumns",
    "EventBatch",
    "NexmarkConfig",
    "Pcg64Mcg",
    "Person",
    "PersonColumns",
    "ScalarWorkerGenerator",
    "WorkerStream",
    "event_kind",
    "generate",
    "generate_scalar",
    "pcg_selftest",
    "price_from_u24",
    "prices_from_u24",
]

# ---------------------------------------------------------------------------------------------
# Constants of Megaphone's generator (spec 1.2).  These are fixed; only rate, workers,
# in-flight auctions and base time are parameters.

CITIES: tuple[str, ...] = (
    "phoenix",
    "los angeles",
    "san francisco",
    "boise",
    "portland",
    "bend",
    "redmond",
    "seattle",
    "kent",
    "cheyenne",
)
STATES: tuple[str, ...] = ("AZ", "CA", "ID", "OR", "WA", "WY")

PERSON, AUCTION, BID = 0, 1, 2  # values of the ``kind`` column

PROPORTION_DENOMINATOR = 50  # person : auction : bid = 1 : 3 : 46
PERSON_PROPORTION = 1
AUCTION_PROPORTION = 3
FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
NUM_ACTIVE_PEOPLE = 1000
PERSON_ID_LEAD = 10
AUCTION_ID_LEAD = 10
HOT_SELLER_RATIO = 4  # P(hot) = 1 - 1/4
HOT_AUCTION_RATIO = 2  # P(hot) = 1 - 1/2
HOT_BIDDER_RATIO = 4  # P(hot) = 1 - 1/4
HOT_BATCH = 100  # "ratio_2": hot ids are multiples of 100
HARNESS_IN_FLIGHT_PER_RATE = 2592  # Megaphone harness: I = 2592 * rate

# PCG-64 MCG multiplier (rand_pcg 0.1.1, Mcg128Xsl64).
PCG_MULTIPLIER = 0x2360ED051FC65DA44385DF649FCCF645
MASK64 = (1 << 64) - 1
MASK128 = (1 << 128) - 1


# ---------------------------------------------------------------------------------------------
# Configuration


@dataclass(frozen=True)
class NexmarkConfig:
    """Generator parameters (spec 1.2).

    ``rate``
        Total events per second over all generating workers (``R``).  Event ``n`` happens at
        ``ts(n) = base_time + trunc(n * (1e9 / rate))`` ns.
    ``workers``
        Number of generating workers ``P`` (1..255): worker ``w`` generates ``n = w (mod P)``;
        every worker's PRNG is seeded with 16 bytes of value ``P``.
    ``in_flight_auctions``
        ``I``.  ``None`` (default) means Megaphone's harness value ``2592 * rate`` (auctions live
        U[1 ns, 24 h]).  Small values (e.g. 100 at rate 10 000) give a short-auction profile
        useful for functional tests of Q4/Q6.
    ``base_time``
        ``B``, ns added to every event time (canonical 0).
    """

    rate: int = 1_000_000
    workers: int = 1
    in_flight_auctions: int | None = None
    base_time: int = 0

    def __post_init__(self) -> None:
        if not (isinstance(self.rate, (int, float)) and self.rate > 0):
            raise ValueError(f"NexmarkConfig.rate must be a positive number, got {self.rate!r}")
        if not (isinstance(self.workers, int) and 1 <= self.workers <= 255):
            raise ValueError(
                f"NexmarkConfig.workers must be an int in 1..255 (the seed is one byte), "
                f"got {self.workers!r}"
            )
        if self.in_flight_auctions is not None and not (
            isinstance(self.in_flight_auctions, int) and self.in_flight_auctions >= 1
        ):
            raise ValueError(
                f"NexmarkConfig.in_flight_auctions must be None or a positive int, "
                f"got {self.in_flight_auctions!r}"
            )
        if not (isinstance(self.base_time, int) and self.base_time >= 0):
            raise ValueError(f"NexmarkConfig.base_time must be an int >= 0, got {self.base_time!r}")

    @property
    def delta(self) -> float:
        """Inter-event delay in ns, an IEEE double: ``1e9 / rate``."""
        return 1e9 / float(self.rate)

    @property
    def in_flight(self) -> int:
        """``I``: the configured value, or the harness default ``2592 * rate``."""
        if self.in_flight_auctions is not None:
            return self.in_flight_auctions
        return int(HARNESS_IN_FLIGHT_PER_RATE * self.rate)

    @property
    def auction_horizon_events(self) -> int:
        """``K = (I * 50) // 3``: events spanned by an auction's expected lifetime."""
        return (self.in_flight * PROPORTION_DENOMINATOR) // AUCTION_PROPORTION

    @property
    def seed_state(self) -> int:
        """Initial 128-bit PCG state of every worker: little-endian 16 bytes of ``P``, ``| 1``."""
        return int.from_bytes(bytes([self.workers]) * 16, "little") | 1

    def ts(self, n: int) -> int:
        """Event time of event ``n`` in ns: ``B + trunc(float(n) * delta)``."""
        return self.base_time + int(float(n) * self.delta)

    def events_before(self, t: int) -> int:
        """Number of events with ``ts(n) < t``, i.e. the smallest ``n`` with ``ts(n) >= t``
        (``ts`` is non-decreasing).  An open-loop harness injects events ``[events_before(a),
        events_before(b))`` for the time interval ``[a, b)``."""
        if t <= self.base_time:
            return 0
        n = max(0, int((t - self.base_time) / self.delta))
        while n > 0 and self.ts(n - 1) >= t:
            n -= 1
        while self.ts(n) < t:
            n += 1
        return n

    def ts_array(self, n: np.ndarray) -> np.ndarray:
        """Vectorised :meth:`ts` (int64 in, int64 out)."""
        return self.base_time + np.trunc(n.astype(np.float64) * self.delta).astype(np.int64)


def event_kind(n: int) -> int:
    """``PERSON`` / ``AUCTION`` / ``BID`` for global event number ``n``."""
    r = n % PROPORTION_DENOMINATOR
    if r < PERSON_PROPORTION:
        return PERSON
    if r < PERSON_PROPORTION + AUCTION_PROPORTION:
        return AUCTION
    return BID


def _last_person(n: int) -> int:
    return n // PROPORTION_DENOMINATOR


def _last_auction(n: int) -> int:
    # For auctions r in 1..3 gives 3*(n//50) + r - 1; for bids 3*(n//50) + 2.
    r = n % PROPORTION_DENOMINATOR
    r = min(max(r, PERSON_PROPORTION), PERSON_PROPORTION + AUCTION_PROPORTION - 1)
    return AUCTION_PROPORTION * (n // PROPORTION_DENOMINATOR) + r - PERSON_PROPORTION


# ---------------------------------------------------------------------------------------------
# Records


class Person(NamedTuple):
    id: int
    name: str
    email_address: str
    credit_card: str
    city: str
    state: str
    date_time: int


class Auction(NamedTuple):
    id: int
    item_name: str
    description: str
    initial_bid: int
    reserve: int
    date_time: int
    expires: int
    seller: int
    category: int


class Bid(NamedTuple):
    auction: int
    bidder: int
    price: int
    date_time: int


Event = Person | Auction | Bid


# ---------------------------------------------------------------------------------------------
# PRNG (scalar)


class Pcg64Mcg:
    """PCG-64 MCG with XSL-RR output (rand 0.6.5 ``SmallRng`` on 64-bit targets).

    ``state`` is the 128-bit state; the constructor forces it odd (``| 1``) as seeding does.
    """

    __slots__ = ("state",)

    def __init__(self, state: int) -> None:
        self.state = (state & MASK128) | 1

    @classmethod
    def from_seed(cls, seed: bytes) -> Pcg64Mcg:
        if len(seed) != 16:
            raise ValueError("PCG-64 seeds are 16 bytes")
        return cls(int.from_bytes(seed, "little"))

    def next_u64(self) -> int:
        s = (self.state * PCG_MULTIPLIER) & MASK128
        self.state = s
        x = ((s >> 64) ^ s) & MASK64
        rot = s >> 122
        return ((x >> rot) | (x << (64 - rot))) & MASK64

    def next_u32(self) -> int:
        return self.next_u64() & 0xFFFFFFFF

    def gen_range(self, m: int) -> int:
        """``gen_range(0, m)`` with rand 0.6.5's conservative rejection zone (m >= 1)."""
        zone = ((m << (64 - m.bit_length())) - 1) & MASK64
        while True:
            p = self.next_u64() * m
            if (p & MASK64) <= zone:
                return p >> 64

    def gen_u24(self) -> int:
        """The 24 bits behind ``gen::<f32>()``: the value is ``u * 2**-24``."""
        return (self.next_u64() & 0xFFFFFFFF) >> 8

    def gen_f32(self) -> float:
        return self.gen_u24() * 2.0**-24

    def gen_price(self) -> int:
        return price_from_u24(self.gen_u24())


PCG_TEST_VECTOR = (0x63B4A3A813CE700A, 0x382954200617AB24, 0xA7FD85AE3FE950CE)


def pcg_selftest() -> None:
    """Check the PCG against rand_pcg's test vector (state 42, forced odd to 43)."""
    rng = Pcg64Mcg(42)
    got = tuple(rng.next_u64() for _ in PCG_TEST_VECTOR)
    if got != PCG_TEST_VECTOR:
        raise AssertionError(f"PCG-64 test vector mismatch: {[hex(g) for g in got]}")


# ---------------------------------------------------------------------------------------------
# Price (spec 1.6): round(10^(6x) * 100) in binary32, 10^y correctly rounded.

_F32 = struct.Struct("<f")


def _f32(x: float) -> float:
    """Round a double to binary32 (round to nearest even) and back."""
    return _F32.unpack(_F32.pack(x))[0]


def _pow10_f32_exact(y: float) -> float:
    """Correctly rounded binary32 value of 10**y, by high-precision decimal arithmetic."""
    with localcontext() as ctx:
        ctx.prec = 80
        val = Decimal(10) ** Decimal(y)
        e = math.frexp(float(val))[1]  # val in [2^(e-1), 2^e) (up to a boundary case below)
        ulp = Decimal(2) ** (e - 24)
        t = val / ulp
        fl = int(t)  # val > 0: floor
        frac = t - fl
        if frac > Decimal("0.5") or (frac == Decimal("0.5") and fl % 2 == 1):
            fl += 1
        return float(Decimal(fl) * ulp)


# Tolerance (in units of the binary32 ulp) around a rounding midpoint within which the double
# ``pow`` result is not trusted and the exact decimal path decides.
_MIDPOINT_TOL = 2.0**-22


def _pow10_f32(y: float) -> float:
    d = 10.0**y
    _, e = math.frexp(d)
    t = math.ldexp(d, 24 - e)  # d / ulp32(d)
    if abs(t - math.floor(t) - 0.5) < _MIDPOINT_TOL:
        return _pow10_f32_exact(y)
    return _f32(d)


def price_from_u24(u: int) -> int:
    """Megaphone's price for the 24-bit uniform ``u`` (``x = u * 2**-24``):
    ``floor(f32(f32(10**f32(6x)) * 100) + 0.5)``.  Range [100, 99_999_888]."""
    y = _f32(6.0 * (u * 2.0**-24))
    p = _pow10_f32(y)
    q = _f32(p * 100.0)
    return math.floor(q + 0.5)


def _near_midpoint(d: np.ndarray) -> np.ndarray:
    """Where the double ``d`` is too close to a binary32 rounding midpoint to trust."""
    _, e = np.frexp(d)
    t = np.ldexp(d, 24 - e)  # d / ulp32(d)
    t -= np.floor(t)
    t -= 0.5
    return np.abs(t, out=t) < _MIDPOINT_TOL


_PRICE_CHUNK = 1 << 18


def prices_from_u24(u: np.ndarray) -> np.ndarray:
    """Vectorised :func:`price_from_u24` (any integer array of values < 2**24 -> int64)."""
    u = np.asarray(u)
    out = np.empty(u.shape, dtype=np.int64)
    flat_u, flat_out = u.reshape(-1), out.reshape(-1)
    for c in range(0, flat_u.size, _PRICE_CHUNK):
        uc = flat_u[c : c + _PRICE_CHUNK]
        y = (uc * (6.0 * 2.0**-24)).astype(np.float32).astype(np.float64)
        d = np.power(10.0, y)
        suspicious = _near_midpoint(d)
        p = d.astype(np.float32).astype(np.float64)
        if suspicious.any():
            idx = np.flatnonzero(suspicious)
            p[idx] = [_pow10_f32_exact(float(v)) for v in y[idx]]
        p *= 100.0
        q = p.astype(np.float32).astype(np.float64)
        q += 0.5
        flat_out[c : c + _PRICE_CHUNK] = np.floor(q, out=q)
    return out


# ---------------------------------------------------------------------------------------------
# Scalar reference generator (spec 1.3 - 1.5)


class ScalarWorkerGenerator:
    """Worker ``worker``'s events, one at a time, exactly as the spec describes them.

    ``next_event()`` returns ``(n, record)`` for ``n = worker, worker + P, ...``.
    """

    def __init__(self, config: NexmarkConfig, worker: int) -> None:
        if not 0 <= worker < config.workers:
            raise ValueError(f"worker {worker} out of range 0..{config.workers - 1}")
        self.config = config
        self.worker = worker
        self.rng = Pcg64Mcg(config.seed_state)
        self.k = 0  # index of the next event among this worker's events

    @property
    def next_number(self) -> int:
        return self.worker + self.k * self.config.workers

    def _next_person(self, n: int) -> int:
        m = _last_person(n) + 1
        a = min(m, NUM_ACTIVE_PEOPLE)
        return m - a + self.rng.gen_range(a + PERSON_ID_LEAD)

    def _next_auction(self, n: int) -> int:
        hi = _last_auction(n)
        inflight = self.config.in_flight
        lo = 0 if hi < inflight else hi - inflight
        return lo + self.rng.gen_range(hi - lo + 1 + AUCTION_ID_LEAD)

    def next_event(self) -> tuple[int, Event]:
        n = self.next_number
        self.k += 1
        cfg = self.config
        rng = self.rng
        t = cfg.ts(n)
        kind = event_kind(n)
        if kind == PERSON:
            city = CITIES[rng.gen_range(len(CITIES))]
            state = STATES[rng.gen_range(len(STATES))]
            return n, Person(FIRST_PERSON_ID + _last_person(n), "", "", "", city, state, t)
        if kind == AUCTION:
            initial = rng.gen_price()
            if rng.gen_range(HOT_SELLER_RATIO) > 0:
                seller = (_last_person(n) // HOT_BATCH) * HOT_BATCH
            else:
                seller = self._next_person(n)
            reserve = initial + rng.gen_price()
            horizon = cfg.ts(n + cfg.auction_horizon_events) - t
            expires = t + 1 + rng.gen_range(max(2 * horizon, 1))
            category = FIRST_CATEGORY_ID + rng.gen_range(NUM_CATEGORIES)
            return n, Auction(
                FIRST_AUCTION_ID + _last_auction(n),
                "",
                "",
                initial,
                reserve,
                t,
                expires,
                FIRST_PERSON_ID + seller,
                category,
            )
        if rng.gen_range(HOT_AUCTION_RATIO) > 0:
            auction = (_last_auction(n) // HOT_BATCH) * HOT_BATCH
        else:
            auction = self._next_auction(n)
        if rng.gen_range(HOT_BIDDER_RATIO) > 0:
            bidder = (_last_person(n) // HOT_BATCH) * HOT_BATCH + 1
        else:
            bidder = self._next_person(n)
        price = rng.gen_price()
        return n, Bid(FIRST_AUCTION_ID + auction, FIRST_PERSON_ID + bidder, price, t)


def generate_scalar(config: NexmarkConfig, start: int, end: int) -> list[Event]:
    """Events ``start <= n < end`` (all workers interleaved, in event-number order), scalar path.

    Each worker's generator runs from its first event, so this costs O(end) work.
    """
    if not 0 <= start <= end:
        raise ValueError(f"bad event range [{start}, {end})")
    P = config.workers
    out: list[Event | None] = [None] * (end - start)
    for w in range(P):
        g = ScalarWorkerGenerator(config, w)
        while g.next_number < end:
            n, ev = g.next_event()
            if n >= start:
                out[n - start] = ev
    return out  # type: ignore[return-value]


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

_U64 = np.uint64
_M32 = _U64(0xFFFFFFFF)
_SEG_MAX = 1 << 20  # raw draws per segment
_MARGIN = 512  # an event is only started if at least this many draws remain in the segment


def _mulhi_vv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """High 64 bits of the 128-bit products of two uint64 arrays (or array and uint64)."""
    a1 = a >> _U64(32)
    a0 = a & _M32
    b1 = b >> _U64(32)
    b0 = b & _M32
    p00 = a0 * b0
    p01 = a0 * b1
    p10 = a1 * b0
    p11 = a1 * b1
    mid = (p00 >> _U64(32)) + (p01 & _M32) + (p10 & _M32)
    return p11 + (p01 >> _U64(32)) + (p10 >> _U64(32)) + (mid >> _U64(32))


def _mul128_vs(ah: np.ndarray, al: np.ndarray, b: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ah:al) * b mod 2**128`` for uint64 limb arrays and a Python int ``b``."""
    bh = _U64((b >> 64) & MASK64)
    bl = _U64(b & MASK64)
    lo = al * bl
    hi = _mulhi_vv(al, bl) + al * bh + ah * bl
    return hi, lo


class _PowTable:
    """``M**i mod 2**128`` for ``i < len``, as uint64 limb arrays (grown by doubling)."""

    def __init__(self) -> None:
        self.hi = np.zeros(1, dtype=np.uint64)
        self.lo = np.ones(1, dtype=np.uint64)
        self.lock = threading.Lock()

    def get(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        with self.lock:
            while len(self.lo) < n:
                k = len(self.lo)
                mk = pow(PCG_MULTIPLIER, k, 1 << 128)
                h, l = _mul128_vs(self.hi, self.lo, mk)
                self.hi = np.concatenate([self.hi, h])
                self.lo = np.concatenate([self.lo, l])
            return self.hi[:n], self.lo[:n]


_POW = _PowTable()


_RAW_CHUNK = 1 << 15


def raw_draws(seed_state: int, base: int, length: int, pad: int = 0) -> np.ndarray:
    """``next_u64`` outputs number ``base .. base + length - 1`` (0-based) of a PCG-64 MCG
    started at ``seed_state`` (already odd), as a uint64 array.

    Output ``base + i`` comes from the state ``s0 * M**i`` with ``s0 = seed * M**(base+1)``;
    the products use a cached table of ``M**i`` and are computed in cache-sized chunks with
    in-place numpy operations (the high half of the 128-bit product in 32-bit limbs)."""
    s0 = (seed_state * pow(PCG_MULTIPLIER, base + 1, 1 << 128)) & MASK128
    th, tl = _POW.get(length)
    sh, sl = _U64(s0 >> 64), _U64(s0 & MASK64)
    b0, b1 = _U64(s0 & 0xFFFFFFFF), _U64((s0 >> 32) & 0xFFFFFFFF)
    out = np.empty(length + pad, dtype=np.uint64)
    out[length:] = 0
    mul, add, rsh, band = np.multiply, np.add, np.right_shift, np.bitwise_and
    S32 = _U64(32)
    n = min(_RAW_CHUNK, length)
    bufs = [np.empty(n, dtype=np.uint64) for _ in range(8)]
    for c in range(0, length, _RAW_CHUNK):
        e = min(c + _RAW_CHUNK, length)
        a0, a1, p00, p01, p10, p11, t, lo = (b[: e - c] for b in bufs)
        tlc = tl[c:e]
        band(tlc, _M32, out=a0)
        rsh(tlc, S32, out=a1)
        mul(a0, b0, out=p00)
        mul(a0, b1, out=p01)
        mul(a1, b0, out=p10)
        mul(a1, b1, out=p11)
        rsh(p00, S32, out=p00)  # mid = (p00 >> 32) + (p01 & M32) + (p10 & M32)
        band(p01, _M32, out=t)
        add(p00, t, out=p00)
        band(p10, _M32, out=t)
        add(p00, t, out=p00)
        rsh(p00, S32, out=p00)
        rsh(p01, S32, out=p01)
        add(p11, p01, out=p11)
        rsh(p10, S32, out=p10)
        add(p11, p10, out=p11)
        add(p11, p00, out=p11)  # p11 = high half of tl * sl
        mul(tlc, sh, out=t)
        add(p11, t, out=p11)
        mul(th[c:e], sl, out=t)
        add(p11, t, out=p11)  # p11 = high 64 bits of the state
        mul(tlc, sl, out=lo)  # low 64 bits of the state
        np.bitwise_xor(p11, lo, out=lo)  # x = hi ^ lo
        rsh(p11, _U64(58), out=p11)  # rot = state >> 122
        o = out[c:e]
        rsh(lo, p11, out=o)
        np.subtract(_U64(64), p11, out=p11)
        band(p11, _U64(63), out=p11)
        np.left_shift(lo, p11, out=lo)
        np.bitwise_or(o, lo, out=o)  # rotate_right(x, rot)
    return out


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


# ---------------------------------------------------------------------------------------------
# Columnar batches


class PersonColumns(NamedTuple):
    """Persons, struct of arrays.  ``city`` / ``state`` are indices into CITIES / STATES;
    name, email_address and credit_card are always empty."""

    event_number: np.ndarray  # int64
    id: np.ndarray  # int64
    city: np.ndarray  # uint8, index into CITIES
    state: np.ndarray  # uint8, index into STATES
    date_time: np.ndarray  # int64 ns


class AuctionColumns(NamedTuple):
    """Auctions, struct of arrays (item_name and description are always empty)."""

    event_number: np.ndarray
    id: np.ndarray
    initial_bid: np.ndarray
    reserve: np.ndarray
    date_time: np.ndarray  # ns
    expires: np.ndarray  # ns
    seller: np.ndarray
    category: np.ndarray


class BidColumns(NamedTuple):
    """Bids, struct of arrays (all int64)."""

    event_number: np.ndarray
    auction: np.ndarray
    bidder: np.ndarray
    price: np.ndarray
    date_time: np.ndarray  # ns


def _empty(cls, dtypes=None):
    return cls(*[np.empty(0, dtype=(dtypes or {}).get(f, np.int64)) for f in cls._fields])


_PERSON_DTYPES = {"city": np.uint8, "state": np.uint8}


@dataclass
class EventBatch:
    """A columnar batch of events, sorted by event number.

    ``event_number``, ``kind`` (``PERSON``/``AUCTION``/``BID`` as int8) and ``date_time`` (int64
    ns) have one entry per event; ``persons``, ``auctions`` and ``bids`` hold the fields of the
    events of each kind (each sorted by event number, each with its own ``event_number``
    column to join back on).
    """

    event_number: np.ndarray
    kind: np.ndarray
    date_time: np.ndarray
    persons: PersonColumns
    auctions: AuctionColumns
    bids: BidColumns

    def __len__(self) -> int:
        return len(self.event_number)

    @classmethod
    def empty(cls) -> EventBatch:
        return cls(
            np.empty(0, np.int64),
            np.empty(0, np.int8),
            np.empty(0, np.int64),
            _empty(PersonColumns, _PERSON_DTYPES),
            _empty(AuctionColumns),
            _empty(BidColumns),
        )

    @classmethod
    def concat(cls, batches: Sequence[EventBatch]) -> EventBatch:
        """Concatenate batches and re-sort by event number (batches may interleave, e.g. one
        per worker)."""
        batches = [b for b in batches if len(b)]
        if not batches:
            return cls.empty()
        if len(batches) == 1:
            return batches[0]

        # Already in order (consecutive batches of one stream)?  Then no sort is needed.
        ordered = all(
            int(a.event_number[-1]) < int(b.event_number[0]) for a, b in itertools.pairwise(batches)
        )

        def cat(tables, tcls):
            cols = [np.concatenate([getattr(t, f) for t in tables]) for f in tcls._fields]
            if ordered:
                return tcls(*cols)
            order = np.argsort(cols[0], kind="stable")
            return tcls(*[c[order] for c in cols])

        en = np.concatenate([b.event_number for b in batches])
        order = slice(None) if ordered else np.argsort(en, kind="stable")
        return cls(
            en[order],
            np.concatenate([b.kind for b in batches])[order],
            np.concatenate([b.date_time for b in batches])[order],
            cat([b.persons for b in batches], PersonColumns),
            cat([b.auctions for b in batches], AuctionColumns),
            cat([b.bids for b in batches], BidColumns),
        )

    def to_records(self) -> list[Event]:
        """The events as ``Person`` / ``Auction`` / ``Bid`` named tuples, in event order."""
        out: list[Event | None] = [None] * len(self)
        pos = {int(n): i for i, n in enumerate(self.event_number.tolist())}
        p = self.persons
        for n, i, c, s, t in zip(*(col.tolist() for col in p)):
            out[pos[n]] = Person(i, "", "", "", CITIES[c], STATES[s], t)
        a = self.auctions
        for n, i, ib, rs, t, ex, se, ca in zip(*(col.tolist() for col in a)):
            out[pos[n]] = Auction(i, "", "", ib, rs, t, ex, se, ca)
        b = self.bids
        for n, au, bi, pr, t in zip(*(col.tolist() for col in b)):
            out[pos[n]] = Bid(au, bi, pr, t)
        return out  # type: ignore[return-value]


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
