"""Captures as a Spark data source: ``spark.read.format("pytimely").load(path)``.

A capture file (:mod:`pytimely.capture`, ``FileWriter``: CRC-checked frames, ``.ptc`` by
convention) holds a stream's records with their times.  Spark cannot read that format, so this
module gives it a Python data source (Spark 4's ``pyspark.sql.datasource`` API): register it
once per session with :func:`register_data_source` (classic or Spark Connect), then::

    df = spark.read.format("pytimely").load("captures/")

``path`` is a capture file or a directory searched recursively for them (files whose first
bytes are the capture format's magic; hidden names, starting with ``.`` or ``_``, skipped).
Each file is one partition, read where Spark runs the task (the path must be readable there:
a local path on ``local[N]``, a shared filesystem on a cluster).  One row per record:

* ``file`` -- the path of the capture file it came from;
* ``time`` -- the record's timestamp as JSON (``"5"``; a loop's product time ``"[1, 2]"``):
  ``df.time.cast("long")`` for integer times;
* ``value`` -- the record as JSON (tuples become arrays; objects JSON cannot hold are written as
  their ``repr``), or with ``.option("value", "repr")`` its ``repr``.

Progress events are not rows (they are the stream's frontier, not its data).  A truncated or
corrupt file fails the read with the capture reader's error, naming the file and the offset;
``.option("truncated", "skip")`` reads the complete frames of a truncated file instead (a
capture still being written).

>>> CaptureDataSource.name()
'pytimely'
>>> CaptureDataSource(options={}).schema()
'file string, time string, value string'
"""

from __future__ import annotations

import json
import os
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

__all__ = ["CaptureDataSource", "register_data_source"]

_SCHEMA = "file string, time string, value string"


def register_data_source(spark: Any) -> None:
    """Make ``spark.read.format("pytimely")`` read captures in ``spark`` (a classic or a
    Spark Connect session)."""
    spark.dataSource.register(CaptureDataSource)


class CaptureDataSource(DataSource):
    """The ``pytimely`` format (module docstring)."""

    @classmethod
    def name(cls) -> str:
        """The format's name: ``spark.read.format("pytimely")``."""
        return "pytimely"

    def schema(self) -> str:
        """One row per record: its capture file, its time and itself, as text."""
        return _SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        """A reader of the ``path`` option's capture files, one partition per file."""
        return _CaptureReader(dict(self.options))


class _FilePartition(InputPartition):
    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


class _CaptureReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.path = options.get("path")
        if not self.path:
            raise ValueError('spark.read.format("pytimely").load(path): give the path of a '
                             "capture file or a directory of them")  # fmt: skip
        self.value = options.get("value", "json")
        if self.value not in ("json", "repr"):
            raise ValueError(f'format "pytimely": option value must be "json" or "repr", not '
                             f"{self.value!r}")  # fmt: skip
        self.truncated = options.get("truncated", "fail")
        if self.truncated not in ("fail", "skip"):
            raise ValueError(f'format "pytimely": option truncated must be "fail" or "skip", not '
                             f"{self.truncated!r}")  # fmt: skip

    def partitions(self) -> list[InputPartition]:
        files = capture_files(self.path)  # type: ignore[arg-type]
        return [_FilePartition(f) for f in files]

    def read(self, partition: InputPartition) -> Any:
        from pytimely.capture import FileReader
        from pytimely.dataflow.operators.event import Messages

        path = partition.path  # type: ignore[attr-defined]
        encode = _as_json if self.value == "json" else repr
        reader = FileReader(path, tail=self.truncated == "skip", allow_pickle=True)
        try:
            while True:
                events = reader.poll()
                if not events:
                    break
                for event in events:
                    if type(event) is Messages:
                        t = _as_json(event.time)
                        for record in event.batch:
                            yield (path, t, encode(record))
                if reader.done:
                    break
        finally:
            reader.close()


def capture_files(path: str) -> list[str]:
    """The capture files at ``path`` (a file, or a directory searched recursively), sorted;
    a path that does not exist, or holds no capture, is an error naming it."""
    from pytimely.capture.frames import MAGIC

    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise FileNotFoundError(f'format "pytimely": no file or directory {path!r}')
    found = []
    for folder, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        for name in sorted(names):
            if name.startswith((".", "_")):
                continue
            full = os.path.join(folder, name)
            with open(full, "rb") as f:
                if f.read(len(MAGIC)) == MAGIC:
                    found.append(full)
    if not found:
        raise FileNotFoundError(f'format "pytimely": no capture file under {path!r}')
    return found


def _as_json(x: Any) -> str:
    return json.dumps(x, default=repr)
