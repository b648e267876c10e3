"""A wrong master URL is one clear error within seconds, before any JVM starts.

Without the check, ``connect("spark://127.0.0.1:<nothing>")`` let Spark retry for about 70 s
and end in 193 lines ending in "Cannot call methods on a stopped SparkContext"."""

from __future__ import annotations

import socket
import threading
import time

import pytest

import pytimely.spark as ps


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_nothing_listening_is_named_within_seconds():
    port = _closed_port()
    url = f"spark://127.0.0.1:{port}"
    start = time.monotonic()
    with pytest.raises(ps.MasterUnreachable) as err:
        ps.connect(url)
    assert time.monotonic() - start < 10
    message = str(err.value)
    assert url in message and "refused" in message.lower()
    assert isinstance(err.value, ps.SparkSetupError)


def test_a_connect_url_with_nothing_listening_is_named_within_seconds():
    url = f"sc://127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    with pytest.raises(ps.MasterUnreachable, match="no Spark Connect server answers") as err:
        ps.connect(url)
    assert time.monotonic() - start < 10
    assert url in str(err.value) and "start-connect-server.sh" in str(err.value)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("sprak://127.0.0.1:7077", "not a Spark master URL"),
        ("127.0.0.1:7077", "not a Spark master URL"),
        ("spark://127.0.0.1", "not host:port"),
    ],
)
def test_malformed_urls_say_what_a_master_url_is(url, says):
    with pytest.raises(ps.MasterUnreachable, match=says):
        ps.check_master(url)


def test_a_listening_master_passes_and_the_first_answering_of_several_is_enough():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        accepted = threading.Thread(target=lambda: server.accept()[0].close(), daemon=True)
        accepted.start()
        ps.check_master(f"spark://127.0.0.1:{_closed_port()},127.0.0.1:{port}")
        accepted.join(5)
