"""Lifecycle events on the ``pytimely.*`` loggers: silent by default, there when configured."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import time

import pytest

import pytimely as pt

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _messages(caplog, level=logging.DEBUG):
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("pytimely") and r.levelno >= level
    ]


def test_dataflow_built_and_completed_are_logged(caplog):
    caplog.set_level(logging.INFO, logger="pytimely")
    pt.example(lambda s: s.to_stream([1, 2]).inspect(lambda x: None))
    assert _messages(caplog) == [
        "worker 0 built dataflow 0 ('Dataflow 0')",
        "worker 0 completed dataflow 0 ('Dataflow 0')",
    ]
    assert {r.name for r in caplog.records} == {"pytimely.worker"}


def test_a_stuck_worker_logs_its_explanation(caplog):
    caplog.set_level(logging.INFO, logger="pytimely")
    w = pt.Worker()
    w.dataflow(lambda s: s.new_input()[1].probe())
    with pytest.raises(pt.StuckError):
        w.run()
    [error] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert error.name == "pytimely.worker"
    assert error.getMessage().startswith("worker 0: StuckError: the dataflows cannot complete")
    assert "Input capability" in error.getMessage()


def test_slow_steps_above_the_threshold_are_warned(caplog):
    caplog.set_level(logging.WARNING, logger="pytimely")
    w = pt.Worker()
    w.slow_step = 0.05
    w.dataflow(lambda s: s.to_stream([1]).inspect(lambda x: time.sleep(0.1)))
    w.run()
    [warning] = _messages(caplog, logging.WARNING)
    assert warning.startswith("worker 0: slow step 1 took ")
    assert warning.endswith(" s scheduling dataflows [0]")
    caplog.clear()
    w2 = pt.Worker()  # default threshold: 1 s
    w2.dataflow(lambda s: s.to_stream([1]).inspect(lambda x: time.sleep(0.1)))
    w2.run()
    assert _messages(caplog, logging.WARNING) == []


def _run(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_silent_by_default():
    """Without logging configured, not even a warning reaches stderr (a NullHandler on the
    'pytimely' logger keeps Python's last-resort handler away)."""
    done = _run("""
        import logging, time, pytimely as pt
        logging.getLogger("pytimely.worker").warning("not shown")  # what a slow step logs
        w = pt.Worker()
        w.slow_step = 0.0
        w.dataflow(lambda s: s.to_stream([1]).inspect(lambda x: time.sleep(0.01)))
        w.run()
        try:
            w2 = pt.Worker()
            w2.dataflow(lambda s: s.new_input()[1].probe())
            w2.run()
        except pt.StuckError:
            print("stuck")
    """)
    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == ("stuck\n", "")


def test_mesh_formed_and_worker_failure_are_logged_when_configured():
    done = _run("""
        import logging, pytimely as pt
        logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
        pt.execute(lambda w: None, workers=2, timeout=60)
        def fail(w):
            if w.index == 1:
                raise ValueError("boom")
        try:
            pt.execute(fail, workers=2, timeout=60)
        except pt.errors.WorkerFailure:
            print("failed")
    """)
    assert done.stdout == "failed\n", done.stderr
    lines = done.stderr.splitlines()
    assert "pytimely.communication.tcp INFO worker 0 of 2: mesh formed" in lines
    assert "pytimely.communication.tcp INFO worker 1 of 2: mesh formed" in lines
    failure = [line for line in lines if "pytimely.communication.launch ERROR" in line]
    assert failure and "worker failure: worker 1 failed" in failure[0]
