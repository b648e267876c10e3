"""NEXMark on Spark: events as Arrow / Spark rows and back, Spark-generated event tables, and
query results as Arrow batches for :func:`pytimely.spark.write_parquet`.

**The event table** (:data:`EVENT_SCHEMA`, :data:`EVENT_DDL`) has one row per event, the layout
of the Beam / Flink NEXMark tables: ``event_number``, ``kind`` (0 person, 1 auction, 2 bid),
``date_time`` (ns of event time) and one struct column per kind, null for the other kinds::

    person  struct<id, city, state>
    auction struct<id, initial_bid, reserve, expires, seller, category>
    bid     struct<auction, bidder, price>

(The string fields Megaphone's generator leaves empty -- names, e-mail, credit card, item name,
description -- are not stored; :func:`arrow_to_events` restores them as empty strings.)
:func:`events_to_arrow` / :func:`arrow_to_events` convert between this layout and the
generator's columnar :class:`~pytimely.nexmark.generator.EventBatch`, vectorized.

**Generation by Spark** (:func:`events_dataframe`): NEXMark's generator is ``P`` independent
sequential streams (worker ``w`` makes the events ``n = w (mod P)``, see
:mod:`~pytimely.nexmark.generator`), so Spark partition ``w`` of ``spark.range(P)`` runs stream
``w`` in ``mapInArrow``; together they are exactly ``generate(config, 0, events)``.

**Results**: :data:`RESULT_SCHEMAS` names the columns of every query's rows (the rows of
:mod:`~pytimely.nexmark.reference`); :func:`rows_to_arrow` turns a batch of rows into a
``RecordBatch`` of that schema; :func:`align_to_epochs` moves records to the next multiple of
an epoch length, so that :func:`~pytimely.spark.write_parquet` sees a few round epochs (its
``epoch`` column, and with ``per_epoch=True`` its files) even for queries whose timestamps are
arbitrary nanoseconds (Q4 and Q6 send at their held token).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .generator import (
    AUCTION,
    BID,
    CITIES,
    PERSON,
    STATES,
    AuctionColumns,
    BidColumns,
    EventBatch,
    NexmarkConfig,
    PersonColumns,
    WorkerStream,
)

__all__ = [
    "EVENT_DDL",
    "EVENT_SCHEMA",
    "RESULT_COLUMNS",
    "RESULT_SCHEMAS",
    "align_to_epochs",
    "arrow_to_events",
    "events_dataframe",
    "events_to_arrow",
    "generator_task",
    "result_rows",
    "rows_to_arrow",
]

_PERSON_FIELDS = (("id", "int64"), ("city", "string"), ("state", "string"))
_AUCTION_FIELDS = (
    ("id", "int64"),
    ("initial_bid", "int64"),
    ("reserve", "int64"),
    ("expires", "int64"),
    ("seller", "int64"),
    ("category", "int64"),
)
_BID_FIELDS = (("auction", "int64"), ("bidder", "int64"), ("price", "int64"))

#: The event table in Spark's DDL (for ``mapInArrow`` and readers).
EVENT_DDL = (
    "event_number bigint, kind tinyint, date_time bigint, "
    "person struct<id: bigint, city: string, state: string>, "
    "auction struct<id: bigint, initial_bid: bigint, reserve: bigint, expires: bigint, "
    "seller: bigint, category: bigint>, "
    "bid struct<auction: bigint, bidder: bigint, price: bigint>"
)


def _pa_type(name: str) -> Any:
    return {"int64": pa.int64(), "string": pa.string()}[name]


def _struct_type(fields: tuple[tuple[str, str], ...]) -> Any:
    return pa.struct([pa.field(n, _pa_type(t)) for n, t in fields])


#: The event table as a pyarrow schema.
EVENT_SCHEMA = pa.schema(
    [
        pa.field("event_number", pa.int64()),
        pa.field("kind", pa.int8()),
        pa.field("date_time", pa.int64()),
        pa.field("person", _struct_type(_PERSON_FIELDS)),
        pa.field("auction", _struct_type(_AUCTION_FIELDS)),
        pa.field("bid", _struct_type(_BID_FIELDS)),
    ]
)


# --- events: EventBatch <-> Arrow ----------------------------------------------------------------


def _struct(
    n: int, rows: np.ndarray, fields: tuple[tuple[str, str], ...], values: list[Any]
) -> Any:
    """A struct column of ``n`` rows, valid at ``rows`` (holding ``values``), null elsewhere."""
    children = []
    for (name, kind), vals in zip(fields, values, strict=True):
        if kind == "string":  # vals: a pyarrow string array of len(rows)
            idx = np.zeros(n, np.int64)
            idx[rows] = np.arange(len(rows))
            children.append(
                vals.take(pa.array(idx)) if len(rows) else pa.array([""] * n, pa.string())
            )  # all null (masked) anyway
        else:
            full = np.zeros(n, np.int64)
            full[rows] = vals
            children.append(pa.array(full, pa.int64()))
    mask = np.ones(n, dtype=bool)
    mask[rows] = False
    return pa.StructArray.from_arrays(
        children, fields=list(_struct_type(fields)), mask=pa.array(mask)
    )


def events_to_arrow(batch: EventBatch) -> Any:
    """An :class:`EventBatch` as a ``pyarrow.RecordBatch`` of :data:`EVENT_SCHEMA`."""
    n = len(batch)
    kind = batch.kind
    rows_p = np.flatnonzero(kind == PERSON)
    rows_a = np.flatnonzero(kind == AUCTION)
    rows_b = np.flatnonzero(kind == BID)
    p, a, b = batch.persons, batch.auctions, batch.bids
    if not (len(rows_p) == len(p.id) and len(rows_a) == len(a.id) and len(rows_b) == len(b.price)):
        raise ValueError("events_to_arrow: the kind column does not match the per-kind columns")
    cities = pa.array(CITIES, pa.string()).take(pa.array(p.city.astype(np.int64)))
    states = pa.array(STATES, pa.string()).take(pa.array(p.state.astype(np.int64)))
    columns = [
        pa.array(batch.event_number.astype(np.int64, copy=False), pa.int64()),
        pa.array(kind.astype(np.int8, copy=False), pa.int8()),
        pa.array(batch.date_time.astype(np.int64, copy=False), pa.int64()),
        _struct(n, rows_p, _PERSON_FIELDS, [p.id, cities, states]),
        _struct(
            n,
            rows_a,
            _AUCTION_FIELDS,
            [a.id, a.initial_bid, a.reserve, a.expires, a.seller, a.category],
        ),
        _struct(n, rows_b, _BID_FIELDS, [b.auction, b.bidder, b.price]),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=EVENT_SCHEMA)


def _ints(array: Any, what: str) -> np.ndarray:
    if array.null_count:
        raise ValueError(f"NEXMark event table: {what} has nulls where it must not")
    return np.asarray(array.to_numpy(zero_copy_only=False), dtype=np.int64)


def _codes(array: Any, names: tuple[str, ...], what: str) -> np.ndarray:
    codes = pc.index_in(array.cast(pa.string()), value_set=pa.array(names, pa.string()))
    if codes.null_count:
        raise ValueError(f"NEXMark event table: {what} has values outside {names}")
    return np.asarray(codes.to_numpy(zero_copy_only=False), dtype=np.uint8)


def _one_batch(data: Any) -> Any:
    if isinstance(data, pa.Table):
        batches = data.combine_chunks().to_batches()
        return batches[0] if batches else None  # one: every column is one chunk now
    return data


def arrow_to_events(data: Any) -> EventBatch:
    """Rows of the event table (a ``RecordBatch`` or ``Table`` with at least the columns of
    :data:`EVENT_SCHEMA`; more are ignored, any row order) as an :class:`EventBatch`, sorted by
    event number."""
    data = _one_batch(data)
    if data is None or data.num_rows == 0:
        return EventBatch.empty()
    en = _ints(data.column("event_number"), "event_number")
    if len(en) > 1 and bool(np.any(en[1:] < en[:-1])):
        order = np.argsort(en, kind="stable")
        data = data.take(pa.array(order))
        en = en[order]
    kind = _ints(data.column("kind"), "kind").astype(np.int8)
    if bool(np.any((kind < PERSON) | (kind > BID))):
        raise ValueError("NEXMark event table: kind must be 0 (person), 1 (auction) or 2 (bid)")
    dt = _ints(data.column("date_time"), "date_time")

    def part(column: str, k: int, event: str) -> tuple[np.ndarray, Any]:
        """The rows of kind ``k`` and their ``column`` struct, which none of them may lack
        (``event`` names such a row in the error: "a person event")."""
        rows = np.flatnonzero(kind == k)
        struct = data.column(column).take(pa.array(rows))
        if struct.null_count:
            raise ValueError(f"NEXMark event table: {event} has no {column}")
        return rows, struct

    def field(struct: Any, name: str) -> Any:
        return pc.struct_field(struct, name)

    rows, s = part("person", PERSON, "a person event")
    persons = PersonColumns(
        en[rows],
        _ints(field(s, "id"), "person.id"),
        _codes(field(s, "city"), CITIES, "person.city"),
        _codes(field(s, "state"), STATES, "person.state"),
        dt[rows],
    )
    rows, s = part("auction", AUCTION, "an auction event")
    auctions = AuctionColumns(
        en[rows],
        *[_ints(field(s, f), f"auction.{f}") for f in ("id", "initial_bid", "reserve")],
        dt[rows],
        *[_ints(field(s, f), f"auction.{f}") for f in ("expires", "seller", "category")],
    )
    rows, s = part("bid", BID, "a bid event")
    bids = BidColumns(
        en[rows],
        *[_ints(field(s, f), f"bid.{f}") for f in ("auction", "bidder", "price")],
        dt[rows],
    )
    return EventBatch(en, kind, dt, persons, auctions, bids)


# --- generation by Spark -------------------------------------------------------------------------


def generator_task(
    config: NexmarkConfig, events: int, chunk: int = 1 << 16
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """A ``mapInArrow`` function: for every generator index ``w`` in its input (one ``id``
    column), the events ``n < events`` of NEXMark worker stream ``w`` as Arrow batches of
    :data:`EVENT_SCHEMA` (about ``chunk`` events each)."""

    def task(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            for w in batch.column(0).to_pylist():
                stream = WorkerStream(config, int(w))
                while stream.next_number < events:
                    end = min(events, stream.next_number + chunk * config.workers)
                    part = stream.generate_until(end)
                    if len(part):
                        yield events_to_arrow(part)

    return task


def events_dataframe(spark: Any, config: NexmarkConfig, events: int, chunk: int = 1 << 16) -> Any:
    """A DataFrame of the NEXMark events ``0 <= n < events`` (:data:`EVENT_DDL`), generated by
    ``config.workers`` Spark tasks, task ``w`` running generator stream ``w``.  Its rows are
    exactly ``generate(config, 0, events)`` (in no particular order across partitions)."""
    p = config.workers
    return spark.range(0, p, 1, p).mapInArrow(generator_task(config, events, chunk), EVENT_DDL)


# --- results -------------------------------------------------------------------------------------

#: Columns of every query's rows (the reference's row layout, logical time first).
RESULT_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "q1": (("date_time", "int64"), ("auction", "int64"), ("bidder", "int64"), ("price", "int64")),
    "q2": (("date_time", "int64"), ("auction", "int64"), ("price", "int64")),
    "q3": (
        ("date_time", "int64"),
        ("name", "string"),
        ("city", "string"),
        ("state", "string"),
        ("auction", "int64"),
    ),
    "q4": (
        ("expires", "int64"),
        ("auction", "int64"),
        ("category", "int64"),
        ("avg_price", "int64"),
    ),
    "q5": (("window_end", "int64"), ("auction", "int64"), ("bids", "int64")),
    "q6": (("expires", "int64"), ("auction", "int64"), ("bidder", "int64"), ("avg_price", "int64")),
    "q7": (("window_end", "int64"), ("max_price", "int64")),
    "q8": (("date_time", "int64"), ("seller", "int64")),
}


def _result_schema(query: str) -> Any:
    return pa.schema([pa.field(n, _pa_type(t)) for n, t in RESULT_COLUMNS[query]])


#: ``RESULT_COLUMNS`` as pyarrow schemas.
RESULT_SCHEMAS: dict[str, Any] = {q: _result_schema(q) for q in RESULT_COLUMNS}


def rows_to_arrow(query: str) -> Callable[[Any], Any]:
    """``f(rows) -> RecordBatch``: a batch of ``query``'s result tuples as Arrow columns
    (for ``stream.map_batch(f)`` before :func:`~pytimely.spark.write_parquet`)."""
    schema = _result_schema(query)

    def convert(rows: Any) -> Any:
        rows = list(rows)
        if not rows:
            return pa.RecordBatch.from_pylist([], schema=schema)
        columns = list(zip(*rows, strict=True))
        return pa.RecordBatch.from_arrays(
            [pa.array(col, f.type) for col, f in zip(columns, schema, strict=True)], schema=schema
        )

    return convert


def result_rows(table: Any, query: str) -> list[tuple]:
    """The rows of an Arrow table of ``query``'s results (its :data:`RESULT_COLUMNS`; other
    columns such as ``epoch`` and ``worker`` are ignored) as tuples, sorted."""
    names = [n for n, _ in RESULT_COLUMNS[query]]
    if table is None or table.num_rows == 0:
        return []
    return sorted(zip(*(table.column(n).to_pylist() for n in names)))


def align_to_epochs(stream: Any, epoch: int, name: str = "AlignToEpochs") -> Any:
    """Every batch of ``stream`` (integer times) at the next multiple of ``epoch`` at or after
    its time: batches already at a multiple pass at once, the others wait (holding a token at
    the multiple) until their input frontier passes it."""
    from ..dataflow.operators.aggregation import release_ready
    from ..dataflow.operators.generic import unary_frontier
    from ..dataflow.pacts import Pipeline
    from ..progress.operate import FrontierInterest

    if epoch < 1:
        raise ValueError("align_to_epochs: epoch must be a positive integer")

    def ctor(cap: Any, info: Any) -> Any:
        cap.drop()
        pending: dict[int, list[Any]] = {}

        def logic(inp: Any, out: Any) -> None:
            for ref, batch in inp:
                t = ref.time
                e = -(-t // epoch) * epoch
                if e == t:
                    out.session(ref).give_batch(batch)
                    continue
                entry = pending.get(e)
                if entry is None:
                    entry = pending[e] = [ref.delayed(e), []]
                entry[1].append(batch)
            for e in release_ready(pending, inp.frontier):
                held, batches = pending.pop(e)
                for batch in batches:
                    out.give_batch(held, batch)
                held.drop()

        return logic

    return unary_frontier(stream, Pipeline, name, ctor, interest=FrontierInterest.IF_CAPABILITY)
