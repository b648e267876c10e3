"""Probes: watching a stream's frontier from outside the dataflow.

A :class:`ProbeHandle` mirrors the frontier of every stream probed with it (the union of their
frontiers: a time is "not done" if it may still appear on any of them).  Before the probe
operator first runs, the handle conservatively holds the minimum time, so ``less_than(t)`` is
true for any later ``t`` until the dataflow has actually reported progress.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...progress.antichain import Antichain, MutableAntichain, frontier_changes
from ...progress.operate import FrontierInterest
from ..inline import inline_depth_after
from ..pacts import Pipeline
from ..ports import InputPort
from .generic import OperatorBuilder, sink

if TYPE_CHECKING:
    from ..operator import OperatorCore
    from ..stream import Stream

__all__ = ["ProbeHandle", "probe", "probe_with"]


class ProbeHandle:
    """The frontier of the probed stream(s): which times may still appear there."""

    __slots__ = ("_frontier",)

    def __init__(self) -> None:
        self._frontier = MutableAntichain()

    def less_than(self, t: Any) -> bool:
        """Some time strictly before ``t`` may still appear (``t``'s predecessors not done)."""
        return self._frontier.less_than(t)

    def less_equal(self, t: Any) -> bool:
        """``t`` itself (or something before it) may still appear."""
        return self._frontier.less_equal(t)

    def done(self) -> bool:
        """Nothing more can ever appear."""
        return self._frontier.is_empty()

    @property
    def frontier(self) -> Antichain:
        """A copy of the probed stream's current frontier: the times that may still appear."""
        return self._frontier.frontier()

    def __repr__(self) -> str:
        return f"ProbeHandle(frontier={sorted(self._frontier.frontier_list())!r})"


class _Discard:
    """The delivery point of a probe that runs inline: records handed to it are gone at once
    (counted as taken, once the probe is observed).  Its scope counts them nowhere: an inline
    operator's records are counted at its consumers, and a probe has none."""

    __slots__ = ("_inp",)

    def __init__(self, core: OperatorCore) -> None:
        self._inp = core.input_ports[0]

    def push(self, t: Any, batch: Any) -> None:
        inp = self._inp
        if type(inp) is not InputPort:  # observed: taken, as the port's own paths count
            inp.records += len(batch)
            inp.batches += 1


def probe_with(stream: Stream, handle: ProbeHandle, name: str = "Probe") -> Stream:
    """Mirror ``stream``'s frontier into ``handle``; returns ``stream``.

    Behind an operator whose ``map``s would run inline (see :mod:`pytimely.dataflow.inline`),
    the probe runs inline too: what reaches it is dropped within the sender's call, and the
    probe is scheduled only when its frontier moves, not for every batch.

    >>> import pytimely as pt
    >>> handle = pt.ProbeHandle()
    >>> _ = pt.example(lambda s: s.to_stream([1]).probe_with(handle))
    >>> handle.done()
    True
    """
    mirror = handle._frontier
    t0 = stream.scope.domain.minimum()
    mirror.update_iter([(t0, 1)])
    state = {"shown": (t0,)}

    def logic(inp: InputPort) -> None:
        for _ in inp.drain_batches():
            pass
        now = inp.frontier_elements()
        shown = state["shown"]
        if now != shown:
            mirror.update_iter(frontier_changes(shown, now))
            state["shown"] = tuple(now)

    depth = inline_depth_after(stream)
    if depth is not None:
        b = OperatorBuilder(name, stream.scope)
        b.new_input(stream, Pipeline, interest=FrontierInterest.ALWAYS)
        b.build(
            lambda caps, info: logic, _inline=lambda core: _Discard(core).push, _inline_depth=depth
        )
    else:
        sink(stream, Pipeline, name, logic, interest=FrontierInterest.ALWAYS)
    return stream


def probe(stream: Stream, name: str = "Probe") -> ProbeHandle:
    """A new :class:`ProbeHandle` on ``stream``.

    >>> import pytimely as pt
    >>> pt.example(lambda s: s.to_stream([1]).probe()).done()
    True
    """
    handle = ProbeHandle()
    probe_with(stream, handle, name)
    return handle
