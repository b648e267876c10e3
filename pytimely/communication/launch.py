"""Starting workers: N local processes joined by a mesh, or one process of a hand-made cluster.

:func:`run_processes` is the local launcher.  It forks ``processes`` children; child ``i`` builds
worker ``i``'s :class:`.tcp.TcpAllocator` (binding an ephemeral loopback port and learning the
others' through the parent, :class:`.rendezvous.PipeRendezvous`), runs ``body(allocator)`` and
sends the result back over its pipe.  The parent supervises: it returns the results in worker
order, or — as soon as one worker raises or dies, ``kill -9`` included — lets the others notice
(their allocators raise :class:`~pytimely.errors.WorkerFailure` within moments), terminates any
that are still running after a grace period, and raises ``WorkerFailure`` naming the worker that
failed first, with its traceback.  Nothing waits without a deadline.  When every worker that
did not finish raised :class:`~pytimely.errors.StuckError` (they reached the same verdict: the
run cannot complete), the parent raises that StuckError instead.  When ``timeout`` expires, the
parent first asks each unfinished worker what it is doing (:mod:`.diagnosis`) and the error shows
it.

The fork start method is used (on Linux) so that ``body`` may be any closure: nothing needs to
be pickled on the way in.  Results travel back pickled.  Each child asks the kernel to kill it if
the launcher dies, so no orphans outlive an interrupted run.

:func:`parse_args` reads timely's command-line flags and :func:`connect_from_config` builds the
allocator of one process of a cluster started by hand, each process with its own ``-p``::

    python prog.py -n 3 -p 0 -h hosts.txt      # on each host, p = 0, 1, 2
    PYTIMELY_SECRET=... (or --secret ...)       # the same secret everywhere

``-w`` (workers per process) deserves a word.  Rust timely runs ``w`` worker threads per
process; with Python's global interpreter lock threads would not run in parallel, so pytimely
runs exactly one worker per process.  ``-w k`` alone (no ``-n``) therefore means "k worker
processes on this machine" (:attr:`Config.mode` ``"local"``: start them with
:func:`run_processes`); ``-w k`` with ``-n > 1`` is refused with a message saying how many
processes to start instead, rather than silently changing the meaning of the host file.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from ..errors import ConfigError, StuckError, WorkerFailure, failure_report
from . import diagnosis
from .allocator import Allocator, ThreadAllocator
from .rendezvous import Address, PipeRendezvous, StaticRendezvous, read_hostfile
from .tcp import TcpAllocator

__all__ = [
    "DEFAULT_BASE_PORT",
    "FLAGS_HELP",
    "Config",
    "ConfigError",
    "connect_from_config",
    "parse_args",
    "run_processes",
]

#: Without a host file, process ``i`` listens on 127.0.0.1 at this port plus ``i`` (as timely).
DEFAULT_BASE_PORT = 2101
SECRET_ENV = "PYTIMELY_SECRET"


# --- configuration ----------------------------------------------------------------------------


@dataclass
class Config:
    """Where this process sits among the workers (the result of :func:`parse_args`)."""

    workers: int = 1
    """Worker processes to run locally (``-w``); more than 1 only when ``processes == 1``."""
    processes: int = 1
    """Processes in the cluster (``-n``)."""
    process: int = 0
    """This process' index in the cluster (``-p``)."""
    hostfile: str | None = None
    """Host file (``-h``): line ``i`` is ``host:port`` of process ``i``."""
    secret: bytes | None = None
    """Shared secret (``--secret`` or the ``PYTIMELY_SECRET`` environment variable)."""
    timeout: float = 30.0
    """Seconds to wait for the other processes to connect (``--connect-timeout``)."""
    free: list[str] = field(default_factory=list)
    """Arguments that are not ours, in order (for the program's own use)."""

    @property
    def mode(self) -> str:
        """``"thread"`` (one worker), ``"local"`` (``workers`` local processes, to be started
        with :func:`run_processes`) or ``"cluster"`` (this is process ``process`` of
        ``processes``)."""
        if self.processes > 1:
            return "cluster"
        return "local" if self.workers > 1 else "thread"

    def addresses(self) -> list[Address]:
        """Every process' address: from the host file, else ``127.0.0.1:2101+i``."""
        if self.hostfile is not None:
            try:
                return read_hostfile(self.hostfile, self.processes)
            except (OSError, ValueError) as exc:
                raise ConfigError(str(exc)) from exc
        return [("127.0.0.1", DEFAULT_BASE_PORT + i) for i in range(self.processes)]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would print and exit the interpreter
        raise ConfigError(f"bad pytimely flags: {message}")


FLAGS_HELP = """\
timely flags:
  -w, --workers N        run N worker processes on this machine (default 1)
  -n, --processes N      number of processes of a cluster started by hand (default 1)
  -p, --process I        this process' index in that cluster (default 0)
  -h, --hostfile FILE    one host:port per process (-h is the host file, as in timely)
  --secret TEXT          shared secret of the worker mesh (default: $PYTIMELY_SECRET)
  --connect-timeout S    seconds to wait for the other processes (default 30)
  --help                 show this help and exit"""


def parse_args(
    argv: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    usage: str | None = None,
) -> Config:
    """Read timely's flags from ``argv`` (default ``sys.argv[1:]``); other words go to
    :attr:`Config.free`.

    ``-w/--workers/--threads N``, ``-n/--processes N``, ``-p/--process I``,
    ``-h/--hostfile FILE``, ``--secret TEXT`` (default: ``$PYTIMELY_SECRET``),
    ``--connect-timeout SECONDS``.  Note that ``-h`` is the host file, as in timely, not help.
    ``--help`` prints ``usage`` (default: the running program's docstring) and the flags above
    to stdout and exits with status 0, as argparse does.
    """
    words = list(sys.argv[1:] if argv is None else argv)
    if "--help" in words:
        _print_help(usage)
        raise SystemExit(0)
    parser = _Parser(prog="pytimely", add_help=False, allow_abbrev=False)
    parser.add_argument("-w", "--workers", "--threads", type=int, default=1)
    parser.add_argument("-n", "--processes", type=int, default=1)
    parser.add_argument("-p", "--process", type=int, default=0)
    parser.add_argument("-h", "--hostfile", default=None)
    parser.add_argument("--secret", default=None)
    parser.add_argument("--connect-timeout", type=float, default=30.0)
    args, free = parser.parse_known_args(words)
    environ = os.environ if environ is None else environ
    secret_text = args.secret if args.secret is not None else environ.get(SECRET_ENV)
    config = Config(
        workers=args.workers,
        processes=args.processes,
        process=args.process,
        hostfile=args.hostfile,
        secret=None if not secret_text else secret_text.encode("utf-8"),
        timeout=args.connect_timeout,
        free=free,
    )
    if config.workers < 1 or config.processes < 1:
        raise ConfigError("-w and -n must be at least 1")
    if not 0 <= config.process < config.processes:
        raise ConfigError(f"-p {config.process} is not a process index for -n {config.processes}")
    if config.workers > 1 and config.processes > 1:
        total = config.workers * config.processes
        raise ConfigError(
            f"pytimely runs one worker per process (Python threads do not run in parallel), so "
            f"-w {config.workers} cannot be combined with -n {config.processes}: start {total} "
            f"processes with -n {total} (and a host file of {total} lines) instead"
        )
    if config.timeout <= 0:
        raise ConfigError("--connect-timeout must be positive")
    return config


def _print_help(usage: str | None) -> None:
    if usage is None:
        usage = getattr(sys.modules.get("__main__"), "__doc__", None) or ""
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "program"
    text = usage.strip() or f"usage: {prog} [ARGS] [timely flags]"
    print(f"{text}\n\n{FLAGS_HELP}")


def connect_from_config(config: Config) -> Allocator:
    """The allocator of this process: a :class:`ThreadAllocator` for a single worker, or this
    process' :class:`TcpAllocator` in a cluster (connecting to the other processes, which may
    start in any order within ``config.timeout`` seconds)."""
    mode = config.mode
    if mode == "thread":
        return ThreadAllocator()
    if mode == "local":
        raise ConfigError(
            f"-w {config.workers} runs {config.workers} worker processes on this machine; start "
            "them with run_processes() (or pytimely.execute_from_args); connect_from_config "
            "builds the allocator of one process of a cluster (-n/-p)"
        )
    if not config.secret:
        raise ConfigError(
            f"a cluster needs a shared secret: pass --secret or set {SECRET_ENV} (the same "
            "value in every process)"
        )
    rendezvous = StaticRendezvous(config.addresses(), config.secret)
    return TcpAllocator(config.process, config.processes, rendezvous, timeout=config.timeout)


# --- the local launcher -----------------------------------------------------------------------


_log = logging.getLogger(__name__)


def run_processes(
    body: Callable[[Allocator], Any],
    processes: int,
    secret: bytes | None = None,
    timeout: float | None = None,
    *,
    connect_timeout: float = 30.0,
    grace: float = 5.0,
    linger: float = 5.0,
    heartbeat_timeout: float | None = None,
    summarize: Callable[[Any], str] | None = None,
) -> list[Any]:
    """Run ``body(allocator)`` in ``processes`` new processes (worker ``i`` in process ``i``)
    joined by a TCP mesh, and return their results in worker order.

    If a worker raises or dies, the others see :class:`~pytimely.errors.WorkerFailure`; those
    still running ``grace`` seconds later are terminated, and this raises ``WorkerFailure``
    naming the worker that failed first, with its traceback (``.outcomes`` maps every worker to
    what became of it).  ``timeout`` bounds the whole run (``None``: no limit).  ``secret``
    authenticates the connections (random when not given).  ``heartbeat_timeout`` is passed to
    every :class:`TcpAllocator`: a worker silent that long is named as failed.

    A worker still running when ``timeout`` expires is asked for its main thread's stack before
    it is terminated (:mod:`.diagnosis`; ``summarize(frame)`` may add a one-line account of
    it), and the ``WorkerFailure`` shows, per unfinished worker, what it was doing.
    """
    if processes < 1:
        raise ValueError("run_processes needs at least one process")
    if secret is None:
        secret = os.urandom(32)
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    context = multiprocessing.get_context(method)
    launcher = os.getpid()
    children: list[_Child] = []
    reports = tempfile.mkdtemp(prefix="pytimely-workers-")
    try:
        for i in range(processes):
            parent_end, child_end = context.Pipe(duplex=True)
            inherited = [c.conn for c in children] + [parent_end]
            asked, ask = os.pipe()
            diagnose = (asked, os.path.join(reports, f"worker-{i}.txt"), summarize)
            inherited_asks = [c.ask for c in children] + [ask]
            process = context.Process(
                target=_worker_main,
                name=f"pytimely-worker-{i}",
                args=(
                    i,
                    processes,
                    secret,
                    child_end,
                    inherited,
                    body,
                    connect_timeout,
                    linger,
                    launcher,
                    heartbeat_timeout,
                    diagnose,
                    inherited_asks,
                ),
            )
            process.start()
            child_end.close()
            os.close(asked)
            child = _Child(i, process, parent_end)
            child.ask, child.report_path = ask, diagnose[1]
            children.append(child)
        return _supervise(children, timeout, connect_timeout, grace)
    finally:
        _stop_all([c.process for c in children])
        for child in children:
            child.conn.close()
            os.close(child.ask)
        shutil.rmtree(reports, ignore_errors=True)


class _Child:
    __slots__ = (
        "address",
        "ask",
        "conn",
        "conn_open",
        "detail",
        "index",
        "order",
        "origin",
        "outcome",
        "process",
        "report_path",
        "result",
        "stuck",
        "summary",
    )

    def __init__(self, index: int, process: Any, conn: Connection) -> None:
        self.index = index
        self.process = process
        self.conn = conn
        self.conn_open = True
        self.address: Address | None = None
        self.outcome: str | None = None  # ok | raised | failure | died | terminated
        self.result: Any = None
        self.origin: int | None = None  # for "failure": the worker it blames
        self.summary = ""
        self.detail = ""
        self.order: int | None = None  # when its failure was noticed, relative to others
        self.stuck = False  # it raised StuckError (the run as a whole could not finish)
        self.ask = -1  # write end of the pipe on which we ask it what it is doing
        self.report_path = ""  # where it answers (see .diagnosis)


def _supervise(
    children: list[_Child], timeout: float | None, connect_timeout: float, grace: float
) -> list[Any]:
    start = time.monotonic()
    deadline = None if timeout is None else start + timeout
    # Children time out on their own; this only catches one that never got as far as binding.
    rendezvous_deadline = start + connect_timeout + 10.0
    addresses_sent = len(children) == 1  # a lone worker needs no rendezvous
    failed_at: float | None = None
    timed_out = False
    sequence = itertools.count()
    while True:
        pending = [c for c in children if c.outcome is None]
        if not pending:
            break
        limits = [deadline, None if failed_at is None else failed_at + grace]
        limits = [t for t in limits if t is not None]
        if not addresses_sent:
            limits.append(rendezvous_deadline)
        now = time.monotonic()
        handles: list[Any] = [c.conn for c in pending if c.conn_open]
        handles += [c.process.sentinel for c in pending]
        ready = set(wait(handles, max(0.0, min(limits) - now) if limits else None))
        for child in pending:
            if child.conn_open and child.conn in ready:
                _drain(child)
            if child.outcome is None and child.process.sentinel in ready:
                _drain(child)  # its last report may still be in the pipe
                if child.outcome is None:
                    child.process.join(1.0)
                    child.outcome = "died"
                    child.detail = child.summary = _describe_exit(child.process.exitcode)
        for child in children:
            if child.outcome in ("raised", "failure", "died") and child.order is None:
                child.order = next(sequence)
                if failed_at is None:
                    failed_at = time.monotonic()
        if not addresses_sent and all(c.address is not None for c in children):
            addresses = [c.address for c in children]
            for child in children:
                if child.outcome is None and child.conn_open:
                    try:
                        child.conn.send(("addresses", addresses))
                    except OSError:
                        pass  # it died; its sentinel will say so
            addresses_sent = True
        now = time.monotonic()
        stop_reason = None
        blamed = {c.origin for c in children if c.outcome == "failure"}
        still_running = [c.index for c in children if c.outcome is None]
        if still_running and blamed.issuperset(still_running):
            # Every worker still running is one its peers have named as failed (e.g. it is
            # stopped, and stopped sending heartbeats): no grace period will change that.
            stop_reason = "named as failed by the other workers while still running; terminated"
        elif failed_at is not None and now >= failed_at + grace:
            stop_reason = f"still running {grace:g} s after another worker failed; terminated"
        elif deadline is not None and now >= deadline:
            timed_out = True
            stop_reason = f"still running when the {timeout:g} s timeout expired; terminated"
        elif not addresses_sent and now >= rendezvous_deadline:
            for child in children:
                if child.outcome is None and child.address is None:
                    child.outcome = "raised"
                    child.order = next(sequence)
                    child.detail = child.summary = (
                        f"did not start listening within {connect_timeout + 10:g} s"
                    )
            stop_reason = "terminated because another worker did not start"
        if stop_reason is not None:
            stragglers = [c for c in children if c.outcome is None]
            doing = _ask_what_they_are_doing(stragglers) if timed_out else {}
            _stop_all([c.process for c in stragglers])
            for child in stragglers:
                _drain(child)
                if child.outcome is None:
                    child.outcome = "terminated"
                    child.detail = child.summary = stop_reason
                    if doing.get(child.index):
                        child.detail = f"{stop_reason}; it was doing this:\n{doing[child.index]}"
                        child.summary = f"{stop_reason}; {doing[child.index].splitlines()[0]}"
    deadline = time.monotonic() + 2.0
    for child in children:  # they have all reported; let them exit, then make sure
        child.process.join(max(0.0, deadline - time.monotonic()))
    _stop_all([c.process for c in children])
    if all(c.outcome == "ok" for c in children):
        return [c.result for c in children]
    raise _failure(children, timed_out, timeout)


def _ask_what_they_are_doing(children: list[_Child]) -> dict[int, str]:
    """Each child's main-thread stack (and its own one-line summary first), within a second."""
    for child in children:
        diagnosis.request(child.ask)
    deadline = time.monotonic() + 1.0
    return {
        c.index: diagnosis.collect(c.process.pid, c.report_path, deadline)
        for c in children
        if c.process.pid is not None
    }


def _drain(child: _Child) -> None:
    """Read every report waiting in ``child``'s pipe."""
    try:
        while child.conn_open and child.conn.poll():
            message = child.conn.recv()
            kind = message[0]
            if kind == "address":
                child.address = message[2]
            elif child.outcome is not None:
                continue
            elif kind == "ok":
                child.outcome = "ok"
                child.result = message[1]
            elif kind == "error":
                report = message[1]
                child.outcome = "failure" if report["relayed"] else "raised"
                child.origin = report["origin"]
                child.summary = report["blame"]
                child.detail = report["traceback"]
                child.stuck = report.get("stuck", False)
    except (EOFError, OSError):
        child.conn_open = False
    except Exception as exc:  # noqa: BLE001 - the result could not be unpickled here
        child.conn_open = False
        if child.outcome is None:
            child.outcome = "raised"
            child.detail = child.summary = f"its result could not be received: {exc!r}"


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "the process vanished"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the process was killed by {name}"
    return f"the process exited with code {code} without reporting a result"


def _stop_all(processes: list[Any]) -> None:
    """Stop every process still alive: SIGTERM, a second's grace, then SIGKILL."""
    alive = [p for p in processes if p.is_alive()]
    for process in alive:
        process.terminate()
    deadline = time.monotonic() + 1.0
    for process in alive:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in alive:
        if process.is_alive():
            process.kill()
            process.join(1.0)
        else:
            process.join(0)


def _failure(
    children: list[_Child], timed_out: bool, timeout: float | None
) -> WorkerFailure | StuckError:
    """The exception for a failed run: it names the worker that failed first.  When every
    worker that did not finish raised :class:`StuckError` (they all reached the same verdict),
    the run is stuck, not failed: that StuckError, with ``.outcomes`` too."""
    unfinished = [c for c in children if c.outcome != "ok"]
    if unfinished and all(c.outcome == "raised" and c.stuck for c in unfinished):
        first = min(unfinished, key=lambda c: c.order or 0)
        stuck = StuckError(first.summary.removeprefix("StuckError: "))
        stuck.outcomes = {  # type: ignore[attr-defined]
            c.index: "finished" if c.outcome == "ok" else "raised StuckError" for c in children
        }
        return stuck
    direct = sorted(
        (c for c in children if c.outcome in ("raised", "died")), key=lambda c: c.order or 0
    )
    relayed = sorted((c for c in children if c.outcome == "failure"), key=lambda c: c.order or 0)
    worker: int | None
    if direct:
        worker = direct[0].index
        head = f"worker {worker} failed: {direct[0].detail.rstrip()}"
    elif relayed:
        worker = relayed[0].origin
        head = f"{relayed[0].summary} (reported by worker {relayed[0].index})"
    elif timed_out:
        late = [c for c in children if c.outcome == "terminated"]
        worker = late[0].index if len(late) == 1 else None
        head = (
            f"workers {[c.index for c in late]} did not finish within the {timeout:g} s timeout"
            + "".join(f"\nworker {c.index} {c.detail}" for c in late)
        )
    else:
        worker = None
        head = "the workers did not finish"
    outcomes = {}
    for c in children:
        if c.outcome == "ok":
            outcomes[c.index] = "finished"
        elif c.outcome == "failure":
            outcomes[c.index] = f"stopped by WorkerFailure: {c.summary}"
        else:
            last = c.summary.strip().splitlines()
            outcomes[c.index] = f"{c.outcome}: {last[-1] if last else ''}"
    lines = "\n".join(f"  worker {i}: {text}" for i, text in sorted(outcomes.items()))
    error = WorkerFailure(f"{head}\nall workers:\n{lines}", worker=worker)
    _log.error("worker failure: %s", error)
    error.outcomes = outcomes  # type: ignore[attr-defined]
    return error


# --- the child side ---------------------------------------------------------------------------


def _whole_lines(stream: Any) -> None:
    """Make ``stream`` write each line in one piece.  The worker processes share the parent's
    terminal or pipe; unbuffered (``python -u``, ``PYTHONUNBUFFERED``), ``print`` writes its
    text and its newline separately, and the lines of workers printing at once run into each
    other.  Line buffering hands the whole line to the system in one write."""
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is None:  # replaced by the program: its business
        return
    try:
        reconfigure(line_buffering=True, write_through=False)
    except (ValueError, OSError):  # closed, or not a text stream after all
        pass


def _worker_main(
    index: int,
    processes: int,
    secret: bytes,
    conn: Connection,
    inherited: list[Connection],
    body: Callable[[Allocator], Any],
    connect_timeout: float,
    linger: float,
    launcher: int,
    heartbeat_timeout: float | None = None,
    diagnose: tuple[int, str, Callable[[Any], str] | None] | None = None,
    inherited_asks: Sequence[int] = (),
) -> None:
    _whole_lines(sys.stdout)
    _whole_lines(sys.stderr)
    for other in inherited:  # the parent's ends of the pipes, inherited through fork
        other.close()
    for fd in inherited_asks:  # likewise the parent's ends of the diagnosis pipes
        os.close(fd)
    _die_with_parent(launcher)
    if diagnose is not None:
        diagnosis.serve(*diagnose)
    allocator: TcpAllocator | None = None
    try:
        rendezvous = PipeRendezvous(conn, secret, timeout=connect_timeout)
        allocator = TcpAllocator(
            index,
            processes,
            rendezvous,
            timeout=connect_timeout,
            linger=linger,
            heartbeat_timeout=heartbeat_timeout,
        )
        result = body(allocator)
    except BaseException as exc:  # noqa: BLE001 - every way out is reported to the parent
        report = failure_report(index, exc)
        _send_quietly(conn, ("error", report))  # the parent first: it starts the grace period
        if allocator is not None:
            allocator.close(error=report["blame"])
        raise SystemExit(1) from None
    allocator.close()
    try:
        conn.send(("ok", result))
    except Exception as exc:  # noqa: BLE001 - e.g. an unpicklable result
        _send_quietly(conn, ("error", failure_report(index, exc, "its result could not be sent: ")))
        raise SystemExit(1) from None


def _send_quietly(conn: Connection, message: Any) -> None:
    try:
        conn.send(message)
    except Exception:  # noqa: BLE001, S110 - the parent is gone or the report unpicklable
        pass


def _die_with_parent(launcher: int) -> None:
    """Ask Linux to SIGKILL this process when the launcher dies (no orphaned workers)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001  # pragma: no cover - no libc / prctl
        return
    if os.getppid() != launcher:  # the launcher died before we asked
        os._exit(1)
