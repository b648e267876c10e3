"""Getting data into a dataflow: input handles, unordered inputs, and ``to_stream``.

An :class:`InputHandle` owns the input operator's capability.  ``send`` buffers records at the
handle's current time and pushes full batches straight into the downstream channels (operators
that run inline behind the input -- a ``map``, an ``inspect``, a probe, on one worker a
``stateful_map`` -- run there, within the call, in the caller's thread: feed a handle from the
thread of its worker, as everything else of a worker);
``advance_to(t)`` promises that no more data at earlier times will come (the capability moves to
``t``, which is what lets frontiers advance); ``close()`` drops the capability altogether.

Times given by the user are checked where they are given: a time of the wrong type for the
scope (``advance_to(2.5)`` on ``int`` times) is a ``TypeError`` and a time earlier than the
handle's (or capability's) a :class:`~pytimely.errors.CapabilityError`, both at the call, never
a confusing failure somewhere downstream later.  The
operator itself does nothing when scheduled: the scope just collects the counts the handle
recorded (produced records, capability moves) and the handle wakes the operator so that this
happens promptly.

Flow control: every batch an :class:`InputHandle` pushes downstream may make it wait, stepping
its worker, while some peer has more of this worker's data in flight than the bound
(:mod:`pytimely.communication.flow`); so an input fed faster than a peer consumes is slowed to
that peer's pace instead of filling memory.  It never waits when fed from inside a step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import islice
from typing import TYPE_CHECKING, Any

from ...errors import CapabilityError, TimelyError
from ...order import domain_of, less_equal
from ..capability import Capability
from ..operator import OperatorCore
from ..ports import BATCH, Session
from .generic import OperatorBuilder

if TYPE_CHECKING:
    from ..operator import OperatorInfo
    from ..scope import Scope
    from ..stream import Stream

__all__ = [
    "InputHandle",
    "UnorderedHandle",
    "ActivateCapability",
    "new_input",
    "new_unordered_input",
    "to_stream",
]


class InputHandle:
    """Feeds one input of a dataflow (see the module docstring).

    The handle holds the input operator's one :class:`Capability`; ``advance_to`` downgrades
    it and ``close`` drops it.  Invariant: ``time`` is the capability's time while open.
    """

    __slots__ = (
        "_core", "_port", "_cap", "_time", "_buffer", "_closed", "_early", "_on_close",
        "_worker", "_who",
    )  # fmt: skip

    def __init__(self, core: OperatorCore) -> None:
        self._core = core
        self._port = core.output_ports[0]
        # The operator's initial capability (counted once per worker by the scope).
        (self._cap,) = core.mint_initial()
        self._time = self._cap.time
        self._buffer: list[Any] = []
        self._closed = False
        self._on_close: list[Callable[[], None]] = []
        self._worker = core.scope.worker
        self._who = f"input {core.name!r}"  # for flow control's errors
        # Batches sent while the dataflow is still being built wait here: consumers attached
        # later must see them too.  Released when the scope is built (``_built``).
        self._early: list[tuple[Any, Any]] | None = []
        core.when_built(self._built)

    def _built(self) -> None:
        early, self._early = self._early, None
        for t, batch in early or ():
            self._port.forward(t, batch)
        if early:
            self._core.activate()

    def _push(self, t: Any, batch: Any) -> None:
        if self._early is not None:
            self._early.append((t, batch))
        else:
            self._port.forward(t, batch)  # legal: at the time of the handle's capability
            self._core.activate()
            # Flow control: a peer slower than us makes us wait here, stepping.
            self._worker.wait_for_credit(self._who)

    def on_close(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` when the handle is closed, before its capability is released
        (so the callback may still ``send`` and ``advance_to``): by :meth:`close`, by leaving a
        ``with`` block, or when the worker closes its inputs (leaving :func:`pytimely.execute`'s
        function).  Callbacks run once, in registration order."""
        self._on_close.append(callback)

    @property
    def time(self) -> Any:
        """The time at which ``send`` currently sends."""
        return self._time

    @property
    def closed(self) -> bool:
        """Whether the handle is closed (capability released): nothing more can be sent."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise TimelyError(f"input {self._core.name!r} is closed")

    def send(self, record: Any) -> None:
        """Send one record at the current time."""
        if self._closed:
            self._check_open()
        buf = self._buffer
        buf.append(record)
        if len(buf) >= BATCH:
            self.flush()

    def send_batch(self, batch: Any, times: Any = None) -> None:
        """Send a whole batch (a list, numpy array or Arrow batch) at the current time, or,
        with ``times`` (one int per record: a sequence or numpy array), each record at its
        own time, in one call.

        With ``times`` the handle keeps its one token at :attr:`time` (the least time it may
        still send at) and sends one message per distinct time, in time order; it does not
        advance.  Call :meth:`advance_to` once after a batch of times, not once per time: that
        is what keeps fine-grained times (milliseconds) from costing a progress change each
        (the "hold the least token" idiom of the timestamp-tokens paper, section 6.2).  A
        time before :attr:`time` raises :class:`~pytimely.errors.CapabilityError` naming the
        first such record; nothing of the batch is sent then.

        >>> import pytimely as pt
        >>> def build(scope):
        ...     inp, clicks = scope.new_input()
        ...     out = clicks.capture()
        ...     inp.send_batch(["a", "b", "c"], times=[1_005, 1_001, 1_005])
        ...     inp.advance_to(1_006)  # once, after the whole batch of times
        ...     return out
        >>> pt.example(build).extract()
        [(1001, ['b']), (1005, ['a', 'c'])]
        """
        self._check_open()
        self.flush()
        if times is None:
            if len(batch):
                self._push(self._time, batch)
            return
        for t, part in self._by_time(batch, times):
            self._push(t, part)

    def _by_time(self, batch: Any, times: Any) -> list[tuple[int, Any]]:
        """``batch`` split into ``(t, records at t)`` in time order (stable within a time),
        every ``t`` checked against the handle's time; one pass, no message sent yet."""
        import numpy as np

        n = len(batch)
        if len(times) != n:
            raise ValueError(
                f"input {self._core.name!r}: send_batch got {n} records and {len(times)} times"
            )
        if n == 0:
            return []
        where = f"input {self._core.name!r}: send_batch(times=...)"
        array = np.asarray(times)
        if array.dtype.kind not in "iu":
            first = next((x for x in times if type(x) is not int), times[0])
            raise TypeError(
                f"{where}: times must be integers, got {first!r} ({type(first).__name__})"
            )
        _check_time(self._core.scope.domain, int(array[0]), where)
        earliest = int(array.min())
        if earliest < self._time:
            i = int(np.argmax(array < self._time))
            raise CapabilityError(
                f"{where}: record {i} ({_record(batch, i)!r}) is at time {int(array[i])}, before "
                f"the input's time {self._time}; send it before advance_to, or later"
            )
        if n == 1 or earliest == int(array.max()):
            return [(earliest, batch)]
        if not bool((array[1:] >= array[:-1]).all()):
            order = np.argsort(array, kind="stable")
            array = array[order]
            batch = _take(batch, order)
        cuts = (np.flatnonzero(array[1:] != array[:-1]) + 1).tolist()
        starts = [0, *cuts]
        ends = [*cuts, n]
        return [(int(array[a]), _slice(batch, a, b)) for a, b in zip(starts, ends)]

    def flush(self) -> None:
        """Push buffered records downstream now."""
        buf = self._buffer
        if buf:
            self._buffer = []
            self._push(self._time, buf)

    def advance_to(self, t: Any) -> None:
        """No more data before ``t`` will be sent (``t`` must be a time of the scope's type, and
        not earlier than ``time``)."""
        self._check_open()
        _check_time(self._core.scope.domain, t, f"input {self._core.name!r}: advance_to({t!r})")
        old = self._time
        if t == old:
            return
        if not less_equal(old, t):
            raise CapabilityError(
                f"input {self._core.name!r}: advance_to({t!r}) after advance_to({old!r}): an "
                "input's time only moves forward"
            )
        self.flush()
        self._cap.downgrade(t)
        self._time = t
        self._core.activate()

    def close(self) -> None:
        """No more data at all (after the ``on_close`` callbacks).  Idempotent."""
        if self._closed:
            return
        callbacks, self._on_close = self._on_close, []
        for callback in callbacks:
            callback()
        self.flush()
        self._cap.drop()
        self._closed = True
        self._core.activate()

    def __enter__(self) -> InputHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"at {self._time!r}"
        return f"<InputHandle {self._core.name!r} {state}>"


def _take(batch: Any, order: Any) -> Any:
    """``batch``'s records in the order of the index array ``order``."""
    if isinstance(batch, list):
        return [batch[i] for i in order.tolist()]
    if hasattr(batch, "take"):  # numpy arrays, Arrow batches
        return batch.take(order)
    return [batch[i] for i in order.tolist()]


def _slice(batch: Any, a: int, b: int) -> Any:
    """Records ``a`` to ``b`` of ``batch`` (a view where the container has them)."""
    if hasattr(batch, "slice") and not isinstance(batch, list):  # Arrow
        return batch.slice(a, b - a)
    return batch[a:b]


def _record(batch: Any, i: int) -> Any:
    """Record ``i`` of ``batch``, for an error message."""
    if hasattr(batch, "slice") and not isinstance(batch, list):
        return batch.slice(i, 1).to_pylist()[0]
    return batch[i]


def _check_time(domain: Any, t: Any, where: str) -> None:
    """Raise ``TypeError`` (prefixed by ``where``) unless ``t`` is a time of ``domain``."""
    if not domain_of(domain).contains(t):
        raise TypeError(
            f"{where}: {t!r} ({type(t).__name__}) is not a time of this scope, whose times are "
            f"{domain!r}"
        )


def new_input(scope: Scope, name: str = "Input") -> tuple[InputHandle, Stream]:
    """An input operator in ``scope``: its handle and stream (:meth:`Scope.new_input`)."""
    core = OperatorBuilder.raw(scope, name)  # no logic: the handle does the sending
    # A ``map`` or ``inspect`` behind the handle runs inline, within ``send``: the handle
    # activates this operator on every push, and the scope drains what it sent (counted at the
    # inline operators' consumers) with the capability moves, in one report.
    core.inline_depth = 0
    handle = InputHandle(core)
    scope.worker.track_input(handle)
    return handle, scope.stream((core.index, 0), core.output_ports[0].tee)


class ActivateCapability(Capability):
    """A capability that wakes its operator whenever it changes (for use outside operators)."""

    __slots__ = ()

    def delayed(self, t: Any) -> ActivateCapability:
        """Like :meth:`Capability.delayed` (an ``ActivateCapability`` too), and wakes."""
        self._check()
        _check_time(self._domain(), t, f"operator {self._port.op_name!r}: delayed({t!r})")
        cap = super().delayed(t)
        self._port.activate()
        return cap

    def downgrade(self, t: Any) -> None:
        """Like :meth:`Capability.downgrade` (``t`` checked), and wakes the operator."""
        _check_time(self._domain(), t, f"operator {self._port.op_name!r}: downgrade({t!r})")
        super().downgrade(t)
        self._port.activate()

    def _domain(self) -> Any:
        return self._port.op.scope.domain

    def drop(self) -> None:
        """Like :meth:`Capability.drop`, and wakes the operator so its frontier can advance."""
        super().drop()
        self._port.activate()


class UnorderedHandle:
    """Sends data at any time for which the caller holds an :class:`ActivateCapability`."""

    __slots__ = ("_core", "_port")

    def __init__(self, core: OperatorCore) -> None:
        self._core = core
        self._port = core.output_ports[0]

    def session(self, cap: Capability, time: Any = None) -> Session:
        """A session sending at ``time`` (default: the capability's time, which ``time`` must
        not precede)."""
        if time is not None:
            _check_time(
                self._core.scope.domain, time, f"input {self._core.name!r}: session(time={time!r})"
            )
        session = self._port.session(cap, time)
        self._core.activate()
        return session

    def flush(self) -> None:
        """Send what the sessions buffered and wake the operator (from outside operators)."""
        self._port.flush()
        self._core.activate()


def new_unordered_input(
    scope: Scope, name: str = "UnorderedInput"
) -> tuple[tuple[UnorderedHandle, ActivateCapability], Stream]:
    """``((handle, capability), stream)``: the caller manages times with the capability and
    must drop it (and every capability derived from it) to let the dataflow finish."""
    core = OperatorBuilder.raw(scope, name)
    port = core.output_ports[0]
    # The operator's initial capability, as one that wakes the operator when it changes.
    cap = ActivateCapability(scope.domain.minimum(), port, _record=False)

    def logic() -> None:
        port.flush()

    core.set_logic(logic)
    return (UnorderedHandle(core), cap), scope.stream((core.index, 0), port.tee)


def to_stream(scope: Scope, iterable: Iterable[Any], name: str = "ToStream") -> Stream:
    """The records of ``iterable`` at the minimum time, a few batches per activation.

    Every worker emits the whole iterable (as in timely); shard it by ``scope.index`` yourself
    if each record should appear once.
    """

    def ctor(cap: Capability, info: OperatorInfo) -> Callable[..., None]:
        it = iter(iterable)
        activator = info.activator()
        state = [cap]

        def logic(output: Any) -> None:
            held = state[0]
            if held is None:
                return
            for _ in range(16):
                chunk = list(islice(it, BATCH))
                if not chunk:
                    held.drop()
                    state[0] = None
                    return
                output.forward(held.time, chunk)  # legal: we hold a capability there
            activator.activate()

        return logic

    return scope.source(name, ctor)
