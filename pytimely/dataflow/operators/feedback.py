"""Feedback edges: the only way to close a cycle.

``scope.feedback(summary)`` returns a :class:`LoopHandle` and a stream.  Whatever is connected to
the handle (``stream.connect_loop(handle)``) comes out of the stream with its time advanced by
``summary`` — records whose advanced time does not exist (``results_in`` is ``None``) are
dropped.  The operator's internal summary *is* ``summary``, which is what lets progress tracking
see that going around the loop strictly advances time.  In an iterative scope ``feedback(1)``
advances the loop counter by one and leaves the outer time alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import GraphError
from ...order import results_in
from ...progress.operate import FrontierInterest
from ..operator import OperatorCore
from ..pacts import Pipeline
from .generic import OperatorBuilder

if TYPE_CHECKING:
    from ..scope import Scope
    from ..stream import Stream

__all__ = ["LoopHandle", "feedback"]


class LoopHandle:
    """The input end of a feedback edge; connect exactly one stream to it."""

    __slots__ = ("_core", "_connected")

    def __init__(self, core: OperatorCore) -> None:
        self._core = core
        self._connected = False

    def connect(self, stream: Stream) -> None:
        """Close the loop: ``stream``'s data come back out of the feedback stream, advanced.

        ``stream`` must be of the same scope; a handle is connected once.
        """
        if self._connected:
            raise GraphError("connect_loop(): this loop handle is already connected")
        stream._check_scope(self._core.scope, "connect_loop()")
        self._connected = True
        core = self._core
        push = Pipeline.connect(core.scope.worker, core.input_ports[0].push)
        stream._connect((core.index, 0), push, pact="Feedback")  # the edge that closes a loop


def feedback(scope: Scope, summary: Any = 1) -> tuple[LoopHandle, Stream]:
    """A feedback edge in ``scope`` (the body of :meth:`Scope.feedback`).

    ``summary`` must strictly advance time, or a :class:`GraphError` is raised.
    """
    s = scope.domain.summary(summary)
    if s == scope.domain.identity():
        raise GraphError("feedback(): the summary must strictly advance time (e.g. 1)")
    # Raw: the input is connected later, by ``connect_loop``.
    core = OperatorBuilder.raw(scope, "Feedback", 1, 1, [[[s]]], [FrontierInterest.NEVER])
    for cap in core.mint_initial():
        cap.drop()
    inp = core.input_ports[0]
    out = core.output_ports[0]

    def logic() -> None:
        forward = out.forward  # legal: at summary(t), the summary from input to output
        for t, batch in inp.drain_batches():
            t2 = results_in(s, t)
            if t2 is not None:
                forward(t2, batch)

    core.set_logic(logic)
    return LoopHandle(core), scope.stream((core.index, 0), out.tee)
