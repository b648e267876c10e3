"""``TcpAllocator``: one worker per process, all workers joined by a full TCP mesh.

Python runs one thread at a time, so pytimely's unit of parallelism is the process: worker ``i``
of ``n`` is process ``i``, and every pair of processes shares one TCP connection.  This module
moves frames (:mod:`.wire`) over that mesh once :mod:`.mesh` has built it.

Building the mesh
    :func:`.mesh.build_mesh` connects and authenticates every pair of workers (see
    :mod:`.mesh`); this module takes the finished sockets over.

Threads
    One *receiver thread* per peer does nothing but read frames from its socket into a shared
    inbox and notify the worker.  It never waits for the worker, so every socket is always
    drained; that is what lets the worker thread write with plain blocking ``sendmsg`` in
    ``flush()`` without any risk of two workers blocking each other (a writer can only wait on a
    reader that is guaranteed to make progress).  Decoding (``pickle.loads``) happens on the
    worker thread in ``receive()``, so a receiver thread never runs user code.  The worker parks
    in ``await_events`` on a condition variable the receivers notify — no polling.  One
    *heartbeat thread* per process writes small HEARTBEAT frames besides the worker thread; a
    per-peer send lock keeps the two writers' frames from interleaving.

Failure
    A peer that disappears without its GOODBYE frame (crash, ``kill -9``, lost host), a peer that
    sends ABORT, and a peer whose stream is malformed all become a sticky failure that
    ``receive()`` / ``await_events()`` raise from then on.  A worker that shuts down because of a
    failure passes the *original* failed worker and message on in its own ABORT, so every worker
    names the root cause, not the neighbour that told it.  TCP keep-alive is switched on so that
    a peer whose host vanishes is noticed too (after about half a minute), and a peer whose
    connection stays open but from which nothing arrives — not even a heartbeat — for
    ``heartbeat_timeout`` seconds is declared failed: stopped (SIGSTOP), deadlocked outside
    Python, or unreachable.

Counting and the control plane
    DATA frames are counted per peer, when written and when handed to the worker, for
    termination detection (:mod:`pytimely.termination`).  CONTROL frames carry that detection's
    own messages and are not counted; GOODBYE carries the final counts and the worker's
    farewell (what it built).

Shutting down
    ``close()`` sends GOODBYE (or ABORT), half-closes every connection and then keeps reading
    until each peer has closed its side too, for at most ``linger`` seconds.  Closing a socket
    with unread data makes the kernel reset the connection, which can destroy our own last
    frames in flight; reading until the peer's end of stream avoids that.

Flow control
    Every DATA payload queued for a peer and every one handed to the worker is entered in a
    :class:`.flow.FlowLedger`; ``flush()`` sends the ACK frames it says are due, and receiver
    threads enter the ACKs that arrive (and wake a worker waiting for credit).
    :meth:`TcpAllocator.congested` tells the inputs when to wait (see :mod:`.flow` for the rule
    that keeps this free of deadlock).  Inboxes themselves are unbounded: the bound is kept by
    the senders.

Trade-off taken: frames to a peer that has already said goodbye are dropped (it has finished;
counted in ``statistics()``).
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import CommunicationError, WorkerFailure
from .allocator import Allocator
from .flow import FlowLedger
from .mesh import build_mesh
from .rendezvous import Rendezvous
from .wire import (
    KIND_ABORT,
    KIND_ACK,
    KIND_CONTROL,
    KIND_DATA,
    KIND_GOODBYE,
    FrameError,
    FrameReader,
    StreamEnded,
    data_payload_bytes,
    deserialize,
    encode_abort,
    encode_ack,
    encode_control,
    encode_data,
    encode_goodbye,
    encode_heartbeat,
    serialize,
)

__all__ = ["TcpAllocator"]

#: A connected peer that sends nothing at all (not even a heartbeat) for this many seconds is
#: declared failed; ``PYTIMELY_HEARTBEAT_TIMEOUT`` overrides it.
HEARTBEAT_TIMEOUT = 20.0
#: At most this many payload bytes are decoded per ``receive()`` (always at least one message),
#: so a worker's step turns a bounded slice of what its peers sent into Python objects.
RECEIVE_BUDGET = 1 << 20
#: Heartbeats go out (and silences are checked) at least this often.
HEARTBEAT_PERIOD = 1.0
HEARTBEAT_ENV = "PYTIMELY_HEARTBEAT_TIMEOUT"
try:
    _IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024)
except (AttributeError, ValueError, OSError):  # pragma: no cover - non-POSIX
    _IOV_MAX = 16
_MSG_NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)

_log = logging.getLogger(__name__)

# States of a peer connection.
_CONNECTED = "connected"
_GOODBYE = "said goodbye"  # GOODBYE received; the stream should end next
_CLOSED = "closed"  # ended in order
_FAILED = "failed"


class _Peer:
    __slots__ = (
        "address",
        "bytes_sent",
        "farewell",
        "frames_dropped",
        "frames_received",
        "frames_sent",
        "index",
        "last_heard",
        "reader",
        "send_lock",
        "sock",
        "state",
        "thread",
    )

    def __init__(self, index: int, sock: socket.socket, address: Any) -> None:
        self.index = index
        self.address = address
        self.sock = sock
        self.thread: threading.Thread | None = None
        self.state = _CONNECTED
        self.frames_sent = 0
        self.bytes_sent = 0
        self.frames_received = 0
        self.frames_dropped = 0
        self.reader: FrameReader | None = None
        self.farewell: Any = None  # what it said with its GOODBYE
        self.last_heard = time.monotonic()  # when its receiver last read any bytes
        # Frames are written by the worker thread and the heartbeat thread: one writer at a
        # time per socket, or their bytes would interleave.
        self.send_lock = threading.Lock()


class TcpAllocator(Allocator):
    """Worker ``index`` of ``peers``, one per process, over a full TCP mesh.

    The constructor builds the mesh through ``rendezvous`` (see :mod:`.rendezvous`) and returns
    once connected to every peer, or raises :class:`~pytimely.errors.CommunicationError` /
    :class:`~pytimely.errors.AuthenticationError` within ``timeout`` seconds.  ``linger`` bounds
    how long :meth:`close` waits for peers to close their side.

    Liveness: a background thread sends every peer a HEARTBEAT frame every
    ``min(heartbeat_timeout / 4, HEARTBEAT_PERIOD)`` seconds, whatever the worker thread is
    doing (a long user function does not starve it: the interpreter switches threads every few
    milliseconds).  A connected peer from which nothing at all arrived for ``heartbeat_timeout``
    seconds (default :data:`HEARTBEAT_TIMEOUT`, or ``$PYTIMELY_HEARTBEAT_TIMEOUT``) is a failure
    naming it, noticed within one more period: its process is stopped, deadlocked outside
    Python, or unreachable.

    Control plane: :meth:`send_control` frames bypass the data path and its counters, which
    count only DATA frames: ``frames_sent`` when written to the socket, ``_delivered`` when
    handed to the worker by :meth:`receive` (see :mod:`pytimely.termination`).
    """

    def __init__(
        self,
        index: int,
        peers: int,
        rendezvous: Rendezvous,
        *,
        timeout: float = 30.0,
        linger: float = 5.0,
        heartbeat_timeout: float | None = None,
        max_in_flight: int | None = None,
    ) -> None:
        if peers < 1 or not 0 <= index < peers:
            raise ValueError(f"worker index {index} out of range for {peers} workers")
        if heartbeat_timeout is None:
            heartbeat_timeout = float(os.environ.get(HEARTBEAT_ENV, HEARTBEAT_TIMEOUT))
        if heartbeat_timeout <= 0:
            raise ValueError(f"heartbeat_timeout must be positive, not {heartbeat_timeout}")
        self.index = index
        self.peers = peers
        self._linger = linger
        self.heartbeat_timeout = heartbeat_timeout
        self._heartbeat_stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._control: list[tuple[int, object]] = []
        self._delivered = [0] * peers  # DATA messages handed to the worker, per source
        self._farewell: object = None
        self._cond = threading.Condition(threading.Lock())
        self._inbox: list[tuple[int, int, Any, list[bytearray]]] = []
        self._traffic: Callable[[int, int, bool, object, int], None] | None = None
        self._woken = False
        # The first failure seen: (exception class, worker to blame, its raw message, text).
        self._failure: tuple[type[Exception], int | None, str, str] | None = None
        self._closing = False
        self._closed = False
        self._local_queued: list[tuple[int, int, object]] = []
        self._local_ready: list[tuple[int, int, object]] = []
        self._outgoing: list[list[bytes | memoryview]] = [[] for _ in range(peers)]
        self._frames_queued = [0] * peers  # DATA frames queued since the last flush, per target
        self._peers: list[_Peer | None] = [None] * peers
        self._flow = FlowLedger(peers, max_in_flight)
        self._remote: list[_Peer] = []
        if peers > 1:
            sockets = build_mesh(index, peers, rendezvous, timeout)
            _log.info("worker %d of %d: mesh formed", index, peers)
            for j, (sock, address) in sorted(sockets.items()):
                peer = _Peer(j, sock, address)
                self._peers[j] = peer
                self._remote.append(peer)
            for peer in self._remote:
                peer.thread = threading.Thread(
                    target=self._receive_from,
                    args=(peer,),
                    name=f"pytimely-recv-{index}<-{peer.index}",
                    daemon=True,
                )
                peer.thread.start()
            self._heartbeat = threading.Thread(
                target=self._beat, name=f"pytimely-heartbeat-{index}", daemon=True
            )
            self._heartbeat.start()

    # --- sending ------------------------------------------------------------------------------

    def send(self, channel: int, target: int, payload: object) -> None:
        """See :meth:`Allocator.send`: serialized now, written by the next :meth:`flush`.

        A message to this worker itself is delivered as is, never serialized.
        """
        if target == self.index:
            self._local_queued.append((channel, target, payload))
            return
        if not 0 <= target < self.peers:
            raise ValueError(f"worker {target} does not exist: there are {self.peers} workers")
        data, buffers = serialize(payload)
        self._queue(channel, (target,), data, buffers, payload)

    def send_to(self, channel: int, targets: Sequence[int], payload: object) -> None:
        """See :meth:`Allocator.send_to`: serialized once, the same frame queued for each."""
        for target in targets:
            if target == self.index or not 0 <= target < self.peers:
                raise ValueError(f"send_to: worker {target} is not another worker")
        if targets:
            data, buffers = serialize(payload)
            self._queue(channel, targets, data, buffers, payload)

    def send_serialized(self, channel: int, target: int, data: bytes, stand_in: object) -> None:
        """See :meth:`Allocator.send_serialized`: queued as is, written by the next flush."""
        if target == self.index or not 0 <= target < self.peers:
            raise ValueError(f"send_serialized: worker {target} is not another worker")
        self._queue(channel, (target,), data, [], stand_in)

    def _queue(
        self,
        channel: int,
        targets: Sequence[int],
        data: bytes,
        buffers: list[Any],
        payload: object,
    ) -> None:
        """One DATA frame of ``data`` and ``buffers``, queued for each of ``targets`` (other
        workers): counted for flow control and shown to the traffic observer per target."""
        frame = encode_data(channel, self.index, data, buffers)
        nbytes = data_payload_bytes(data, buffers)
        for target in targets:
            self._outgoing[target].extend(frame)
            self._frames_queued[target] += 1
            self._flow.sent(target, nbytes)
            if self._traffic is not None:
                self._traffic(channel, target, True, payload, nbytes)

    def broadcast(self, channel: int, payload: object) -> None:
        """See :meth:`Allocator.broadcast`: one DATA frame, queued for every remote peer."""
        self._local_queued.append((channel, self.index, payload))
        if self._remote:
            data, buffers = serialize(payload)
            self._queue(channel, [peer.index for peer in self._remote], data, buffers, payload)

    def flush(self) -> None:
        """See :meth:`Allocator.flush`: write each peer's queued frames to its socket.

        Flow-control acknowledgements that are due go out too.  Frames for a peer that is no longer
        connected are dropped (and counted).
        """
        if self._closed:
            raise CommunicationError(f"worker {self.index}: the allocator is closed")
        if self._local_queued:
            self._local_ready.extend(self._local_queued)
            self._local_queued = []
        for target, consumed_total in self._flow.acknowledgements_due():
            self._outgoing[target].append(encode_ack(self.index, consumed_total))
        for peer in self._remote:
            chunks = self._outgoing[peer.index]
            if not chunks:
                continue
            self._outgoing[peer.index] = []
            frames = self._frames_queued[peer.index]
            self._frames_queued[peer.index] = 0
            if peer.state != _CONNECTED:
                peer.frames_dropped += frames
                continue
            try:
                with peer.send_lock:
                    peer.bytes_sent += _send_chunks(peer.sock, chunks)
                peer.frames_sent += frames
            except OSError as exc:
                self._send_failed(peer, exc)

    def _send_failed(self, peer: _Peer, exc: OSError) -> None:
        # The connection broke under us.  If the peer had finished in order, that is fine;
        # otherwise let its receiver thread tell why (an ABORT frame may still be in flight).
        if peer.thread is not None:
            peer.thread.join(2.0)
        if peer.state in (_GOODBYE, _CLOSED):
            return
        self._set_failure(
            WorkerFailure,
            peer.index,
            f"the connection to worker {peer.index} broke while sending ({exc!r}); it crashed "
            "or was killed",
        )
        self._raise_failure()

    # --- receiving ----------------------------------------------------------------------------

    def receive(self) -> list[tuple[int, int, object]]:
        """See :meth:`Allocator.receive`: decode what the receiver threads queued.

        Each message delivered is counted for termination detection and flow control.
        """
        if self._failure is not None:
            self._raise_failure()
        out = self._local_ready
        self._local_ready = []
        if self._inbox:
            with self._cond:
                inbox, sizes = self._take_inbox()
            for (channel, source, data, buffers), nbytes in zip(inbox, sizes):
                try:
                    payload = deserialize(data, buffers)
                except Exception as exc:  # unpickling may raise anything
                    self._set_failure(
                        CommunicationError,
                        None,
                        f"worker {self.index}: could not decode a message from worker {source} "
                        f"on channel {channel}: {exc!r}",
                    )
                    raise self._failure_exception() from exc
                out.append((channel, source, payload))
                self._delivered[source] += 1
                self._flow.consumed(source, nbytes)
                if self._traffic is not None:
                    self._traffic(channel, source, False, payload, nbytes)
        return out

    def _take_inbox(self) -> tuple[list[Any], list[int]]:
        """The oldest messages of the inbox, up to :data:`RECEIVE_BUDGET` payload bytes (at
        least one), removed from it, and their payload sizes; the caller holds ``_cond``.

        Taking a bounded prefix keeps what one step decodes bounded: a slow worker whose peers
        filled the flow-control window does not turn the whole window into Python objects at
        once, and it acknowledges (and so lets its producers go on) a slice at a time.  FIFO
        per ``(channel, source)`` is kept: the rest stays queued, in order, for the next step.
        """
        inbox = self._inbox
        budget = RECEIVE_BUDGET
        sizes: list[int] = []
        for _channel, _source, data, buffers in inbox:
            nbytes = data_payload_bytes(data, buffers)
            if nbytes > budget and sizes:
                break
            budget -= nbytes
            sizes.append(nbytes)
        taken = len(sizes)
        if taken == len(inbox):
            self._inbox = []
            return inbox, sizes
        self._inbox = inbox[taken:]
        return inbox[:taken], sizes

    def await_events(self, timeout: float | None) -> None:
        """See :meth:`Allocator.await_events`; raises the first failure a receiver noticed."""
        self.flush()
        with self._cond:
            if not self._pending():
                if timeout is None:
                    self._cond.wait_for(self._pending)
                elif timeout > 0:
                    self._cond.wait_for(self._pending, timeout)
            self._woken = False
        if self._failure is not None:
            self._raise_failure()

    def has_events(self) -> bool:
        """See :meth:`Allocator.has_events`: frames, local messages, control, a failure or a
        wake."""
        return self._pending()

    def _pending(self) -> bool:
        return bool(
            self._inbox or self._local_ready or self._control or self._failure or self._woken
        )

    def wake(self) -> None:
        """See :meth:`Allocator.wake`; thread-safe."""
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def _receive_from(self, peer: _Peer) -> None:
        """Receiver thread: frames from ``peer`` into the inbox until its stream ends."""
        batch: list[tuple[int, int, Any, list[bytearray]]] = []

        def hand_over() -> None:
            if batch:
                with self._cond:
                    self._inbox.extend(batch)
                    self._cond.notify()
                peer.frames_received += len(batch)
                batch.clear()

        sock_recv_into = peer.sock.recv_into

        def recv_into(buffer: memoryview) -> int:
            got = sock_recv_into(buffer)
            # Any bytes count as a sign of life: one huge frame may take longer to arrive
            # than the heartbeat timeout.
            peer.last_heard = time.monotonic()
            return got

        reader = peer.reader = FrameReader(recv_into, hand_over)
        try:
            while True:
                frame = reader.read_frame()
                if frame is None:
                    hand_over()
                    self._stream_ended(
                        peer,
                        f"worker {peer.index} disconnected without saying goodbye (it "
                        "crashed, was killed, or its host went away)",
                    )
                    return
                kind, source, channel, payload, buffers = frame
                if source != peer.index:
                    raise FrameError(f"frame claims to come from worker {source}")
                if peer.state != _CONNECTED:
                    raise FrameError("frame after goodbye")
                if kind == KIND_DATA:
                    batch.append((channel, source, payload, buffers))
                elif kind == KIND_ACK:
                    self._flow.acknowledged(peer.index, channel)
                    with self._cond:  # credit is news to a worker waiting for it
                        self._woken = True
                        self._cond.notify()
                elif kind == KIND_CONTROL:
                    hand_over()
                    message = _unpickle(payload, "control message")
                    with self._cond:
                        self._control.append((source, message))
                        self._cond.notify()
                elif kind == KIND_GOODBYE:
                    hand_over()
                    peer.farewell = _unpickle(payload, "farewell") if payload else None
                    peer.state = _GOODBYE
                    with self._cond:  # a departure is news to a parked worker
                        self._woken = True
                        self._cond.notify()
                elif kind == KIND_ABORT:
                    hand_over()
                    message = bytes(payload).decode("utf-8", "replace")
                    origin = channel if channel < self.peers else peer.index
                    text = f"worker {origin} failed: {message}"
                    if origin != peer.index:
                        text += f" (reported by worker {peer.index})"
                    self._peer_failed(peer, WorkerFailure, origin, text, message)
                    return
        except StreamEnded:
            hand_over()
            self._stream_ended(
                peer,
                f"worker {peer.index} disconnected in the middle of a message (it crashed, "
                "was killed, or its host went away)",
                after_goodbye_ok=False,
            )
        except FrameError as exc:
            self._peer_failed(
                peer,
                CommunicationError,
                peer.index,
                f"worker {self.index}: malformed frame from worker {peer.index}: {exc}",
            )
        except OSError as exc:
            self._stream_ended(
                peer,
                f"the connection to worker {peer.index} broke ({exc!r}); it crashed or was killed",
            )
        except BaseException as exc:  # noqa: BLE001 - e.g. MemoryError: never die silently
            self._peer_failed(
                peer,
                CommunicationError,
                peer.index,
                f"worker {self.index}: receiving from worker {peer.index} failed: {exc!r}",
            )

    # --- flow control -------------------------------------------------------------------------

    def limit_in_flight(self, max_in_flight: int) -> None:
        """See :meth:`Allocator.limit_in_flight`; applies to every peer from now on."""
        self._flow.set_bound(max_in_flight)

    def congested(self) -> int | None:
        """See :meth:`Allocator.congested`: the first connected peer over the in-flight bound."""
        for peer in self._remote:
            if peer.state == _CONNECTED and self._flow.over_bound(peer.index):
                return peer.index
        return None

    def in_flight_bound(self) -> int | None:
        """See :meth:`Allocator.in_flight_bound`."""
        return self._flow.max_in_flight

    def backlog(self) -> list[int]:
        """See :meth:`Allocator.backlog`: the flow ledger's unacknowledged bytes per worker."""
        return [self._flow.backlog(w) if w != self.index else 0 for w in range(self.peers)]

    def flow_statistics(self) -> dict[str, Any]:
        """See :meth:`Allocator.flow_statistics`."""
        return self._flow.statistics()

    # --- the control plane --------------------------------------------------------------------

    def send_control(self, target: int, message: object) -> None:
        """See :meth:`Allocator.send_control`: written at once, under the peer's lock.

        Dropped silently once that peer has finished (a failure is reported by :meth:`receive`).
        """
        if not 0 <= target < self.peers or target == self.index:
            raise ValueError(f"worker {target} is not a peer of worker {self.index}")
        peer = self._peers[target]
        if peer is None or peer.state != _CONNECTED or self._closed:
            return  # it has finished (or failed, which receive() reports)
        try:
            with peer.send_lock:
                peer.sock.sendall(encode_control(self.index, message), _MSG_NOSIGNAL)
        except OSError as exc:
            self._send_failed(peer, exc)

    def control_messages(self) -> list[tuple[int, object]]:
        """See :meth:`Allocator.control_messages`."""
        if not self._control:
            return []
        with self._cond:
            messages, self._control = self._control, []
        return messages

    def message_counts(self) -> tuple[list[int], list[int]]:
        """See :meth:`Allocator.message_counts`: DATA frames written and delivered."""
        sent = [0] * self.peers
        for peer in self._remote:
            sent[peer.index] = peer.frames_sent
        return sent, list(self._delivered)

    def set_farewell(self, farewell: object) -> None:
        """See :meth:`Allocator.set_farewell`; sent in the GOODBYE frame by :meth:`close`."""
        self._farewell = farewell

    def farewells(self) -> dict[int, Any]:
        """See :meth:`Allocator.farewells`: the peers whose GOODBYE frame carried a farewell."""
        return {
            peer.index: peer.farewell
            for peer in self._remote
            if peer.state in (_GOODBYE, _CLOSED) and peer.farewell is not None
        }

    # --- liveness -----------------------------------------------------------------------------

    def _beat(self) -> None:
        """Heartbeat thread: a HEARTBEAT to every peer every period (see the class docstring),
        and a failure for any connected peer silent for ``heartbeat_timeout``.

        It never blocks on a peer: a heartbeat is skipped when the worker thread is writing to
        that peer (its frames are traffic enough) or when the peer's socket buffer is full (a
        stopped peer does not read); one stuck peer must not silence us towards the others."""
        timeout = self.heartbeat_timeout
        frame = encode_heartbeat(self.index)
        while not self._heartbeat_stop.wait(min(timeout / 4, HEARTBEAT_PERIOD)):
            now = time.monotonic()
            for peer in self._remote:
                if peer.state != _CONNECTED:
                    continue
                silence = now - peer.last_heard
                if silence > timeout:
                    self._declare_silent(peer, silence)
                    continue
                if not peer.send_lock.acquire(blocking=False):
                    continue
                try:
                    if self._heartbeat_stop.is_set():
                        return  # close() has begun: nothing may follow GOODBYE / ABORT
                    if _writable(peer.sock):
                        peer.sock.sendall(frame, _MSG_NOSIGNAL)
                except (OSError, ValueError):
                    pass  # its receiver thread reports a broken connection
                finally:
                    peer.send_lock.release()

    def _declare_silent(self, peer: _Peer, silence: float) -> None:
        self._peer_failed(
            peer,
            WorkerFailure,
            peer.index,
            f"worker {peer.index} sent nothing for {silence:.1f} s (heartbeat timeout "
            f"{self.heartbeat_timeout:g} s): its process is stopped (SIGSTOP?), deadlocked, or "
            "its host is unreachable",
        )
        try:  # unblock a worker thread writing to it, and its receiver
            peer.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _stream_ended(self, peer: _Peer, why: str, after_goodbye_ok: bool = True) -> None:
        """``peer``'s stream ended: fine when we are closing (or it said goodbye, if
        ``after_goodbye_ok``), otherwise the peer is lost and ``why`` says how."""
        if self._closing or (after_goodbye_ok and peer.state == _GOODBYE):
            peer.state = _CLOSED
        else:
            self._peer_failed(peer, WorkerFailure, peer.index, why)

    def _peer_failed(
        self,
        peer: _Peer,
        kind: type[Exception],
        worker: int | None,
        text: str,
        message: str | None = None,
    ) -> None:
        peer.state = _FAILED
        if not self._closing:
            self._set_failure(kind, worker, text, message)

    def _set_failure(
        self, kind: type[Exception], worker: int | None, text: str, message: str | None = None
    ) -> None:
        with self._cond:
            if self._failure is None:
                self._failure = (kind, worker, text if message is None else message, text)
            self._cond.notify_all()

    def _failure_exception(self) -> Exception:
        assert self._failure is not None
        kind, worker, _message, text = self._failure
        if kind is WorkerFailure:
            return WorkerFailure(text, worker=worker)
        return kind(text)

    def _raise_failure(self) -> None:
        raise self._failure_exception()

    # --- shutting down ------------------------------------------------------------------------

    def close(self, error: str | None = None) -> None:
        """See :meth:`Allocator.close`: GOODBYE (or ABORT) to every peer, then wait.

        ABORT names the worker that failed first.  Waits up to ``linger`` seconds for the peers to
        close their side, so that frames still in flight are not reset.
        """
        if self._closed:
            return
        if error is None and self._failure is None:
            try:
                self.flush()
            except WorkerFailure:
                pass  # a peer failed while we flushed: tell the others (below)
        self._closed = True
        self._heartbeat_stop.set()
        if error is None and self._failure is None:
            sent, received = self.message_counts()
            last_frame = encode_goodbye(
                self.index, {"sent": sent, "received": received, "note": self._farewell}
            )
            linger = self._linger
        else:
            if self._failure is not None and self._failure[0] is WorkerFailure:
                origin = self._failure[1]
                message = self._failure[2]
            else:
                origin = self.index
                message = error if error is not None else self._failure[3]  # type: ignore[index]
            last_frame = encode_abort(self.index, self.index if origin is None else origin, message)
            linger = min(self._linger, 1.0)
        with self._cond:
            self._closing = True
        for peer in self._remote:
            if peer.state == _CONNECTED or peer.state == _GOODBYE:
                try:
                    with peer.send_lock:
                        peer.sock.sendall(last_frame, _MSG_NOSIGNAL)
                except OSError:
                    pass
            try:
                peer.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        # Keep draining until every peer has closed its side, so that closing does not reset
        # connections whose last frames are still in flight.
        deadline = time.monotonic() + linger
        for peer in self._remote:
            if peer.thread is not None:
                peer.thread.join(max(0.0, deadline - time.monotonic()))
        for peer in self._remote:
            try:
                peer.sock.shutdown(socket.SHUT_RDWR)  # wakes a receiver still blocked in recv
            except OSError:
                pass
            if peer.thread is not None:
                peer.thread.join(1.0)
            peer.sock.close()
        if self._heartbeat is not None:
            self._heartbeat.join(1.0)
        self._local_queued = []
        self._local_ready = []
        self._outgoing = [[] for _ in range(self.peers)]
        self._frames_queued = [0] * self.peers
        with self._cond:
            self._inbox = []

    # --- introspection ------------------------------------------------------------------------

    def observe_traffic(self, observer: Callable[[int, int, bool, object, int], None]) -> None:
        """See :meth:`Allocator.observe_traffic`."""
        self._traffic = observer

    def statistics(self) -> dict[str, Any]:
        """See :meth:`Allocator.statistics`, with the state of each connection.

        Adds the failure seen, the queue lengths and the flow-control counters.
        """
        failure = self._failure
        return {
            "index": self.index,
            "peers": self.peers,
            "closed": self._closed,
            "failure": None if failure is None else failure[3],
            "inbox": len(self._inbox),
            "local_ready": len(self._local_ready),
            "flow": self._flow.statistics(),
            "connections": {
                peer.index: {
                    "address": peer.address,
                    "state": peer.state,
                    "frames_sent": peer.frames_sent,
                    "bytes_sent": peer.bytes_sent,
                    "frames_received": peer.frames_received,
                    "bytes_received": 0 if peer.reader is None else peer.reader.bytes_read,
                    "frames_dropped": peer.frames_dropped,
                    "frames_queued": self._frames_queued[peer.index],
                }
                for peer in self._remote
            },
        }

    def __repr__(self) -> str:
        return f"TcpAllocator(index={self.index}, peers={self.peers})"


# --- socket helpers ---------------------------------------------------------------------------


def _writable(sock: socket.socket) -> bool:
    """The socket's send buffer has room now (``poll``: no limit on descriptor numbers)."""
    poller = select.poll()
    poller.register(sock, select.POLLOUT)
    return any(events & select.POLLOUT for _fd, events in poller.poll(0))


def _unpickle(payload: bytes | bytearray, what: str) -> Any:
    """A control-plane payload (written by pytimely itself, never user objects)."""
    try:
        return pickle.loads(payload)
    except Exception as exc:  # noqa: BLE001 - unpickling may raise anything
        raise FrameError(f"undecodable {what}: {exc!r}") from exc


def _send_chunks(sock: socket.socket, chunks: list[bytes | memoryview]) -> int:
    """Write all chunks with as few ``sendmsg`` calls as the kernel allows; return the bytes."""
    total = 0
    i = 0
    n = len(chunks)
    while i < n:
        sent = sock.sendmsg(chunks[i : i + _IOV_MAX], (), _MSG_NOSIGNAL)
        total += sent
        while sent:
            size = len(chunks[i]) if isinstance(chunks[i], bytes) else chunks[i].nbytes
            if sent >= size:
                sent -= size
                i += 1
            else:  # partial write: keep the rest of this chunk
                chunks[i] = memoryview(chunks[i])[sent:]
                sent = 0
    return total
