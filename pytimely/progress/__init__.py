"""Progress tracking: the layer that knows about timestamps, counts and graphs — and nothing
about streams, operators' logic or data.

* :mod:`.change_batch` — consolidating ``(key, delta)`` collections;
* :mod:`.antichain` — ``Antichain`` and ``MutableAntichain`` (counts in, frontier changes out);
* :mod:`.reachability` — the graph ``Builder`` and the pointstamp ``Tracker``;
* :mod:`.subgraph` — a scope as an operator: schedules its children and moves progress;
* :mod:`.broadcast` — the exchange of a scope's progress batches between workers;
* :mod:`.operate` — what a scope needs from each child (the ``Operate`` protocol).

Everything here is internal machinery of the dataflow layer above it: user code meets
frontiers through ports and probes, never a ``Tracker`` or a ``Subgraph``.  The names exported
below are for tests, debugging and timely readers.
"""

from .antichain import Antichain, MutableAntichain
from .change_batch import ChangeBatch
from .reachability import Builder, Source, Target, Tracker

__all__ = [
    "Antichain",
    "MutableAntichain",
    "ChangeBatch",
    "Builder",
    "Tracker",
    "Source",
    "Target",
]
