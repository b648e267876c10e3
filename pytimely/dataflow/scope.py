"""Scopes: where a dataflow graph is built, and how nested scopes nest.

A :class:`Scope` is the building-time view of one scope instance: user code adds operators
(each reserves the next child index), connects streams (each connection is an edge for progress
tracking and a pusher for data), and nests scopes with ``region`` (same timestamps) and
``iterative`` (``Product(outer, loop counter)`` timestamps).  When the building function
returns, the scope compiles its graph into a :class:`~pytimely.progress.subgraph.Subgraph`,
which its parent installs as one more child.

Crossing a scope boundary is not an operator: ``stream.enter(inner)`` turns a parent stream into
scope input ``p`` (data are re-stamped with ``to_inner`` and counted as having entered), and
``stream.leave()`` turns an inner stream into scope output ``q`` (re-stamped with ``to_outer``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import GraphError
from ..order import INT, ProductDomain, to_inner
from ..order import summarize as order_summarize
from ..progress.operate import Operate
from ..progress.reachability import Builder
from ..progress.subgraph import Subgraph
from .ports import Tee
from .stream import Stream

if TYPE_CHECKING:
    from .operators.feedback import LoopHandle
    from .operators.input import ActivateCapability, InputHandle, UnorderedHandle
    from .services import WorkerServices

T = TypeVar("T")

__all__ = ["Scope"]


class Scope:
    """A scope under construction (see the module docstring)."""

    def __init__(
        self,
        worker: WorkerServices,
        name: str,
        domain: Any,
        path: tuple[int, ...],
        parent: Scope | None = None,
        index_in_parent: int = 0,
    ) -> None:
        self.worker = worker
        self.name = name
        self.domain = domain
        self.path = path
        self.parent = parent
        self.index_in_parent = index_in_parent
        self._children: list[Operate | None] = [None]
        self._edges: list[tuple[tuple[int, int], tuple[int, int], int]] = []
        self._edge_pacts: list[str] = []  # per edge, its channel's name (for pytimely.graph)
        self._edge_taps: list[Callable[[Any], None]] = []  # per edge, for Subgraph.observe
        self._ingress_tees: list[Tee] = []  # per scope input: fan-out of Source(0, p)
        self._egress_tees: list[Tee] = []  # per scope output: the parent-side fan-out
        self._subgraph: Subgraph | None = None
        self._built = False
        self._progress_channel = worker.allocate_channel()
        self._pre_ingress: list[tuple[int, Any, int]] = []

    # -- identity -------------------------------------------------------------------------

    @property
    def index(self) -> int:
        """This worker's index."""
        return self.worker.index

    @property
    def peers(self) -> int:
        """The number of workers."""
        return self.worker.peers

    def __repr__(self) -> str:
        return f"<scope {self.name!r} at {self.path}, times {self.domain!r}>"

    # -- graph building -------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._built:
            raise GraphError(
                f"scope {self.name!r} is already built; operators must be added inside the "
                "function given to dataflow()/region()/iterative()"
            )

    def reserve_child(self) -> int:
        """The next child index (an operator reserves it when created, so indices follow
        construction order on every worker)."""
        self._check_open()
        self._children.append(None)
        return len(self._children) - 1

    def inline_depth(self, source: tuple[int, int]) -> int:
        """How many operators forwarding inline end at ``source`` (``(operator index, output
        port)``; see :mod:`pytimely.dataflow.inline`): its operator's ``inline_depth`` (0 for
        an ordinary operator, an input handle's or a nested scope), or -1 where what ``source``
        sends may arrive outside any operator's invocation without its operator being woken (a
        scope input, a feedback), which nothing inline may follow."""
        node = source[0]
        if not node:
            return -1
        child = self._children[node]
        return getattr(child, "inline_depth", 0) if child is not None else 0

    def install_child(self, index: int, child: Operate) -> None:
        """Child ``index`` (reserved) is ``child``; every reserved index must be installed
        before the scope is built."""
        self._children[index] = child

    def add_edge(
        self,
        source: tuple[int, int],
        target: tuple[int, int],
        weight: int = 1,
        pact: str = "Pipeline",
        tap: Callable[[Any], None] | None = None,
    ) -> None:
        """An edge from ``(node, output)`` to ``(node, input)``, counted ``weight`` times (see
        ``Pact.weight_per_peer``); ``pact`` names its channel, to describe the graph
        (:mod:`pytimely.graph`); ``tap`` lets an observer wrap the edge's push (see
        ``Tee.add``).  Streams call this when connected."""
        self._check_open()
        self._edges.append((source, target, weight))
        self._edge_pacts.append(pact)
        self._edge_taps.append(tap if tap is not None else _untappable)

    # -- streams, scope inputs and outputs ---------------------------------------------------

    def stream(self, source: tuple[int, int], tee: Tee) -> Stream:
        """The stream of ``source`` (``(operator index, output port)`` in this scope), whose
        batches ``tee`` fans out: how operators make the streams they return, without
        depending on :class:`~pytimely.dataflow.stream.Stream` (which depends on them).

        >>> import pytimely as pt
        >>> pt.example(lambda s: s.stream((0, 0), pt.dataflow.ports.Tee()))
        <Stream from (0, 0) in 'Dataflow 0'>
        """
        return Stream(self, source, tee)

    def new_scope_input(self, parent_stream: Stream) -> Stream:
        """Make ``parent_stream`` (of the parent scope) scope input ``p``; return the inner
        stream."""
        self._check_open()
        p = len(self._ingress_tees)
        inner_tee = Tee()
        self._ingress_tees.append(inner_tee)
        outer_domain = self.parent.domain
        inner_domain = self.domain
        same = outer_domain == inner_domain

        def ingress(t: Any, batch: Any) -> None:
            ti = t if same else to_inner(outer_domain, inner_domain, t)
            sg = self._subgraph
            if sg is not None:
                sg.record_ingress(p, ti, len(batch))
            else:  # pragma: no cover - data sent before the dataflow was built
                self._pre_ingress.append((p, ti, len(batch)))
            inner_tee.push(ti, batch)

        parent_stream._connect((self.index_in_parent, p), ingress)
        return self.stream((0, p), inner_tee)

    def new_scope_output(self, inner_stream: Stream) -> Stream:
        """Make ``inner_stream`` scope output ``q``; return the parent-side stream."""
        self._check_open()
        q = len(self._egress_tees)
        outer_tee = Tee()
        self._egress_tees.append(outer_tee)
        outer_domain = self.parent.domain
        inner_domain = self.domain
        if outer_domain == inner_domain:
            egress = outer_tee.push
        else:

            def egress(t: Any, batch: Any) -> None:
                outer_tee.push(t[0], batch)

        inner_stream._connect((0, q), egress)
        return self.parent.stream((self.index_in_parent, q), outer_tee)

    # -- user API -------------------------------------------------------------------------

    def new_input(self) -> tuple[InputHandle, Stream]:
        """An input fed from outside the dataflow: ``(InputHandle, Stream)``.

        >>> import pytimely as pt
        >>> def build(scope):
        ...     handle, stream = scope.new_input()
        ...     handle.send("a")
        ...     handle.advance_to(2)  # no more records before time 2
        ...     handle.send("b")
        ...     return stream.capture()
        >>> pt.example(build).extract()
        [(0, ['a']), (2, ['b'])]
        """
        from .operators.input import new_input

        return new_input(self)

    def new_unordered_input(self) -> tuple[tuple[UnorderedHandle, ActivateCapability], Stream]:
        """An input whose times are managed by a capability:
        ``((UnorderedHandle, ActivateCapability), Stream)``.

        >>> import pytimely as pt
        >>> def build(scope):
        ...     (handle, cap), stream = scope.new_unordered_input()
        ...     later = cap.delayed(3)
        ...     cap.drop()
        ...     handle.session(later).give("late")
        ...     later.drop()
        ...     return stream.capture()
        >>> pt.example(build).extract()
        [(3, ['late'])]
        """
        from .operators.input import new_unordered_input

        return new_unordered_input(self)

    def to_stream(self, iterable: Iterable[Any]) -> Stream:
        """A stream of the iterable's records at the minimum time (every worker emits all).

        >>> import pytimely as pt
        >>> pt.example(lambda scope: scope.to_stream("ab").capture()).extract()
        [(0, ['a', 'b'])]
        """
        from .operators.input import to_stream

        return to_stream(self, iterable)

    def replay(self, readers: Any, **options: Any) -> Stream:
        """A stream replaying recorded streams (readers with a non-blocking ``poll()`` of
        capture events); see :func:`pytimely.capture.replay_into`.

        >>> import pytimely as pt
        >>> from pytimely.capture.event import Messages, Progress
        >>> class Recorded:
        ...     def __init__(self, events):
        ...         self.events = events
        ...     def poll(self):
        ...         events, self.events = self.events, []
        ...         return events
        >>> reader = Recorded([Messages(0, ["a"]), Progress([(0, -1)])])
        >>> pt.example(lambda scope: scope.replay(reader).capture()).extract()
        [(0, ['a'])]
        """
        from .operators.replay import replay_into

        return replay_into(readers, self, **options)

    def source(self, name: str, constructor: Callable) -> Stream:
        """An operator with no inputs and one output; see :func:`~.operators.generic.source`.

        >>> import pytimely as pt
        >>> def ctor(cap, info):
        ...     def logic(out):
        ...         if cap.valid:
        ...             out.give(cap, "tick")
        ...             cap.drop()
        ...     return logic
        >>> pt.example(lambda scope: scope.source("Tick", ctor).capture()).extract()
        [(0, ['tick'])]
        """
        from .operators.generic import source

        return source(self, name, constructor)

    def region(self, fn: Callable[[Scope], T], name: str | None = None) -> T:
        """A nested scope with the same timestamps; returns ``fn(inner)``.

        >>> import pytimely as pt
        >>> def build(scope):
        ...     nums = scope.to_stream([1, 2])
        ...     return scope.region(lambda inner: nums.enter(inner).count().leave()).capture()
        >>> pt.example(build).extract()
        [(0, [2])]
        """
        return self._nested(fn, name or "Region", self.domain)

    def iterative(self, fn: Callable[[Scope], T], name: str | None = None) -> T:
        """A nested scope with ``Product(outer, loop counter)`` timestamps; returns
        ``fn(inner)``.

        >>> import pytimely as pt
        >>> def build(scope):
        ...     nums = scope.to_stream([1])
        ...     return scope.iterative(lambda loop: nums.enter(loop).inspect_time(print).leave())
        >>> _ = pt.example(build)
        (0, 0) 1
        """
        return self._nested(fn, name or "Iterative", ProductDomain(self.domain, INT))

    def _nested(self, fn: Callable[[Scope], T], name: str, domain: Any) -> T:
        index = self.reserve_child()
        child = Scope(self.worker, name, domain, self.path + (index,), self, index)
        result = fn(child)
        subgraph = child.build_subgraph()
        self.install_child(index, subgraph)
        return result

    def feedback(self, summary: Any = 1) -> tuple[LoopHandle, Stream]:
        """A loop edge: ``(LoopHandle, Stream)``; data given to the handle (``connect_loop``)
        come back out of the stream with their time advanced by ``summary``.

        >>> import pytimely as pt
        >>> def build(scope):
        ...     handle, looped = scope.feedback(1)
        ...     countdown = scope.to_stream([2]).concat(looped)
        ...     countdown.map(lambda x: x - 1).filter(lambda x: x > 0).connect_loop(handle)
        ...     return countdown.capture()
        >>> pt.example(build).extract()
        [(0, [2]), (1, [1])]
        """
        from .operators.feedback import feedback

        return feedback(self, summary)

    # -- compilation ----------------------------------------------------------------------

    def build_subgraph(self) -> Subgraph:
        """Compile the graph and create the runtime subgraph (validates cycles).

        Called once, by whoever created this scope (the worker for a dataflow, the parent
        scope for a nested one) after the building function returned; the scope is closed to
        new operators afterwards."""
        self._check_open()
        worker = self.worker
        builder = Builder(self.domain)
        n_in = len(self._ingress_tees)
        n_out = len(self._egress_tees)
        builder.add_node(
            0,
            n_out,
            n_in,
            [[[] for _ in range(n_in)] for _ in range(n_out)],
            f"{self.name} (boundary)",
        )
        for index in range(1, len(self._children)):
            child = self._children[index]
            if child is None:
                raise GraphError(f"scope {self.name!r}: child {index} was reserved but not built")
            builder.add_node(index, child.inputs, child.outputs, child.summary(), child.name)
        for source, target, _w in self._edges:
            builder.add_edge(source, target)
        tracker = builder.build()
        outer = self.parent.domain if self.parent is not None else self.domain
        inner = self.domain
        if outer == inner:
            inner_time = outer_time = outer_summary = _identity
        else:

            def inner_time(t: Any) -> Any:
                return to_inner(outer, inner, t)

            def outer_time(t: Any) -> Any:
                return t[0]

            def outer_summary(s: Any) -> Any:
                return order_summarize(outer, inner, s)

        # The subgraph attaches every child (``Operate.attach``): one path for operators and
        # nested scopes alike.
        subgraph = Subgraph(
            self.name,
            self.path,
            self._children,
            self._edges,
            tracker,
            worker.peers,
            inner_time,
            outer_time,
            outer_summary,
            worker.progcaster(self._progress_channel),
            self._edge_pacts,
            self._edge_taps,
        )
        self._subgraph = subgraph
        self._built = True
        subgraph.initialize()  # ends with ``Operate.built`` for every child
        if self._pre_ingress:
            for p, t, k in self._pre_ingress:
                subgraph.record_ingress(p, t, k)
            self._pre_ingress = []
        return subgraph


def _identity(x: Any) -> Any:
    return x


def _untappable(wrap: Any) -> None:
    """The tap of an edge added without one: its batches are not observed."""
