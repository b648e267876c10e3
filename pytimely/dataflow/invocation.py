"""The clock of an observed operator: times its invocations and, while the event log records,
logs each one and what its outputs sent.

An observed operator (``OperatorCore.observe``) calls :meth:`InvocationClock.start` before its
logic and :meth:`InvocationClock.stop` after it, and nothing else: the per-invocation work of
statistics and logging is done in these two calls, so that the compiled class
(``pytimely._speedups.InvocationClock``, same behaviour) runs it without a Python frame.
:func:`invocation_clock` makes the compiled one when the extension is in use.

Invariants, once :meth:`~InvocationClock.log_to` was called with ``ports`` and ``edges`` (one
tuple of edges per port, replaced by :meth:`~InvocationClock.log_edges`):

* every invocation appends ``log_id, start, duration`` to ``schedules`` (``start`` a
  ``time.perf_counter()`` reading, ``duration`` in seconds);
* after an invocation in which port ``i`` sent anything, ``edge, records, batches`` is appended
  to ``sent`` for each edge of ``edges[i]``: what the port sent since it was last logged (its
  running ``records`` and ``batches`` attributes, counted by the port itself);
* ``stop()`` returns the invocation's stop time if some dict of ``internals`` (the operator's
  capability changes, per output) is non-empty, so that the caller logs them; else None.

>>> clock = InvocationClock(1)  # of an operator with one output
>>> class Port:
...     records = batches = 0
>>> port, schedules, sent = Port(), [], []
>>> clock.log_to(schedules, 7, ({},), sent, (port,), (("edge",),))
>>> clock.start(); port.records, port.batches = 5, 1; clock.stop()
>>> schedules[0], sent
(7, ['edge', 5, 1])
>>> clock.total >= clock.longest >= 0.0
True
"""

from __future__ import annotations

import time
from typing import Any

from .. import _native

__all__ = ["InvocationClock", "invocation_clock"]

_perf_counter = time.perf_counter


class InvocationClock:
    """Times invocations (``total`` and ``longest``, in seconds) and logs them once
    :meth:`log_to` is called (see the module docstring)."""

    __slots__ = (
        "_start",
        "total",
        "longest",
        "_schedules",
        "_log_id",
        "_internals",
        "_sent",
        "_outputs",
    )

    def __init__(self, outputs: int) -> None:
        self._start = 0.0
        self.total = 0.0
        self.longest = 0.0
        self._schedules: list[Any] | None = None
        self._log_id: Any = None
        self._internals: tuple[dict[Any, int], ...] = ()
        self._sent: list[Any] = []
        # Per output, while logging: [port, its edges, records and batches when last logged].
        self._outputs: list[list[Any]] = [[None, (), 0, 0] for _ in range(outputs)]

    def start(self) -> None:
        """An invocation begins."""
        self._start = _perf_counter()

    def stop(self) -> float | None:
        """The invocation ended: its stop time if it changed capabilities while logging,
        else None."""
        start = self._start
        elapsed = _perf_counter() - start
        self.total += elapsed
        if elapsed > self.longest:
            self.longest = elapsed
        schedules = self._schedules
        if schedules is None:
            return None
        schedules.extend((self._log_id, start, elapsed))
        for output in self._outputs:
            port = output[0]
            batches = port.batches
            if batches != output[3]:
                records = port.records
                for edge in output[1]:
                    self._sent.extend((edge, records - output[2], batches - output[3]))
                output[2] = records
                output[3] = batches
        return start + elapsed if any(self._internals) else None

    def log_to(
        self,
        schedules: list[Any] | None,
        log_id: Any = None,
        internals: tuple[dict[Any, int], ...] = (),
        sent: list[Any] | None = None,
        ports: tuple[Any, ...] = (),
        edges: tuple[tuple[Any, ...], ...] = (),
    ) -> None:
        """Log every invocation from now on (see the module docstring), counting the ports'
        sends from now; ``log_to(None)`` stops logging."""
        if schedules is None:
            self._schedules = None
            return
        if sent is None or not len(ports) == len(edges) == len(self._outputs):
            raise TypeError("log_to needs the sent list and one tuple of edges per output")
        self._log_id = log_id
        self._internals = internals
        self._sent = sent
        self._outputs = [
            [port, tuple(e), port.records, port.batches] for port, e in zip(ports, edges)
        ]
        self._schedules = schedules

    def log_edges(self, output: int, edges: tuple[Any, ...]) -> None:
        """While logging, log what port ``output`` sends on ``edges`` from now on."""
        if self._schedules is not None:
            self._outputs[output][1] = tuple(edges)


def invocation_clock(outputs: int) -> Any:
    """A new clock for an operator with ``outputs`` outputs: the compiled one when the
    extension is in use, else an :class:`InvocationClock`."""
    speedups = _native.speedups
    if speedups is not None:
        return speedups.InvocationClock(outputs)
    return InvocationClock(outputs)
