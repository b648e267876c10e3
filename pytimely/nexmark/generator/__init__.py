"""The canonical NEXMark event generator (Megaphone's, reproduced value for value).

It reproduces the generator of Megaphone (Hoffmann et al., "Megaphone: Latency-conscious state
migration for distributed streaming dataflows", PVLDB 12(9), 2019; the ``nexmark`` module of
https://github.com/strymon-system/megaphone), which follows the NEXMark benchmark (Tucker et al.,
"NEXMark - A Benchmark for Queries over Data Streams", 2008).  Summary of the model:

* Global event number ``n = 0, 1, 2, ...``.  ``kind(n)``: with ``r = n % 50``, ``r == 0`` is a
  Person, ``1 <= r <= 3`` an Auction, ``r >= 4`` a Bid (1 : 3 : 46).
* Event time ``ts(n) = base_time + trunc(float(n) * delta)`` **integer nanoseconds**, where
  ``delta = 1e9 / rate`` (an IEEE double) and ``rate`` is the total number of events per second
  over all generating workers.
* ``P`` generating workers; worker ``w`` generates the events ``n = w, w + P, w + 2P, ...`` in that
  order with its own PCG-64 (MCG, XSL-RR) generator.  **Every worker is seeded identically** with
  16 bytes of value ``P``, so event *contents* depend on ``P`` (ids, kinds and times do not).
* The number of PRNG draws per event is variable (rejection sampling in ``range``), so a worker's
  stream is inherently sequential: the contents of its k-th event depend on all its previous
  events.

The package is split along its seams: :mod:`.model` (constants, :class:`NexmarkConfig`, the
records and :class:`EventBatch`), :mod:`.rng` (the PCG-64 generator and prices), and two
implementations, which every name is re-exported from here:

``ScalarWorkerGenerator`` / ``generate_scalar``
    A clear per-event transcription of the model on Python integers (the reference path).

``WorkerStream`` / ``generate``
    The fast path.  The only inherently sequential part (where each event's draws start in the
    worker's raw PCG output stream) is computed by a tight loop over precomputed numpy tables;
    the PCG output stream itself, the rejection-sampling acceptance tables and every field value
    are computed with vectorised numpy (uint64 arithmetic, 128-bit products split in 32-bit
    limbs).  Results are columnar (:class:`EventBatch`).  Both paths are value-identical; the
    tests check it.

Time unit everywhere: integer nanoseconds (``date_time``, ``expires``).
"""

from __future__ import annotations

from . import columnar, model, rng, scalar
from .columnar import *  # noqa: F403
from .model import *  # noqa: F403
from .rng import *  # noqa: F403
from .scalar import *  # noqa: F403

__all__: list[str] = []
__all__ += model.__all__
__all__ += rng.__all__
__all__ += scalar.__all__
__all__ += columnar.__all__
