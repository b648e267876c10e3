"""Building the TCP mesh: every pair of worker processes connected once, authenticated.

Each worker listens (on loopback unless its rendezvous says otherwise), publishes its address
through a :mod:`rendezvous <.rendezvous>`, then connects to every lower-indexed worker while
a background thread accepts the higher-indexed ones — the same orientation as the Rust
crate.  Connecting retries until a deadline (30 s by default), so processes may start in
any order.  Every connection is authenticated in both directions before anything on it is
decoded (:mod:`.handshake`); a caller that fails — wrong secret, unexpected index, random
bytes, silence, a byte every few seconds — is dropped without affecting anything else: the
handshakes run concurrently with no limit on their number, each bounded by one whole
deadline (:mod:`.acceptor`).  If the mesh does not form, the error names the workers that
did not arrive and, separately, the callers that were rejected.  Once every expected peer
is connected the listening socket is closed: a running mesh accepts nothing new.

Processes started with different secrets fail within seconds, each with a
:class:`~pytimely.errors.SecretMismatch` naming the other worker, its address and the fix.  A
connector finds out from the listener's proof and says so before it hangs up; the listener
takes that as a hint only (a stranger could send it) and *probes* the worker's listed address
for its proof, as it also does about once a second for every worker that has not connected
yet.  Only a proof that fails at that address is a mismatch, so strangers still cannot abort a
forming mesh.  A worker that found a mismatch keeps answering probes for
:data:`MISMATCH_LINGER` seconds before it raises, so that its peers find out too.

The result, one blocking socket per other worker keyed by its index, is what
:class:`~.tcp.TcpAllocator` runs on; this module knows nothing of frames or workers' messages.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from ..errors import AuthenticationError, CommunicationError, SecretMismatch
from .acceptor import Acceptor, describe_rejections, format_address
from .handshake import HandshakeRejected, connect_handshake
from .rendezvous import Address, Rendezvous

__all__ = ["HANDSHAKE_TIMEOUT", "build_mesh"]

#: How long one whole handshake may take, on either side, from connection to ACK (however the
#: other side spreads its bytes).  Real peers need a few milliseconds; a few seconds leave room
#: for a loaded machine while bounding how long a stranger can occupy a connection.
HANDSHAKE_TIMEOUT = 5.0
#: While it waits for higher-indexed workers, a worker probes the listed address of each
#: missing one this often (and at once when a caller claiming to be it reports that our proof
#: failed), so that a worker started with another secret is named within seconds.
PROBE_INTERVAL = 1.0
#: How long a worker that found a secret mismatch keeps answering probes before it raises, so
#: that its peers can find out too.
MISMATCH_LINGER = 2.0
#: How long one probe may take (connection and the listener's proof).
PROBE_TIMEOUT = 1.0


def _mismatch(index: int, j: int, address: Address, what: str) -> SecretMismatch:
    """Worker ``index``'s error: worker ``j`` (listed at ``address``) has another secret."""
    return SecretMismatch(
        f"worker {index}: the cluster secret differs between processes: worker {j} at "
        f"{format_address(address)} {what} (or it is a process of another run).  Start every "
        "process of the cluster with the same secret: the same PYTIMELY_SECRET environment "
        "variable (or --secret TEXT) everywhere, "
        "or the same secret= argument"
    )


def _probe(index: int, peers: int, secret: bytes, j: int, address: Address, timeout: float) -> bool:
    """Check that the process listening at worker ``j``'s listed address shares our secret.

    Raises :class:`SecretMismatch` if it answers with a proof that fails; returns True if it
    proves our secret, False if it is not there (yet) or does not answer a probe.
    """
    deadline = time.monotonic() + timeout
    try:
        sock = socket.create_connection(address, timeout=timeout)
    except OSError:
        return False
    try:
        connect_handshake(sock, secret, index, peers, j, deadline=deadline, probe=True)
        return True
    except SecretMismatch:
        raise _mismatch(
            index,
            j,
            address,
            "answered with a proof that does not verify with our secret",
        ) from None
    except (OSError, CommunicationError):
        return False
    finally:
        sock.close()


def _configure(sock: socket.socket) -> None:
    """A mesh connection: blocking, no Nagle delay, keep-alive probes to notice dead hosts."""
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 4)):
        if hasattr(socket, option):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
            except OSError:  # pragma: no cover - platform without the option
                pass


def _listen(address: Address) -> socket.socket:
    host, port = address
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        # The largest backlog the system allows: strangers arriving in a burst must not make
        # the kernel drop a real peer's SYN (it would only retry a second later).
        return socket.create_server((host, port), family=family, backlog=socket.SOMAXCONN)
    except OSError as exc:
        raise CommunicationError(f"cannot listen on {host}:{port}: {exc}") from exc


class _IncomingPeers:
    """Collects the authenticated connections of workers ``index+1 .. peers-1``.

    The handshakes themselves run in an :class:`~.acceptor.Acceptor` (one thread, no limit on
    concurrent handshakes, one whole deadline of :data:`HANDSHAKE_TIMEOUT` per connection), so
    callers that are not workers of this mesh cannot delay the ones that are.  Invariant:
    ``connected`` only ever holds expected workers, each once, on blocking sockets.
    """

    def __init__(
        self,
        listener: socket.socket,
        index: int,
        peers: int,
        secret: bytes,
        addresses: list[Address],
    ) -> None:
        self.index = index
        self.peers = peers
        self.secret = secret
        self.addresses = addresses
        self.suspects: set[int] = set()
        self.expected = set(range(index + 1, peers))
        self.connected: dict[int, tuple[socket.socket, Any]] = {}
        self.cond = threading.Condition()
        self.stopped = False
        self.handshakes = Acceptor(
            listener,
            secret,
            index,
            peers,
            self._wanted,
            self._admit,
            handshake_timeout=HANDSHAKE_TIMEOUT,
            name=f"pytimely-accept-{index}",
            refused=self._refused,
        )

    def start(self) -> None:
        # Always, even expecting nobody: lower-indexed workers may probe our proof.
        self.handshakes.start()

    def _refused(self, j: int) -> None:
        with self.cond:
            if j in self.expected and j not in self.connected:
                self.suspects.add(j)
                self.cond.notify_all()

    def _wanted(self, j: int) -> bool:
        with self.cond:
            return not self.stopped and j in self.expected and j not in self.connected

    def _admit(self, j: int, sock: socket.socket, address: Any) -> bool:
        with self.cond:
            if self.stopped or j not in self.expected or j in self.connected:
                return False
            _configure(sock)
            self.connected[j] = (sock, address)
            self.cond.notify_all()
            return True

    def rejected_callers(self) -> str:
        """The callers hung up on so far, with reasons (``""`` if none)."""
        return describe_rejections(*self.handshakes.rejections())

    def wait(self, deadline: float, timeout: float) -> dict[int, tuple[socket.socket, Any]]:
        """Every expected worker's connection, or raise naming the missing ones.

        The error lists the workers that did not arrive (index and published address) and,
        separately, the callers that were rejected meanwhile and why.
        """
        next_probe = time.monotonic() + PROBE_INTERVAL
        verified: set[int] = set()  # proved our secret at their listed address: no more probes
        while True:
            with self.cond:
                self.cond.wait_for(
                    lambda: self.expected <= self.connected.keys() or bool(self.suspects),
                    max(0.0, min(deadline, next_probe) - time.monotonic()),
                )
                missing = sorted(self.expected - self.connected.keys())
                suspects, self.suspects = self.suspects, set()
            if not missing or time.monotonic() >= deadline:
                break
            if suspects or time.monotonic() >= next_probe:
                # Suspects first: a caller claiming to be one of them said our proof failed.
                for j in sorted(suspects) + [j for j in missing if j not in suspects]:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    if j in missing and (j in suspects or j not in verified):
                        address = self.addresses[j]
                        probe_timeout = min(PROBE_TIMEOUT, remaining)
                        if _probe(self.index, self.peers, self.secret, j, address, probe_timeout):
                            verified.add(j)
                next_probe = time.monotonic() + PROBE_INTERVAL
        self.stop()
        if missing:
            self.close_all()
            absent = ", ".join(
                f"worker {j} (at {format_address(self.addresses[j])})" for j in missing
            )
            rejected = self.rejected_callers()
            raise CommunicationError(
                f"worker {self.index}: {absent} did not connect within {timeout:g} s"
                + (f"; {rejected}" if rejected else "")
            )
        return self.connected

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
        self.handshakes.stop()

    def close_all(self) -> None:
        with self.cond:
            for sock, _ in self.connected.values():
                sock.close()
            self.connected = {}


def _connect(
    index: int, peers: int, secret: bytes, j: int, address: Address, deadline: float
) -> socket.socket:
    """Connect to worker ``j`` and authenticate, retrying until ``deadline``.

    Each attempt gets one whole-handshake deadline of at most :data:`HANDSHAKE_TIMEOUT`, so a
    process on ``address`` that accepts but never answers costs one attempt, not the setup.
    """
    delay = 0.02
    last_error: BaseException | None = None
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise CommunicationError(
                f"worker {index}: could not connect to worker {j} at {format_address(address)} "
                f"in time (last error: {last_error!r})"
            )
        attempt_deadline = time.monotonic() + min(remaining, HANDSHAKE_TIMEOUT)
        try:
            sock = socket.create_connection(address, timeout=min(remaining, HANDSHAKE_TIMEOUT))
        except OSError as exc:
            last_error = exc
        else:
            try:
                connect_handshake(sock, secret, index, peers, j, deadline=attempt_deadline)
                _configure(sock)
                return sock
            except SecretMismatch:
                sock.close()
                raise _mismatch(
                    index,
                    j,
                    address,
                    "did not prove knowledge of this process' secret",
                ) from None
            except AuthenticationError as exc:
                sock.close()
                raise AuthenticationError(
                    f"worker {index}: connecting to worker {j} at {format_address(address)}: {exc}"
                ) from None
            except (OSError, HandshakeRejected) as exc:
                sock.close()
                last_error = exc
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.5)


def build_mesh(
    index: int, peers: int, rendezvous: Rendezvous, timeout: float
) -> dict[int, tuple[socket.socket, Any]]:
    """Connections to every other worker, authenticated, keyed by worker index."""
    secret = rendezvous.secret
    if not secret:
        raise AuthenticationError(
            "a TCP mesh needs a shared secret (e.g. --secret or PYTIMELY_SECRET)"
        )
    if isinstance(secret, str):
        secret = secret.encode("utf-8")
    deadline = time.monotonic() + timeout
    bind_host, bind_port = rendezvous.bind_address(index)
    listener = _listen((bind_host, bind_port))
    acceptor: _IncomingPeers | None = None
    connected: dict[int, tuple[socket.socket, Any]] = {}
    try:
        host, port = listener.getsockname()[:2]
        addresses = rendezvous.exchange(index, (bind_host or host, port))
        if len(addresses) != peers:
            raise CommunicationError(
                f"worker {index}: the rendezvous returned {len(addresses)} addresses for "
                f"{peers} workers"
            )
        acceptor = _IncomingPeers(listener, index, peers, secret, addresses)
        acceptor.start()
        for j in range(index):
            try:
                sock = _connect(index, peers, secret, j, addresses[j], deadline)
            except AuthenticationError:
                raise
            except CommunicationError as exc:
                rejected = acceptor.rejected_callers()
                if not rejected:
                    raise
                raise CommunicationError(f"{exc}; meanwhile {rejected}") from None
            connected[j] = (sock, addresses[j])
        connected.update(acceptor.wait(deadline, timeout))
        return connected
    except SecretMismatch:
        # Keep answering probes a moment, so that the workers waiting for us learn it too.
        time.sleep(MISMATCH_LINGER)
        _abandon(acceptor, connected)
        raise
    except BaseException:
        _abandon(acceptor, connected)
        raise
    finally:
        listener.close()


def _abandon(
    acceptor: _IncomingPeers | None, connected: dict[int, tuple[socket.socket, Any]]
) -> None:
    if acceptor is not None:
        acceptor.stop()
        acceptor.close_all()
    for sock, _ in connected.values():
        sock.close()
