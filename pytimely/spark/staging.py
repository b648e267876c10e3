"""Per-attempt output staging: a retried run leaves exactly what a clean run would.

A run submitted with ``attempts > 1`` may fail half-way and start again from scratch.  Files its
workers wrote in the failed attempt (complete epochs, or a half-written temporary file of a
killed process) must not survive next to those of the attempt that succeeds.  So while a batch
run is in progress, the sinks of :mod:`pytimely.spark.sinks` write below a staging folder of
the attempt instead of their final place::

    directory/_pytimely_staging/<attempt id>/worker=i/part-<first>-<last>.parquet

and only when the whole Spark job succeeded does the driver :func:`commit` them, moving every
file to the same relative path under ``directory`` (one ``os.replace`` per file: each file
appears whole; hidden temporary files, e.g. a file a sink never finished, are left out).  A
failed attempt's staging folder is :func:`discard` ed.  Spark's file listing skips names that
begin with ``_`` (and contain no ``=``) or ``.``, so readers never see staged files; the same
rule is how Hadoop's output committers hide their ``_temporary`` folders
(``FileOutputCommitter``).

This needs the driver and the workers to see the same file system (local disk on one machine,
or a shared mount), which :func:`pytimely.spark.write_parquet` already assumes.

Executor side: :func:`staged` makes the sinks of the task running in this Python process write
to the attempt's staging folder and tell the driver which output directories they used
(:func:`output_folder`).  Outside :func:`staged` (``pytimely.execute``, the streaming bridge,
whose epochs must appear as they complete) the sinks write in place.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["STAGING", "commit", "discard", "output_folder", "staged"]

#: Name of the folder below an output directory that holds the attempts' staged files.
STAGING = "_pytimely_staging"

# The attempt the task running in this process belongs to: (attempt id, announce(directory)).
# A Spark Python worker process runs one task at a time, so a module-level slot suffices.
_active: tuple[str, Callable[[str], None]] | None = None
_announced: set[str] = set()


@contextmanager
def staged(attempt: str, announce: Callable[[str], None]) -> Iterator[None]:
    """While in this block, sinks stage their files under ``attempt`` and call
    ``announce(directory)`` once for each output directory they write to."""
    global _active
    previous = _active
    _active = (attempt, announce)
    _announced.clear()
    try:
        yield
    finally:
        _active = previous
        _announced.clear()


def output_folder(directory: str, worker: int) -> str:
    """The folder worker ``worker``'s files for ``directory`` go to now (created)."""
    directory = os.path.abspath(os.fspath(directory))
    if _active is None:
        folder = os.path.join(directory, f"worker={worker}")
    else:
        attempt, announce = _active
        folder = os.path.join(directory, STAGING, attempt, f"worker={worker}")
        if directory not in _announced:
            _announced.add(directory)
            announce(directory)
    os.makedirs(folder, exist_ok=True)
    return folder


def _staging_root(directory: str, attempt: str) -> str:
    return os.path.join(directory, STAGING, attempt)


def commit(directory: str, attempt: str) -> int:
    """Move the files ``attempt`` staged under ``directory`` to their final places (skipping
    temporary files, whose names begin with ``.``); returns how many were moved."""
    root = _staging_root(directory, attempt)
    moved = 0
    for base, _dirs, files in os.walk(root):
        for name in files:
            if name.startswith("."):
                continue
            source = os.path.join(base, name)
            target = os.path.join(directory, os.path.relpath(source, root))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.replace(source, target)
            moved += 1
    discard(directory, attempt)
    return moved


def discard(directory: str, attempt: str) -> None:
    """Remove what ``attempt`` staged under ``directory`` (and the staging folder once empty)."""
    shutil.rmtree(_staging_root(directory, attempt), ignore_errors=True)
    try:
        os.rmdir(os.path.join(directory, STAGING))
    except OSError:
        pass  # other attempts' files are still there, or it is already gone
