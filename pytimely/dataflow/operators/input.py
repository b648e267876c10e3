"""Getting data into a dataflow: input handles, unordered inputs, and ``to_stream``.

An :class:`InputHandle` owns the input operator's capability.  ``send`` buffers records at the
handle's current time and pushes full batches straight into the downstream channels;
``advance_to(t)`` promises that no more data at earlier times will come (the capability moves to
``t``, which is what lets frontiers advance); ``close()`` drops the capability altogether.

Times given by the user are checked where they are given: a time of the wrong type for the
scope (``advance_to(2.5)`` on ``int`` times) is a ``TypeError`` and a time earlier than the
handle's (or capability's) a :class:`~pytimely.errors.CapabilityError`, both at the call, never
a confusing failure somewhere downstream later.  The
operator itself does nothing when scheduled: the scope just collects the counts the handle
recorded (produced records, capability moves) and the handle wakes the operator so that this
happens promptly.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice
from typing import Any

from ...errors import CapabilityError, TimelyError
from ...order import domain_of, less_equal
from ..capability import Capability
from ..operator import OperatorCore, Session
from ..stream import Stream

__all__ = ["InputHandle", "UnorderedHandle", "ActivateCapability", "new_input",
           "new_unordered_input", "to_stream"]

_BATCH = 1024


class InputHandle:
    """Feeds one input of a dataflow (see the module docstring)."""

    __slots__ = ("_core", "_port", "_time", "_buffer", "_closed", "_early")

    def __init__(self, core: OperatorCore) -> None:
        self._core = core
        self._port = core.output_ports[0]
        self._time = core.scope.domain.minimum()
        self._buffer: list[Any] = []
        self._closed = False
        # Batches sent while the dataflow is still being built wait here: consumers attached
        # later must see them too.  Released when the scope is built (``_built``).
        self._early: list[tuple[Any, Any]] | None = []
        core.on_built = self._built

    def _built(self) -> None:
        early, self._early = self._early, None
        for t, batch in early or ():
            self._port._push(t, batch)
        if early:
            self._core.activate()

    def _push(self, t: Any, batch: Any) -> None:
        if self._early is not None:
            self._early.append((t, batch))
        else:
            self._port._push(t, batch)
            self._core.activate()

    @property
    def time(self) -> Any:
        """The time at which ``send`` currently sends."""
        return self._time

    @property
    def closed(self) -> bool:
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
        if len(buf) >= _BATCH:
            self.flush()

    def send_batch(self, batch: Any) -> None:
        """Send a whole batch (a list, numpy array or Arrow batch) at the current time."""
        self._check_open()
        self.flush()
        if len(batch):
            self._push(self._time, batch)

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
        internals = self._port.internals
        internals.update(t, 1)
        internals.update(old, -1)
        self._time = t
        self._core.activate()

    def close(self) -> None:
        """No more data at all.  Idempotent."""
        if self._closed:
            return
        self.flush()
        self._port.internals.update(self._time, -1)
        self._closed = True
        self._core.activate()

    def __enter__(self) -> InputHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"at {self._time!r}"
        return f"<InputHandle {self._core.name!r} {state}>"


def _check_time(domain: Any, t: Any, where: str) -> None:
    """Raise ``TypeError`` (prefixed by ``where``) unless ``t`` is a time of ``domain``."""
    if not domain_of(domain).contains(t):
        raise TypeError(
            f"{where}: {t!r} ({type(t).__name__}) is not a time of this scope, whose times are "
            f"{domain!r}"
        )


def new_input(scope: Any, name: str = "Input") -> tuple[InputHandle, Stream]:
    core = OperatorCore(scope, name, 0, 1, [], [])
    scope._install(core.index, core)
    # The initial capability (counted once per worker) is the handle's, at the minimum time.
    handle = InputHandle(core)
    scope.worker._track_input(handle)
    return handle, Stream(scope, (core.index, 0), core.output_ports[0].tee)


class ActivateCapability(Capability):
    """A capability that wakes its operator whenever it changes (for use outside operators)."""

    __slots__ = ()

    def delayed(self, t: Any) -> ActivateCapability:
        self._check()
        _check_time(self._domain(), t, f"operator {self._port.op_name!r}: delayed({t!r})")
        if not less_equal(self._time, t):
            raise CapabilityError(
                f"operator {self._port.op_name!r}: cannot mint a capability at {t!r} from one "
                f"at {self._time!r}"
            )
        cap = ActivateCapability(t, self._port)
        self._port.activate()
        return cap

    def downgrade(self, t: Any) -> None:
        _check_time(self._domain(), t, f"operator {self._port.op_name!r}: downgrade({t!r})")
        super().downgrade(t)
        self._port.activate()

    def _domain(self) -> Any:
        return self._port.op.scope.domain

    def drop(self) -> None:
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
        self._port.flush()
        self._core.activate()


def new_unordered_input(
    scope: Any, name: str = "UnorderedInput"
) -> tuple[tuple[UnorderedHandle, ActivateCapability], Stream]:
    """``((handle, capability), stream)``: the caller manages times with the capability and
    must drop it (and every capability derived from it) to let the dataflow finish."""
    core = OperatorCore(scope, name, 0, 1, [], [])
    scope._install(core.index, core)
    port = core.output_ports[0]
    cap = ActivateCapability(scope.domain.minimum(), port, _record=False)

    def logic() -> None:
        port.flush()

    core._logic = logic
    return (UnorderedHandle(core), cap), Stream(scope, (core.index, 0), port.tee)


def to_stream(scope: Any, iterable: Iterable[Any], name: str = "ToStream") -> Stream:
    """The records of ``iterable`` at the minimum time, a few batches per activation.

    Every worker emits the whole iterable (as in timely); shard it by ``scope.index`` yourself
    if each record should appear once.
    """

    def ctor(cap: Capability, info: Any) -> Any:
        it = iter(iterable)
        activator = info.activator()
        state = [cap]

        def logic(output: Any) -> None:
            held = state[0]
            if held is None:
                return
            for _ in range(16):
                chunk = list(islice(it, _BATCH))
                if not chunk:
                    held.drop()
                    state[0] = None
                    return
                output._push(held._time, chunk)
            activator.activate()

        return logic

    return scope.source(name, ctor)
