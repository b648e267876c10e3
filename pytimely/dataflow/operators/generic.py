"""Generic operator builders: the way every other operator is made.

An operator is a *constructor* ``ctor(capabilities, info) -> logic``: it receives its initial
capabilities (one per output, at the minimum time; ``unary``-style builders pass just the one)
and an :class:`~pytimely.dataflow.operator.OperatorInfo`, and returns the *logic*, called
whenever the operator is scheduled as ``logic(*inputs, *outputs)``.

* ``unary`` / ``binary``: one or two inputs, one output; not woken by frontier changes
  (``FrontierInterest.NEVER``) — for operators that react to data only.
* ``unary_frontier`` / ``binary_frontier``: the same, woken by frontier changes
  (``ALWAYS`` by default, or ``interest=FrontierInterest.IF_CAPABILITY``).
* ``sink``: one input, no output.  ``source``: no input, one output.
* :class:`OperatorBuilder`: any number of inputs and outputs, explicit connectivity (which input
  reaches which output, with which summaries, or not at all) and per-input interest;
  ``OperatorBuilder.raw`` for the few library operators driven from outside their logic.
* ``forward_batches``: the one-input operator that forwards every batch at its own time
  (optionally transformed or inspected) — map, filter, exchange and friends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ...errors import GraphError
from ...progress.operate import FrontierInterest
from ..inline import InlinePush, inline_depth_after
from ..operator import OperatorCore, OperatorInfo
from ..pacts import Pact, Pipeline

if TYPE_CHECKING:
    from ..capability import Capability
    from ..ports import InputPort, OutputPort
    from ..scope import Scope
    from ..stream import Stream

__all__ = [
    "OperatorBuilder",
    "forward_batches",
    "unary",
    "unary_frontier",
    "binary",
    "binary_frontier",
    "sink",
    "source",
]

_IDENTITY_ROWS: dict[tuple, list[list[list[Any]]]] = {}


class OperatorBuilder:
    """Build an operator with any number of inputs and outputs.

    >>> import pytimely as pt
    >>> def ctor(caps, info):
    ...     for cap in caps:
    ...         cap.drop()  # records go out with their message's capability
    ...     def logic(inp, out_even, out_odd):
    ...         for ref, batch in inp:
    ...             out_even.give_batch(ref, [x for x in batch if x % 2 == 0])
    ...             out_odd.give_batch(ref, [x for x in batch if x % 2])
    ...     return logic
    >>> def build(scope):
    ...     b = pt.OperatorBuilder("Split", scope)
    ...     b.new_input(scope.to_stream(range(5)), pt.Pipeline)
    ...     b.new_output(), b.new_output()
    ...     evens, odds = b.build(ctor)
    ...     return evens.capture(), odds.capture()
    >>> [c.extract() for c in pt.example(build)]
    [[(0, [0, 2, 4])], [(0, [1, 3])]]
    """

    def __init__(self, name: str, scope: Scope) -> None:
        self.name = name
        self.scope = scope
        self._inputs: list[tuple[Stream, Pact, Any, FrontierInterest]] = []
        self._outputs = 0
        self._built = False

    def new_input(
        self,
        stream: Stream,
        pact: Pact = Pipeline,
        connection: Sequence[Any] | None = None,
        interest: FrontierInterest = FrontierInterest.ALWAYS,
    ) -> int:
        """Add an input; returns its index.

        ``connection`` gives, per output, the path summaries from this input to it: a list of
        summaries, a single summary, or ``None`` for no path.  Default: the identity to every
        output (including outputs added later).
        """
        stream._check_scope(self.scope, f"operator {self.name!r}")
        self._inputs.append((stream, pact, connection, FrontierInterest(interest)))
        return len(self._inputs) - 1

    def new_output(self) -> int:
        """Add an output; returns its index."""
        self._outputs += 1
        return self._outputs - 1

    def _summary_rows(self) -> list[list[list[Any]]]:
        domain = self.scope.domain
        identity = domain.identity()
        if all(c is None for _s, _p, c, _i in self._inputs):
            # The common all-identity shape is shared between operators (never mutated).
            key = (len(self._inputs), self._outputs, identity)
            rows = _IDENTITY_ROWS.get(key)
            if rows is None:
                rows = [[[identity] for _ in range(self._outputs)] for _ in self._inputs]
                if len(_IDENTITY_ROWS) < 64:
                    _IDENTITY_ROWS[key] = rows
            return rows
        rows = []
        for _stream, _pact, connection, _i in self._inputs:
            if connection is None:
                rows.append([[identity] for _ in range(self._outputs)])
                continue
            if len(connection) != self._outputs:
                raise GraphError(
                    f"operator {self.name!r}: connection must name every output "
                    f"({self._outputs}), got {len(connection)}"
                )
            row = []
            for cell in connection:
                if cell is None:
                    row.append([])
                elif isinstance(cell, (list, tuple)) and not _is_summary(cell):
                    row.append([domain.summary(s) for s in cell])
                else:
                    row.append([domain.summary(cell)])
            rows.append(row)
        return rows

    def build(
        self,
        constructor: Callable[[list[Any], OperatorInfo], Callable[..., Any]],
        *,
        _inline: Callable[[OperatorCore], Callable[[Any, Any], None]] | None = None,
        _inline_depth: int = 0,
    ) -> list[Stream]:
        """Create the operator; returns its output streams.  (``_inline``: the library's
        operators that forward inline give the delivery point of their one input, see
        :func:`forward_batches`.)"""
        if self._built:
            raise GraphError(f"operator {self.name!r} was already built")
        self._built = True
        scope = self.scope
        core = OperatorCore(
            scope,
            self.name,
            len(self._inputs),
            self._outputs,
            self._summary_rows(),
            [i for _s, _p, _c, i in self._inputs],
        )
        worker = scope.worker
        if _inline is not None:
            core.inline_depth = _inline_depth
        for index, (stream, pact, _c, _i) in enumerate(self._inputs):
            if _inline is not None:
                push = _inline(core)
            else:
                push = pact.connect(worker, core.input_ports[index].push, self.name)
            weight = worker.peers if pact.weight_per_peer else 1
            stream._connect((core.index, index), push, weight, repr(pact))
        caps = core.mint_initial()
        logic = constructor(caps, OperatorInfo(core))
        core.set_logic(logic, (*core.input_ports, *core.output_ports))
        scope.install_child(core.index, core)
        return [
            scope.stream((core.index, o), core.output_ports[o].tee) for o in range(self._outputs)
        ]

    @staticmethod
    def raw(
        scope: Scope,
        name: str,
        inputs: int = 0,
        outputs: int = 1,
        summary: list[list[list[Any]]] | None = None,
        interest: list[FrontierInterest] | None = None,
    ) -> OperatorCore:
        """The operator runtime itself, installed in ``scope``: for the few library operators
        driven from outside their logic (input handles, feedback, replay).

        ``summary[i][o]`` lists the path summaries from input ``i`` to output ``o``
        (default: the identity everywhere); ``interest`` one :class:`FrontierInterest` per
        input (default ``NEVER``).  The caller then, before the scope is built:

        * connects any inputs itself (``core.input_ports[i].push`` is the delivery point);
        * sets the logic with ``core.set_logic(logic)`` — called with no arguments, so it
          closes over the ports it uses (without logic, input is discarded);
        * takes the initial capabilities with ``core.mint_initial()`` (already counted, one
          per output at the minimum time), or leaves them to a handle that accounts for them;
        * uses ``core.output_ports[o].tee`` as the output stream's fan-out.

        Everything else — capability checks, counting, atomic reports — is as for ``build``.
        """
        if summary is None:
            identity = scope.domain.identity()
            summary = [[[identity] for _ in range(outputs)] for _ in range(inputs)]
        if interest is None:
            interest = [FrontierInterest.NEVER] * inputs
        core = OperatorCore(scope, name, inputs, outputs, summary, interest)
        # Driven from outside its logic: what it sends may arrive outside any invocation, so
        # nothing downstream runs inline (an input handle lifts this: ``new_input``).
        core.inline_depth = -1
        scope.install_child(core.index, core)
        return core


def _is_summary(cell: Any) -> bool:
    # ProductSummary is a tuple subclass: a single summary, not a list of them.
    from ...order import ProductSummary

    return isinstance(cell, ProductSummary)


class BatchTransform:
    """A batch transform that ``forward_batches`` runs as the operator's whole logic.

    Subclasses hold what they need in slots and define ``apply(batch) -> batch``.  The bound
    method ``run`` is then the logic itself: one small object per operator, where a closure
    for the logic plus a closure for the transform cost four times the memory (a million
    operators are a common size).  A subclass whose ``apply`` returns as many records as it
    is given (``map``) sets ``inline = True``: on a pipeline it then runs inline (see
    :func:`forward_batches`).
    """

    __slots__ = ()
    inline = False

    def apply(self, batch: Any) -> Any:
        """The batch to forward in place of ``batch``."""
        raise NotImplementedError

    def run(self, inp: InputPort, out: OutputPort) -> None:
        """Forward ``apply(batch)`` at the batch's own time, for every batch taken."""
        forward = out.forward
        apply = self.apply
        for t, batch in inp.drain_batches():
            forward(t, apply(batch))


class _CallTransform:
    """``transform(batch)`` forwarded, for a plain callable (its ``run`` calls the callable
    directly: a BatchTransform's ``apply`` would add a frame per batch)."""

    __slots__ = ("_transform",)

    def __init__(self, transform: Callable[[Any], Any]) -> None:
        self._transform = transform

    def run(self, inp: InputPort, out: OutputPort) -> None:
        forward = out.forward
        transform = self._transform
        for t, batch in inp.drain_batches():
            forward(t, transform(batch))


class _Inspect:
    """``inspect(time, batch)`` before forwarding the batch unchanged."""

    __slots__ = ("_inspect",)

    def __init__(self, inspect: Callable[[Any, Any], Any]) -> None:
        self._inspect = inspect

    def run(self, inp: InputPort, out: OutputPort) -> None:
        forward = out.forward
        inspect = self._inspect
        for t, batch in inp.drain_batches():
            inspect(t, batch)
            forward(t, batch)


def _forward_unchanged(inp: InputPort, out: OutputPort) -> None:
    """Every batch forwarded unchanged: one function for every such operator."""
    forward = out.forward
    for t, batch in inp.drain_batches():
        forward(t, batch)


def forward_batches(
    stream: Stream,
    pact: Pact,
    name: str,
    transform: Callable[[Any], Any] | BatchTransform | None = None,
    inspect: Callable[[Any, Any], Any] | None = None,
) -> Stream:
    """One input, one output: every batch goes out at its own time, as ``transform(batch)``
    (default: unchanged), after ``inspect(time, batch)`` if given.

    ``transform`` may be a :class:`BatchTransform`, whose ``run`` is then the logic (the
    leanest form, used by map and filter).  The operator drops its capability at once and is
    woken by data only; it forwards with ``OutputPort.forward`` (legal: the identity summary
    makes each message's own time valid on the output).

    **Inline.**  On a ``Pipeline``, an operator that passes batches on unchanged, inspects
    them, or maps them record for record (a :class:`BatchTransform` with ``inline = True``)
    runs inside the call of the operator that sends to it, up to :data:`INLINE_CHAIN` in a
    row, when that operator sends within its own invocations or is an input handle's (not a
    scope input or a feedback, see :mod:`pytimely.dataflow.inline`): no queue, no
    scheduling, no counts of its own (its scope counts what is sent to it as already at its
    consumers), about a microsecond and a half less per step it has data.
    It is still an operator of the graph, with its name, address and frontier, and a failure
    of its function names it; once observed (statistics, the event log) it forwards in
    invocations of its own, so that they are timed and logged (docs/internals.md).

    >>> import pytimely as pt
    >>> def build(scope):
    ...     tens = scope.to_stream([1, 2]).map(lambda x: 10 * x)
    ...     return scope.inline_depth(tens.source), tens.capture()
    >>> depth, cap = pt.example(build)
    >>> depth, cap.extract()  # the first inline operator of its chain
    (1, [(0, [10, 20])])
    """
    if inspect is not None and transform is not None:
        raise ValueError("forward_batches: give transform or inspect, not both")
    inline = pact is Pipeline and (
        inspect is not None or transform is None or getattr(transform, "inline", False)
    )
    depth = inline_depth_after(stream) if inline else None
    if depth is not None:
        apply = transform.apply if isinstance(transform, BatchTransform) else None
        made: list[InlinePush] = []

        def push_of(core: OperatorCore) -> Callable[[Any, Any], None]:
            made.append(InlinePush(core, apply, inspect))
            return made[0].push

        def inline_ctor(caps: list[Capability], info: OperatorInfo) -> Callable[..., None]:
            caps[0].drop()
            return made[0].run  # forwards what waited while observed

        b = OperatorBuilder(name, stream.scope)
        b.new_input(stream, pact, interest=FrontierInterest.NEVER)
        b.new_output()
        return b.build(inline_ctor, _inline=push_of, _inline_depth=depth)[0]
    if inspect is not None:
        logic: Callable[[InputPort, OutputPort], None] = _Inspect(inspect).run
    elif isinstance(transform, BatchTransform):
        logic = transform.run
    elif transform is not None:
        logic = _CallTransform(transform).run
    else:
        logic = _forward_unchanged

    def ctor(cap: Capability, info: OperatorInfo) -> Callable[..., None]:
        cap.drop()
        return logic

    return unary(stream, pact, name, ctor)


def _or_always(interest: FrontierInterest | None) -> FrontierInterest:
    """``interest``, or ``ALWAYS`` when not given (``NEVER`` is 0: not a truth test)."""
    return FrontierInterest.ALWAYS if interest is None else interest


def _single(
    stream: Stream, pact: Pact, name: str, ctor: Callable, interest: FrontierInterest
) -> Stream:
    b = OperatorBuilder(name, stream.scope)
    b.new_input(stream, pact, interest=interest)
    b.new_output()
    return b.build(lambda caps, info: ctor(caps[0], info))[0]


def unary(stream: Stream, pact: Pact, name: str, constructor: Callable[..., Any]) -> Stream:
    """One input, one output; woken only by data or activation.  ``constructor(cap, info)``
    returns ``logic(input, output)``.

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
    return _single(stream, pact, name, constructor, FrontierInterest.NEVER)


def unary_frontier(
    stream: Stream,
    pact: Pact,
    name: str,
    constructor: Callable[..., Any],
    interest: FrontierInterest | None = None,
) -> Stream:
    """Like :func:`unary`, also woken when the input frontier changes (per ``interest``,
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
    return _single(stream, pact, name, constructor, _or_always(interest))


def _double(
    s1: Stream,
    s2: Stream,
    p1: Pact,
    p2: Pact,
    name: str,
    ctor: Callable,
    interest: FrontierInterest,
) -> Stream:
    b = OperatorBuilder(name, s1.scope)
    b.new_input(s1, p1, interest=interest)
    b.new_input(s2, p2, interest=interest)
    b.new_output()
    return b.build(lambda caps, info: ctor(caps[0], info))[0]


def binary(
    stream: Stream,
    other: Stream,
    pact1: Pact,
    pact2: Pact,
    name: str,
    constructor: Callable[..., Any],
) -> Stream:
    """Two inputs, one output; ``logic(input1, input2, output)``; woken only by data.

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
    return _double(stream, other, pact1, pact2, name, constructor, FrontierInterest.NEVER)


def binary_frontier(
    stream: Stream,
    other: Stream,
    pact1: Pact,
    pact2: Pact,
    name: str,
    constructor: Callable[..., Any],
    interest: FrontierInterest | None = None,
) -> Stream:
    """Like :func:`binary`, also woken when an input frontier changes (per ``interest``,
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
    return _double(stream, other, pact1, pact2, name, constructor, _or_always(interest))


def sink(
    stream: Stream,
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
    b = OperatorBuilder(name, stream.scope)
    b.new_input(stream, pact, interest=_or_always(interest))
    b.build(lambda caps, info: logic)


def source(scope: Scope, name: str, constructor: Callable) -> Stream:
    """No input, one output: ``constructor(cap, info)`` returns ``logic(output)``.  Use
    ``info.activator()`` to be scheduled again (sources are never woken by data)."""
    b = OperatorBuilder(name, scope)
    b.new_output()
    return b.build(lambda caps, info: constructor(caps[0], info))[0]
