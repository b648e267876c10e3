"""Parallelization contracts: how records on an edge reach the workers' operator instances.

* :class:`Pipeline` — stay on this worker; the batch is handed to the consumer as is.
* :class:`Exchange` — route each record to worker ``stable_hash(key(record)) % peers``.  On one
  worker it is the identity, but still goes through the exchange pusher (so single-worker tests
  exercise the same path).
* :class:`Broadcast` — every record to every worker.

A contract never changes how many records exist at a time *in total*: progress tracking counts
a batch of ``n`` records once at the consumer's input location (a location shared by all
workers), however the records are split.  (``Broadcast`` is the exception that proves the rule:
it multiplies records by ``peers`` and the edge is counted with that weight.)

Routing uses :func:`~pytimely.communication.hashing.stable_hash`, never Python's ``hash()`` of
``str``/``bytes`` (it differs between processes unless ``PYTHONHASHSEED`` is fixed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..communication.hashing import stable_hash

__all__ = ["Pipeline", "Exchange", "Broadcast", "Pact"]


class Pact:
    """Base class of parallelization contracts."""

    weight_per_peer = False  # Broadcast: the edge counts ``peers`` records per record sent

    def connect(self, worker: Any, push: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
        """Return the function the producer calls with ``(time, batch)``; ``push`` delivers to
        this worker's consumer."""
        raise NotImplementedError


class _Pipeline(Pact):
    def connect(self, worker: Any, push: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
        return push

    def __repr__(self) -> str:
        return "Pipeline"


Pipeline = _Pipeline()


class Exchange(Pact):
    """Route records by ``key(record)``: equal keys meet on the same worker.

    An integer key routes to worker ``key % peers`` (as in timely); any other key — str, bytes,
    float, tuples — by :func:`stable_hash`, identical in every process.  ``route=`` may instead
    give a function returning the routing integer directly.
    """

    def __init__(self, key: Callable[[Any], Any] | None = None, route: Callable | None = None):
        if key is None and route is None:
            raise TypeError("Exchange needs a key function (or route=)")
        self.key = key
        self.route = route

    def connect(self, worker: Any, push: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
        channel = worker._allocate_channel()
        peers = worker.peers
        if peers == 1:
            return push
        worker._register_data_channel(channel, push)
        return _ExchangePusher(worker, channel, push, self.key, self.route).push

    def __repr__(self) -> str:
        return "Exchange"


class _ExchangePusher:
    __slots__ = ("worker", "channel", "local", "key", "route", "peers", "me")

    def __init__(self, worker: Any, channel: int, local: Callable, key: Any, route: Any) -> None:
        self.worker = worker
        self.channel = channel
        self.local = local
        self.key = key
        self.route = route
        self.peers = worker.peers
        self.me = worker.index

    def push(self, t: Any, batch: Any) -> None:
        peers = self.peers
        parts: list[list[Any]] = [[] for _ in range(peers)]
        key = self.key
        if self.route is not None:
            route = self.route
            for x in batch:
                parts[route(x) % peers].append(x)
        else:
            h = stable_hash
            for x in batch:
                k = key(x)
                parts[(k if type(k) is int else h(k)) % peers].append(x)
        send = self.worker.allocator.send
        for w, part in enumerate(parts):
            if part:
                if w == self.me:
                    self.local(t, part)
                else:
                    send(self.channel, w, (t, part))


class _Broadcast(Pact):
    weight_per_peer = True

    def connect(self, worker: Any, push: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
        channel = worker._allocate_channel()
        if worker.peers == 1:
            return push
        worker._register_data_channel(channel, push)
        allocator = worker.allocator
        me = worker.index
        others = [w for w in range(worker.peers) if w != me]

        def broadcast(t: Any, batch: Any) -> None:
            for w in others:
                allocator.send(channel, w, (t, batch))
            push(t, batch)

        return broadcast

    def __repr__(self) -> str:
        return "Broadcast"


Broadcast = _Broadcast()
