"""Accept and authenticate callers on a listening socket without letting strangers block it.

An :class:`Acceptor` runs every pending handshake (:mod:`.handshake`) at once, as small state
machines (:class:`~.handshake.ListenerHandshake`) driven by one thread over a
:mod:`selectors` loop, in the style of a non-blocking server (see the Python documentation of
:mod:`selectors`).  Two rules make it robust against hostile callers:

* **No slots to fill.**  There is no limit on how many handshakes may be in progress: a
  pending handshake costs a socket and a few hundred bytes, not a thread, so a crowd of silent
  or slow callers cannot keep a legitimate peer out.  Only when the process runs out of file
  descriptors is the *oldest* pending handshake dropped to make room, so even then the newest
  caller (possibly the real peer) gets its turn.
* **One deadline per connection.**  Each accepted connection must complete its whole handshake
  within ``handshake_timeout`` seconds of being accepted, however it spreads its bytes; a
  "slowloris" dribbling a byte at a time is cut at the deadline like a silent one.

Callers that fail (bad magic, wrong secret, unexpected index, silence, too slow, hung up) are
closed and recorded as :class:`Rejection` s, so that an error can list them apart from the
peers that did not arrive.  An authenticated caller is handed to the ``admit`` callback, which
takes ownership of the (blocking) socket.
"""

from __future__ import annotations

import errno
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import AuthenticationError, CommunicationError, SecretMismatch
from .handshake import ACK, MESH, NAK, HandshakeRejected, ListenerHandshake

__all__ = ["Acceptor", "Rejection", "describe_rejections", "format_address"]

#: How many rejected callers are kept with their reason (all are counted).
MAX_RECORDED_REJECTIONS = 10
#: How often the acceptor thread looks whether it was stopped, at the latest.
_POLL = 0.2
#: New connections accepted between two rounds of reading the pending ones.
_ACCEPTS_PER_ROUND = 64


def format_address(address: Any) -> str:
    """``host:port``, with brackets around an IPv6 host."""
    host, port = address[0], address[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


@dataclass(frozen=True)
class Rejection:
    """A caller that was hung up on, and why."""

    address: str
    reason: str

    def __str__(self) -> str:
        return f"{self.address} ({self.reason})"


def describe_rejections(count: int, recorded: list[Rejection]) -> str:
    """``"rejected callers (N): a (why); b (why); ... and K more"``, or ``""`` if none."""
    if not count:
        return ""
    shown = "; ".join(str(r) for r in recorded)
    more = f"; and {count - len(recorded)} more" if count > len(recorded) else ""
    return f"rejected callers ({count}): {shown}{more}"


class _Pending:
    __slots__ = ("address", "deadline", "handshake", "received", "sock")

    def __init__(
        self, sock: socket.socket, address: Any, deadline: float, handshake: ListenerHandshake
    ) -> None:
        self.sock = sock
        self.address = address
        self.deadline = deadline
        self.handshake = handshake
        self.received = bytearray()


class Acceptor:
    """Authenticates everyone who connects to ``listener`` until stopped.

    ``wanted(j)`` says whether a caller claiming worker index ``j`` may still connect (asked
    before we answer its hello); ``admit(j, sock, address)`` receives an authenticated caller's
    socket, back in blocking mode, after the ACK was sent, and returns False to refuse it (it
    is then closed and recorded as rejected).  Both are called on the acceptor thread.  The
    listener stays owned by the caller: :meth:`stop` does not close it.
    """

    def __init__(
        self,
        listener: socket.socket,
        secret: bytes,
        index: int,
        peers: int,
        wanted: Callable[[int], bool],
        admit: Callable[[int, socket.socket, Any], bool],
        *,
        handshake_timeout: float,
        purpose: str = MESH,
        name: str = "pytimely-accept",
        refused: Callable[[int], None] | None = None,
    ) -> None:
        self._listener = listener
        self._secret = secret
        self._index = index
        self._peers = peers
        self._wanted = wanted
        self._admit = admit
        self._refused = refused
        self._handshake_timeout = handshake_timeout
        self._purpose = purpose
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._rejected_count = 0
        self._rejected: list[Rejection] = []
        self._pending: dict[socket.socket, _Pending] = {}
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Start the acceptor thread, which calls ``wanted`` and ``admit`` until :meth:`stop`."""
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting; pending handshakes are abandoned (closed, not recorded)."""
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(2.0)

    def rejections(self) -> tuple[int, list[Rejection]]:
        """How many callers were rejected so far, and the first few of them with reasons."""
        with self._lock:
            return self._rejected_count, list(self._rejected)

    # --- the acceptor thread -----------------------------------------------------------------

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        try:
            self._listener.setblocking(False)
            selector.register(self._listener, selectors.EVENT_READ)
            while not self._stopped.is_set():
                now = time.monotonic()
                for pending in [p for p in self._pending.values() if p.deadline <= now]:
                    self._reject(
                        selector,
                        pending,
                        f"no complete handshake within {self._handshake_timeout:g} s",
                    )
                wait = min((p.deadline for p in self._pending.values()), default=now + _POLL)
                for key, _events in selector.select(max(0.0, min(wait - now, _POLL))):
                    if key.fileobj is self._listener:
                        if not self._accept_ready(selector):
                            return
                    else:
                        pending = self._pending.get(key.fileobj)  # type: ignore[call-overload]
                        if pending is not None:  # (not dropped earlier in this round)
                            self._advance(selector, pending)
        finally:
            for pending in self._pending.values():
                pending.sock.close()
            self._pending.clear()
            selector.close()

    def _accept_ready(self, selector: selectors.BaseSelector) -> bool:
        """Accept callers waiting in the backlog; False once the listener is closed.

        At most :data:`_ACCEPTS_PER_ROUND` at a time, so that a flood of new connections cannot
        starve the handshakes already under way (a real peer's among them).
        """
        for _ in range(_ACCEPTS_PER_ROUND):
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return True
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    if not self._pending:  # nothing of ours to free: wait, do not spin
                        self._stopped.wait(_POLL)
                        return True
                    oldest = min(self._pending.values(), key=lambda p: p.deadline)
                    self._reject(selector, oldest, "dropped to make room (out of descriptors)")
                    continue
                return False  # the listener was closed: setup is over
            sock.setblocking(False)
            pending = _Pending(
                sock,
                address,
                time.monotonic() + self._handshake_timeout,
                ListenerHandshake(
                    self._secret, self._index, self._peers, self._wanted, self._purpose
                ),
            )
            self._pending[sock] = pending
            selector.register(sock, selectors.EVENT_READ)
        return True

    def _advance(self, selector: selectors.BaseSelector, pending: _Pending) -> None:
        """Read what the caller sent; step its handshake once a message is complete."""
        handshake = pending.handshake
        try:
            data = pending.sock.recv(handshake.needed - len(pending.received))
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._reject(selector, pending, f"connection error: {exc}")
            return
        if not data:
            if handshake.caller is None:
                why = "closed the connection before its hello"
            else:  # e.g. a caller with another secret, which could not verify our reply
                why = (
                    f"claimed to be worker {handshake.caller}, "
                    "then hung up without proving the secret"
                )
            self._reject(selector, pending, why)
            return
        pending.received += data
        if len(pending.received) < handshake.needed:
            return
        message = bytes(pending.received)
        pending.received.clear()
        try:
            reply = handshake.step(message)
            if reply:
                self._send_reply(pending.sock, reply)
        except SecretMismatch as exc:  # the caller says our proof failed
            self._reject(selector, pending, str(exc))
            if self._refused is not None and handshake.caller is not None:
                self._refused(handshake.caller)
            return
        except AuthenticationError as exc:  # its proof failed: say so, then hang up
            try:
                pending.sock.send(NAK)
            except OSError:
                pass
            self._reject(selector, pending, str(exc))
            return
        except (OSError, CommunicationError) as exc:
            self._reject(selector, pending, str(exc))
            return
        if handshake.needed:
            return
        if handshake.probe:  # answered: nothing more to do with it
            selector.unregister(pending.sock)
            del self._pending[pending.sock]
            pending.sock.close()
            return
        # Authenticated.  The caller waits for the ACK before it sends anything else.
        caller = handshake.caller
        assert caller is not None
        selector.unregister(pending.sock)
        del self._pending[pending.sock]
        if not self._wanted(caller):
            self._record(pending, f"worker {caller} is already connected")
            return
        try:
            pending.sock.setblocking(True)
            pending.sock.sendall(ACK)
        except OSError as exc:
            self._record(pending, f"connection error: {exc}")
            return
        if not self._admit(caller, pending.sock, pending.address):
            self._record(pending, f"worker {caller} is no longer expected")

    @staticmethod
    def _send_reply(sock: socket.socket, reply: bytes) -> None:
        # A listener sends one reply of ~100 bytes before the caller must answer: far less than
        # any socket send buffer, so a short write means a caller that advertises no receive
        # window at all.  We never wait for such a caller: it is rejected.
        if sock.send(reply) != len(reply):
            raise HandshakeRejected("the caller does not read the handshake reply")

    def _reject(self, selector: selectors.BaseSelector, pending: _Pending, reason: str) -> None:
        selector.unregister(pending.sock)
        del self._pending[pending.sock]
        self._record(pending, reason)

    def _record(self, pending: _Pending, reason: str) -> None:
        pending.sock.close()
        with self._lock:
            self._rejected_count += 1
            if len(self._rejected) < MAX_RECORDED_REJECTIONS:
                self._rejected.append(Rejection(format_address(pending.address), reason))
