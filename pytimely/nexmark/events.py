"""NEXMark events on dataflow streams: batch formats, per-kind extraction, and feeding.

A NEXMark *events stream* carries batches of events.  A batch is either

* an :class:`~pytimely.nexmark.generator.EventBatch` (columnar, what ``WorkerStream`` makes:
  the fast path; numpy columns are turned into Python tuples only where a query needs them), or
* a list of :class:`~pytimely.nexmark.generator.Person` / ``Auction`` / ``Bid`` records.

Extracted records are plain tuples with the field layout of those named tuples (so
``bid[0]`` is the auction, ``bid[2]`` the price, ``bid[3]`` the date_time; the named tuples
themselves pass unchanged), which is what the queries exchange between workers.

**Time.**  Every event is sent at a dataflow timestamp ``t <= date_time`` (its event time in
ns).  That is the only requirement the queries make; it guarantees that once the input frontier
is ``F`` every event with ``date_time < F`` has been sent, and that no event sent later has
``date_time < F``.  The recommended stamping is ``t = date_time // quantum * quantum`` (the
harness' 1 ms ticks: ``quantum = 10**6``; ``quantum = 1`` is exact event time).
:func:`time_batches` cuts a finite input that way.  With ``F`` a multiple of the quantum, the
frontier-``F`` state of every query equals ``reference.qN(events, frontier=F)``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

from .generator import CITIES, STATES, Auction, Bid, EventBatch, Person
from .generator.columnar import _slice

__all__ = [
    "auctions_of",
    "bid_columns",
    "bids_of",
    "event_rows",
    "persons_of",
    "split_events",
    "time_batches",
]

_KIND = {Person: 0, Auction: 1, Bid: 2}


def bids_of(batch: Any) -> list[tuple]:
    """The bids of a batch as ``(auction, bidder, price, date_time)`` tuples."""
    if type(batch) is EventBatch:
        b = batch.bids
        if not len(b.auction):
            return []
        return list(
            zip(b.auction.tolist(), b.bidder.tolist(), b.price.tolist(), b.date_time.tolist())
        )
    return [e for e in batch if type(e) is Bid]


def auctions_of(batch: Any) -> list[tuple]:
    """The auctions of a batch as ``Auction``-layout tuples (``id, item_name, description,
    initial_bid, reserve, date_time, expires, seller, category``)."""
    if type(batch) is EventBatch:
        a = batch.auctions
        if not len(a.id):
            return []
        return [
            (i, "", "", ib, rs, t, ex, se, ca)
            for i, ib, rs, t, ex, se, ca in zip(
                a.id.tolist(),
                a.initial_bid.tolist(),
                a.reserve.tolist(),
                a.date_time.tolist(),
                a.expires.tolist(),
                a.seller.tolist(),
                a.category.tolist(),
            )
        ]
    return [e for e in batch if type(e) is Auction]


def persons_of(batch: Any) -> list[tuple]:
    """The persons of a batch as ``Person``-layout tuples (``id, name, email_address,
    credit_card, city, state, date_time``)."""
    if type(batch) is EventBatch:
        p = batch.persons
        if not len(p.id):
            return []
        return [
            (i, "", "", "", CITIES[c], STATES[s], t)
            for i, c, s, t in zip(
                p.id.tolist(), p.city.tolist(), p.state.tolist(), p.date_time.tolist()
            )
        ]
    return [e for e in batch if type(e) is Person]


def split_events(batch: Any) -> tuple[list[tuple], list[tuple], list[tuple]]:
    """``(persons, auctions, bids)`` of a batch, in one pass for record lists."""
    if type(batch) is EventBatch:
        return persons_of(batch), auctions_of(batch), bids_of(batch)
    persons, auctions, bids = [], [], []
    for e in batch:
        k = type(e)
        if k is Bid:
            bids.append(e)
        elif k is Auction:
            auctions.append(e)
        else:
            persons.append(e)
    return persons, auctions, bids


def bid_columns(batch: Any) -> tuple[Any, Any]:
    """``(date_time, price)`` of the bids of a batch: int64 arrays for an ``EventBatch`` (no
    per-record work), lists otherwise."""
    if type(batch) is EventBatch:
        return batch.bids.date_time, batch.bids.price
    bids = [e for e in batch if type(e) is Bid]
    return [b[3] for b in bids], [b[2] for b in bids]


def event_rows(batch: Any) -> list[tuple]:
    """Q0 rows ``(date_time, kind, *record)`` of a batch (see ``reference.q0``)."""
    records = batch.to_records() if type(batch) is EventBatch else batch
    return [(e.date_time, _KIND[type(e)], *e) for e in records]


def time_batches(events: Any, quantum: int = 1) -> Iterator[tuple[int, Any]]:
    """Cut events (an ``EventBatch`` or a sequence of records in event order) into
    ``(t, batch)`` with ``t = date_time // quantum * quantum``, in increasing ``t``.

    An ``EventBatch`` is cut into ``EventBatch`` slices; a record sequence into lists.  Event
    times are non-decreasing in event order for one generating worker and for ``generate``;
    other inputs are grouped (stably) by ``t``.
    """
    if type(events) is EventBatch:
        if not len(events):
            return
        ts = events.date_time // quantum * quantum
        if len(ts) > 1 and bool(np.any(ts[1:] < ts[:-1])):
            order = np.argsort(ts, kind="stable")
            records = events.to_records()
            yield from time_batches([records[i] for i in order.tolist()], quantum)
            return
        cuts = np.flatnonzero(ts[1:] != ts[:-1]) + 1
        bounds = [0, *cuts.tolist(), len(ts)]
        for lo, hi in itertools.pairwise(bounds):
            yield int(ts[lo]), _slice(events, lo, hi)
        return
    groups: dict[int, list[Any]] = {}
    for e in events:
        groups.setdefault(e.date_time // quantum * quantum, []).append(e)
    for t in sorted(groups):
        yield t, groups[t]
