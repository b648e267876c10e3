"""Helpers for testing dataflows: collect a stream per time, run on N workers, check frontiers.

The test suite uses these, and so can programs that check their own dataflows.  What a stream
carried is reported as ``{time: sorted records}`` -- the shape of timely's ``Extract`` (see
timely-dataflow's ``dataflow/operators/core/capture/extract.rs``) as a dictionary: times
without records do not appear, and records that cannot be ordered keep their arrival order.

>>> import pytimely as pt
>>> from pytimely.testing import run_collect
>>> run_collect(lambda scope: scope.to_stream([3, 1, 2]).delay(lambda x, t: x % 2))
{0: [2], 1: [1, 3]}
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from typing import Any

from .dataflow import Stream
from .execute import execute
from .worker import Worker

__all__ = ["assert_frontier", "collect", "run", "run_collect"]

#: Seconds a multi-process run of these helpers may take before it is stopped as a failure.
DEFAULT_TIMEOUT = 60.0


def collect(stream: Stream) -> dict[Any, list[Any]]:
    """Collect what ``stream`` carries into a dictionary ``{time: sorted records}``.

    The dictionary is filled while the dataflow runs, on the worker that built it: read it once
    the dataflow has finished (or a probe has passed the times of interest).  Each list is kept
    sorted as records arrive; records that cannot be compared keep their arrival order.

    >>> import pytimely as pt
    >>> from pytimely.testing import collect
    >>> got = pt.example(lambda scope: collect(scope.to_stream(range(5)).map(lambda x: -x)))
    >>> got
    {0: [-4, -3, -2, -1, 0]}
    """
    by_time: dict[Any, list[Any]] = {}

    def record(time: Any, x: Any) -> None:
        records = by_time.setdefault(time, [])
        try:
            bisect.insort(records, x)
        except TypeError:  # not comparable with what is there: keep arrival order
            records.append(x)

    stream.inspect_time(record, name="Collect")
    return by_time


def run(
    fn: Callable[[Worker], Any],
    workers: int = 1,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> list[Any]:
    """:func:`pytimely.execute` bounded in wall time: ``fn(worker)`` on ``workers`` workers,
    their results in worker order.  Several workers run as processes, and a run that takes more
    than ``timeout`` seconds fails instead of hanging the test that started it.

    >>> from pytimely.testing import run
    >>> run(lambda worker: (worker.index, worker.peers))
    [(0, 1)]
    """
    return execute(fn, workers=workers, timeout=timeout)


def run_collect(
    build: Callable[[Any], Stream | Iterable[Stream]],
    workers: int = 1,
    timeout: float | None = DEFAULT_TIMEOUT,
    timestamp: Any = int,
) -> Any:
    """Build a dataflow with ``build(scope)`` on every worker, run it to completion and return
    what the stream it returned carried, all workers merged: ``{time: sorted records}``.  If
    ``build`` returns several streams (a list or tuple), the result is a list with one such
    dictionary per stream.  ``timestamp`` is the dataflow's time type, as in
    :meth:`Worker.dataflow`; ``workers`` and ``timeout`` as in :func:`run`.

    >>> from pytimely.testing import run_collect
    >>> def build(scope):
    ...     evens, odds = scope.to_stream(range(6)).partition(2, lambda x: (x % 2, x))
    ...     return evens, odds.exchange(lambda x: x)
    >>> run_collect(build, workers=2)
    [{0: [0, 0, 2, 2, 4, 4]}, {0: [1, 1, 3, 3, 5, 5]}]
    """

    def work(worker: Worker) -> tuple[bool, list[dict[Any, list[Any]]]]:
        def dataflow(scope: Any) -> tuple[bool, list[dict[Any, list[Any]]]]:
            built = build(scope)
            several = not isinstance(built, Stream)
            return several, [collect(s) for s in (built if several else [built])]

        return worker.dataflow(dataflow, timestamp=timestamp)

    per_worker = run(work, workers=workers, timeout=timeout)
    several = per_worker[0][0]
    merged: list[dict[Any, list[Any]]] = [{} for _ in per_worker[0][1]]
    for _several, collected in per_worker:
        for into, got in zip(merged, collected):
            for time, records in got.items():
                into.setdefault(time, []).extend(records)
    for into in merged:
        for records in into.values():
            try:
                records.sort()
            except TypeError:
                pass
    return merged if several else merged[0]


def assert_frontier(probe: Any, expected: Iterable[Any]) -> None:
    """Assert that the frontier of ``probe`` (a :class:`~pytimely.ProbeHandle`, an input port,
    anything with a ``frontier``, or a frontier itself) holds exactly the times ``expected``,
    in any order: ``[]`` means complete, ``[t]`` means times ``>= t`` may still appear.

    >>> import pytimely as pt
    >>> from pytimely.testing import assert_frontier
    >>> worker = pt.Worker()
    >>> def build(scope):
    ...     handle, stream = scope.new_input()
    ...     return handle, stream.probe()
    >>> handle, probe = worker.dataflow(build)
    >>> handle.advance_to(3)
    >>> worker.step_while(lambda: probe.less_than(3))
    >>> assert_frontier(probe, [3])
    >>> assert_frontier(probe, [2])
    Traceback (most recent call last):
    ...
    AssertionError: frontier [3], expected [2]
    """
    frontier = getattr(probe, "frontier", probe)
    got = list(frontier)
    want = list(expected)
    if len(got) != len(want) or any(t not in got for t in want):
        raise AssertionError(f"frontier {got!r}, expected {want!r}")
