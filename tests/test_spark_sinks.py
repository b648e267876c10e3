"""write_parquet: rolling files of many epochs, per-epoch files, and what its probe promises.

``write_parquet`` is an ordinary operator: these tests run it on ``pytimely`` workers, without
Spark (``import pytimely.spark`` needs pyspark installed, not a JVM).  The Spark paths (staging
per attempt, the streaming bridge's per-epoch default) are covered in ``test_spark*.py``.
"""

from __future__ import annotations

import os
import re
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pytimely as pt
from pytimely.errors import TimelyError
from pytimely.order import ProductDomain
from pytimely.spark import epoch_path, output_files, read_output, sinks, staging, write_parquet

PART = re.compile(r"^part-(\d+)-(\d+)\.parquet$")


def records(worker, peers, epoch, keys=4):
    """What worker ``worker`` of ``peers`` sends at ``epoch``: ``(k, v)`` for its keys."""
    return [(k, epoch * 100 + k) for k in range(worker, keys, peers)]


def all_rows(epochs, peers, keys=4):
    """Every worker's input as sorted ``(epoch, k, v)``."""
    return sorted(
        (e, k, v) for w in range(peers) for e in epochs for k, v in records(w, peers, e, keys)
    )


def rows_in(directory):
    """The committed rows under ``directory`` as sorted ``(epoch, k, v)``."""
    table = read_output(directory)
    if table is None:
        return []
    return sorted(zip(*(table.column(c).to_pylist() for c in ("epoch", "k", "v"))))


def worker_files(directory):
    """``{worker: [file names]}`` of the committed files, in epoch order."""
    files: dict[int, list[str]] = {}
    for path in output_files(directory):
        worker = int(os.path.basename(os.path.dirname(path)).split("=")[1])
        files.setdefault(worker, []).append(os.path.basename(path))
    return files


def feed(directory, epochs, step_every=100, lockstep=False, **options):
    """``work(worker)`` for ``pt.execute``: every worker sends ``records`` per epoch through
    an exchange into ``write_parquet(..., **options)``, stepping every ``step_every`` epochs;
    with ``lockstep``, stepping until the sink's input has passed those epochs on every worker
    (so that a sink is never handed many more than ``step_every`` epochs at once, however the
    machine's load delays one worker)."""

    def work(worker):
        def build(scope):
            inp, stream = scope.new_input()
            exchanged = stream.exchange(lambda r: r[0])
            write_parquet(exchanged, directory, columns=["k", "v"], **options)
            return inp, exchanged.probe()  # (the sink's own output waits for its commits)

        inp, delivered = worker.dataflow(build)
        for e in epochs:
            inp.send_batch(records(worker.index, worker.peers, e))
            inp.advance_to(e + 1)
            if e % step_every == 0:
                if lockstep:
                    worker.step_while(lambda e=e: delivered.less_than(e + 1), timeout=60)
                else:
                    worker.step()
        return worker.index

    return work


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [1, 2])
def test_thousands_of_epochs_roll_into_one_file_per_worker(tmp_path, workers):
    out = str(tmp_path / "out")
    epochs = range(3600)
    assert pt.execute(feed(out, epochs), workers=workers) == list(range(workers))
    files = worker_files(out)
    assert sorted(files) == list(range(workers))
    for names in files.values():
        assert names == ["part-0-3599.parquet"]  # one file per worker with the defaults
    for path in output_files(out):
        meta = pq.ParquetFile(path).metadata
        assert meta.num_row_groups == 1  # not a row group per epoch
    assert rows_in(out) == all_rows(epochs, workers)
    # Nothing else is left behind: no temporary file, no staging folder.
    leftovers = [n for _b, _d, fs in os.walk(out) for n in fs if not PART.match(n)]
    assert leftovers == []
    table = read_output(out)
    assert table.schema.field("epoch").type == pa.int64()
    assert sorted(set(table.column("worker").to_pylist())) == list(range(workers))


@pytest.mark.timeout(120)
def test_small_roll_bytes_rolls_complete_files_and_never_splits_an_epoch(tmp_path):
    out = str(tmp_path / "out")
    epochs = range(300)
    pt.execute(feed(out, epochs, step_every=7, lockstep=True, roll_bytes=3000), workers=2)
    files = worker_files(out)
    assert sorted(files) == [0, 1]
    for worker, names in files.items():
        assert len(names) >= 3, names  # rolled by size, several times
        previous_last = -1
        for name in names:
            first, last = map(int, PART.match(name).groups())
            assert previous_last < first <= last  # disjoint, increasing ranges of epochs
            previous_last = last
            table = pq.read_table(os.path.join(out, f"worker={worker}", name))  # complete
            stored = table.column("epoch").to_pylist()
            assert min(stored) == first and max(stored) == last
            # Every epoch in the file is there whole: all of its records, none elsewhere.
            by_epoch = sorted(zip(stored, table.column("k").to_pylist()))
            want = sorted((e, k) for e in range(first, last + 1) for k in (worker, worker + 2))
            assert by_epoch == want
    assert rows_in(out) == all_rows(epochs, 2)


@pytest.mark.timeout(60)
def test_roll_seconds_commits_the_open_file_of_an_idle_worker(tmp_path):
    out = str(tmp_path / "out")
    roll = 0.5

    def build(scope):
        inp, stream = scope.new_input()
        written = write_parquet(stream, out, columns=["k", "v"], roll_seconds=roll, roll_bytes=None)
        return inp, stream.probe(), written.probe()

    worker = pt.Worker()
    inp, fed, written = worker.dataflow(build)
    for e in range(5):
        inp.send_batch(records(0, 1, e))
        inp.advance_to(e + 1)
    started = time.monotonic()
    worker.step_while(lambda: fed.less_than(5), timeout=10)
    if time.monotonic() - started < roll * 0.8:  # (on a loaded machine this may take longer)
        assert output_files(out) == []  # the epochs are complete, but the file is still open
        assert written.less_equal(0)  # ... and the sink holds epoch 0 for it
    # No more input, no polling by the test: the worker parks, and the sink's own timer rolls
    # the file.  Bounded by wall time.
    deadline = started + roll + 10
    while not output_files(out) and time.monotonic() < deadline:
        worker.step_or_park(1.0)
    committed_after = time.monotonic() - started
    assert [os.path.basename(p) for p in output_files(out)] == ["part-0-4.parquet"]
    assert committed_after >= roll * 0.9
    assert not inp.closed
    worker.step_while(lambda: written.less_than(5), timeout=10)
    assert rows_in(out) == all_rows(range(5), 1)
    inp.close()
    worker.run()
    assert [os.path.basename(p) for p in output_files(out)] == ["part-0-4.parquet"]


def _probe_checking_work(directory, epochs, peers):
    def work(worker):
        def build(scope):
            inp, stream = scope.new_input()
            exchanged = stream.exchange(lambda r: r[0])
            written = write_parquet(
                exchanged, directory, columns=["k", "v"], roll_bytes=1500, roll_seconds=0.05
            )
            return inp, written.probe()

        inp, probe = worker.dataflow(build)
        checked = []  # the epochs the probe had passed, mid-run, when the files were checked
        passed = -1

        def check():
            nonlocal passed
            frontier = list(probe.frontier)
            now = epochs if not frontier else min(frontier)  # every epoch < now is passed
            if now - 1 > passed:
                passed = now - 1
                got = rows_in(directory)
                # Every row of every passed epoch, from every worker, is committed.
                want = all_rows(range(now), peers)
                assert [r for r in got if r[0] < now] == want, (worker.index, now)
                if now < epochs:
                    checked.append(passed)

        deadline = time.monotonic() + 60
        for e in range(epochs):
            inp.send_batch(records(worker.index, peers, e))
            inp.advance_to(e + 1)
            paced = time.monotonic() + 0.01  # 10 ms per epoch: files roll by age mid-run too
            while time.monotonic() < paced:
                worker.step_or_park(max(0.0, paced - time.monotonic()))
                check()
        inp.close()
        while not probe.done():
            assert time.monotonic() < deadline, "the sink did not finish within 60 s"
            worker.step_or_park(0.05)
            check()
        return checked

    return work


@pytest.mark.timeout(120)
def test_a_probe_passing_an_epoch_means_its_rows_are_committed_everywhere(tmp_path):
    out = str(tmp_path / "out")
    epochs = 60
    checked = pt.execute(_probe_checking_work(out, epochs, 2), workers=2)
    for passed in checked:
        assert passed, "the probe never passed an epoch before the end of the stream"
    assert rows_in(out) == all_rows(range(epochs), 2)
    assert all(len(names) > 1 for names in worker_files(out).values())


def _held(worker, name):
    """``[(time, count)]`` of the capabilities this worker's operator ``name`` holds."""
    held = []
    for line in worker.describe(held_only=True).splitlines():
        if line.strip().startswith(name + " capability"):
            m = re.search(r"time (\S+) x(\d+)", line)
            held.append((int(m.group(1)), int(m.group(2))))
    return held


@pytest.mark.timeout(60)
def test_the_sink_holds_one_capability_at_the_least_uncommitted_epoch(tmp_path):
    out = str(tmp_path / "out")

    def build(scope):
        # Epochs 1..99 arrive on one input while the other holds the frontier at 0: all of
        # them are pending at the sink at once.
        data, stream = scope.new_input()
        gate, held_back = scope.new_input()
        merged = stream.concat(held_back)
        written = write_parquet(merged, out, roll_bytes=None, roll_seconds=None, name="Sink")
        return data, gate, written.probe()

    worker = pt.Worker()
    data, gate, probe = worker.dataflow(build)
    for e in range(1, 100):
        data.advance_to(e)
        data.send_batch([e, e + 1000])
    data.advance_to(100)
    for _ in range(20):
        worker.step()
    assert _held(worker, "Sink") == [(1, 1)]  # one token, at the least pending epoch
    assert output_files(out) == [] and probe.less_equal(1)
    gate.advance_to(50)  # epochs 1..49 complete: into the open file, held for it
    for _ in range(20):
        worker.step()
    assert _held(worker, "Sink") == [(1, 1)]
    assert output_files(out) == [] and probe.less_equal(1)
    gate.close()  # epochs 50..99 complete too: still in the open file
    for _ in range(20):
        worker.step()
    assert _held(worker, "Sink") == [(1, 1)]
    data.close()  # the frontier empties: commit, drop the token
    worker.run()
    assert _held(worker, "Sink") == []
    assert [os.path.basename(p) for p in output_files(out)] == ["part-1-99.parquet"]
    table = read_output(out)
    got = sorted(zip(table.column("epoch").to_pylist(), table.column("value").to_pylist()))
    assert got == sorted((e, v) for e in range(1, 100) for v in (e, e + 1000))


def _per_epoch_job(directory, values, **options):
    def build(scope):
        inp, stream = scope.new_input()
        write_parquet(stream, directory, columns=["k", "v"], **options)
        return inp

    worker = pt.Worker()
    inp = worker.dataflow(build)
    for e, v in enumerate(values):
        inp.send_batch([(0, v), (1, v)])
        inp.advance_to(e + 1)
    inp.close()
    worker.run()


def test_per_epoch_keeps_one_file_per_epoch_and_a_replayed_epoch_overwrites_it(tmp_path):
    out = str(tmp_path / "out")
    _per_epoch_job(out, [10, 11, 12], per_epoch=True)
    assert output_files(out) == [epoch_path(os.path.abspath(out), 0, e) for e in range(3)]
    assert rows_in(out) == sorted((e, k, 10 + e) for e in range(3) for k in (0, 1))
    _per_epoch_job(out, [10, 99], per_epoch=True)  # epochs 0 and 1 again, 1 with new rows
    assert rows_in(out) == sorted((e, k, v) for e, v in [(0, 10), (1, 99), (2, 12)] for k in (0, 1))


def test_per_epoch_is_the_default_inside_per_epoch_sinks(tmp_path):
    auto, rolling = str(tmp_path / "auto"), str(tmp_path / "rolling")
    with sinks.per_epoch_sinks():
        _per_epoch_job(auto, [1, 2])
        _per_epoch_job(rolling, [1, 2], per_epoch=False)
    assert [os.path.basename(p) for p in output_files(auto)] == [
        "epoch=0.parquet",
        "epoch=1.parquet",
    ]
    assert [os.path.basename(p) for p in output_files(rolling)] == ["part-0-1.parquet"]
    _per_epoch_job(str(tmp_path / "outside"), [1, 2])  # outside: rolling
    assert [os.path.basename(p) for p in output_files(tmp_path / "outside")] == ["part-0-1.parquet"]


def test_epoch_column_none_stores_no_epoch(tmp_path):
    out = str(tmp_path / "out")
    _per_epoch_job(out, [1, 2], epoch_column=None)
    assert read_output(out).column_names == ["k", "v", "worker"]


@pytest.mark.parametrize("per_epoch", [False, True])
def test_records_that_do_not_fit_the_schema_name_the_sink_and_the_epoch(tmp_path, per_epoch):
    out = str(tmp_path / "out")

    def build(scope):
        inp, stream = scope.new_input()
        write_parquet(stream, out, per_epoch=per_epoch, name="Results")
        return inp

    worker = pt.Worker()
    inp = worker.dataflow(build)
    inp.send_batch([{"x": 1}])  # epoch 0 fixes x: int64
    inp.advance_to(1)
    inp.send_batch([{"x": 2}])
    inp.advance_to(2)
    inp.send_batch([{"x": "not a number"}])
    inp.advance_to(3)
    with pytest.raises(TimelyError, match=r"'Results'.*epoch 2") as info:
        worker.run()
    assert "int64" in str(info.value)

    given = str(tmp_path / "given")

    def with_schema(scope):
        inp, stream = scope.new_input()
        table = stream.map_batch(lambda b: pa.table({"x": [str(r) for r in b]}))
        write_parquet(table, given, schema=pa.schema([("x", pa.int32())]), per_epoch=per_epoch)
        return inp

    worker = pt.Worker()
    inp = worker.dataflow(with_schema)
    inp.send_batch([1, 2])
    inp.advance_to(7)
    inp.send_batch(["seven"])
    inp.close()
    with pytest.raises(TimelyError, match=r"'WriteParquet'.*epoch 7"):
        worker.run()


def test_times_must_be_int(tmp_path):
    def build(scope):
        inp, stream = scope.new_input()
        write_parquet(stream, str(tmp_path), name="Sink")
        return inp

    worker = pt.Worker()
    inp = worker.dataflow(build, timestamp=ProductDomain(int, int))
    inp.send(1)
    inp.close()
    with pytest.raises(TimelyError, match="'Sink'.*times must be int"):
        worker.run()


def test_rolling_files_are_staged_and_their_open_file_is_never_committed(tmp_path, monkeypatch):
    monkeypatch.setattr(sinks, "ROW_GROUP_BYTES", 1)  # a row group per epoch: the file is open
    out = str(tmp_path / "out")
    announced = []
    with staging.staged("attempt-1", announced.append):

        def build(scope):
            inp, stream = scope.new_input()
            write_parquet(stream, out, roll_bytes=None, roll_seconds=None)
            return inp

        worker = pt.Worker()
        inp = worker.dataflow(build)
    assert announced == [os.path.abspath(out)]
    folder = os.path.join(os.path.abspath(out), staging.STAGING, "attempt-1", "worker=0")
    for e in range(3):
        inp.send_batch([e])
        inp.advance_to(e + 1)
        worker.step()
        worker.step()
    assert os.listdir(folder) == [".part-0.parquet.tmp"]  # open, hidden
    # A failed attempt's open file is not committed (the driver discards the attempt).
    assert staging.commit(out, "attempt-1") == 0
    assert output_files(out) == []

    with staging.staged("attempt-2", announced.append):
        worker = pt.Worker()
        inp = worker.dataflow(build)
    for e in range(3):
        inp.send_batch([e])
        inp.advance_to(e + 1)
    inp.close()
    worker.run()
    assert output_files(out) == []  # staged, not in place yet
    assert staging.commit(out, "attempt-2") == 1
    assert [os.path.relpath(p, out) for p in output_files(out)] == ["worker=0/part-0-2.parquet"]
    # The three epochs completed together (no step in between): one table, one row group.
    assert pq.ParquetFile(output_files(out)[0]).metadata.num_row_groups == 1
    assert sorted(read_output(out).column("value").to_pylist()) == [0, 1, 2]
    assert read_output(out).column("epoch").to_pylist() == [0, 1, 2]
    assert sorted(os.listdir(out)) == ["worker=0"]


def test_roll_limits_are_checked(tmp_path):
    def build(scope, **options):
        _inp, stream = scope.new_input()
        write_parquet(stream, str(tmp_path), **options)

    with pytest.raises(ValueError, match="roll_bytes"):
        pt.Worker().dataflow(lambda scope: build(scope, roll_bytes=0))
    with pytest.raises(ValueError, match="roll_seconds"):
        pt.Worker().dataflow(lambda scope: build(scope, roll_seconds=-1))


def test_a_parquet_capture_of_many_epochs_is_one_file_of_few_row_groups(tmp_path):
    from pytimely.capture import replay_into
    from pytimely.spark import capture_parquet, capture_readers

    out = str(tmp_path / "capture")

    def build(scope):
        inp, stream = scope.new_input()
        capture_parquet(stream, out)
        return inp

    worker = pt.Worker()
    inp = worker.dataflow(build)
    for epoch in range(3_600):  # a frontier change, hence a flush, per epoch
        inp.send_batch([epoch])
        inp.advance_to(epoch + 1)
        worker.step()
    inp.close()
    worker.run()
    (path,) = [os.path.join(b, n) for b, _d, names in os.walk(out) for n in names]
    assert pq.ParquetFile(path).metadata.num_row_groups <= 2  # not one per epoch

    def replay(scope):
        return replay_into(capture_readers(out), scope).capture()

    replayed = pt.example(replay).extract()
    assert replayed == [(e, [e]) for e in range(3_600)]
