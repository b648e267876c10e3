"""Operators that forward inline: run inside the call of the operator that sends to them.

A ``map``, ``inspect``, ``inspect_batch`` or ``inspect_time`` on a pipeline
(:func:`~pytimely.dataflow.operators.generic.forward_batches`) needs no queue and no
scheduling of its own: its edge's push is an :class:`InlinePush`, which applies the function
and hands the result to the operator's consumers within the sender's call.  The scope counts
what is sent to such an operator as already at its consumers (``Operate.forwards_inline``;
``_count_past_inline`` in :mod:`pytimely.progress.subgraph`), which is where it is once the
sender's invocation ends and its counts are drained.

Operators whose sends happen within their own invocations may feed an inline operator, and so
may an input handle: its operator is woken by every push and drains what the handle sent with
its capability moves, so a ``map`` behind it runs within the caller's ``send`` (a failure of
its function is raised there, naming the ``map``).  Not operators otherwise driven from outside
their logic (feedback, replay: ``inline_depth`` -1) nor a scope's inputs, whose records come
from wherever the parent's sender is.  At most :data:`INLINE_CHAIN` run in a row.
"""

from __future__ import annotations

from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from ..errors import OperatorError
from ..naming import operator_failure
from .ports import InputPort, OutputPort

if TYPE_CHECKING:
    from .operator import OperatorCore

__all__ = ["INLINE_CHAIN", "SEND_INLINE_MAX", "InlineDelivery", "InlinePush", "inline_depth_after"]

#: At most this many operators forwarding inline in a row: each adds a few frames to the stack
#: of the operator that sends into the chain; the next one is an ordinary operator again.
INLINE_CHAIN = 8

#: A batch of more records than this, handed over outside a step (by an input handle's
#: ``send``), waits for the operator's invocation in the next step instead: what an inline
#: chain makes of a large batch often waits in a scheduled operator's queue until then, and
#: outside a step the cyclic collector, free to run, would walk all of it (a keyed count fed
#: 1,000 records per ``send`` spent 15% more).  Small batches, the latency-sensitive ones, go
#: through at once.
SEND_INLINE_MAX = 64


def inline_depth_after(stream: Any) -> int | None:
    """The place in its inline chain of an operator reading ``stream`` that would run
    inline: the depth of ``stream``'s source plus one, or ``None`` where nothing inline may
    follow (a scope input, a feedback) or the chain has :data:`INLINE_CHAIN` already.

    >>> import pytimely as pt
    >>> def build(scope):
    ...     s = scope.to_stream([1])
    ...     return inline_depth_after(s), inline_depth_after(s.map(lambda x: x)), s.capture()
    >>> first, second, _ = pt.example(build)
    >>> first, second
    (1, 2)
    """
    depth = stream.scope.inline_depth(stream.source) + 1
    return depth if 0 < depth <= INLINE_CHAIN else None


class InlineDelivery:
    """The delivery point of an operator that runs inline: ``push`` hands a batch to
    :meth:`_deliver` within the sender's call or, once the operator is observed (statistics,
    the event log), keeps it in ``_deferred`` for the operator's own invocation
    (:meth:`_run_deferred`, from its logic), so that each is timed and logged as an invocation
    of its own, in order.  The records are counted at the operator's consumers meanwhile, which
    only holds their frontier back until they arrive: the safety of progress tracking asks that
    a record be counted at or before where it is, at its time.  So does a batch of more than
    :data:`SEND_INLINE_MAX` records handed over outside a step.  Subclasses say what
    delivering is (:class:`InlinePush`; ``stateful_map``'s ``InlineInTimeOrder``).

    >>> import pytimely as pt
    >>> def build(scope):
    ...     return scope.to_stream([1, 2]).map(lambda x: 10 * x).capture()  # an InlinePush
    >>> pt.example(build).extract()
    [(0, [10, 20])]
    """

    __slots__ = ("_core", "_inp", "_out", "_produced", "_deferred", "_worker")

    def __init__(self, core: OperatorCore) -> None:
        self._core = core
        self._worker = core.scope.worker
        self._inp = core.input_ports[0]
        self._out = core.output_ports[0]
        self._produced = core.shared.produceds[0]
        self._deferred: list[tuple[Any, Any]] = []

    @staticmethod
    def running(frame: FrameType) -> tuple[str, tuple[int, ...]] | None:
        """If ``frame`` is an inline operator's delivery: its name and address (for
        describing, from another thread, what a worker is busy with)."""
        if frame.f_code is not InlineDelivery.push.__code__:
            return None
        me = frame.f_locals.get("self")
        core = getattr(me, "_core", None)
        return None if core is None else (core.name, core.address)

    def push(self, t: Any, batch: Any) -> None:
        """Deliver ``(t, batch)`` now or, once observed (or if it is large and arrives outside
        a step), at the operator's next invocation."""
        inp = self._inp
        if type(inp) is InputPort:
            if len(batch) <= SEND_INLINE_MAX or self._worker.scheduling:
                self._deliver(t, batch)
                return
        else:
            inp.records += len(batch)  # observed: counted as the port's own paths count
            inp.batches += 1
        self._deferred.append((t, batch))
        self._core.activate()

    def _run_deferred(self) -> None:
        """Deliver what waited while observed (nothing otherwise), in order."""
        deferred = self._deferred
        while deferred:
            self._deferred = []
            for t, batch in deferred:
                self._deliver(t, batch)
            deferred = self._deferred

    def _deliver(self, t: Any, batch: Any) -> None:
        raise NotImplementedError

    def _hand_on(self, t: Any, batch: Any, out: Any) -> None:
        """Give ``out``, made of ``batch``, to the consumers, where the scope counted
        ``len(batch)`` records already: a difference goes into the operator's own
        ``produced`` batch, and the operator asks to be scheduled so that the scope drains it
        in the same pass."""
        n = len(out)
        if n != len(batch):
            self._produced.update(t, n - len(batch))
            self._core.activate()
        if n:
            port = self._out
            if type(port) is not OutputPort:  # observed: counted as ``forward`` counts
                port.records += n
                port.batches += 1
            port.tee.push(t, out)  # not ``forward``: the scope counted these records already


class InlinePush(InlineDelivery):
    """The delivery point of an operator that forwards inline: the batch is transformed (or
    inspected) and handed to the operator's consumers within the sender's call.  The scope
    counts what the sender sends here as already at those consumers
    (``OperatorCore.forwards_inline``), so nothing is counted here unless the batch comes
    out with another number of records (:meth:`InlineDelivery._hand_on`).  A failure of the
    user's function names this operator, not the sender.

    >>> import pytimely as pt
    >>> def build(scope):
    ...     return scope.to_stream([1, 2]).inspect(print).capture()
    >>> pt.example(build).extract()
    1
    2
    [(0, [1, 2])]
    """

    __slots__ = ("_apply", "_inspect")

    def __init__(
        self,
        core: OperatorCore,
        apply: Callable[[Any], Any] | None,
        inspect: Callable[[Any, Any], Any] | None,
    ) -> None:
        super().__init__(core)
        self._apply = apply
        self._inspect = inspect

    def run(self, inp: InputPort, out: OutputPort) -> None:
        """The operator's logic: forward what was deferred (nothing unless observed)."""
        self._run_deferred()

    def _deliver(self, t: Any, batch: Any) -> None:
        try:
            if self._inspect is not None:
                self._inspect(t, batch)
                out = batch
            elif self._apply is not None:
                out = self._apply(batch)
            else:
                out = batch
        except OperatorError:
            raise
        except Exception as exc:
            core = self._core
            raise operator_failure(exc, core.name, core.address) from exc
        # ``_hand_on``, written out: a call per batch costs a chain of maps 5% of its time.
        n = len(out)
        if n != len(batch):
            self._produced.update(t, n - len(batch))
            self._core.activate()
        if n:
            port = self._out
            if type(port) is not OutputPort:  # observed: counted as ``forward`` counts
                port.records += n
                port.batches += 1
            port.tee.push(t, out)  # not ``forward``: the scope counted these records already
