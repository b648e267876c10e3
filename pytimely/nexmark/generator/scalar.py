"""The scalar reference generator: a clear per-event transcription of the NEXMark model on
Python integers (:class:`ScalarWorkerGenerator`, :func:`generate_scalar`).

Slow on purpose; the columnar fast path (:mod:`.columnar`) must agree with it value for value.
"""

from __future__ import annotations

from .model import (
    AUCTION,
    AUCTION_ID_LEAD,
    CITIES,
    FIRST_AUCTION_ID,
    FIRST_CATEGORY_ID,
    FIRST_PERSON_ID,
    HOT_AUCTION_RATIO,
    HOT_BATCH,
    HOT_BIDDER_RATIO,
    HOT_SELLER_RATIO,
    NUM_ACTIVE_PEOPLE,
    NUM_CATEGORIES,
    PERSON,
    PERSON_ID_LEAD,
    STATES,
    Auction,
    Bid,
    Event,
    NexmarkConfig,
    Person,
    _last_auction,
    _last_person,
    event_kind,
)
from .rng import Pcg64Mcg

# ---------------------------------------------------------------------------------------------
# Scalar reference generator

__all__ = [
    "generate_scalar",
    "ScalarWorkerGenerator",
]


class ScalarWorkerGenerator:
    """Worker ``worker``'s events, one at a time, exactly as Megaphone's generator makes them.

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
        """The event number :meth:`next_event` returns next (``worker + k * workers``)."""
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
        """This worker's next event as ``(event number, record)``."""
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
