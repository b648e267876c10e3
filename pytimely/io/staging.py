"""Staged files: how the file-backed sinks keep a worker's records until a checkpoint commits.

A :class:`StagedFileWriter` writes records as lines of a file under ``folder`` named
``<prefix>-<seq><suffix>``; :meth:`~StagedFileWriter.stage` syncs and closes it and describes
it as ``{"file": name}``; the next record opens the next file.  :func:`discard_staged` deletes
the staged files a failed attempt left (every file with the suffix that is not kept).

>>> import tempfile, os
>>> folder = tempfile.mkdtemp()
>>> writer = StagedFileWriter(folder, "run1-w0", str)
>>> writer.write([1, 2]); writer.stage()
{'file': 'run1-w0-000000.staged'}
>>> writer.stage() is None  # nothing written since
True
>>> writer.write([3]); writer.stage()
{'file': 'run1-w0-000001.staged'}
>>> discard_staged(folder, [{"file": "run1-w0-000001.staged"}])
>>> os.listdir(folder)
['run1-w0-000001.staged']
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import TimelyError
from .api import SinkWriter

__all__ = ["StagedFileWriter", "discard_staged", "mark_sent", "publish_by_rename", "unsent"]


class StagedFileWriter(SinkWriter):
    """One worker's staged files (module docstring); ``line`` encodes a record as one line
    (without its newline)."""

    def __init__(
        self, folder: str, prefix: str, line: Callable[[Any], str], suffix: str = ".staged"
    ) -> None:
        self.folder = folder
        self.prefix = prefix
        self.line = line
        self.suffix = suffix
        self._seq = 0
        self._file: Any = None
        self._name = ""

    def write(self, records: list[Any]) -> None:
        """Append ``records`` to the open staged file (opened if need be)."""
        if not records:
            return
        if self._file is None:
            os.makedirs(self.folder, exist_ok=True)
            self._name = f"{self.prefix}-{self._seq:06d}{self.suffix}"
            self._file = open(os.path.join(self.folder, self._name), "w", encoding="utf-8")  # noqa: SIM115
        line = self.line
        self._file.write("".join(line(r) + "\n" for r in records))

    def stage(self) -> Any:
        """Sync and close the open file: ``{"file": name}``, or ``None`` if none is open."""
        if self._file is None:
            return None
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self._file = None
        self._seq += 1
        return {"file": self._name}

    def close(self) -> None:
        """Close the open file (what it holds stays staged-to-be, not published)."""
        if self._file is not None:
            self._file.close()
            self._file = None


def discard_staged(folder: str, keep: Sequence[Any], suffix: str = ".staged") -> None:
    """Delete the files of ``folder`` ending in ``suffix`` that ``keep`` does not describe."""
    if not os.path.isdir(folder):
        return
    kept = {staged["file"] for staged in keep}
    for name in os.listdir(folder):
        if name.endswith(suffix) and name not in kept:
            os.remove(os.path.join(folder, name))


def unsent(folder: str, staged: Any, who: str) -> str | None:
    """The path of the staged file ``staged`` describes, or ``None`` if it was sent already
    (:func:`mark_sent`); a file that is neither is an error naming ``who`` (lost output)."""
    path = os.path.join(folder, staged["file"])
    if os.path.exists(path + ".sent"):
        return None
    if not os.path.exists(path):
        raise TimelyError(f"{who}: staged file {path} is gone and was never sent")
    return path


def mark_sent(path: str) -> None:
    """Record that the staged file at ``path`` is published (renamed ``<path>.sent``)."""
    os.replace(path, path + ".sent")


def publish_by_rename(staging: str, folder: str, staged: Any, who: str) -> None:
    """Publish a staged file by renaming it from ``staging`` into ``folder`` (atomic on one
    filesystem).  Idempotent, also when two workers publish the same file at once: a file
    already moved is not moved again; one gone from both places is an error naming ``who``."""
    name = staged["file"]
    source = os.path.join(staging, name)
    target = os.path.join(folder, name)
    try:
        os.replace(source, target)
    except FileNotFoundError:
        if not os.path.exists(target):
            raise TimelyError(
                f"{who}: staged file {source} is gone and was never published"
            ) from None
