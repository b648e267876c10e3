"""A job's checkpoints on disk: per worker, source offsets, staged sink output and operator state.

A checkpoint at epoch ``T`` is a consistent cut: every worker's sources stopped before epoch
``T``, the whole dataflow passed every time before ``T`` (so every operator has applied exactly
the input before ``T``), and only then did each worker write its *part*: the offsets its
readers reached, what its sink writers staged, and its stateful operators' state
(:meth:`pytimely.dataflow.snapshot.StateRegistry.snapshot`).  The checkpoint is *committed*
once all parts exist: whichever worker sees the last part writes ``_committed.json``.

Layout under the checkpoint directory::

    job.json                   {"version": 1, "job": NAME}       (written once, then checked)
    epoch=<T>/part-<w>.ckpt    worker w's part (capture format: CRC-checked frames, END last)
    epoch=<T>/_committed.json  {"version": 1, "job": NAME, "epoch": T, "workers": N}

The directory may be local or on any filesystem ``pyarrow.fs`` knows (a URI such as
``s3://bucket/jobs/clicks``, or ``filesystem=``): :mod:`pytimely.io.storage`.  Every file is
written whole or not at all (a hidden temporary name renamed, or an object uploaded at once), so
a file that exists is whole; a part that fails its checksums is a :class:`CheckpointError`,
never silently skipped.
Only the latest committed checkpoint is needed; older ones are retired when a newer one
commits, and uncommitted ones (a killed attempt's) are removed when a job restores.

>>> import tempfile
>>> store = CheckpointStore(tempfile.mkdtemp(), job="clicks")
>>> store.latest() is None
True
>>> store.write_part(4, 0, 2, {"files": {"a.jsonl": 120}}, {}, [])
>>> store.try_commit(4, 2)  # worker 1's part is missing
False
>>> store.write_part(4, 1, 2, {"files": {"b.jsonl": 80}}, {}, [])
>>> store.try_commit(4, 2)
True
>>> meta = store.latest()
>>> meta["epoch"], store.load(meta).offsets
(4, {'files': {'a.jsonl': 120, 'b.jsonl': 80}})
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from ..capture.fileformat import decode_capture, encode_capture
from ..dataflow.operators.event import Messages
from ..errors import TimelyError
from .storage import LocalStorage, storage_for

__all__ = ["CHECKPOINT_VERSION", "Checkpoint", "CheckpointError", "CheckpointStore", "atomic_write"]

CHECKPOINT_VERSION = 1

_EPOCH_DIR = re.compile(r"^epoch=(\d+)$")


class CheckpointError(TimelyError):
    """A checkpoint that cannot be used: corrupt, another job's, or from a newer pytimely."""


def atomic_write(path: str, data: bytes) -> None:
    """Write ``data`` to the local file ``path`` whole or not at all (a hidden temporary file,
    renamed; the temporary name is this process' own, so that two writers of the same file do
    not meet)."""
    LocalStorage().write(path, data)


@dataclass
class Checkpoint:
    """A committed checkpoint read back: whether it is ``final`` (a run's last), the offsets
    ``offsets[source][partition]``, the staged sink descriptions ``staged[sink]`` (every
    worker's), and the state records ``(operator, key, blob)`` of every worker."""

    epoch: int
    workers: int
    final: bool = False
    offsets: dict[str, dict[str, Any]] = field(default_factory=dict)
    staged: dict[str, list[Any]] = field(default_factory=dict)
    state: list[tuple[str, Any, bytes]] = field(default_factory=list)


class CheckpointStore:
    """The checkpoints of job ``job`` under ``directory`` (module docstring): a local path, a
    URI pyarrow knows, or a path of ``filesystem`` (a ``pyarrow.fs.FileSystem``)."""

    def __init__(self, directory: str | os.PathLike, job: str, filesystem: Any = None) -> None:
        self.storage, self.directory = storage_for(directory, filesystem)
        self.job = job

    def _path(self, *names: str) -> str:
        return self.storage.join(self.directory, *names)

    def _epoch_dir(self, epoch: int) -> str:
        return self._path(f"epoch={epoch}")

    def _epochs(self) -> list[int]:
        found = (_EPOCH_DIR.match(name) for name in self.storage.list(self.directory))
        return sorted(int(m.group(1)) for m in found if m)

    # -- identity ------------------------------------------------------------------------------

    def claim(self) -> None:
        """Make the directory this job's, or check that it is (a foreign or newer one is
        refused, and never written to)."""
        path = self._path("job.json")
        if not self.storage.exists(path):
            self.storage.write(
                path, json.dumps({"version": CHECKPOINT_VERSION, "job": self.job}).encode()
            )
            return
        meta = self._read_json(path)
        self._check(meta, path)

    def _check(self, meta: dict, path: str) -> None:
        version = meta.get("version")
        if not isinstance(version, int) or version > CHECKPOINT_VERSION:
            raise CheckpointError(
                f"checkpoint {path}: version {version!r}, written by a newer pytimely (this one "
                f"reads version {CHECKPOINT_VERSION}); not touched"
            )
        if meta.get("job") != self.job:
            raise CheckpointError(
                f"checkpoint {path} belongs to job {meta.get('job')!r}, not {self.job!r}: "
                "give each job a checkpoint directory of its own (not touched)"
            )

    def _read_json(self, path: str) -> dict:
        try:
            meta = json.loads(self.storage.read(path))
        except (OSError, ValueError) as exc:
            raise CheckpointError(
                f"checkpoint file {self.storage.describe(path)} is unreadable: {exc}"
            ) from exc
        if not isinstance(meta, dict):
            raise CheckpointError(
                f"checkpoint file {self.storage.describe(path)} is not a JSON object"
            )
        return meta

    # -- workers -------------------------------------------------------------------------------

    def write_part(
        self,
        epoch: int,
        worker: int,
        workers: int,
        offsets: dict[str, dict[str, Any]],
        staged: dict[str, list[Any]],
        state: list[tuple[str, Any, bytes]],
    ) -> None:
        """Write worker ``worker``'s part of the checkpoint at ``epoch``: ``offsets[source]
        [partition]``, the sink descriptions ``staged[sink]`` it has not seen committed, and
        its state records."""
        meta = {
            "checkpoint_version": CHECKPOINT_VERSION,
            "job": self.job,
            "epoch": epoch,
            "worker": worker,
            "workers": workers,
        }
        records = [("offsets", offsets), ("staged", staged), ("state", state)]
        path = self.storage.join(self._epoch_dir(epoch), f"part-{worker}.ckpt")
        data = encode_capture([Messages(epoch, records)], meta, allow_pickle=True)
        self.storage.write(path, data)

    def try_commit(self, epoch: int, workers: int, final: bool = False) -> bool:
        """Commit the checkpoint at ``epoch`` if all ``workers`` parts are written, then retire
        the older ones.  Returns whether *this call* committed it: of workers that try at
        once, one wins (the marker is created exclusively; on a pyarrow filesystem, rarely
        more than one: :mod:`pytimely.io.storage`), and that one publishes what the parts
        staged.  ``final``: the last checkpoint of a run (the job drained)."""
        storage, folder = self.storage, self._epoch_dir(epoch)
        marker = storage.join(folder, "_committed.json")
        names = set(storage.list(folder))
        if "_committed.json" in names or any(f"part-{w}.ckpt" not in names for w in range(workers)):
            return False
        meta = {
            "version": CHECKPOINT_VERSION,
            "job": self.job,
            "epoch": epoch,
            "workers": workers,
            "final": final,
        }
        if not storage.create(marker, json.dumps(meta).encode()):
            return False  # another worker committed first
        for older in self._epochs():
            if older < epoch:
                storage.remove_tree(self._epoch_dir(older))
        return True

    # -- restoring -----------------------------------------------------------------------------

    def latest(self) -> dict | None:
        """The marker of the latest committed checkpoint, or ``None``."""
        for epoch in reversed(self._epochs()):
            marker = self.storage.join(self._epoch_dir(epoch), "_committed.json")
            if self.storage.exists(marker):
                meta = self._read_json(marker)
                self._check(meta, marker)
                return meta
        return None

    def load(self, meta: dict) -> Checkpoint:
        """Every part of the committed checkpoint ``meta`` (from :meth:`latest`), merged."""
        epoch, workers = int(meta["epoch"]), int(meta["workers"])
        found = Checkpoint(epoch, workers, bool(meta.get("final", False)))
        for w in range(workers):
            path = self.storage.join(self._epoch_dir(epoch), f"part-{w}.ckpt")
            part = dict(self._read_part(path, epoch))
            for source, offsets in part["offsets"].items():
                found.offsets.setdefault(source, {}).update(offsets)
            for sink, staged in part["staged"].items():
                found.staged.setdefault(sink, []).extend(staged)
            found.state += part["state"]
        return found

    def _read_part(self, path: str, epoch: int) -> list[tuple[str, Any]]:
        name = self.storage.describe(path)
        try:
            events, user = decode_capture(self.storage.read(path), name, allow_pickle=True)
        except (OSError, TimelyError) as exc:
            raise CheckpointError(f"checkpoint part {name} is unreadable: {exc}") from exc
        if user.get("checkpoint_version") != CHECKPOINT_VERSION or user.get("epoch") != epoch:
            raise CheckpointError(
                f"checkpoint part {name}: version {user.get('checkpoint_version')!r} at epoch "
                f"{user.get('epoch')!r}, expected version {CHECKPOINT_VERSION} at epoch {epoch}"
            )
        return [record for event in events if isinstance(event, Messages) for record in event.batch]

    def committed(self, epoch: int) -> bool:
        """Whether the checkpoint at ``epoch`` is committed (its marker exists, or a later
        checkpoint committed and retired it)."""
        if self.storage.exists(self.storage.join(self._epoch_dir(epoch), "_committed.json")):
            return True
        latest = self.latest()
        return latest is not None and latest["epoch"] > epoch

    def drop_uncommitted(self, committed: int | None) -> None:
        """Remove the checkpoints after ``committed`` (``None``: all): a killed attempt's."""
        for epoch in self._epochs():
            if committed is None or epoch > committed:
                self.storage.remove_tree(self._epoch_dir(epoch))
