"""Building blocks the NEXMark queries share: a per-batch map that holds no token, a query
built on watermarks, the minimum of an integer frontier, field getters."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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

__all__ = ["IF_CAP", "INF", "fmin", "on_watermarks", "per_batch", "first", "third"]

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
