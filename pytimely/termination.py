"""Global quiescence detection: telling a multi-worker computation that cannot finish from a
slow one.

On one worker, "nothing is active, no timer is pending, and still the dataflow is incomplete"
means it is stuck.  On several workers a worker with nothing to do may still be sent work by a
peer, so a worker can only conclude it is stuck when *every* worker is idle and *no message is
in flight* at one and the same moment.  This is the classic distributed termination detection
problem; we use Mattern's counting method ("Algorithms for distributed termination detection",
F. Mattern, Distributed Computing 2(3), 1987), in its two-wave form:

* Every worker's allocator counts the data messages it transmitted to each peer and took
  delivery of from each peer (:meth:`Allocator.message_counts`).  Control messages — the ones
  this module sends — are not counted, so detecting does not disturb what is detected.
* A worker is *idle* while it is parked inside ``step_while`` / ``run`` with no active dataflow,
  no pending timer and nothing of its own queued.  Its *epoch* changes whenever it does any work
  or leaves ``step_while`` / ``run`` (for user code that might send input).  An idle worker's
  state can change only by taking delivery of a message, which changes its counts.
* A *coordinator* (the lowest-indexed worker still connected) runs rounds while it is idle
  itself: it sends a probe to every connected worker; each answers, when it next tends the
  detector, with ``(idle, epoch, counts, what holds its frontier)``.  A worker busy in user
  code does not answer, so the round cannot complete.
* The computation is quiescent when two consecutive rounds found every worker idle with the
  same epoch and counts, and every count of messages sent to a connected worker equals the
  count that worker received.  Why this is safe: round ``r+1``'s probes leave only after all of
  round ``r``'s answers arrived, so the moment the coordinator starts round ``r+1`` lies inside
  every worker's interval between its two answers; a worker whose epoch and counts did not
  change over its interval was idle throughout it.  At that moment every worker was idle and
  every message sent had been received: nothing can ever happen again.
* Workers that have left (their allocator said goodbye) are idle forever; their final counts
  come with the goodbye.  Messages sent *to* them are lost anyway and are not counted.

On quiescence the coordinator sends its verdict — the pointstamps of *all* workers — to every
worker, and each raises it.  Rounds are ``stuck_after / 2`` seconds apart, so a stuck
computation is reported about ``stuck_after`` seconds after it went quiet.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .communication.allocator import Allocator

__all__ = ["STUCK_AFTER", "QuiescenceDetector", "Status", "Verdict"]

#: Default seconds of global idleness before a multi-worker computation is declared stuck.
STUCK_AFTER = 2.0


@dataclass(frozen=True)
class Status:
    """One worker's answer to a probe."""

    worker: int
    idle: bool
    epoch: int
    sent: list[int]
    received: list[int]
    dataflows: list[str] = field(default_factory=list)
    """Every dataflow the worker built, by index: its name."""
    holding: str = ""
    """Every positive pointstamp of its incomplete dataflows, summed over all workers
    (``Worker.describe()``)."""
    held: str = ""
    """The capabilities its own operators hold (``Worker.describe(held_only=True)``)."""


@dataclass(frozen=True)
class Verdict:
    """The coordinator's conclusion: ``kind`` is ``"stuck"`` or ``"graph"`` (the workers built
    different numbers of dataflows); ``message`` explains, naming every worker."""

    kind: str
    message: str


class QuiescenceDetector:
    """One worker's part in global quiescence detection (see the module docstring).

    The worker calls :meth:`tend` every time it wakes up inside ``step_while`` / ``run``, and
    :meth:`leave` when it returns to user code.  ``tend`` returns a :class:`Verdict` once the
    computation is known to be stuck (on every worker, within moments of each other).
    """

    def __init__(self, allocator: Allocator, stuck_after: float = STUCK_AFTER) -> None:
        if stuck_after <= 0:
            raise ValueError(f"stuck_after must be positive, not {stuck_after}")
        self.allocator = allocator
        self.index = allocator.index
        self.peers = allocator.peers
        self.interval = stuck_after / 2
        self._round = 0
        self._answers: dict[int, Status] = {}
        self._round_started = 0.0
        self._previous: dict[int, Status] | None = None
        self._next_round = time.monotonic() + self.interval
        self._verdict: Verdict | None = None

    def tend(self, status: Callable[[], Status]) -> Verdict | None:
        """Answer probes, run the coordinator's rounds, and return a verdict if one is in.

        ``status()`` describes this worker now; it is called only when someone asks."""
        if self._verdict is not None:
            return self._verdict
        latest_probe: tuple[int, int] | None = None
        for source, message in self.allocator.control_messages():
            kind = message[0]
            if kind == "probe":
                latest_probe = (source, message[1])
            elif kind == "status":
                _, number, answer = message
                if number == self._round and self._answers:
                    self._answers[source] = answer
            elif kind == "verdict":
                self._verdict = message[1]
                return self._verdict
        mine: Status | None = None
        if latest_probe is not None:
            mine = status()
            self.allocator.send_control(latest_probe[0], ("status", latest_probe[1], mine))
        if self._coordinator() == self.index:
            return self._coordinate(mine if mine is not None else status())
        return None

    def pending_verdict(self) -> Verdict | None:
        """A verdict that has arrived but was not yet returned by :meth:`tend` (used when a
        peer's failure, which follows its verdict, is noticed first)."""
        if self._verdict is None:
            for _source, message in self.allocator.control_messages():
                if message[0] == "verdict":
                    self._verdict = message[1]
        return self._verdict

    def leave(self) -> None:
        """The worker returns to user code: any round in progress is void."""
        self._answers = {}
        self._previous = None

    # --- the coordinator ------------------------------------------------------------------

    def _connected(self) -> list[int]:
        gone = self.allocator.farewells()
        return [w for w in range(self.peers) if w not in gone]

    def _coordinator(self) -> int:
        return min(self._connected())

    def _coordinate(self, mine: Status) -> Verdict | None:
        now = time.monotonic()
        if not mine.idle:
            self.leave()
            self._next_round = now + self.interval
            return None
        if self._answers:
            if now - self._round_started > 2 * self.interval:  # someone is busy: try again
                self.leave()
            elif set(self._connected()) <= self._answers.keys():
                answers, self._answers = self._answers, {}
                verdict = self._evaluate(answers)
                if verdict is not None:
                    self._verdict = verdict
                    for w in self._connected():
                        if w != self.index:
                            self.allocator.send_control(w, ("verdict", verdict))
                    return verdict
        if not self._answers and now >= self._next_round:
            self._round += 1
            self._round_started = now
            self._next_round = now + self.interval
            self._answers = {self.index: mine}
            for w in self._connected():
                if w != self.index:
                    self.allocator.send_control(w, ("probe", self._round))
        return None

    def _evaluate(self, answers: dict[int, Status]) -> Verdict | None:
        """Keep this round for comparison; a verdict if it and the previous one show the same
        quiescent state."""
        previous, self._previous = self._previous, None
        if not all(a.idle for a in answers.values()):
            return None
        farewells = self.allocator.farewells()
        if not _balanced(answers, farewells):
            return None
        self._previous = answers
        if previous is None or previous.keys() != answers.keys():
            return None
        for w, a in answers.items():
            b = previous[w]
            if (a.epoch, a.sent, a.received) != (b.epoch, b.sent, b.received):
                return None
        return _verdict(answers, farewells)


def _balanced(answers: dict[int, Status], farewells: dict[int, Any]) -> bool:
    """Every message sent to a connected worker has been received by it."""
    senders: dict[int, list[int]] = {w: a.sent for w, a in answers.items()}
    for w, farewell in farewells.items():
        senders[w] = farewell["sent"]
    for receiver, answer in answers.items():
        for sender, sent in senders.items():
            if sender != receiver and sent[receiver] != answer.received[sender]:
                return False
    return True


def _verdict(answers: dict[int, Status], farewells: dict[int, Any]) -> Verdict:
    built = {w: len(a.dataflows) for w, a in answers.items()}
    for w, farewell in farewells.items():
        note = farewell.get("note") or {}
        if "dataflows" in note:
            built[w] = len(note["dataflows"])
    most = max(built.values())
    if min(built.values()) != most:
        names = next(a.dataflows for a in answers.values() if len(a.dataflows) == most)
        lines = [
            f"worker {w} built {n} dataflow{'' if n == 1 else 's'} but worker "
            f"{next(v for v, m in built.items() if m == most)} built {most}: worker {w} never "
            f"built dataflow {n} ({names[n]!r})"
            for w, n in sorted(built.items())
            if n < most
        ]
        return Verdict(
            "graph",
            "\n".join(lines) + "\nevery worker must build the same dataflows in the same order",
        )
    lines = [
        "the dataflows cannot complete: every worker is idle and no message is in flight, but "
        "something still holds a capability or an input is open; did you forget to advance or "
        "close an input, or drop a capability?"
    ]
    for w, answer in sorted(answers.items()):
        lines.append(f"worker {w} holds:")
        lines.extend("  " + line for line in answer.held.splitlines())
    for w in sorted(farewells):
        lines.append(f"worker {w}: finished (all its dataflows completed)")
    lines.append("pointstamps holding the frontier (capabilities and messages in flight):")
    seen = min(answers)  # every worker sees the same sums once nothing is in flight
    lines.extend("  " + line for line in answers[seen].holding.splitlines())
    return Verdict("stuck", "\n".join(lines))
