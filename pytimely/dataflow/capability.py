"""Timestamp tokens (capabilities): permission to send data at a time on an output.

The timestamp tokens of Lattuada, McSherry and Liagouris, "Timestamp tokens: a better
coordination primitive for data-processing systems" (SoCC 2022, sections 3 and 4), in code.  A
:class:`Capability` names a time and one output of one operator.  Holding it lets the operator
open a session on that output at that time or later; the system learns of every token's
creation, clone, downgrade and drop as a ``+1``/``-1`` count at the pointstamp ``(output,
time)``, recorded in the output's ``internals`` batch and reported when the operator returns
control — atomically, per invocation.

* Operators start with one capability per output at the minimum time.  (Its count, one per
  worker, is common knowledge and is counted by the scope when the operator is installed; so
  minting it here records nothing.)
* Each received batch comes with a :class:`CapabilityRef`, valid only during the call that
  received it.  ``retain()`` turns it into an owned :class:`Capability`; using it directly in a
  session is allowed for outputs the input reaches with the identity summary.
* ``downgrade(t)`` moves a token forward (never backwards), ``delayed(t)`` mints another at a
  later time, ``clone()`` duplicates, ``drop()`` releases.

Misuse raises :class:`~pytimely.errors.CapabilityError` naming the operator.  A token that
becomes unreachable without ``drop()`` is released by the garbage collector (and the operator is
woken to report it), so a forgotten token cannot stall a dataflow forever — but code should call
``drop()``: collection time is not deterministic in Python.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Self

from ..errors import CapabilityError
from ..order import less_equal, results_in

if TYPE_CHECKING:
    from .ports import OutputPort

__all__ = ["Capability", "CapabilityRef", "CapabilitySet", "send_time", "invalidate"]


class Capability:
    """An owned timestamp token for one output of one operator."""

    __slots__ = ("_time", "_port", "_valid")

    def __init__(self, time: Any, port: OutputPort, _record: bool = True) -> None:
        self._time = time
        self._port = port
        self._valid = True
        if _record:
            port.internals.update(time, 1)

    @property
    def time(self) -> Any:
        """The time this token allows sending at (and later)."""
        if not self._valid:
            raise CapabilityError(
                f"operator {self._port.op_name!r}: used a capability after drop()"
            )
        return self._time

    @property
    def output(self) -> int:
        """Index of the output this token is for."""
        return self._port.index

    @property
    def valid(self) -> bool:
        """Whether the token is still held (not dropped): only a valid token allows sending."""
        return self._valid

    def _check(self) -> None:
        if not self._valid:
            raise CapabilityError(
                f"operator {self._port.op_name!r}: used a capability after drop()"
            )

    def delayed(self, t: Any) -> Self:
        """A new token (of this token's class) for the same output at ``t``, which must be
        ``>=`` this one's time."""
        self._check()
        if not less_equal(self._time, t):
            raise CapabilityError(
                f"operator {self._port.op_name!r}: cannot mint a capability at {t!r} from one "
                f"at {self._time!r} (a token can only move forward in time)"
            )
        return type(self)(t, self._port)

    def downgrade(self, t: Any) -> None:
        """Move this token forward to ``t`` (``t`` must be ``>=`` its time)."""
        self._check()
        old = self._time
        if t == old:
            return
        if not less_equal(old, t):
            raise CapabilityError(
                f"operator {self._port.op_name!r}: cannot downgrade a capability from "
                f"{old!r} to {t!r} (downgrading only moves forward in time)"
            )
        internals = self._port.internals
        internals.update(t, 1)
        internals.update(old, -1)
        self._time = t

    def clone(self) -> Capability:
        """Another token at the same time and output."""
        self._check()
        return Capability(self._time, self._port)

    __copy__ = clone

    def drop(self) -> None:
        """Release the token.  Dropping twice is an error."""
        self._check()
        self._valid = False
        self._port.internals.update(self._time, -1)

    def __del__(self) -> None:
        # Released by the collector: record it and wake the operator so the scope sees it.
        try:
            if self._valid:
                self._valid = False
                self._port.internals.update(self._time, -1)
                self._port.activate()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def __repr__(self) -> str:
        state = "" if self._valid else ", dropped"
        return f"Capability(time={self._time!r}, output={self._port.index}{state})"


class CapabilityRef:
    """A borrowed token that comes with a received batch; valid only during that call."""

    __slots__ = ("time", "_input", "_valid")

    def __init__(self, time: Any, input_port: Any) -> None:
        self.time = time
        self._input = input_port
        self._valid = True

    def _check(self) -> None:
        if not self._valid:
            raise CapabilityError(
                f"operator {self._input.op_name!r}: a CapabilityRef is only valid during the "
                "call that received it; retain() it to keep it"
            )

    def retain(self, output: int = 0) -> Capability:
        """An owned token at this message's time for ``output``."""
        return self.delayed(self.time, output)

    def delayed(self, t: Any, output: int = 0) -> Capability:
        """An owned token at ``t`` for ``output``; ``t`` must be reachable from this message's
        time along the operator's summary from this input to that output."""
        self._check()
        op = self._input.op
        if output < 0 or output >= len(op.output_ports):
            raise CapabilityError(f"operator {op.name!r} has no output {output}")
        summaries = op.summary_rows[self._input.index][output]
        if not summaries:
            raise CapabilityError(
                f"operator {op.name!r}: input {self._input.index} is not connected to output "
                f"{output}, so its messages give no capability there"
            )
        for s in summaries:
            r = results_in(s, self.time)
            if r is not None and less_equal(r, t):
                return Capability(t, op.output_ports[output])
        raise CapabilityError(
            f"operator {op.name!r}: cannot mint a capability at {t!r} from a message at "
            f"{self.time!r} (must be at or after it)"
        )

    def __repr__(self) -> str:
        return f"CapabilityRef(time={self.time!r})"


def send_time(port: OutputPort, cap: Any, t: Any) -> Any:
    """The time at which output ``port`` may send with ``cap`` (``t``, or the token's time if
    ``t`` is ``None``); raises :class:`CapabilityError` naming the operator otherwise.

    ``cap`` must be a live :class:`Capability` for ``port``, or a :class:`CapabilityRef`
    received during the current call on an input that reaches ``port`` with the identity
    summary; ``t`` must not precede the token's time.  ``OutputPort`` uses this function as
    its ``_check`` method (kept here, beside the tokens whose state it reads).
    """
    if isinstance(cap, Capability):
        if not cap._valid:
            raise CapabilityError(f"operator {port.op.name!r}: used a capability after drop()")
        owner = cap._port
        if owner is not port:
            op = port.op
            raise CapabilityError(
                f"operator {op.name!r}: a capability for output {owner.index}"
                f"{'' if owner.op is op else ' of operator ' + repr(owner.op.name)}"
                f" cannot send on output {port.index}"
            )
        base = cap._time
    elif type(cap) is CapabilityRef:
        op = port.op
        if not cap._valid:
            raise CapabilityError(
                f"operator {op.name!r}: a CapabilityRef is only valid during the call "
                "that received it; retain() it to keep it"
            )
        source = cap._input
        if source.op is not op or not op.identity_reaches(source.index, port.index):
            raise CapabilityError(
                f"operator {op.name!r}: the message capability of input "
                f"{source.index} cannot be used on output {port.index}; use "
                "retain()/delayed() for that output"
            )
        base = cap.time
    else:
        raise CapabilityError(
            f"operator {port.op.name!r}: sending requires a Capability or CapabilityRef, "
            f"got {type(cap).__name__}"
        )
    if t is None:
        return base
    if not less_equal(base, t):
        raise CapabilityError(
            f"operator {port.op.name!r}: cannot send at {t!r} with a capability at {base!r}"
        )
    return t


def invalidate(refs: list[CapabilityRef]) -> None:
    """End the borrow of every ref in ``refs`` (the call that received them returned) and
    empty the list."""
    for r in refs:
        r._valid = False
    refs.clear()


class CapabilitySet:
    """A set of capabilities kept as an antichain (no token ``<=`` another is redundant).

    ``downgrade(frontier)`` is the common use: hold exactly what an input frontier allows.
    """

    __slots__ = ("_caps",)

    def __init__(self, caps: Iterable[Capability] = ()) -> None:
        self._caps: list[Capability] = []
        for c in caps:
            self.insert(c)

    def insert(self, cap: Capability) -> None:
        """Add ``cap`` unless a held token is ``<=`` it (then ``cap`` is dropped)."""
        for c in self._caps:
            if less_equal(c.time, cap.time):
                cap.drop()
                return
        keep = []
        for c in self._caps:
            if less_equal(cap.time, c.time):
                c.drop()
            else:
                keep.append(c)
        keep.append(cap)
        self._caps = keep

    def delayed(self, t: Any) -> Capability:
        """A new token at ``t`` minted from a held token ``<= t``."""
        for c in self._caps:
            if less_equal(c.time, t):
                return c.delayed(t)
        raise CapabilityError(f"no capability in the set is at or before {t!r}")

    def downgrade(self, frontier: Iterable[Any]) -> None:
        """Hold exactly one token per frontier element (each minted from a held one)."""
        new = CapabilitySet()
        for t in frontier:
            new.insert(self.delayed(t))
        for c in self._caps:
            c.drop()
        self._caps = new._caps

    def drop(self) -> None:
        """Release every held token; the set is empty afterwards."""
        for c in self._caps:
            c.drop()
        self._caps = []

    def first(self) -> Capability | None:
        """The held token with the smallest time (in the total order), or ``None`` if empty."""
        return min(self._caps, key=lambda c: c.time) if self._caps else None

    def __iter__(self) -> Iterator[Capability]:
        return iter(list(self._caps))

    def __len__(self) -> int:
        return len(self._caps)

    def __bool__(self) -> bool:
        return bool(self._caps)

    def __repr__(self) -> str:
        return f"CapabilitySet({[c.time for c in self._caps]!r})"
