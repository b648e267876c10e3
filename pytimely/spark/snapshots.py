"""The streaming bridge's state snapshots: operator state at completed micro-batches, on disk.

After micro-batch ``b`` is complete on a worker, and before any later batch enters its
dataflow, the worker writes its stateful operators' state
(:meth:`pytimely.dataflow.snapshot.StateRegistry.snapshot`: ``(operator, key, blob)``
records) as one file; once every worker's file of ``b`` exists *and* Spark has committed ``b``
(the driver knows it when Spark hands it a later batch), the driver commits the snapshot, then
deletes older snapshots and the input log up to ``b`` (:mod:`pytimely.spark.recovery`): a
restart restores ``b``'s state and replays only the logged batches after ``b``.

Layout under ``<checkpoint>/pytimely/state/``::

    batch=<b>/part-<w>.snapshot  worker w's state after batch b (capture format, below)
    batch=<b>/_committed.json    {"version": 1, "batch": b, "then": .., "rows": .., "workers": N}

A part file is a file of the capture format (:mod:`pytimely.capture.fileformat`: a versioned
header, every frame CRC32-checked, an END frame last, so a torn or corrupted file is a
:class:`~pytimely.errors.CaptureError`) holding one MESSAGES frame at time ``b`` with the
records, and in its user metadata ``{"snapshot_version": 1, "batch": b, "worker": w,
"workers": N}``; a different ``snapshot_version`` is refused (:class:`SnapshotError`).
Every file is written under a hidden temporary name and renamed: a file that exists is whole.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

from ..capture.fileformat import read_events_and_metadata, write_records_atomically
from ..dataflow.operators.event import Messages
from ..dataflow.snapshot import partition
from ..errors import CaptureError
from .recovery import atomic_write

__all__ = ["SNAPSHOT_VERSION", "SnapshotError", "SnapshotStore"]

SNAPSHOT_VERSION = 1


class SnapshotError(CaptureError):
    """A snapshot file is not one this version of pytimely can restore."""


def _batch_of(name: str) -> int | None:
    return int(name.split("=", 1)[1]) if name.startswith("batch=") else None


class SnapshotStore:
    """The state snapshots of one streaming bridge under ``checkpoint`` (module docstring)."""

    def __init__(self, checkpoint: str) -> None:
        self.directory = os.path.join(os.fspath(checkpoint), "pytimely", "state")

    def _batch_dir(self, batch: int) -> str:
        return os.path.join(self.directory, f"batch={batch}")

    # -- workers -------------------------------------------------------------------------------

    def write_part(
        self, batch: int, worker: int, workers: int, records: list[tuple[str, Any, bytes]]
    ) -> str:
        """Write worker ``worker``'s state after ``batch``; returns the file's path."""
        meta = {
            "snapshot_version": SNAPSHOT_VERSION,
            "batch": batch,
            "worker": worker,
            "workers": workers,
        }
        path = os.path.join(self._batch_dir(batch), f"part-{worker}.snapshot")
        write_records_atomically(path, batch, records, meta)
        return path

    @staticmethod
    def read_part(path: str) -> list[tuple[str, Any, bytes]]:
        """The records of a part file (checked: header, checksums, END, snapshot version)."""
        events, user = read_events_and_metadata(path, allow_pickle=True)
        version = user.get("snapshot_version")
        if version != SNAPSHOT_VERSION:
            raise SnapshotError(
                f"state snapshot {path}: snapshot version {version!r}, this pytimely reads "
                f"version {SNAPSHOT_VERSION} only"
            )
        return [record for event in events if isinstance(event, Messages) for record in event.batch]

    # -- the driver ----------------------------------------------------------------------------

    def commit(self, batch: int, then: int, rows: int, workers: int) -> None:
        """Mark the snapshot after ``batch`` committed (every worker's part is written and
        Spark committed ``batch``), then delete every older snapshot."""
        meta = {
            "version": SNAPSHOT_VERSION,
            "batch": batch,
            "then": then,
            "rows": rows,
            "workers": workers,
        }
        atomic_write(
            os.path.join(self._batch_dir(batch), "_committed.json"), json.dumps(meta).encode()
        )
        for name in os.listdir(self.directory):
            b = _batch_of(name)
            if b is not None and b < batch:
                shutil.rmtree(os.path.join(self.directory, name), ignore_errors=True)

    def latest(self) -> dict | None:
        """The metadata of the last committed snapshot, or ``None``."""
        if not os.path.isdir(self.directory):
            return None
        found = None
        for name in os.listdir(self.directory):
            b = _batch_of(name)
            marker = os.path.join(self.directory, name, "_committed.json")
            if b is None or not os.path.exists(marker) or (found and found["batch"] > b):
                continue
            with open(marker, encoding="utf-8") as f:
                meta = json.load(f)
            if meta.get("version") != SNAPSHOT_VERSION:
                raise SnapshotError(
                    f"state snapshot {marker}: unknown version {meta.get('version')!r}"
                )
            found = meta
        return found

    def restore_for(self, meta: dict, worker: int, workers: int) -> dict[str, list]:
        """``operator -> [(key, blob)]``: the state of the committed snapshot ``meta`` (from
        :meth:`latest`) that worker ``worker`` of ``workers`` owns -- by key, whatever the
        number of workers that wrote it."""
        folder = self._batch_dir(meta["batch"])
        records: list[tuple[str, Any, bytes]] = []
        for w in range(meta["workers"]):
            records += self.read_part(os.path.join(folder, f"part-{w}.snapshot"))
        return partition(records, worker, workers)

    def discard_uncommitted(self) -> None:
        """Remove snapshots that were never committed (a restart starts from the last one)."""
        if not os.path.isdir(self.directory):
            return
        for name in os.listdir(self.directory):
            folder = os.path.join(self.directory, name)
            if _batch_of(name) is not None and not os.path.exists(
                os.path.join(folder, "_committed.json")
            ):
                shutil.rmtree(folder, ignore_errors=True)
