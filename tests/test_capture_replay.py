"""Capture and replay through dataflows: round trips, many streams into one, truncation."""

from __future__ import annotations

import os

import pytest

import pytimely as pt
from pytimely.capture import (
    EventLink,
    FileReader,
    FileWriter,
    Messages,
    ParquetReader,
    ParquetWriter,
    Progress,
    replay_into,
)
from pytimely.errors import OperatorError, TruncatedCapture


def _rounds_capture(writer, rounds=5):
    """A dataflow that sends two records per round and captures the mapped stream."""

    def work(worker):
        def build(scope):
            inp, stream = scope.new_input()
            mapped = stream.map(lambda x: x * 10)
            mapped.capture_into(writer)
            return inp, mapped.capture()

        inp, cap = worker.dataflow(build)
        for r in range(rounds):
            inp.send(r)
            inp.send(r + 100)
            inp.advance_to(r + 1)
            worker.step()
        inp.close()
        return cap

    return pt.execute(work)[0]


def test_capture_records_progress_with_initial_adjustment():
    link = EventLink(readers=None)
    _rounds_capture(link.writer(), rounds=2)
    events = link.reader().poll()
    progress = [e for e in events if isinstance(e, Progress)]
    # The first progress event retracts the implicit (0, +1).
    assert progress[0].changes[0] == (0, -1) or (0, -1) in progress[0].changes
    # Accumulating all progress on top of the implicit +1 leaves nothing: the stream finished.
    total: dict = {0: 1}
    for e in progress:
        for t, d in e.changes:
            total[t] = total.get(t, 0) + d
    assert all(v == 0 for v in total.values())
    assert [e.time for e in events if isinstance(e, Messages)] == [0, 1]


@pytest.mark.parametrize("kind", ["link", "file", "parquet"])
def test_round_trip_extract_equal(tmp_path, kind):
    path = os.path.join(tmp_path, "capture.bin")
    if kind == "link":
        link = EventLink(readers=1)
        writer, reader_factory = link.writer(), link.reader
    elif kind == "file":
        writer, reader_factory = FileWriter(path), lambda: FileReader(path)
    else:
        writer, reader_factory = ParquetWriter(path), lambda: ParquetReader(path)
    original = _rounds_capture(writer).extract()
    reader = reader_factory()

    def build(scope):
        replayed = replay_into([reader], scope)
        return replayed.capture(), replayed.probe()

    cap, probe = pt.example(build)
    assert cap.extract() == original
    assert probe.done()


def _capture_range_to_files(tmp_path, n):
    paths = []
    for i in range(n):
        path = os.path.join(tmp_path, f"worker{i}.ptc")
        paths.append(path)
        pt.example(lambda scope, p=path: scope.to_stream(range(10)).capture_into(FileWriter(p)))
    return paths


def test_many_streams_into_one_worker(tmp_path):
    paths = _capture_range_to_files(tmp_path, 5)
    cap = pt.example(lambda scope: replay_into([FileReader(p) for p in paths], scope).capture())
    assert cap.extract() == [(0, sorted(list(range(10)) * 5))]


def test_replaying_no_streams_completes():
    cap = pt.example(lambda scope: replay_into([], scope).capture())
    assert cap.extract() == []


def test_truncated_capture_replays_prefix_then_reports(tmp_path):
    path = os.path.join(tmp_path, "c.ptc")
    _rounds_capture(FileWriter(path), rounds=4)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 30)  # tear the end frame and the final progress frame
    with pytest.raises(OperatorError) as info:
        pt.example(lambda scope: replay_into([FileReader(path)], scope).capture())
    assert isinstance(info.value.__cause__, TruncatedCapture)

    def build(scope):
        return replay_into([FileReader(path)], scope, on_error="close").capture()

    cap = pt.example(build)
    assert cap.extract() == [(r, [r * 10, (r + 100) * 10]) for r in range(4)]


def test_tail_reader_replays_a_live_capture(tmp_path):
    path = os.path.join(tmp_path, "live.ptc")
    writer = FileWriter(path)
    reader = FileReader(path, tail=True)

    def work(worker):
        def build(scope):
            inp, stream = scope.new_input()
            stream.capture_into(writer)
            return inp

        def replay(scope):
            out = replay_into([reader], scope)
            return out.capture(), out.probe()

        inp = worker.dataflow(build)
        cap, probe = worker.dataflow(replay)
        for r in range(3):
            inp.send(r)
            inp.advance_to(r + 1)
            writer.flush()
            worker.step_while(lambda: probe.less_than(r + 1), timeout=10)
        inp.close()
        return cap

    cap = pt.execute(work)[0]
    assert cap.extract() == [(0, [0]), (1, [1]), (2, [2])]
