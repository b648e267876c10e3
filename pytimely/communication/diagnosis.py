"""Asking a worker process what it is doing, from outside: for runs that time out.

When :func:`.launch.run_processes` gives up on a worker it first asks it for its main thread's
Python stack, so that the error says *where* each unfinished worker was (which operator, which
line of the user's function), not just that it was late.  Two mechanisms, because a worker may
be stuck in different ways:

* A daemon thread in the worker (:func:`serve`) waits on a pipe; on a request it formats the
  main thread's stack from ``sys._current_frames()`` — plus whatever the optional ``summarize``
  callback makes of it (the worker names the operator it is running) — and writes it to a file.
  This needs the interpreter lock, which a busy or parked worker releases every few ms.
* ``faulthandler`` is registered for ``SIGUSR1``: on the signal it writes every thread's stack to
  a second file from C, without the interpreter lock, so even a worker deadlocked inside an
  extension that holds the lock can be described.

The launcher (:func:`request`, then :func:`collect`) asks the thread first and sends the signal
only to a worker that did not answer in time: dumping stacks from a signal handler while another
thread walks them too is asking for trouble.  The files live in a directory the launcher owns
and removes.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from types import FrameType
from typing import IO

__all__ = ["collect", "request", "serve"]

_SIGNAL = signal.SIGUSR1
_keep: list[IO[str]] = []  # faulthandler writes to this file's descriptor until the process ends


def serve(request_fd: int, path: str, summarize: Callable[[FrameType], str] | None) -> None:
    """In a worker process (on its main thread): answer :func:`request` by writing ``path``.

    The stack is cut at the caller of ``serve`` (the process' entry point): what lies above
    it was inherited through ``fork`` from the launcher and says nothing about the worker."""
    fault = open(path + ".fault", "w")  # noqa: SIM115 - must stay open for faulthandler
    _keep.append(fault)
    faulthandler.register(_SIGNAL, file=fault, all_threads=True)
    main = threading.get_ident()
    entry = sys._getframe(1)

    def answer() -> None:
        while os.read(request_fd, 1):
            frame = sys._current_frames().get(main)
            if frame is None:
                text = "(the main thread has no Python frame)\n"
            else:
                text = "".join(traceback.format_list(_below(frame, entry)))
                if summarize is not None:
                    text = summarize(frame) + "\n" + text
            partial = path + ".partial"
            with open(partial, "w") as out:
                out.write(text)
            os.replace(partial, path)

    threading.Thread(target=answer, name="pytimely-diagnosis", daemon=True).start()


def _below(frame: FrameType, entry: FrameType) -> traceback.StackSummary:
    """The stack from ``frame`` up to (not including) ``entry``, outermost first."""
    frames = []
    f: FrameType | None = frame
    while f is not None and f is not entry:
        frames.append((f, f.f_lineno))
        f = f.f_back
    return traceback.StackSummary.extract(reversed(frames))


def request(request_fd: int) -> None:
    """Ask the worker served on the other end of ``request_fd`` for its main thread's stack."""
    try:
        os.write(request_fd, b"?")
    except OSError:
        pass  # it is gone; nothing to describe


def collect(pid: int, path: str, deadline: float, fallback: float = 0.3) -> str:
    """The answer of worker process ``pid`` to :func:`request`, waiting until ``deadline``
    (monotonic) at most; failing that, what faulthandler writes on a signal within
    ``fallback`` more seconds; else an empty string."""
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    if os.path.exists(path):
        return _read(path)
    try:
        os.kill(pid, _SIGNAL)
    except OSError:
        return ""
    time.sleep(fallback)
    dump = _read(path + ".fault")
    if not dump:
        return ""
    return (
        "holding the interpreter lock, unable to answer (a long call into C code, or a "
        "deadlock); every thread's stack, its main thread is the 'Current thread':\n" + dump
    )


def _read(path: str) -> str:
    try:
        with open(path) as source:
            return source.read()
    except OSError:
        return ""
