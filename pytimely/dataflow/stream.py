"""``Stream``: an operator output as seen by the code that builds a dataflow.

A stream names its source location (``(operator index, output port)`` in its scope) and holds the
output's fan-out point.  Connecting a stream to an operator input does two things: records the
edge for progress tracking, and adds a pusher (built by the input's parallelization contract)
to the fan-out.  Every method that adds an operator lives in ``operators/`` and is attached
here, so this class stays a thin, discoverable facade.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import GraphError

__all__ = ["Stream"]


class Stream:
    """A stream of timestamped batches in one scope."""

    __slots__ = ("scope", "source", "tee")

    def __init__(self, scope: Any, source: tuple[int, int], tee: Any) -> None:
        self.scope = scope
        self.source = source
        self.tee = tee

    def _connect(self, target: tuple[int, int], push: Callable[[Any, Any], None],
                 weight: int = 1, pact: str = "Pipeline") -> None:
        """``pact`` names the channel for describing the graph (see :mod:`pytimely.graph`)."""
        self.scope.add_edge(self.source, target, weight, pact, self.tee.add(push))

    def _check_scope(self, scope: Any, what: str) -> None:
        if scope is not self.scope:
            raise GraphError(
                f"{what}: the stream belongs to scope {self.scope.name!r} at {self.scope.path}, "
                f"not {scope.name!r} at {scope.path}; use enter()/leave() to cross scopes"
            )

    def enter(self, scope: Any) -> Stream:
        """This stream inside the nested ``scope`` (its times re-stamped for the inner scope)."""
        if scope.parent is not self.scope:
            raise GraphError(
                f"enter(): scope {scope.name!r} is not nested directly in {self.scope.name!r}"
            )
        return scope.new_scope_input(self)

    def leave(self) -> Stream:
        """This stream in the parent scope (loop counters dropped)."""
        if self.scope.parent is None:
            raise GraphError("leave(): the stream is already in a dataflow's top-level scope")
        return self.scope.new_scope_output(self)

    def __repr__(self) -> str:
        return f"<Stream from {self.source} in {self.scope.name!r}>"
