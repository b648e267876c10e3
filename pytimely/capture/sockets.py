"""Authenticated capture streams over TCP: :func:`listen_capture` and :func:`connect_capture`.

A capture socket carries events that are replayed into a dataflow, so whoever can connect to
it can inject data.  Before a single byte of capture is sent, both ends therefore run the
mesh's HMAC challenge-response (:mod:`pytimely.communication.handshake`) under a shared secret,
with its own purpose label, so that a handshake recorded on a mesh connection never verifies as
a capture one.  The receiving side runs every caller's handshake concurrently with one whole
deadline each (:class:`~pytimely.communication.acceptor.Acceptor`): a forged or silent sender
is hung up on and recorded, and never delays the real one.

Authentication is on by default.  The secret comes from ``secret=`` or else the
``PYTIMELY_SECRET`` environment variable; without either, both functions refuse with an error
saying how to pass one.  For a trusted pipe, ``insecure=True`` opts out explicitly: the stream
is then a plain TCP connection (any :class:`StreamWriter` on a plain socket can feed it).

As with the mesh, this authenticates the peers; it does not encrypt or sign the stream.
"""

from __future__ import annotations

import os
import queue
import socket
import time
from typing import Any, Self

from ..communication.acceptor import Acceptor, Rejection, describe_rejections, format_address
from ..communication.handshake import CAPTURE, HandshakeRejected, connect_handshake
from ..errors import AuthenticationError, CaptureError
from .streams import StreamReader, StreamWriter

__all__ = ["CaptureListener", "connect_capture", "listen_capture"]

#: The environment variable read when no ``secret=`` is given (the mesh reads it too).
SECRET_ENV = "PYTIMELY_SECRET"
#: How long a sender has to complete its handshake, from connection to acknowledgement.
HANDSHAKE_TIMEOUT = 5.0

# Both ends of a capture handshake say "stream 0 of 1": the purpose label, not the indices,
# is what tells capture handshakes apart.
_STREAM, _STREAMS = 0, 1


def _resolve_secret(secret: bytes | str | None, insecure: bool, what: str) -> bytes | None:
    """The secret to authenticate with, or ``None`` when ``insecure``; refuses to guess."""
    if insecure:
        if secret is not None:
            raise ValueError(f"{what}: pass either secret= or insecure=True, not both")
        return None
    if secret is None:
        secret = os.environ.get(SECRET_ENV) or None
    if not secret:
        raise AuthenticationError(
            f"{what}: a capture socket is authenticated with a shared secret, and none was "
            f"given: pass secret=... or set {SECRET_ENV} (the same on sender and receiver); "
            "for a trusted pipe, pass insecure=True to skip authentication"
        )
    return secret.encode("utf-8") if isinstance(secret, str) else secret


class CaptureListener:
    """Listens for capture senders; :meth:`accept` returns one authenticated stream's reader.

    Authenticated listeners handshake in a background thread from construction on, so senders
    may connect before :meth:`accept` is called; senders that fail are closed and reported by
    :meth:`rejections` (and in the error of an :meth:`accept` that times out).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        secret: bytes | str | None = None,
        insecure: bool = False,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
    ) -> None:
        self._secret = _resolve_secret(secret, insecure, f"listen_capture({host}:{port})")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.create_server((host, port), family=family, backlog=socket.SOMAXCONN)
        self.address: tuple[str, int] = tuple(self._listener.getsockname()[:2])  # type: ignore[assignment]
        self._ready: queue.Queue[tuple[socket.socket, Any]] = queue.Queue()
        self._acceptor: Acceptor | None = None
        if self._secret is not None:
            self._acceptor = Acceptor(
                self._listener,
                self._secret,
                _STREAM,
                _STREAMS,
                lambda _stream: True,
                self._admit,
                handshake_timeout=handshake_timeout,
                purpose=CAPTURE,
                name=f"pytimely-capture-accept-{self.address[1]}",
            )
            self._acceptor.start()

    def _admit(self, _stream: int, sock: socket.socket, address: Any) -> bool:
        self._ready.put((sock, address))
        return True

    def accept(self, timeout: float | None = None, **reader_options: Any) -> StreamReader:
        """The next sender's stream as a :class:`StreamReader` (options passed on to it).

        Waits at most ``timeout`` seconds (``None``: forever), then raises ``TimeoutError``
        naming the callers rejected meanwhile.
        """
        if self._acceptor is None:
            self._listener.settimeout(timeout)
            try:
                sock, address = self._listener.accept()
            except TimeoutError:
                raise TimeoutError(self._nobody_came(timeout)) from None
        else:
            try:
                sock, address = self._ready.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(self._nobody_came(timeout)) from None
        reader_options.setdefault("name", f"<capture from {format_address(address)}>")
        return StreamReader(sock, **reader_options)

    def _nobody_came(self, timeout: float | None) -> str:
        text = (
            f"no capture sender was accepted on {format_address(self.address)} within {timeout:g} s"
        )
        rejected = describe_rejections(*self.rejections())
        return f"{text}; {rejected}" if rejected else text

    def rejections(self) -> tuple[int, list[Rejection]]:
        """How many senders failed to authenticate, and the first few with reasons."""
        if self._acceptor is None:
            return 0, []
        return self._acceptor.rejections()

    def close(self) -> None:
        """Stop listening; streams already accepted stay open."""
        if self._acceptor is not None:
            self._acceptor.stop()
        self._listener.close()
        while not self._ready.empty():  # authenticated but never accepted
            self._ready.get_nowait()[0].close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "insecure" if self._acceptor is None else "authenticated"
        return f"CaptureListener({format_address(self.address)}, {mode})"


def listen_capture(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    secret: bytes | str | None = None,
    insecure: bool = False,
) -> CaptureListener:
    """Listen for capture senders on ``host:port`` (``port=0``: any free port, see
    ``.address``); authenticated with ``secret`` / ``$PYTIMELY_SECRET`` unless ``insecure``."""
    return CaptureListener(host, port, secret=secret, insecure=insecure)


def connect_capture(
    address: tuple[str, int],
    *,
    secret: bytes | str | None = None,
    insecure: bool = False,
    timeout: float = 30.0,
    **writer_options: Any,
) -> StreamWriter:
    """Connect to a capture receiver and return a :class:`StreamWriter` on the connection.

    Retries while nothing listens on ``address`` yet, for up to ``timeout`` seconds.  Raises
    :class:`~pytimely.errors.AuthenticationError` if the receiver does not prove knowledge of
    the secret, or hangs up on ours (it holds another one).  ``writer_options`` go to
    :class:`StreamWriter` (e.g. ``time_type``, ``metadata``, ``allow_pickle``).
    """
    where = format_address(address)
    key = _resolve_secret(secret, insecure, f"connect_capture({where})")
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        try:
            sock = socket.create_connection(address, timeout=HANDSHAKE_TIMEOUT)
            break
        except OSError as exc:
            if time.monotonic() + delay > deadline:
                raise CaptureError(
                    f"connect_capture: nothing accepted a connection at {where} within "
                    f"{timeout:g} s ({exc})"
                ) from exc
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
    try:
        if key is not None:
            connect_handshake(
                sock,
                key,
                _STREAM,
                _STREAMS,
                _STREAM,
                purpose=CAPTURE,
                deadline=time.monotonic() + HANDSHAKE_TIMEOUT,
            )
        sock.settimeout(None)
    except AuthenticationError as exc:
        sock.close()
        raise AuthenticationError(f"connect_capture: the receiver at {where}: {exc}") from None
    except (HandshakeRejected, OSError) as exc:
        sock.close()
        raise AuthenticationError(
            f"connect_capture: the receiver at {where} refused the handshake ({exc}); does it "
            "use the same secret, and authentication at all?"
        ) from None
    writer_options.setdefault("name", f"<capture to {where}>")
    return StreamWriter(sock, **writer_options)
