"""The side channels of a Spark deployment: driver <-> workers control, feeders -> workers data.

Besides the worker mesh (:mod:`pytimely.communication.tcp`), a Spark run has two kinds of
connections, both authenticated with the run's shared secret before anything on them is decoded
(the mesh's own HMAC handshake, :mod:`pytimely.communication.handshake`, in a different
namespace: the ``peers`` field of the hellos, which the MACs cover, is a constant no mesh uses,
so a control or feed connection can never be mistaken for a mesh connection, nor vice versa):

* **control** — every worker task connects to the driver's :class:`Coordinator` as soon as it
  starts.  Workers report ``hello`` (pid, host), ``ready`` (with the address of their feed
  listener, for the streaming bridge), ``epoch`` (an epoch completed), ``output`` (a directory
  they stage files under, see :mod:`pytimely.spark.staging`), ``error`` (they failed: summary
  and traceback, sent *before* the task fails so the driver learns the real cause first) and
  ``done``.  The driver sends ``close`` (an epoch of pushed input is complete) and ``stop``.
  A worker whose connection ends without ``done`` or ``error`` is recorded as *lost*: its
  process died, and the driver is the one process that can still name it.  If a worker's
  control connection ends without ``stop``/``done`` — the driver died or gave up — the worker
  interrupts itself: no task outlives its driver.
* **feed** — short-lived connections from the tasks of a streaming micro-batch job to worker
  ``partition % N`` carrying Arrow IPC streams tagged with their epoch (:func:`push_batches`),
  and a feeder's control *session* with a worker (:class:`FeedLink` / :class:`FeedSession`):
  where no driver-side coordinator exists (a bridge started from Spark Connect, whose
  ``foreachBatch`` function runs in a Python process of the server), the feeder sends
  ``close``/``replay``/``stop`` over the session and the worker answers and reports there.

Frames: ``<QQ`` (header length, payload length), a pickled header (only ever from an
authenticated peer), then raw payload bytes (Arrow IPC).
"""

from __future__ import annotations

import functools
import itertools
import pickle
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..communication.handshake import accept_handshake, connect_handshake
from ..errors import CommunicationError

__all__ = [
    "ControlClient",
    "Coordinator",
    "FeedLink",
    "FeedListener",
    "FeedSession",
    "push_batches",
    "recv_frame",
    "send_frame",
]

#: ``peers`` value of control hellos (no mesh has this many workers).
CONTROL_NAMESPACE = 0xFFFF_FF01
#: ``peers`` value of feed hellos.
FEED_NAMESPACE = 0xFFFF_FF02
#: The driver's index in the control namespace.
DRIVER_INDEX = 0xFFFF_FF00
#: Feeders' index in the feed namespace.
FEEDER_INDEX = 0xFFFF_FF00
_HEAD = struct.Struct("<QQ")
HANDSHAKE_TIMEOUT = 10.0


def send_frame(sock: socket.socket, header: Any, payload: bytes | memoryview = b"") -> None:
    head = pickle.dumps(header, protocol=5)
    sock.sendall(_HEAD.pack(len(head), len(payload)) + head)
    if len(payload):
        sock.sendall(payload)


def _recv_exact(sock: socket.socket, n: int) -> bytearray | None:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            if got == 0:
                return None
            raise CommunicationError("connection closed in the middle of a frame")
        got += k
    return buf


def recv_frame(sock: socket.socket) -> tuple[Any, bytearray] | None:
    """The next ``(header, payload)``, or None at a clean end of stream."""
    raw = _recv_exact(sock, _HEAD.size)
    if raw is None:
        return None
    hlen, plen = _HEAD.unpack(raw)
    if hlen > 1 << 24:
        raise CommunicationError(f"control frame header of {hlen} bytes")
    head = _recv_exact(sock, hlen) if hlen else bytearray()
    if head is None:
        raise CommunicationError("connection closed in the middle of a frame")
    payload = _recv_exact(sock, plen) if plen else bytearray()
    if payload is None:
        raise CommunicationError("connection closed in the middle of a frame")
    return pickle.loads(head), payload


def _frames(sock: socket.socket) -> Iterator[tuple[Any, bytearray]]:
    """The frames ``sock`` receives, each ``(header, payload)``, until the peer ends the stream
    cleanly: :func:`recv_frame` called until it returns None (its errors propagate)."""
    return iter(functools.partial(recv_frame, sock), None)


def _connect(
    address: tuple[str, int],
    secret: bytes,
    index: int,
    namespace: int,
    expected: int,
    timeout: float,
) -> socket.socket:
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        try:
            sock = socket.create_connection(address, timeout=HANDSHAKE_TIMEOUT)
            try:
                connect_handshake(sock, secret, index, namespace, expected)
            except BaseException:
                sock.close()
                raise
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError as exc:
            if time.monotonic() + delay > deadline:
                raise CommunicationError(
                    f"cannot reach {address[0]}:{address[1]}: {exc!r}"
                ) from exc
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


def _hang_up(sock: socket.socket) -> None:
    """End both directions of ``sock`` (waking a thread blocked reading it), then close it."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def _listen(host: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, 0), family=family, backlog=64)


# --- driver side ---------------------------------------------------------------------------------


def _accept_each(
    listener: socket.socket,
    closed: Callable[[], bool],
    serve: Callable[[socket.socket], None],
    name: str,
) -> None:
    """Accept connections on ``listener`` (which has a short timeout, so ``closed()`` is
    noticed) and serve each on a thread of its own named ``name``, until ``closed()`` or the
    listener is closed.  Each ``serve`` authenticates its caller within its own deadline, so a
    silent caller holds only its own thread."""
    while not closed():
        try:
            sock, _address = listener.accept()
        except TimeoutError:
            continue
        except OSError:
            return
        threading.Thread(target=serve, args=(sock,), daemon=True, name=name).start()


class Coordinator:
    """The driver's end of the control connections of one run (see the module docstring).

    ``on_message(index, header, payload)`` is called on a reader thread for every message from a
    worker, after the coordinator updated its own record of it (``hellos``, ``ready``,
    ``failure``, ``done``, ``epochs``).  ``changed`` is notified on every message.
    """

    def __init__(
        self,
        secret: bytes,
        workers: int,
        bind_host: str,
        advertise_host: str,
        on_message: Callable[[int, Any, bytearray], None] | None = None,
    ) -> None:
        self.secret = secret
        self.workers = workers
        self._listener = _listen(bind_host)
        self.address = (advertise_host, self._listener.getsockname()[1])
        self._listener.settimeout(0.2)
        self._on_message = on_message
        self.changed = threading.Condition()
        self.hellos: dict[int, dict[str, Any]] = {}
        self.ready: dict[int, Any] = {}
        self.done: set[int] = set()
        self.epochs: dict[int, int] = {}  # worker -> highest completed epoch it reported
        self.failure: dict[str, Any] | None = None  # the first worker error reported
        self.errors: list[dict[str, Any]] = []
        self.outputs: set[str] = set()  # directories the workers staged files under
        self._socks: dict[int, socket.socket] = {}
        self._send_lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(
            target=_accept_each,
            args=(self._listener, lambda: self._closed, self._serve, "pytimely-coordinator-conn"),
            name="pytimely-coordinator",
            daemon=True,
        )
        self._thread.start()

    def _serve(self, sock: socket.socket) -> None:
        index: list[int] = []

        def register(j: int) -> bool:
            with self.changed:
                if self._closed or j in self._socks:
                    return False
                self._socks[j] = sock
                index.append(j)
                return True

        try:
            sock.settimeout(HANDSHAKE_TIMEOUT)
            accept_handshake(
                sock,
                self.secret,
                DRIVER_INDEX,
                CONTROL_NAMESPACE,
                lambda j: 0 <= j < self.workers,
                register,
            )
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except (OSError, CommunicationError):
            sock.close()
            return
        (i,) = index
        try:
            for header, payload in _frames(sock):
                self._record(i, header)
                if self._on_message is not None:
                    self._on_message(i, header, payload)
        except (OSError, CommunicationError):
            pass
        finally:
            with self.changed:
                if self._socks.get(i) is sock:
                    del self._socks[i]
                ended = i in self.done or any(e["worker"] == i for e in self.errors)
                if not ended and not self._closed:
                    self._record_error(i, self._lost_report(i))
                self.changed.notify_all()
            sock.close()

    def _lost_report(self, i: int) -> dict[str, Any]:
        """The report of worker ``i``, whose control connection ended without ``done`` or
        ``error``: its process died (killed, crashed, or its executor was lost)."""
        hello = self.hellos.get(i, {})
        where = f" (pid {hello['pid']} on {hello['host']})" if "pid" in hello else ""
        return {
            "worker": i,
            "origin": i,
            "relayed": False,
            "lost": True,
            "summary": f"the process of worker {i}{where} ended without reporting an error: it "
            "was killed, crashed, or its executor was lost",
            "traceback": "",
        }

    def _record_error(self, i: int, report: dict[str, Any]) -> None:
        """Keep ``report`` (call with ``changed`` held).  The first report that is not relayed
        (a worker's own failure, rather than another's failure seen through the mesh) becomes
        :attr:`failure`."""
        report = dict(report)
        report["time"] = time.monotonic()
        self.errors.append(report)
        if self.failure is None or (self.failure.get("relayed") and not report.get("relayed")):
            self.failure = report

    def _record(self, i: int, header: Any) -> None:
        kind = header[0]
        with self.changed:
            if kind == "hello":
                self.hellos[i] = header[1]
            elif kind == "ready":
                self.ready[i] = header[1]
            elif kind == "epoch":
                self.epochs[i] = max(self.epochs.get(i, -1), header[1])
            elif kind == "done":
                self.done.add(i)
            elif kind == "error":
                self._record_error(i, header[1])
            elif kind == "output":
                self.outputs.add(header[1])
            self.changed.notify_all()

    def send(self, i: int, header: Any, payload: bytes = b"") -> bool:
        """Send a message to worker ``i``; False if it is not connected."""
        sock = self._socks.get(i)
        if sock is None:
            return False
        try:
            with self._send_lock:
                send_frame(sock, header, payload)
            return True
        except OSError:
            return False

    def broadcast(self, header: Any) -> None:
        for i in range(self.workers):
            self.send(i, header)

    def connected(self) -> set[int]:
        with self.changed:
            return set(self._socks)

    def wait(self, condition: Callable[[], bool], timeout: float | None) -> bool:
        with self.changed:
            return self.changed.wait_for(condition, timeout)

    def close(self) -> None:
        with self.changed:
            self._closed = True
            socks = list(self._socks.values())
            self.changed.notify_all()
        try:
            self._listener.close()
        except OSError:
            pass
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        self._thread.join(1.0)


# --- worker side ---------------------------------------------------------------------------------


class ControlClient:
    """A worker's control connection to the driver.

    Messages from the driver are handed to ``on_message(header)`` on a reader thread.  If the
    connection ends before :meth:`close` (the driver died or gave up on the run),
    ``on_lost(reason)`` is called.
    """

    def __init__(
        self,
        address: tuple[str, int],
        secret: bytes,
        index: int,
        on_message: Callable[[Any], None] | None = None,
        on_lost: Callable[[str], None] | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.index = index
        self._sock = _connect(
            tuple(address), secret, index, CONTROL_NAMESPACE, DRIVER_INDEX, timeout
        )
        self._lock = threading.Lock()
        self._closing = False
        self._on_message = on_message
        self._on_lost = on_lost
        self._thread = threading.Thread(
            target=self._read, name=f"pytimely-control-{index}", daemon=True
        )
        self._thread.start()

    def _read(self) -> None:
        reason = "the driver closed the control connection"
        try:
            for header, _payload in _frames(self._sock):
                if self._on_message is not None:
                    self._on_message(header)
        except (OSError, CommunicationError) as exc:
            reason = f"the control connection to the driver broke: {exc!r}"
        if not self._closing and self._on_lost is not None:
            self._on_lost(reason)

    def send(self, header: Any) -> None:
        try:
            with self._lock:
                send_frame(self._sock, header)
        except OSError:
            pass  # the reader thread notices a lost driver

    def close(self) -> None:
        self._closing = True
        _hang_up(self._sock)
        self._thread.join(1.0)


class FeedSession:
    """The worker's end of a feeder's control session (:class:`FeedLink` is the feeder's):
    :meth:`send` a message to the feeder from any thread; False once the session is gone."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._lock = threading.Lock()
        self.open = True

    def send(self, header: Any) -> bool:
        """Send ``header`` to the feeder; whether it went."""
        with self._lock:
            if not self.open:
                return False
            try:
                send_frame(self._sock, header)
                return True
            except OSError:
                self.open = False
                return False

    def close(self) -> None:
        """End the session (the feeder's reader sees the end of its stream)."""
        with self._lock:
            self.open = False
            self._sock.close()


class FeedListener:
    """A worker's listener for pushed input (Arrow IPC streams tagged with their epoch), and
    for feeders' control sessions.

    ``on_batch(epoch, payload)`` is called on a connection thread for every pushed batch.  A
    connection whose first frame is ``("session",)`` is a control session (:class:`FeedLink`):
    ``on_session(session, header)`` is called for each message it brings, and
    ``on_session(session, None)`` once when it ends.
    """

    def __init__(
        self,
        secret: bytes,
        index: int,
        bind_host: str,
        on_batch: Callable[[int, bytearray], None],
        on_error: Callable[[str], None],
        on_session: Callable[[FeedSession, Any], None] | None = None,
    ) -> None:
        self._secret = secret
        self._index = index
        self._on_batch = on_batch
        self._on_error = on_error
        self._on_session = on_session
        self._listener = _listen(bind_host)
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._closed = False
        self._thread = threading.Thread(
            target=_accept_each,
            args=(self._listener, lambda: self._closed, self._serve, f"pytimely-feed-conn-{index}"),
            daemon=True,
            name=f"pytimely-feed-{index}",
        )
        self._thread.start()

    def _serve(self, sock: socket.socket) -> None:
        try:
            sock.settimeout(HANDSHAKE_TIMEOUT)
            accept_handshake(
                sock,
                self._secret,
                self._index,
                FEED_NAMESPACE,
                lambda j: j == FEEDER_INDEX,
                lambda j: True,
            )
            sock.settimeout(None)
        except (OSError, CommunicationError):
            sock.close()
            return
        try:
            frames = _frames(sock)
            first = next(frames, None)
            if first is not None and first[0][0] == "session" and self._on_session is not None:
                self._serve_session(sock, frames)
                return
            for header, payload in itertools.chain([first] if first else [], frames):
                if header[0] == "data":
                    self._on_batch(int(header[1]), payload)
            send_frame(sock, ("ack",))
        except (OSError, CommunicationError) as exc:
            if not self._closed:
                self._on_error(f"a feed connection broke: {exc!r}")
        finally:
            sock.close()

    def _serve_session(self, sock: socket.socket, frames: Iterator[tuple[Any, bytearray]]) -> None:
        assert self._on_session is not None
        session = FeedSession(sock)
        try:
            for header, _payload in frames:
                self._on_session(session, header)
        except (OSError, CommunicationError):
            pass  # the feeder went away: it opens a new session when it comes back
        finally:
            session.close()
            self._on_session(session, None)

    def close(self) -> None:
        self._closed = True
        try:
            self._listener.close()
        except OSError:
            pass
        self._thread.join(1.0)


class FeedLink:
    """A feeder's control session with worker ``worker`` at ``address`` (the worker's end is a
    :class:`FeedSession`): :meth:`send` messages to the worker; every message the worker
    sends is handed to ``on_message(header)`` on a reader thread, and ``on_closed(why)`` is
    called once when the session ends."""

    def __init__(
        self,
        address: tuple[str, int],
        secret: bytes,
        worker: int,
        on_message: Callable[[Any], None],
        on_closed: Callable[[str], None],
        timeout: float = 30.0,
    ) -> None:
        self.worker = worker
        self._sock = _connect(tuple(address), secret, FEEDER_INDEX, FEED_NAMESPACE, worker, timeout)
        self._lock = threading.Lock()
        self._closing = False
        send_frame(self._sock, ("session",))

        def read() -> None:
            why = "the worker ended the session"
            try:
                for header, _payload in _frames(self._sock):
                    on_message(header)
            except (OSError, CommunicationError) as exc:
                why = f"the session broke: {exc!r}"
            if not self._closing:
                on_closed(why)

        self._reader = threading.Thread(
            target=read, daemon=True, name=f"pytimely-feed-link-{worker}"
        )
        self._reader.start()

    def send(self, header: Any) -> bool:
        """Send ``header`` to the worker; whether it went."""
        with self._lock:
            try:
                send_frame(self._sock, header)
                return True
            except OSError:
                return False

    def close(self) -> None:
        """End the session."""
        self._closing = True
        _hang_up(self._sock)
        self._reader.join(1.0)


def push_batches(
    address: tuple[str, int],
    secret: bytes,
    worker: int,
    epoch: int,
    payloads: Any,
    timeout: float = 30.0,
) -> int:
    """Push Arrow IPC payloads for ``epoch`` to worker ``worker`` at ``address``; returns how
    many were pushed (the worker counts them before closing the epoch)."""
    sock = _connect(tuple(address), secret, FEEDER_INDEX, FEED_NAMESPACE, worker, timeout)
    n = 0
    try:
        for payload in payloads:
            send_frame(sock, ("data", epoch), payload)
            n += 1
        sock.shutdown(socket.SHUT_WR)
        # Wait for the worker to acknowledge: when this returns, it has every batch.
        sock.settimeout(timeout)
        frame = recv_frame(sock)
        if frame is None or frame[0][0] != "ack":
            raise CommunicationError(f"worker {worker} did not acknowledge epoch {epoch}'s input")
    finally:
        sock.close()
    return n
