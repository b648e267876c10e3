"""Parallelization contracts: how records on an edge reach the workers' operator instances.

* :class:`Pipeline` — stay on this worker; the batch is handed to the consumer as is.
* :class:`Exchange` — route each record by ``key(record)``: an integer key to worker
  ``key % peers`` (as in timely), any other key to ``stable_hash(key) % peers``.  On one worker
  it is the identity (the channel is still allocated, so channel ids agree).
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
from itertools import compress
from operator import not_
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
    float, tuples — by :func:`stable_hash`, identical in every process.  Without ``key`` the
    record itself is the key.  ``route=`` may instead give a function returning the routing
    integer directly.
    """

    def __init__(self, key: Callable[[Any], Any] | None = None, route: Callable | None = None):
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
    """Splits each batch by destination worker; remote parts go to the allocator.

    Routes of non-integer keys are memoized (hashing a ``str`` costs far more than a dict
    lookup, and key sets are usually much smaller than record counts); the memo is bounded.
    """

    __slots__ = ("worker", "channel", "local", "key", "route", "peers", "me", "_memo")

    _MEMO_LIMIT = 1 << 20

    def __init__(self, worker: Any, channel: int, local: Callable, key: Any, route: Any) -> None:
        self.worker = worker
        self.channel = channel
        self.local = local
        self.key = key
        self.route = route
        self.peers = worker.peers
        self.me = worker.index
        self._memo: dict[Any, int] = {}

    def _destinations(self, batch: Any) -> list[int]:
        peers = self.peers
        if self.route is not None:
            route = self.route
            return [route(x) % peers for x in batch]
        keys = batch if self.key is None else list(map(self.key, batch))
        memo = self._memo
        try:
            return list(map(memo.__getitem__, keys))
        except (KeyError, TypeError):
            pass
        if len(memo) > self._MEMO_LIMIT:
            memo.clear()
        h = stable_hash
        dests = []
        for k in keys:
            d = memo.get(k) if type(k) is not int else None
            if d is None:
                if type(k) is int:
                    d = k % peers
                else:
                    d = h(k) % peers
                    memo[k] = d
            dests.append(d)
        return dests

    def push(self, t: Any, batch: Any) -> None:
        peers = self.peers
        dests = self._destinations(batch)
        # One C-level selection pass per destination (itertools.compress) beats a Python loop
        # that appends record by record.
        if peers == 2:
            parts = [list(compress(batch, map(not_, dests))), list(compress(batch, dests))]
        else:
            parts = [list(compress(batch, map(w.__eq__, dests))) for w in range(peers)]
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
