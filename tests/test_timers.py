"""A worker thread's timed waits end close to their deadline (``communication.timers``)."""

from __future__ import annotations

import ctypes
import sys
import threading

import pytest

import pytimely as pt
from pytimely.communication import timers

_PR_SET_TIMERSLACK, _PR_GET_TIMERSLACK = 29, 30
_DEFAULT_NS = 50_000  # Linux's default slack for a normal thread

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="timer slack is Linux's"
)


def _slack_ns() -> int:
    return ctypes.CDLL(None).prctl(_PR_GET_TIMERSLACK, 0, 0, 0, 0)


def _in_new_thread(fn):
    """``fn()`` in a new thread whose slack starts at the default (not the creator's)."""
    out = []

    def run():
        ctypes.CDLL(None).prctl(_PR_SET_TIMERSLACK, _DEFAULT_NS, 0, 0, 0)
        out.append(fn())

    t = threading.Thread(target=run)
    t.start()
    t.join(10)
    assert out, "the thread did not finish"
    return out[0]


def test_precise_waits_sets_the_calling_threads_slack_only():
    mine = _slack_ns()
    assert _in_new_thread(lambda: (_slack_ns(), timers.precise_waits(), _slack_ns())) == (
        _DEFAULT_NS,
        True,
        timers.SLACK_NS,
    )
    assert _slack_ns() == mine
    assert _in_new_thread(_slack_ns) == _DEFAULT_NS


def test_a_worker_that_parks_asks_for_precise_waits_and_one_that_only_steps_does_not():
    def job(worker, park):
        worker.step_or_park(0.0001 if park else 0)  # nothing to do: parks 100 us, or not
        return _slack_ns()

    assert _in_new_thread(lambda: pt.execute(lambda w: job(w, True))[0]) == timers.SLACK_NS
    assert _in_new_thread(lambda: pt.execute(lambda w: job(w, False))[0]) == _DEFAULT_NS
