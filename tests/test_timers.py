"""A worker thread's timed waits end close to their deadline (``communication.timers``): its
timer slack is small, and a wait shorter than a wake-up costs is polled, not parked."""

from __future__ import annotations

import ctypes
import sys
import threading
import time

import pytest

import pytimely as pt
from pytimely.communication import timers

_PR_SET_TIMERSLACK, _PR_GET_TIMERSLACK = 29, 30
_DEFAULT_NS = 50_000  # Linux's default slack for a normal thread

linux_only = pytest.mark.skipif(
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


@linux_only
def test_precise_waits_sets_the_calling_threads_slack_only():
    mine = _slack_ns()
    assert _in_new_thread(lambda: (_slack_ns(), timers.precise_waits(), _slack_ns())) == (
        _DEFAULT_NS,
        True,
        timers.SLACK_NS,
    )
    assert _slack_ns() == mine
    assert _in_new_thread(_slack_ns) == _DEFAULT_NS


@linux_only
def test_a_worker_that_parks_asks_for_precise_waits_and_one_that_only_steps_does_not():
    def job(worker, park):
        worker.step_or_park(0.0001 if park else 0)  # nothing to do: parks 100 us, or not
        return _slack_ns()

    assert _in_new_thread(lambda: pt.execute(lambda w: job(w, True))[0]) == timers.SLACK_NS
    assert _in_new_thread(lambda: pt.execute(lambda w: job(w, False))[0]) == _DEFAULT_NS


def test_the_spin_threshold_comes_from_the_environment_in_microseconds():
    assert timers.spin_seconds({}) == 50e-6
    assert timers.spin_seconds({"PYTIMELY_SPIN_US": "0"}) == 0.0
    assert timers.spin_seconds({"PYTIMELY_SPIN_US": "12.5"}) == 12.5e-6
    for wrong in ("fast", "-1", "nan"):
        with pytest.raises(ValueError, match="PYTIMELY_SPIN_US"):
            timers.spin_seconds({"PYTIMELY_SPIN_US": wrong})


def test_spin_until_ends_at_the_deadline_or_when_another_thread_makes_it_ready():
    start = time.monotonic()
    assert timers.spin_until(start + 0.005, lambda: False) is False
    assert time.monotonic() - start >= 0.005
    flag = threading.Event()
    threading.Timer(0.01, flag.set).start()  # needs the GIL while we poll: we yield it
    start = time.monotonic()
    assert timers.spin_until(start + 30.0, flag.is_set) is True
    assert time.monotonic() - start < 20.0


def test_a_worker_polls_through_a_wait_shorter_than_its_spin_threshold_and_parks_longer_ones():
    def job(worker):
        counts = []
        for wait, spin_s in ((20e-6, 50e-6), (20e-6, 0.0), (200e-6, 50e-6)):
            worker.spin_s = spin_s
            spins, parks = worker.spins, worker.parks
            worker.step_or_park(wait)  # nothing to do
            counts.append((worker.spins - spins, worker.parks - parks))
        return counts

    assert pt.execute(job)[0] == [(1, 1), (0, 1), (0, 1)]


def test_a_wake_from_another_thread_ends_a_workers_poll_early():
    def job(worker):
        worker.spin_s = 60.0  # poll through any wait: only the wake can end this one early
        ran = threading.Event()
        threading.Timer(0.02, lambda: worker.call_soon_threadsafe(ran.set)).start()
        start = time.monotonic()
        worker.step_or_park(30.0)
        return worker.spins, ran.is_set(), time.monotonic() - start

    spins, ran, waited = pt.execute(job)[0]
    assert spins == 1 and ran
    assert waited < 20.0
