"""Placing pytimely workers on Spark: one barrier stage, one long-running task per worker.

:func:`run` submits ``sc.parallelize(range(N), N).barrier().mapPartitionsWithIndex(task)``.
Spark gang-schedules the N tasks of a barrier stage (all start together or none does); task
``i`` becomes worker ``i``:

1. it connects to the driver's control server (:class:`._control.Coordinator`) and says hello;
2. it binds its mesh listener, and the workers exchange addresses **once** with
   ``BarrierTaskContext.allGather`` (:class:`~pytimely.communication.GatherRendezvous`; the
   shared secret was generated on the driver and travels in the task closure);
3. it builds the :class:`~pytimely.communication.TcpAllocator` mesh and runs the worker body
   (``run_worker(fn, Worker(allocator))`` for :func:`run`);
4. it reports ``done`` and yields its (cloud-pickled) result, which the driver collects.

Barrier primitives cost at least a second each (the JVM polls once a second), so they are used
for that bootstrap only; progress and data travel over the mesh.

The job runs on a driver thread under its own job group.  The calling thread supervises: when a
worker reports a failure over the control connection, the others learn it from the mesh (they
raise :class:`~pytimely.errors.WorkerFailure` naming the culprit) and their tasks fail too;
Spark aborts the barrier ResultStage (it is never retried: a failed barrier *ResultStage* aborts
the job), and :func:`run` raises ``WorkerFailure`` naming the worker that failed first, with its
message and traceback.  If the job has not ended ``grace`` seconds after the failure, or on
timeout, ``KeyboardInterrupt`` or any other error in the caller, the job group is cancelled
(Spark kills the tasks' Python processes about two seconds later), and a worker whose control
connection to the driver breaks interrupts itself.  ``attempts > 1`` resubmits the whole stage
after a failure (every worker restarts from scratch).

Before anything is submitted, :func:`check_deployable` fails fast when the cluster has fewer
task slots than workers (Spark itself would retry for up to ten minutes by default) or when
dynamic allocation is on (barrier stages refuse it).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import TimelyError, WorkerFailure
from .session import SparkSetupError, _same_python

__all__ = [
    "NotEnoughSlots",
    "SparkJobFailed",
    "available_slots",
    "check_deployable",
    "run",
    "run_to_dataframe",
]

_MARK_OPEN = "<<pytimely-failure "
_MARK_CLOSE = " pytimely-failure>>"


class NotEnoughSlots(SparkSetupError):
    """The cluster has fewer task slots than the run needs (workers, plus room for other jobs)."""


class SparkJobFailed(TimelyError):
    """The Spark job hosting the workers failed for a reason no worker reported (cancelled,
    executor lost, barrier sync timeout, ...)."""


# --- checks ----------------------------------------------------------------------------------


def _spark_context(spark: Any) -> Any:
    try:
        return spark.sparkContext
    except Exception as exc:
        raise SparkSetupError(
            "pytimely needs a classic SparkSession with a SparkContext (barrier stages are not "
            f"available through Spark Connect): {exc}"
        ) from exc


def _parse_local_master(master: str) -> int | None:
    if master == "local":
        return 1
    for prefix in ("local[", "local-cluster["):
        if master.startswith(prefix) and master.endswith("]"):
            inner = master[len(prefix) : -1].split(",")
            if prefix == "local[":
                first = inner[0].strip()
                return os.cpu_count() or 1 if first == "*" else int(first)
            return int(inner[0]) * int(inner[1])
    return None


def available_slots(sc: Any) -> int | None:
    """How many tasks the cluster can run at once (what Spark's barrier check counts)."""
    try:
        jsc = sc._jsc.sc()
        profile = jsc.resourceProfileManager().defaultResourceProfile()
        return int(jsc.maxNumConcurrentTasks(profile))
    except Exception:  # noqa: BLE001 - fall back to the master URL
        try:
            slots = _parse_local_master(sc.master)
        except ValueError:
            return None
        if slots is None:
            return None
        cpus = int(sc.getConf().get("spark.task.cpus", "1"))
        return slots // max(cpus, 1)


def check_deployable(
    sc: Any, workers: int, extra_slots: int = 0, slot_wait: float | None = None
) -> None:
    """Raise a clear :class:`SparkSetupError` if ``workers`` barrier tasks (plus
    ``extra_slots`` for concurrent jobs) cannot run on ``sc``'s cluster.

    On a cluster manager (not ``local``), executors may still be registering: the slot count is
    polled for up to ``slot_wait`` seconds (default 60) before giving up.
    """
    if workers < 1:
        raise ValueError("need at least one worker")
    conf = sc.getConf()
    master = sc.master or ""
    local = master.startswith("local")
    if (
        not local
        and conf.get("spark.dynamicAllocation.enabled", "false").strip().lower() == "true"
    ):
        raise SparkSetupError(
            "Spark's dynamic allocation is enabled (spark.dynamicAllocation.enabled=true), and "
            "barrier stages cannot run with it (SPARK-24942): Spark could hand the stage fewer "
            "executors than it has workers.  Submit with --conf "
            "spark.dynamicAllocation.enabled=false and enough executors (--num-executors x "
            f"--executor-cores >= {workers + extra_slots})"
        )
    if local and not _same_python(sc.pythonExec):
        raise SparkSetupError(
            f"Spark's Python workers run {sc.pythonExec!r}, not this interpreter "
            f"({sys.executable}): set PYSPARK_PYTHON={sys.executable} before the SparkSession "
            "is created (pytimely.spark.local_session does this)"
        )
    need = workers + extra_slots
    wait = (0.0 if local else 60.0) if slot_wait is None else slot_wait
    deadline = time.monotonic() + wait
    while True:
        slots = available_slots(sc)
        if slots is None or slots >= need:
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    cpus = conf.get("spark.task.cpus", "1")
    extra = f" + {extra_slots} for Spark jobs that run alongside them" if extra_slots else ""
    hint = (
        f"start Spark with local[{need}] or more (over-subscribing cores is fine), e.g. "
        f"pytimely.spark.local_session(cores={need})"
        if local
        else f"give the application at least {need} task slots (executors x executor cores / "
        "spark.task.cpus)"
    )
    raise NotEnoughSlots(
        f"{workers} pytimely workers{extra} need {need} concurrent task slots, but the cluster "
        f"({master}, spark.task.cpus={cpus}) has {slots}: each worker holds a slot for its "
        f"whole life; {hint}"
    )


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


def _report(index: int, exc: BaseException) -> dict[str, Any]:
    """What a worker tells the driver about the exception that ended it."""
    blamed: WorkerFailure | None = None
    link: BaseException | None = exc
    while link is not None:
        if isinstance(link, WorkerFailure) and link.worker is not None and link.worker != index:
            blamed = link
            break
        link = link.__cause__ or link.__context__
    summary = f"{type(exc).__name__}: {exc}"
    return {
        "worker": index,
        "origin": index if blamed is None else blamed.worker,
        "relayed": blamed is not None,
        "summary": summary,
        "traceback": "".join(traceback.format_exception(exc)),
    }


class _TaskFailed(RuntimeError):
    """Raised by a failing worker task; its message carries the report for the driver (used
    when the control connection could not deliver it)."""


def _failed(report: dict[str, Any]) -> _TaskFailed:
    brief = {k: report[k] for k in ("worker", "origin", "relayed", "summary")}
    return _TaskFailed(f"{_MARK_OPEN}{json.dumps(brief)}{_MARK_CLOSE}")


class TaskInbox:
    """Messages for a worker task from its side threads (control, feeds), and a way to wake the
    worker when one arrives.  ``wake`` is bound once the worker's allocator exists."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[Any] = []
        self.wake: Callable[[], None] = lambda: None

    def put(self, item: Any) -> None:
        with self._lock:
            self._items.append(item)
        self.wake()

    def take(self) -> list[Any]:
        with self._lock:
            items, self._items = self._items, []
        return items


def worker_task(
    spec: TaskSpec,
    body: Callable[[Any, Any, TaskInbox], Any],
) -> tuple[int, Any]:
    """Run one worker inside a barrier task: control connection, mesh, ``body(worker, control,
    inbox)``.  Returns ``(index, result)``; on failure reports to the driver and raises."""
    from pyspark import BarrierTaskContext

    from ..communication.rendezvous import GatherRendezvous
    from ..communication.tcp import TcpAllocator
    from ..worker import Worker
    from ._control import ControlClient

    ctx = BarrierTaskContext.get()
    index = ctx.partitionId()
    if sys.version_info[:2] != tuple(spec.python):
        raise SparkSetupError(
            f"worker {index} runs Python {sys.version_info[0]}.{sys.version_info[1]}, the driver "
            f"{spec.python[0]}.{spec.python[1]}: set PYSPARK_PYTHON to the same interpreter"
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
        spec.coordinator, spec.secret, index, on_message=inbox.put, on_lost=lost,
        timeout=spec.connect_timeout,
    )
    allocator = None
    try:
        control.send(("hello", {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "attempt": ctx.attemptNumber(),
            "task": ctx.taskAttemptId(),
        }))
        if spec.bind_host in ("0.0.0.0", "::", ""):
            advertise = ctx.getTaskInfos()[index].address.rsplit(":", 1)[0].strip("[]")
        else:
            advertise = spec.bind_host
        rendezvous = GatherRendezvous(
            ctx.allGather, spec.secret, host=advertise, bind_host=spec.bind_host
        )
        allocator = TcpAllocator(index, spec.workers, rendezvous, timeout=spec.connect_timeout)
        inbox.wake = allocator.wake
        worker = Worker(allocator)
        result = body(worker, control, inbox)
        payload = _pickle_result(index, result)
        allocator.close()
        control.send(("done", {"steps": worker.steps}))
        return index, payload
    except BaseException as exc:
        report = _report(index, exc)
        control.send(("error", report))
        if allocator is not None:
            allocator.close(error=report["summary"])
        raise _failed(report) from exc
    finally:
        finished.set()
        control.close()


def _check_lost(inbox_items: list[Any]) -> None:
    for item in inbox_items:
        if item and item[0] == "lost":
            raise SparkJobFailed(item[1])


# --- the driver side ----------------------------------------------------------------------------


def _portable(result: Any) -> Any:
    """Streams (and lists/tuples of them) stand for "nothing to return": they become None."""
    from ..dataflow.stream import Stream

    if isinstance(result, Stream):
        return None
    if isinstance(result, (list, tuple)) and result and all(isinstance(r, Stream) for r in result):
        return None
    return result


def _pickle_result(index: int, result: Any) -> bytes:
    from pyspark import cloudpickle

    try:
        return cloudpickle.dumps(_portable(result))
    except Exception as exc:
        raise TypeError(
            f"worker {index}'s result cannot be sent to the driver ({exc}); return plain data "
            "(lists, dicts, numbers, strings, Arrow tables), not handles of the dataflow"
        ) from exc


def _result_row(index: int, payload: bytes) -> tuple[int, bytes]:
    return index, payload


def _decode_results(rows: list[Any], workers: int) -> list[Any]:
    import pickle

    found: dict[int, Any] = {}
    for index, payload in rows:
        found[int(index)] = pickle.loads(payload)
    missing = [i for i in range(workers) if i not in found]
    if missing:
        raise SparkJobFailed(f"the job ended without results from workers {missing}")
    return [found[i] for i in range(workers)]


def _parse_marker(text: str) -> dict[str, Any] | None:
    start = text.find(_MARK_OPEN)
    while start >= 0:
        end = text.find(_MARK_CLOSE, start)
        if end < 0:
            return None
        try:
            return json.loads(text[start + len(_MARK_OPEN) : end])
        except ValueError:
            start = text.find(_MARK_OPEN, end)
    return None


def _spark_reason(exc: BaseException) -> str:
    text = str(exc)
    for needle in ("Job aborted due to stage failure: ", "SparkException: "):
        at = text.find(needle)
        if at >= 0:
            text = text[at + len(needle) :]
            break
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("\tat ")]
    return "\n".join(lines[:12])


class Launch:
    """One submission of a barrier stage of workers, supervised from the driver."""

    def __init__(
        self,
        spark: Any,
        workers: int,
        *,
        secret: bytes | None = None,
        bind_host: str | None = None,
        extra_slots: int = 0,
        start_timeout: float | None = 300.0,
        connect_timeout: float = 60.0,
        timeout: float | None = None,
        grace: float = 10.0,
        description: str = "pytimely workers",
        on_message: Callable[[int, Any, Any], None] | None = None,
        slot_wait: float | None = None,
    ) -> None:
        from ._control import Coordinator

        self.spark = spark
        self.sc = _spark_context(spark)
        self.workers = workers
        check_deployable(self.sc, workers, extra_slots, slot_wait)
        if secret is None:
            env = os.environ.get("PYTIMELY_SECRET")
            secret = env.encode() if env else os.urandom(32)
        elif isinstance(secret, str):
            secret = secret.encode()
        self.secret = secret
        master = self.sc.master or ""
        local = master.startswith("local")
        self.bind_host = bind_host or ("127.0.0.1" if local else "0.0.0.0")
        if local:  # executors live in this driver's JVM: everything stays on loopback
            coordinator_bind = driver_host = "127.0.0.1"
        else:
            conf = self.sc.getConf()
            driver_host = conf.get("spark.driver.host", None) or socket.gethostname()
            coordinator_bind = "0.0.0.0"
        self.coordinator = Coordinator(secret, workers, coordinator_bind, driver_host, on_message)
        self.run_id = uuid.uuid4().hex[:12]
        self.group = f"pytimely-{self.run_id}"
        self.description = description
        self.start_timeout = start_timeout
        self.timeout = timeout
        self.grace = grace
        self.spec = TaskSpec(
            workers=workers,
            secret=secret,
            coordinator=self.coordinator.address,
            bind_host=self.bind_host,
            connect_timeout=connect_timeout,
            python=tuple(sys.version_info[:2]),
            run_id=self.run_id,
        )
        self._thread: threading.Thread | None = None
        self._rows: list[Any] | None = None
        self._error: BaseException | None = None
        self._cancelled: str | None = None
        self._started_at = 0.0

    # -- running ---------------------------------------------------------------------------

    def start(self, action: Callable[[], list[Any]]) -> None:
        """Run ``action`` (a Spark action returning the collected rows) on a job thread."""
        sc = self.sc

        def job() -> None:
            try:
                sc.setJobGroup(self.group, self.description, interruptOnCancel=True)
                self._rows = action()
            except BaseException as exc:  # noqa: BLE001 - handed to the supervising thread
                self._error = exc
            finally:
                with self.coordinator.changed:
                    self.coordinator.changed.notify_all()

        self._started_at = time.monotonic()
        self._thread = threading.Thread(target=job, name=f"pytimely-job-{self.run_id}",
                                        daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def cancel(self, reason: str) -> None:
        if self._cancelled is None:
            self._cancelled = reason
        try:
            self.sc.cancelJobGroup(self.group)
        except Exception:  # noqa: BLE001, S110 - the context may already be stopped
            pass

    def check(self) -> None:
        """One supervision step: cancel the job if a worker failed ``grace`` seconds ago, the
        workers did not all start in time, or the run timed out."""
        coord = self.coordinator
        now = time.monotonic()
        if self._cancelled is not None:
            return
        failure = coord.failure
        if failure is not None and now - failure["time"] > self.grace:
            self.cancel(f"still running {self.grace:g} s after worker {failure['origin']} failed")
        elif (
            self.start_timeout is not None
            and len(coord.hellos) < self.workers
            and now - self._started_at > self.start_timeout
        ):
            self.cancel(
                f"only {len(coord.hellos)} of {self.workers} workers started within "
                f"{self.start_timeout:g} s (are other jobs holding the task slots?)"
            )
        elif self.timeout is not None and now - self._started_at > self.timeout:
            self.cancel(f"the run did not finish within its {self.timeout:g} s timeout")

    def wait(self, until: Callable[[], bool] | None = None, timeout: float | None = None) -> bool:
        """Supervise until the job ends (or ``until()`` holds, or ``timeout``); returns whether
        the job has ended."""
        deadline = None if timeout is None else time.monotonic() + timeout
        coord = self.coordinator

        def wake() -> bool:
            return not self.alive() or coord.failure is not None or bool(until and until())

        while self.alive():
            if until is not None and until():
                return False
            if deadline is not None and time.monotonic() >= deadline:
                return False
            self.check()
            if coord.failure is not None and self._thread is not None:
                self._thread.join(0.25)
            else:
                coord.wait(wake, 0.25)
        return True

    def finish(self) -> list[Any]:
        """After the job ended: the results in worker order, or the exception to raise."""
        assert self._thread is not None and not self._thread.is_alive()
        error = self.failure_exception()
        if error is not None:
            raise error
        return _decode_results(self._rows or [], self.workers)

    def failure_exception(self) -> BaseException | None:
        coord = self.coordinator
        report = coord.failure
        spark_error = self._error
        if report is None and spark_error is not None:
            report = _parse_marker(str(spark_error))
        if report is not None:
            return self._worker_failure(report, spark_error)
        if spark_error is not None:
            text = str(spark_error)
            if "BarrierJobSlotsNumberCheckFailed" in text:
                return NotEnoughSlots(
                    f"Spark refused the barrier stage of {self.workers} workers for lack of task "
                    f"slots: {_spark_reason(spark_error)}"
                )
            if "BarrierJobRunWithDynamicAllocationException" in text:
                return SparkSetupError(
                    "barrier stages do not run with dynamic allocation; set "
                    "spark.dynamicAllocation.enabled=false"
                )
            why = self._cancelled or _spark_reason(spark_error)
            return SparkJobFailed(f"the Spark job running the pytimely workers failed: {why}")
        if self._cancelled is not None:
            return SparkJobFailed(f"the run was cancelled: {self._cancelled}")
        return None

    def _worker_failure(self, report: dict[str, Any], cause: BaseException | None) -> WorkerFailure:
        coord = self.coordinator
        origin = report.get("origin")
        if report.get("relayed"):
            head = f"{report['summary']} (reported by worker {report['worker']})"
        else:
            head = f"worker {origin} failed: {report['summary']}"
        lines = []
        errors = {e["worker"]: e for e in coord.errors}
        for i in range(self.workers):
            if i in errors:
                e = errors[i]
                state = "stopped by WorkerFailure" if e.get("relayed") else "raised"
                lines.append(f"  worker {i}: {state}: {e['summary'].splitlines()[0]}")
            elif i in coord.done:
                lines.append(f"  worker {i}: finished")
            elif i in coord.hellos:
                lines.append(f"  worker {i}: stopped by Spark")
            else:
                lines.append(f"  worker {i}: never started")
        detail = report.get("traceback", "")
        text = f"{head}\nall workers:\n" + "\n".join(lines)
        if detail:
            text += f"\n\nworker {report['worker']}'s traceback:\n{detail.rstrip()}"
        failure = WorkerFailure(text, worker=origin)
        failure.outcomes = lines  # type: ignore[attr-defined]
        if cause is not None:
            failure.__cause__ = cause
        return failure

    def close(self) -> None:
        """Cancel the job if it still runs, wait for its thread briefly, close the control
        server (any task still alive then stops itself)."""
        if self.alive():
            self.cancel(self._cancelled or "the driver stopped the run")
            assert self._thread is not None
            self._thread.join(15.0)
        self.coordinator.close()


def _submit(
    launch_args: dict[str, Any],
    spark: Any,
    workers: int,
    build_action: Callable[[Launch], Callable[[], list[Any]]],
    attempts: int,
) -> list[Any]:
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    for attempt in range(attempts):
        launch = Launch(spark, workers, **launch_args)
        try:
            launch.start(build_action(launch))
            launch.wait()
            return launch.finish()
        except WorkerFailure:
            if attempt + 1 == attempts:
                raise
        finally:
            launch.close()
    raise AssertionError("unreachable")


def run(
    spark: Any,
    fn: Callable[[Any], Any],
    workers: int = 2,
    *,
    secret: bytes | str | None = None,
    timeout: float | None = None,
    start_timeout: float | None = 300.0,
    connect_timeout: float = 60.0,
    grace: float = 10.0,
    bind_host: str | None = None,
    attempts: int = 1,
    description: str = "pytimely workers",
) -> list[Any]:
    """Run ``fn(worker)`` on ``workers`` pytimely workers placed by a Spark barrier stage;
    returns the results in worker order (they travel back cloud-pickled).

    As with :func:`pytimely.execute`, when ``fn`` returns the worker closes its inputs and runs
    its dataflows to completion.  ``fn`` is shipped to the executors with cloudpickle: it must
    be defined in an importable module or be a closure/lambda (pickled by value).

    * ``secret`` authenticates the mesh and control connections (default: ``PYTIMELY_SECRET`` or
      32 random bytes; it travels to the executors inside the task, so enable Spark's own RPC
      encryption on untrusted networks).
    * ``bind_host``: where workers listen; default ``127.0.0.1`` for ``local`` masters, else
      ``0.0.0.0`` with each worker advertising its executor's host.
    * ``timeout`` bounds the whole run; ``start_timeout`` bounds how long the N tasks may take
      to start (they wait for free slots); ``grace`` is how long a failed run may take to wind
      down before its job group is cancelled.
    * ``attempts``: how many times to submit the stage when a worker fails (from scratch).

    Raises :class:`~pytimely.errors.WorkerFailure` (naming the worker that failed first, with
    its message and traceback) when a worker fails, :class:`NotEnoughSlots` or
    :class:`~pytimely.spark.session.SparkSetupError` before submitting when the cluster cannot
    host the workers, and :class:`SparkJobFailed` when the job fails otherwise.
    """
    args = {
        "secret": secret, "timeout": timeout, "start_timeout": start_timeout,
        "connect_timeout": connect_timeout, "grace": grace, "bind_host": bind_host,
        "description": description,
    }

    def action(launch: Launch) -> Callable[[], list[Any]]:
        spec = launch.spec
        n = launch.workers

        def body(worker: Any, control: Any, inbox: TaskInbox) -> Any:
            from ..execute import run_worker

            return run_worker(fn, worker)

        def task(index: int, _items: Any) -> Any:
            i, result = worker_task(spec, body)
            yield _result_row(i, result)

        rdd = launch.sc.parallelize(range(n), n).barrier().mapPartitionsWithIndex(task)
        return rdd.collect

    return _submit(args, spark, workers, action, attempts)


def run_to_dataframe(
    spark: Any,
    fn: Callable[[Any], Any],
    workers: int = 2,
    *,
    schema: Any = None,
    **options: Any,
) -> Any:
    """Like :func:`run`, but every worker's ``fn`` returns rows and the result is one
    DataFrame of all of them (worker 0's first).

    A worker may return a list of tuples/dicts/``Row`` s (``schema``: a Spark schema or DDL
    string, or None to infer), a ``pyarrow.Table`` / ``RecordBatch``, or a pandas DataFrame.
    The rows travel through the driver: for large outputs write Parquet from the workers
    (:func:`pytimely.spark.write_parquet`) and read it with ``spark.read.parquet``.
    """
    results = run(spark, fn, workers, **options)
    import pyarrow as pa

    tables: list[Any] = []
    rows: list[Any] = []
    for part in results:
        if part is None:
            continue
        if isinstance(part, pa.RecordBatch):
            tables.append(pa.Table.from_batches([part]))
        elif isinstance(part, pa.Table):
            tables.append(part)
        elif type(part).__name__ == "DataFrame" and hasattr(part, "to_records"):
            tables.append(pa.Table.from_pandas(part, preserve_index=False))
        else:
            rows.extend(part)
    if tables and rows:
        raise TypeError("run_to_dataframe: workers returned both Arrow/pandas tables and rows")
    if tables:
        table = pa.concat_tables(tables, promote_options="default")
        if schema is not None:
            return spark.createDataFrame(table.to_pandas(), schema=schema)
        return spark.createDataFrame(table)
    if schema is None and not rows:
        raise ValueError("run_to_dataframe: no rows to infer a schema from; pass schema=")
    return spark.createDataFrame(rows, schema=schema)
