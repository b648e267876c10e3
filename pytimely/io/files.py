"""Files as a source and a sink: JSON lines in a directory, exactly once.

:class:`JsonLinesSource` reads every ``*.jsonl`` file of a directory; each file is a partition
and the offset is the byte position after the last line returned, so a restart reopens each
file where the checkpoint says and reads each line once.  With ``follow=True`` a file is never
finished (lines appended later are read; a last line without its newline waits for it).

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

from ..errors import TimelyError
from .api import PartitionReader, Sink, SinkWriter, Source
from .staging import StagedFileWriter, discard_staged

__all__ = ["JsonLinesSink", "JsonLinesSource"]

STAGING = "_staging"


class _LinesReader(PartitionReader):
    def __init__(self, path: str, offset: int, decode: Callable[[str], Any], follow: bool):
        self._file = open(path, "rb")  # noqa: SIM115 -- closed by close()
        self._file.seek(offset)
        self._at = offset
        self._decode = decode
        self._follow = follow
        self._eof = False
        self._path = path

    def read(self, limit: int) -> list[Any]:
        out: list[Any] = []
        f, decode = self._file, self._decode
        while len(out) < limit:
            line = f.readline()
            if not line:
                self._eof = True
                break
            if not line.endswith(b"\n") and self._follow:
                f.seek(self._at)  # a line still being written: wait for its newline
                self._eof = True
                break
            text = line.decode("utf-8").strip()
            if text:
                try:
                    out.append(decode(text))
                except ValueError as exc:
                    raise TimelyError(
                        f"{self._path}: the line at byte {self._at} is not valid: {exc}"
                    ) from exc
            self._at += len(line)
        else:
            self._eof = False
        return out

    def offset(self) -> int:
        return self._at

    def exhausted(self) -> bool:
        return self._eof and not self._follow

    def close(self) -> None:
        self._file.close()


class JsonLinesSource(Source):
    """Every ``*.jsonl`` file of ``folder`` (module docstring); ``decode`` turns a line into a
    record (default ``json.loads``)."""

    def __init__(
        self,
        folder: str | os.PathLike,
        *,
        name: str = "files",
        decode: Callable[[str], Any] = json.loads,
        follow: bool = False,
        suffix: str = ".jsonl",
    ) -> None:
        self.folder = os.fspath(folder)
        self.name = name
        self.decode = decode
        self.follow = follow
        self.suffix = suffix

    def partitions(self) -> list[str]:
        """The files, by name."""
        if not os.path.isdir(self.folder):
            raise TimelyError(f"source {self.name!r}: no directory {self.folder}")
        return sorted(n for n in os.listdir(self.folder) if n.endswith(self.suffix))

    def open(self, partition: str, offset: Any) -> PartitionReader:
        """A reader of file ``partition`` from byte ``offset``."""
        path = os.path.join(self.folder, partition)
        return _LinesReader(path, int(offset or 0), self.decode, self.follow)


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
        name = staged["file"]
        source = os.path.join(self.staging, name)
        target = os.path.join(self.folder, name)
        try:
            os.replace(source, target)
        except FileNotFoundError:
            if not os.path.exists(target):
                raise TimelyError(
                    f"sink {self.name!r}: staged file {source} is gone and was never published"
                ) from None

    def discard(self, keep: Sequence[Any]) -> None:
        """Delete the staged files not in ``keep``."""
        discard_staged(self.staging, keep, ".jsonl")

    def published(self) -> list[str]:
        """The published files' names, sorted."""
        if not os.path.isdir(self.folder):
            return []
        return sorted(n for n in os.listdir(self.folder) if n.endswith(".jsonl"))
