"""The worker: one thread of control that owns dataflows and steps them.

A worker builds dataflows (``dataflow(fn)``) and then *steps*: each step receives what other
workers sent (data and progress batches, which activate the operators and scopes they are
for), fires due timed activations, schedules every dataflow that has something to do, and
flushes its outgoing messages.  Nothing is polled: a dataflow nobody activated is not touched,
and ``step_or_park`` sleeps on the communication layer when no dataflow is active.  Another
thread (the event loop running ``map_async``'s calls) reaches an operator only through
``call_soon_threadsafe``, which queues a callback for the worker's next step and wakes it; while
operators await such reports (``expect_from_threads``) the worker waits, never idle or stuck.

Every channel and every scope's progress exchange has an identifier allocated in construction
order, so all workers that build the same dataflows in the same order agree on them.

What the dataflow layer may ask of its worker — channels, progress exchanges, timed
activations, input tracking — is the :class:`WorkerServices` protocol (timely's ``AsWorker``);
scopes, pacts and operators use nothing else of the worker.  A progress batch from another
worker goes straight to the scope's :class:`~pytimely.progress.broadcast.Progcaster`, which
wakes the scope; the worker only routes it by channel.

A computation that cannot finish raises :class:`StuckError` instead of hanging: on one worker as
soon as nothing is active and no timer is pending; on several workers once *every* worker is
idle and no message is in flight (:mod:`pytimely.termination`), about ``stuck_after`` seconds
after the computation went quiet.  A worker is *idle* only while parked inside ``step_while`` /
``run``; user code between them may still send input, so it is never idle.
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import itertools
import logging
import os
import sys
import threading
import time as _time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any, TypeVar

from . import _native
from .communication.allocator import Allocator, ThreadAllocator
from .communication.timers import SPIN_S, precise_waits, spin_until
from .dataflow.inline import InlinePush
from .dataflow.scope import Scope
from .dataflow.services import WorkerServices
from .errors import CommunicationError, GraphError, StuckError, WorkerFailure
from .eventlog import EventLog
from .order import domain_of
from .progress.broadcast import Progcaster
from .progress.reachability import Source
from .progress.subgraph import Subgraph
from .termination import STUCK_AFTER, QuiescenceDetector, Status, Verdict

T = TypeVar("T")

__all__ = ["Worker", "WorkerServices", "StuckError", "activity", "STRICT_ENV"]

#: Set to ``1`` to make every :class:`Worker` strict (see ``Worker.strict``).
STRICT_ENV = "PYTIMELY_STRICT"

#: Seconds an input waits for a congested peer that acknowledges nothing before it gives up.
FLOW_TIMEOUT = 300.0

#: A step that schedules for longer than this many seconds is logged (``Worker.slow_step``).
SLOW_STEP = 1.0

#: Completed dataflows' graphs stay frozen (out of the cyclic collector's sight) until they
#: hold more operators than this and than the live dataflows: then one collection reclaims them.
FROZEN_GARBAGE_OPERATORS = 2_000

#: The smallest in-flight bound (bytes per peer) under which an input's credit check leaves
#: the exchanges' held parts held until the end of the step (see ``wait_for_credit``).
HELD_UNDER_BOUND = 4 << 20

_log = logging.getLogger(__name__)

# The cyclic collector is paused while a worker steps (see ``Worker.__init__``'s
# ``freeze_gc``): the batches, records and parts a step creates are mostly freed by reference
# counting before it ends, and a collection in the middle of the step would scan every one of
# them that is still in flight, and promote them to be scanned again.  After the step the next
# allocation collects what survived.  Counted per process, so that workers on several threads
# of one process resume it only when the last of them leaves its step.
#
# After a long step (``LONG_STEP``) the objects it left are frozen (``gc.freeze``, constant
# time): what outlives a step that long is mostly state the dataflow keeps (an arrangement's
# batches, windows, operator state), and the collector would otherwise scan it at the next
# young collection, again at the middle one, and at full collections -- in the user's code
# between steps.  (A differential count spent a fifth of its time there, feeding its input
# session.)  Frozen objects are still freed by reference counting, but cyclic garbage among
# them would stay.  So the growth of what is frozen is estimated -- the collector's own count
# of young objects, allocations less deallocations, read before each freeze: an upper bound,
# as it never goes below zero -- and once the estimate reaches half of what the last full
# collection left frozen (and :data:`STEP_SURVIVORS_FULL` at least), the estimate is checked
# against the memory allocator's count of blocks (``sys.getallocatedblocks``, tens of µs),
# turned into objects at the ratio of blocks to frozen objects the last full collection
# measured (counting the frozen objects is a walk, a quarter of a collection: a differential
# loop over half a million objects spent 4% of its time walking them); if they did grow that
# much, everything is unfrozen, collected and frozen again.  Garbage thus stays within the
# live state, or 400,000
# objects (CPython's own rule for full collections: a quarter), and state that only churns
# costs no scans at all.
_collector_lock = threading.Lock()
_collector_pauses = 0  # steps of this process' workers running with the collector paused

#: Seconds from which a step may have left state worth freezing (``_resume_collector``).
LONG_STEP = 1e-3
#: The least growth of what is frozen (objects) that makes a full collection.
STEP_SURVIVORS_FULL = 200_000
_frozen_growth = 0  # young objects frozen after long steps since the last full collection
_frozen_after_full = 0  # objects frozen when the last full collection ended
_blocks_after_full = 0  # the allocator's blocks then (0: the count is not available)
_blocks_per_object = 1.0  # blocks per frozen object then


def _pause_collector() -> bool:
    """Pause the cyclic collector for a step; ``False`` (nothing to resume) if the program
    had switched it off."""
    global _collector_pauses
    with _collector_lock:
        if _collector_pauses == 0:
            if not gc.isenabled():
                return False
            gc.disable()
        _collector_pauses += 1
    return True


def _resume_collector(step_seconds: float = 0.0) -> None:
    """End a step's :func:`_pause_collector` (the last one switches the collector back on,
    first freezing what a step of ``step_seconds`` left if it was long: see the comment
    above)."""
    global _collector_pauses
    with _collector_lock:
        _collector_pauses -= 1
        if _collector_pauses == 0:
            if step_seconds > LONG_STEP:
                _freeze_survivors()
            gc.enable()


def _freeze_after_long_step(native: Any) -> None:
    """The compiled ``resume_collector`` left the last pause, of a long step, to us: freeze
    what the step left (the collector still paused), then end the pause."""
    try:
        _freeze_survivors()
    finally:
        native.resume_collector(False)


def _freeze_survivors() -> None:
    """Freeze what the steps left; once the estimated growth since the last full collection
    reaches half of what that one left, count what is frozen, and collect everything if the
    count agrees (the rule above)."""
    global _frozen_growth
    _frozen_growth += gc.get_count()[0]
    gc.freeze()
    threshold = max(STEP_SURVIVORS_FULL, _frozen_after_full // 2)
    if _frozen_growth < threshold:
        return
    _frozen_growth = 0
    # The estimate runs ahead of the truth where a step frees before it allocates.
    if _frozen_grown() >= threshold:
        _collect_frozen()


def _frozen_grown() -> float:
    """How many objects the frozen ones grew by since the last full collection: from the
    allocator's blocks where it counts them (no walk), else by counting (a walk)."""
    blocks = sys.getallocatedblocks()
    if blocks and _blocks_after_full:
        return (blocks - _blocks_after_full) / _blocks_per_object
    return gc.get_freeze_count() - _frozen_after_full


def _collect_frozen() -> None:
    """Unfreeze everything, collect, and freeze what survives; the growth of what is frozen is
    counted from here (the rule above; also how completed graphs are reclaimed)."""
    global _frozen_growth, _frozen_after_full, _blocks_after_full, _blocks_per_object
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    _frozen_after_full = gc.get_freeze_count()  # walks them: once per full collection
    _blocks_after_full = sys.getallocatedblocks()
    _blocks_per_object = max(1.0, _blocks_after_full / max(1, _frozen_after_full))
    _frozen_growth = 0


def _collector_on() -> bool:
    """Whether the program runs with the cyclic collector (even if a step paused it)."""
    if gc.isenabled() or _collector_pauses > 0:
        return True
    native = _native.speedups
    return native is not None and native.collector_paused()


class Worker:
    """Owns dataflows on one thread; see the module docstring.  Implements
    :class:`WorkerServices` for the dataflows it builds."""

    def __init__(
        self,
        allocator: Allocator | None = None,
        freeze_gc: bool = True,
        stuck_after: float | None = None,
        strict: bool | None = None,
        max_in_flight: int | None = None,
        flow_timeout: float = FLOW_TIMEOUT,
    ) -> None:
        """``stuck_after``: with several workers, seconds of global idleness after which
        ``step_while`` / ``run`` raise :class:`StuckError` (default ``STUCK_AFTER``, 2 s).
        ``strict``: see :attr:`strict`.  ``max_in_flight``: the flow-control bound, bytes of
        data in flight per peer before inputs wait (default 64 MB or
        ``$PYTIMELY_MAX_IN_FLIGHT``; see :mod:`pytimely.communication.flow`).
        ``flow_timeout``: seconds an input may wait for a congested peer that acknowledges
        nothing before :meth:`wait_for_credit` raises.  ``freeze_gc``: let the worker manage
        the cyclic garbage collector -- built graphs are frozen out of its sight, and it is
        paused while a step runs (the step's garbage is freed by reference counting; what
        survives is collected after the step); ``False`` leaves the collector alone."""
        self._freeze_gc = freeze_gc
        # Operators of each installed dataflow, and how many operators of completed dataflows
        # are still frozen (see ``_release_frozen``).
        self._operators_of: dict[int, int] = {}
        self._frozen_dead = 0
        self.strict = os.environ.get(STRICT_ENV, "") not in ("", "0") if strict is None else strict
        """Strict mode: every Exchange round-trips the first record of each batch through the
        codec and checks every key, even on one worker, so a record that cannot cross workers
        fails in a one-worker test.  Default: the ``PYTIMELY_STRICT`` environment variable."""
        self.allocator = allocator if allocator is not None else ThreadAllocator()
        if max_in_flight is not None:
            self.allocator.limit_in_flight(max_in_flight)
        if flow_timeout <= 0:
            raise ValueError(f"flow_timeout must be positive, not {flow_timeout}")
        self.flow_timeout = flow_timeout
        self.flow_waits = 0
        """How many times an input waited for credit (see :meth:`wait_for_credit`)."""
        self._scheduling = False  # inside step_or_park's scheduling loop
        self.index = self.allocator.index
        self.peers = self.allocator.peers
        self._quiescence: QuiescenceDetector | None = None
        if self.peers > 1:
            self._quiescence = QuiescenceDetector(
                self.allocator, STUCK_AFTER if stuck_after is None else stuck_after
            )
        # Changes whenever this worker does work or enters / leaves step_while and run: an
        # unchanged epoch between two probes means it was idle all along (see termination).
        self._epoch = 0
        self._dataflows: dict[int, Any] = {}
        self._names: dict[int, str] = {}
        self._active: set[int] = set()
        self._next_dataflow = 0
        self._next_channel = 0
        self._handlers: dict[int, Callable[[Any], None]] = {}
        self._unrouted: dict[int, list[Any]] = {}
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._timer_seq = itertools.count()
        self._inputs: list[Any] = []
        self._step_observers: list[Callable[[], None]] = []
        self._verdict_observers: list[Callable[[BaseException], None]] = []
        self._before_flush: list[Callable[[], None]] = []  # see before_flush
        # What other threads asked to run here (``call_soon_threadsafe``), and how many such
        # reports this worker's operators still await (``expect_from_threads``).
        self._from_threads: deque[Callable[[], None]] = deque()
        self._awaited = 0
        self._eventlog: EventLog | None = None  # created by enable_statistics / log_to
        self._unlogged: set[int] = set()  # dataflows that host a log stream
        self.steps = 0
        self.parks = 0
        """Times this worker slept waiting for work (``step_or_park``)."""
        self.parked_s = 0.0
        """Seconds this worker slept waiting for work."""
        self.spins = 0
        """How many of the :attr:`parks` polled instead of sleeping: waits shorter than
        :attr:`spin_s`."""
        self.spin_s = SPIN_S
        """Waits shorter than this many seconds poll for work instead of sleeping: a sleep
        that short ends late by the cost of a wake-up (see :mod:`.communication.timers`)."""
        self.slow_step = SLOW_STEP
        """Seconds of scheduling in one step above which the step is logged as slow (a
        warning on the ``pytimely.worker`` logger)."""

    def __repr__(self) -> str:
        return f"<Worker {self.index} of {self.peers}, {len(self._dataflows)} dataflows>"

    # -- building -------------------------------------------------------------------------

    def dataflow(
        self, fn: Callable[[Scope], T], name: str | None = None, timestamp: Any = int
    ) -> T:
        """Build a dataflow with ``fn(scope)``; returns what ``fn`` returns.

        ``timestamp`` is the type of the dataflow's times: ``int`` (default) or a user type
        implementing the timestamp protocol (see :mod:`pytimely.order`).
        """

        index = self._next_dataflow
        self._next_dataflow += 1
        name = name or f"Dataflow {index}"
        # The first channel of every dataflow checks that all workers built the same graph:
        # channel ids are allocated in construction order, so a different graph on another
        # worker would otherwise cross-wire channels silently.
        check_channel = self.allocate_channel()
        scope = Scope(self, name, domain_of(timestamp), (index,))
        # Building allocates many long-lived objects and no garbage cycles; the cyclic
        # collector would rescan all of them again and again while we build, and then at every
        # full collection while the dataflow runs.  So: no collection during the build, and the
        # finished graph is moved out of the collector's sight (``gc.freeze``); completed
        # graphs are reclaimed in bulk (``_release_frozen``).
        collecting = gc.isenabled()
        gc.disable()
        try:
            result = fn(scope)
            subgraph: Subgraph = scope.build_subgraph()
        finally:
            if collecting:
                gc.enable()
        if self._freeze_gc:
            gc.freeze()
            self._operators_of[index] = _count_operators(subgraph)

        # A dataflow asks to be stepped by adding its index to ``_active`` (cleared in place,
        # so the bound method stays valid).
        subgraph.attach(self._active.add, index)
        if self._eventlog is not None and index not in self._unlogged:
            subgraph.observe(self._eventlog)
        if self.peers > 1:
            self._check_same_graph(check_channel, index, name, subgraph)
        self._dataflows[index] = subgraph
        self._names[index] = name
        self._active.add(index)
        # Peers that finish learn what we built, so that one that built more can say so.
        self.allocator.set_farewell({"dataflows": [self._names[i] for i in range(index + 1)]})
        _log.info("worker %d built dataflow %d (%r)", self.index, index, name)
        return result

    def _release_frozen(self, index: int) -> None:
        """Dataflow ``index`` completed: its graph, frozen since its build, is garbage.

        Unfreezing at every completion would hand every live dataflow back to the collector
        too, which then rescans them all at each full collection: a short dataflow such as a
        barrier would undo the freeze for everything else.  So completed graphs stay frozen
        until they hold more operators than the live ones (and more than
        :data:`FROZEN_GARBAGE_OPERATORS`); then everything is unfrozen, the garbage collected
        and the survivors frozen again.  Invariant: the operators of completed dataflows kept
        frozen never exceed both bounds.  (Counted in operators, not objects:
        ``gc.get_freeze_count`` walks every frozen object.)
        """
        self._frozen_dead += self._operators_of.pop(index, 0)
        live = sum(self._operators_of.values())
        if self._frozen_dead > max(live, FROZEN_GARBAGE_OPERATORS):
            if _collector_on():
                with _collector_lock:
                    _collect_frozen()
            else:  # a program that switched the collector off decides itself
                gc.unfreeze()
            self._frozen_dead = 0

    def _check_same_graph(self, channel: int, index: int, name: str, subgraph: Any) -> None:
        mine = _fingerprint(subgraph)
        me = self.index

        def compare(payload: Any) -> None:
            source, theirs = payload
            if theirs != mine:
                raise GraphError(
                    f"worker {source} built a different dataflow {index} than worker {me} "
                    f"({name!r}): every worker must build the same dataflows in the same order"
                )

        self._register(channel, compare)
        for w in range(self.peers):
            if w != me:
                self.allocator.send(channel, w, (me, mine))

    # -- WorkerServices ---------------------------------------------------------------------

    def allocate_channel(self) -> int:
        """See :class:`WorkerServices`."""
        channel = self._next_channel
        self._next_channel += 1
        return channel

    def register_data_channel(self, channel: int, push: Callable[[Any, Any], None]) -> None:
        """See :class:`WorkerServices`."""
        self._register(channel, lambda payload: push(payload[0], payload[1]))

    def _register(self, channel: int, handler: Callable[[Any], None]) -> None:
        self._handlers[channel] = handler
        waiting = self._unrouted.pop(channel, None)
        if waiting:
            for payload in waiting:
                handler(payload)

    def progcaster(self, channel: int) -> Progcaster:
        """See :class:`WorkerServices`.

        A progress batch leaves for the peers at once (with the data queued before it), not at
        the end of the step: the batch may report that this worker consumed the last messages
        of a time, the one fact a peer's notification waits for, and the rest of the step may
        be long (this worker's own work at that time).  Held back, it would serialize a loop's
        rounds across workers: each would do its round only after the other's.  Timely dataflow
        does the same (``Progcaster::send`` in ``src/progress/broadcast.rs`` calls ``done()``
        on each pusher).
        """
        allocator = self.allocator

        def send(targets: Sequence[int], batch: Any) -> None:
            self._release_held()  # the data a channel held back goes first, as it would have
            allocator.send_to(channel, targets, batch)  # serialized once for all of them
            allocator.flush()

        progcaster = Progcaster(send, [w for w in range(self.peers) if w != self.index])
        if self.peers > 1:
            self._register(channel, progcaster.receive)
        return progcaster

    def track_input(self, handle: Any) -> None:
        """See :class:`WorkerServices`."""
        self._inputs.append(handle)

    def activate_after(self, activate: Callable[[], None], delay: float) -> None:
        """See :class:`WorkerServices`."""
        heapq.heappush(self._timers, (_time.monotonic() + delay, next(self._timer_seq), activate))
        self.allocator.wake()

    def call_soon_threadsafe(self, callback: Callable[[], None]) -> None:
        """See :class:`WorkerServices`: queued for the start of the next step (drained by
        ``_receive``), and the worker woken through its allocator's thread-safe ``wake``."""
        self._from_threads.append(callback)  # deque.append: atomic, safe from any thread
        self.allocator.wake()

    def expect_from_threads(self, delta: int) -> None:
        """See :class:`WorkerServices`."""
        self._awaited += delta

    def before_flush(self, callback: Callable[[], None]) -> None:
        """See :class:`WorkerServices`."""
        self._before_flush.append(callback)

    def _release_held(self) -> None:
        """Run the :meth:`before_flush` callbacks (each once)."""
        while self._before_flush:
            callbacks, self._before_flush = self._before_flush, []
            for callback in callbacks:
                callback()

    def _flush(self) -> None:
        """Transmit what this worker queued, the data channels held back included."""
        if self._before_flush:
            self._release_held()
        self.allocator.flush()

    def congested(self) -> bool:
        """See :class:`WorkerServices`."""
        return self.allocator.congested() is not None

    @property
    def scheduling(self) -> bool:
        """See :class:`WorkerServices`: whether this worker is inside a step right now."""
        return self._scheduling

    def wait_for_credit(self, who: str) -> None:
        """See :class:`WorkerServices`.  Raises :class:`CommunicationError` naming the peer if
        its backlog did not shrink for ``flow_timeout`` seconds, and ``WorkerFailure`` if it
        failed meanwhile."""
        if self._scheduling:
            return
        # What channels hold back (an exchange's parts) is not in flight yet.  Under a bound
        # of at least HELD_UNDER_BOUND bytes it stays held while no peer is congested, so an
        # input feeding an exchange sends one message per destination per step, not one per
        # batch; held parts are bounded apart (ExchangePusher.HOLD_BYTES per channel), and go
        # as soon as a peer is congested, to count against the bound while we wait.  Under a
        # smaller bound they go at every check, so that the bound is the bound.
        allocator = self.allocator
        peer = allocator.congested()
        if self._before_flush:
            bound = allocator.in_flight_bound()
            if bound is not None and (bound < HELD_UNDER_BOUND or peer is not None):
                self._release_held()
                peer = allocator.congested()
        if peer is None:
            return
        self.flow_waits += 1
        backlog = allocator.backlog()[peer]
        deadline = _time.monotonic() + self.flow_timeout
        while peer is not None:
            now = _time.monotonic()
            if now > deadline:
                raise CommunicationError(
                    f"{who} on worker {self.index}: worker {peer} acknowledged none of the "
                    f"{backlog} bytes in flight to it for {self.flow_timeout:g} s (bound "
                    f"{allocator.flow_statistics().get('max_in_flight')} bytes); it is not "
                    "consuming its input"
                )
            self.step_or_park(min(0.1, deadline - now))
            peer = allocator.congested()
            if peer is not None and allocator.backlog()[peer] < backlog:
                backlog = allocator.backlog()[peer]  # progress: give it time again
                deadline = _time.monotonic() + self.flow_timeout

    # -- activation -----------------------------------------------------------------------

    def _fire_timers(self) -> None:
        timers = self._timers
        if not timers:
            return
        now = _time.monotonic()
        while timers and timers[0][0] <= now:
            heapq.heappop(timers)[2]()

    def _receive(self) -> None:
        if self._from_threads:
            self._run_from_threads()
        got = self.allocator.receive()
        if not got:
            return
        handlers = self._handlers
        for channel, _source, payload in got:
            handler = handlers.get(channel)
            if handler is None:
                self._unrouted.setdefault(channel, []).append(payload)
            else:
                handler(payload)

    def _run_from_threads(self) -> None:
        """Run what other threads queued (``call_soon_threadsafe``) before this call; what
        they queue meanwhile waits for the next one (their ``wake`` keeps us from parking)."""
        calls = self._from_threads
        for _ in range(len(calls)):
            calls.popleft()()

    # -- stepping -------------------------------------------------------------------------

    def step(self) -> bool:
        """Do whatever work is ready now; returns whether any dataflow remains."""
        return self.step_or_park(0)

    def step_or_park(self, timeout: float | None = None) -> bool:
        """Like :meth:`step`, but if nothing is ready, sleep up to ``timeout`` seconds (``None``:
        until something arrives) first.  Returns whether any dataflow remains."""
        self._receive()
        self._fire_timers()
        if not self._active and timeout != 0:
            delay = timeout
            if self._timers:
                due = max(0.0, self._timers[0][0] - _time.monotonic())
                delay = due if delay is None else min(delay, due)
            self._flush()
            parked = _time.monotonic()
            if delay is not None and delay < self.spin_s:
                # A park this short would oversleep by a wake-up's cost: poll through it.
                spin_until(parked + delay, self.allocator.has_events)
                self.allocator.await_events(0)  # takes the wake, raises a peer's failure
                self.spins += 1
            else:
                if delay is not None:
                    precise_waits()  # a park of 100 us must not end 50 us late
                self.allocator.await_events(delay)
            self.parks += 1
            self.parked_s += _time.monotonic() - parked
            self._receive()
            self._fire_timers()
        if self._active:
            self.steps += 1
            self._epoch += 1
            active = sorted(self._active)
            self._active.clear()
            dataflows = self._dataflows
            started = _time.monotonic()
            self._scheduling = True
            # The pause of the collector, compiled when the extension is there (no lock).
            native = _native.speedups if self._freeze_gc else None
            if native is not None:
                paused = native.pause_collector()
            else:
                paused = self._freeze_gc and _pause_collector()
            try:
                for index in active:
                    subgraph = dataflows.get(index)
                    if subgraph is not None and not subgraph.schedule():
                        del dataflows[index]
                        _log.info(
                            "worker %d completed dataflow %d (%r)",
                            self.index,
                            index,
                            self._names[index],
                        )
                        # A completed dataflow's inputs are closed: forget them, or they
                        # would keep its whole graph alive.
                        self._inputs = [h for h in self._inputs if not h.closed]
                        if self._freeze_gc:
                            self._release_frozen(index)
            finally:
                self._scheduling = False
                elapsed = _time.monotonic() - started
                if paused:
                    if native is None:
                        _resume_collector(elapsed)
                    elif native.resume_collector(elapsed > LONG_STEP):
                        _freeze_after_long_step(native)
            if elapsed > self.slow_step:
                _log.warning(
                    "worker %d: slow step %d took %.3f s scheduling dataflows %s",
                    self.index,
                    self.steps,
                    elapsed,
                    active,
                )
        self._flush()
        for observe in self._step_observers:
            observe()
        return bool(self._dataflows)

    def step_while(self, condition: Callable[[], bool], timeout: float | None = None) -> None:
        """Step until ``condition()`` is false, parking when idle.

        Raises :class:`StuckError` when nothing can change any more but the condition still
        holds (e.g. waiting on a probe of an input that was never advanced): at once on a single
        worker, after ``stuck_after`` seconds of global idleness on several.  Raises
        :class:`TimeoutError` after ``timeout`` seconds if given.
        """
        deadline = None if timeout is None else _time.monotonic() + timeout
        with self._parking():
            while condition():
                if deadline is not None and _time.monotonic() > deadline:
                    raise TimeoutError(self._timed_out(timeout))
                if not self._active and not self._timers and not self._awaited:
                    self._when_idle(
                        "step_while: the condition still holds but no dataflow has anything to "
                        "do; did you forget to advance or close an input, or drop a capability?"
                    )
                park = self._park_limit()
                if deadline is not None:
                    park = max(0.0, min(park, deadline - _time.monotonic()))
                self.step_or_park(park)

    def run(self) -> None:
        """Step until every dataflow has completed (closing inputs left open by the caller is
        the caller's job; see :func:`pytimely.execute`)."""
        with self._parking():
            while self._dataflows:
                if not self._active and not self._timers and not self._awaited:
                    self._when_idle(
                        "the dataflows cannot complete: nothing has work to do but something "
                        "still holds a capability or an input is open."
                    )
                self.step_or_park(self._park_limit())

    @contextlib.contextmanager
    def _parking(self) -> Iterator[None]:
        """Around ``step_while`` / ``run``: the only place this worker can be idle.  Leaving
        voids any quiescence round (user code may send input), and a peer's failure that
        follows its verdict is reported as that verdict."""
        self._epoch += 1
        try:
            yield
        except WorkerFailure:
            verdict = None if self._quiescence is None else self._quiescence.pending_verdict()
            if verdict is None:
                raise
            raise _verdict_error(verdict) from None
        finally:
            self._epoch += 1
            if self._quiescence is not None:
                self._quiescence.leave()

    def _timed_out(self, timeout: float | None) -> str:
        """The message of ``step_while``'s TimeoutError: what this worker was doing and, with
        several workers, which capabilities it waits for that its peers hold."""
        head = f"step_while: condition still true after {timeout} s"
        if self.peers == 1:
            return head + "\n" + self.describe()
        busy = self._active or self._timers or self._awaited
        state = "busy" if busy else "idle (nothing to do)"
        if self._awaited:
            state += f", awaiting {self._awaited} calls on other threads"
        if self._timers:
            state += f", {len(self._timers)} timed activations pending"
        gone = sorted(self.allocator.farewells())
        lines = [
            f"{head} on worker {self.index} of {self.peers}; it is {state}",
            f"worker {self.index} holds:",
            "  " + self.describe(held_only=True).replace("\n", "\n  "),
            "pointstamps holding the frontier, all workers (those held by other workers are "
            "what this worker waits for):",
            "  " + self.describe().replace("\n", "\n  "),
        ]
        if gone:
            lines.append(f"workers {gone} have finished")
        return "\n".join(lines)

    def _park_limit(self) -> float:
        return 1.0 if self._quiescence is None else min(1.0, self._quiescence.interval)

    def _when_idle(self, alone: str) -> None:
        """Nothing is active and no timer is pending: stuck if this is the only worker; else
        take part in global quiescence detection, raising its verdict."""
        if self._quiescence is None:
            error: Exception = StuckError(alone + "\n" + self.describe())
        else:
            self._check_departed_peers()
            verdict = self._quiescence.tend(self._status)
            if verdict is None:
                return
            error = _verdict_error(verdict)
        _log.error("worker %d: %s: %s", self.index, type(error).__name__, error)
        for observe in list(self._verdict_observers):
            observe(error)
        raise error

    def _status(self) -> Status:
        self._receive()  # messages to ourselves, or just arrived, make us busy, not idle
        idle = not self._active and not self._timers and not self._awaited
        sent, received = self.allocator.message_counts()
        return Status(
            worker=self.index,
            idle=idle,
            epoch=self._epoch,
            sent=sent,
            received=received,
            dataflows=[self._names[i] for i in range(self._next_dataflow)],
            holding=self.describe() if idle else "",
            held=self.describe(held_only=True) if idle else "",
        )

    def _check_departed_peers(self) -> None:
        """A peer that finished without building one of our incomplete dataflows means that
        dataflow can never complete (its initial capabilities are never dropped)."""
        for peer, farewell in sorted(self.allocator.farewells().items()):
            note = farewell.get("note") or {}
            built = note.get("dataflows", [])
            for index in sorted(self._dataflows):
                if index >= len(built):
                    raise GraphError(
                        f"worker {peer} finished after building {_count(len(built))}, but "
                        f"worker {self.index} built dataflow {index} ({self._names[index]!r}), "
                        "which therefore can never complete: every worker must build the same "
                        "dataflows in the same order"
                    )

    def close_inputs(self) -> None:
        """Close every input handle of this worker (what leaving ``execute``'s function does)."""
        for handle in self._inputs:
            handle.close()

    # -- introspection --------------------------------------------------------------------

    def installed_dataflows(self) -> list[int]:
        """The indices of the dataflows this worker still runs."""
        return sorted(self._dataflows)

    def dataflow_scopes(self) -> list[tuple[int, str, Any]]:
        """``(index, name, subgraph)`` of every installed dataflow, for introspection
        (:mod:`pytimely.graph`, the dashboard).  Read them only on this worker's thread."""
        return [(i, self._names[i], sg) for i, sg in sorted(self._dataflows.items())]

    def graph(self, format: str = "json") -> str:
        """The graph of every installed dataflow: operators with names and addresses, nested
        scopes, edges with their pact and feedback edges marked.  ``format``: ``"json"`` (a
        text of the dict :func:`pytimely.graph.describe` returns), ``"dot"`` (Graphviz),
        ``"mermaid"`` or ``"svg"``."""
        from . import graph

        return graph.render(graph.describe(self.dataflow_scopes()), format)

    def observe_steps(self, observer: Callable[[], None]) -> Callable[[], None]:
        """Call ``observer()`` on this worker's thread at the end of every step (e.g. to publish
        a snapshot of its state); returns a function that stops it.  Observers must be cheap:
        they run once per step."""
        return _subscribe(self._step_observers, observer)

    def observe_verdicts(self, observer: Callable[[BaseException], None]) -> Callable[[], None]:
        """Call ``observer(error)`` on this worker's thread when it declares the computation
        stuck (the :class:`StuckError` or :class:`GraphError` it is about to raise), e.g. for a
        dashboard to say so; returns a function that stops it."""
        return _subscribe(self._verdict_observers, observer)

    # -- logging and statistics -------------------------------------------------------------

    def enable_statistics(self) -> None:
        """Collect per-operator and per-channel figures for :meth:`statistics` from now on
        (until then they cost nothing; collecting them costs two clock readings per operator
        invocation and a count per batch, see :mod:`pytimely.eventlog`)."""
        self._event_log()

    def log_to(self, callback: Callable[[Any], None], exclude_dataflow: int | None = None) -> None:
        """Hand ``callback`` this worker's events (:mod:`pytimely.eventlog`): one
        ``EventBatch`` (a sequence of event named tuples) at the end of every step that
        recorded any.  Operators built before the call are announced first.
        ``exclude_dataflow``: a dataflow index whose operators are not logged (one that
        consumes the log itself, see :func:`pytimely.eventlog.log_stream`).

        >>> import pytimely as pt
        >>> from pytimely.eventlog import OperatesEvent, ScheduleEvent
        >>> worker = pt.Worker()
        >>> events = []
        >>> worker.log_to(events.extend)
        >>> inp, probe = worker.dataflow(
        ...     lambda s: (lambda i, st: (i, st.map(lambda x: x + 1).probe()))(*s.new_input()))
        >>> inp.send(1); inp.advance_to(1); worker.step_while(lambda: probe.less_than(1))
        >>> sorted(e.name.split("(")[0] for e in events if isinstance(e, OperatesEvent))
        ['Input', 'Map', 'Probe']
        >>> runs = [e for e in events if isinstance(e, ScheduleEvent)]
        >>> len(runs) >= 3 and all(e.time <= e.stop for e in runs)
        True
        """
        if exclude_dataflow is not None:
            self._unlogged.add(exclude_dataflow)
        self._event_log().listen(callback)

    def _event_log(self) -> EventLog:
        """The worker's event log, created and installed (in every dataflow, the allocator
        and the step loop) on first use."""
        log = self._eventlog
        if log is None:
            log = self._eventlog = EventLog(self.index)
            for index, subgraph in self._dataflows.items():
                if index not in self._unlogged:
                    subgraph.observe(log)
            self.allocator.observe_traffic(log.traffic)
            self.observe_steps(log.flush)
        return log

    def statistics(self) -> dict[str, Any]:
        """What this worker does: steps, active dataflows and each scope's state; after
        :meth:`enable_statistics` also ``"operators"`` (per operator: name, address,
        invocations, total and longest ``schedule`` time, records and batches in and out,
        capabilities this worker holds now), ``"channels"`` (per communication channel: records
        and bytes sent to each other worker) and ``"totals"`` (steps, parks, seconds parked)."""
        stats: dict[str, Any] = {
            "index": self.index,
            "peers": self.peers,
            "steps": self.steps,
            "flow_waits": self.flow_waits,
            "active": sorted(self._active),
            "dataflows": {i: sg.statistics() for i, sg in self._dataflows.items()},
        }
        log = self._eventlog
        if log is None:
            return stats
        operators = log.operator_statistics()
        for figures in operators.values():
            figures["capabilities"] = []
        for _index, _name, subgraph in self.dataflow_scopes():
            _held_by_operator(subgraph, operators)
        stats["operators"] = list(operators.values())
        stats["channels"] = log.channel_statistics()
        stats["totals"] = {"steps": self.steps, "parks": self.parks, "parked_s": self.parked_s}
        return stats

    def describe(self, held_only: bool = False) -> str:
        """A human-readable account of what each live dataflow is waiting for: every positive
        pointstamp as this worker sees it (summed over all workers), or with ``held_only`` only
        the capabilities this worker's own operators hold."""
        lines = []
        for index, sg in sorted(self._dataflows.items()):
            inner = _describe_scope(sg, "  ", held_only, self.index)
            if inner or not held_only:
                lines.append(f"dataflow {index} ({self._names.get(index)}):")
                lines.extend(inner)
        return "\n".join(lines) if lines else ("nothing" if held_only else "no dataflows")


def activity(frame: FrameType) -> str:
    """What the worker whose main thread's innermost frame is ``frame`` was doing, in one line:
    the (innermost) operator it was running, parked in ``step_while`` / ``run``, or running
    user code.  Meant to be called from another thread: it only reads the frames."""

    parked = {Worker.step_while.__code__: "step_while", Worker.run.__code__: "run"}
    where = None
    f: FrameType | None = frame
    while f is not None:
        operator = InlinePush.running(f) or Subgraph.scheduling(f)
        if operator is not None:
            name, address = operator
            return f"running operator {name!r} at {address}"
        if where is None and f.f_code in parked:
            where = parked[f.f_code]
        f = f.f_back
    if where is not None:
        return f"waiting in Worker.{where} (no operator running)"
    return "running user code outside step_while / run"


def _held_by_operator(sg: Any, operators: dict[tuple[int, ...], dict[str, Any]]) -> None:
    """Add the capabilities this worker's operators hold in ``sg`` and its nested scopes to
    their ``"capabilities"`` lists."""
    for loc, t, c in sg.held_capabilities():
        figures = operators.get(sg.path + (loc.node,))
        if figures is not None:
            figures["capabilities"].append({"output": loc.port, "time": t, "count": c})
    for nested in sg.nested_scopes().values():
        _held_by_operator(nested, operators)


def _count(n: int) -> str:
    return f"{n} dataflow" if n == 1 else f"{n} dataflows"


def _verdict_error(verdict: Verdict) -> Exception:
    return GraphError(verdict.message) if verdict.kind == "graph" else StuckError(verdict.message)


def _subscribe(observers: list[Any], observer: Any) -> Callable[[], None]:
    """Add ``observer`` to ``observers``; returns the function that removes it (once)."""
    observers.append(observer)

    def stop() -> None:
        if observer in observers:
            observers.remove(observer)

    return stop


def _count_operators(subgraph: Any) -> int:
    """The children of a scope and of its nested scopes (nested scopes included)."""

    count = 0
    for child in subgraph.children:
        if child is not None:
            count += 1
            if isinstance(child, Subgraph):
                count += _count_operators(child)
    return count


def _fingerprint(subgraph: Any) -> str:
    """A digest of a scope's shape: children (names, ports, nesting) and edges."""
    import hashlib

    parts: list[str] = []

    def walk(sg: Any) -> None:
        tracker = sg.tracker
        parts.append(f"scope {sg.name} {tracker.node_inputs} {tracker.node_outputs}")
        parts.append(repr(tracker.node_names))
        parts.append(repr(sg.edge_targets()))
        for child in sg.children:
            if isinstance(child, Subgraph):
                walk(child)

    walk(subgraph)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _describe_scope(sg: Any, indent: str, held_only: bool = False, worker: int = 0) -> list[str]:
    """One line per positive pointstamp of ``sg`` and its nested scopes: all workers' (the
    tracker's view), or with ``held_only`` the capabilities this worker's operators hold."""

    lines = []
    held = {(loc, t): c for loc, t, c in sg.held_capabilities()}
    stamps = sg.held_capabilities() if held_only else sg.tracker.positive_pointstamps()
    for loc, t, c in stamps:
        name = sg.tracker.node_names[loc.node]
        whose = ""
        if isinstance(loc, Source):
            kind, port = "capability", f"output {loc.port}"
            if not held_only and sg.peers > 1:
                mine = held.get((loc, t), 0)
                whose = f" ({mine} held by worker {worker}, {c - mine} by other workers)"
        else:
            kind, port = "messages in flight", f"input {loc.port}"
        address = sg.path + (loc.node,)
        lines.append(
            f"{indent}{name} {kind} at {loc} (address {address}, {port}): time {t!r} x{c}{whose}"
        )
    for child in sg.children:
        if isinstance(child, Subgraph):
            inner = _describe_scope(child, indent + "  ", held_only, worker)
            if inner or not held_only:
                lines.append(f"{indent}scope {child.name!r} at {child.path}:")
                lines.extend(inner)
    return lines
