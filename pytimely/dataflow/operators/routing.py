"""Operators that move records between streams or workers without looking at time.

``exchange`` and ``broadcast`` re-partition across workers; ``concat``/``concatenate`` merge
streams; ``partition``, ``branch`` and ``ok_err`` split one.  All are woken by data only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import compress
from operator import not_
from typing import TYPE_CHECKING, Any

from ...errors import GraphError
from ...naming import describe_function, operator_name
from ...progress.operate import FrontierInterest
from ..pacts import Broadcast, Exchange, Pipeline
from .generic import OperatorBuilder, forward_batches

if TYPE_CHECKING:
    from ..capability import Capability
    from ..operator import OperatorInfo
    from ..ports import InputPort, OutputPort
    from ..scope import Scope
    from ..stream import Stream

__all__ = ["exchange", "broadcast", "concat", "concatenate", "partition", "branch", "ok_err"]


def exchange(
    stream: Stream,
    key: Callable[[Any], Any] | None = None,
    name: str | None = None,
    column: str | int | None = None,
) -> Stream:
    """Re-partition by ``key(record)`` (the record itself without ``key``; column ``column`` of
    Arrow or structured numpy batches); see :class:`~pytimely.Exchange` for how keys map to
    workers.

    >>> import pytimely as pt
    >>> pt.example(lambda s: s.to_stream(["b", "a"]).exchange(len).capture()).extract()
    [(0, ['a', 'b'])]
    """
    if name is None:
        name = "Exchange" if key is None else f"Exchange({describe_function(key)})"
    return forward_batches(stream, Exchange(key, column=column), name)


def broadcast(stream: Stream, name: str = "Broadcast") -> Stream:
    """Every record to every worker.

    >>> import pytimely as pt
    >>> pt.example(lambda s: s.to_stream([1, 2]).broadcast().capture()).extract()
    [(0, [1, 2])]
    """
    return forward_batches(stream, Broadcast, name)


def concatenate(scope: Scope, streams: Iterable[Stream], name: str = "Concatenate") -> Stream:
    """All records of all ``streams`` (of one scope) in one stream."""
    streams = list(streams)
    b = OperatorBuilder(name, scope)
    for s in streams:
        b.new_input(s, Pipeline, interest=FrontierInterest.NEVER)
    b.new_output()

    def ctor(caps: list[Capability], info: OperatorInfo) -> Callable[..., None]:
        caps[0].drop()

        def logic(*ports: Any) -> None:
            out = ports[-1]
            forward = out.forward  # legal: each message at its own time, identity summary
            for inp in ports[:-1]:
                for t, batch in inp.drain_batches():
                    forward(t, batch)

        return logic

    return b.build(ctor)[0]


def concat(stream: Stream, other: Stream, name: str = "Concat") -> Stream:
    """The records of both streams.

    >>> import pytimely as pt
    >>> pt.example(lambda s: s.to_stream([1]).concat(s.to_stream([2])).capture()).extract()
    [(0, [1, 2])]
    """
    return concatenate(stream.scope, [stream, other], name)


def partition(
    stream: Stream, parts: int, route: Callable[[Any], tuple[int, Any]], name: str | None = None
) -> list[Stream]:
    """``parts`` streams; ``route(record) -> (index, value)`` sends ``value`` to stream
    ``index``.

    >>> import pytimely as pt
    >>> def build(s):
    ...     parts = s.to_stream(range(5)).partition(2, lambda x: (x % 2, x))
    ...     return [p.capture() for p in parts]
    >>> [c.extract() for c in pt.example(build)]
    [[(0, [0, 2, 4])], [(0, [1, 3])]]
    """
    name = operator_name(name, "Partition", route)
    if parts < 1:
        raise GraphError("partition(): parts must be at least 1")
    b = OperatorBuilder(name, stream.scope)
    b.new_input(stream, Pipeline, interest=FrontierInterest.NEVER)
    for _ in range(parts):
        b.new_output()

    def ctor(caps: list[Capability], info: OperatorInfo) -> Callable[..., None]:
        for c in caps:
            c.drop()

        def logic(inp: InputPort, *outs: OutputPort) -> None:
            for t, batch in inp.drain_batches():
                buckets: list[list[Any]] = [[] for _ in range(parts)]
                for x in batch:
                    i, v = route(x)
                    buckets[i].append(v)
                for i, bucket in enumerate(buckets):
                    if bucket:
                        outs[i].forward(t, bucket)  # at the message's own time

        return logic

    return b.build(ctor)


def branch(
    stream: Stream, condition: Callable[[Any, Any], bool], name: str | None = None
) -> tuple[Stream, Stream]:
    """``(false_stream, true_stream)`` split by ``condition(time, record)``.

    >>> import pytimely as pt
    >>> def build(s):
    ...     small, big = s.to_stream(range(4)).branch(lambda t, x: x >= 2)
    ...     return small.capture(), big.capture()
    >>> [c.extract() for c in pt.example(build)]
    [[(0, [0, 1])], [(0, [2, 3])]]
    """
    name = operator_name(name, "Branch", condition)
    b = OperatorBuilder(name, stream.scope)
    b.new_input(stream, Pipeline, interest=FrontierInterest.NEVER)
    b.new_output()
    b.new_output()

    def ctor(caps: list[Capability], info: OperatorInfo) -> Callable[..., None]:
        for c in caps:
            c.drop()

        def logic(inp: InputPort, out_false: OutputPort, out_true: OutputPort) -> None:
            for t, batch in inp.drain_batches():
                flags = [bool(condition(t, x)) for x in batch]
                out_false.forward(t, list(compress(batch, map(not_, flags))))
                out_true.forward(t, list(compress(batch, flags)))

        return logic

    s = b.build(ctor)
    return s[0], s[1]


def ok_err(
    stream: Stream, logic: Callable[[Any], tuple[bool, Any]], name: str | None = None
) -> tuple[Stream, Stream]:
    """``(oks, errs)``: ``logic(record) -> (is_ok, value)`` decides where ``value`` goes.

    >>> import pytimely as pt
    >>> def build(s):
    ...     oks, errs = s.to_stream(["1", "x"]).ok_err(lambda r: (r.isdigit(), r))
    ...     return oks.capture(), errs.capture()
    >>> [c.extract() for c in pt.example(build)]
    [[(0, ['1'])], [(0, ['x'])]]
    """
    name = operator_name(name, "OkErr", logic)

    def route(x: Any) -> tuple[int, Any]:
        ok, value = logic(x)
        return (0 if ok else 1), value

    parts = partition(stream, 2, route, name)
    return parts[0], parts[1]
