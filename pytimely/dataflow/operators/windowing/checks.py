"""The windowing operators' checks of their arguments and of the times and records they
meet, and the guard around user functions: every error names the operator and the function."""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ....errors import OperatorError
from ....naming import describe_function
from ....windows import Count, Session, Sliding

if TYPE_CHECKING:
    pass


# -- checks and guarded user functions ----------------------------------------------------------


def user_error(op: str, role: str, f: Any, record: Any, exc: BaseException) -> OperatorError:
    """The error for user function ``f`` (its ``role``: key, fold, ...) raising ``exc`` on
    ``record`` in operator ``op``."""
    return OperatorError(
        f"{op}: {role} function {describe_function(f)} raised {type(exc).__name__}: {exc} "
        f"on record {record!r}",
        operator=op,
    )


def apply_user(op: str, role: str, f: Callable, batch: list) -> list:
    """``[f(r) for r in batch]``, naming the operator, the function and the record on error."""
    try:
        return list(map(f, batch))
    except Exception as exc:
        for r in batch:
            try:
                f(r)
            except Exception:
                raise user_error(op, role, f, r, exc) from exc
        raise


def check_times(op: str, times: list, batch: list, what: str) -> list:
    """Event times must be ints (numpy integers are converted; bools refused)."""
    if list(map(type, times)).count(int) == len(times):  # all ints, checked in C
        return times
    out = []
    for x, r in zip(times, batch):
        if type(x) is int:
            out.append(x)
        elif isinstance(x, numbers.Integral) and not isinstance(x, bool):
            out.append(int(x))
        else:
            raise TypeError(f"{op}: event times must be ints, {what} gave {x!r} for record {r!r}")
    return out


def check_windower(op: str, windower: Any, *, sessions: bool = True, counts: bool = True) -> None:
    """Refuse anything but a windower (``pt.Session`` only where ``sessions``, ``pt.Count``
    only where ``counts``)."""
    if (
        isinstance(windower, Sliding)
        or (sessions and isinstance(windower, Session))
        or (counts and isinstance(windower, Count))
    ):
        return
    allowed = ["pt.Tumbling", "pt.Sliding"] + ["pt.Session"] * sessions + ["pt.Count"] * counts
    raise TypeError(f"{op}: windower must be {', '.join(allowed)}, got {windower!r}")


def check_lateness(op: str, lateness: Any) -> int:
    """``lateness`` if it is a non-negative int."""
    if type(lateness) is not int or lateness < 0:
        raise ValueError(f"{op}: lateness must be a non-negative int, got {lateness!r}")
    return lateness


def check_time(op: str, t: Any) -> None:
    """Refuse a non-integer timestamp (windows compute with times)."""
    if type(t) is not int:
        raise TypeError(
            f"{op}: windows need integer timestamps (event_time=None uses the timestamp), got {t!r}"
        )
