"""Flow control: a slow worker slows the workers that feed it, instead of buffering their data.

Without it a worker that consumes more slowly than its peers produce queues their frames in
memory without limit.  With it every worker bounds the data it has *in flight* to each peer —
sent (queued or written) but not yet acknowledged as consumed — by ``max_in_flight`` bytes, and
the inputs that feed the dataflow wait while a bound is exceeded.  The scheme is credit-based
flow control as in TCP's receive window and in Kung & Morris, "Credit-based flow control for ATM
networks" (IEEE Network 9(2), 1995), counted in bytes of DATA payload (the pickle and its
out-of-band buffers; headers are not counted).

Accounting (:class:`FlowLedger`, one per allocator)
    * The sender adds every DATA payload it queues for a peer to ``sent[peer]``.
    * The receiver adds every DATA payload it hands to its worker (``Allocator.receive``) to
      ``consumed[peer]`` and, at its next flush, once ``consumed - acknowledged`` reaches a
      quarter of the bound, sends the peer an ACK frame carrying its running total ``consumed``.
      ACK frames are on the control plane: not counted by termination detection
      (:mod:`pytimely.termination`), never handed to the worker.
    * The sender's backlog towards a peer is ``sent - acked``, where ``acked`` is the latest
      running total it received.  Running totals make an ACK idempotent and let the two
      counters be written by different threads (``sent`` by the worker thread, ``acked`` by the
      receiver thread) without a lock: each is assigned by exactly one thread.

Who waits: only inputs, never operators
    An input (``InputHandle.send`` / ``send_batch``, and through them the Spark feeders) whose
    worker is congested towards some peer *steps its worker* until every backlog is back under
    the bound; replay defers reading its captures while congested.  Operators inside a
    dataflow never wait: the bound is soft for them.  This is the rule that keeps flow control
    free of deadlock, loops across workers included: a waiting worker keeps stepping, so it
    keeps consuming, and so keeps acknowledging, everything its peers send it; a backlog can
    therefore only stay high while its receiver is busy or dead (a dead receiver is a
    :class:`~pytimely.errors.WorkerFailure`), never because two workers wait for each other.
    A receiver acknowledges at the end of the step that consumed the data (every flush), so an
    acknowledgement means the data was handed to the dataflow, and data waits in memory on at
    most one side: a receiver holds at most about one bound per peer in its inbox.

Data an exchange holds back to send it in fewer messages (at most 256 KB per channel, see
``_ExchangePusher`` in :mod:`pytimely.dataflow.pacts`) is counted when it is sent; an input
that checks for credit has it sent first, so the bound it waits on includes it.

Invariant: ``acked[peer] <= sent[peer]`` (an acknowledgement counts data that was sent), so a
backlog is never negative; and a receiver never withholds an acknowledgement of a quarter of the
bound or more past its next flush, so a sender whose peer keeps stepping is never stuck.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["MAX_IN_FLIGHT", "MAX_IN_FLIGHT_ENV", "FlowLedger", "default_max_in_flight"]

#: Default bound, in bytes of data in flight per peer: large enough that ordinary runs never
#: wait, small enough that a slow consumer cannot exhaust memory.
MAX_IN_FLIGHT = 64 << 20
#: Environment variable overriding :data:`MAX_IN_FLIGHT` (bytes).
MAX_IN_FLIGHT_ENV = "PYTIMELY_MAX_IN_FLIGHT"


def default_max_in_flight() -> int:
    """``$PYTIMELY_MAX_IN_FLIGHT`` if set (bytes), else :data:`MAX_IN_FLIGHT`."""
    text = os.environ.get(MAX_IN_FLIGHT_ENV)
    if not text:
        return MAX_IN_FLIGHT
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{MAX_IN_FLIGHT_ENV}={text!r} is not a number of bytes") from None
    return check_max_in_flight(value, MAX_IN_FLIGHT_ENV)


def check_max_in_flight(value: int, where: str = "max_in_flight") -> int:
    if value < 1:
        raise ValueError(f"{where} must be a positive number of bytes, not {value}")
    return value


class FlowLedger:
    """One worker's credit accounting towards each of its ``peers`` (see the module docstring).

    :meth:`sent`, :meth:`consumed` and :meth:`acknowledgements_due` are called by the worker
    thread; :meth:`acknowledged` by whichever thread reads the peer's ACK frames.
    """

    __slots__ = (
        "_acked",
        "_acked_consumed",
        "_consumed",
        "_sent",
        "acks_received",
        "acks_sent",
        "ack_every",
        "max_in_flight",
        "peak_backlog",
    )

    def __init__(self, peers: int, max_in_flight: int | None = None) -> None:
        self._sent = [0] * peers  # DATA payload bytes queued for each peer, ever
        self._acked = [0] * peers  # the latest running total each peer acknowledged
        self._consumed = [0] * peers  # DATA payload bytes from each peer handed to the worker
        self._acked_consumed = [0] * peers  # what we last acknowledged to each peer
        self.acks_sent = 0
        self.acks_received = 0
        self.peak_backlog = [0] * peers
        """The largest backlog towards each peer seen when data was queued for it."""
        self.max_in_flight = 0
        self.ack_every = 0
        self.set_bound(default_max_in_flight() if max_in_flight is None else max_in_flight)

    def set_bound(self, max_in_flight: int) -> None:
        """Bound the bytes in flight per peer (acknowledgements go out every quarter of it)."""
        self.max_in_flight = check_max_in_flight(max_in_flight)
        self.ack_every = max(1, max_in_flight // 4)

    # --- sender side --------------------------------------------------------------------------

    def sent(self, peer: int, nbytes: int) -> None:
        """``nbytes`` of DATA payload were queued for ``peer``."""
        total = self._sent[peer] + nbytes
        self._sent[peer] = total
        backlog = total - self._acked[peer]
        if backlog > self.peak_backlog[peer]:
            self.peak_backlog[peer] = backlog

    def acknowledged(self, peer: int, consumed_total: int) -> None:
        """``peer`` says it has consumed ``consumed_total`` bytes from us so far."""
        if consumed_total > self._acked[peer]:
            self._acked[peer] = consumed_total
        self.acks_received += 1

    def backlog(self, peer: int) -> int:
        """Bytes sent to ``peer`` and not yet acknowledged."""
        return self._sent[peer] - self._acked[peer]

    def over_bound(self, peer: int) -> bool:
        """More bytes sent to ``peer`` and unacknowledged than the bound: inputs must wait."""
        return self._sent[peer] - self._acked[peer] > self.max_in_flight

    # --- receiver side ------------------------------------------------------------------------

    def consumed(self, peer: int, nbytes: int) -> None:
        """``nbytes`` of DATA payload from ``peer`` were handed to the worker."""
        self._consumed[peer] += nbytes

    def acknowledgements_due(self) -> list[tuple[int, int]]:
        """``(peer, consumed_total)`` for every peer owed an acknowledgement now (a quarter of
        the bound or more consumed since the last one); records them as sent."""
        due = []
        every = self.ack_every
        for peer, total in enumerate(self._consumed):
            if total - self._acked_consumed[peer] >= every:
                self._acked_consumed[peer] = total
                due.append((peer, total))
        self.acks_sent += len(due)
        return due

    def statistics(self) -> dict[str, Any]:
        """The counters as a dict, for :meth:`Allocator.flow_statistics`.

        The bound; per peer the backlog, its peak, the bytes sent and consumed; the acknowledgements
        sent and received.
        """
        return {
            "max_in_flight": self.max_in_flight,
            "backlog": [s - a for s, a in zip(self._sent, self._acked, strict=True)],
            "peak_backlog": list(self.peak_backlog),
            "sent_bytes": list(self._sent),
            "consumed_bytes": list(self._consumed),
            "acks_sent": self.acks_sent,
            "acks_received": self.acks_received,
        }
