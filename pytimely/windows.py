"""Windowers: which event-time windows a record belongs to.

A windower is a small immutable description; the stream methods ``window_fold``,
``window_count``, ``window_collect`` and ``window_join``
(:mod:`pytimely.dataflow.operators.windowing`) do the work.  Event times are integers in any
unit the user picks (ns, ms, epochs); windows are half-open ``[start, end)``.

* :class:`Tumbling` — ``[offset + k*width, offset + (k+1)*width)``: each time in exactly one.
* :class:`Sliding` — every ``[s, s + width)`` with ``s ≡ offset (mod step)`` that contains the
  time; ``width`` need not be a multiple of ``step``.  ``step > width`` (gaps between windows,
  where records would silently belong to no window) is **refused**: filter the stream first if
  sampling is what you mean.
* :class:`Session` — per key, records closer than ``gap`` (a difference strictly less than
  ``gap``) share one session ``[first, last + gap)``; a record that bridges two sessions merges
  them.  Sessions depend on the data, so they are assigned by the operator, not here.
* :class:`Count` — per key, windows of ``size`` *records* (in timestamp order), every
  ``every`` records (tumbling when ``every == size``): ``[start, end)`` counts the key's
  records from 0, and a window is emitted when its last record arrives.

>>> Tumbling(10).window_of(23)
(20, 30)
>>> Sliding(10, 4).windows_of(9)
[(8, 18), (4, 14), (0, 10)]
>>> Session(5)
Session(gap=5)
"""

from __future__ import annotations

import numbers
from typing import Any

__all__ = ["Count", "Tumbling", "Sliding", "Session", "Windower"]


def _positive_int(owner: str, name: str, value: Any) -> int:
    if type(value) is not int and not _is_integral(value):
        raise TypeError(f"{owner}: {name} must be an int (event times are integers), got {value!r}")
    if value <= 0:
        raise ValueError(f"{owner}: {name} must be positive, got {value!r}")
    return int(value)


def _is_integral(value: Any) -> bool:
    """An integer that is not a bool (numpy integers included)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _offset(owner: str, value: Any) -> int:
    if type(value) is not int and not _is_integral(value):
        raise TypeError(f"{owner}: offset must be an int, got {value!r}")
    return int(value)


class Sliding:
    """Windows ``[s, s + width)`` for every ``s ≡ offset (mod step)``; a time belongs to each
    one containing it (``ceil(width / step)`` or ``floor(width / step)`` of them).

    Refuses a zero or negative ``width``/``step`` and ``step > width`` (gaps between windows).

    >>> Sliding(6, 4, offset=1).windows_of(6)
    [(5, 11), (1, 7)]
    """

    __slots__ = ("width", "step", "offset")

    def __init__(self, width: int, step: int, offset: int = 0) -> None:
        owner = type(self).__name__
        self.width = _positive_int(owner, "width", width)
        self.step = _positive_int(owner, "step", step)
        self.offset = _offset(owner, offset)
        if self.step > self.width:
            raise ValueError(
                f"{owner}: step {step} > width {width} would leave gaps between windows whose "
                "records belong to no window; pt.Sliding refuses it (filter the stream instead)"
            )

    def windows_of(self, t: int) -> list[tuple[int, int]]:
        """The windows containing ``t``, latest start first.

        >>> Sliding(10, 5).windows_of(12)
        [(10, 20), (5, 15)]
        """
        width, step = self.width, self.step
        s = t - (t - self.offset) % step
        out = []
        while s > t - width:
            out.append((s, s + width))
            s -= step
        return out

    def ends_of(self, t: int) -> list[int]:
        """The ends of the windows containing ``t``, latest first.

        >>> Sliding(10, 5).ends_of(12)
        [20, 15]
        """
        width, step = self.width, self.step
        s = t - (t - self.offset) % step
        low = t - width
        out = []
        while s > low:
            out.append(s + width)
            s -= step
        return out

    def max_windows(self) -> int:
        """The most windows one time can belong to: ``ceil(width / step)``.

        >>> Sliding(10, 4).max_windows()
        3
        """
        return -(-self.width // self.step)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and (other.width, other.step, other.offset) == (
            self.width,
            self.step,
            self.offset,
        )

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.width, self.step, self.offset))

    def __repr__(self) -> str:
        return f"Sliding(width={self.width}, step={self.step}, offset={self.offset})"


class Tumbling(Sliding):
    """Windows ``[offset + k*width, offset + (k+1)*width)``: a sliding window whose step is its
    width, so every time belongs to exactly one window.

    >>> Tumbling(1000, offset=500).window_of(1499)
    (500, 1500)
    """

    __slots__ = ()

    def __init__(self, width: int, offset: int = 0) -> None:
        super().__init__(width, width, offset)

    def window_of(self, t: int) -> tuple[int, int]:
        """The one window containing ``t`` (negative times too).

        >>> Tumbling(10).window_of(-3)
        (-10, 0)
        """
        end = self.end_of(t)
        return end - self.width, end

    def end_of(self, t: int) -> int:
        """The end of the window containing ``t``.

        >>> Tumbling(10, offset=5).end_of(5)
        15
        """
        return t - (t - self.offset) % self.width + self.width

    def ends_of(self, t: int) -> list[int]:
        """``[end_of(t)]``: the sliding interface, for one window.

        >>> Tumbling(10).ends_of(23)
        [30]
        """
        return [t - (t - self.offset) % self.width + self.width]

    def __repr__(self) -> str:
        return f"Tumbling(width={self.width}, offset={self.offset})"


class Session:
    """Per key, records whose event times differ by less than ``gap`` share a session
    ``[first, last + gap)``; a difference of exactly ``gap`` starts a new one.

    >>> Session(gap=30).gap
    30
    """

    __slots__ = ("gap",)

    def __init__(self, gap: int) -> None:
        self.gap = _positive_int(type(self).__name__, "gap", gap)

    def __eq__(self, other: object) -> bool:
        return type(other) is Session and other.gap == self.gap

    def __hash__(self) -> int:
        return hash(("Session", self.gap))

    def __repr__(self) -> str:
        return f"Session(gap={self.gap})"


class Count:
    """Per key, windows of ``size`` records, one starting every ``every`` records (default
    ``size``: tumbling): the key's records are numbered 0, 1, 2, ... in timestamp order (records
    of one timestamp in arrival order), and window ``[s, s + size)`` holds those numbered ``s``
    to ``s + size - 1``, for ``s`` a multiple of ``every``.  A window is emitted at the
    timestamp of its last record; records of a window that is never filled are not emitted.
    ``every > size`` (records in no window) is refused.

    >>> Count(3)
    Count(size=3, every=3)
    >>> Count(4, every=2).starts_of(5)
    [2, 4]
    """

    __slots__ = ("size", "every")

    def __init__(self, size: int, every: int | None = None) -> None:
        self.size = _positive_int("Count", "size", size)
        self.every = self.size if every is None else _positive_int("Count", "every", every)
        if self.every > self.size:
            raise ValueError(
                f"Count: every ({self.every}) > size ({self.size}) would leave records in no "
                "window; filter the stream first if sampling is what you mean"
            )

    def starts_of(self, n: int) -> list[int]:
        """The starts of the windows holding a key's record number ``n``, earliest first.

        >>> Count(3).starts_of(4)
        [3]
        """
        first = max(0, n - self.size + 1)
        first += -first % self.every
        return list(range(first, n + 1, self.every))

    def __eq__(self, other: object) -> bool:
        return type(other) is Count and (other.size, other.every) == (self.size, self.every)

    def __hash__(self) -> int:
        return hash(("Count", self.size, self.every))

    def __repr__(self) -> str:
        return f"Count(size={self.size}, every={self.every})"


Windower = Sliding | Session | Count
