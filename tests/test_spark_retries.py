"""Retries on Spark: any worker failure resubmits, outputs equal a clean run, errors are whole.

Uses the session's ``local[4]`` Spark (``conftest.py``).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from pytimely import spark as ps
from pytimely.errors import WorkerFailure
from pytimely.spark import staging


def counted_epochs(directory):
    """``(epoch, key, count)`` rows of every Parquet file under ``directory``, sorted, and the
    relative paths of every file there."""
    import pyarrow.parquet as pq

    rows, paths = [], []
    for base, _dirs, files in os.walk(directory):
        for name in files:
            path = os.path.join(base, name)
            paths.append(os.path.relpath(path, directory))
            if name.endswith(".parquet") and not name.startswith("."):
                t = pq.read_table(path)
                rows.extend(zip(t["epoch"].to_pylist(), t["k"].to_pylist(), t["count"].to_pylist()))
    return sorted(rows), sorted(paths)


def killing_job(out, flag):
    """A keyed count over 4 epochs written with write_parquet (rolling files, rolled after
    0.2 s).  On the first attempt (no ``flag`` file yet), once epochs 0 and 1 are in committed
    (staged) files, worker 1 kills its own process and worker 0 sleeps without touching the
    mesh, so Spark (not a pytimely worker) is first to see the failure."""

    def work(worker):
        first_attempt = not os.path.exists(flag)

        def build(scope):
            inp, stream = scope.new_input()
            counts = (
                stream.exchange(lambda x: x)
                .map(lambda x: (x % 3, 1))
                .aggregate(lambda k, v, acc: acc + v, lambda k, acc: (k, acc))
            )
            written = ps.write_parquet(counts, out, columns=["k", "count"], roll_seconds=0.2)
            return inp, written.probe()

        inp, probe = worker.dataflow(build)
        for epoch in range(4):
            for x in range(worker.index, 30, worker.peers):
                inp.send(x + epoch)
            inp.advance_to(epoch + 1)
            if epoch == 1:
                worker.step_while(lambda: probe.less_than(2), timeout=60)
                if first_attempt and worker.index == 1:
                    with open(flag, "w", encoding="utf-8"):
                        pass
                    os.kill(os.getpid(), signal.SIGKILL)
                if first_attempt and worker.index == 0:
                    time.sleep(60)  # Spark kills this task once its sibling's task failed
        return worker.index

    return work


def clean_rows():
    from collections import Counter

    rows = Counter()
    for epoch in range(4):
        for x in range(30):
            rows[epoch, (x + epoch) % 3] += 1
    return sorted((e, k, c) for (e, k), c in rows.items())


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_attempts_survive_a_killed_worker_process_with_clean_outputs(spark, tmp_path):
    out = str(tmp_path / "counts")
    flag = str(tmp_path / "killed-once")
    results = ps.run(spark, killing_job(out, flag), workers=2, attempts=2, grace=3)
    assert os.path.exists(flag)  # the first attempt did die
    assert results == [0, 1]
    rows, paths = counted_epochs(out)
    assert rows == clean_rows()  # nothing lost, nothing twice
    # Only the committed files of the attempt that succeeded: no staging folder, no temporary
    # file of the dead attempt; every worker wrote rolling files.
    assert paths == sorted(os.path.relpath(p, out) for p in ps.output_files(out))
    for w in (0, 1):
        names = [os.path.basename(p) for p in paths if p.startswith(f"worker={w}/")]
        assert names and all(n.startswith("part-") for n in names)
    assert spark.read.parquet(out).count() == len(clean_rows())


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_a_killed_worker_process_is_named_and_not_retried_without_attempts(spark, tmp_path):
    out = str(tmp_path / "counts")
    with pytest.raises(WorkerFailure) as info:
        ps.run(spark, killing_job(out, str(tmp_path / "flag")), workers=2, grace=3)
    assert info.value.worker == 1
    assert str(info.value).startswith("the process of worker 1 (pid ")
    assert "org.apache.spark" not in str(info.value)
    assert info.value.__cause__ is None and "org.apache.spark" in info.value.jvm_frames
    # The failed attempt's staged epochs were discarded: nothing reached the output directory.
    assert counted_epochs(out) == ([], [])


def _explode(message, pickled_in):
    if os.getpid() != pickled_in:  # unpickling on an executor, before any pytimely code runs
        raise ValueError(message)
    return message


class Bomb:
    def __reduce__(self):
        return _explode, ("the closure cannot be loaded here", os.getpid())


@pytest.mark.spark
@pytest.mark.timeout(120)
def test_spark_job_failure_shows_the_python_root_cause_in_full(spark):
    bomb = Bomb()
    with pytest.raises(ps.SparkJobFailed) as info:
        ps.run(spark, lambda w: bomb, workers=2)
    text = str(info.value)
    assert "ValueError: the closure cannot be loaded here" in text
    assert "in _explode" in text  # the Python traceback, not just its last line
    assert "\tat org.apache" not in text
    assert "org.apache.spark" in info.value.jvm_frames
    assert info.value.worker in (0, 1)


@pytest.mark.spark
@pytest.mark.timeout(120)
def test_timeout_is_not_retried(spark):
    started = time.monotonic()
    with pytest.raises(ps.SparkJobFailed, match="timeout") as info:
        ps.run(spark, lambda w: time.sleep(60), workers=2, timeout=3, attempts=3)
    assert not info.value.retryable
    assert not getattr(info.value, "__notes__", [])
    assert time.monotonic() - started < 40  # one attempt, not three


def test_commit_moves_staged_files_and_discard_removes_them(tmp_path):
    announced = []
    with staging.staged("a1", announced.append):
        folder = staging.output_folder(str(tmp_path), 0)
        staging.output_folder(str(tmp_path), 0)
    assert announced == [str(tmp_path)]
    assert folder == os.path.join(str(tmp_path), staging.STAGING, "a1", "worker=0")
    with open(os.path.join(folder, "epoch=0.parquet"), "w") as f:
        f.write("x")
    with open(os.path.join(folder, ".epoch=1.parquet.tmp"), "w") as f:
        f.write("partial")
    assert staging.commit(str(tmp_path), "a1") == 1
    assert sorted(os.listdir(tmp_path)) == ["worker=0"]
    assert os.listdir(tmp_path / "worker=0") == ["epoch=0.parquet"]
    with staging.staged("a2", announced.append):
        staging.output_folder(str(tmp_path), 1)
    staging.discard(str(tmp_path), "a2")
    assert sorted(os.listdir(tmp_path)) == ["worker=0"]
    # Outside a staged run, sinks write in place.
    assert staging.output_folder(str(tmp_path), 3) == os.path.join(str(tmp_path), "worker=3")
