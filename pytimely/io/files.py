"""Files as a source and a sink: JSON lines in a directory, exactly once.

:class:`JsonLinesSource` reads every ``*.jsonl`` file of a directory; each file is a partition
and the offset is the byte position after the last line returned, so a restart reopens each
file where the checkpoint says and reads each line once.  With ``follow=True`` the folder is
watched: new files are read as they appear and a file is never finished (lines appended later
are read; a last line without its newline waits for it); see
:class:`~pytimely.io.directory.DirectorySource`, which also reads CSV and Parquet files.

:class:`JsonLinesSink` writes each worker's records to staged files under
``<folder>/_staging/`` and publishes a staged file by renaming it into ``<folder>`` (atomic on
one filesystem, and idempotent: a file already moved is not moved again).  Readers that list
``<folder>/*.jsonl`` see only published files, hence every record exactly once.

>>> import tempfile, os
>>> folder = tempfile.mkdtemp()
>>> with open(os.path.join(folder, "a.jsonl"), "w") as f:
...     _ = f.write('{"x": 1}\\n{"x": 2}\\n')
>>> source = JsonLinesSource(folder)
>>> source.partitions()
['a.jsonl']
>>> reader = source.open("a.jsonl", None)
>>> reader.read(1), reader.offset()
([{'x': 1}], 9)
>>> source.open("a.jsonl", 9).read(10)
[{'x': 2}]
>>> sink = JsonLinesSink(tempfile.mkdtemp())
>>> writer = sink.writer(0, 1, "run1")
>>> writer.write([("a", 1), ("b", 2)])
>>> staged = writer.stage()
>>> sink.publish(staged); sink.publish(staged)  # the second time: nothing to do
>>> [open(os.path.join(sink.folder, name)).read() for name in sink.published()]
['["a", 1]\\n["b", 2]\\n']
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import Any

from .api import Sink, SinkWriter
from .directory import DirectorySource
from .staging import StagedFileWriter, discard_staged, publish_by_rename

__all__ = ["JsonLinesSink", "JsonLinesSource"]

STAGING = "_staging"


class JsonLinesSource(DirectorySource):
    """Every ``*.jsonl`` file of ``folder`` (module docstring); ``decode`` turns a line into a
    record (default ``json.loads``).  The JSON-lines case of
    :class:`~pytimely.io.directory.DirectorySource`, whose ``follow``, ``poll_seconds`` and
    ``stop_when_idle`` it takes."""

    def __init__(
        self,
        folder: str | os.PathLike,
        *,
        name: str = "files",
        decode: Callable[[str], Any] = json.loads,
        follow: bool = False,
        suffix: str = ".jsonl",
        poll_seconds: float = 1.0,
        stop_when_idle: float | None = None,
    ) -> None:
        super().__init__(
            folder,
            "jsonl",
            name=name,
            decode=decode,
            follow=follow,
            suffix=suffix,
            poll_seconds=poll_seconds,
            stop_when_idle=stop_when_idle,
        )


class JsonLinesSink(Sink):
    """JSON-lines files in ``folder``, published by rename (module docstring); ``encode``
    turns a record into a line (default ``json.dumps``)."""

    def __init__(
        self,
        folder: str | os.PathLike,
        *,
        name: str = "files",
        encode: Callable[[Any], str] = json.dumps,
    ) -> None:
        self.folder = os.fspath(folder)
        self.staging = os.path.join(self.folder, STAGING)
        self.name = name
        self.encode = encode

    def writer(self, index: int, peers: int, attempt: str) -> SinkWriter:
        """Worker ``index``'s writer: staged files ``<attempt>-w<index>-<seq>.jsonl``."""
        return StagedFileWriter(self.staging, f"{attempt}-w{index}", self.encode, ".jsonl")

    def publish(self, staged: Any) -> None:
        """Move the staged file into the folder (nothing to do if it was moved already)."""
        publish_by_rename(self.staging, self.folder, staged, f"sink {self.name!r}")

    def discard(self, keep: Sequence[Any]) -> None:
        """Delete the staged files not in ``keep``."""
        discard_staged(self.staging, keep, ".jsonl")

    def published(self) -> list[str]:
        """The published files' names, sorted."""
        if not os.path.isdir(self.folder):
            return []
        return sorted(n for n in os.listdir(self.folder) if n.endswith(".jsonl"))
