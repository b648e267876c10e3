"""The ``pytimely`` command line: replay/inspect a capture file."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import pytimely as pt
from pytimely.capture import FileReader, FileWriter
from pytimely.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run(
        [sys.executable, "-m", "pytimely.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


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


def test_missing_file_is_a_clear_error(tmp_path):
    done = _cli("replay", str(tmp_path / "nope.ptc"))
    assert done.returncode == 2 and "no such file" in done.stderr


def _frame_ends(path: str) -> list[int]:
    """Byte offsets where the header and each frame of the capture at ``path`` end."""
    reader = FileReader(path)
    ends = [reader.offset]
    while not reader.done:
        if reader.poll(max_events=1) or reader.done:
            ends.append(reader.offset)
    return ends


def _assert_one_line_error(err: str) -> None:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pytimely replay: "), err
    assert "Traceback" not in err


def test_replay_of_a_file_cut_at_every_offset_fails_in_one_line(tmp_path, capsys):
    """Every cut -- inside the header, inside a frame, exactly between two frames -- is a
    non-zero exit with one line on stderr after the records of the complete prefix."""
    path = str(tmp_path / "c.ptc")
    _capture(path)
    with open(path, "rb") as f:
        full = f.read()
    cut = str(tmp_path / "cut.ptc")
    tried = 0
    for n in range(1, len(full)):
        with open(cut, "wb") as f:
            f.write(full[:n])
        for extra in ([], ["--inspect", "--no-progress"]):
            assert main(["replay", cut, *extra]) == 1, n
            _assert_one_line_error(capsys.readouterr().err)
        tried += 1
    assert tried == len(full) - 1 > 100


def test_replay_of_a_corrupt_file_fails_in_one_line(tmp_path, capsys):
    path = str(tmp_path / "c.ptc")
    _capture(path)
    with open(path, "rb") as f:
        full = f.read()
    bad = str(tmp_path / "bad.ptc")
    for i in range(0, len(full), 7):
        data = bytearray(full)
        data[i] ^= 0x20
        with open(bad, "wb") as f:
            f.write(bytes(data))
        assert main(["replay", bad]) == 1, i
        _assert_one_line_error(capsys.readouterr().err)


@pytest.mark.parametrize("where", ["between frames", "inside a frame", "flipped byte"])
def test_replay_command_exits_nonzero_without_traceback(tmp_path, where):
    path = str(tmp_path / "c.ptc")
    _capture(path)
    ends = _frame_ends(path)
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if where == "between frames":
        data = data[: ends[-2]]  # drop END: what a killed writer leaves
    elif where == "inside a frame":
        data = data[: ends[-3] + 5]
    else:
        data[ends[-3] + 17] ^= 0x01
    with open(path, "wb") as f:
        f.write(bytes(data))
    done = _cli("replay", path)
    assert done.returncode == 1
    _assert_one_line_error(done.stderr)
    if where == "between frames":
        assert done.stdout.splitlines() == [f"{r}\t('word', {r})" for r in range(3)]


@pytest.mark.parametrize("command", [[], ["replay"], ["demo"]])
def test_every_subcommand_answers_help(command):
    done = _cli(*command, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: pytimely"), done.stdout
