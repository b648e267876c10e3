"""Starting workers: ``example``, ``execute``, ``execute_from_args``, and ``args``.

``execute(fn, workers=N)`` runs ``fn(worker)`` on ``N`` workers and returns their results in
worker order.  One worker runs in the calling thread; several run one per OS process (the GIL
makes threads useless for compute), connected by an authenticated TCP mesh.  When ``fn``
returns, the worker closes the inputs it created (as dropping handles does in timely) and steps
until all its dataflows have completed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .worker import Worker, activity

if TYPE_CHECKING:
    from .dataflow.scope import Scope

T = TypeVar("T")

__all__ = ["args", "example", "execute", "execute_from_args", "run_worker"]


def run_worker(fn: Callable[[Worker], Any], worker: Worker, dashboard: int | None = None) -> Any:
    """Run ``fn(worker)``, then close its inputs and finish its dataflows.  ``dashboard``: a
    port on which worker 0 serves a live dashboard (:func:`pytimely.serve_dashboard`), which
    shows the error if the run fails; with several workers, every worker must be given it:
    they send their figures to worker 0 (:func:`pytimely.dashboard.share_figures`)."""
    if dashboard is None:
        return _run(fn, worker)
    from .dashboard import serve_dashboard, share_figures

    board = serve_dashboard(worker, port=dashboard) if worker.index == 0 else None
    stop_sharing = share_figures(worker, board) if worker.peers > 1 else None
    try:
        result = _run(fn, worker)
    except Exception as exc:
        if board is not None:
            board.report_error(exc)
        raise
    finally:
        if stop_sharing is not None:
            stop_sharing()
    if board is not None:
        board.publish()
    return result


def _run(fn: Callable[[Worker], Any], worker: Worker) -> Any:
    result = fn(worker)
    worker.close_inputs()
    worker.run()
    return result


def example(fn: Callable[[Scope], T], timestamp: Any = int) -> T:
    """Build one dataflow with ``fn(scope)`` on a single worker and run it to completion."""
    worker = Worker()
    result = worker.dataflow(fn, timestamp=timestamp)
    worker.close_inputs()
    worker.run()
    return result


def execute(
    fn: Callable[[Worker], T],
    workers: int = 1,
    processes: int | None = None,
    secret: bytes | None = None,
    timeout: float | None = None,
    stuck_after: float | None = None,
    heartbeat_timeout: float | None = None,
    dashboard: int | None = None,
    max_in_flight: int | None = None,
) -> list[T]:
    """Run ``fn(worker)`` on ``workers`` workers; returns their results in worker order.

    ``workers == 1`` runs in this thread.  More workers run as that many local processes
    (``processes`` may be given as an alias).  A failure in any worker stops all of them and
    raises :class:`~pytimely.errors.WorkerFailure` naming it.

    Beware of *when* results are taken: after ``fn`` returns, the worker closes the inputs
    ``fn`` left open and steps until all its dataflows complete, and only then hands back (or,
    from a worker process, pickles) what ``fn`` returned.  So return the object that collects
    the output -- a :class:`~pytimely.CaptureHandle`, a list an ``inspect`` appends to -- and
    read it afterwards: ``execute(fn)[0].extract()``.  A value computed inside ``fn`` before
    the dataflows ran (``return captured.extract()``, ``return list(seen)``) is a snapshot taken
    too early and is typically empty; if ``fn`` must compute its result itself, let it call
    ``worker.run()`` (or step until a probe is done) first.

    A run that cannot finish raises :class:`~pytimely.errors.StuckError` naming what holds the
    frontier on every worker, ``stuck_after`` seconds (default 2) after every worker went idle.
    A worker process that sends nothing for ``heartbeat_timeout`` seconds (default 20, or
    ``$PYTIMELY_HEARTBEAT_TIMEOUT``) — stopped, deadlocked — is a ``WorkerFailure`` naming it.

    ``max_in_flight``: bytes of data a worker may have sent to a peer and not yet seen consumed
    before its inputs wait for that peer (default 64 MB, or ``$PYTIMELY_MAX_IN_FLIGHT``; see
    :mod:`pytimely.communication.flow`).

    ``dashboard=PORT`` serves a live dashboard of worker 0 on ``http://127.0.0.1:PORT/`` (see
    :func:`pytimely.serve_dashboard`); with one worker it keeps showing the final state, or the
    error that stopped the run, until the process exits.
    """
    n = processes if processes is not None else workers
    if n < 1:
        raise ValueError("execute(): need at least one worker")
    if n == 1:
        return [run_worker(fn, Worker(max_in_flight=max_in_flight), dashboard)]
    from .communication.launch import run_processes

    def body(allocator: Any) -> Any:
        worker = Worker(allocator, stuck_after=stuck_after, max_in_flight=max_in_flight)
        return run_worker(fn, worker, dashboard)

    return run_processes(
        body,
        n,
        secret=secret,
        timeout=timeout,
        heartbeat_timeout=heartbeat_timeout,
        summarize=activity,
    )


def execute_from_args(fn: Callable[[Worker], Any], argv: Sequence[str] | None = None) -> list[Any]:
    """Like :func:`execute`, configured by timely's flags: ``-w/--workers`` (worker processes on
    this machine), ``-n/--processes`` and ``-p/--process`` (this process' place in a cluster
    started by hand), ``-h/--hostfile`` (one ``host:port`` per process), ``--secret`` (or
    ``PYTIMELY_SECRET``).  Other words are left for the program (``sys.argv`` is not changed).

    In a cluster (``-n N -p I``) the result is ``[fn(worker)]`` for this process only.  The
    program's own words are :func:`args`.
    """
    from .communication.launch import connect_from_config, parse_args

    config = parse_args(argv)
    if config.mode == "cluster":
        allocator = connect_from_config(config)
        try:
            result = run_worker(fn, Worker(allocator))
        except BaseException as exc:
            allocator.close(error=f"worker {config.process}: {type(exc).__name__}: {exc}")
            raise
        allocator.close()
        return [result]
    return execute(fn, workers=config.workers, secret=config.secret)


def args(argv: Sequence[str] | None = None) -> list[str]:
    """The program's own command-line words: ``argv`` (default ``sys.argv[1:]``) without
    timely's flags, which :func:`execute_from_args` reads, in their order.

    ``--help`` prints the running program's docstring followed by timely's flags, and exits
    with status 0 (note that ``-h`` is timely's host file flag, not help).  So a program reads
    its arguments with ``pt.args()`` and starts its workers with ``pt.execute_from_args(fn)``:

    >>> import pytimely as pt
    >>> pt.args(["100", "-w", "2", "--secret", "s3cret", "words.txt"])
    ['100', 'words.txt']
    """
    from .communication.launch import parse_args

    return parse_args(argv).free
