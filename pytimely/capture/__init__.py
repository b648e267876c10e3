"""Capture and replay storage: writers and readers of captured streams.

This package is the storage layer above the dataflow: the event model (:class:`Event`,
``Event.Progress``, ``Event.Messages``, the writer/reader protocols, :func:`extract`) and the
``capture_into`` / ``replay_into`` operators live in :mod:`pytimely.dataflow.operators` (as in
timely dataflow's ``dataflow/operators/core/capture/``), and are re-exported here.

* :mod:`.link` -- in-memory :class:`EventLink` (:class:`LinkWriter` / :class:`LinkReader`).
* :mod:`.frames` -- the versioned, checksummed binary capture format; its module docstring is
  the format specification.  :mod:`.fileformat` writes and reads it in files
  (:class:`FileWriter` / :class:`FileReader`), :mod:`.streams` over sockets, pipes and file
  objects (:class:`StreamWriter` / :class:`StreamReader`).
* :mod:`.sockets` -- :func:`listen_capture` / :func:`connect_capture`: capture streams over TCP,
  authenticated with a shared secret unless explicitly ``insecure``.
* :mod:`.parquet` -- :class:`ParquetWriter` / :class:`ParquetReader` (needs pyarrow).
* :mod:`.inspect` -- :func:`inspect_file`, the engine of ``pytimely replay FILE --inspect``.
* ``replay_into(readers, scope)`` -- replay recorded streams into a dataflow (defined in
  :mod:`pytimely.dataflow.operators.replay`).
"""

from ..dataflow.operators.event import (
    Event,
    EventReader,
    EventWriter,
    Messages,
    Progress,
    batch_equal,
    batch_kind,
    batch_len,
    batch_records,
    extract,
)
from ..dataflow.operators.replay import ReplayHandle, replay_into
from .fileformat import FileReader, FileWriter, read_events, read_header, write_events
from .frames import FORMAT_VERSION, MAGIC
from .inspect import inspect_file
from .link import EventLink, LinkReader, LinkWriter
from .parquet import ParquetWriter
from .parquet_reader import ParquetReader
from .sockets import CaptureListener, connect_capture, listen_capture
from .streams import StreamReader, StreamWriter

__all__ = [
    "CaptureListener",
    "FORMAT_VERSION",
    "MAGIC",
    "Event",
    "EventLink",
    "EventReader",
    "EventWriter",
    "FileReader",
    "FileWriter",
    "LinkReader",
    "LinkWriter",
    "Messages",
    "ParquetReader",
    "ParquetWriter",
    "Progress",
    "StreamReader",
    "StreamWriter",
    "batch_equal",
    "batch_kind",
    "batch_len",
    "batch_records",
    "connect_capture",
    "extract",
    "inspect_file",
    "listen_capture",
    "read_events",
    "read_header",
    "write_events",
    "replay_into",
    "ReplayHandle",
]
