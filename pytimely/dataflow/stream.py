"""``Stream``: an operator output as seen by the code that builds a dataflow.

A stream names its source location (``(operator index, output port)`` in its scope) and holds the
output's fan-out point.  Connecting a stream to an operator input does two things: records the
edge for progress tracking, and adds a pusher (built by the input's parallelization contract)
to the fan-out.

The operators are functions of the modules in ``operators/`` (``stream.map(f)`` is
``operators.map.map(stream, f)``), which hold their implementation and documentation.  Each is
also a method here, by plain assignment (``map = _map.map``): a function stored on a class is a
method, so the call costs no extra frame, type checkers and IDEs see the operator's own
signature and docstring, and the two cannot drift apart.  The operator modules import this one
only for their annotations (they make output streams with :meth:`Scope.stream`), so this module
imports them at its top.  The methods defined here are those that are not operators of a
module: moving between scopes, loops, and the few with logic of their own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..errors import GraphError
from .operators import aggregation as _aggregation
from .operators import asof as _asof
from .operators import asynchronous as _asynchronous
from .operators import capture as _capture
from .operators import generic as _generic
from .operators import join as _join
from .operators import keyed as _keyed
from .operators import map as _map
from .operators import notify as _notify
from .operators import probe as _probe
from .operators import routing as _routing
from .operators import watermarks as _watermarks
from .operators import windowing as _windowing
from .operators.windowing import tumbling_average as _tumbling_average

if TYPE_CHECKING:
    from .operators.feedback import LoopHandle
    from .ports import Tee
    from .scope import Scope

__all__ = ["Stream"]


class Stream:
    """A stream of timestamped batches in one scope.

    Streams are made by a scope (``scope.to_stream``, ``scope.new_input``) and by the operator
    methods below, each of which adds one operator reading this stream:

    >>> import pytimely as pt
    >>> pt.example(lambda s: s.to_stream(range(4)).map(lambda x: x * 10).capture()).extract()
    [(0, [0, 10, 20, 30])]
    """

    __slots__ = ("scope", "source", "tee")

    def __init__(self, scope: Scope, source: tuple[int, int], tee: Tee) -> None:
        self.scope = scope
        self.source = source
        self.tee = tee

    def _connect(
        self,
        target: tuple[int, int],
        push: Callable[[Any, Any], None],
        weight: int = 1,
        pact: str = "Pipeline",
    ) -> None:
        """``pact`` names the channel for describing the graph (see :mod:`pytimely.graph`)."""
        self.scope.add_edge(self.source, target, weight, pact, self.tee.add(push))

    def _check_scope(self, scope: Scope, what: str) -> None:
        if scope is not self.scope:
            raise GraphError(
                f"{what}: the stream belongs to scope {self.scope.name!r} at {self.scope.path}, "
                f"not {scope.name!r} at {scope.path}; use enter()/leave() to cross scopes"
            )

    # -- scopes ----------------------------------------------------------------------------

    def enter(self, scope: Scope) -> Stream:
        """This stream inside the nested ``scope`` (its times re-stamped for the inner scope).

        >>> import pytimely as pt
        >>> def build(s):
        ...     nums = s.to_stream([1, 2])
        ...     return s.region(lambda r: nums.enter(r).map(lambda x: -x).leave()).capture()
        >>> pt.example(build).extract()
        [(0, [-2, -1])]
        """
        if scope.parent is not self.scope:
            raise GraphError(
                f"enter(): scope {scope.name!r} is not nested directly in {self.scope.name!r}"
            )
        return scope.new_scope_input(self)

    def leave(self) -> Stream:
        """This stream in the parent scope (loop counters dropped).

        >>> import pytimely as pt
        >>> def build(s):
        ...     nums = s.to_stream([1, 2])
        ...     return s.iterative(lambda loop: nums.enter(loop).leave()).capture()
        >>> pt.example(build).extract()
        [(0, [1, 2])]
        """
        if self.scope.parent is None:
            raise GraphError("leave(): the stream is already in a dataflow's top-level scope")
        return self.scope.new_scope_output(self)

    def connect_loop(self, handle: LoopHandle) -> None:
        """Feed this stream into a loop made by :meth:`Scope.feedback`; what it carries comes
        out of the loop's stream with its time advanced by the loop's summary.

        >>> import pytimely as pt
        >>> def build(s):
        ...     handle, looped = s.feedback(1)
        ...     halves = s.to_stream([8]).concat(looped).map(lambda x: x // 2)
        ...     halves.filter(lambda x: x > 1).connect_loop(handle)
        ...     return halves.capture()
        >>> pt.example(build).extract()
        [(0, [4]), (1, [2]), (2, [1])]
        """
        handle.connect(self)

    # -- record at a time (operators/map.py, operators/asynchronous.py) ----------------------

    map = _map.map
    map_batch = _map.map_batch
    flat_map = _map.flat_map
    filter = _map.filter
    inspect = _map.inspect
    inspect_time = _map.inspect_time
    inspect_batch = _map.inspect_batch
    for_each = _map.for_each
    map_async = _asynchronous.map_async

    # -- routing (operators/routing.py) ----------------------------------------------------

    exchange = _routing.exchange
    broadcast = _routing.broadcast
    concat = _routing.concat

    def concatenate(self, others: Iterable[Stream], name: str = "Concatenate") -> Stream:
        """This stream and all of ``others`` merged.

        >>> import pytimely as pt
        >>> def build(s):
        ...     a, b, c = (s.to_stream([x]) for x in "abc")
        ...     return a.concatenate([b, c]).capture()
        >>> pt.example(build).extract()
        [(0, ['a', 'b', 'c'])]
        """
        return _routing.concatenate(self.scope, [self, *others], name)

    partition = _routing.partition
    branch = _routing.branch
    ok_err = _routing.ok_err

    # -- per-time aggregation (operators/aggregation.py) -----------------------------------

    accumulate = _aggregation.accumulate
    count = _aggregation.count
    aggregate = _aggregation.aggregate
    delay = _aggregation.delay
    reclock = _aggregation.reclock
    tumbling_average = _tumbling_average.tumbling_average

    # -- observing progress (operators/probe.py, operators/capture.py) -----------------------

    probe = _probe.probe
    probe_with = _probe.probe_with
    capture = _capture.capture
    capture_into = _capture.capture_into

    # -- custom operators (operators/generic.py, operators/notify.py) ------------------------

    unary = _generic.unary
    unary_frontier = _generic.unary_frontier
    binary = _generic.binary
    binary_frontier = _generic.binary_frontier
    sink = _generic.sink
    unary_notify = _notify.unary_notify
    binary_notify = _notify.binary_notify

    # -- event time, keyed state, joins and windows -------------------------------------------

    assign_watermarks = _watermarks.assign_watermarks
    stateful_map = _keyed.stateful_map
    keyed_process = _keyed.keyed_process
    join = _join.join
    asof_join = _asof.asof_join
    lookup_join = _asof.lookup_join
    window_fold = _windowing.window_fold
    window_count = _windowing.window_count
    window_collect = _windowing.window_collect
    window_join = _windowing.window_join

    def __repr__(self) -> str:
        return f"<Stream from {self.source} in {self.scope.name!r}>"
