"""Operators that wait for a time to complete: ``count``, ``accumulate``, ``aggregate``,
``delay`` and ``reclock``.

They share one idiom (Lattuada, McSherry, Liagouris, "Timestamp tokens", SoCC 2022, section 5):
stash state per time together with a capability retained from the first message at that time,
and when the input frontier no longer ``less_equal`` s the time — no more data at it can
arrive — emit the result with that capability and drop it.  They declare ``IF_CAPABILITY``
interest: while they hold nothing, time passing is none of their business.  Pending times are
released in the total order of times, so with partially ordered times results still appear in
an order consistent with the partial order.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from ...naming import operator_name
from ...order import less_equal
from ...progress.operate import FrontierInterest
from ..idioms import TimeStash
from ..pacts import Exchange, Pipeline
from .generic import binary_frontier, unary_frontier

if TYPE_CHECKING:
    from ..capability import Capability
    from ..operator import OperatorInfo
    from ..ports import Frontier, InputPort, OutputPort
    from ..stream import Stream

__all__ = ["accumulate", "count", "aggregate", "delay", "reclock", "release_ready"]

_IF_CAP = FrontierInterest.IF_CAPABILITY


def release_ready(pending: dict[Any, Any], frontier: Frontier) -> list[Any]:
    """Pop and return, in time order, the times in ``pending`` that are complete (not
    ``frontier.less_equal``)."""
    if not pending:
        return []
    ready = [t for t in pending if not frontier.less_equal(t)]
    ready.sort()
    return ready


def accumulate(
    stream: Stream,
    init: Callable[[], Any],
    fold: Callable[[Any, Any], Any],
    name: str | None = None,
) -> Stream:
    """Per time: ``acc = fold(acc, batch)`` from ``init()``; emit ``acc`` when the time
    completes.

    >>> import pytimely as pt
    >>> def build(s):
    ...     return s.to_stream([1, 2, 3]).accumulate(int, lambda a, b: a + sum(b)).capture()
    >>> pt.example(build).extract()
    [(0, [6])]
    """
    name = operator_name(name, "Accumulate", fold)

    def ctor(cap: Capability, info: OperatorInfo) -> Callable[..., None]:
        cap.drop()
        stash = TimeStash(init)

        def logic(inp: InputPort, out: OutputPort) -> None:
            for ref, batch in inp:
                stash.fold(ref, fold, batch)
            for held, acc in stash.ready(inp.frontier):
                out.give(held, acc)

        return logic

    return unary_frontier(stream, Pipeline, name, ctor, interest=_IF_CAP)


def count(stream: Stream, name: str = "Count") -> Stream:
    """Per time, the number of records (one record per non-empty time).

    >>> import pytimely as pt
    >>> pt.example(lambda s: s.to_stream("abc").count().capture()).extract()
    [(0, [3])]
    """
    return accumulate(stream, int, lambda acc, batch: acc + len(batch), name)


def aggregate(
    stream: Stream,
    fold: Callable[[Any, Any, Any], Any],
    emit: Callable[[Any, Any], Any],
    init: Callable[[], Any] = int,
    key: Callable[[Any], Any] | None = None,
    name: str | None = None,
) -> Stream:
    """Keyed per-time aggregation of ``(key, value)`` records.

    Records are exchanged by key; per time and key ``agg = fold(key, value, agg)`` from
    ``init()``; when the time completes each key emits ``emit(key, agg)``.

    >>> import pytimely as pt
    >>> def build(s):
    ...     pairs = s.to_stream([("a", 1), ("b", 2), ("a", 3)])
    ...     return pairs.aggregate(lambda k, v, acc: acc + v, lambda k, acc: (k, acc)).capture()
    >>> pt.example(build).extract()
    [(0, [('a', 4), ('b', 2)])]
    """
    name = operator_name(name, "Aggregate", fold)
    route = key or itemgetter(0)  # C: the exchange calls it once per record

    def ctor(cap: Capability, info: OperatorInfo) -> Callable[..., None]:
        cap.drop()
        stash: TimeStash[dict[Any, Any]] = TimeStash(dict)

        def logic(inp: InputPort, out: OutputPort) -> None:
            for ref, batch in inp:
                aggs = stash.at(ref)
                for k, v in batch:
                    aggs[k] = fold(k, v, aggs[k] if k in aggs else init())
            for held, aggs in stash.ready(inp.frontier):
                out.give_batch(held, [emit(k, a) for k, a in aggs.items()])

        return logic

    return unary_frontier(stream, Exchange(route), name, ctor, interest=_IF_CAP)


def delay(stream: Stream, f: Callable[[Any, Any], Any], name: str | None = None) -> Stream:
    """Move each record to the time ``f(record, time)`` (which must not be earlier), emitting
    it once that time is complete at the input.

    >>> import pytimely as pt
    >>> pt.example(lambda s: s.to_stream([1, 3]).delay(lambda x, t: t + x).capture()).extract()
    [(1, [1]), (3, [3])]
    """
    name = operator_name(name, "Delay", f)

    def ctor(cap: Capability, info: OperatorInfo) -> Callable[..., None]:
        cap.drop()
        stash: TimeStash[list[Any]] = TimeStash(list)

        def logic(inp: InputPort, out: OutputPort) -> None:
            for ref, batch in inp:
                for x in batch:
                    stash.at(ref, f(x, ref.time)).append(x)
            for held, records in stash.ready(inp.frontier):
                out.give_batch(held, records)

        return logic

    return unary_frontier(stream, Pipeline, name, ctor, interest=_IF_CAP)


def reclock(stream: Stream, clock: Stream, name: str = "Reclock") -> Stream:
    """Re-time ``stream`` to the times of ``clock``: each record is emitted at the first clock
    time at or after its own, once that clock time is complete on both inputs.

    >>> import pytimely as pt
    >>> def build(s):
    ...     data = s.to_stream(["x"]).delay(lambda r, t: 1)
    ...     ticks = s.to_stream([None]).delay(lambda r, t: 5)
    ...     return data.reclock(ticks).capture()
    >>> pt.example(build).extract()
    [(5, ['x'])]
    """

    def ctor(cap: Capability, info: OperatorInfo) -> Callable[..., None]:
        cap.drop()
        stash: dict[Any, list[Any]] = {}  # data time -> records (no token needed: the clock's
        ticks: dict[Any, Any] = {}  # clock time -> capability      tokens do the sending)

        def logic(data: InputPort, clk: InputPort, out: OutputPort) -> None:
            for t, batch in data.drain_batches():
                stash.setdefault(t, []).extend(batch)
            for ref, _batch in clk:
                if ref.time not in ticks:
                    ticks[ref.time] = ref.retain()
            for c in sorted(ticks):
                if clk.frontier.less_equal(c) or data.frontier.less_equal(c):
                    continue
                held = ticks.pop(c)
                records = []
                for t in sorted(t for t in stash if less_equal(t, c)):
                    records.extend(stash.pop(t))
                out.give_batch(held, records)
                held.drop()

        return logic

    return binary_frontier(stream, clock, Pipeline, Pipeline, name, ctor, interest=_IF_CAP)
