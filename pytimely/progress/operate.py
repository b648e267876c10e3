"""What a scope needs from each of its children, and nothing more.

A child of a scope (an operator, or a nested scope) is seen by progress tracking as a node with
numbered inputs and outputs, an *internal summary* (for each input/output pair, an antichain of
path summaries; empty means "no path"), a :class:`FrontierInterest` per input, a flag saying
whether its progress reports must still be exchanged between workers (``local``), a
:class:`SharedProgress` through which it and its scope trade counts, and a ``schedule()``
method.

Contract of ``SharedProgress`` (all times are the child's scope's times):

* ``frontiers[i]`` — written by the scope, for a child that asked for copies: changes (±1 per
  element) of input ``i``'s frontier, consolidated.  The child applies them whenever it next
  runs; changes that cancel while it sleeps vanish here, which is why a sleeping region costs
  nothing to keep up to date.  Operators do not take copies: they read their inputs' live
  frontiers from the scope's tracker (``bind_frontiers`` below), and the scope writes nothing
  for them.
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
from collections.abc import Callable
from typing import Any, Protocol

from .antichain import MutableAntichain
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
    """The four count batches a child and its scope share (see the module docstring).

    Each field is a tuple with one :class:`ChangeBatch` per port, fixed at construction (the
    scope keeps references to the batches).  ``frontier_copies=False`` makes no frontier
    batches at all, for a child that will read its input frontiers from the scope's tracker
    (``Operate.bind_frontiers`` returns true): the scope never writes them.
    """

    __slots__ = ("frontiers", "consumeds", "internals", "produceds")

    def __init__(self, inputs: int, outputs: int, frontier_copies: bool = True) -> None:
        self.frontiers: tuple[ChangeBatch, ...] = (
            tuple([ChangeBatch() for _ in range(inputs)]) if frontier_copies else ()
        )
        self.consumeds = tuple([ChangeBatch() for _ in range(inputs)])
        self.internals = tuple([ChangeBatch() for _ in range(outputs)])
        self.produceds = tuple([ChangeBatch() for _ in range(outputs)])


class Operate(Protocol):
    """A child of a scope, as progress tracking sees it: the whole scope–child interface
    (timely's ``progress/operate.rs``).

    A scope uses nothing else of a child.  Its life, in the order the scope calls it:

    1. ``summary()``, ``interest()``, ``inputs``/``outputs``, ``name`` — the shape, when the
       scope compiles its graph;
    2. ``attach(activate, index)`` — how to ask to be scheduled: call ``activate(index)``;
    3. ``bind_frontiers(antichains)`` — the scope offers the live frontier of each input;
    4. ``initial_internals()`` — the initial capabilities, counted without exchange;
    5. ``built()`` — the whole scope is built and counted (data may flow);
    6. ``schedule()`` — then repeatedly, with counts traded through ``shared``;
    7. ``retire()`` — once, when the scope retires the child for good.
    """

    name: str
    inputs: int
    outputs: int
    local: bool
    """``True``: this child's reports are per worker and must be exchanged (an operator).
    ``False``: they are already agreed by all workers (a nested scope, which exchanges its own)."""
    shared: SharedProgress

    def summary(self) -> list[list[list[Any]]]:
        """``summary[i][o]``: path summaries from input ``i`` to output ``o`` (may be empty)."""
        ...

    def interest(self) -> list[FrontierInterest]:
        """One :class:`FrontierInterest` per input."""
        ...

    def attach(self, activate: Callable[[int], None], index: int) -> None:
        """Called once: this child is child ``index`` of its scope, and asks to be scheduled by
        calling ``activate(index)`` (operators and nested scopes alike, as with timely's
        path-keyed activations)."""
        ...

    def bind_frontiers(self, antichains: list[MutableAntichain]) -> bool:
        """Called once with the scope tracker's live frontier of each input.  Return ``True``
        if the child reads its input frontiers from these objects directly; the scope then
        never copies frontier changes into ``shared.frontiers``.  Return ``False`` to receive
        the changes there instead (a nested scope, which translates them to inner times)."""
        ...

    def forwards_inline(self) -> bool:
        """``True`` only for a child with one input and one output that hands every batch
        delivered to its input on to its output's consumers within the delivering call, at
        the batch's own time, as that many records (a ``map``; it then counts nothing itself,
        except the difference when a batch comes out with another number of records, in its
        own ``produced`` batch, and asks to be scheduled so that the scope drains it), or
        with one input and no output that drops every batch within the delivering call (a
        probe).  The scope counts records sent to such a child as already at the consumers of
        its output, if any: no pointstamp ever sits at its input."""
        ...

    def initial_internals(self) -> list[tuple[int, Any, int]]:
        """``(output, time, count)`` of the capabilities held before the first ``schedule``
        (see the module docstring), summed over all workers."""
        ...

    def built(self) -> None:
        """The enclosing scope is built and the initial capabilities are counted."""
        ...

    def schedule(self) -> bool:
        """Do some work; return ``True`` if the child is *incomplete* (must not be retired
        even if it holds nothing and its inputs are finished)."""
        ...

    def retire(self) -> None:
        """The scope retired this child: it holds nothing, its inputs are finished and its
        last counts were drained, and it will never be called again.  Let go of what it
        holds (the scope may be kept out of the garbage collector's sight a while longer)."""
        ...
