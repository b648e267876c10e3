"""Short waits that end on time: the calling thread's timer slack.

A worker with nothing to do parks until its next event, often a deadline tens of microseconds
away (an open-loop source's next record, a timer).  Linux lets every timed wait of a thread
end up to its *timer slack* late, so that the kernel can batch wake-ups: 50 us by default.
For a worker that parks for 10-50 us at a time that slack is the whole wait again; measured on
the latency benchmark at 20,000 records/s, a park overslept by 89 us at the median with the
default slack and by 24 us with 1 us of slack.

:func:`precise_waits` sets the calling thread's slack to :data:`SLACK_NS` once per thread
(``prctl(PR_SET_TIMERSLACK)``); elsewhere than on Linux, or where ``prctl`` cannot be called,
it does nothing and says so.  The slack only decides how late a timed wait may end; it costs
nothing while the thread runs.

>>> precise_waits()  # on Linux: this thread's timed waits now end within ~1 us
True

Even with 1 us of slack a parked thread wakes late by what a wake-up costs: about 30 us on the
development VM whatever the primitive (a condition, a lock, ``time.sleep``, ``select``).  A
wait shorter than that is cheaper polled than parked: :func:`spin_until` polls a readiness
check until a deadline, yielding the CPU (and the GIL) between polls, and a worker does so for
every wait shorter than :data:`SPIN_S` (50 us; ``$PYTIMELY_SPIN_US`` sets it, ``0`` parks
always).  It costs at most that much CPU per wait, where a park would have cost that much
latency: measured on the latency benchmark at 100,000 records/s (a wait of 0-10 us after every
step), see docs/results.md.

>>> import time
>>> spin_until(time.monotonic() + 20e-6, lambda: False)  # nothing came within 20 us
False
>>> spin_until(time.monotonic() + 1.0, lambda: True)  # ready at once: no wait
True
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping

__all__ = ["SLACK_NS", "SPIN_S", "precise_waits", "spin_until", "spin_seconds"]

#: The timer slack a worker thread asks for, in nanoseconds.
SLACK_NS = 1_000


def spin_seconds(environ: Mapping[str, str] = os.environ) -> float:
    """The spin threshold in seconds: ``$PYTIMELY_SPIN_US`` microseconds (default 50; ``0``:
    never spin).  Raises ``ValueError`` naming the variable for a value that is not a
    non-negative number.

    >>> spin_seconds({"PYTIMELY_SPIN_US": "20"})
    2e-05
    """
    text = environ.get("PYTIMELY_SPIN_US", "50")
    try:
        us = float(text)
    except ValueError:
        us = -1.0
    if not us >= 0.0:  # also NaN
        raise ValueError(f"PYTIMELY_SPIN_US must be a number of microseconds >= 0, not {text!r}")
    return us / 1e6


#: Waits shorter than this many seconds are polled (:func:`spin_until`), not parked.
SPIN_S = spin_seconds()

_PR_SET_TIMERSLACK = 29
_done = threading.local()
_prctl = None
if sys.platform.startswith("linux"):
    try:
        _prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # no libc symbol table: leave the default slack
        _prctl = None


def precise_waits() -> bool:
    """Make this thread's timed waits end within :data:`SLACK_NS` of their deadline (once per
    thread; later calls return the first answer).  Returns whether the slack was set."""
    done = getattr(_done, "value", None)
    if done is None:
        done = _prctl is not None and _prctl(_PR_SET_TIMERSLACK, SLACK_NS, 0, 0, 0) == 0
        _done.value = done
    return done


_yield_cpu: Callable[[], object] = getattr(os, "sched_yield", lambda: time.sleep(0))


def spin_until(deadline: float, ready: Callable[[], bool]) -> bool:
    """Poll ``ready()`` until it holds or ``time.monotonic()`` reaches ``deadline``; between
    polls yield the CPU (``sched_yield``, which releases the GIL for the threads that deliver
    messages).  Returns ``ready()``'s last answer: whether the wait ended by an event."""
    monotonic, yield_cpu = time.monotonic, _yield_cpu
    while not ready():
        if monotonic() >= deadline:
            return False
        yield_cpu()
    return True
