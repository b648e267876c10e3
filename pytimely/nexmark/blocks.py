"""Building blocks the NEXMark queries share: a per-batch map that holds no token, a query
built on watermarks, the choice of a query's idiom, the minimum of an integer frontier, field
getters."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

from ..dataflow.operators.generic import (
    unary,
)
from ..dataflow.operators.watermarks import (
    WatermarkProbe,
    WatermarkStats,
    WStream,
    assign_watermarks,
)
from ..dataflow.pacts import Pipeline
from ..progress.operate import FrontierInterest

__all__ = [
    "IF_CAP",
    "INF",
    "IdiomOptions",
    "by_idiom",
    "fmin",
    "on_watermarks",
    "per_batch",
    "first",
    "third",
]

IF_CAP = FrontierInterest.IF_CAPABILITY
INF = float("inf")


def fmin(frontier: Any) -> Any:
    """The minimum of an integer frontier (``inf`` once it is empty)."""
    els = frontier.elements()
    return els[0] if els else INF


def on_watermarks(
    events: Any,
    query: str,
    build: Callable[[WStream], WStream],
    stats: WatermarkStats | None,
    probe: WatermarkProbe | None,
) -> Any:
    """``build`` applied to ``events`` with watermarks assigned: its data stream, and the
    watermarks it emits observed by ``probe`` (on all workers) if one is given."""
    out = build(assign_watermarks(events, f"{query} Source", stats=stats))
    if probe is not None:
        out.probe(all_workers=True, handle=probe)
    return out.data(f"{query} Output")


class IdiomOptions(TypedDict, total=False):
    """The keyword options of the queries written in several idioms (Q4, Q7).

    ``notify_per_call``: with notifications, deliver at most this many per invocation (``1`` is
    Naiad's scheduling).  ``watermark_stats`` / ``watermark_probe``: with watermarks, a
    :class:`WatermarkStats` to count markers into and a :class:`WatermarkProbe` attached to the
    result.
    """

    notify_per_call: int | None
    watermark_stats: WatermarkStats | None
    watermark_probe: WatermarkProbe | None


def by_idiom(
    query: str,
    events: Any,
    idiom: str,
    options: IdiomOptions,
    tokens: Callable[[], Any],
    notifications: Callable[[int | None], Any],
    watermarks: Callable[[WStream], WStream],
    library: Callable[[], Any] | None = None,
) -> Any:
    """Query ``query`` (``"q4"``) in the idiom ``idiom`` names: ``tokens()``,
    ``notifications(notify_per_call)``, ``watermarks`` built on ``events`` with watermarks
    assigned (:func:`on_watermarks`, with the options' stats and probe), or ``library()``
    where the query has one.  An option :class:`IdiomOptions` does not name is a TypeError, an
    idiom the query lacks a ValueError."""
    unknown = sorted(options.keys() - IdiomOptions.__optional_keys__)
    if unknown:
        raise TypeError(f"{query}() got unexpected keyword arguments: {', '.join(unknown)}")
    if idiom == "tokens":
        return tokens()
    if idiom == "notifications":
        return notifications(options.get("notify_per_call"))
    if idiom == "watermarks":
        stats, probe = options.get("watermark_stats"), options.get("watermark_probe")
        return on_watermarks(events, query.upper(), watermarks, stats, probe)
    if idiom == "library" and library is not None:
        return library()
    raise ValueError(f"{query}: unknown idiom {idiom!r}")


def per_batch(stream: Any, name: str, fn: Callable[[Any], Any], pact: Any = Pipeline) -> Any:
    """``fn(batch) -> records`` for every batch, sent at the batch's time (no tokens held)."""

    def ctor(cap: Any, info: Any) -> Any:
        cap.drop()

        def logic(inp: Any, out: Any) -> None:
            for ref, batch in inp:
                res = fn(batch)
                if len(res):
                    out.session(ref).give_batch(res)

        return logic

    return unary(stream, pact, name, ctor)


def first(r: Any) -> Any:
    """``r[0]`` (a named function: pickles and shows in errors)."""
    return r[0]


def third(r: Any) -> Any:
    """``r[2]``."""
    return r[2]
