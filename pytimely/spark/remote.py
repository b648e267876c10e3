"""Placing pytimely workers from a Spark Connect session: DataFrames only, no driver server.

A Spark Connect client (``SparkSession.builder.remote("sc://host:15002")``: Spark 4's connect
mode, Databricks serverless and shared clusters) has no ``SparkContext``: no RDD API, no
``_jsc``, and the executors cannot connect back to the client.  So :func:`run` does without
all three:

* the workers are the N tasks of ``spark.range(N, numPartitions=N).mapInArrow(task,
  barrier=True)``: a barrier stage through the DataFrame API.  Task ``i`` becomes worker ``i``
  (:func:`remote_task`): it checks the Python version and the pytimely code against the
  client's (the fingerprint travels in :class:`RemoteSpec`), the workers exchange their mesh
  addresses with one ``BarrierTaskContext.allGather`` as in a classic run, build the TCP mesh
  and run ``fn(worker)``;
* a worker's result comes back as an Arrow row ``(worker, cloud-pickled result)`` of the
  stage; a worker's failure fails its task with the worker's Python traceback and a marked
  report, which :func:`run` turns into a :class:`~pytimely.errors.WorkerFailure` naming the
  worker (its peers learn it over the mesh and fail too, and Spark aborts the stage);
* files the sinks write are staged per attempt (:mod:`pytimely.spark.staging`); each worker's
  row names the output directories it staged files in, and when every worker has finished the
  client commits the attempt's files (and discards earlier attempts') with a one-task job
  (:func:`commit_task`): on the executors' file system, which the client may not see.  (A
  second ``allGather`` for this would cost every run a second: barrier calls poll once a
  second.);
* ``timeout`` and Ctrl-C interrupt the job through its operation tag
  (``spark.addTag`` / ``spark.interruptTag``); ``attempts=k`` submits the stage again after a
  worker failure.

:func:`~pytimely.spark.run_on_dataframe` passes its prepared DataFrame as the stage's input:
each worker reads its own partition, as on the classic path.

What a Connect session cannot give: the slot check of a cluster before submitting (Spark's own
barrier check then refuses a stage with too few slots, after its retries; a ``local[N]``
server's slots are known from its master URL), and the driver-side control connection (a
worker cannot tell that the client died: the server's session timeout ends it), which the
streaming bridge needs.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from ..errors import WorkerFailure
from .errors import NotEnoughSlots, SparkJobFailed, SparkSetupError
from .reasons import failed_task, parse_marker, report_head, retryable, spark_reason

__all__ = ["RemoteSpec", "RemoteStage", "check_versions", "remote_task", "run"]

#: How long a worker stopped by another's failure waits before failing its own task.
RELAY_DELAY = 1.0
#: The stage's rows: the worker's index, its cloud-pickled result and the output directories
#: its sinks staged files in (a JSON list).
RESULT_SCHEMA = "worker long, payload binary, outputs string"


@dataclass(frozen=True)
class RemoteSpec:
    """What a worker task of a Connect run needs (pickled into the task's function)."""

    workers: int
    secret: bytes
    bind_host: str
    connect_timeout: float
    python: tuple[int, int]
    run_id: str
    fingerprint: str
    package: str
    #: Attempt ids of this run that failed before: the commit discards what they staged.
    earlier: tuple[str, ...] = ()
    dashboard: int | None = None
    #: Whether the sinks' files are staged until every worker finished (a run's), or written
    #: in place (a streaming bridge's: an epoch's files are visible when it completes).
    stage_outputs: bool = True


def remote_task(
    spec: RemoteSpec, fn: Callable[[Any, Iterator[Any]], Any], batches: Iterator[Any]
) -> Iterator[Any]:
    """Be worker ``i`` of a Connect run inside barrier task ``i``: ``fn(worker, batches)``
    with the task's input partition (Arrow batches); yields the result row."""
    import pyarrow as pa
    from pyspark import BarrierTaskContext

    from ..execute import run_worker
    from ..worker import Worker
    from .executor import (
        check_same_package,
        check_same_python,
        drain_input,
        join_mesh,
        pickle_result,
        task_failed,
        task_report,
    )
    from .staging import staged

    ctx = BarrierTaskContext.get()
    index = ctx.partitionId()
    allocator = None
    directories: list[str] = []
    try:
        check_same_python(
            spec.python, index, "the client", "the server's executors need the client's version"
        )
        check_same_package(spec, index)
        allocator = join_mesh(ctx, spec)
        worker = Worker(allocator)
        if spec.stage_outputs:
            with staged(spec.run_id, directories.append):
                result = run_worker(lambda w: fn(w, batches), worker, dashboard=spec.dashboard)
        else:
            result = run_worker(lambda w: fn(w, batches), worker, dashboard=spec.dashboard)
        payload = pickle_result(index, result)
        allocator.close()
        drain_input(batches)  # so that Spark reuses this Python worker
    except BaseException as exc:
        report = task_report(index, exc)
        if allocator is not None:
            allocator.close(error=report["summary"])
        if report.get("relayed"):
            # Spark reports the first task to fail, with its traceback: let the worker that
            # failed first (it raises at once) be that task, rather than this relay of it.
            time.sleep(RELAY_DELAY)
        raise task_failed(report, whole=True) from exc
    yield pa.RecordBatch.from_pylist(
        [{"worker": index, "payload": payload, "outputs": json.dumps(directories)}],
        schema=pa.schema(
            [("worker", pa.int64()), ("payload", pa.binary()), ("outputs", pa.string())]
        ),
    )


def commit_task(
    batches: Iterator[Any], directories: list[str], attempt: str, earlier: tuple[str, ...]
) -> Iterator[Any]:
    """On an executor, whose file system the outputs are on (the client may not see it): move
    ``attempt``'s staged files into place and remove what the ``earlier`` attempts staged."""
    import pyarrow as pa

    from .executor import drain_input
    from .staging import commit, discard

    drain_input(batches)  # so that Spark reuses this Python worker
    moved = 0
    for directory in directories:
        moved += commit(directory, attempt)
        for old in earlier:
            discard(directory, old)
    yield pa.RecordBatch.from_pylist([{"moved": moved}], schema=pa.schema([("moved", pa.int64())]))


def check_versions(server: str, client: str) -> None:
    """Refuse a Spark Connect server of another Spark major.minor than this client's pyspark:
    the workers' functions are pickled by the client's pyspark and run by the server's.

    >>> check_versions("4.3.0", "4.3.1")
    >>> check_versions("3.5.1", "4.3.0")
    Traceback (most recent call last):
    ...
    pytimely.spark.errors.SparkSetupError: the Spark Connect server runs Spark 3.5.1 and this ...
    """
    if server.split(".")[:2] != client.split(".")[:2]:
        raise SparkSetupError(
            f"the Spark Connect server runs Spark {server} and this client pyspark {client}: "
            "the workers' code is pickled by the client and run by the server's Python, which "
            f"needs the same major.minor: pip install 'pyspark[connect]=={server}'"
        )


def _master_of(spark: Any) -> str:
    """The server's master URL, or ``""`` when it does not say."""
    try:
        return spark.conf.get("spark.master") or ""
    except Exception:  # noqa: BLE001 - a server that hides its master: assume a cluster
        return ""


def _check_local_slots(master: str, workers: int, needed: int) -> None:
    """On a server over a ``local`` master the slots are known from its URL: fewer than
    ``needed`` for ``workers`` workers is an error now, not after the barrier check's retries
    (minutes)."""
    from .session import local_slots

    try:
        slots = local_slots(master)
    except ValueError:  # a local master URL we cannot read: Spark will check
        return
    if slots is not None and slots < needed:
        extra = needed - workers
        beside = f" + {extra} for Spark jobs that run alongside them" if extra else ""
        raise NotEnoughSlots(
            f"{workers} pytimely workers{beside} need {needed} concurrent task slots, but the "
            f"Spark Connect server runs local[{slots}]: start it with --master local[{needed}] "
            "or more (over-subscribing cores is fine)"
        )


def prepare(
    spark: Any,
    workers: int,
    secret: bytes | str | None,
    bind_host: str | None,
    connect_timeout: float,
    slots: int,
) -> RemoteSpec:
    """Check the server (its Spark version against this client's pyspark, and ``slots``
    concurrent task slots on a ``local`` master) and make the spec of a first attempt."""
    import pyspark

    from .executor import run_secret
    from .session import default_bind_host, package_fingerprint, package_location

    check_versions(spark.version, pyspark.__version__)
    master = _master_of(spark)
    _check_local_slots(master, workers, slots)
    return RemoteSpec(
        workers=workers,
        secret=run_secret(secret),
        bind_host=bind_host if bind_host is not None else default_bind_host(master),
        connect_timeout=connect_timeout,
        python=(sys.version_info[0], sys.version_info[1]),
        run_id=uuid.uuid4().hex[:12],
        fingerprint=package_fingerprint(),
        package=package_location(),
    )


def run(
    spark: Any,
    fn: Callable[[Any, Iterator[Any]], Any],
    workers: int,
    *,
    stage_input: Callable[[int], Any] | None = None,
    secret: bytes | str | None = None,
    timeout: float | None = None,
    connect_timeout: float = 60.0,
    bind_host: str | None = None,
    attempts: int = 1,
    description: str = "pytimely workers",
    dashboard: int | None = None,
    start_timeout: float | None = None,
    grace: float | None = None,
) -> list[Any]:
    """:func:`pytimely.spark.run` on a Spark Connect session (module docstring):
    ``fn(worker, batches)`` on every worker, ``batches`` the Arrow batches of the worker's
    partition of ``stage_input(workers)`` (a DataFrame of exactly ``workers`` partitions;
    default: ``workers`` empty rows, one per partition).  ``start_timeout`` and ``grace`` are
    accepted for the classic path's sake and unused: there is no control connection here."""
    if workers < 1:
        raise ValueError("need at least one worker")
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    spec = prepare(spark, workers, secret, bind_host, connect_timeout, slots=workers)
    earlier: list[str] = []
    notes: list[str] = []
    for attempt in range(attempts):
        spec = replace(
            spec, run_id=uuid.uuid4().hex[:12], earlier=tuple(earlier), dashboard=dashboard
        )
        try:
            return _attempt(spark, spec, fn, stage_input, timeout, description)
        except (WorkerFailure, SparkJobFailed) as exc:
            if attempt + 1 == attempts or not retryable(exc):
                for note in notes:
                    exc.add_note(note)
                raise
            notes.append(f"attempt {attempt + 1} of {attempts} failed: {str(exc).splitlines()[0]}")
            earlier.append(spec.run_id)
    raise AssertionError("unreachable")


class RemoteStage:
    """The workers' barrier stage of one submission, collected on a thread of its own (tags
    are the calling thread's, and the caller must stay free to time it out or interrupt it).

    :meth:`join` waits for it, :meth:`interrupt` stops it through its operation tag, and
    :meth:`results` gives the rows' results in worker order or raises the failure
    (:func:`_failure`).
    """

    def __init__(
        self,
        spark: Any,
        spec: RemoteSpec,
        fn: Callable[[Any, Iterator[Any]], Any],
        stage_input: Callable[[int], Any] | None,
        what: str,
    ) -> None:
        n = spec.workers
        self.spark = spark
        self.spec = spec
        self.tag = f"pytimely-{spec.run_id}"

        def task(batches: Iterator[Any]) -> Iterator[Any]:
            yield from remote_task(spec, fn, batches)  # the task's index is the worker's

        source = stage_input(n) if stage_input is not None else spark.range(n, numPartitions=n)
        stage = source.mapInArrow(task, RESULT_SCHEMA, barrier=True)
        self._outcome: dict[str, Any] = {}

        def job() -> None:
            spark.addTag(self.tag)
            try:
                self._outcome["rows"] = stage.collect()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                self._outcome["error"] = exc
            finally:
                spark.removeTag(self.tag)

        self.started = time.monotonic()
        self._thread = threading.Thread(target=job, name=f"pytimely-{what}", daemon=True)
        self._thread.start()

    def join(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds for the stage to end; whether it ended."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def running(self) -> bool:
        """Whether the stage is still running."""
        return self._thread.is_alive()

    def interrupt(self) -> None:
        """Stop the stage's job (its tasks are killed) and wait for its thread."""
        _interrupt(self.spark, self.tag, self._thread)

    def rows(self) -> list[Any]:
        """The stage's result rows once it ended; its failure raised as :func:`_failure` says."""
        if "error" in self._outcome:
            raise _failure(self._outcome["error"], self.spec.workers) from None
        return self._outcome["rows"]

    def results(self) -> list[Any]:
        """Every worker's unpickled result, in worker order."""
        import pickle

        n = self.spec.workers
        rows = self.rows()
        found = {int(row["worker"]): pickle.loads(row["payload"]) for row in rows}
        missing = [i for i in range(n) if i not in found]
        if missing:
            raise SparkJobFailed(f"the job ended without results from workers {missing}")
        return [found[i] for i in range(n)]


def _attempt(
    spark: Any,
    spec: RemoteSpec,
    fn: Callable[[Any, Iterator[Any]], Any],
    stage_input: Callable[[int], Any] | None,
    timeout: float | None,
    what: str,
) -> list[Any]:
    """One submission of the stage; the results in worker order, or the failure raised."""
    stage = RemoteStage(spark, spec, fn, stage_input, what)
    try:
        ended = stage.join(timeout)
    except BaseException:  # Ctrl-C: stop the workers, then let the interrupt go on
        stage.interrupt()
        raise
    if not ended:
        stage.interrupt()
        raise SparkJobFailed(
            f"the run did not finish within its {timeout:g} s timeout (interrupted after "
            f"{time.monotonic() - stage.started:.1f} s)",
            retryable=False,
        )
    results = stage.results()
    outputs = sorted({d for row in stage.rows() for d in json.loads(row["outputs"])})
    if outputs:  # every worker succeeded: the attempt's files go into place
        done = spark.range(1, numPartitions=1).mapInArrow(
            lambda batches: commit_task(batches, outputs, spec.run_id, spec.earlier), "moved long"
        )
        done.collect()
    return results


def _interrupt(spark: Any, tag: str, thread: threading.Thread) -> None:
    try:
        spark.interruptTag(tag)
    finally:
        thread.join(30.0)


def _failure(error: BaseException, workers: int) -> BaseException:
    """The exception to raise for the stage's failure ``error`` (module docstring)."""
    text = str(error)
    # A Connect error's text is Spark's message, then "JVM stacktrace:" and the frames.
    message, _sep, jvm = text.partition("\nJVM stacktrace:\n")
    reason, frames = spark_reason(RuntimeError(message.replace(" SQLSTATE: 38000", "")))
    frames = "\n".join(part for part in (frames, jvm) if part)
    report = parse_marker(text)
    if report is not None and report.get("setup"):
        return SparkSetupError(report["summary"].split(": ", 1)[-1], jvm_frames=frames)
    if report is not None:
        origin = report.get("origin", report.get("worker"))
        head = report_head(report)
        # The whole report travels in the task's message: Spark Connect shows only the last
        # exception of the task's chain, so the worker's own traceback is in the report.
        detail = report.get("traceback") or f"Spark's report of the task:\n{reason}"
        failure = WorkerFailure(
            f"{head}\n\nworker {report['worker']}'s traceback:\n{detail.rstrip()}", worker=origin
        )
        failure.spark_error = error  # type: ignore[attr-defined]
        failure.jvm_frames = frames  # type: ignore[attr-defined]
        return failure
    return SparkJobFailed(
        f"the Spark job running the {workers} pytimely workers failed: {reason}",
        worker=failed_task(reason),
        jvm_frames=frames,
    )
