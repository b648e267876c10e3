"""NEXMark: the canonical (Megaphone) event generator and batch reference queries.

Megaphone's NEXMark (https://github.com/strymon-system/megaphone; the benchmark itself is
Tucker et al., "NEXMark - A Benchmark for Queries over Data Streams").  ``generator`` produces
events (scalar reference path and a fast columnar numpy path); ``reference`` computes Q0..Q8
over a finite list of events.
All times are integer nanoseconds of event time.
"""

from .generator import (
    AUCTION,
    BID,
    CITIES,
    PERSON,
    STATES,
    Auction,
    AuctionColumns,
    Bid,
    BidColumns,
    EventBatch,
    NexmarkConfig,
    Person,
    PersonColumns,
    ScalarWorkerGenerator,
    WorkerStream,
    event_kind,
    generate,
    generate_scalar,
)

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
    "Person",
    "PersonColumns",
    "ScalarWorkerGenerator",
    "WorkerStream",
    "event_kind",
    "generate",
    "generate_scalar",
]
