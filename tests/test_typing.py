"""The package's types are true for its users: ``mypy --strict`` accepts a user-style job
without a single error, and catches the mistakes a user makes.

mypy runs as a user's would: on the user's files, with pytimely found as a library
(``--follow-imports=silent``: the package's own internals are not the user's errors)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pytimely

pytestmark = pytest.mark.timeout(120)

REPO = Path(pytimely.__file__).resolve().parent.parent

JOB = '''
"""A user's job, typed the way a user writes it."""

from __future__ import annotations

import pytimely as pt


def parse(line: str) -> tuple[str, int]:
    word, count = line.split()
    return word, int(count)


def pipeline(lines: pt.Stream) -> pt.Stream:
    return lines.map(parse).exchange(lambda kv: kv[0]).filter(lambda kv: kv[1] > 0)


def build(scope: pt.Scope) -> tuple[pt.InputHandle, pt.ProbeHandle, pt.CaptureHandle]:
    handle, lines = scope.new_input()
    counted = pipeline(lines)
    counted.inspect_time(lambda t, kv: None).for_each(lambda t, batch: None)
    return handle, counted.probe(), counted.capture()


def job(worker: pt.Worker) -> pt.CaptureHandle:
    handle, probe, captured = worker.dataflow(build)
    handle.send("ann 3")
    handle.advance_to(1)
    while probe.less_than(1):
        worker.step()
    return captured


results: list[pt.CaptureHandle] = pt.execute(job, workers=1)
'''

# Each line is a mistake a type checker must flag, with the error code mypy gives it.
PLANTED = {
    "lines.mapp(parse)": "attr-defined",  # a typo in an operator's name
    "lines.map(parse, name=7)": "arg-type",  # a name that is not a string
    "lines.exchange(column=1.5)": "arg-type",  # a column that is neither name nor index
    "lines.partition(2, parse)[0].probe().done": "arg-type",  # route must give (int, value)
}


def _mypy(tmp_path: Path, *files: str) -> dict[str, list[str]]:
    """Run mypy on ``files`` (in ``tmp_path``); returns the error lines per file."""
    assert importlib.util.find_spec("mypy"), "mypy is missing: install the dev extra (.[dev])"
    env = dict(os.environ, MYPYPATH=str(REPO))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--follow-imports=silent",
            "--show-error-codes",
            "--no-error-summary",
            "--cache-dir",
            str(tmp_path / ".mypy_cache"),
            *files,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert proc.returncode in (0, 1), f"mypy itself failed:\n{proc.stdout}\n{proc.stderr}"
    errors: dict[str, list[str]] = {f: [] for f in files}
    for line in proc.stdout.splitlines():
        name = line.split(":", 1)[0]
        if ": error:" in line:
            errors.setdefault(name, []).append(line)
    return errors


def test_mypy_accepts_a_user_job_and_catches_planted_mistakes(tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    planted = JOB.split("\n\n\ndef build")[0] + "\n\n\ndef mistakes(lines: pt.Stream) -> None:\n"
    planted += "".join(f"    {line}\n" for line in PLANTED)
    (tmp_path / "mistakes.py").write_text(planted)

    errors = _mypy(tmp_path, "job.py", "mistakes.py")

    assert errors["job.py"] == [], "mypy rejects a correct job:\n" + "\n".join(errors["job.py"])
    lines = planted.splitlines()
    caught = {}
    for error in errors["mistakes.py"]:
        lineno = int(error.split(":")[1])
        code = re.search(r"\[([a-z-]+)\]$", error)
        caught[lines[lineno - 1].strip()] = code.group(1) if code else error
    assert caught == PLANTED, "\n".join(errors["mistakes.py"])


def test_the_package_says_it_is_typed_and_exports_what_it_names():
    assert (REPO / "pytimely" / "py.typed").is_file()
    missing = [name for name in pytimely.__all__ if not hasattr(pytimely, name)]
    assert not missing, f"pytimely.__all__ names what it does not define: {missing}"
    used_by_the_job = {
        "Stream",
        "Scope",
        "Worker",
        "InputHandle",
        "ProbeHandle",
        "CaptureHandle",
        "execute",
    }
    assert used_by_the_job <= set(pytimely.__all__)


def test_job_text_is_runnable():
    """The typed job is a real program, not only something mypy likes."""
    namespace: dict = {}
    exec(compile(textwrap.dedent(JOB), "job.py", "exec"), namespace)
    assert namespace["results"][0].extract() == [(0, [("ann", 3)])]
