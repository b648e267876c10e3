"""Synchronizing workers from outside a dataflow.

:func:`barrier` returns on every worker only once every worker has called it: it builds a tiny
dataflow (an input and a probe), advances the input and steps until the probe has seen every
worker's input advance.  Use it to start clocks together, not on a hot path (it builds a
dataflow per call).
"""

from __future__ import annotations

from typing import Any

__all__ = ["barrier"]


def barrier(worker: Any, timeout: float | None = None) -> None:
    """Return once every worker has called ``barrier`` (the same number of times)."""

    def build(scope: Any) -> Any:
        inp, stream = scope.new_input()
        return inp, stream.probe()

    inp, probe = worker.dataflow(build, name="Barrier")
    inp.advance_to(1)
    worker.step_while(lambda: probe.less_than(1), timeout=timeout)
    inp.close()
