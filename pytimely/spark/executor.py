"""The executor side of a Spark run: what a barrier task does to become pytimely worker ``i``.

:func:`worker_task` runs inside task ``i`` of the barrier stage that :mod:`.launcher` submits
from the driver.  It

1. checks that this executor runs the driver's Python version and pytimely code (a package
   fingerprint, see :func:`pytimely.spark.session.package_fingerprint`);
2. connects to the driver's control server (:class:`._control.ControlClient`) and says hello;
3. binds its mesh listener, and the workers exchange addresses **once** with
   ``BarrierTaskContext.allGather`` (:class:`~pytimely.communication.GatherRendezvous`; the
   shared secret was generated on the driver and travels in :class:`TaskSpec`);
4. builds the :class:`~pytimely.communication.TcpAllocator` mesh and runs the worker body,
   with the sinks staging their files for the driver to commit
   (:mod:`pytimely.spark.staging`);
5. reports ``done`` and returns its (cloud-pickled) result; or, on failure, reports ``error``
   (summary and traceback) *before* the task fails, so that the driver learns the real cause
   first, and raises with the report marked in the message for when the control connection
   could not deliver it.

If the control connection to the driver breaks, the task interrupts itself: no task outlives
its driver.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import failure_report
from .errors import SparkJobFailed, SparkSetupError
from .session import package_fingerprint, package_location

__all__ = [
    "MARK_CLOSE",
    "MARK_OPEN",
    "TaskFailed",
    "TaskInbox",
    "TaskSpec",
    "check_lost",
    "check_same_package",
    "check_same_python",
    "join_mesh",
    "pickle_result",
    "portable",
    "result_row",
    "run_secret",
    "task_failed",
    "task_report",
    "worker_placement",
    "worker_task",
]

#: The markers around a failing worker's report in its task's exception message.
MARK_OPEN = "<<pytimely-failure "
MARK_CLOSE = " pytimely-failure>>"


# --- what travels to the tasks ----------------------------------------------------------------


@dataclass(frozen=True)
class TaskSpec:
    """Everything a worker task needs to join the run (pickled into the task closure)."""

    workers: int
    secret: bytes
    coordinator: tuple[str, int]
    bind_host: str
    connect_timeout: float
    python: tuple[int, int]
    run_id: str
    #: :func:`~pytimely.spark.session.package_fingerprint` and location of the driver's pytimely.
    fingerprint: str = ""
    package: str = ""
    #: Stage the sinks' files for the driver to commit when the run succeeds
    #: (:mod:`pytimely.spark.staging`); False for the streaming bridge, whose epochs must
    #: appear as they complete.
    stage_outputs: bool = True


def task_report(index: int, exc: BaseException) -> dict[str, Any]:
    """What a worker tells the driver about the exception that ended it: the shared
    :func:`~pytimely.errors.failure_report`, plus whether it is a setup error (not retried)."""
    report = failure_report(index, exc)
    report["setup"] = isinstance(exc, SparkSetupError)
    return report


class TaskFailed(RuntimeError):
    """Raised by a failing worker task; its message carries the report for the driver (used
    when the control connection could not deliver it)."""


def task_failed(report: dict[str, Any], whole: bool = False) -> TaskFailed:
    """The exception a failing worker task raises: its ``report`` between the markers, briefly
    (the traceback travels over the control connection, or in the exception's chain), or
    ``whole`` (with the traceback: Spark Connect shows only the last exception of a chain)."""
    keys = ("worker", "origin", "relayed", "setup", "summary")
    shown = report if whole else {k: report[k] for k in keys}
    return TaskFailed(f"{MARK_OPEN}{json.dumps(shown)}{MARK_CLOSE}")


def run_secret(secret: bytes | str | None) -> bytes:
    """The secret of a run's connections: ``secret``, else ``PYTIMELY_SECRET``, else 32 random
    bytes."""
    if secret is None:
        env = os.environ.get("PYTIMELY_SECRET")
        return env.encode() if env else os.urandom(32)
    return secret.encode() if isinstance(secret, str) else secret


def check_same_python(python: tuple[int, int], index: int, whose: str, fix: str) -> None:
    """Refuse to be worker ``index`` on another Python minor version than ``python``, that of
    ``whose`` (the driver, or a Connect client) -- pickled closures would not load."""
    if sys.version_info[:2] != tuple(python):
        raise SparkSetupError(
            f"worker {index} runs Python {sys.version_info[0]}.{sys.version_info[1]}, {whose} "
            f"{python[0]}.{python[1]}: {fix}"
        )


class TaskInbox:
    """Messages for a worker task from its side threads (control, feeds), and a way to wake the
    worker when one arrives.  ``wake`` is bound once the worker's allocator exists."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[Any] = []
        self.wake: Callable[[], None] = lambda: None

    def put(self, item: Any) -> None:
        """Queue ``item`` for the worker (from any thread) and wake it."""
        with self._lock:
            self._items.append(item)
        self.wake()

    def take(self) -> list[Any]:
        """Everything queued so far, in order, leaving the inbox empty (the worker's side)."""
        with self._lock:
            items, self._items = self._items, []
        return items


def worker_task(
    spec: TaskSpec,
    body: Callable[[Any, Any, TaskInbox], Any],
    items: Iterable[Any],
) -> tuple[int, Any]:
    """Run one worker inside a barrier task: control connection, mesh, ``body(worker, control,
    inbox)``; then read what ``body`` left of the task's input ``items``
    (:func:`drain_input`).  Returns ``(index, result)``; on failure reports to the driver and
    raises."""
    from pyspark import BarrierTaskContext

    from ..worker import Worker
    from ._control import ControlClient
    from .staging import staged

    ctx = BarrierTaskContext.get()
    index = ctx.partitionId()
    check_same_python(
        spec.python, index, "the driver", "set PYSPARK_PYTHON to the same interpreter"
    )
    finished = threading.Event()
    task_thread = threading.get_ident()
    inbox = TaskInbox()

    def lost(reason: str) -> None:
        # The driver is gone or gave up: stop this task rather than linger as an orphan.
        if finished.is_set():
            return
        inbox.put(("lost", reason))
        try:
            if task_thread == threading.main_thread().ident:
                signal.pthread_kill(task_thread, signal.SIGINT)
        except (OSError, ValueError):
            pass

        def last_resort() -> None:
            if not finished.wait(15.0):
                os._exit(1)

        threading.Thread(target=last_resort, daemon=True, name="pytimely-watchdog").start()

    control = ControlClient(
        spec.coordinator,
        spec.secret,
        index,
        on_message=inbox.put,
        on_lost=lost,
        timeout=spec.connect_timeout,
    )
    allocator = None
    try:
        check_same_package(spec, index)
        control.send(
            (
                "hello",
                {
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "attempt": ctx.attemptNumber(),
                    "task": ctx.taskAttemptId(),
                },
            )
        )
        allocator = join_mesh(ctx, spec)
        inbox.wake = allocator.wake
        worker = Worker(allocator)
        if spec.stage_outputs:
            with staged(spec.run_id, lambda directory: control.send(("output", directory))):
                result = body(worker, control, inbox)
        else:
            result = body(worker, control, inbox)
        payload = pickle_result(index, result)
        allocator.close()
        drain_input(items)  # so that Spark reuses this Python worker
        control.send(("done", {"steps": worker.steps}))
        return index, payload
    except BaseException as exc:
        report = task_report(index, exc)
        control.send(("error", report))
        if allocator is not None:
            allocator.close(error=report["summary"])
        raise task_failed(report) from exc
    finally:
        finished.set()
        control.close()


class MeshSpec(Protocol):
    """What :func:`join_mesh` reads of a task's spec (:class:`TaskSpec`, or Connect's)."""

    workers: int
    secret: bytes
    bind_host: str
    connect_timeout: float


def drain_input(items: Iterable[Any]) -> None:
    """Read what is left of a task's input (rows, Arrow batches) before the task returns.

    A Python worker whose task left input unread cannot read Spark's end-of-task signal after
    it, so it exits instead of going back to Spark's pool of reusable workers; the next task
    then pays for a new process and its imports (about 0.2 s of CPU for pyarrow and pytimely,
    taken from the JVM feeding the other workers).  A worker of :func:`pytimely.spark.run`
    never reads its one-row partition, so every run lost all its Python workers.

    >>> rows = iter([1, 2, 3])
    >>> drain_input(rows)
    >>> next(rows, "empty")
    'empty'
    """
    for _ in items:
        pass


def advertised_host(ctx: Any, index: int, bind_host: str) -> str:
    """The address peers reach barrier task ``index``'s listener at: ``bind_host``, or, bound
    to every interface, the executor's host as Spark knows it."""
    if bind_host in ("0.0.0.0", "::", ""):
        return ctx.getTaskInfos()[index].address.rsplit(":", 1)[0].strip("[]")
    return bind_host


def join_mesh(ctx: Any, spec: MeshSpec) -> Any:
    """This barrier task's worker's TCP mesh: bind, exchange addresses with the other tasks in
    one ``allGather`` (advertising the executor's host when bound to every interface), connect.
    """
    from ..communication.rendezvous import GatherRendezvous
    from ..communication.tcp import TcpAllocator

    index = ctx.partitionId()
    advertise = advertised_host(ctx, index, spec.bind_host)
    rendezvous = GatherRendezvous(
        ctx.allGather, spec.secret, host=advertise, bind_host=spec.bind_host
    )
    return TcpAllocator(index, spec.workers, rendezvous, timeout=spec.connect_timeout)


class PackageSpec(Protocol):
    """What :func:`check_same_package` reads of a task's spec (:class:`TaskSpec`, or
    Connect's): the driver's package fingerprint and location."""

    fingerprint: str
    package: str


def check_same_package(spec: PackageSpec, index: int) -> None:
    """Refuse to run another pytimely than the driver's: the driver's closures and the
    executor's package would disagree in ways no error message could explain."""
    if spec.fingerprint and package_fingerprint() != spec.fingerprint:
        raise SparkSetupError(
            f"worker {index} imports pytimely from {package_location()}, whose code differs from "
            f"the driver's ({spec.package}): ship the driver's package with "
            "pytimely.spark.ship_package(spark) (pytimely.spark.connect does it) or install the "
            "same pytimely on the executors"
        )


def check_lost(inbox_items: list[Any]) -> None:
    """Raise :class:`SparkJobFailed` if the inbox says the driver's connection was lost."""
    for item in inbox_items:
        if item and item[0] == "lost":
            raise SparkJobFailed(item[1])


def portable(result: Any) -> Any:
    """Streams (and lists/tuples of them) stand for "nothing to return": they become None."""
    from ..dataflow.stream import Stream

    if isinstance(result, Stream):
        return None
    if isinstance(result, (list, tuple)) and result and all(isinstance(r, Stream) for r in result):
        return None
    return result


def pickle_result(index: int, result: Any) -> bytes:
    """Worker ``index``'s result, cloud-pickled for the driver (a stream becomes None); an
    unpicklable result is a ``TypeError`` that says what to return instead."""
    from pyspark import cloudpickle

    try:
        return cloudpickle.dumps(portable(result))
    except Exception as exc:
        raise TypeError(
            f"worker {index}'s result cannot be sent to the driver ({exc}); return plain data "
            "(lists, dicts, numbers, strings, Arrow tables), not handles of the dataflow"
        ) from exc


def result_row(index: int, payload: bytes) -> tuple[int, bytes]:
    """The row a classic worker task yields: its index and its pickled result."""
    return index, payload


def worker_placement() -> dict[str, Any]:
    """Where the calling pytimely worker runs (inside its Spark barrier task): its process id
    and its executor's address (distinct executors have distinct addresses)."""
    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    return {"pid": os.getpid(), "executor": ctx.getTaskInfos()[ctx.partitionId()].address}
