"""pytimely.io over folders: CSV and Parquet sources, watched folders, the Parquet sink.

As in tests/test_io.py, the exactly-once checks read what a reader of the sink sees (here
``pyarrow.dataset`` over the Parquet sink's folder, which skips ``_staging/``) and use running
totals per user: user ``u``'s published totals must be exactly ``1..n_u``.
"""

from __future__ import annotations

import collections
import csv
import json
import os
import sys
import threading
import time

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import pytimely as pt
from pytimely import io
from pytimely.errors import TimelyError, WorkerFailure

sys.path.insert(0, os.path.dirname(__file__))
import io_job  # noqa: E402

pytestmark = pytest.mark.timeout(180)

SMALL_EPOCHS = dict(snapshot_every=2, epoch_seconds=0.05, epoch_records=200, read_batch=50)
# A watched folder, listed often, that ends the job after this many quiet seconds.
WATCH = dict(follow=True, poll_seconds=0.05)


# -- input and output ------------------------------------------------------------------------


def _user(f: int, i: int, users: int) -> str:
    return f"u{(f * 7919 + i * 104729) % users}"


def _publish(path: str, write) -> None:
    """Write ``path`` the way a producer for a watched folder should: hidden, then renamed."""
    folder, name = os.path.split(path)
    hidden = os.path.join(folder, f".{name}.tmp")
    write(hidden)
    os.replace(hidden, path)


def write_csv_clicks(folder: str, files, per_file: int, users: int) -> collections.Counter:
    """CSV files ``clicks-<f>.csv`` (``files``: how many, or which ``f``) with a header and a
    ``note`` that now and then holds a quoted newline, delimiter and quote."""
    os.makedirs(folder, exist_ok=True)
    counts: collections.Counter = collections.Counter()
    for f in range(files) if isinstance(files, int) else files:
        rows = []
        for i in range(per_file):
            user = _user(f, i, users)
            counts[user] += 1
            note = 'said "hi",\nthen left' if i % 7 == 0 else "ok"
            rows.append([user, f, i, note])

        def write(path, rows=rows):
            with open(path, "w", newline="") as out:
                w = csv.writer(out)
                w.writerow(["user", "file", "i", "note"])
                w.writerows(rows)

        _publish(os.path.join(folder, f"clicks-{f:02d}.csv"), write)
    return counts


def write_parquet_clicks(folder: str, files, per_file: int, users: int) -> collections.Counter:
    """Parquet files ``clicks-<f>.parquet`` in row groups of 128 rows."""
    os.makedirs(folder, exist_ok=True)
    counts: collections.Counter = collections.Counter()
    for f in range(files) if isinstance(files, int) else files:
        users_ = [_user(f, i, users) for i in range(per_file)]
        counts.update(users_)
        table = pa.table({"user": users_, "file": [f] * per_file, "i": list(range(per_file))})
        _publish(
            os.path.join(folder, f"clicks-{f:02d}.parquet"),
            lambda path, table=table: pq.write_table(table, path, row_group_size=128),
        )
    return counts


def write_jsonl_clicks(folder: str, files, per_file: int, users: int) -> collections.Counter:
    os.makedirs(folder, exist_ok=True)
    counts: collections.Counter = collections.Counter()
    for f in range(files) if isinstance(files, int) else files:
        lines = []
        for i in range(per_file):
            user = _user(f, i, users)
            counts[user] += 1
            lines.append(json.dumps({"user": user, "file": f, "i": i}) + "\n")

        def write(path, lines=lines):
            with open(path, "w") as out:
                out.writelines(lines)

        _publish(os.path.join(folder, f"clicks-{f:02d}.jsonl"), write)
    return counts


WRITERS = {"csv": write_csv_clicks, "parquet": write_parquet_clicks, "jsonl": write_jsonl_clicks}


def parquet_totals(out: str) -> dict[str, list[int]]:
    """Every published total by user, sorted, as a reader of the folder sees them."""
    found: dict[str, list[int]] = collections.defaultdict(list)
    if not os.path.isdir(out):
        return {}
    for row in ds.dataset(out, format="parquet").to_table().to_pylist():
        found[row["user"]].append(row["total"])
    return {u: sorted(ts) for u, ts in found.items()}


def exactly_once(out: str, clicks) -> None:
    got = parquet_totals(out)
    wrong = {
        u: got.get(u, [])[:5] for u, n in clicks.items() if got.get(u) != list(range(1, n + 1))
    }
    assert not wrong, f"users whose totals are not 1..n (first five shown): {wrong}"
    assert set(got) == set(clicks)
    assert not os.listdir(os.path.join(out, "_staging")), "staged files left after the job"


def totals_sink(out: str) -> io.ParquetSink:
    return io.ParquetSink(out, columns=["user", "total"])


# -- CSV ---------------------------------------------------------------------------------------

TRICKY_CSV = (
    "\ufeffname,note,n\r\n"
    'ann,"two\nlines",1\r\n'
    "\r\n"  # a blank line: skipped
    'bob,"a, b and ""c""",2\n'
    'cé,"",3\n'
    'dan,"\n\nstarts with newlines",4\n'
    "eve,last,5"  # no newline at the end: a complete record of a finished file
)


def test_csv_records_reopen_exactly_at_every_offset(tmp_path):
    (tmp_path / "t.csv").write_bytes(TRICKY_CSV.encode("utf-8"))
    expected = list(csv.DictReader(open(tmp_path / "t.csv", newline="", encoding="utf-8-sig")))
    assert len(expected) == 5 and expected[0]["note"] == "two\nlines"
    source = io.DirectorySource(tmp_path, "csv")
    for limit in (1, 2, 3, 10):
        reader = source.open("t.csv", None)
        got: list = []
        while not reader.exhausted():
            got.extend(reader.read(limit))
            at = reader.offset()
            again = source.open("t.csv", at)
            rest = []
            while not again.exhausted():
                rest.extend(again.read(100))
            assert got + rest == expected, (limit, at)
            again.close()
        assert got == expected
        assert reader.offset() == (tmp_path / "t.csv").stat().st_size
        reader.close()


def test_a_followed_csv_waits_for_the_header_and_for_a_record_still_being_written(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("user,no")  # the header is not complete yet
    # A long poll: the reader keeps the file open and reads what was appended at once.
    reader = io.DirectorySource(tmp_path, "csv", follow=True, poll_seconds=60).open("t.csv", None)
    assert reader.read(10) == [] and reader.offset() == 0 and not reader.exhausted()
    with open(path, "a") as f:
        f.write('te\na,"first\n')  # the header, then a record with an open quote
    assert reader.read(10) == [] and reader.offset() == len("user,note\n")
    with open(path, "a") as f:
        f.write('line"\nb,ok\n')
    assert reader.read(10) == [{"user": "a", "note": "first\nline"}, {"user": "b", "note": "ok"}]
    assert reader.offset() == path.stat().st_size and not reader.exhausted()
    reader.close()


def test_csv_errors_name_the_source_the_file_and_the_record(tmp_path):
    (tmp_path / "wide.csv").write_text("a,b\n1,2\n1,2,3\n")
    (tmp_path / "open.csv").write_text('a,b\n1,"never closed\n')
    source = io.DirectorySource(tmp_path, "csv", name="clicks")
    with pytest.raises(
        TimelyError, match=r"source 'clicks': .*wide\.csv: the record at byte 8 has 3"
    ):
        source.open("wide.csv", None).read(10)
    with pytest.raises(TimelyError, match=r"open\.csv: the file ends inside a quoted field"):
        source.open("open.csv", None).read(10)
    with pytest.raises(ValueError, match="format must be one of"):
        io.DirectorySource(tmp_path, "xml")
    with pytest.raises(ValueError, match="only for a followed folder"):
        io.DirectorySource(tmp_path, "csv", stop_when_idle=1.0)


# -- Parquet -----------------------------------------------------------------------------------


def test_parquet_rows_reopen_exactly_and_skip_whole_row_groups(tmp_path, monkeypatch):
    table = pa.table({"x": list(range(50)), "s": [f"r{i}" for i in range(50)]})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=7)
    expected = table.to_pylist()
    asked: list[list[int]] = []
    iter_batches = pq.ParquetFile.iter_batches

    def spy(self, *args, row_groups=None, **kwargs):
        asked.append(list(row_groups))
        return iter_batches(self, *args, row_groups=row_groups, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    source = io.DirectorySource(tmp_path, "parquet")
    reader = source.open("t.parquet", None)
    got: list = []
    while not reader.exhausted():
        got.extend(reader.read(3))
        at = reader.offset()
        asked.clear()
        again = source.open("t.parquet", at)
        rest = again.read(100)
        assert got + rest == expected and again.exhausted()
        if at < 50:  # reopened at row `at`: the row groups before its own are never read
            assert asked == [list(range(at // 7, 8))]
    assert got == expected and reader.offset() == 50
    only_x = io.DirectorySource(tmp_path, "parquet", columns=["x"]).open("t.parquet", 48)
    assert only_x.read(10) == [{"x": 48}, {"x": 49}]
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(TimelyError, match=r"source 'files': .*bad\.parquet: cannot be read"):
        source.open("bad.parquet", None).read(10)


def test_hidden_files_and_folders_are_not_partitions(tmp_path):
    for name in ("a.csv", ".b.csv", "_c.csv", "d.csv.tmp", ".e.csv.tmp"):
        (tmp_path / name).write_text("x\n1\n")
    (tmp_path / "f.csv").mkdir()
    assert io.DirectorySource(tmp_path, "csv").partitions() == ["a.csv"]
    with pytest.raises(TimelyError, match=r"source 'files': no directory"):
        io.DirectorySource(tmp_path / "nowhere", "csv").partitions()


# -- jobs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_job_over_csv_or_parquet_files_publishes_every_result_once(tmp_path, fmt, workers):
    inp, out, ck = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "ck")
    clicks = WRITERS[fmt](inp, 3, 400, 20)
    build = io_job.make_build(inp, out, source=io.DirectorySource(inp, fmt), sink=totals_sink(out))
    job = io.job(build, checkpoint=ck, **SMALL_EPOCHS)
    reports = pt.execute(job, workers=workers, timeout=120)
    assert sum(r.records for r in reports) == 1200
    assert all(r.checkpoints >= 2 for r in reports)
    exactly_once(out, clicks)
    published = io.ParquetSink(out).published()
    assert published and len(published) <= sum(r.checkpoints for r in reports)
    again = pt.execute(job, workers=workers, timeout=120)  # complete: nothing is redone
    assert all(r.complete and r.records == 0 for r in again)
    assert io.ParquetSink(out).published() == published
    exactly_once(out, clicks)


def test_a_watched_folder_picks_up_files_added_while_the_job_runs(tmp_path):
    """Two workers watch a folder of CSV files.  Once the job has published results (it is
    running), a thread adds three files and appends records to a file already read; the job
    reads them all, each on the worker its name deals it to, and ends once the folder has been
    quiet for ``stop_when_idle`` seconds."""
    inp, out, where, ck = (str(tmp_path / d) for d in ("in", "out", "where", "ck"))
    clicks = write_csv_clicks(inp, 2, 300, 20)
    source = io.DirectorySource(inp, "csv", stop_when_idle=3.0, **WATCH)

    def build(scope):
        rows = io.read(scope, source)
        totals = rows.map(lambda c: (c["user"], 1)).stateful_map(
            int, lambda n, one: (n + one, n + one), name="Totals"
        )
        io.write(totals, totals_sink(out))
        index = scope.index
        placed = rows.map(lambda c: (f"clicks-{int(c['file']):02d}.csv", index))
        io.write(placed, io.ParquetSink(where, name="where", columns=["file", "worker"]))

    added = {"while_running": False}

    def producer():
        deadline = time.monotonic() + 60
        while not io.ParquetSink(out).published():  # the job is running and has published
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)
        added["while_running"] = True
        for f in (2, 3, 4):
            clicks.update(write_csv_clicks(inp, [f], 200, 20))
            time.sleep(0.3)
        with open(os.path.join(inp, "clicks-00.csv"), "a", newline="") as grown:
            w = csv.writer(grown)
            for i in range(300, 350):
                w.writerow([_user(0, i, 20), 0, i, "appended,\nlater"])
                clicks[_user(0, i, 20)] += 1

    thread = threading.Thread(target=producer)
    thread.start()
    try:
        started = time.monotonic()
        reports = pt.execute(io.job(build, checkpoint=ck, **SMALL_EPOCHS), workers=2, timeout=120)
    finally:
        thread.join(timeout=70)
    assert added["while_running"], "the job published nothing while it ran"
    assert time.monotonic() - started >= 3.0  # it waited for the folder to be quiet
    assert sum(r.records for r in reports) == 2 * 300 + 3 * 200 + 50
    exactly_once(out, clicks)
    placed = collections.defaultdict(set)
    for row in ds.dataset(where, format="parquet").to_table().to_pylist():
        placed[row["file"]].add(row["worker"])
    assert len(placed) == 5
    assert all(workers == {io.owner(name, 2)} for name, workers in placed.items()), placed


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_watched_folder_fails_and_restarts_on_other_worker_counts_exactly_once(tmp_path, fmt):
    """A watched folder on 2 workers fails in the middle (an injected error); files are added;
    the restart on 3 workers reads them and fails in one of them; the run on 1 worker finishes:
    each result is published to the Parquet sink once, whatever the dealing of the files."""
    inp, out, ck = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "ck")
    write = WRITERS[fmt]
    clicks = write(inp, 4, 1000, 30)
    restored = []
    for fail_at, workers, new_files in (("1:900", 2, [4, 5]), ("5:700", 3, [6]), (None, 1, [])):
        source = io.DirectorySource(inp, fmt, stop_when_idle=1.0, **WATCH)
        build = io_job.make_build(inp, out, fail_at=fail_at, source=source, sink=totals_sink(out))
        job = io.job(build, checkpoint=ck, **SMALL_EPOCHS)
        if fail_at is None:
            reports = pt.execute(job, workers=workers, timeout=120)
            restored.append(reports[0].restored)
            assert reports[0].records > 0
        else:
            with pytest.raises(WorkerFailure, match="injected failure"):
                pt.execute(job, workers=workers, timeout=120)
            restored.append(io.CheckpointStore(ck, "clicks_totals").latest())
        clicks.update(write(inp, new_files, 1000, 30))
    assert restored[0] is not None  # the first run committed a checkpoint before it failed
    assert restored[2] is not None
    exactly_once(out, clicks)


# -- growing sources in the driver -----------------------------------------------------------


def test_growing_partitions_are_dealt_by_name_so_a_new_one_moves_no_other():
    names = [f"clicks-{k:03d}.csv" for k in range(40)]
    for peers in (1, 2, 3, 5):
        before = {n: io.owner(n, peers) for n in names[:20]}
        for index in range(peers):  # every name has exactly one owner, the one owner() says
            assert all(before[n] == index for n in io.owned(names[:20], index, peers, stable=True))
        dealt = [io.owned(names, i, peers, stable=True) for i in range(peers)]
        assert sorted(n for mine in dealt for n in mine) == sorted(names)
        for index, mine in enumerate(dealt):  # the 20 new names moved none of the old ones
            assert [n for n in mine if n in before] == [n for n in names[:20] if before[n] == index]
    assert len({io.owner(n, 3) for n in names}) == 3  # and they do spread
    assert io.owned(["b", "a", "c"], 0, 2) == ["a", "c"]  # a fixed set: sorted round-robin


class _Growing(io.Source):
    """Partitions ``p0, p1, ...``: each listing adds one, up to ``total``; each holds ``size``
    records ``(partition, i)``.  Says it is exhausted only once all are listed."""

    name = "growing"
    relist_seconds = 0.05

    def __init__(self, total: int, size: int) -> None:
        self.total, self.size, self.listings = total, size, []

    def partitions(self):
        self.listings.append(time.monotonic())
        listed = min(self.total, len(self.listings))
        return [f"p{k}" for k in range(listed)]

    def open(self, partition, offset):
        return _Items([(partition, i) for i in range(self.size)], offset or 0)

    def exhausted(self):
        return len(self.listings) >= self.total


class _Items(io.PartitionReader):
    def __init__(self, items, at):
        self.items, self.at = items, at

    def read(self, limit):
        batch = self.items[self.at : self.at + limit]
        self.at += len(batch)
        return batch

    def offset(self):
        return self.at

    def exhausted(self):
        return self.at >= len(self.items)


def test_a_growing_source_is_listed_every_interval_and_ends_the_job_only_when_it_says_so(
    tmp_path,
):
    """Every partition is read at once, so the readers are all exhausted long before the
    source says it is: the job must keep listing (no more often than ``relist_seconds``) and
    read each partition as it appears, then end."""
    out = str(tmp_path / "out")
    source = _Growing(total=8, size=5)

    def build(scope):
        io.write(io.read(scope, source), io.JsonLinesSink(out))

    started = time.monotonic()
    (report,) = pt.execute(io.job(build, checkpoint=str(tmp_path / "ck"), **SMALL_EPOCHS))
    took = time.monotonic() - started
    got = sorted(
        tuple(json.loads(line))
        for name in io.JsonLinesSink(out).published()
        for line in open(os.path.join(out, name))
    )
    assert got == sorted((f"p{k}", i) for k in range(8) for i in range(5))
    assert report.records == 40
    listings = source.listings
    gaps = [b - a for a, b in zip(listings, listings[1:])]
    # One listing at the start, one per interval, and one last when the source says it is
    # exhausted (which may follow the one before at once).
    assert sum(g < 0.05 for g in gaps) <= 1, gaps
    assert 8 <= len(listings) <= 9 and took >= 7 * 0.05


def test_a_watched_empty_folder_ends_when_idle(tmp_path):
    inp, out = tmp_path / "in", str(tmp_path / "out")
    inp.mkdir()

    def build(scope):
        source = io.JsonLinesSource(inp, follow=True, poll_seconds=0.05, stop_when_idle=0.5)
        io.write(io.read(scope, source), totals_sink(out))

    started = time.monotonic()
    reports = pt.execute(io.job(build), workers=2, timeout=60)
    assert 0.5 <= time.monotonic() - started < 30
    assert [r.records for r in reports] == [0, 0]


# -- the Parquet sink ----------------------------------------------------------------------------


def test_parquet_sink_turns_dicts_tuples_and_values_into_rows(tmp_path):
    def stage(sink, records):
        writer = sink.writer(0, 1, "a")
        writer.write(records)
        staged = writer.stage()
        sink.publish(staged)
        return pq.read_table(os.path.join(sink.folder, staged["file"]))

    table = stage(io.ParquetSink(tmp_path / "d"), [{"u": "a", "n": 1}, {"u": "b"}])
    assert table.to_pylist() == [{"u": "a", "n": 1}, {"u": "b", "n": None}]
    schema = pa.schema([("u", pa.string()), ("n", pa.int32())])
    table = stage(io.ParquetSink(tmp_path / "t", schema=schema), [("a", 1), ("b", 2)])
    assert table.schema == schema and table.column("n").to_pylist() == [1, 2]
    table = stage(io.ParquetSink(tmp_path / "v", columns=["word"]), ["x", "y"])
    assert table.to_pylist() == [{"word": "x"}, {"word": "y"}]
    with pytest.raises(TimelyError, match=r"sink 'parquet': the records are tuples: name"):
        stage(io.ParquetSink(tmp_path / "e"), [("a", 1)])
    with pytest.raises(TimelyError, match=r"sink 'totals': records cannot be written to .*_sta"):
        stage(io.ParquetSink(tmp_path / "f", name="totals", schema=schema), [("a", "not a number")])
    # A writer's first row group fixes its types: a later row that does not fit names them.
    sink = io.ParquetSink(tmp_path / "g", columns=["u", "n"], row_group_rows=2)
    writer = sink.writer(0, 1, "a")
    writer.write([("a", 1), ("b", 2)])
    with pytest.raises(TimelyError, match="the first rows fixed the types"):
        writer.write([("c", "three"), ("d", "four")])


def test_parquet_sink_rolls_row_groups_and_files_per_stage(tmp_path):
    sink = io.ParquetSink(tmp_path, columns=["i"], row_group_rows=10)
    writer = sink.writer(3, 4, "run")
    writer.write([(i,) for i in range(25)])
    first = writer.stage()
    assert writer.stage() is None  # nothing written since
    writer.write([(25,)])
    second = writer.stage()
    assert (first, second) == ({"file": "run-w3-000000.parquet"}, {"file": "run-w3-000001.parquet"})
    staged = pq.ParquetFile(os.path.join(sink.staging, first["file"]))
    assert staged.metadata.num_rows == 25 and staged.metadata.num_row_groups >= 2
    assert sorted(os.listdir(sink.staging)) == [first["file"], second["file"]]  # no temporaries


def test_parquet_sink_publishes_once_even_concurrently_and_discards_failed_attempts(tmp_path):
    sink = io.ParquetSink(tmp_path, columns=["u", "n"])
    kept = sink.writer(0, 2, "ok")
    kept.write([("a", 1)])
    keep = kept.stage()
    failed = sink.writer(1, 2, "failed")
    failed.write([("b", 1)])
    failed.stage()  # staged, never committed
    torn = sink.writer(1, 2, "torn")
    torn.write([("c", 1)] * 70_000)  # a row group written into a hidden temporary file
    torn.close()  # the attempt died before it staged
    assert any(n.startswith(".") for n in os.listdir(sink.staging))
    sink.discard([keep])
    assert os.listdir(sink.staging) == [keep["file"]]
    assert ds.dataset(str(tmp_path), format="parquet").to_table().num_rows == 0  # unpublished

    errors: list = []
    go = threading.Barrier(4)

    def publish():
        try:
            go.wait(timeout=10)
            sink.publish(keep)
        except Exception as exc:  # noqa: BLE001 -- collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=publish) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert not errors and sink.published() == [keep["file"]]
    sink.publish(keep)  # once more, later: nothing to do
    assert ds.dataset(str(tmp_path), format="parquet").to_table().to_pylist() == [
        {"u": "a", "n": 1}
    ]
    with pytest.raises(TimelyError, match=r"sink 'parquet': staged file .* is gone"):
        sink.publish({"file": "never-staged.parquet"})
