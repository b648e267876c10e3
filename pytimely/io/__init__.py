"""Sources, sinks and checkpoints: a job that owns its stream (docs/io.md).

* :mod:`~pytimely.io.api` -- the contract: a :class:`Source` is partitions with replayable
  offsets, a :class:`Sink` stages per checkpoint and publishes once it is committed;
* :mod:`~pytimely.io.driver` -- :func:`job` runs a dataflow built with :func:`read` and
  :func:`write` epoch by epoch, with consistent checkpoints and restarts on any number of
  workers;
* :mod:`~pytimely.io.checkpoint` -- the checkpoints, on :mod:`~pytimely.io.storage` (a local
  directory or any ``pyarrow.fs`` filesystem);
* :mod:`~pytimely.io.files` -- JSON-lines files as a source and an exactly-once sink;
* :mod:`~pytimely.io.directory` -- a folder of JSON-lines, CSV or Parquet files as a source,
  bounded or watched for new files;
* :mod:`~pytimely.io.parquet` -- Parquet files as an exactly-once sink, one per worker per
  checkpoint.
"""

from .api import PartitionReader, Sink, SinkWriter, Source, owned, owner
from .checkpoint import CheckpointError, CheckpointStore
from .directory import DirectorySource
from .driver import FINAL, JobReport, job, read, write
from .files import JsonLinesSink, JsonLinesSource
from .parquet import ParquetSink

__all__ = [
    "FINAL",
    "CheckpointError",
    "CheckpointStore",
    "DirectorySource",
    "JobReport",
    "JsonLinesSink",
    "JsonLinesSource",
    "ParquetSink",
    "PartitionReader",
    "Sink",
    "SinkWriter",
    "Source",
    "job",
    "owned",
    "owner",
    "read",
    "write",
]
