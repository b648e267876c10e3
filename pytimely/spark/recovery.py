"""The streaming bridge's input log: the micro-batches since the last state snapshot.

A dataflow's state (windows, ``stateful_map``, ``keyed_process``, joins) is a function of the
input it has consumed, at the times it was consumed.  So instead of snapshotting every
operator, the bridge makes the *input* durable: each worker writes the rows of micro-batch
``b`` it received to the log before they enter its dataflow, and the driver marks ``b``
committed (with the times its rows were sent at and the input advanced to) once every worker's
part is on disk -- before ``foreachBatch`` returns, i.e. before Spark commits ``b`` to the
query's checkpoint.  After a restart from the same checkpoint, Spark resumes at the first batch
it had not committed, ``r``; the bridge first replays the committed batches ``< r`` into the new
workers (rebuilding their state exactly: same rows, same times), discards any logged batch
``>= r`` (Spark delivers it again) and carries on.  This is upstream backup with replay, the
recovery the Naiad paper contrasts with checkpointing ("Naiad: A Timely Dataflow System",
SOSP 2013, section 3.4).  Alone, replay time and the log would grow with the stream; so the
bridge also snapshots its operators' state (:mod:`pytimely.spark.snapshots`), and once the
snapshot after batch ``s`` is committed the log up to ``s`` is deleted
(:meth:`InputLog.truncate_through`): a restart restores ``s``'s state and replays only the
committed batches after ``s``.

Replay onto a different number of workers: part ``j`` goes to worker ``j % N``; dataflows whose
state is keyed must route by key themselves (``exchange``, or the keyed/window operators, which
do), and then the replayed state lands partitioned by key on the new workers.

Layout under ``<checkpoint>/pytimely/input/``::

    batch=<b>/part-<j>.log     worker j's rows of batch b (see below)
    batch=<b>/_committed.json  {"version": 1, "at": .., "then": .., "workers": N}

A part file is ``MAGIC``, then for each Arrow IPC payload its length (``<Q``) and bytes, then
the SHA-256 of everything before it.  Files are written under a hidden name and renamed, so a
file that exists is complete; a part whose checksum fails is an error, not silently skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from collections.abc import Iterable

from ..errors import CaptureError
from ..io.checkpoint import atomic_write

__all__ = ["InputLog", "atomic_write"]

MAGIC = b"PTINLOG1"
VERSION = 1
_LEN = struct.Struct("<Q")


class InputLog:
    """The input log of one streaming bridge under ``checkpoint`` (module docstring)."""

    def __init__(self, checkpoint: str) -> None:
        self.directory = os.path.join(os.fspath(checkpoint), "pytimely", "input")

    def _batch_dir(self, batch: int) -> str:
        return os.path.join(self.directory, f"batch={batch}")

    # -- workers ---------------------------------------------------------------------------------

    def write_part(self, batch: int, worker: int, payloads: Iterable[bytes]) -> str:
        """Write worker ``worker``'s payloads of ``batch``; returns the file's path."""
        body = bytearray(MAGIC)
        for payload in payloads:
            body += _LEN.pack(len(payload))
            body += payload
        body += hashlib.sha256(body).digest()
        path = os.path.join(self._batch_dir(batch), f"part-{worker}.log")
        atomic_write(path, bytes(body))
        return path

    @staticmethod
    def read_part(path: str) -> list[bytes]:
        """The payloads of a part file (checked: magic and checksum)."""
        with open(path, "rb") as f:
            data = f.read()
        body, digest = data[:-32], data[-32:]
        if not body.startswith(MAGIC) or hashlib.sha256(body).digest() != digest:
            raise CaptureError(f"input log part {path} is corrupt (bad magic or checksum)")
        payloads = []
        at = len(MAGIC)
        while at < len(body):
            (n,) = _LEN.unpack_from(body, at)
            at += _LEN.size
            payloads.append(bytes(body[at : at + n]))
            at += n
        return payloads

    # -- the driver ------------------------------------------------------------------------------

    def commit(self, batch: int, at: int, then: int, workers: int) -> None:
        """Mark ``batch`` committed (every worker's part is written)."""
        meta = {"version": VERSION, "at": at, "then": then, "workers": workers}
        atomic_write(
            os.path.join(self._batch_dir(batch), "_committed.json"), json.dumps(meta).encode()
        )

    def committed(self) -> list[tuple[int, dict]]:
        """``(batch, metadata)`` of every committed batch, in batch order."""
        found = []
        if not os.path.isdir(self.directory):
            return found
        for name in os.listdir(self.directory):
            if not name.startswith("batch="):
                continue
            batch = int(name.split("=", 1)[1])
            marker = os.path.join(self.directory, name, "_committed.json")
            if os.path.exists(marker):
                with open(marker, encoding="utf-8") as f:
                    meta = json.load(f)
                if meta.get("version") != VERSION:
                    raise CaptureError(f"input log {marker}: unknown version {meta.get('version')}")
                found.append((batch, meta))
        return sorted(found, key=lambda item: item[0])

    def parts(self, batch: int, meta: dict, worker: int, workers: int) -> list[str]:
        """The part files of ``batch`` that worker ``worker`` of ``workers`` replays."""
        return [
            os.path.join(self._batch_dir(batch), f"part-{j}.log")
            for j in range(meta["workers"])
            if j % workers == worker
            and os.path.exists(os.path.join(self._batch_dir(batch), f"part-{j}.log"))
        ]

    def truncate_through(self, batch: int) -> None:
        """Remove every logged batch ``<= batch``: a committed state snapshot after ``batch``
        (:mod:`pytimely.spark.snapshots`) has made them unnecessary for recovery."""
        if not os.path.isdir(self.directory):
            return
        for name in os.listdir(self.directory):
            if name.startswith("batch=") and int(name.split("=", 1)[1]) <= batch:
                shutil.rmtree(os.path.join(self.directory, name), ignore_errors=True)

    def discard_from(self, batch: int) -> None:
        """Remove every logged batch ``>= batch`` and every uncommitted one."""
        if not os.path.isdir(self.directory):
            return
        for name in os.listdir(self.directory):
            if not name.startswith("batch="):
                continue
            b = int(name.split("=", 1)[1])
            folder = os.path.join(self.directory, name)
            if b >= batch or not os.path.exists(os.path.join(folder, "_committed.json")):
                shutil.rmtree(folder, ignore_errors=True)
