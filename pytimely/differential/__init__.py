"""Differential dataflow on pytimely: collections that change, computed incrementally.

After Frank McSherry's differential dataflow (McSherry, Murray, Isaacs, Isard, "Differential
dataflow", CIDR 2013; the Rust crate ``differential-dataflow``), written as a library on
pytimely's public operator API.  A :class:`Collection` is a stream of updates
``(data, time, diff)``; operators transform the changes of their inputs into the changes of
their outputs, so that after any change to the inputs the outputs are again exactly what a
computation from scratch would give -- at every time, including the partially ordered times
of iterations.

* :mod:`.collection` -- the collection and its stateless operators;
* :mod:`.input` -- ``new_input(scope)``: an input session of updates;
* :mod:`.results` -- captured updates and the collection "as of" a time;
* :mod:`.lattice` -- join, meet and ``advance_by`` of timestamps;
* :mod:`.trace` -- batches, the merging spine, shared traces and their handles;
* :mod:`.arrange` -- arrangements (indexed, shared, compacted) and importing them;
* :mod:`.join`, :mod:`.reduce` -- the operators on arrangements (``count``, ``distinct``,
  ``threshold``, ``min``, ``max`` are reduces inside loops);
* :mod:`.total` -- ``count``, ``distinct`` and ``threshold`` over ``int`` times: a running
  count per record, no arrangement;
* :mod:`.iterate` -- ``iterate`` and ``Variable``, in iterative scopes.

>>> import pytimely as pt
>>> import pytimely.differential as dd
>>> def build(scope):
...     session, edges = dd.new_input(scope)
...     degrees = edges.map(lambda e: e[0]).count().capture()
...     session.insert((1, 2)); session.insert((1, 3)); session.advance_to(1)
...     session.remove((1, 3)); session.close()
...     return degrees
>>> degrees = pt.example(build)
>>> degrees.as_of(0), degrees.as_of(1)
([((1, 2), 1)], [((1, 1), 1)])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .arrange import Arrangement
from .collection import Collection
from .input import InputSession, new_input
from .iterate import Variable, iterate
from .results import Captured, as_of, consolidate_updates
from .trace import Batch, Trace, TraceHandle

__all__ = [
    "Arrangement",
    "Batch",
    "Captured",
    "Collection",
    "InputSession",
    "Trace",
    "TraceHandle",
    "Variable",
    "as_of",
    "consolidate_updates",
    "example",
    "iterate",
    "new_input",
]


def example(records: Iterable[Any], build: Callable[[Collection], Collection]) -> list:
    """Run ``build`` on a collection of ``records`` (all at time 0) on one worker and return
    the resulting collection once complete: sorted ``(record, count)`` pairs.

    >>> example(["a", "b", "a"], lambda c: c.distinct())
    [('a', 1), ('b', 1)]
    """
    from ..execute import example as run_example

    def dataflow(scope: Any) -> Any:
        session, collection = new_input(scope)
        captured = build(collection).capture()
        for record in records:
            session.insert(record)
        session.close()
        return captured

    captured = run_example(dataflow)
    acc: dict[Any, int] = {}
    for d, _t, r in captured.raw:
        acc[d] = acc.get(d, 0) + r
    return sorted((d, c) for d, c in acc.items() if c)
