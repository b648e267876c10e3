"""The exchange's pusher: records of a batch split by destination worker and sent.

:class:`ExchangePusher` is what an :class:`~pytimely.dataflow.pacts.Exchange` edge pushes
into: it computes every record's destination with a router (the key function's routes under
the rule of :mod:`.routing`, memoized per key, or the user's ``route=`` function), keeps this
worker's share and hands the others to the allocator, counted once at the consumer (the
progress counts of a batch do not depend on where its records go).  The split of a list batch
runs in C when the extension is built (``RouteCache.split`` in ``pytimely/_speedups.c``), with
the same routes as the Python path here.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import compress, filterfalse
from operator import itemgetter, not_
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import _native
from ...communication.codec import encode as codec_encode
from ...communication.codec import encode_pair_of_lists, list_form
from ...communication.wire import deserialize, serialize
from ...errors import OperatorError, SerializationError
from .routing import (
    ALWAYS_ROUTABLE,
    UnroutableKey,
    route,
    route_array,
    route_arrow,
    route_strs,
)

if TYPE_CHECKING:
    from ..services import WorkerServices

__all__ = ["ExchangePusher", "Router", "RouteFunction"]


def channel_name_of(channel: int, consumer: str) -> str:
    return f"exchange channel {channel} into operator {consumer!r}"


class RouteFunction:
    """``route=``: the user's function gives the routing integer of each record."""

    def __init__(self, route: Callable[[Any], int], peers: int) -> None:
        self.route = route
        self.peers = peers

    def destinations(self, batch: Any) -> list[int]:
        """The destination worker of every record of ``batch``."""
        route, peers = self.route, self.peers
        return [route(x) % peers for x in batch]

    def split(self, batch: Any) -> list[Any]:
        """``batch`` split into one part per worker (see :func:`_split`)."""
        return _split(batch, self.destinations(batch), self.peers)

    def check(self, batch: Any, every_key: bool = False) -> None:
        """Nothing to check: the user's function gives routes, not keys."""


class Router:
    """Destinations of a batch's records under the routing rule, for one Exchange channel.

    Routes of ``int``, ``str``, ``bytes``, ``float`` and ``tuple`` keys are memoized: a batch
    whose keys are all known is routed by one dict lookup per record in a C loop (``map``),
    where routing each record in Python would cost several times more; key sets are usually
    much smaller than record counts, and the memo is bounded.  Why a memo keyed by value cannot
    give one key two routes: the route is a function of the canonical key and equal keys (which
    a dict treats as one key) have equal canonical keys, so whichever of ``1`` and ``1.0``,
    ``"a"`` and ``np.str_("a")`` or ``(1, "x")`` and ``(1.0, "x")`` was memoized first, the
    other's route is the same.
    """

    __slots__ = (
        "key",
        "column",
        "peers",
        "channel_name",
        "me",
        "_memo",
        "_routable",
        "_key_index",
        "_route_cache",
    )

    _MEMO_LIMIT = 1 << 20
    #: Key types memoized by value (exact types: a subclass may define its own equality).
    _MEMOIZABLE = frozenset({int, str, bytes, float, tuple})

    def __init__(
        self,
        key: Callable[[Any], Any] | None,
        column: str | int | None,
        peers: int,
        channel_name: str,
        me: int = -1,
    ) -> None:
        self.key = key
        self.column = column
        self.peers = peers
        self.channel_name = channel_name
        self.me = me  # this worker's index, if known (the split offers its keys to the decoder)
        self._memo: dict[Any, int] = {}
        self._routable = set(ALWAYS_ROUTABLE)  # key types checked by type alone
        # The key is the record itself (-1), field i of a tuple record (``itemgetter(i)``: the
        # compiled split reads it without calling the function), or computed in Python (None).
        self._key_index = -1 if key is None else _itemgetter_index(key)
        self._route_cache: Any = None  # the compiled split's cache of memo lookups, if used

    # -- splitting -------------------------------------------------------------------------

    def split(self, batch: Any) -> list[Any]:
        """``batch`` split into one part per worker, record order kept within each part.

        A list batch is split by the compiled extension in one C loop when it can route every
        key: exact ASCII ``str`` and 64-bit ``int`` keys by computing the routing rule itself
        (the hash of :mod:`~pytimely.dataflow.exchange.hashing`, a modulo), other keys through the
        memo (the same lookups as :meth:`destinations`, cached per key object, at most 65,536
        keys kept alive).  Any other batch, or one with a key the memo does not know yet,
        goes through :meth:`destinations` and :func:`_split`, which also memoize new keys.
        """
        speedups = _native.speedups
        if speedups is not None and type(batch) is list:
            if self._route_cache is None:
                self._route_cache = speedups.RouteCache()
            index = self._key_index
            keys = None if index is not None else self._keys(batch)
            parts = self._route_cache.split(
                batch, self._memo, self.peers, -1 if index is None else index, keys, self.me
            )
            if parts is not None:
                return parts
            if keys is not None:
                return _split(batch, self._list_destinations(keys), self.peers)
        return _split(batch, self.destinations(batch), self.peers)

    # -- destinations ----------------------------------------------------------------------

    def destinations(self, batch: Any) -> Any:
        """The worker of every record of ``batch``: a list for a list batch, an ``int64``
        numpy array for a columnar (numpy or Arrow) batch."""
        if isinstance(batch, np.ndarray):
            return self._array_destinations(batch)
        if _is_arrow(batch):
            return self._arrow_destinations(batch)
        keys = batch if self.key is None else self._keys(batch)
        return self._list_destinations(keys)

    def _keys(self, records: Any) -> list[Any]:
        """``key(r)`` of every record; a key function that raises is reported with the
        channel, the function and the record (the exchange runs inside the *upstream*
        operator, whose name alone would point the user at the wrong place)."""
        key = self.key
        try:
            return list(map(key, records))
        except OperatorError as exc:  # a key function that already names its operator and record
            raise OperatorError(f"{self.channel_name}: {exc}", operator=exc.operator) from exc
        except Exception as exc:
            for r in records:
                try:
                    key(r)
                except Exception:
                    break
            else:  # pragma: no cover - a key function that fails only the first time
                r = "?"
            name = getattr(key, "__qualname__", None) or repr(key)
            shown = repr(r)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            raise OperatorError(
                f"{self.channel_name}: key function {name} raised {type(exc).__name__}: {exc} "
                f"on record {shown}",
                operator=self.channel_name,
            ) from exc

    def _list_destinations(self, keys: Any) -> list[int]:
        """The route of every key: one memo lookup per key (a C loop) once the memo knows
        every key of the batch.  A batch with unknown keys first routes each *distinct*
        unknown key once (so the first batches of a stream, which miss, cost one route per
        new key, not one per record), then looks the whole batch up."""
        memo = self._memo
        try:
            return list(map(memo.__getitem__, keys))
        except (KeyError, TypeError):
            pass
        if len(memo) > self._MEMO_LIMIT:
            memo.clear()
        try:
            # (not ``keys() - memo.keys()``: that walks the whole memo)
            new = list(filterfalse(memo.__contains__, dict.fromkeys(keys)))
        except TypeError:  # an unhashable key (a tuple holding a list): route record by record
            return [self._route(k) for k in keys]
        memoizable = self._MEMOIZABLE
        words = [k for k in new if type(k) is str]
        memo.update(zip(words, route_strs(words, self.peers)))
        for k in new:
            if type(k) in memoizable and type(k) is not str:
                memo[k] = self._route(k)
        try:
            return list(map(memo.__getitem__, keys))
        except KeyError:  # keys of other types (numpy scalars, __stable_hash__ objects)
            pass
        dests = []
        for k in keys:
            d = memo.get(k)
            if d is None:
                d = self._route(k)
                if type(k) in memoizable:
                    memo[k] = d
            dests.append(d)
        return dests

    def _route(self, key: Any) -> int:
        try:
            return route(key, self.peers)
        except UnroutableKey as e:
            raise self._unroutable(key, e) from None

    def _array_destinations(self, batch: np.ndarray) -> np.ndarray:
        if self.key is not None:
            keys = self._keys(batch.tolist())
            return np.asarray(self._list_destinations(keys), dtype=np.int64)
        keys = batch if self.column is None else batch[self.column]
        try:
            return route_array(keys, self.peers)
        except UnroutableKey as e:
            raise self._unroutable(keys, e) from None

    def _arrow_destinations(self, batch: Any) -> np.ndarray:
        if hasattr(batch, "num_rows"):  # RecordBatch, Table
            if self.column is None:
                raise TypeError(
                    f"{self.channel_name}: an Arrow {type(batch).__name__} is routed by one of "
                    "its columns: name it with Exchange(column=...)"
                )
            keys = batch.column(self.column)
        else:
            keys = batch
        try:
            return route_arrow(keys, self.peers)
        except UnroutableKey as e:
            raise self._unroutable(keys, e) from None

    def _unroutable(self, key: Any, cause: Exception) -> UnroutableKey:
        shown = repr(key)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return UnroutableKey(
            f"{self.channel_name} cannot route the key {shown} of type "
            f"{type(key).__qualname__}: {cause}.  Pass a key function returning int/str/bytes/"
            "tuple (of these), e.g. Exchange(key=lambda r: tuple(r.ids)) or "
            "stream.exchange(key=...)"
        )

    # -- checks on one worker ---------------------------------------------------------------

    def check(self, batch: Any, every_key: bool = False) -> None:
        """Raise the ``TypeError`` that routing ``batch`` on many workers would raise.

        Cheap enough for every batch on one worker: without a key function the set of key
        types is compared with the types known to be routable (C loops only); with one, only
        the first record's key is checked, unless ``every_key`` (strict mode).  Columnar
        batches are checked by routing them.
        """
        # Lists first (the common case): the columnar tests cost more than the check itself.
        if type(batch) is not list and (isinstance(batch, np.ndarray) or _is_arrow(batch)):
            self.destinations(batch)
            return
        if self.key is None:
            keys = batch
        elif every_key:
            keys = self._keys(batch)
        else:
            if batch:  # the first key alone, without a list or a set, when its type is known
                try:
                    kind = type(self.key(batch[0]))
                except Exception:  # reported, with the record, by ``_keys`` below
                    kind = None
                if kind in self._routable:
                    return
            keys = self._keys(batch[:1])
        kinds = set(map(type, keys))
        if kinds <= self._routable:
            return
        self._list_destinations(keys)  # raises for an unroutable key
        # A tuple is routable only if its elements are: tuples are checked every time.
        self._routable.update(k for k in kinds if not issubclass(k, tuple))


def _itemgetter_index(key: Callable[[Any], Any]) -> int | None:
    """``i`` if ``key`` is exactly ``operator.itemgetter(i)`` with one non-negative int, else
    None."""
    if type(key) is not itemgetter:
        return None
    _cls, items = key.__reduce__()  # type: ignore[misc]
    if len(items) == 1 and type(items[0]) is int and items[0] >= 0:
        return items[0]
    return None


def _is_arrow(batch: Any) -> bool:
    return type(batch).__module__.startswith("pyarrow")


def checked_keys(
    router: Any, push: Callable[[Any, Any], None], channel_name: str, strict: bool
) -> Callable[[Any, Any], None]:
    """The push of an Exchange on one worker: nothing moves, but keys are checked (and, if
    ``strict``, the first record of every batch round-trips through the codec)."""
    check = router.check

    def checked_push(t: Any, batch: Any) -> None:
        check(batch, strict)
        if strict:
            _round_trip_one(batch, channel_name)
        push(t, batch)

    return checked_push


def _round_trip_one(batch: Any, channel_name: str) -> None:
    """Pickle and unpickle the first record of ``batch`` as if it crossed to another worker."""
    if not len(batch):
        return
    first = batch[:1] if isinstance(batch, np.ndarray) or _is_arrow(batch) else [batch[0]]
    try:
        data, buffers = serialize(first)
    except SerializationError as e:
        raise unpicklable(channel_name, first, e) from e
    deserialize(data, [bytearray(b) for b in buffers])


def unpicklable(where: str, part: Any, error: SerializationError) -> SerializationError:
    """The error for a batch that could not be pickled on channel ``where``: it names the
    channel, the consuming operator and the type of the first record that fails."""
    record_type = type(part).__name__
    if isinstance(part, list):
        for record in part:
            try:
                serialize(record)
            except SerializationError:
                record_type = type(record).__qualname__
                break
    cause = error.__cause__ if error.__cause__ is not None else error
    return SerializationError(
        f"{where}: cannot pickle a record of type {record_type} to send it to another worker "
        f"({type(cause).__name__}: {cause}).  Records that cross workers must be picklable: map "
        "them to plain data before the exchange.  PYTIMELY_STRICT=1 (or Worker(strict=True)) "
        "checks this on one worker too"
    )


class ExchangePusher:
    """Splits each batch by destination worker: the part for this worker goes downstream at
    once, the parts for other workers to the allocator.

    A list part for another worker is encoded at once (while its records are in cache) and
    held back; the held parts go as one message per destination, their encodings spliced
    (:func:`~pytimely.communication.codec.encode_pair_of_lists`), when the worker transmits
    (:meth:`WorkerServices.before_flush`: the end of the step, a progress batch, parking, an
    input checking for credit), when a part at another time comes, or when
    :data:`HOLD_BYTES` are held.  An operator that emits a thousand records per batch thus
    costs each destination one message per step, not one per batch: one frame, one decoding
    call, one delivery downstream.  Parts the records codec cannot carry (and every part
    without the compiled extension) are sent as they come, after what is held.

    Holding data back is safe for progress: its records were counted as produced when the
    upstream operator sent them, and stay counted until the receiving operator consumes them,
    so no frontier passes their time meanwhile.  FIFO per destination holds: held parts leave
    in order, before any later part.
    """

    __slots__ = (
        "worker",
        "channel",
        "local",
        "router",
        "channel_name",
        "strict",
        "peers",
        "me",
        "_held",
        "_held_records",
        "_held_time",
        "_held_time_data",
        "_held_bytes",
    )

    #: Encoded bytes held (all destinations together) that make the pusher send at once.
    HOLD_BYTES = 1 << 18

    def __init__(
        self,
        worker: WorkerServices,
        channel: int,
        local: Callable,
        router: Any,
        channel_name: str,
        strict: bool,
    ) -> None:
        self.worker = worker
        self.channel = channel
        self.local = local
        self.router = router
        self.channel_name = channel_name
        self.strict = strict
        self.peers = worker.peers
        self.me = worker.index
        self._held: list[list[bytes]] = [[] for _ in range(self.peers)]
        self._held_records = [0] * self.peers
        self._held_time: Any = None
        self._held_time_data: bytes | None = None  # encode(time), None while nothing is held
        self._held_bytes = 0

    def push(self, t: Any, batch: Any) -> None:
        """Route the message ``(t, batch)``: this worker's records to the consumer, the others'
        to the allocator (see the class docstring)."""
        if self.strict:  # the parts that stay here would not be pickled
            _round_trip_one(batch, self.channel_name)
        parts = self.router.split(batch)
        me = self.me
        for w, part in enumerate(parts):
            if not len(part):
                continue
            if w == me:
                self.local(t, part)
            else:
                self._hold(w, t, part)

    def _hold(self, w: int, t: Any, part: Any) -> None:
        data = codec_encode(part) if type(part) is list else None
        held = self._held[w]
        if self._held_time_data is not None and (
            data is None
            or t != self._held_time
            or (held and list_form(held[0]) != list_form(data))  # splices need one form
        ):
            self.send_held()
            held = self._held[w]
        if data is None:
            self._send(w, t, part)
            return
        if self._held_time_data is None:
            time_data = codec_encode(t)
            if time_data is None:  # a time the codec cannot carry: no holding
                self._send(w, t, part)
                return
            self._held_time, self._held_time_data = t, time_data
            self.worker.before_flush(self.send_held)
        held.append(data)
        self._held_records[w] += len(part)
        self._held_bytes += len(data)
        if self._held_bytes >= self.HOLD_BYTES:
            self.send_held()

    def send_held(self) -> None:
        """Send the parts held back, one message per destination."""
        time_data = self._held_time_data
        if time_data is None:
            return
        t = self._held_time
        held, records = self._held, self._held_records
        self._held = [[] for _ in range(self.peers)]
        self._held_records = [0] * self.peers
        self._held_time = self._held_time_data = None
        self._held_bytes = 0
        send = self.worker.allocator.send_serialized
        for w, chunks in enumerate(held):
            if chunks:
                data = encode_pair_of_lists(time_data, chunks)
                send(self.channel, w, data, (t, range(records[w])))

    def _send(self, w: int, t: Any, part: Any) -> None:
        try:
            self.worker.allocator.send(self.channel, w, (t, part))
        except SerializationError as e:
            raise unpicklable(self.channel_name, part, e) from e


def _split(batch: Any, dests: Any, peers: int) -> list[Any]:
    """``batch`` split into one part per worker, record order kept within each part."""
    if isinstance(dests, np.ndarray):
        if _is_arrow(batch):
            import pyarrow as pa

            return [batch.filter(pa.array(dests == w)) for w in range(peers)]
        return [batch[dests == w] for w in range(peers)]
    # One C-level selection pass per destination (itertools.compress) beats a Python loop
    # that appends record by record.
    if peers == 2:
        return [list(compress(batch, map(not_, dests))), list(compress(batch, dests))]
    return [list(compress(batch, map(w.__eq__, dests))) for w in range(peers)]
