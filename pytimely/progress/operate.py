"""What a scope needs from each of its children, and nothing more.

A child of a scope (an operator, or a nested scope) is seen by progress tracking as a node with
numbered inputs and outputs, an *internal summary* (for each input/output pair, an antichain of
path summaries; empty means "no path"), a :class:`FrontierInterest` per input, a flag saying
whether its progress reports must still be exchanged between workers (``local``), a
:class:`SharedProgress` through which it and its scope trade counts, and a ``schedule()``
method.

Contract of ``SharedProgress`` (all times are the child's scope's times):

* ``frontiers[i]`` — written by the scope: changes (±1 per element) of input ``i``'s frontier,
  consolidated.  The child applies them whenever it next runs.  Changes that cancel while the
  child sleeps vanish here, which is why a sleeping region costs nothing to keep up to date.
* ``consumeds[i]`` — written by the child: records consumed from input ``i`` per time.
* ``produceds[o]`` — written by the child: records sent on output ``o`` per time.
* ``internals[o]`` — written by the child: changes in the capabilities it holds on output ``o``.

The scope drains the last three after every ``schedule()``, so everything one invocation did is
reported as one atomic batch (the safety property relies on this).  Initial capabilities are
the exception: before the first schedule, each output is assumed to hold ``peers`` capabilities
at the minimum time (one per worker, common knowledge); a child's first ``internals`` report is
exactly that, and it is counted without being exchanged.
"""

from __future__ import annotations

import enum
from typing import Any, Protocol

from .change_batch import ChangeBatch

__all__ = ["FrontierInterest", "SharedProgress", "Operate"]


class FrontierInterest(enum.IntEnum):
    """When an operator wants to be scheduled because only time moved on an input.

    ``NEVER``: only for data or explicit activation (map, filter, exchange).
    ``IF_CAPABILITY``: also for frontier changes, but only while it holds a capability (an
    operator that buffers data under a retained token, like a stash or a window).
    ``ALWAYS``: for every frontier change (probe, capture, operators that report frontiers).
    A scope's interest is the maximum over its children.
    """

    NEVER = 0
    IF_CAPABILITY = 1
    ALWAYS = 2


class SharedProgress:
    """The four count batches a child and its scope share (see the module docstring)."""

    __slots__ = ("frontiers", "consumeds", "internals", "produceds")

    def __init__(self, inputs: int, outputs: int) -> None:
        self.frontiers = [ChangeBatch() for _ in range(inputs)]
        self.consumeds = [ChangeBatch() for _ in range(inputs)]
        self.internals = [ChangeBatch() for _ in range(outputs)]
        self.produceds = [ChangeBatch() for _ in range(outputs)]


class Operate(Protocol):
    """A child of a scope, as progress tracking sees it."""

    name: str
    inputs: int
    outputs: int
    local: bool
    shared: SharedProgress

    def summary(self) -> list[list[list[Any]]]:
        """``summary[i][o]``: path summaries from input ``i`` to output ``o`` (may be empty)."""
        ...

    def interest(self) -> list[FrontierInterest]:
        """One :class:`FrontierInterest` per input."""
        ...

    def schedule(self) -> bool:
        """Do some work; return ``True`` if the child is *incomplete* (must not be retired
        even if it holds nothing and its inputs are finished)."""
        ...

    # Optional: ``bind_frontiers(antichains)`` — a child that defines it is handed, once, the
    # scope tracker's live frontier (a ``MutableAntichain``) of each of its inputs and reads
    # them directly; the scope then does not copy frontier changes into ``shared.frontiers``.
