"""Capturing a stream: everything it shows, as events (as timely-dataflow's ``capture_into``;
see the "Capture and Replay" chapter of the timely-dataflow book,
https://timelydataflow.github.io/timely-dataflow/).

``capture_into(writer)`` attaches a sink that pushes ``Progress`` events (changes of the input
frontier) and ``Messages`` events (each received batch at its time) into ``writer``.  Progress
is relative to an implicit initial ``(minimum, +1)``: a reader assumes the stream starts with
one capability at the minimum time, so the first report retracts it (when the frontier moves).

``capture()`` records into memory and returns a :class:`CaptureHandle` whose ``extract()`` gives
``[(time, sorted records), ...]`` in time order with all batches at one time merged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...progress.antichain import frontier_changes
from ...progress.operate import FrontierInterest
from ..pacts import Pipeline
from .event import Messages, Progress
from .event import extract as extract_events
from .generic import sink

if TYPE_CHECKING:
    from ..ports import InputPort
    from ..stream import Stream

__all__ = ["capture_into", "capture", "CaptureHandle"]


def capture_into(stream: Stream, writer: Any, name: str = "Capture", close: bool = True) -> None:
    """Push every frontier change and batch of ``stream`` into ``writer`` (``push(event)``).

    When the stream is complete (its frontier is empty) the writer is flushed and, if
    ``close`` and it has a ``close()`` method, closed: nothing more can ever be written.

    >>> import pytimely as pt
    >>> class Printer:
    ...     def push(self, event): print(type(event).__name__)
    >>> pt.example(lambda s: s.to_stream([1]).capture_into(Printer()))
    Messages
    Progress
    """
    t0 = stream.scope.domain.minimum()
    state = {"shown": [t0]}
    flush = getattr(writer, "flush", None)

    def logic(inp: InputPort) -> None:
        now = list(inp.frontier_elements())
        shown = state["shown"]
        if now != shown:
            writer.push(Progress(frontier_changes(shown, now)))
            state["shown"] = list(now)
        for t, batch in inp.drain_batches():
            writer.push(Messages(t, batch))
        if now != shown and now and flush is not None:
            flush()  # a frontier change is what readers wait for: make it visible
        if not now and not state.get("finished"):
            state["finished"] = True
            if close and hasattr(writer, "close"):
                writer.close()
            elif hasattr(writer, "flush"):
                writer.flush()

    sink(stream, Pipeline, name, logic, interest=FrontierInterest.ALWAYS)


class _ListWriter:
    __slots__ = ("events",)

    def __init__(self) -> None:
        self.events: list[Any] = []

    def push(self, event: Any) -> None:
        self.events.append(event)


class CaptureHandle:
    """The events a ``capture()`` recorded; ``extract()`` once the dataflow has finished."""

    __slots__ = ("_writer",)

    def __init__(self, writer: _ListWriter) -> None:
        self._writer = writer

    @property
    def events(self) -> list[Any]:
        """The :class:`Progress` and :class:`Messages` events recorded so far, in order."""
        return self._writer.events

    def extract(self) -> list[tuple[Any, list[Any]]]:
        """``[(time, sorted records), ...]`` ordered by time, one entry per non-empty time."""
        return extract_events(self._writer.events)


def capture(stream: Stream, name: str = "Capture") -> CaptureHandle:
    """Record ``stream``'s batches and frontier changes in memory (:meth:`Stream.capture`).

    >>> import pytimely as pt
    >>> pt.example(lambda s: s.to_stream([2, 1]).capture()).extract()
    [(0, [1, 2])]
    """
    writer = _ListWriter()
    capture_into(stream, writer, name)
    return CaptureHandle(writer)
