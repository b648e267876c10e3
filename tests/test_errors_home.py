"""Public exceptions live in pytimely.errors, and stay importable where they are raised."""

from __future__ import annotations

import pytest

from pytimely import errors


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("StuckError", "pytimely.worker"),
        ("ConfigError", "pytimely.communication.launch"),
        ("ConfigError", "pytimely.communication"),
        ("HandshakeRejected", "pytimely.communication.handshake"),
        ("HandshakeTimeout", "pytimely.communication.handshake"),
        ("UnroutableKey", "pytimely.dataflow.exchange.routing"),
        ("UnroutableKey", "pytimely.dataflow.exchange"),
    ],
)
def test_exception_is_defined_in_errors_and_reexported(name, module):
    import importlib

    cls = getattr(errors, name)
    assert cls.__module__ == "pytimely.errors"
    assert name in errors.__all__
    assert getattr(importlib.import_module(module), name) is cls


def test_exception_bases_are_unchanged():
    assert issubclass(errors.ConfigError, errors.TimelyError)
    assert issubclass(errors.ConfigError, ValueError)
    assert issubclass(errors.HandshakeTimeout, errors.HandshakeRejected)
    assert issubclass(errors.HandshakeRejected, errors.CommunicationError)
    assert issubclass(errors.UnroutableKey, TypeError)


def _raise_relayed() -> None:
    try:
        raise errors.WorkerFailure("worker 2 raised ZeroDivisionError: boom", worker=2)
    except errors.WorkerFailure as failure:
        raise RuntimeError("my step failed") from failure


def test_failure_report_blames_the_worker_named_in_the_chain():
    with pytest.raises(RuntimeError) as info:
        _raise_relayed()
    report = errors.failure_report(1, info.value)
    assert report["worker"] == 1 and report["origin"] == 2 and report["relayed"]
    assert report["summary"] == "RuntimeError: my step failed"
    assert report["blame"] == "worker 2 raised ZeroDivisionError: boom"
    assert "ZeroDivisionError" not in report["summary"] and "my step failed" in report["traceback"]


def test_failure_report_own_error_and_suppressed_context():
    own = errors.failure_report(0, ValueError("bad"), prefix="its result could not be sent: ")
    assert own["origin"] == 0 and not own["relayed"] and not own["stuck"]
    assert own["summary"] == own["blame"] == "its result could not be sent: ValueError: bad"
    assert own["traceback"].startswith("its result could not be sent: ")
    # A StuckError raised "from None" replaces the failure it explains: it is this worker's own.
    try:
        try:
            raise errors.WorkerFailure("worker 3 vanished", worker=3)
        except errors.WorkerFailure:
            raise errors.StuckError("stuck") from None
    except errors.StuckError as exc:
        stuck = errors.failure_report(0, exc)
    assert stuck["stuck"] and not stuck["relayed"] and stuck["origin"] == 0
    # A failure naming this very worker is not relayed either.
    assert not errors.failure_report(4, errors.WorkerFailure("me", worker=4))["relayed"]
