"""Capture streams over TCP are authenticated: forged senders are refused, real ones accepted.

Every wait is bounded by a timeout, so a regression fails rather than hangs.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time

import pytest

from pytimely.capture import (
    CaptureListener,
    Messages,
    Progress,
    StreamWriter,
    connect_capture,
    listen_capture,
)
from pytimely.communication.handshake import CAPTURE, MESH, accept_handshake, connect_handshake
from pytimely.errors import AuthenticationError, CaptureError, CommunicationError

SECRET = b"capture-secret-0123456789"
EVENTS = [Messages(0, [1, 2, 3]), Progress(((0, -1), (1, 1))), Messages(1, [4])]


def _send(writer):
    for event in EVENTS:
        writer.push(event)
    writer.close()


def _drain(reader, timeout=10.0):
    events = []
    deadline = time.monotonic() + timeout
    while not reader.done:
        assert time.monotonic() < deadline, f"stream not finished, got {events}"
        events += reader.poll()
        time.sleep(0.01)
    return events


def _expect_hang_up(sock, timeout=5.0):
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    finally:
        sock.close()


def test_forged_senders_are_refused_and_the_real_sender_accepted():
    with listen_capture(secret=SECRET) as listener:
        # A forged stream without any handshake: a valid capture, sent straight away.
        forged = socket.create_connection(listener.address, timeout=5)
        with contextlib.suppress(CaptureError):  # the receiver may reset it mid-stream
            _send(StreamWriter(forged, close_target=False))
        _expect_hang_up(forged)
        # A sender with the wrong secret: the receiver cannot verify it, and it cannot verify
        # the receiver.
        with pytest.raises(AuthenticationError):
            connect_capture(listener.address, secret=b"wrong secret", timeout=5)
        # A mesh handshake under the right secret is not a capture handshake: the MACs differ.
        replayed = socket.create_connection(listener.address, timeout=5)
        with pytest.raises(AuthenticationError):
            connect_handshake(replayed, SECRET, 0, 1, 0, purpose=MESH)
        replayed.close()
        # A silent caller holds nothing up.
        silent = socket.create_connection(listener.address, timeout=5)
        # The real sender gets through, and is the stream accept() returns.
        sender = threading.Thread(
            target=lambda: _send(connect_capture(listener.address, secret=SECRET, timeout=5))
        )
        sender.start()
        reader = listener.accept(timeout=5)
        assert _drain(reader) == EVENTS
        sender.join(5)
        silent.close()
        count, recorded = listener.rejections()
        assert count >= 3, recorded
        reasons = " | ".join(r.reason for r in recorded)
        assert "bad magic" in reasons and "without proving the secret" in reasons, reasons


def test_mesh_and_capture_handshakes_do_not_verify_as_each_other():
    for connector_purpose, listener_purpose in (
        (MESH, CAPTURE),
        (CAPTURE, MESH),
        (CAPTURE, CAPTURE),
    ):
        a, b = socket.socketpair()
        outcome = {}

        def listen(purpose=listener_purpose):
            try:
                outcome["listener"] = accept_handshake(
                    b,
                    SECRET,
                    0,
                    1,
                    lambda j: True,
                    lambda j: True,
                    purpose=purpose,
                    deadline=time.monotonic() + 5,
                )
            except CommunicationError as exc:
                outcome["listener"] = exc
            finally:
                b.close()

        t = threading.Thread(target=listen)
        t.start()
        try:
            connect_handshake(
                a, SECRET, 0, 1, 0, purpose=connector_purpose, deadline=time.monotonic() + 5
            )
            outcome["connector"] = "ok"
        except CommunicationError as exc:
            outcome["connector"] = exc
        a.close()
        t.join(5)
        if connector_purpose == listener_purpose:
            assert outcome == {"listener": 0, "connector": "ok"}
        else:
            assert isinstance(outcome["connector"], AuthenticationError), outcome
            assert isinstance(outcome["listener"], CommunicationError), outcome


def test_accept_times_out_naming_the_rejected_callers():
    with listen_capture(secret=SECRET) as listener:
        noise = socket.create_connection(listener.address, timeout=5)
        noise.sendall(os.urandom(100))
        _expect_hang_up(noise)
        start = time.monotonic()
        with pytest.raises(TimeoutError, match=r"rejected callers \(1\).*bad magic"):
            listener.accept(timeout=0.5)
        assert time.monotonic() - start < 3


def test_secret_from_the_environment(monkeypatch):
    monkeypatch.setenv("PYTIMELY_SECRET", "from-env")
    with listen_capture() as listener:
        sender = threading.Thread(target=lambda: _send(connect_capture(listener.address)))
        sender.start()
        assert _drain(listener.accept(timeout=5)) == EVENTS
        sender.join(5)
        with pytest.raises(AuthenticationError):
            connect_capture(listener.address, secret="another", timeout=5)


def test_no_secret_is_refused_with_a_way_out(monkeypatch):
    monkeypatch.delenv("PYTIMELY_SECRET", raising=False)
    with pytest.raises(AuthenticationError, match=r"secret=.*PYTIMELY_SECRET.*insecure=True"):
        listen_capture()
    with pytest.raises(AuthenticationError, match=r"secret=.*PYTIMELY_SECRET.*insecure=True"):
        connect_capture(("127.0.0.1", 9), timeout=1)
    with pytest.raises(ValueError, match="not both"):
        listen_capture(secret=SECRET, insecure=True)


def test_insecure_opt_out_is_a_plain_stream(monkeypatch):
    monkeypatch.delenv("PYTIMELY_SECRET", raising=False)
    with listen_capture(insecure=True) as listener:
        assert "insecure" in repr(listener)
        plain = socket.create_connection(listener.address, timeout=5)
        sender = threading.Thread(target=lambda: _send(StreamWriter(plain)))
        sender.start()
        assert _drain(listener.accept(timeout=5)) == EVENTS
        sender.join(5)
        sender = threading.Thread(
            target=lambda: _send(connect_capture(listener.address, insecure=True, timeout=5))
        )
        sender.start()
        assert _drain(listener.accept(timeout=5)) == EVENTS
        sender.join(5)
    assert isinstance(listener, CaptureListener)
