"""Mutual authentication of a new connection between two workers.

Before a connection carries a single frame, each side proves to the other that it knows the
mesh's shared secret, and the accepting side learns (and checks) which worker is calling.  Until
this succeeds nothing received on the connection is interpreted beyond fixed-size binary fields
— in particular nothing is ever unpickled — so a stray client, a port scanner, a process of
another run or random bytes cannot get as far as the decoder.

The protocol is an HMAC-SHA256 challenge-response in three messages (C connects, L listens)::

    C -> L   hello_C = MAGIC, version, index_C, peers, nonce_C (32 random bytes)
    L -> C   hello_L = MAGIC, version, index_L, peers, nonce_L;
             HMAC(secret, "L" | hello_C | hello_L)
    C -> L   HMAC(secret, "C" | hello_C | hello_L)
    L -> C   one byte ACK: L has registered C as worker index_C

When a check fails the checking side says so before it closes, with a constant that carries
nothing derived from the secret: a connector whose check of L's MAC failed sends the 32-byte
REFUSED frame in place of its MAC, a listener whose check of C's MAC failed sends NAK in place
of ACK.  Neither proves anything (a stranger can send them too): the mesh only uses REFUSED as
a hint to *probe* the worker's listed address (:mod:`.mesh`).  A *probe* is a hello with the
PROBE flag: the listener answers it with its hello and MAC as usual (for any other index of the
mesh) and closes, so that the prober can check, at an address it trusts, whether that process
shares its secret.

Each MAC covers both fresh nonces, so a recorded handshake cannot be replayed, and the two
directions use different labels, so one side's MAC cannot be reflected back as the other's.
Both hellos are inside the MAC, so the claimed indices and mesh size are authenticated too.  The
listener checks the claimed index against the workers it still expects before answering, and
registers it only after the connector's MAC verified.  The connector checks that the listener is
the worker it meant to reach.

Every read and write of a handshake is bounded by one absolute *deadline* for the whole
exchange (when the caller gives one), not by a timeout per read: a caller that dribbles one
byte every few seconds is cut off at the deadline just like a silent one.  The listener's side
is also available as :class:`ListenerHandshake`, a state machine over bytes that does no I/O,
so that an acceptor can run many handshakes at once in a single thread.

What this does not give: confidentiality or integrity of the frames that follow (no TLS).  The
mesh listens on loopback by default; across hosts, run it on a trusted network.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct
import time
from collections.abc import Callable

from ..errors import AuthenticationError, HandshakeRejected, HandshakeTimeout, SecretMismatch

__all__ = [
    "CAPTURE",
    "MESH",
    "HandshakeRejected",
    "HandshakeTimeout",
    "ListenerHandshake",
    "SecretMismatch",
    "accept_handshake",
    "connect_handshake",
]

_MAGIC = b"PYTIMELY"
_VERSION = 1
_HELLO = struct.Struct("<8sHHII32s")  # magic, version, flags, index, peers, nonce
_MAC_SIZE = hashlib.sha256().digest_size
_ACK = b"\x06"
_NAK = b"\x15"
#: Sent by a connector in place of its MAC when the listener's MAC did not verify.
_REFUSED = b"PYTIMELY/proof-refused/v1".ljust(_MAC_SIZE, b"\0")
#: Hello flag: a probe, answered with the listener's proof and then closed.
_FLAG_PROBE = 1

#: Purposes a handshake can be for.  The purpose is part of both MAC labels, so a handshake
#: made for one (say a worker joining the mesh) never verifies as another (a capture stream),
#: even under the same secret.
MESH = "mesh"
CAPTURE = "capture"


def _labels(purpose: str) -> tuple[bytes, bytes]:
    """The (listener, connector) MAC labels of a handshake for ``purpose``."""
    if purpose == MESH:  # the labels of version 1, unchanged
        return b"pytimely/listener/v1|", b"pytimely/connector/v1|"
    tag = purpose.encode("ascii")
    return b"pytimely/" + tag + b"/listener/v1|", b"pytimely/" + tag + b"/connector/v1|"


def _mac(secret: bytes, label: bytes, hello_c: bytes, hello_l: bytes) -> bytes:
    return hmac.new(secret, label + hello_c + hello_l, hashlib.sha256).digest()


def _use_remaining_time(sock: socket.socket, deadline: float | None) -> None:
    """Let the next socket operation wait at most until ``deadline`` (``None``: as set)."""
    if deadline is None:
        return
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise HandshakeTimeout("the handshake did not complete before its deadline")
    sock.settimeout(remaining)


def _recv_exact(sock: socket.socket, n: int, deadline: float | None = None) -> bytes:
    data = bytearray()
    while len(data) < n:
        _use_remaining_time(sock, deadline)
        try:
            chunk = sock.recv(n - len(data))
        except TimeoutError:
            raise HandshakeTimeout("the handshake did not complete before its deadline") from None
        if not chunk:
            raise HandshakeRejected("the connection was closed during the handshake")
        data += chunk
    return bytes(data)


def _send_all(sock: socket.socket, data: bytes, deadline: float | None = None) -> None:
    _use_remaining_time(sock, deadline)
    try:
        sock.sendall(data)
    except TimeoutError:
        raise HandshakeTimeout("the handshake did not complete before its deadline") from None


def _parse_hello(raw: bytes) -> tuple[int, int, int]:
    magic, version, flags, index, peers, _nonce = _HELLO.unpack(raw)
    if magic != _MAGIC:
        raise HandshakeRejected("not a pytimely peer (bad magic)")
    if version != _VERSION:
        raise HandshakeRejected(f"handshake version {version}, expected {_VERSION}")
    return index, peers, flags


def _say_refused(sock: socket.socket) -> None:
    """Tell the other side its proof failed (best effort: it may be gone already)."""
    try:
        sock.settimeout(0.5)
        sock.sendall(_REFUSED)
    except OSError:
        pass


def connect_handshake(
    sock: socket.socket,
    secret: bytes,
    index: int,
    peers: int,
    expected: int,
    *,
    purpose: str = MESH,
    deadline: float | None = None,
    probe: bool = False,
) -> None:
    """Authenticate a connection we opened to worker ``expected``.

    Raises :class:`SecretMismatch` (an :class:`AuthenticationError`) if the listener does not
    know our secret, after telling it so, and :class:`AuthenticationError` if it is another
    worker (retrying will not help); :class:`HandshakeRejected` if it hung up on us (it may
    reject us for a reason that goes away, e.g. a stale process on the port), including
    :class:`HandshakeTimeout` past ``deadline`` (a ``time.monotonic()`` value), or ``OSError``.
    With ``probe``, only check the listener's proof and stop there (nothing is registered).
    """
    listener_label, connector_label = _labels(purpose)
    flags = _FLAG_PROBE if probe else 0
    hello_c = _HELLO.pack(_MAGIC, _VERSION, flags, index, peers, os.urandom(32))
    _send_all(sock, hello_c, deadline)
    reply = _recv_exact(sock, _HELLO.size + _MAC_SIZE, deadline)
    hello_l, mac_l = reply[: _HELLO.size], reply[_HELLO.size :]
    their_index, their_peers, _ = _parse_hello(hello_l)
    if not hmac.compare_digest(mac_l, _mac(secret, listener_label, hello_c, hello_l)):
        _say_refused(sock)
        raise SecretMismatch(
            f"the process expected to be worker {expected} did not prove knowledge of our "
            "secret: it was started with another secret (or is not part of this run)"
        )
    if their_index != expected or their_peers != peers:
        raise AuthenticationError(
            f"the process expected to be worker {expected} of {peers} says it is worker "
            f"{their_index} of {their_peers} (check the host file / process indices)"
        )
    if probe:
        return
    _send_all(sock, _mac(secret, connector_label, hello_c, hello_l), deadline)
    answer = _recv_exact(sock, 1, deadline)
    if answer == _NAK:  # it proved our secret, yet refuses ours: not a mismatch of secrets
        raise AuthenticationError(f"worker {expected} rejected our proof of the secret")
    if answer != _ACK:
        raise HandshakeRejected(f"worker {expected} did not acknowledge the handshake")


class ListenerHandshake:
    """The listening side of one handshake, as a state machine over bytes (it does no I/O).

    The driver reads exactly :attr:`needed` bytes, passes them to :meth:`step` and sends what
    it returns, until :attr:`needed` is 0: then the caller, worker :attr:`caller`, has proved
    knowledge of the secret.  The driver then registers the connection and sends
    :data:`ACK`.  :meth:`step` raises :class:`HandshakeRejected` or
    :class:`AuthenticationError` on anything wrong; the driver then closes the connection.
    Nothing the caller sends is interpreted beyond fixed-size fields.
    """

    def __init__(
        self,
        secret: bytes,
        index: int,
        peers: int,
        wanted: Callable[[int], bool],
        purpose: str = MESH,
    ) -> None:
        self._secret = secret
        self._index = index
        self._peers = peers
        self._wanted = wanted
        self._listener_label, self._connector_label = _labels(purpose)
        self._hello_c = b""
        self._hello_l = b""
        #: How many bytes the next :meth:`step` takes (0 once the caller is authenticated).
        self.needed = _HELLO.size
        #: The worker index the caller claims (authenticated once :attr:`needed` is 0).
        self.caller: int | None = None
        #: The caller only probed our proof (:attr:`needed` is 0 but it is not authenticated):
        #: send the reply, then close.
        self.probe = False

    def step(self, data: bytes) -> bytes:
        """Consume the next ``needed`` bytes from the caller; return the bytes to send back."""
        if len(data) != self.needed or not self.needed:
            raise ValueError(f"step() takes exactly {self.needed} bytes, got {len(data)}")
        if not self._hello_c:
            their_index, their_peers, flags = _parse_hello(data)
            self.probe = bool(flags & _FLAG_PROBE)
            if self.probe:
                if their_peers != self._peers or not 0 <= their_index < self._peers:
                    raise HandshakeRejected(f"probe from worker {their_index} of {their_peers}")
            elif their_peers != self._peers or not self._wanted(their_index):
                raise HandshakeRejected(
                    f"caller claims to be worker {their_index} of {their_peers}, which is not "
                    "expected"
                )
            self._hello_c, self.caller = data, their_index
            self._hello_l = _HELLO.pack(
                _MAGIC, _VERSION, 0, self._index, self._peers, os.urandom(32)
            )
            self.needed = 0 if self.probe else _MAC_SIZE
            return self._hello_l + _mac(
                self._secret, self._listener_label, self._hello_c, self._hello_l
            )
        if data == _REFUSED:
            raise SecretMismatch(
                f"caller claiming to be worker {self.caller} hung up without proving the "
                "secret: it reported that our proof failed (another secret?)"
            )
        expected = _mac(self._secret, self._connector_label, self._hello_c, self._hello_l)
        if not hmac.compare_digest(data, expected):
            raise AuthenticationError(
                f"caller claiming to be worker {self.caller} failed authentication (wrong secret)"
            )
        self.needed = 0
        return b""


#: The listener's last message: it has registered the caller.
ACK = _ACK
#: The listener's last message instead of :data:`ACK` when the caller's proof failed.
NAK = _NAK


def accept_handshake(
    sock: socket.socket,
    secret: bytes,
    index: int,
    peers: int,
    wanted: Callable[[int], bool],
    register: Callable[[int], bool],
    *,
    purpose: str = MESH,
    deadline: float | None = None,
) -> int:
    """Authenticate a connection we accepted (blocking); return the caller's worker index.

    ``wanted(j)`` says whether worker ``j`` may still connect (checked before we answer);
    ``register(j)`` records the connection once authenticated and returns False if ``j`` got
    connected meanwhile.  Every read and write waits at most until ``deadline`` (a
    ``time.monotonic()`` value; ``None``: the socket's own timeout).  Raises on any failure;
    the caller closes the socket.
    """
    handshake = ListenerHandshake(secret, index, peers, wanted, purpose)
    while handshake.needed:
        try:
            reply = handshake.step(_recv_exact(sock, handshake.needed, deadline))
        except AuthenticationError:
            try:
                _send_all(sock, NAK, deadline)
            except (OSError, HandshakeRejected):
                pass
            raise
        if reply:
            _send_all(sock, reply, deadline)
    if handshake.probe:
        raise HandshakeRejected(f"worker {handshake.caller} only probed our proof")
    assert handshake.caller is not None
    if not register(handshake.caller):
        raise HandshakeRejected(f"worker {handshake.caller} is already connected")
    _send_all(sock, ACK, deadline)
    return handshake.caller
