"""Parallelization contracts: how records on an edge reach the workers' operator instances.

* :class:`Pipeline` — stay on this worker; the batch is handed to the consumer as is.
* :class:`Exchange` — route each record by ``key(record)`` under the one routing rule of
  :mod:`pytimely.dataflow.exchange.routing`: keys that compare equal meet on one worker, whatever
  their types.  On one worker nothing moves (the channel is still allocated, so channel ids
  agree), but keys are still checked, so an unroutable key fails on one worker as on many.
* :class:`Broadcast` — every record to every worker.

A contract never changes how many records exist at a time *in total*: progress tracking counts
a batch of ``n`` records once at the consumer's input location (a location shared by all
workers), however the records are split.  (``Broadcast`` is the exception that proves the rule:
it multiplies records by ``peers`` and the edge is counted with that weight.)

Routing never uses Python's ``hash()`` of ``str``/``bytes`` (it differs between processes unless
``PYTHONHASHSEED`` is fixed).

Records that cross workers are pickled.  One that cannot be pickled fails with a
:class:`~pytimely.errors.SerializationError` naming the exchange channel, the operator it feeds
and the record's type.  On one worker nothing is pickled; a *strict* worker
(``Worker(strict=True)``, or ``PYTIMELY_STRICT=1`` in the environment) round-trips the first
record of every batch of every Exchange through the codec, so the same mistake fails there too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import SerializationError

if TYPE_CHECKING:
    from .services import WorkerServices
from .exchange.pusher import (
    ExchangePusher,
    RouteFunction,
    Router,
    channel_name_of,
    checked_keys,
    unpicklable,
)

__all__ = ["Pipeline", "Exchange", "Broadcast", "Pact", "open_channel"]


def open_channel(worker: WorkerServices, push: Callable[[Any, Any], None]) -> int:
    """Allocate a data channel (on every worker alike, so identifiers agree) and, if there are
    other workers, deliver what they send on it to ``push``.  Returns the channel."""
    channel = worker.allocate_channel()
    if worker.peers > 1:
        worker.register_data_channel(channel, push)
    return channel


class Pact:
    """Base class of parallelization contracts."""

    weight_per_peer = False  # Broadcast: the edge counts ``peers`` records per record sent

    def connect(
        self, worker: WorkerServices, push: Callable[[Any, Any], None], consumer: str = "?"
    ) -> Callable[[Any, Any], None]:
        """Return the function the producer calls with ``(time, batch)``; ``push`` delivers to
        this worker's consumer, the operator named ``consumer`` (named in errors)."""
        raise NotImplementedError


class _Pipeline(Pact):
    def connect(
        self, worker: WorkerServices, push: Callable[[Any, Any], None], consumer: str = "?"
    ) -> Callable[[Any, Any], None]:
        return push

    def __repr__(self) -> str:
        return "Pipeline"


Pipeline = _Pipeline()


class Exchange(Pact):
    """Route records by ``key(record)``: equal keys meet on the same worker.

    The rule (one place: :mod:`pytimely.dataflow.exchange.routing`): a key that compares equal to
    an ``int`` — ``1``, ``1.0``, ``True``, ``np.int64(1)`` — goes to worker ``int(key) % peers``
    (as in timely); any other key — str, bytes, non-integral float, tuples — by
    :func:`~pytimely.dataflow.exchange.hashing.stable_hash`, identical in every process.  Without
    ``key`` the record itself is the key.  A key that cannot be routed (a ``list``, a ``dict``,
    an object without ``__stable_hash__``) raises a ``TypeError`` naming the operator.

    Batches may be lists of records, one-dimensional numpy arrays (routed vectorized: the
    elements, or field ``column`` of a structured array, are the keys), or Arrow arrays,
    ``RecordBatch``es and ``Table``s (rows by their ``column``); each row goes where the
    per-record rule sends its key.  ``route=`` may instead give a function returning the
    routing integer directly (``route(record) % peers``).
    """

    def __init__(
        self,
        key: Callable[[Any], Any] | None = None,
        route: Callable | None = None,
        column: str | int | None = None,
    ):
        self.key = key
        self.route = route
        self.column = column

    def connect(
        self, worker: WorkerServices, push: Callable[[Any, Any], None], consumer: str = "?"
    ) -> Callable[[Any, Any], None]:
        """See :meth:`Pact.connect`: each record goes to the worker its key picks.

        Opens this worker's end of the edge's channel; ``route`` replaces the key rule if given.
        """
        channel = open_channel(worker, push)
        return self.pusher(worker, channel, push, consumer)

    def pusher(
        self, worker: WorkerServices, channel: int, push: Callable[[Any, Any], None], consumer: str
    ) -> Callable[[Any, Any], None]:
        """The function that routes batches on ``channel`` (allocated, and registered to
        deliver to ``push`` if there are other workers) into operator ``consumer``."""
        if worker.peers == 1:
            channel_name = channel_name_of(channel, consumer)
            return checked_keys(
                self._router(worker, channel_name), push, channel_name, worker.strict
            )
        return self.exchange_pusher(worker, channel, push, consumer).push

    def exchange_pusher(
        self, worker: WorkerServices, channel: int, push: Callable[[Any, Any], None], consumer: str
    ) -> ExchangePusher:
        """On two or more workers, the object that routes ``channel``'s batches (its ``push``)
        and holds back the parts for other workers.  A pact that also sends on ``channel``
        itself calls its ``send_held()`` first, or what it sends could overtake held data."""
        channel_name = channel_name_of(channel, consumer)
        router = self._router(worker, channel_name)
        return ExchangePusher(worker, channel, push, router, channel_name, worker.strict)

    def _router(self, worker: WorkerServices, channel_name: str) -> Any:
        if self.route is not None:
            return RouteFunction(self.route, worker.peers)
        return Router(self.key, self.column, worker.peers, channel_name, worker.index)

    def __repr__(self) -> str:
        return "Exchange"


class _Broadcast(Pact):
    weight_per_peer = True

    def connect(
        self, worker: WorkerServices, push: Callable[[Any, Any], None], consumer: str = "?"
    ) -> Callable[[Any, Any], None]:
        channel = open_channel(worker, push)
        if worker.peers == 1:
            return push
        allocator = worker.allocator
        me = worker.index
        others = [w for w in range(worker.peers) if w != me]

        def broadcast(t: Any, batch: Any) -> None:
            for w in others:
                try:
                    allocator.send(channel, w, (t, batch))
                except SerializationError as e:
                    raise unpicklable(
                        f"broadcast channel {channel} into operator {consumer!r}", batch, e
                    ) from e
            push(t, batch)

        return broadcast

    def __repr__(self) -> str:
        return "Broadcast"


Broadcast = _Broadcast()
