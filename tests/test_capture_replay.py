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
    ReplayHandle,
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


def _replay_bounded(reader, seconds=10.0):
    """Replay ``reader`` with on_error="close" on one worker; fail (not hang) after ``seconds``."""
    worker = pt.Worker()
    handle = ReplayHandle()

    def build(scope):
        out = replay_into([reader], scope, on_error="close", handle=handle)
        return out.capture(), out.probe()

    cap, probe = worker.dataflow(build)
    worker.step_while(lambda: not probe.done(), timeout=seconds)
    return cap.extract(), handle


def _by_time(events):
    records: dict = {}
    for e in events:
        if isinstance(e, Messages) and len(e.batch):
            records.setdefault(e.time, []).extend(e.batch)
    return sorted((t, sorted(rs)) for t, rs in records.items())


def test_replay_of_a_capture_cut_at_every_offset_finishes_with_the_prefix(tmp_path):
    """Killed writers leave files cut anywhere, also exactly between two frames; replay with
    on_error="close" must finish with exactly the complete prefix and report the truncation."""
    path = os.path.join(tmp_path, "c.ptc")
    _rounds_capture(FileWriter(path), rounds=3)
    with open(path, "rb") as f:
        full = f.read()
    cut = os.path.join(tmp_path, "cut.ptc")
    for n in range(len(full) + 1):  # the header too
        with open(cut, "wb") as f:
            f.write(full[:n])
        prefix = []
        reader = FileReader(cut)
        while not reader.done:
            try:
                prefix += reader.poll()
            except TruncatedCapture:
                break
        got, handle = _replay_bounded(FileReader(cut))
        assert sorted((t, sorted(rs)) for t, rs in got) == _by_time(prefix), n
        if _stream_complete(prefix):  # only END is missing: replay need not look for it
            assert handle.errors == [] and got == [(r, [r * 10, (r + 100) * 10]) for r in range(3)]
        else:
            assert [type(e) for e in handle.errors] == [TruncatedCapture], n


def _stream_complete(events):
    """Whether the progress in ``events`` retracts every capability, the implicit one included."""
    counts = {0: 1}
    for e in events:
        if isinstance(e, Progress):
            for t, d in e.changes:
                counts[t] = counts.get(t, 0) + d
    return not any(counts.values())


def test_replay_of_a_reader_done_too_early_does_not_wait_forever(tmp_path):
    """A Parquet capture closed half-way (the writer's job failed) is complete as a file but not
    as a stream: replay must not wait for progress that will never come."""
    path = os.path.join(tmp_path, "half.parquet")
    with pytest.raises(RuntimeError), ParquetWriter(path) as writer:
        writer.push(Progress([(0, -1), (1, 1)]))
        writer.push(Messages(1, [7, 8]))
        raise RuntimeError("the job failed here")
    got, handle = _replay_bounded(ParquetReader(path))
    assert got == [(1, [7, 8])]
    assert [type(e) for e in handle.errors] == [TruncatedCapture]
    assert "still holds capabilities at [1]" in str(handle.errors[0])
    with pytest.raises(OperatorError) as info:
        pt.example(lambda scope: replay_into([ParquetReader(path)], scope).capture())
    assert isinstance(info.value.__cause__, TruncatedCapture)


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


# --------------------------------------------------------------------------------------------
# N -> M: captured on 5 workers, replayed on 1, 2 and 3.


@pytest.fixture(scope="module")
def five_worker_capture(tmp_path_factory):
    directory = tmp_path_factory.mktemp("five")

    def work(worker):
        path = os.path.join(directory, f"worker{worker.index}.ptc")

        def build(scope):
            inp, stream = scope.new_input()
            stream.exchange(lambda x: x).map(lambda x: x * 2).capture_into(FileWriter(path))
            return inp

        inp = worker.dataflow(build)
        for r in range(4):
            for x in range(worker.index * 10, worker.index * 10 + 5):
                inp.send(x + 100 * r)
            inp.advance_to(r + 1)
        inp.close()
        worker.run()
        return path

    return pt.execute(work, workers=5)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("replayers", [1, 2, 3])
def test_five_captured_streams_replayed_on_m_workers(five_worker_capture, replayers):
    paths = five_worker_capture

    def work(worker):
        mine = [FileReader(p) for i, p in enumerate(paths) if i % worker.peers == worker.index]

        def build(scope):
            out = replay_into(mine, scope)
            return out.capture(), out.probe()

        cap, probe = worker.dataflow(build)
        worker.run()
        assert probe.done()
        return cap.extract()

    results = pt.execute(work, workers=replayers)
    got = sorted((t, x) for res in results for t, recs in res for x in recs)
    expected = sorted(
        (r, 2 * (x + 100 * r))
        for r in range(4)
        for w in range(5)
        for x in range(w * 10, w * 10 + 5)
    )
    assert got == expected


@pytest.mark.timeout(120)
def test_capture_send_and_recv_over_sockets(tmp_path):
    """timely's capture_send (5 workers) / capture_recv (3 workers) pair, as processes."""
    import random
    import socket
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def free_run(base):
        # Five consecutive ports, below the ephemeral range (where the workers' own mesh
        # listeners get their ports) so that nothing else can take them meanwhile.
        for port in range(base, base + 5):
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
            finally:
                s.close()
        return True

    base = next(b for b in (random.randrange(20000, 30000) for _ in range(100)) if free_run(b))
    env = dict(os.environ, PYTHONPATH=root, PYTIMELY_SECRET="capture-example-secret")
    recv = subprocess.Popen(
        [
            sys.executable,
            os.path.join(root, "examples", "capture_recv.py"),
            "5",
            str(base),
            "-w",
            "3",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    send = subprocess.run(
        [sys.executable, os.path.join(root, "examples", "capture_send.py"), str(base), "-w", "5"],
        capture_output=True,
        text=True,
        env=env,
        timeout=90,
    )
    out, err = recv.communicate(timeout=90)
    assert send.returncode == 0, send.stderr
    assert recv.returncode == 0, err
    lines = [line for line in out.splitlines() if line.startswith("replayed:")]
    assert sorted(int(line.split()[1]) for line in lines) == sorted(list(range(10)) * 5)
