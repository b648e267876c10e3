"""The capture event model: what a captured stream *is*.

A captured stream is a sequence of events (timely dataflow's ``Event<T, C>``, which lives beside
the capture and replay operators in ``dataflow/operators/core/capture/event.rs``; so does this
module, beside :mod:`.capture` and :mod:`.replay`).  The storage layer,
:mod:`pytimely.capture`, builds files, streams and sockets on top and re-exports these names.

* :class:`Progress` -- ``changes``: a tuple of ``(time, delta)`` pairs, changes to the count of
  the captured input's frontier.  They are **relative to an implicit initial ``(minimum, +1)``**:
  every captured stream starts out believing it holds one capability at the minimum time, and
  retracts it (eventually) through its own progress events.
* :class:`Messages` -- ``time`` and ``batch``: records that arrived at ``time``.  A batch is a
  ``list`` of records, a numpy array, or a pyarrow ``RecordBatch``/``Table``.

:class:`Event` is a namespace (``Event.Progress(...)``, ``Event.Messages(t, batch)``) and also
works with ``isinstance(e, Event)``.  Both classes support structural pattern matching::

    match event:
        case Event.Progress(changes): ...
        case Event.Messages(time, batch): ...

Writers (anything a capture pushes into) implement :class:`EventWriter`: ``push(event)``,
``flush(fsync=False)``, ``close()``.  Readers (anything replay pulls from) implement
:class:`EventReader`: ``poll()`` returns *every* event available right now (possibly ``[]``) and
never blocks; ``done`` becomes ``True`` once the reader knows no more events will come.

Protocol the sequence respects (from timely's replay): progress may only increment a time if
some ``<=`` time has positive accumulated count, and messages may only use such times.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "Event",
    "EventReader",
    "EventWriter",
    "Messages",
    "Progress",
    "batch_equal",
    "batch_kind",
    "batch_len",
    "batch_records",
    "extract",
]


class Progress:
    """Changes ``((time, delta), ...)`` to the captured frontier; immutable.

    ``Progress([(0, -1), (1, 1)])``.  ``changes`` is always a tuple of 2-tuples with ``int``
    deltas.  Equality and hashing are by value.
    """

    __slots__ = ("changes",)
    __match_args__ = ("changes",)

    changes: tuple

    def __init__(self, changes: Iterable[tuple[Any, int]] = ()) -> None:
        object.__setattr__(self, "changes", tuple([(t, int(d)) for t, d in changes]))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Progress events are immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Progress events are immutable")

    def __eq__(self, other: object) -> bool:
        if type(other) is not Progress:
            return NotImplemented
        return self.changes == other.changes

    def __hash__(self) -> int:
        return hash(("Progress", self.changes))

    def __repr__(self) -> str:
        return f"Progress({list(self.changes)!r})"

    def __reduce__(self) -> tuple:
        return (Progress, (self.changes,))


class Messages:
    """A batch of records at one ``time``.

    ``batch`` is a list of records, a numpy array, or a pyarrow RecordBatch/Table.  Equality
    compares times and batches by value (:func:`batch_equal`; numpy arrays also compare dtype
    and shape, arrow batches their schema).  Not hashable (the batch may be mutable).
    """

    __slots__ = ("batch", "time")
    __match_args__ = ("time", "batch")

    def __init__(self, time: Any, batch: Any) -> None:
        self.time = time
        self.batch = batch

    def __eq__(self, other: object) -> bool:
        if type(other) is not Messages:
            return NotImplemented
        return self.time == other.time and batch_equal(self.batch, other.batch)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Messages({self.time!r}, {self.batch!r})"

    def __reduce__(self) -> tuple:
        return (Messages, (self.time, self.batch))


class _EventMeta(type):
    def __instancecheck__(cls, obj: object) -> bool:
        return type(obj) is Progress or type(obj) is Messages


class Event(metaclass=_EventMeta):
    """Namespace of the two event kinds: ``Event.Progress`` and ``Event.Messages``.

    ``isinstance(x, Event)`` is true for instances of either.
    """

    Progress = Progress
    Messages = Messages

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """Always raises ``TypeError``: ``Event`` is a namespace and has no instances."""
        raise TypeError("Event is a namespace: use Event.Progress(...) or Event.Messages(t, batch)")


@runtime_checkable
class EventWriter(Protocol):
    """Where a capture pushes events."""

    def push(self, event: Progress | Messages) -> None:
        """Record one event; events arrive in the order the captured stream produced them."""

    def flush(self, fsync: bool = False) -> None:
        """Make the events pushed so far visible to readers.

        Called after every frontier change; ``fsync`` also makes them durable on disk.
        """

    def close(self) -> None:
        """Flush and finish: readers see the end of the capture; no push may follow."""


@runtime_checkable
class EventReader(Protocol):
    """Where a replay pulls events from.  ``poll()`` never blocks."""

    def poll(self) -> list:
        """The events available now, in the order written (possibly none); never blocks."""

    @property
    def done(self) -> bool:
        """Whether the end of the capture has been read: ``poll`` will return nothing more."""


# --------------------------------------------------------------------------------------------
# Batch helpers (lists, numpy arrays, arrow batches/tables).


def batch_kind(batch: Any) -> str | None:
    """What container ``batch`` is: ``"numpy"`` (an ndarray), ``"RecordBatch"`` or ``"Table"``
    (pyarrow), or ``None`` for a sequence of records (a ``list``).

    Decided from the type's module and name, so neither numpy nor pyarrow is imported here::

        >>> batch_kind([1, 2]) is None
        True
        >>> import numpy as np
        >>> batch_kind(np.arange(3))
        'numpy'
    """
    t = type(batch)
    module = t.__module__
    if module == "numpy":
        return "numpy" if t.__name__ == "ndarray" else None
    if module.startswith("pyarrow") and t.__name__ in ("RecordBatch", "Table"):
        return t.__name__
    return None


def batch_equal(a: Any, b: Any) -> bool:
    """Value equality of two batches (lists, numpy arrays, arrow RecordBatch/Table)."""
    ka, kb = batch_kind(a), batch_kind(b)
    if ka == "numpy" or kb == "numpy":
        if ka != kb:
            return False
        import numpy as np

        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if np.array_equal(a, b):
            return True
        try:  # NaN / NaT compare equal to themselves here
            return bool(np.array_equal(a, b, equal_nan=True))
        except TypeError:
            return False
    if ka or kb:
        return ka == kb and a.schema.equals(b.schema) and a.equals(b)
    if type(a) is not type(b):
        return False
    return bool(a == b)


def batch_len(batch: Any) -> int:
    """Number of records in a batch (rows for arrow, first dimension for numpy)."""
    kind = batch_kind(batch)
    if kind == "numpy":
        return batch.shape[0] if batch.ndim else 1
    if kind is not None:
        return batch.num_rows
    return len(batch)


def batch_records(batch: Any) -> list:
    """The records of a batch as a Python list (arrow rows become dicts)."""
    kind = batch_kind(batch)
    if kind == "numpy":
        return list(batch) if batch.ndim else [batch[()]]
    if kind is not None:
        return batch.to_pylist()
    return list(batch)


def extract(events: Iterable[Any]) -> list[tuple[Any, list]]:
    """``[(time, sorted_records), ...]`` by ascending time, all batches of a time merged.

    Timely's ``Extract``: progress events are ignored, times without records are dropped.
    Records that cannot be sorted (mixed types) keep their arrival order.
    """
    by_time: dict[Any, list] = {}
    for ev in events:
        if type(ev) is Messages:
            by_time.setdefault(ev.time, []).extend(batch_records(ev.batch))
    out = []
    for t in sorted(by_time):
        recs = by_time[t]
        if not recs:
            continue
        try:
            recs.sort()
        except TypeError:
            pass
        out.append((t, recs))
    return out
