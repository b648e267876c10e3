"""The driver side of placing pytimely workers on Spark: one barrier stage, one long-running
task per worker.

:func:`run` submits ``sc.parallelize(range(N), N).barrier().mapPartitionsWithIndex(task)``.
Spark gang-schedules the N tasks of a barrier stage (all start together or none does); task
``i`` becomes worker ``i`` by running :func:`.executor.worker_task` (the executor side: control
connection, one ``allGather`` of the mesh addresses, the TCP mesh, the worker body, its
report).  Here, on the driver, :class:`Launch` holds the control server
(:class:`._control.Coordinator`) and supervises one submission; :func:`_submit` retries.

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
connection to the driver breaks interrupts itself.  A worker whose process dies without a word
(killed, crashed, executor lost) is named by the driver, which sees its control connection end.

``attempts > 1`` resubmits the whole stage after any worker failure (every worker restarts from
scratch), but not after a timeout or the caller's interrupt.  The sinks stage their files per
attempt and the driver commits the successful attempt's (:mod:`pytimely.spark.staging`).
Spark's exception stays out of the traceback printed for the error: its JVM frames are the
error's ``jvm_frames`` attribute.

Before anything is submitted, :func:`check_deployable` fails fast when the cluster has fewer
task slots than workers (Spark itself would retry for up to ten minutes by default), when a
standalone master gave the application no executor at all within ten seconds of its start, or
when dynamic allocation is on (barrier stages refuse it).  Executors whose Python differs from
the driver's fail the first task; that is reported as the :class:`SparkSetupError` it is.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..errors import WorkerFailure
from .errors import NotEnoughSlots, SparkJobFailed, SparkSetupError
from .executor import TaskInbox, TaskSpec, result_row, run_secret, worker_task
from .reasons import (
    failed_task,
    parse_marker,
    python_mismatch,
    report_head,
    retryable,
    spark_reason,
)
from .session import (
    _same_python,
    default_bind_host,
    is_connect,
    local_slots,
    package_fingerprint,
    package_location,
)

__all__ = [
    "NotEnoughSlots",
    "SparkJobFailed",
    "available_slots",
    "check_deployable",
    "run",
    "run_to_dataframe",
]

# --- checks ----------------------------------------------------------------------------------


def _spark_context(spark: Any) -> Any:
    if is_connect(spark):
        raise SparkSetupError(
            "this needs a classic SparkSession with a SparkContext (from a Spark Connect "
            "session pytimely.spark.run, run_to_dataframe, run_on_dataframe and the "
            "StreamingBridge take their own path, pytimely.spark.remote)"
        )
    try:
        return spark.sparkContext
    except Exception as exc:
        raise SparkSetupError(f"pytimely needs a SparkSession with a SparkContext: {exc}") from exc


#: How long after its start a standalone application with no executor at all is declared
#: unserved (executors of a master with free workers register within a few seconds).
NO_EXECUTOR_SECONDS = 10.0


def available_slots(sc: Any) -> int | None:
    """How many tasks the cluster can run at once (what Spark's barrier check counts)."""
    try:
        jsc = sc._jsc.sc()
        profile = jsc.resourceProfileManager().defaultResourceProfile()
        return int(jsc.maxNumConcurrentTasks(profile))
    except Exception:  # noqa: BLE001 - fall back to the master URL
        try:
            slots = local_slots(sc.master)
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
    if not local and conf.get("spark.dynamicAllocation.enabled", "false").strip().lower() == "true":
        raise SparkSetupError(
            "Spark's dynamic allocation is enabled (spark.dynamicAllocation.enabled=true), and "
            "barrier stages cannot run with it (SPARK-24942): Spark could hand the stage fewer "
            "executors than it has workers.  Submit with --conf "
            "spark.dynamicAllocation.enabled=false and enough executor cores for "
            f"{workers + extra_slots} tasks (standalone: --total-executor-cores; YARN: "
            "--num-executors x --executor-cores)"
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
    standalone = master.startswith("spark://")
    # A standalone master with no worker able to host an executor never gives the application
    # one; Spark itself only warns ("Initial job has not accepted any resources") and waits.
    # Executors of a master with free workers register within seconds of the context's start.
    started = sc.startTime / 1000.0 if standalone else 0.0
    while True:
        slots = available_slots(sc)
        if slots is None or slots >= need:
            return
        if slots == 0 and standalone and time.time() - started >= NO_EXECUTOR_SECONDS:
            raise NotEnoughSlots(
                f"no executor has registered with this application {NO_EXECUTOR_SECONDS:g} s "
                f"after it started: the master at {master} has no worker with the free cores "
                "and memory it asks for (spark.executor.cores, spark.executor.memory).  Start "
                f"workers with $SPARK_HOME/sbin/start-worker.sh {master}, or ask for less; "
                "the master's web UI (port 8080 by default) lists its workers and what they "
                "have free"
            )
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


def listen_addresses(master: str, conf: Any, bind_host: str | None) -> tuple[str, str, str]:
    """``(workers' bind host, driver's bind host, driver's advertised host)`` for a run.

    ``bind_host`` applies to every listener of the run: the workers' mesh and feed listeners
    and the driver's control server.  Default: loopback for ``local`` masters (the executors
    live in the driver's JVM); otherwise every interface, with the driver advertising
    ``spark.driver.host`` (or its host name) and each worker its executor's host.
    """
    wildcard = ("0.0.0.0", "::", "")
    if bind_host is None:
        bind_host = default_bind_host(master)
    if bind_host not in wildcard:
        return bind_host, bind_host, bind_host
    driver_host = conf.get("spark.driver.host", None) or socket.gethostname()
    return bind_host, bind_host or "0.0.0.0", driver_host


def _decode_results(rows: list[Any], workers: int) -> list[Any]:
    import pickle

    found: dict[int, Any] = {}
    for index, payload in rows:
        found[int(index)] = pickle.loads(payload)
    missing = [i for i in range(workers) if i not in found]
    if missing:
        raise SparkJobFailed(f"the job ended without results from workers {missing}")
    return [found[i] for i in range(workers)]


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
        stage_outputs: bool = True,
    ) -> None:
        from ._control import Coordinator

        self.spark = spark
        self.sc = _spark_context(spark)
        self.workers = workers
        check_deployable(self.sc, workers, extra_slots, slot_wait)
        self.secret = secret = run_secret(secret)
        master = self.sc.master or ""
        self.bind_host, coordinator_bind, driver_host = listen_addresses(
            master, self.sc.getConf(), bind_host
        )
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
            fingerprint=package_fingerprint(),
            package=package_location(),
            run_id=self.run_id,
            stage_outputs=stage_outputs,
        )
        self._thread: threading.Thread | None = None
        self._rows: list[Any] | None = None
        self._error: BaseException | None = None
        self._cancelled: str | None = None
        self._cancel_retryable = True
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
        self._thread = threading.Thread(target=job, name=f"pytimely-job-{self.run_id}", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def cancel(self, reason: str, *, retryable: bool = True) -> None:
        """Cancel the job group; ``retryable=False`` when the run was stopped on purpose (a
        timeout), which ``attempts`` must not resubmit."""
        if self._cancelled is None:
            self._cancelled = reason
            self._cancel_retryable = retryable
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
                f"{self.start_timeout:g} s (are other jobs holding the task slots?)",
                retryable=False,
            )
        elif self.timeout is not None and now - self._started_at > self.timeout:
            self.cancel(
                f"the run did not finish within its {self.timeout:g} s timeout", retryable=False
            )

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
        """What the run's failure is, or None if it succeeded.  A deliberate stop (timeout)
        wins over what the workers reported while being stopped; then a worker's own report
        (over the control connection, or the marker in its task's exception); then Spark's."""
        coord = self.coordinator
        spark_error = self._error
        reason, frames = spark_reason(spark_error) if spark_error is not None else ("", "")
        if self._cancelled is not None and not self._cancel_retryable:
            return SparkJobFailed(
                f"the run was cancelled: {self._cancelled}", jvm_frames=frames, retryable=False
            )
        report = coord.failure
        if report is None and spark_error is not None:
            report = parse_marker(str(spark_error))
        if report is not None and report.get("setup"):
            return SparkSetupError(report["summary"].split(": ", 1)[-1])
        if report is not None:
            return self._worker_failure(report, spark_error, frames)
        if spark_error is not None:
            text = str(spark_error)
            if "BarrierJobSlotsNumberCheckFailed" in text:
                return NotEnoughSlots(
                    f"Spark refused the barrier stage of {self.workers} workers for lack of task "
                    f"slots: {reason}"
                )
            mismatch = python_mismatch(text)
            if mismatch is not None:
                executors, driver = mismatch
                return SparkSetupError(
                    f"the executors run Python {executors} and this driver Python "
                    f"{driver}: PySpark needs the same minor version on both.  The "
                    f"executors' interpreter is PYSPARK_PYTHON ({self.sc.pythonExec}); point it "
                    "(or spark.pyspark.python given to pytimely.spark.connect) at a Python "
                    f"{driver} with pyspark's dependencies, numpy and pyarrow on "
                    "every executor machine",
                    jvm_frames=frames,
                )
            if "BarrierJobRunWithDynamicAllocationException" in text:
                return SparkSetupError(
                    "barrier stages do not run with dynamic allocation; set "
                    "spark.dynamicAllocation.enabled=false"
                )
            why = self._cancelled or reason
            return SparkJobFailed(
                f"the Spark job running the pytimely workers failed: {why}",
                worker=failed_task(reason),
                jvm_frames=frames,
            )
        if self._cancelled is not None:
            return SparkJobFailed(f"the run was cancelled: {self._cancelled}")
        return None

    def _worker_failure(
        self, report: dict[str, Any], spark_error: BaseException | None, jvm_frames: str
    ) -> WorkerFailure:
        coord = self.coordinator
        origin = report.get("origin")
        head = report_head(report)
        lines = []
        errors = {e["worker"]: e for e in coord.errors}
        for i in range(self.workers):
            if i in errors and errors[i].get("lost") and i != origin:
                lines.append(f"  worker {i}: stopped by Spark")
            elif i in errors:
                e = errors[i]
                if e.get("lost"):
                    state = "lost"
                elif e.get("relayed"):
                    state = "stopped by WorkerFailure"
                else:
                    state = "raised"
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
        # Spark's own exception repeats the traceback under hundreds of JVM frames: keep it
        # (and the frames) as attributes instead of chaining it into every printed traceback.
        failure.spark_error = spark_error  # type: ignore[attr-defined]
        failure.jvm_frames = jvm_frames  # type: ignore[attr-defined]
        return failure

    def commit_outputs(self) -> None:
        """Move what the workers staged into their output directories (the run succeeded)."""
        from .staging import commit

        for directory in sorted(self.coordinator.outputs):
            commit(directory, self.run_id)

    def discard_outputs(self) -> None:
        """Remove what the workers of this attempt staged (the attempt failed)."""
        from .staging import discard

        for directory in sorted(self.coordinator.outputs):
            discard(directory, self.run_id)

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
    """Submit the stage up to ``attempts`` times, each attempt from scratch; the files of a
    failed attempt are discarded and those of the successful one committed (see
    :mod:`pytimely.spark.staging`), so the outputs equal those of a clean run."""
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    failed: list[Launch] = []
    earlier: list[str] = []
    for attempt in range(attempts):
        launch = Launch(spark, workers, **launch_args)
        committed = False
        try:
            launch.start(build_action(launch))
            launch.wait()
            results = launch.finish()
            launch.commit_outputs()
            committed = True
            return results
        except (WorkerFailure, SparkJobFailed) as exc:
            if attempt + 1 == attempts or not retryable(exc):
                for note in earlier:
                    exc.add_note(note)
                raise
            earlier.append(
                f"attempt {attempt + 1} of {attempts} failed: {str(exc).splitlines()[0]}"
            )
        finally:
            launch.close()
            if not committed:
                launch.discard_outputs()
                failed.append(launch)
            else:
                # A task of a failed attempt that outlived its cancellation may have written
                # after the discard: sweep once more.
                for old in failed:
                    old.discard_outputs()
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
    dashboard: int | None = None,
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
    * ``attempts``: how many times to submit the stage when a worker fails (from scratch):
      any failure of a worker (its exception, its process or executor killed, its barrier task
      lost) resubmits; a ``timeout`` or the caller's interrupt does not.  Files written with
      :func:`pytimely.spark.write_parquet` / :func:`~pytimely.spark.capture_parquet` are staged
      per attempt and moved into place only when an attempt succeeds, so the outputs equal a
      clean run's.  The error of the last attempt carries notes about the earlier ones.
    * ``dashboard=PORT``: worker 0 serves the live dashboard (:func:`pytimely.serve_dashboard`,
      every worker's figures gathered on it) at ``http://127.0.0.1:PORT/`` of its executor's
      host -- this machine for a ``local`` master -- while the job runs.

    From a Spark Connect session (``SparkSession.builder.remote(...)``) the same call runs
    the workers through the DataFrame API (:mod:`pytimely.spark.remote`): the same results and
    errors, without the slot check before submitting and with ``start_timeout`` and ``grace``
    unused.

    Raises :class:`~pytimely.errors.WorkerFailure` (naming the worker that failed first, with
    its message and traceback; a worker whose process died without a word is named by the
    driver, which saw its control connection end) when a worker fails, :class:`NotEnoughSlots` or
    :class:`~pytimely.spark.session.SparkSetupError` before submitting when the cluster cannot
    host the workers, and :class:`SparkJobFailed` when the job fails otherwise.
    """
    if is_connect(spark):
        from . import remote

        return remote.run(
            spark,
            lambda worker, _partition: fn(worker),
            workers,
            secret=secret,
            timeout=timeout,
            connect_timeout=connect_timeout,
            bind_host=bind_host,
            attempts=attempts,
            description=description,
            dashboard=dashboard,
        )
    args = {
        "secret": secret,
        "timeout": timeout,
        "start_timeout": start_timeout,
        "connect_timeout": connect_timeout,
        "grace": grace,
        "bind_host": bind_host,
        "description": description,
    }

    def action(launch: Launch) -> Callable[[], list[Any]]:
        spec = launch.spec
        n = launch.workers

        def body(worker: Any, control: Any, inbox: TaskInbox) -> Any:
            from ..execute import run_worker

            return run_worker(fn, worker, dashboard=dashboard)

        def task(index: int, items: Any) -> Any:
            i, result = worker_task(spec, body, items)
            yield result_row(i, result)

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
