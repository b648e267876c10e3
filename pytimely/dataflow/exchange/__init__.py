"""The exchange: how an ``Exchange`` edge sends each record to the worker that owns its key.

Three rooms, one rule:

* :mod:`.routing` -- **the routing rule**, the one place it is written: keys that compare equal
  go to the same worker in every process (an ``int`` to ``key % peers``, anything else by its
  canonical form's :func:`stable_hash`), for single keys (:func:`route`), numpy arrays
  (:func:`route_array`) and Arrow arrays (:func:`route_arrow`);
* :mod:`.hashing` -- :func:`stable_hash`, the process-independent hash the rule uses;
* :mod:`.pusher` -- the pusher an Exchange edge pushes into: it splits a batch by destination
  (routes memoized per key) and hands the other workers' parts to the allocator.

The parallelization contracts themselves (``Pipeline``, ``Exchange``, ``Broadcast``) are in
:mod:`pytimely.dataflow.pacts`; state snapshots and Spark's key-aligned partitioning route by
this same rule.

**The compiled twin.**  ``pytimely/_speedups.c`` computes the same routes for the commonest
keys (exact ASCII ``str`` and 64-bit ``int``: ``direct_route``, and ``RouteCache.split`` for a
whole batch).  It restates the rule of :mod:`.routing` and the hash of :mod:`.hashing`; a change
to either must be made in both, and ``tests/test_speedups.py`` and ``tests/test_routing.py``
compare the two paths key by key (the pure-Python path runs with ``PYTIMELY_PURE_PYTHON=1``).

>>> from pytimely.dataflow.exchange import route
>>> route(7, 4), route(7.0, 4), route("ann", 4) == route("ann", 4)
(3, 3, True)
"""

from __future__ import annotations

from .hashing import stable_hash, stable_hash_array
from .routing import UnroutableKey, route, route_array, route_arrow

__all__ = [
    "UnroutableKey",
    "route",
    "route_array",
    "route_arrow",
    "stable_hash",
    "stable_hash_array",
]
