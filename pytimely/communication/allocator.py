"""Allocators: how one worker exchanges messages with all workers, itself included.

An *allocator* is a worker's only window onto the other workers.  It moves opaque payloads on
numbered *channels*: ``send(channel, target, payload)`` queues a payload for one worker,
``broadcast`` for all of them, ``flush`` transmits what was queued, ``receive`` returns what has
arrived.  The dataflow layer builds everything else on top — data channels (Pipeline, Exchange,
Broadcast) and the progress exchange of every scope each get a channel id, allocated in the same
order on every worker, and the worker maps each arriving message to the operator it activates.

Guarantees every allocator gives
    * FIFO per ``(channel, source, target)``: two payloads sent by one worker to another on one
      channel are received in the order they were sent.  Nothing is promised across channels or
      across sources.
    * Nothing leaves before ``flush()``: sends are buffered, so a worker pays for transmission
      once per step, not once per message.  ``await_events`` flushes before it parks, because
      parking on unsent data could leave the whole mesh waiting.
    * A payload sent to oneself is delivered as the very object (no copy, no serialization);
      payloads to other processes are pickled once per ``send`` / ``broadcast``.  Either way the
      sender must not mutate a payload after sending it.
    * Failure is loud: once any worker has failed, ``receive`` and ``await_events`` raise
      :class:`~pytimely.errors.WorkerFailure` naming it, on every surviving worker.
    * Memory is bounded by the senders: at most ``max_in_flight`` bytes of data per peer are
      sent and not yet acknowledged as consumed before :meth:`congested` names the peer, and
      inputs wait while it does (:mod:`.flow`).
    * Idle costs nothing: ``await_events`` parks the thread on a condition variable until a
      message arrives, a peer fails, ``wake()`` is called, or the timeout passes.

Where the idea comes from: the Rust crate's ``Allocate`` (thread / process / TCP allocators),
with its typed per-channel pushers and pullers flattened into one untyped API.  Python pays per
call, so one ``receive()`` that returns everything that arrived, tagged with its channel, is
cheaper than polling a puller per channel; the worker routes the list itself.

This module holds the abstract :class:`Allocator` and the single-worker
:class:`ThreadAllocator`; the multi-process mesh is :class:`.tcp.TcpAllocator`.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Self

from ..errors import CommunicationError
from .flow import check_max_in_flight
from .wire import deserialize

__all__ = ["Allocator", "ThreadAllocator"]


class Allocator(ABC):
    """A worker's connection to all workers (see the module docstring for the guarantees).

    Everything but :meth:`wake` must be called from the worker's own thread.
    """

    index: int
    """This worker's index, ``0 <= index < peers``."""
    peers: int
    """The number of workers."""

    @abstractmethod
    def send(self, channel: int, target: int, payload: object) -> None:
        """Queue ``payload`` for worker ``target`` (possibly this one) on ``channel``."""

    def send_serialized(self, channel: int, target: int, data: bytes, stand_in: object) -> None:
        """Queue for worker ``target`` (another worker) the payload whose serialization is
        ``data`` (as :func:`~pytimely.communication.wire.serialize` would make it, with no
        out-of-band buffers): for a sender that encoded it already.  Traffic observers see
        ``stand_in``, an object of the payload's shape and length.  This default decodes
        ``data`` and sends the payload."""
        self.send(channel, target, deserialize(data, []))

    def send_to(self, channel: int, targets: Sequence[int], payload: object) -> None:
        """Queue ``payload`` for each worker of ``targets`` (other workers) on ``channel``:
        what :meth:`send` to each would queue, serialized once where the allocator
        serializes.  This default sends to each in turn."""
        for target in targets:
            self.send(channel, target, payload)

    @abstractmethod
    def broadcast(self, channel: int, payload: object) -> None:
        """Queue ``payload`` for every worker, this one included (serialized once)."""

    @abstractmethod
    def flush(self) -> None:
        """Transmit everything queued so far."""

    @abstractmethod
    def receive(self) -> list[tuple[int, int, object]]:
        """Everything that has arrived, as ``(channel, source, payload)``, without blocking.

        FIFO per ``(source, channel)``.  Raises :class:`~pytimely.errors.WorkerFailure` if a
        worker failed.
        """

    @abstractmethod
    def await_events(self, timeout: float | None) -> None:
        """Park until something is receivable, a worker fails (raises ``WorkerFailure``),
        :meth:`wake` is called, or ``timeout`` seconds pass (``None``: no limit).  Returns at
        once if something is already pending.  Flushes first."""

    def has_events(self) -> bool:
        """Whether :meth:`await_events` would return at once (something is receivable, a
        wake or a failure is pending), without blocking or taking a lock: for a worker that
        polls through a wait too short to park for (:func:`.timers.spin_until`).  This
        default says no, so that such a poll lasts its whole (short) wait."""
        return False

    @abstractmethod
    def wake(self) -> None:
        """Make a parked (or the next) :meth:`await_events` return.  Thread-safe."""

    @abstractmethod
    def close(self, error: str | None = None) -> None:
        """Shut down: tell every peer goodbye (or, with ``error``, that this worker failed and
        why), close connections, join threads.  Idempotent."""

    def statistics(self) -> dict[str, Any]:
        """A snapshot of counters and state, for debugging."""
        return {"index": self.index, "peers": self.peers}

    # --- flow control (:mod:`.flow`); a lone worker has nobody to wait for -------------------

    def limit_in_flight(self, max_in_flight: int) -> None:
        """Bound the bytes of data sent to each peer and not yet acknowledged as consumed
        (default :data:`.flow.MAX_IN_FLIGHT` or ``$PYTIMELY_MAX_IN_FLIGHT``)."""
        check_max_in_flight(max_in_flight)

    def congested(self) -> int | None:
        """A connected peer whose backlog exceeds the bound, or None: inputs wait (stepping)
        while there is one."""
        return None

    def in_flight_bound(self) -> int | None:
        """The bytes in flight allowed per peer (``None``: no bound, nothing is sent)."""
        return None

    def backlog(self) -> list[int]:
        """Per worker, the bytes sent to it and not yet acknowledged (0 for this worker)."""
        return [0] * self.peers

    def flow_statistics(self) -> dict[str, Any]:
        """Flow control's counters (see :meth:`.flow.FlowLedger.statistics`); empty for a
        lone worker."""
        return {}

    def observe_traffic(self, observer: Callable[[int, int, bool, object, int], None]) -> None:
        """Call ``observer(channel, peer, is_send, payload, size)`` for every data message
        sent to or received from another worker, ``size`` its encoded bytes (for logging and
        statistics).  A lone worker exchanges nothing with others, so this one never calls."""
        return None

    # --- the control plane (termination detection); trivial for a lone worker ---------------

    def send_control(self, target: int, message: object) -> None:
        """Send ``message`` to worker ``target`` at once on the control plane: it is not a
        data message (not counted by :meth:`message_counts`, not returned by :meth:`receive`)
        but by the target's :meth:`control_messages`."""
        raise ValueError(f"worker {target} does not exist: there is 1 worker (index 0)")

    def control_messages(self) -> list[tuple[int, object]]:
        """Control messages that have arrived, as ``(source, message)``, without blocking."""
        return []

    def message_counts(self) -> tuple[list[int], list[int]]:
        """``(sent, received)``: data messages this worker has transmitted to each worker and
        taken delivery of (through :meth:`receive`) from each worker, remote ones only."""
        return [0] * self.peers, [0] * self.peers

    def set_farewell(self, farewell: object) -> None:
        """What :meth:`close` tells the peers besides goodbye (see :meth:`farewells`); a lone
        worker has nobody to tell."""
        return None

    def farewells(self) -> dict[int, Any]:
        """The peers that said goodbye, each with its farewell: ``{"sent": [...],
        "received": [...], "note": <what it passed to set_farewell>}``, its final counts."""
        return {}

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(None if exc is None else f"{type(exc).__name__}: {exc}")


class ThreadAllocator(Allocator):
    """The allocator of a lone worker: index 0 of 1, in memory, payloads delivered as is."""

    def __init__(self) -> None:
        self.index = 0
        self.peers = 1
        self._queued: list[tuple[int, int, object]] = []  # sent, not yet flushed
        self._ready: list[tuple[int, int, object]] = []  # flushed, not yet received
        self._cond = threading.Condition(threading.Lock())
        self._woken = False
        self._closed = False
        self._messages = 0

    def send(self, channel: int, target: int, payload: object) -> None:
        """See :meth:`Allocator.send`; only worker 0 (this one) exists."""
        if target != 0:
            raise ValueError(f"worker {target} does not exist: there is 1 worker (index 0)")
        self._queued.append((channel, 0, payload))

    def broadcast(self, channel: int, payload: object) -> None:
        """See :meth:`Allocator.broadcast`; the only worker is this one."""
        self._queued.append((channel, 0, payload))

    def flush(self) -> None:
        """See :meth:`Allocator.flush`: the queued messages become receivable."""
        if self._closed:
            raise CommunicationError("the allocator is closed")
        if self._queued:
            self._messages += len(self._queued)
            self._ready.extend(self._queued)
            self._queued = []

    def receive(self) -> list[tuple[int, int, object]]:
        """See :meth:`Allocator.receive`: the flushed messages, never blocking."""
        ready = self._ready
        self._ready = []
        return ready

    def await_events(self, timeout: float | None) -> None:
        """See :meth:`Allocator.await_events`.

        With one worker only a flush that made something ready, :meth:`wake` or the timeout ends the
        wait.
        """
        self.flush()
        if self._ready:
            self._woken = False
            return
        with self._cond:
            if timeout is None:
                self._cond.wait_for(lambda: self._woken)
            elif timeout > 0:
                self._cond.wait_for(lambda: self._woken, timeout)
            self._woken = False

    def has_events(self) -> bool:
        """See :meth:`Allocator.has_events`: flushed messages or a wake."""
        return bool(self._ready) or self._woken

    def wake(self) -> None:
        """See :meth:`Allocator.wake`; thread-safe."""
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def close(self, error: str | None = None) -> None:
        """See :meth:`Allocator.close`: drops whatever is queued or unreceived."""
        self._closed = True
        self._queued = []
        self._ready = []

    def statistics(self) -> dict[str, Any]:
        """See :meth:`Allocator.statistics`: messages flushed so far, queued and ready counts."""
        return {
            "index": 0,
            "peers": 1,
            "messages": self._messages,
            "queued": len(self._queued),
            "ready": len(self._ready),
            "closed": self._closed,
        }

    def __repr__(self) -> str:
        return "ThreadAllocator(index=0, peers=1)"
