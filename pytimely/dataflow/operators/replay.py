"""Replaying recorded streams into a dataflow (as ``replay_into`` in timely-dataflow's
``operators/capture/replay.rs``).

``replay_into(readers, scope)`` builds a source operator that plays back any number of captured
streams.  Each worker replays the readers it is given (give each recorded stream to exactly one
worker); the streams may have been captured on any number of workers.

Capability accounting: every recorded stream starts with an implicit capability at the minimum
time, which its own progress events eventually retract.  The operator's initial capability is
already counted once per worker, so on its first run each replaying worker adjusts it by
``len(readers) - 1`` — after which the total is exactly one per replayed stream.  Progress
events are then applied to the operator's capability counts as they are, and message events are
sent at their recorded times (any interleaving of the recorded streams is itself a valid
stream).

Readers never block: each run takes what is available and, while some stream is unfinished,
the operator wakes itself again after ``period`` seconds.  A stream is finished when its
accumulated capability counts are all zero (its frontier is empty).  A reader that reports a
truncated or corrupt capture raises after the complete prefix was replayed; with
``on_error="close"`` the replay instead retracts what that stream still holds, so the dataflow
completes with the prefix (and ``ReplayHandle.errors`` records what happened).

Flow control: replay is an input, so it holds back while its worker is congested (a peer has
more of its data in flight than the bound of :mod:`pytimely.communication.flow`): it reads
nothing and looks again after ``period`` seconds.  Being an operator it never blocks the step.

Invariant: replay never waits on a reader that will say nothing more.  A reader that reports
``done`` while its stream still holds capabilities (its recording stopped early without the
reader noticing, e.g. a Parquet file closed by a writer that failed half-way) is treated as a
:class:`~pytimely.errors.TruncatedCapture`, like any other truncated stream.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ...errors import CaptureError, TimelyError, TruncatedCapture
from ...progress.change_batch import ChangeBatch
from .event import Messages, Progress
from .generic import OperatorBuilder

if TYPE_CHECKING:
    from ..scope import Scope
    from ..stream import Stream

__all__ = ["replay_into", "ReplayHandle"]


class ReplayHandle:
    """What a replay did: events and records replayed, and reader errors tolerated."""

    __slots__ = ("events", "records", "errors", "finished")

    def __init__(self) -> None:
        self.events = 0
        self.records = 0
        self.errors: list[BaseException] = []
        self.finished = False


def replay_into(
    readers: Iterable[Any] | Any,
    scope: Scope,
    period: float = 0.001,
    on_error: str = "raise",
    name: str = "Replay",
    handle: ReplayHandle | None = None,
) -> Stream:
    """Replay ``readers`` (objects with a non-blocking ``poll() -> list[Event]``) into ``scope``."""
    if on_error not in ("raise", "close"):
        raise ValueError("on_error must be 'raise' or 'close'")
    if hasattr(readers, "poll"):
        readers = [readers]
    readers = list(readers)
    stats = handle if handle is not None else ReplayHandle()
    core = OperatorBuilder.raw(scope, name)
    port = core.output_ports[0]
    internals = port.internals
    t0 = scope.domain.minimum()
    # Per stream: its accumulated capability counts (starting with the implicit +1 at min).
    held = [ChangeBatch([(t0, 1)]) for _ in readers]
    live = list(range(len(readers)))
    state = {"started": False}
    worker = scope.worker

    def logic() -> None:
        if not state["started"]:
            state["started"] = True
            internals.update(t0, len(readers) - 1)
        if worker.congested():  # flow control: read no more until the peers have caught up
            worker.activate_after(core.activate, period)
            return
        for i in list(live):
            reader = readers[i]
            try:
                events = reader.poll()
                if not events and held[i] and getattr(reader, "done", False):
                    raise _ended_early(name, reader, held[i])
            except (CaptureError, TimelyError, OSError) as exc:
                if on_error == "raise":
                    raise
                stats.errors.append(exc)
                for t, d in held[i].drain():
                    internals.update(t, -d)
                live.remove(i)
                continue
            for event in events:
                stats.events += 1
                if type(event) is Progress:
                    for t, d in event.changes:
                        internals.update(t, d)
                        held[i].update(t, d)
                elif type(event) is Messages:
                    n = len(event.batch)
                    if n:
                        stats.records += n
                        # Legal: the recorded stream held a capability at this time.
                        port.forward(event.time, event.batch)
                else:
                    raise CaptureError(f"replay: not a capture event: {event!r}")
            if not held[i]:
                live.remove(i)
        if live:
            worker.activate_after(core.activate, period)
        else:
            stats.finished = True

    core.set_logic(logic)
    return scope.stream((core.index, 0), port.tee)


def _ended_early(name: str, reader: Any, held: ChangeBatch) -> TruncatedCapture:
    times = sorted((t for t, _ in held), key=repr)
    return TruncatedCapture(
        f"{name}: {reader!r} is done, but its stream still holds capabilities at {times!r} "
        "(the recording stopped before the stream finished)"
    )
