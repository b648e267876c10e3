"""The NEXMark model: the generator's constants, :class:`NexmarkConfig`, the records and
their columnar form :class:`EventBatch`.

Constants are those of Megaphone's generator (the ``nexmark`` module of
https://github.com/strymon-system/megaphone); only the rate, the number of workers, the
in-flight auctions and the base time are parameters.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

# ---------------------------------------------------------------------------------------------
# Constants of Megaphone's generator.  These are fixed; only rate, workers,
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

__all__ = [
    "AUCTION",
    "Auction",
    "AUCTION_ID_LEAD",
    "AUCTION_PROPORTION",
    "AuctionColumns",
    "BID",
    "Bid",
    "BidColumns",
    "CITIES",
    "Event",
    "event_kind",
    "EventBatch",
    "FIRST_AUCTION_ID",
    "FIRST_CATEGORY_ID",
    "FIRST_PERSON_ID",
    "HARNESS_IN_FLIGHT_PER_RATE",
    "HOT_AUCTION_RATIO",
    "HOT_BATCH",
    "HOT_BIDDER_RATIO",
    "HOT_SELLER_RATIO",
    "NexmarkConfig",
    "NUM_ACTIVE_PEOPLE",
    "NUM_CATEGORIES",
    "PERSON",
    "Person",
    "PERSON_ID_LEAD",
    "PERSON_PROPORTION",
    "PersonColumns",
    "PROPORTION_DENOMINATOR",
    "STATES",
]


# ---------------------------------------------------------------------------------------------
# Configuration


@dataclass(frozen=True)
class NexmarkConfig:
    """Generator parameters (those of Megaphone's generator).

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
    """A new person (NEXMark's Person event); ``date_time`` in ns.

    Name, email address and credit card are always empty, as in Megaphone's generator.
    """

    id: int
    name: str
    email_address: str
    credit_card: str
    city: str
    state: str
    date_time: int


class Auction(NamedTuple):
    """A new auction (NEXMark's Auction event); times in ns.

    Item name and description are always empty, as in Megaphone's generator.
    """

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
    """A bid of ``price`` on ``auction`` by person ``bidder`` at ``date_time`` (ns)."""

    auction: int
    bidder: int
    price: int
    date_time: int


Event = Person | Auction | Bid


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
        """A batch of no events, every column empty with its dtype."""
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
