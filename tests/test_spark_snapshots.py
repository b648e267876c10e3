"""The streaming bridge's state snapshot files (:mod:`pytimely.spark.snapshots`): checksummed,
versioned, atomic, committed and pruned.  No Spark needed."""

from __future__ import annotations

import os

import pytest

from pytimely.capture.fileformat import write_events
from pytimely.dataflow.exchange.routing import route
from pytimely.dataflow.operators.event import Messages
from pytimely.errors import CaptureError
from pytimely.spark.recovery import InputLog
from pytimely.spark.snapshots import SnapshotError, SnapshotStore

RECORDS = [("WindowCount@0.3", f"k{i}", bytes([i]) * 3) for i in range(8)]


def test_a_part_reads_back_what_was_written_and_leaves_no_temporary_file(tmp_path):
    store = SnapshotStore(str(tmp_path))
    path = store.write_part(4, 1, 2, RECORDS)
    assert store.read_part(path) == RECORDS
    assert os.listdir(os.path.dirname(path)) == ["part-1.snapshot"]


@pytest.mark.parametrize("where", [0, 30, -40, -5])
def test_a_flipped_byte_anywhere_is_a_capture_error(tmp_path, where):
    path = SnapshotStore(str(tmp_path)).write_part(4, 0, 1, RECORDS)
    data = bytearray(open(path, "rb").read())
    data[where] ^= 0x10
    open(path, "wb").write(bytes(data))
    with pytest.raises(CaptureError):
        SnapshotStore.read_part(path)


def test_a_truncated_part_is_a_capture_error(tmp_path):
    path = SnapshotStore(str(tmp_path)).write_part(4, 0, 1, RECORDS)
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-20])
    with pytest.raises(CaptureError):
        SnapshotStore.read_part(path)


def test_an_unknown_snapshot_version_is_refused(tmp_path):
    path = str(tmp_path / "part-0.snapshot")
    write_events(
        path,
        [Messages(4, RECORDS)],
        allow_pickle=True,
        metadata={"snapshot_version": 2, "batch": 4, "worker": 0, "workers": 1},
    )
    with pytest.raises(SnapshotError, match="snapshot version 2"):
        SnapshotStore.read_part(path)


def test_only_committed_snapshots_count_and_a_commit_deletes_the_older_ones(tmp_path):
    store = SnapshotStore(str(tmp_path))
    assert store.latest() is None
    for w in range(2):
        store.write_part(3, w, 2, RECORDS[w::2])
    store.commit(3, then=40, rows=100, workers=2)
    for w in range(2):
        store.write_part(5, w, 2, RECORDS[w::2])  # not committed: a run died before
    assert store.latest() == {"version": 1, "batch": 3, "then": 40, "rows": 100, "workers": 2}
    store.discard_uncommitted()
    assert sorted(os.listdir(store.directory)) == ["batch=3"]
    store.write_part(7, 0, 1, RECORDS)
    store.commit(7, then=60, rows=130, workers=1)
    assert sorted(os.listdir(store.directory)) == ["batch=7"]
    assert store.latest()["batch"] == 7


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_restoring_reads_every_part_and_keeps_the_keys_a_worker_owns(tmp_path, workers):
    store = SnapshotStore(str(tmp_path))
    for w in range(2):  # written by two workers
        store.write_part(3, w, 2, RECORDS[w::2])
    store.commit(3, then=40, rows=100, workers=2)
    meta = store.latest()
    owned = [store.restore_for(meta, i, workers) for i in range(workers)]
    for i, state in enumerate(owned):
        assert all(route(key, workers) == i for key, _blob in state.get("WindowCount@0.3", []))
    together = sorted(r for state in owned for r in state.get("WindowCount@0.3", []))
    assert together == sorted((key, blob) for _op, key, blob in RECORDS)


def test_the_input_log_is_truncated_through_a_snapshot(tmp_path):
    log = InputLog(str(tmp_path))
    for b in range(5):
        log.write_part(b, 0, [b"x"])
        log.commit(b, b, b + 1, 1)
    log.truncate_through(2)
    assert [b for b, _meta in log.committed()] == [3, 4]
