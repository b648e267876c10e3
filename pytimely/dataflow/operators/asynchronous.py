"""``map_async``: an ``async def`` function per record, many calls in flight at once.

A record-at-a-time ``map`` that calls a remote service waits for every reply in turn; at 50 ms
a call it does 20 records a second.  ``stream.map_async(fn)`` runs ``fn(record)``, an ``async
def``, on an asyncio event loop instead, up to ``max_in_flight`` calls at once, and emits each
result at its record's timestamp.

Threads.  Every worker that runs a ``map_async`` gets **one** event loop, running in a daemon
thread of its own (``pytimely-async-w<index>``).  It is created at the first call, in the
worker's process (so a worker process forked by :func:`pytimely.execute` makes its own), is
shared by that worker's ``map_async`` operators, and is stopped (its thread joined) when the
last of them has finished: its input is exhausted and no call is outstanding, or a call
failed.  Should the worker be collected first, it is stopped then.  So what a function keeps
on the loop (an HTTP client session) lives as long as the operators that use it.

Activation.  The worker's thread submits the calls it took (one hop to the loop per
invocation, ``loop.call_soon_threadsafe``), and each finished call queues itself for the
operator and activates it through ``WorkerServices.call_soon_threadsafe``, which wakes a
parked worker: no polling, and one queued activation per operator however many calls finish
meanwhile.  While calls are outstanding the worker counts them (``expect_from_threads``), so
it waits for them rather than declaring the computation stuck.

Capabilities.  The operator holds a capability at every time with a record taken from the
input and not yet emitted (a running call, a finished call waiting for its turn when
``ordered``, or a record taken but not yet submitted), and emits each result with it at its
record's time.  The output frontier therefore never passes a time with outstanding work, and
when the input is exhausted and nothing is outstanding the operator holds nothing.

Backpressure.  The operator takes records from its input only while fewer than
``max_in_flight`` are in flight (submitted and not yet emitted), one message at a time; the
rest stay queued in the input port, where they hold the frontier as any undelivered message
does.  With ``ordered=True`` a finished call waiting behind a slower one still counts, so
memory stays bounded too.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ...errors import OperatorError
from ...naming import describe_function, operator_name
from ..pacts import Pipeline
from .generic import unary_frontier

if TYPE_CHECKING:
    from ..capability import Capability
    from ..operator import OperatorInfo
    from ..ports import InputPort, OutputPort
    from ..services import WorkerServices
    from ..stream import Stream

__all__ = ["map_async"]

_log = logging.getLogger(__name__)

#: Seconds to wait for a stopped event loop's thread to finish (its leftover tasks cancelled).
STOP_TIMEOUT = 5.0

#: Characters of a record's ``repr`` that an error message shows.
RECORD_REPR = 200


def map_async(
    stream: Stream,
    fn: Callable[[Any], Awaitable[Any]],
    *,
    max_in_flight: int = 64,
    ordered: bool = True,
    timeout: float | None = None,
    name: str | None = None,
) -> Stream:
    """``await fn(record)`` for every record, up to ``max_in_flight`` calls at once, on an
    event loop of the worker; each result is emitted at its record's timestamp.

    ``fn`` is an ``async def`` function of one record (any callable returning an awaitable);
    it runs on the worker's event loop thread (see the module docstring), so it must not
    block: use asyncio clients, or ``asyncio.to_thread`` for blocking calls.  ``ordered=True``
    emits results in the order their records arrived (per worker); ``ordered=False`` as the
    calls finish.  ``timeout``: seconds a call may take.  An exception in ``fn``, or a
    timeout, fails the worker with an :class:`~pytimely.errors.OperatorError` naming the
    operator, ``fn`` and the record.  Every record is submitted exactly once and its result
    emitted exactly once; there are no retries (write them into ``fn``).

    The operator holds a capability at each time with a call outstanding, so the frontier
    after it never passes a record whose result is still to come; it takes input only while
    fewer than ``max_in_flight`` records are in flight, leaving the rest queued.  It is named
    ``MapAsync(fn @ file.py:line)`` unless ``name`` is given.

    >>> import asyncio
    >>> import pytimely as pt
    >>> async def lookup(user):                 # a slow service: 10 ms a call
    ...     await asyncio.sleep(0.01)
    ...     return user, len(user)
    >>> def build(scope):
    ...     users = scope.to_stream(["ann", "bob", "carol"])
    ...     return users.map_async(lookup, max_in_flight=8).capture()
    >>> pt.example(build).extract()
    [(0, [('ann', 3), ('bob', 3), ('carol', 5)])]
    """
    if not callable(fn):
        raise TypeError(f"map_async: fn must be an async def function, got {fn!r}")
    op_name = operator_name(name, "MapAsync", fn)
    if type(max_in_flight) is not int or max_in_flight < 1:
        raise ValueError(
            f"map_async {op_name!r}: max_in_flight must be a positive int, got {max_in_flight!r}"
        )
    if timeout is not None and not timeout > 0:
        raise ValueError(f"map_async {op_name!r}: timeout must be positive, got {timeout!r}")
    worker = stream.scope.worker

    def ctor(cap: Capability, info: OperatorInfo) -> Callable[[InputPort, OutputPort], None]:
        cap.drop()  # records bring their own capabilities, retained while their calls run
        state = _MapAsync(
            fn, max_in_flight, ordered, timeout, op_name, info, worker, info.activator().activate
        )
        return state.logic

    return unary_frontier(stream, Pipeline, op_name, ctor)


class _Call:
    """One record's call: its result (or error) is set on the loop's thread, then the call is
    handed to the worker's (``_MapAsync.finished``)."""

    __slots__ = ("time", "record", "result", "error", "timed_out", "collected")

    def __init__(self, time: Any, record: Any) -> None:
        self.time = time
        self.record = record
        self.result: Any = None
        self.error: BaseException | None = None
        self.timed_out = False
        self.collected = False  # the worker has seen it finish (ordered: may be emitted)


class _MapAsync:
    """The state and logic of one ``map_async`` operator on one worker.

    Worker thread: ``logic`` and what it calls.  Loop thread: ``_spawn``, ``_run`` and
    ``_cancel``.  They share ``finished`` (a deque: appends and pops are atomic) and
    ``woken``: the loop's thread sets it before queueing an activation, the logic clears it
    before draining ``finished``, so a call that finishes after the drain queues a new one.
    """

    __slots__ = (
        "fn",
        "max_in_flight",
        "ordered",
        "timeout",
        "name",
        "address",
        "worker",
        "activate",
        "held",
        "taken",
        "taken_time",
        "next_taken",
        "calls",
        "in_flight",
        "running",
        "finished",
        "woken",
        "tasks",
        "shared",
        "failed",
    )

    def __init__(
        self,
        fn: Callable[[Any], Awaitable[Any]],
        max_in_flight: int,
        ordered: bool,
        timeout: float | None,
        name: str,
        info: OperatorInfo,
        worker: WorkerServices,
        activate: Callable[[], None],
    ) -> None:
        self.fn = fn
        self.max_in_flight = max_in_flight
        self.ordered = ordered
        self.timeout = timeout
        self.name = name
        self.address = info.address
        self.worker = worker
        self.activate = activate
        # time -> [capability at it, records at it taken from the input and not yet emitted]
        self.held: dict[Any, list[Any]] = {}
        # The message being submitted: its records, their time, and the next one to submit.
        self.taken: list[Any] = []
        self.taken_time: Any = None
        self.next_taken = 0
        self.calls: deque[_Call] = deque()  # ordered: submitted, not yet emitted, in order
        self.in_flight = 0  # submitted, not yet emitted: what max_in_flight bounds
        self.running = 0  # submitted, not yet collected: what the worker awaits
        self.finished: deque[_Call] = deque()  # appended to by the loop's thread
        self.woken = False
        self.tasks: set[asyncio.Task[None]] = set()  # the loop's thread only
        self.shared: _EventLoop | None = None
        self.failed = False

    # -- the worker's thread ---------------------------------------------------------------

    def logic(self, inp: InputPort, out: OutputPort) -> None:
        """Emit what finished, submit what fits, and let go once the input is exhausted."""
        if self.failed:
            inp.drain_batches()
            return
        self.woken = False  # before draining ``finished``: see the class docstring
        if self.finished:
            self._collect(out)
        if self.in_flight < self.max_in_flight:
            self._submit(inp)
        if (
            not self.in_flight
            and self.next_taken >= len(self.taken)
            and not inp.queue
            and inp.frontier.is_empty()
        ):
            self._finish()

    def _collect(self, out: OutputPort) -> None:
        """Take the finished calls: raise the first error; emit the results (``ordered``:
        those no unfinished call precedes)."""
        finished = self.finished
        ordered = self.ordered
        collected = 0
        try:
            while finished:
                call = finished.popleft()
                collected += 1
                self.running -= 1
                if call.error is not None:
                    self._fail(call)
                if ordered:
                    call.collected = True
                else:
                    self._emit(call, out)
        finally:
            self.worker.expect_from_threads(-collected)
        if ordered:
            calls = self.calls
            while calls and calls[0].collected:
                self._emit(calls.popleft(), out)

    def _emit(self, call: _Call, out: OutputPort) -> None:
        t = call.time
        entry = self.held[t]
        out.give(entry[0], call.result)
        self.in_flight -= 1
        entry[1] -= 1
        if not entry[1]:
            del self.held[t]
            entry[0].drop()

    def _submit(self, inp: InputPort) -> None:
        """Submit records until ``max_in_flight`` are in flight, taking messages from the
        input one at a time (retaining a capability at each message's time)."""
        room = self.max_in_flight - self.in_flight
        batch, i, t = self.taken, self.next_taken, self.taken_time
        new: list[_Call] = []
        while room > 0:
            if i >= len(batch):
                got = inp.next()
                if got is None:
                    break
                ref, batch = got
                i = 0
                n = len(batch)
                if not n:
                    continue
                t = ref.time
                entry = self.held.get(t)
                if entry is None:
                    self.held[t] = [ref.retain(), n]
                else:
                    entry[1] += n
                if type(batch) is not list:
                    batch = list(batch)
            take = min(room, len(batch) - i)
            new.extend(_Call(t, r) for r in batch[i : i + take])
            i += take
            room -= take
        if i >= len(batch):
            batch, i = [], 0  # keep no finished message alive
        self.taken, self.next_taken, self.taken_time = batch, i, t
        if new:
            self._start(new)

    def _start(self, calls: list[_Call]) -> None:
        shared = self.shared
        if shared is None:
            shared = self.shared = _acquire_loop(self.worker)
        n = len(calls)
        self.in_flight += n
        self.running += n
        if self.ordered:
            self.calls.extend(calls)
        self.worker.expect_from_threads(n)
        shared.loop.call_soon_threadsafe(self._spawn, calls)

    def _fail(self, call: _Call) -> None:
        """Cancel the other calls, let go of the loop, and raise ``call``'s error."""
        self.failed = True
        self.worker.expect_from_threads(-self.running)
        self.running = 0
        shared, self.shared = self.shared, None
        if shared is not None:
            shared.loop.call_soon_threadsafe(self._cancel)
            _release_loop(self.worker, shared)
        exc = call.error
        assert exc is not None
        at = f"on record {_short(call.record)} at time {call.time!r}"
        if call.timed_out:
            what = f"timed out after {self.timeout:g} s {at}"
        else:
            what = f"raised {type(exc).__name__}: {exc} {at}"
        raise OperatorError(
            f"map_async {self.name!r}: function {describe_function(self.fn)} {what}",
            self.name,
            self.address,
        ) from exc

    def _finish(self) -> None:
        """The input is exhausted and nothing is outstanding: hold nothing, free the loop."""
        for cap, _n in self.held.values():
            cap.drop()
        self.held.clear()
        shared, self.shared = self.shared, None
        if shared is not None:
            _release_loop(self.worker, shared)

    # -- the loop's thread -----------------------------------------------------------------

    def _spawn(self, calls: list[_Call]) -> None:
        create = asyncio.get_running_loop().create_task
        tasks = self.tasks
        for call in calls:
            task = create(self._run(call))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    async def _run(self, call: _Call) -> None:
        timeout = self.timeout
        try:
            awaitable = self.fn(call.record)
            if not inspect.isawaitable(awaitable):
                raise TypeError(
                    f"it returned {type(awaitable).__name__}, not an awaitable "
                    "(map_async needs an async def function)"
                )
            if timeout is None:
                call.result = await awaitable
            else:
                deadline = asyncio.timeout(timeout)
                try:
                    async with deadline:
                        call.result = await awaitable
                finally:
                    call.timed_out = deadline.expired()
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # cancelled by us (a call failed) or the loop stopping: nobody waits
            call.error = asyncio.CancelledError("the call was cancelled")
        except BaseException as exc:  # reported to the worker, which raises it
            call.error = exc
        self.finished.append(call)
        if not self.woken:
            self.woken = True
            self.worker.call_soon_threadsafe(self.activate)

    def _cancel(self) -> None:
        for task in list(self.tasks):
            task.cancel()


def _short(record: Any) -> str:
    """``repr(record)``, cut to :data:`RECORD_REPR` characters."""
    text = repr(record)
    return text if len(text) <= RECORD_REPR else text[: RECORD_REPR - 3] + "..."


class _EventLoop:
    """An asyncio event loop running in a daemon thread of its own, shared by the
    ``map_async`` operators of one worker (``users`` counts them)."""

    __slots__ = ("loop", "thread", "users", "finalizer")

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.users = 0
        self.finalizer: Any = None
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            try:
                tasks = asyncio.all_tasks(loop)  # what a function left behind
                for task in tasks:
                    task.cancel()
                if tasks:
                    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    def stop(self, wait: bool = True) -> None:
        """Stop the loop (its leftover tasks are cancelled) and, with ``wait``, join its
        thread."""
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:  # closed already
            return
        if wait and self.thread is not threading.current_thread():
            self.thread.join(STOP_TIMEOUT)
            if self.thread.is_alive():
                _log.warning(
                    "%s: the event loop did not stop within %g s", self.thread.name, STOP_TIMEOUT
                )


# One loop per worker, while some map_async operator of that worker needs it.
_loops: weakref.WeakKeyDictionary[Any, _EventLoop] = weakref.WeakKeyDictionary()
_loops_lock = threading.Lock()  # workers of one process may run on several threads


def _acquire_loop(worker: WorkerServices) -> _EventLoop:
    """The event loop of ``worker`` (started if it has none), with one more user."""
    with _loops_lock:
        shared = _loops.get(worker)
        if shared is None:
            shared = _loops[worker] = _EventLoop(f"pytimely-async-w{worker.index}")
            # A worker dropped while an operator still used its loop stops it (not waiting).
            shared.finalizer = weakref.finalize(worker, shared.stop, False)
        shared.users += 1
    return shared


def _release_loop(worker: WorkerServices, shared: _EventLoop) -> None:
    """One user less of ``shared``; the last one stops it and joins its thread."""
    with _loops_lock:
        shared.users -= 1
        if shared.users:
            return
        if _loops.get(worker) is shared:
            del _loops[worker]
    shared.finalizer.detach()
    shared.stop()
