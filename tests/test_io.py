"""pytimely.io: jobs fed by replayable sources into exactly-once sinks, with checkpoints.

The exactly-once checks read the sink's published files only (what a reader sees) and use
running totals per user: user ``u``'s published totals must be exactly ``1..n_u``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import pytimely as pt
from pytimely import io
from pytimely.errors import OperatorError, TimelyError, WorkerFailure

sys.path.insert(0, os.path.dirname(__file__))
import io_job  # noqa: E402
from object_store import object_store  # noqa: E402

pytestmark = pytest.mark.timeout(180)

SCRIPT = os.path.join(os.path.dirname(__file__), "io_job.py")
SMALL_EPOCHS = dict(snapshot_every=2, epoch_seconds=0.05, epoch_records=200, read_batch=50)


def _exactly_once(out: str, clicks) -> None:
    got = io_job.totals_by_user(out)
    wrong = {
        u: got.get(u, [])[:5] for u, n in clicks.items() if got.get(u) != list(range(1, n + 1))
    }
    assert not wrong, f"users whose totals are not 1..n (first five shown): {wrong}"
    assert set(got) == set(clicks)
    assert not os.listdir(os.path.join(out, "_staging")), "staged files left after the job"


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("checkpointed", [False, True])
def test_a_job_publishes_every_result_once(tmp_path, workers, checkpointed):
    clicks = io_job.write_clicks(str(tmp_path / "in"), 3, 400, 20)
    out = str(tmp_path / "out")
    checkpoint = str(tmp_path / "ck") if checkpointed else None
    job = io.job(
        io_job.make_build(str(tmp_path / "in"), out), checkpoint=checkpoint, **SMALL_EPOCHS
    )
    reports = pt.execute(job, workers=workers)
    assert sum(r.records for r in reports) == 1200
    if checkpointed:
        assert all(r.checkpoints >= 2 for r in reports)  # intermediate ones and the final one
    _exactly_once(out, clicks)
    if checkpointed:  # run again: the checkpoint says the job is complete; nothing is redone
        again = pt.execute(job, workers=workers)
        assert all(r.complete and r.records == 0 for r in again)
        _exactly_once(out, clicks)


def test_failures_and_restarts_on_other_worker_counts_publish_every_result_once(tmp_path):
    """A worker fails in the middle (an injected error) on 2 workers, the restart fails again
    on 3, the third run on 1 worker finishes: every click counted once, no total lost."""
    inp, out, ck = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "ck")
    clicks = io_job.write_clicks(inp, 4, 1500, 30)
    restored = []
    for fail_at, workers in (("3:1100", 2), ("0:1400", 3), (None, 1)):
        job = io.job(io_job.make_build(inp, out, fail_at=fail_at), checkpoint=ck, **SMALL_EPOCHS)
        if fail_at is None:
            reports = pt.execute(job, workers=workers)
            restored.append(reports[0].restored)
        else:
            with pytest.raises(WorkerFailure, match="injected failure"):
                pt.execute(job, workers=workers)
    assert restored[0] is not None and restored[0] > 0  # it did not start from nothing
    _exactly_once(out, clicks)


@pytest.mark.parametrize("event_time", [False, True], ids=["epochs", "event-time"])
def test_a_worker_with_nothing_to_read_still_takes_its_part_in_every_checkpoint(
    tmp_path, event_time
):
    """Three workers, two files: the third reads nothing, but the others send it keys, so its
    state is in every checkpoint; checkpoints must commit while the others read, and a failure
    late in the run restarts from a late one, not from the start."""
    inp, out, ck = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "ck")
    clicks = io_job.write_clicks(inp, 2, 1500, 30)
    epochs = dict(SMALL_EPOCHS)
    if event_time:
        epochs.update(snapshot_every=100, start=0)
    restored = []
    for fail_at in ("1:1400", None):
        build = io_job.make_build(inp, out, fail_at=fail_at, event_time=event_time)
        job = io.job(build, checkpoint=ck, timeout=60, **epochs)
        if fail_at is None:
            restored = [r.restored for r in pt.execute(job, workers=3)]
        else:
            with pytest.raises(WorkerFailure, match="injected failure"):
                pt.execute(job, workers=3)
    assert all(r is not None and r >= (700 if event_time else 4) for r in restored), restored
    _exactly_once(out, clicks)


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def _wait_for_a_commit(ck: str, proc: subprocess.Popen, deadline: float) -> None:
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the job ended before it could be killed"
        if os.path.isdir(ck) and any(
            os.path.exists(os.path.join(ck, d, "_committed.json")) for d in os.listdir(ck)
        ):
            return
        time.sleep(0.02)
    raise AssertionError("no checkpoint committed within the time allowed")


@pytest.mark.parametrize("victim", ["one worker", "every process"])
def test_a_job_killed_with_sigkill_restarts_on_another_worker_count_exactly_once(tmp_path, victim):
    inp, out, ck = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "ck")
    clicks = io_job.write_clicks(inp, 4, 1500, 30)
    proc = subprocess.Popen(
        [sys.executable, SCRIPT, inp, out, ck, "2", "0.0005"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        _wait_for_a_commit(ck, proc, time.monotonic() + 60)
        time.sleep(0.3)  # into the middle of a later epoch
        if victim == "one worker":
            workers = _children(proc.pid)
            assert workers, "no worker processes found"
            os.kill(workers[-1], signal.SIGKILL)
        else:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != 0
    published_before = sum(map(len, io_job.totals_by_user(out).values()))
    assert 0 < published_before < sum(clicks.values())  # killed in the middle
    done = subprocess.run(
        [sys.executable, SCRIPT, inp, out, ck, "3"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    reports = json.loads(done.stdout.splitlines()[-1])
    assert all(r["restored"] is not None for r in reports)
    _exactly_once(out, clicks)


def _run_job(inp, out, ck, workers, crash=None, timeout=120):
    env = dict(os.environ)
    env.pop("IO_JOB_CRASH_AFTER", None)
    if crash is not None:
        env["IO_JOB_CRASH_AFTER"] = crash
    return subprocess.run(
        [sys.executable, SCRIPT, inp, out, ck, str(workers)],
        capture_output=True, text=True, timeout=timeout, env=env,
    )  # fmt: skip


@pytest.mark.parametrize(
    "crashes",
    [
        ["stage:3"],
        ["write_part:3"],
        ["commit:2"],  # committed, nothing of it published yet
        ["publish:3"],  # in the middle of publishing one checkpoint's files
        ["commit:2", "publish:1"],  # and the restart dies while it publishes what that left
    ],
    ids=lambda crashes: "then".join(c.split(":")[0] for c in crashes),
)
def test_a_death_at_every_phase_of_a_checkpoint_leaves_every_result_once(tmp_path, crashes):
    """A process dies (``os._exit``, as a SIGKILL leaves it) right after one phase of a
    checkpoint's commit; the restarts, on other worker counts, publish every result once."""
    inp, out, ck = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "ck")
    clicks = io_job.write_clicks(inp, 4, 600, 30)
    for crash, workers in zip(crashes, (2, 3), strict=False):
        died = _run_job(inp, out, ck, workers, crash)
        assert died.returncode != 0, f"the job did not die at {crash}: {died.stdout[-500:]}"
    assert sum(map(len, io_job.totals_by_user(out).values())) < sum(clicks.values())
    done = _run_job(inp, out, ck, 1)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1])[0]["restored"] is not None
    _exactly_once(out, clicks)


@pytest.mark.parametrize("whole_objects", [False, True], ids=["moved-into-place", "uploaded"])
def test_checkpoints_on_a_pyarrow_filesystem_survive_failures_and_rescaling(
    tmp_path, whole_objects
):
    """The checkpoint lives on a ``pyarrow.fs`` filesystem (written through pyarrow only, as
    it would be on HDFS, or on S3 with ``whole_objects``: objects uploaded in place, to a
    folder that shows an upload only once it is whole, as an object store does)."""
    import pyarrow.fs

    from pytimely.io.storage import ArrowStorage

    inp, out = str(tmp_path / "in"), str(tmp_path / "out")
    remote = tmp_path / "remote"
    remote.mkdir()
    if whole_objects:
        (tmp_path / "uploading").mkdir()
        fs = object_store(str(remote), str(tmp_path / "uploading"))
    else:
        fs = pyarrow.fs.SubTreeFileSystem(str(remote), pyarrow.fs.LocalFileSystem())
    storage = ArrowStorage(fs, whole_objects=whole_objects)
    clicks = io_job.write_clicks(inp, 4, 1000, 30)
    for fail_at, workers in (("2:700", 2), (None, 3)):
        job = io.job(
            io_job.make_build(inp, out, fail_at=fail_at),
            checkpoint="jobs/clicks",
            filesystem=storage,
            **SMALL_EPOCHS,
        )
        if fail_at is None:
            reports = pt.execute(job, workers=workers)
            assert all(r.restored is not None and r.restored > 0 for r in reports)
        else:
            with pytest.raises(WorkerFailure, match="injected failure"):
                pt.execute(job, workers=workers)
    _exactly_once(out, clicks)
    kept = sorted(os.listdir(remote / "jobs" / "clicks"))
    assert kept[0].startswith("epoch=") and kept[-1] == "job.json"
    assert len(kept) == 2, f"older checkpoints are retired: {kept}"
    assert not [n for n in os.listdir(remote / "jobs" / "clicks" / kept[0]) if n.startswith(".")]


def test_a_folder_created_while_it_is_listed_lists_as_empty(tmp_path):
    """pyarrow's local filesystem lists a folder, fails (not there), then finds it there
    (another worker made it meanwhile) and raises, ``allow_not_found`` notwithstanding: seen
    as one worker of a job restoring while another wrote the first checkpoint.  The folder
    was not there when listed, so the listing is empty."""
    import pyarrow.fs as pafs
    from object_store import _ObjectStoreHandler

    from pytimely.io.storage import ArrowStorage

    class CreatedWhileListed(_ObjectStoreHandler):
        def get_file_info_selector(self, selector):
            self.fs.create_dir(selector.base_dir, recursive=True)  # the other worker
            raise FileNotFoundError(f"Cannot list directory '{selector.base_dir}'")

    (tmp_path / "spare").mkdir()
    storage = ArrowStorage(pafs.PyFileSystem(CreatedWhileListed(str(tmp_path), "spare")))
    assert storage.list("jobs/clicks") == []
    assert (tmp_path / "jobs" / "clicks").is_dir()
    (tmp_path / "jobs" / "clicks" / "job.json").write_text("{}")
    plain = ArrowStorage(pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem()))
    assert plain.list("jobs/clicks") == ["job.json"] and plain.list("jobs/none") == []


def test_a_checkpoint_uri_pyarrow_cannot_open_is_named(tmp_path):
    job = io.job(io_job.make_build(str(tmp_path), str(tmp_path)), checkpoint="nosuch://x/y")
    with pytest.raises(TimelyError, match="nosuch://x/y"):
        pt.execute(job)


# -- errors ------------------------------------------------------------------------------------


def test_read_and_write_outside_a_job_say_how_to_run_one():
    with pytest.raises(TimelyError, match=r"inside a job's build function.*io\.job"):
        pt.example(lambda scope: io.read(scope, io.JsonLinesSource("/nonexistent")))


def test_another_jobs_checkpoint_is_refused_and_left_alone(tmp_path):
    inp, out, ck = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "ck")
    io_job.write_clicks(inp, 1, 10, 2)
    pt.execute(io.job(io_job.make_build(inp, out), checkpoint=ck, **SMALL_EPOCHS))
    before = sorted(os.listdir(ck))

    def other(scope):
        io.write(io.read(scope, io.JsonLinesSource(inp)), io.JsonLinesSink(out))

    with pytest.raises(io.CheckpointError, match="belongs to job 'clicks_totals'"):
        pt.execute(io.job(other, checkpoint=ck))
    assert sorted(os.listdir(ck)) == before


def test_a_newer_or_corrupt_checkpoint_is_refused(tmp_path):
    inp, out, ck = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "ck")
    io_job.write_clicks(inp, 2, 300, 5)
    failing = io.job(io_job.make_build(inp, out, fail_at="1:250"), checkpoint=ck, **SMALL_EPOCHS)
    with pytest.raises(OperatorError, match="injected failure"):
        pt.execute(failing)  # one worker: in this thread
    store = io.CheckpointStore(ck, "clicks_totals")
    meta = store.latest()
    assert meta is not None
    part = os.path.join(ck, f"epoch={meta['epoch']}", "part-0.ckpt")
    with open(part, "r+b") as f:  # flip a byte in the middle: the checksums must catch it
        f.seek(os.path.getsize(part) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    job = io.job(io_job.make_build(inp, out), checkpoint=ck, **SMALL_EPOCHS)
    with pytest.raises(io.CheckpointError, match=r"part-0\.ckpt is unreadable"):
        pt.execute(job)
    with open(os.path.join(ck, "job.json"), "w") as f:
        json.dump({"version": 99, "job": "clicks_totals"}, f)
    with pytest.raises(io.CheckpointError, match="newer pytimely"):
        pt.execute(job)


def test_a_followed_file_waits_for_the_end_of_its_last_line(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"x": 1}\n{"x": ')
    reader = io.JsonLinesSource(tmp_path, follow=True).open("a.jsonl", None)
    assert reader.read(10) == [{"x": 1}] and not reader.exhausted()
    with open(path, "a") as f:
        f.write("2}\n")
    assert reader.read(10) == [{"x": 2}] and reader.offset() == path.stat().st_size
    reader.close()


def test_a_bad_line_names_the_file_and_the_byte(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"x": 1}\nnot json\n')
    reader = io.JsonLinesSource(tmp_path).open("a.jsonl", None)
    with pytest.raises(TimelyError, match=r"a\.jsonl: the line at byte 9 is not valid"):
        reader.read(10)


@pytest.mark.spark
@pytest.mark.timeout(240)
def test_a_job_runs_on_spark_and_restarts_there_exactly_once(spark, tmp_path):
    """``ps.run`` takes ``io.job(...)`` like ``pt.execute``: a two-worker job on Spark fails in
    the middle, the restart on three Spark workers finishes it, every total published once."""
    from pytimely import spark as ps

    inp, out, ck = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "ck")
    clicks = io_job.write_clicks(inp, 4, 1500, 30)
    failing = io.job(io_job.make_build(inp, out, fail_at="2:1300"), checkpoint=ck, **SMALL_EPOCHS)
    with pytest.raises(WorkerFailure, match="injected failure"):
        ps.run(spark, failing, workers=2)
    job = io.job(io_job.make_build(inp, out), checkpoint=ck, **SMALL_EPOCHS)
    reports = ps.run(spark, job, workers=3)
    assert all(r.restored is not None for r in reports)
    _exactly_once(out, clicks)


# -- event time ----------------------------------------------------------------------------------


def _timed_clicks(folder: str, files: int, per_file: int, users: int) -> list[tuple[str, int]]:
    """Clicks with millisecond event times ``ts``: each file in time order but for a jitter
    of up to 50 ms; returns every ``(user, ts)``."""
    import random

    rng = random.Random(3)
    os.makedirs(folder, exist_ok=True)
    every = []
    for f in range(files):
        lines, t = [], 10_000
        for i in range(per_file):
            t += rng.randrange(1, 12)
            ts = t - rng.randrange(0, 50)
            user = f"u{rng.randrange(users)}"
            every.append((user, ts))
            lines.append(json.dumps({"user": user, "ts": ts, "file": f, "i": i}))
        with open(os.path.join(folder, f"clicks-{f}.jsonl"), "w") as out:
            out.write("\n".join(lines) + "\n")
    return every


def _plain_sessions(clicks: list[tuple[str, int]], gap: int) -> list[tuple[str, int, int, int]]:
    out = []
    for user in sorted({u for u, _ in clicks}):
        times = sorted(t for u, t in clicks if u == user)
        start = last = times[0]
        n = 1
        for t in times[1:]:
            if t - last >= gap:
                out.append((user, start, last + gap, n))
                start, n = t, 0
            last = t
            n += 1
        out.append((user, start, last + gap, n))
    return sorted(out)


def _session_build(inp: str, out: str, late: str, gap: int, fail_at: str | None = None):
    def pair(c):
        if fail_at is not None and f"{c['file']}:{c['i']}" == fail_at:
            raise RuntimeError(f"injected failure at click {fail_at}")
        return (c["user"], c["ts"])

    def build(scope):
        clicks = io.read(scope, io.JsonLinesSource(inp), event_time=lambda c: c["ts"], delay=60)
        sessions = clicks.map(pair).window_count(pt.Session(gap), event_time=lambda r: r[1])
        io.write(sessions.output, io.JsonLinesSink(out, name="sessions"))
        io.write(sessions.late, io.JsonLinesSink(late, name="late"))

    build.__qualname__ = "event_sessions"
    return build


def test_event_time_sessions_survive_a_failure_and_a_restart_exactly_once(tmp_path):
    """Timestamps are event time: sessions close as the watermark passes them (checkpoints
    every second of event time, counted from ``start``); a failure in the middle and a
    restart on three workers give exactly the sessions plain Python finds, none late."""
    inp, out, late, ck = (str(tmp_path / d) for d in ("in", "out", "late", "ck"))
    clicks = _timed_clicks(inp, 4, 1500, 150)  # a user's clicks ~250 ms apart: gap 300
    settings = dict(checkpoint=ck, snapshot_every=1_000, start=0, epoch_records=200,
                    epoch_seconds=0.05, read_batch=50)  # fmt: skip
    with pytest.raises(WorkerFailure, match="injected failure"):
        pt.execute(io.job(_session_build(inp, out, late, 300, "1:1000"), **settings), workers=2)
    published_before = len(io.JsonLinesSink(out).published())
    assert published_before > 0  # sessions closed (and published) before the failure
    reports = pt.execute(io.job(_session_build(inp, out, late, 300), **settings), workers=3)
    assert all(r.restored is not None and r.restored >= 1_000 for r in reports)
    sessions = sorted(
        tuple(json.loads(line))
        for name in io.JsonLinesSink(out).published()
        for line in open(os.path.join(out, name))
    )
    assert sessions == _plain_sessions(clicks, 300)
    assert io.JsonLinesSink(late).published() == []


def test_event_time_with_a_checkpoint_needs_a_start_and_an_interval(tmp_path):
    inp = str(tmp_path / "in")
    _timed_clicks(inp, 1, 10, 2)
    job = io.job(
        _session_build(inp, str(tmp_path / "o"), str(tmp_path / "l"), 300),
        checkpoint=str(tmp_path / "ck"),
    )
    with pytest.raises(ValueError, match="give snapshot_every in event-time units"):
        pt.execute(job)


def test_a_checkpointed_job_without_a_sink_is_refused(tmp_path):
    """The checkpoint learns that the dataflow passed its epoch from the sinks' inputs: with no
    sink it could not know, and would save state too early."""
    inp = str(tmp_path / "in")
    io_job.write_clicks(inp, 1, 10, 2)

    def counts_only(scope):
        io.read(scope, io.JsonLinesSource(inp)).map(lambda c: (c["user"], 1)).stateful_map(
            int, lambda n, one: (n + one, n + one), name="Totals"
        )

    with pytest.raises(TimelyError, match=r"needs at least one io\.write\(\)"):
        pt.execute(io.job(counts_only, checkpoint=str(tmp_path / "ck")))
