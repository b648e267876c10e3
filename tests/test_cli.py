"""The ``pytimely`` command line: replay/inspect a capture file, run a benchmark by name."""

from __future__ import annotations

import os
import subprocess
import sys

import pytimely as pt
from pytimely.capture import FileWriter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "pytimely.cli", *args], capture_output=True,
                          text=True, env=env, timeout=60)


def _capture(path: str) -> None:
    def build(scope):
        inp, stream = scope.new_input()
        stream.capture_into(FileWriter(path))
        return inp

    def work(worker):
        inp = worker.dataflow(build)
        for r in range(3):
            inp.send(("word", r))
            inp.advance_to(r + 1)
        inp.close()

    pt.execute(work)


def test_replay_inspect_summarizes_a_capture(tmp_path):
    path = str(tmp_path / "c.ptc")
    _capture(path)
    done = _cli("replay", path, "--inspect", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "records: 3" in done.stdout
    assert "ended cleanly" in done.stdout


def test_replay_prints_every_record_with_its_time(tmp_path):
    path = str(tmp_path / "c.ptc")
    _capture(path)
    done = _cli("replay", path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{r}\t('word', {r})" for r in range(3)]


def test_replay_of_a_torn_file_reports_it(tmp_path):
    path = str(tmp_path / "c.ptc")
    _capture(path)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 5)
    done = _cli("replay", path, "--inspect", "--no-progress")
    assert done.returncode == 1
    assert "trunc" in (done.stdout + done.stderr).lower()


def test_missing_file_and_unknown_benchmark_are_clear_errors(tmp_path):
    done = _cli("replay", str(tmp_path / "nope.ptc"))
    assert done.returncode == 2 and "no such file" in done.stderr
    done = _cli("bench", "no-such-benchmark")
    assert done.returncode == 2 and "unknown benchmark" in done.stderr
