"""Record-at-a-time operators: ``map``, ``flat_map``, ``filter``, ``inspect`` and friends.

All are ``unary`` operators on a ``Pipeline`` that drop their initial capability at once and are
never woken by frontier changes.  Each processes a whole batch per step with a list
comprehension, and forwards the message's time with the batch (the identity summary makes the
message's own capability valid on the output, so no token is retained).
"""

from __future__ import annotations

from builtins import map as _map_each  # this module's ``map`` is the operator
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ...naming import operator_name
from ..pacts import Pipeline
from .generic import BatchTransform, forward_batches, sink

if TYPE_CHECKING:
    from ..ports import InputPort
    from ..stream import Stream

__all__ = ["map", "flat_map", "filter", "inspect", "inspect_batch", "inspect_time", "map_batch"]


def _stateless(
    stream: Stream, name: str, transform: Callable[[Any], Any] | BatchTransform
) -> Stream:
    """``transform(batch) -> batch`` applied to every batch, keeping its time."""
    return forward_batches(stream, Pipeline, name, transform)


class _MapRecords(BatchTransform):
    """``[f(x) for x in batch]``."""

    __slots__ = ("_f",)
    inline = True  # as many records out as in

    def __init__(self, f: Callable[[Any], Any]) -> None:
        self._f = f

    def apply(self, batch: Any) -> list[Any]:
        return list(_map_each(self._f, batch))


class _FilterRecords(BatchTransform):
    """``[x for x in batch if predicate(x)]``."""

    __slots__ = ("_predicate",)

    def __init__(self, predicate: Callable[[Any], bool]) -> None:
        self._predicate = predicate

    def apply(self, batch: Any) -> list[Any]:
        predicate = self._predicate
        return [x for x in batch if predicate(x)]


def map(stream: Stream, f: Callable[[Any], Any], name: str | None = None) -> Stream:
    """``f(record)`` for every record.

    >>> import pytimely as pt
    >>> pt.example(lambda s: s.to_stream(range(4)).map(lambda x: x * 10).capture()).extract()
    [(0, [0, 10, 20, 30])]
    """
    name = operator_name(name, "Map", f)
    return _stateless(stream, name, _MapRecords(f))


def map_batch(stream: Stream, f: Callable[[Any], Any], name: str | None = None) -> Stream:
    """``f(batch) -> batch`` for every batch (vectorized transforms of numpy/Arrow batches).

    >>> import pytimely as pt
    >>> pt.example(lambda s: s.to_stream([3, 1, 2]).map_batch(sorted).capture()).extract()
    [(0, [1, 2, 3])]
    """
    name = operator_name(name, "MapBatch", f)
    return _stateless(stream, name, f)


def flat_map(stream: Stream, f: Callable[[Any], Iterable[Any]], name: str | None = None) -> Stream:
    """Every record of ``f(record)`` for every record.

    >>> import pytimely as pt
    >>> pt.example(lambda s: s.to_stream(["a b", "c"]).flat_map(str.split).capture()).extract()
    [(0, ['a', 'b', 'c'])]
    """
    name = operator_name(name, "FlatMap", f)
    return _stateless(stream, name, lambda batch: [y for x in batch for y in f(x)])


def filter(stream: Stream, predicate: Callable[[Any], bool], name: str | None = None) -> Stream:
    """The records for which ``predicate`` is true.

    >>> import pytimely as pt
    >>> pt.example(lambda s: s.to_stream(range(6)).filter(lambda x: x % 2).capture()).extract()
    [(0, [1, 3, 5])]
    """
    name = operator_name(name, "Filter", predicate)
    return _stateless(stream, name, _FilterRecords(predicate))


def inspect(stream: Stream, f: Callable[[Any], Any], name: str | None = None) -> Stream:
    """Call ``f(record)`` on every record; pass the stream through unchanged.

    >>> import pytimely as pt
    >>> _ = pt.example(lambda s: s.to_stream(["hi"]).inspect(print))
    hi
    """
    name = operator_name(name, "Inspect", f)

    def look(_t: Any, batch: Any) -> None:
        for x in batch:
            f(x)

    return forward_batches(stream, Pipeline, name, inspect=look)


def inspect_time(stream: Stream, f: Callable[[Any, Any], Any], name: str | None = None) -> Stream:
    """Call ``f(time, record)`` on every record; pass the stream through.

    >>> import pytimely as pt
    >>> _ = pt.example(lambda s: s.to_stream(["hi"]).inspect_time(print))
    0 hi
    """
    name = operator_name(name, "InspectTime", f)

    def look(t: Any, batch: Any) -> None:
        for x in batch:
            f(t, x)

    return forward_batches(stream, Pipeline, name, inspect=look)


def inspect_batch(stream: Stream, f: Callable[[Any, Any], Any], name: str | None = None) -> Stream:
    """Call ``f(time, batch)`` on every batch; pass the stream through.

    >>> import pytimely as pt
    >>> _ = pt.example(lambda s: s.to_stream([1, 2]).inspect_batch(print))
    0 [1, 2]
    """
    name = operator_name(name, "InspectBatch", f)
    return forward_batches(stream, Pipeline, name, inspect=f)


def for_each(stream: Stream, f: Callable[[Any, Any], Any], name: str | None = None) -> None:
    """End the stream in a sink calling ``f(time, batch)`` for every batch (woken by data
    only).

    >>> import pytimely as pt
    >>> _ = pt.example(lambda s: s.to_stream([1, 2]).for_each(print))
    0 [1, 2]
    """
    name = operator_name(name, "ForEach", f)
    from ...progress.operate import FrontierInterest

    def logic(inp: InputPort) -> None:
        for t, batch in inp.drain_batches():
            f(t, batch)

    sink(stream, Pipeline, name, logic, interest=FrontierInterest.NEVER)
