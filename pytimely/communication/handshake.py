"""Mutual authentication of a new connection between two workers.

Before a connection carries a single frame, each side proves to the other that it knows the
mesh's shared secret, and the accepting side learns (and checks) which worker is calling.  Until
this succeeds nothing received on the connection is interpreted beyond fixed-size binary fields
— in particular nothing is ever unpickled — so a stray client, a port scanner, a process of
another run or random bytes cannot get as far as the decoder.

The protocol is an HMAC-SHA256 challenge-response in three messages (C connects, L listens)::

    C -> L   hello_C = MAGIC, version, index_C, peers, nonce_C (32 random bytes)
    L -> C   hello_L = MAGIC, version, index_L, peers, nonce_L;  HMAC(secret, "L" | hello_C | hello_L)
    C -> L   HMAC(secret, "C" | hello_C | hello_L)
    L -> C   one byte ACK: L has registered C as worker index_C

Each MAC covers both fresh nonces, so a recorded handshake cannot be replayed, and the two
directions use different labels, so one side's MAC cannot be reflected back as the other's.
Both hellos are inside the MAC, so the claimed indices and mesh size are authenticated too.  The
listener checks the claimed index against the workers it still expects before answering, and
registers it only after the connector's MAC verified.  The connector checks that the listener is
the worker it meant to reach.

What this does not give: confidentiality or integrity of the frames that follow (no TLS).  The
mesh listens on loopback by default; across hosts, run it on a trusted network.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct
from collections.abc import Callable

from ..errors import AuthenticationError, CommunicationError

__all__ = ["HandshakeRejected", "accept_handshake", "connect_handshake"]

_MAGIC = b"PYTIMELY"
_VERSION = 1
_HELLO = struct.Struct("<8sHHII32s")  # magic, version, flags, index, peers, nonce
_MAC_SIZE = hashlib.sha256().digest_size
_ACK = b"\x06"
_LISTENER = b"pytimely/listener/v1|"
_CONNECTOR = b"pytimely/connector/v1|"


class HandshakeRejected(CommunicationError):
    """The other side closed the connection or sent something that is not a pytimely hello."""


def _mac(secret: bytes, label: bytes, hello_c: bytes, hello_l: bytes) -> bytes:
    return hmac.new(secret, label + hello_c + hello_l, hashlib.sha256).digest()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise HandshakeRejected("the connection was closed during the handshake")
        data += chunk
    return bytes(data)


def _parse_hello(raw: bytes) -> tuple[int, int]:
    magic, version, _flags, index, peers, _nonce = _HELLO.unpack(raw)
    if magic != _MAGIC:
        raise HandshakeRejected("not a pytimely peer (bad magic)")
    if version != _VERSION:
        raise HandshakeRejected(f"handshake version {version}, expected {_VERSION}")
    return index, peers


def connect_handshake(
    sock: socket.socket, secret: bytes, index: int, peers: int, expected: int
) -> None:
    """Authenticate a connection we opened to worker ``expected``.

    Raises :class:`AuthenticationError` if the listener does not know the secret or is another
    worker (retrying will not help), :class:`HandshakeRejected` if it hung up on us (it may
    reject us for a reason that goes away, e.g. a stale process on the port), or ``OSError``.
    """
    hello_c = _HELLO.pack(_MAGIC, _VERSION, 0, index, peers, os.urandom(32))
    sock.sendall(hello_c)
    reply = _recv_exact(sock, _HELLO.size + _MAC_SIZE)
    hello_l, mac_l = reply[: _HELLO.size], reply[_HELLO.size :]
    their_index, their_peers = _parse_hello(hello_l)
    if not hmac.compare_digest(mac_l, _mac(secret, _LISTENER, hello_c, hello_l)):
        raise AuthenticationError(
            f"the process expected to be worker {expected} did not prove knowledge of the shared "
            "secret (is it started with the same secret, and part of this run?)"
        )
    if their_index != expected or their_peers != peers:
        raise AuthenticationError(
            f"the process expected to be worker {expected} of {peers} says it is worker "
            f"{their_index} of {their_peers} (check the host file / process indices)"
        )
    sock.sendall(_mac(secret, _CONNECTOR, hello_c, hello_l))
    if _recv_exact(sock, 1) != _ACK:
        raise HandshakeRejected(f"worker {expected} did not acknowledge the handshake")


def accept_handshake(
    sock: socket.socket,
    secret: bytes,
    index: int,
    peers: int,
    wanted: Callable[[int], bool],
    register: Callable[[int], bool],
) -> int:
    """Authenticate a connection we accepted; return the caller's worker index.

    ``wanted(j)`` says whether worker ``j`` may still connect (checked before we answer);
    ``register(j)`` records the connection once authenticated and returns False if ``j`` got
    connected meanwhile.  Raises on any failure; the caller closes the socket.
    """
    hello_c = _recv_exact(sock, _HELLO.size)
    their_index, their_peers = _parse_hello(hello_c)
    if their_peers != peers or not wanted(their_index):
        raise HandshakeRejected(
            f"caller claims to be worker {their_index} of {their_peers}, which is not expected"
        )
    hello_l = _HELLO.pack(_MAGIC, _VERSION, 0, index, peers, os.urandom(32))
    sock.sendall(hello_l + _mac(secret, _LISTENER, hello_c, hello_l))
    mac_c = _recv_exact(sock, _MAC_SIZE)
    if not hmac.compare_digest(mac_c, _mac(secret, _CONNECTOR, hello_c, hello_l)):
        raise AuthenticationError(
            f"caller claiming to be worker {their_index} failed authentication (wrong secret)"
        )
    if not register(their_index):
        raise HandshakeRejected(f"worker {their_index} is already connected")
    sock.sendall(_ACK)
    return their_index
