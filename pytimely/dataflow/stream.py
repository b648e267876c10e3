"""``Stream``: an operator output as seen by the code that builds a dataflow.

A stream names its source location (``(operator index, output port)`` in its scope) and holds the
output's fan-out point.  Connecting a stream to an operator input does two things: records the
edge for progress tracking, and adds a pusher (built by the input's parallelization contract)
to the fan-out.

Every operator method is spelled out here, with its signature and a runnable example, and
delegates to the function of the same name in ``operators/`` (``stream.map(f)`` is
``operators.map.map(stream, f)``), where the implementation and its full documentation live.
Spelling the methods out, rather than attaching them at import time, is what lets type checkers
and IDEs see them.  Each is called once per operator, while the dataflow is built, never per
record, so the extra call costs nothing that matters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..errors import GraphError
from .operators import aggregation as _aggregation
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
    from ..progress.operate import FrontierInterest
    from ..windows import Windower
    from .channels import Pact
    from .operators.capture import CaptureHandle
    from .operators.feedback import LoopHandle
    from .operators.keyed import KeyedContext, StateStats
    from .operators.notify import Notificator
    from .operators.probe import ProbeHandle
    from .operators.watermarks import WatermarkStats, WStream
    from .operators.windowing import Windowed, WindowJoined
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

    # -- record at a time (operators/map.py) -------------------------------------------------

    def map(self, f: Callable[[Any], Any], name: str | None = None) -> Stream:
        """``f(record)`` for every record.

        >>> import pytimely as pt
        >>> pt.example(lambda s: s.to_stream(range(4)).map(lambda x: x * 10).capture()).extract()
        [(0, [0, 10, 20, 30])]
        """
        return _map.map(self, f, name)

    def map_batch(self, f: Callable[[Any], Any], name: str | None = None) -> Stream:
        """``f(batch) -> batch`` for every batch (vectorized transforms of numpy/Arrow batches).

        >>> import pytimely as pt
        >>> pt.example(lambda s: s.to_stream([3, 1, 2]).map_batch(sorted).capture()).extract()
        [(0, [1, 2, 3])]
        """
        return _map.map_batch(self, f, name)

    def flat_map(self, f: Callable[[Any], Iterable[Any]], name: str | None = None) -> Stream:
        """Every record of ``f(record)`` for every record.

        >>> import pytimely as pt
        >>> pt.example(lambda s: s.to_stream(["a b", "c"]).flat_map(str.split).capture()).extract()
        [(0, ['a', 'b', 'c'])]
        """
        return _map.flat_map(self, f, name)

    def filter(self, predicate: Callable[[Any], bool], name: str | None = None) -> Stream:
        """The records for which ``predicate(record)`` is true.

        >>> import pytimely as pt
        >>> pt.example(lambda s: s.to_stream(range(6)).filter(lambda x: x % 2).capture()).extract()
        [(0, [1, 3, 5])]
        """
        return _map.filter(self, predicate, name)

    def inspect(self, f: Callable[[Any], Any], name: str | None = None) -> Stream:
        """Call ``f(record)`` on every record; pass the stream through unchanged.

        >>> import pytimely as pt
        >>> _ = pt.example(lambda s: s.to_stream(["hi"]).inspect(print))
        hi
        """
        return _map.inspect(self, f, name)

    def inspect_time(self, f: Callable[[Any, Any], Any], name: str | None = None) -> Stream:
        """Call ``f(time, record)`` on every record; pass the stream through unchanged.

        >>> import pytimely as pt
        >>> _ = pt.example(lambda s: s.to_stream(["hi"]).inspect_time(print))
        0 hi
        """
        return _map.inspect_time(self, f, name)

    def inspect_batch(self, f: Callable[[Any, Any], Any], name: str | None = None) -> Stream:
        """Call ``f(time, batch)`` on every batch; pass the stream through unchanged.

        >>> import pytimely as pt
        >>> _ = pt.example(lambda s: s.to_stream([1, 2]).inspect_batch(print))
        0 [1, 2]
        """
        return _map.inspect_batch(self, f, name)

    def for_each(self, f: Callable[[Any, Any], Any], name: str | None = None) -> None:
        """End the stream in a sink calling ``f(time, batch)`` for every batch.

        >>> import pytimely as pt
        >>> _ = pt.example(lambda s: s.to_stream([1, 2]).for_each(print))
        0 [1, 2]
        """
        _map.for_each(self, f, name)

    # -- routing (operators/routing.py) ----------------------------------------------------

    def exchange(
        self,
        key: Callable[[Any], Any] | None = None,
        name: str | None = None,
        column: str | int | None = None,
    ) -> Stream:
        """Re-partition across workers by ``key(record)`` (the record itself without ``key``;
        column ``column`` of Arrow or structured numpy batches); see :class:`~pytimely.Exchange`.

        >>> import pytimely as pt
        >>> pt.example(lambda s: s.to_stream(["b", "a"]).exchange(len).capture()).extract()
        [(0, ['a', 'b'])]
        """
        return _routing.exchange(self, key, name, column)

    def broadcast(self, name: str = "Broadcast") -> Stream:
        """Every record to every worker (on one worker: the stream unchanged).

        >>> import pytimely as pt
        >>> pt.example(lambda s: s.to_stream([1, 2]).broadcast().capture()).extract()
        [(0, [1, 2])]
        """
        return _routing.broadcast(self, name)

    def concat(self, other: Stream, name: str = "Concat") -> Stream:
        """This stream and ``other`` merged.

        >>> import pytimely as pt
        >>> pt.example(lambda s: s.to_stream([1]).concat(s.to_stream([2])).capture()).extract()
        [(0, [1, 2])]
        """
        return _routing.concat(self, other, name)

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

    def partition(
        self, parts: int, route: Callable[[Any], tuple[int, Any]], name: str | None = None
    ) -> list[Stream]:
        """``parts`` streams: ``route(record) -> (index, value)`` sends ``value`` to stream
        ``index``.

        >>> import pytimely as pt
        >>> def build(s):
        ...     parts = s.to_stream(range(5)).partition(2, lambda x: (x % 2, x))
        ...     return [p.capture() for p in parts]
        >>> [c.extract() for c in pt.example(build)]
        [[(0, [0, 2, 4])], [(0, [1, 3])]]
        """
        return _routing.partition(self, parts, route, name)

    def branch(
        self, condition: Callable[[Any, Any], bool], name: str | None = None
    ) -> tuple[Stream, Stream]:
        """``(false_stream, true_stream)``, split by ``condition(time, record)``.

        >>> import pytimely as pt
        >>> def build(s):
        ...     small, big = s.to_stream(range(4)).branch(lambda t, x: x >= 2)
        ...     return small.capture(), big.capture()
        >>> [c.extract() for c in pt.example(build)]
        [[(0, [0, 1])], [(0, [2, 3])]]
        """
        return _routing.branch(self, condition, name)

    def ok_err(
        self, logic: Callable[[Any], tuple[bool, Any]], name: str | None = None
    ) -> tuple[Stream, Stream]:
        """``(oks, errs)``: ``logic(record) -> (is_ok, value)`` decides where ``value`` goes.

        >>> import pytimely as pt
        >>> def build(s):
        ...     oks, errs = s.to_stream(["1", "x"]).ok_err(lambda r: (r.isdigit(), r))
        ...     return oks.capture(), errs.capture()
        >>> [c.extract() for c in pt.example(build)]
        [[(0, ['1'])], [(0, ['x'])]]
        """
        return _routing.ok_err(self, logic, name)

    # -- per-time aggregation (operators/aggregation.py) -----------------------------------

    def accumulate(
        self, init: Callable[[], Any], fold: Callable[[Any, Any], Any], name: str | None = None
    ) -> Stream:
        """Per time, ``acc = fold(acc, batch)`` from ``init()``; ``acc`` is emitted when the
        time completes.

        >>> import pytimely as pt
        >>> def build(s):
        ...     return s.to_stream([1, 2, 3]).accumulate(int, lambda a, b: a + sum(b)).capture()
        >>> pt.example(build).extract()
        [(0, [6])]
        """
        return _aggregation.accumulate(self, init, fold, name)

    def count(self, name: str = "Count") -> Stream:
        """Per time, the number of records (one record per non-empty time).

        >>> import pytimely as pt
        >>> pt.example(lambda s: s.to_stream("abc").count().capture()).extract()
        [(0, [3])]
        """
        return _aggregation.count(self, name)

    def aggregate(
        self,
        fold: Callable[[Any, Any, Any], Any],
        emit: Callable[[Any, Any], Any],
        init: Callable[[], Any] = int,
        key: Callable[[Any], Any] | None = None,
        name: str | None = None,
    ) -> Stream:
        """Keyed per-time aggregation of ``(key, value)`` records, exchanged by key: per time
        and key ``agg = fold(key, value, agg)`` from ``init()``; once the time completes, each
        key emits ``emit(key, agg)``.

        >>> import pytimely as pt
        >>> def build(s):
        ...     pairs = s.to_stream([("a", 1), ("b", 2), ("a", 3)])
        ...     return pairs.aggregate(lambda k, v, acc: acc + v, lambda k, acc: (k, acc)).capture()
        >>> pt.example(build).extract()
        [(0, [('a', 4), ('b', 2)])]
        """
        return _aggregation.aggregate(self, fold, emit, init, key, name)

    def delay(self, f: Callable[[Any, Any], Any], name: str | None = None) -> Stream:
        """Move each record to the time ``f(record, time)`` (not earlier than ``time``),
        emitted once that time is complete.

        >>> import pytimely as pt
        >>> pt.example(lambda s: s.to_stream([1, 3]).delay(lambda x, t: t + x).capture()).extract()
        [(1, [1]), (3, [3])]
        """
        return _aggregation.delay(self, f, name)

    def reclock(self, clock: Stream, name: str = "Reclock") -> Stream:
        """This stream's records re-timed to the times of ``clock``'s records: a record at ``t``
        comes out at the first clock time ``>= t``, once that time is complete.

        >>> import pytimely as pt
        >>> def build(s):
        ...     data = s.to_stream(["x"]).delay(lambda r, t: 1)
        ...     ticks = s.to_stream([None]).delay(lambda r, t: 5)
        ...     return data.reclock(ticks).capture()
        >>> pt.example(build).extract()
        [(5, ['x'])]
        """
        return _aggregation.reclock(self, clock, name)

    def tumbling_average(
        self,
        width: int,
        key: Callable[[Any], Any] | None = None,
        value: Callable[[Any], Any] | None = None,
        event_time: Callable[[Any], int] | None = None,
        offset: int = 0,
        name: str = "TumblingAverage",
    ) -> Stream:
        """The average of each tumbling window of ``width`` time units, at the window's end
        (per key with ``key``); see :mod:`pytimely.dataflow.operators.windowing.tumbling_average`.

        >>> import pytimely as pt
        >>> pt.example(lambda s: s.to_stream([1, 2]).tumbling_average(10).capture()).extract()
        [(10, [1.5])]
        """
        return _tumbling_average.tumbling_average(self, width, key, value, event_time, offset, name)

    # -- observing progress (operators/probe.py, operators/capture.py) -----------------------

    def probe(self, name: str = "Probe") -> ProbeHandle:
        """A :class:`~pytimely.ProbeHandle` reporting this stream's frontier: what times may
        still appear on it.

        >>> import pytimely as pt
        >>> pt.example(lambda s: s.to_stream([1]).probe()).done()
        True
        """
        return _probe.probe(self, name)

    def probe_with(self, handle: ProbeHandle, name: str = "Probe") -> Stream:
        """Add this stream's frontier to ``handle`` (one handle can watch several streams);
        returns the stream unchanged.

        >>> import pytimely as pt
        >>> handle = pt.ProbeHandle()
        >>> _ = pt.example(lambda s: s.to_stream([1]).probe_with(handle))
        >>> handle.done()
        True
        """
        return _probe.probe_with(self, handle, name)

    def capture(self, name: str = "Capture") -> CaptureHandle:
        """A :class:`~pytimely.CaptureHandle` recording every batch and frontier change;
        ``extract()`` gives ``[(time, sorted records)]`` once the stream is complete.

        >>> import pytimely as pt
        >>> pt.example(lambda s: s.to_stream([2, 1]).capture()).extract()
        [(0, [1, 2])]
        """
        return _capture.capture(self, name)

    def capture_into(self, writer: Any, name: str = "Capture", close: bool = True) -> None:
        """Push every frontier change and batch into ``writer.push(event)`` (a capture file or
        socket writer), closing it (with ``close``) once the stream is complete.

        >>> import pytimely as pt
        >>> class Printer:
        ...     def push(self, event): print(type(event).__name__)
        >>> pt.example(lambda s: s.to_stream([1]).capture_into(Printer()))
        Messages
        Progress
        """
        _capture.capture_into(self, writer, name, close)

    # -- custom operators (operators/generic.py, operators/notify.py) ------------------------

    def unary(self, pact: Pact, name: str, constructor: Callable[..., Any]) -> Stream:
        """A custom operator with one input and one output, woken by data only:
        ``constructor(capability, info)`` returns ``logic(input, output)``.

        >>> import pytimely as pt
        >>> def ctor(cap, info):
        ...     cap.drop()  # it only forwards: messages carry their own capability
        ...     def logic(inp, out):
        ...         for ref, batch in inp:
        ...             out.give_batch(ref, [x * 2 for x in batch])
        ...     return logic
        >>> pt.example(lambda s: s.to_stream([1, 2]).unary(pt.Pipeline, "Double", ctor).capture(),
        ...            ).extract()
        [(0, [2, 4])]
        """
        return _generic.unary(self, pact, name, constructor)

    def unary_frontier(
        self,
        pact: Pact,
        name: str,
        constructor: Callable[..., Any],
        interest: FrontierInterest | None = None,
    ) -> Stream:
        """Like :meth:`unary`, also woken when the input frontier changes (per ``interest``,
        default ``FrontierInterest.ALWAYS``).

        >>> import pytimely as pt
        >>> def ctor(cap, info):
        ...     seen = []
        ...     def logic(inp, out):
        ...         for _ref, batch in inp:
        ...             seen.extend(batch)
        ...         if cap.valid and inp.frontier.is_empty():  # input complete: emit and let go
        ...             out.give(cap, len(seen))
        ...             cap.drop()
        ...     return logic
        >>> def build(s):
        ...     return s.to_stream("abc").unary_frontier(pt.Pipeline, "Len", ctor).capture()
        >>> pt.example(build).extract()
        [(0, [3])]
        """
        return _generic.unary_frontier(self, pact, name, constructor, interest)

    def binary(
        self, other: Stream, pact1: Pact, pact2: Pact, name: str, constructor: Callable[..., Any]
    ) -> Stream:
        """A custom operator reading this stream and ``other``, woken by data only:
        ``constructor(capability, info)`` returns ``logic(input1, input2, output)``.

        >>> import pytimely as pt
        >>> def ctor(cap, info):
        ...     cap.drop()
        ...     def logic(left, right, out):
        ...         for ref, batch in left:
        ...             out.give_batch(ref, [("L", x) for x in batch])
        ...         for ref, batch in right:
        ...             out.give_batch(ref, [("R", x) for x in batch])
        ...     return logic
        >>> def build(s):
        ...     return s.to_stream([1]).binary(s.to_stream([2]), pt.Pipeline, pt.Pipeline,
        ...                                    "Tag", ctor).capture()
        >>> pt.example(build).extract()
        [(0, [('L', 1), ('R', 2)])]
        """
        return _generic.binary(self, other, pact1, pact2, name, constructor)

    def binary_frontier(
        self,
        other: Stream,
        pact1: Pact,
        pact2: Pact,
        name: str,
        constructor: Callable[..., Any],
        interest: FrontierInterest | None = None,
    ) -> Stream:
        """Like :meth:`binary`, also woken when an input frontier changes (per ``interest``,
        default ``FrontierInterest.ALWAYS``).

        >>> import pytimely as pt
        >>> def ctor(cap, info):
        ...     total = [0]
        ...     def logic(left, right, out):
        ...         for _ref, batch in [*left, *right]:
        ...             total[0] += sum(batch)
        ...         if cap.valid and left.frontier.is_empty() and right.frontier.is_empty():
        ...             out.give(cap, total[0])
        ...             cap.drop()
        ...     return logic
        >>> def build(s):
        ...     return s.to_stream([1]).binary_frontier(s.to_stream([2]), pt.Pipeline,
        ...                                             pt.Pipeline, "Sum", ctor).capture()
        >>> pt.example(build).extract()
        [(0, [3])]
        """
        return _generic.binary_frontier(self, other, pact1, pact2, name, constructor, interest)

    def sink(
        self,
        pact: Pact,
        name: str,
        logic: Callable[..., Any],
        interest: FrontierInterest | None = None,
    ) -> None:
        """End the stream in a custom operator with no output, given its ``logic(input)``
        directly (a sink holds no capability); woken per ``interest`` (default ``ALWAYS``).

        >>> import pytimely as pt
        >>> def show(inp):
        ...     for t, batch in inp.drain_batches():
        ...         print(t, batch)
        >>> pt.example(lambda s: s.to_stream([7]).sink(pt.Pipeline, "Show", show))
        0 [7]
        """
        if interest is None:
            _generic.sink(self, pact, name, logic)
        else:
            _generic.sink(self, pact, name, logic, interest)

    def unary_notify(
        self,
        pact: Pact,
        name: str,
        init: Iterable[Any],
        logic: Callable[[Any, Any, Notificator], Any],
        per_call: int | None = None,
    ) -> Stream:
        """A custom operator with Naiad-style notifications: ``logic(input, output,
        notificator)``; ``init`` are times to be notified at from the start.

        >>> import pytimely as pt
        >>> def logic(inp, out, notificator):
        ...     for ref, batch in inp:
        ...         notificator.notify_at(ref.retain())
        ...     for cap in notificator:  # times the input can no longer produce
        ...         out.give(cap, f"done {cap.time}")
        ...         cap.drop()
        >>> def build(s):
        ...     return s.to_stream("ab").unary_notify(pt.Pipeline, "Done", [], logic).capture()
        >>> pt.example(build).extract()
        [(0, ['done 0'])]
        """
        return _notify.unary_notify(self, pact, name, init, logic, per_call)

    def binary_notify(
        self,
        other: Stream,
        pact1: Pact,
        pact2: Pact,
        name: str,
        init: Iterable[Any],
        logic: Callable[[Any, Any, Any, Notificator], Any],
        per_call: int | None = None,
    ) -> Stream:
        """Like :meth:`unary_notify` with two inputs: ``logic(input1, input2, output,
        notificator)``, notified once both input frontiers have passed a time.

        >>> import pytimely as pt
        >>> def logic(left, right, out, notificator):
        ...     for ref, batch in [*left, *right]:
        ...         notificator.notify_at(ref.retain())
        ...     for cap in notificator:
        ...         out.give(cap, cap.time)
        ...         cap.drop()
        >>> def build(s):
        ...     return s.to_stream([1]).binary_notify(s.to_stream([2]), pt.Pipeline, pt.Pipeline,
        ...                                           "Both", [], logic).capture()
        >>> pt.example(build).extract()
        [(0, [0])]
        """
        return _notify.binary_notify(self, other, pact1, pact2, name, init, logic, per_call)

    # -- event time, keyed state, joins and windows -------------------------------------------

    def assign_watermarks(
        self, name: str = "AssignWatermarks", stats: WatermarkStats | None = None
    ) -> WStream:
        """This stream as a watermarked one (data unchanged, the input frontier emitted as
        watermarks); see :mod:`pytimely.dataflow.operators.watermarks`.

        >>> import pytimely as pt
        >>> pt.example(lambda s: s.to_stream([1]).assign_watermarks().stream.capture()).extract()
        [(0, [1]), (9223372036854775807, [Watermark(time=9223372036854775807, src=0, dst=0)])]
        """
        return _watermarks.assign_watermarks(self, name, stats)

    def stateful_map(
        self,
        init: Callable[[], Any],
        f: Callable[[Any, Any], tuple[Any, Any]],
        key: Callable[[Any], Any] | None = None,
        name: str = "StatefulMap",
        stats: StateStats | None = None,
    ) -> Stream:
        """Per key, ``state, out = f(state, value)`` from ``init()``, in time order; ``(key,
        out)`` records (see :func:`~pytimely.dataflow.operators.keyed.stateful_map`).

        >>> import pytimely as pt
        >>> def running_total(total, value):
        ...     return total + value, total + value
        >>> def build(s):
        ...     return s.to_stream([("a", 1), ("a", 2)]).stateful_map(int, running_total).capture()
        >>> pt.example(build).extract()
        [(0, [('a', 1), ('a', 3)])]
        """
        return _keyed.stateful_map(self, init, f, key, name, stats)

    def keyed_process(
        self,
        process: Callable[[KeyedContext, Any, Any], None],
        on_timer: Callable[[KeyedContext, Any, Any], None] | None = None,
        key: Callable[[Any], Any] | None = None,
        name: str = "KeyedProcess",
        stats: StateStats | None = None,
    ) -> Stream:
        """Per key, ``process(ctx, key, value)`` with keyed state, output and timers in ``ctx``
        (see :func:`~pytimely.dataflow.operators.keyed.keyed_process`).

        >>> import pytimely as pt
        >>> def running_total(ctx, key, value):
        ...     ctx.state = (ctx.state or 0) + value
        ...     ctx.emit((key, ctx.state))
        >>> def build(s):
        ...     return s.to_stream([("a", 1), ("a", 2)]).keyed_process(running_total).capture()
        >>> pt.example(build).extract()
        [(0, [('a', 1), ('a', 3)])]
        """
        return _keyed.keyed_process(self, process, on_timer, key, name, stats)

    def join(
        self,
        other: Stream,
        key: Callable[[Any], Any] | None = None,
        other_key: Callable[[Any], Any] | None = None,
        within: int | None = None,
        name: str = "Join",
        stats: StateStats | None = None,
    ) -> Stream:
        """Equi-join with ``other`` on the key: ``(key, left, right)`` for every matching pair
        (see :func:`~pytimely.dataflow.operators.join.join`).

        >>> import pytimely as pt
        >>> def build(s):
        ...     names = s.to_stream([(1, "ann")])
        ...     return names.join(s.to_stream([(1, "paris")])).capture()
        >>> pt.example(build).extract()
        [(0, [(1, 'ann', 'paris')])]
        """
        return _join.join(self, other, key, other_key, within, name, stats)

    def window_fold(
        self,
        windower: Windower,
        init: Callable[[], Any],
        fold: Callable[[Any, Any], Any],
        key: Any = None,
        event_time: Any = None,
        lateness: int = 0,
        value: str | None = None,
        name: str = "WindowFold",
    ) -> Windowed:
        """Per key and window, ``acc = fold(acc, value)`` from ``init()``: ``(key, start, end,
        acc)`` at timestamp ``end + lateness`` (see
        :func:`~pytimely.dataflow.operators.windowing.window_fold`).

        >>> import pytimely as pt
        >>> def build(s):
        ...     clicks = s.to_stream([("ann", 3), ("ann", 4)])
        ...     return clicks.window_fold(pt.Tumbling(10), int, lambda a, v: a + v).output.capture()
        >>> pt.example(build).extract()
        [(10, [('ann', 0, 10, 7)])]
        """
        return _windowing.window_fold(
            self, windower, init, fold, key, event_time, lateness, value, name
        )

    def window_count(
        self,
        windower: Windower,
        key: Any = None,
        event_time: Any = None,
        lateness: int = 0,
        name: str = "WindowCount",
    ) -> Windowed:
        """Per key and window, the number of records: ``(key, start, end, count)``.

        >>> import pytimely as pt
        >>> def build(s):
        ...     clicks = s.to_stream([("ann", 1), ("bob", 2)])
        ...     return clicks.window_count(pt.Tumbling(10)).output.capture()
        >>> pt.example(build).extract()
        [(10, [('ann', 0, 10, 1), ('bob', 0, 10, 1)])]
        """
        return _windowing.window_count(self, windower, key, event_time, lateness, name)

    def window_collect(
        self,
        windower: Windower,
        key: Any = None,
        event_time: Any = None,
        lateness: int = 0,
        name: str = "WindowCollect",
    ) -> Windowed:
        """Per key and window, the values in event-time order: ``(key, start, end, values)``.

        >>> import pytimely as pt
        >>> def build(s):
        ...     clicks = s.to_stream([("ann", 1), ("ann", 2)])
        ...     return clicks.window_collect(pt.Tumbling(10)).output.capture()
        >>> pt.example(build).extract()
        [(10, [('ann', 0, 10, [1, 2])])]
        """
        return _windowing.window_collect(self, windower, key, event_time, lateness, name)

    def window_join(
        self,
        other: Stream,
        windower: Windower,
        key: Any = None,
        other_key: Any = None,
        event_time: Any = None,
        other_event_time: Any = None,
        lateness: int = 0,
        name: str = "WindowJoin",
    ) -> WindowJoined:
        """Per key and window, every pair of a record of this stream and one of ``other``:
        ``(key, start, end, left, right)``.

        >>> import pytimely as pt
        >>> def build(s):
        ...     left, right = s.to_stream([("ann", "x")]), s.to_stream([("ann", "y")])
        ...     return left.window_join(right, pt.Tumbling(10)).output.capture()
        >>> pt.example(build).extract()
        [(10, [('ann', 0, 10, 'x', 'y')])]
        """
        return _windowing.window_join(
            self, other, windower, key, other_key, event_time, other_event_time, lateness, name
        )

    def __repr__(self) -> str:
        return f"<Stream from {self.source} in {self.scope.name!r}>"
