"""Tumbling windows on timestamp tokens: the running example (section 5) of Lattuada, McSherry
and Liagouris, "Timestamp tokens: a better coordination primitive for data-processing systems"
(SoCC 2022).

``tumbling_average(stream, width)`` reports, for every window ``[k*width, (k+1)*width)`` of
timestamps that received data, the average of its records, **at the window's end timestamp**
``(k+1)*width`` (the start of the next window), once the input frontier has reached that end.
Windows without data produce nothing.

How it uses tokens (the life-cycle of the paper's Figure 5):

* The constructor's token (at time 0) is dropped at once: the operator claims nothing while
  it holds no window.
* The first message of a window gives a :class:`~pytimely.dataflow.CapabilityRef`; the operator
  ``retain()`` s it and immediately ``downgrade`` s it to the window's end.  It holds exactly
  **one token per open window**, each at that window's end — never at an earlier time, so a
  window in progress does not hold back downstream frontiers for times before its end.
* Partial sums and counts live next to the token, keyed by window end; the ends sit in a heap.
* When the input frontier no longer contains a time ``< end`` (every record of the window has
  arrived), the operator sends the average with the window's token and drops it.  A frontier
  that jumps retires every completed window in one invocation, in end order, straight from the
  heap: the operator does not need to be called once per window (the Naiad limitation of 5.2),
  nor once per time (the Flink one).
* Interest is ``IF_CAPABILITY``: woken by frontier changes only while it holds a window.

Release rule: a window ``[s, e)`` is complete once no frontier element is ``< e`` (the frontier
has *reached* ``e``).  Figure 5 of the paper retires windows whose end is strictly before the
frontier, one time unit later than necessary; both are correct, the one here is tighter.

Several workers: records are exchanged by ``key`` (``key=None``: everything goes to worker 0,
which computes the one global average per window), so each (window, key) is complete on one
worker.  Times must be integers (totally ordered); window ends are computed from the message
timestamp, or from ``event_time(record)`` when given (which must not be earlier than the
message timestamp: a record cannot belong to a window that ended before it was sent).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ....progress.operate import FrontierInterest
from ...pacts import Exchange
from ..generic import unary_frontier

if TYPE_CHECKING:
    from ...capability import Capability, CapabilityRef
    from ...operator import OperatorInfo
    from ...ports import InputPort, OutputPort
    from ...stream import Stream

__all__ = ["tumbling_average", "window_end"]


def window_end(t: int, width: int, offset: int = 0) -> int:
    """End of the tumbling window containing ``t``: windows are ``[offset + k*width,
    offset + (k+1)*width)``."""
    return (t - offset) // width * width + width + offset


def _to_zero(_record: Any) -> int:
    return 0


def tumbling_average(
    stream: Stream,
    width: int,
    key: Callable[[Any], Any] | None = None,
    value: Callable[[Any], Any] | None = None,
    event_time: Callable[[Any], int] | None = None,
    offset: int = 0,
    name: str = "TumblingAverage",
) -> Stream:
    """Average of each tumbling window of ``width`` time units, at the window's end.

    * ``key=None``: records are numbers (or ``value(record)`` is); output one ``avg`` per
      non-empty window.  With ``key``: output ``(key, avg)`` per key present in the window.
    * ``value``: the number to average (default: the record itself).
    * ``event_time``: assign records to windows by ``event_time(record)`` instead of the
      message timestamp (must be ``>=`` the timestamp).
    * Averages are ``sum / count`` (true division).

    Output timestamps are the window ends; within one end, keys come out in sorted order when
    they are mutually comparable.

    >>> import pytimely as pt
    >>> pt.example(lambda s: s.to_stream([1, 2]).tumbling_average(10).capture()).extract()
    [(10, [1.5])]
    """
    if not isinstance(width, int) or width <= 0:
        raise ValueError(f"tumbling_average: width must be a positive int, got {width!r}")
    pact = Exchange(key) if key is not None else Exchange(route=_to_zero)

    def ctor(cap: Capability, info: OperatorInfo) -> Callable[..., None]:
        cap.drop()  # hold nothing until a window opens
        windows: dict[int, list[Any]] = {}  # end -> [token at end, state]
        ends: list[int] = []  # heap of the open windows' ends

        def open_window(ref: CapabilityRef, end: int) -> list[Any]:
            token = ref.retain()
            token.downgrade(end)  # the paper's idiom: retain the message's token, move it
            entry = [token, {} if key is not None else [0, 0]]
            windows[end] = entry
            heapq.heappush(ends, end)
            return entry

        def add(state: Any, batch: Any) -> None:
            if key is None:
                if value is None:
                    state[0] += sum(batch)
                else:
                    state[0] += sum(value(r) for r in batch)
                state[1] += len(batch)
            else:
                for r in batch:
                    k = key(r)
                    v = r if value is None else value(r)
                    acc = state.get(k)
                    if acc is None:
                        state[k] = [v, 1]
                    else:
                        acc[0] += v
                        acc[1] += 1

        def logic(inp: InputPort, out: OutputPort) -> None:
            for ref, batch in inp:
                if event_time is None:
                    end = window_end(ref.time, width, offset)
                    entry = windows.get(end)
                    if entry is None:
                        entry = open_window(ref, end)
                    add(entry[1], batch)
                else:
                    groups: dict[int, list[Any]] = {}
                    for r in batch:
                        e = window_end(event_time(r), width, offset)
                        g = groups.get(e)
                        if g is None:
                            groups[e] = [r]
                        else:
                            g.append(r)
                    for end, records in groups.items():
                        entry = windows.get(end)
                        if entry is None:
                            entry = open_window(ref, end)
                        add(entry[1], records)
            # Retire every window the frontier has reached: possibly many at once.
            frontier = inp.frontier
            while ends and not frontier.less_than(ends[0]):
                end = heapq.heappop(ends)
                token, state = windows.pop(end)
                if key is None:
                    out.give(token, state[0] / state[1])
                else:
                    try:
                        items = sorted(state.items())
                    except TypeError:
                        items = list(state.items())
                    out.session(token).give_batch([(k, s / n) for k, (s, n) in items])
                token.drop()

        return logic

    return unary_frontier(stream, pact, name, ctor, interest=FrontierInterest.IF_CAPABILITY)
