"""The differential examples check themselves against recomputation from scratch (each
asserts its answer every round); run them small, on one worker and on two processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

pytestmark = pytest.mark.timeout(120)

CASES = {
    "dd_reachability": ["120", "240", "--rounds", "5", "--changes", "8"],
    "dd_components": ["120", "110", "--rounds", "5", "--changes", "8"],
    "dd_sql": ["400", "40", "--rounds", "4"],
}


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("name", sorted(CASES))
def test_differential_example_checks_itself(name, workers):
    env = dict(os.environ, PYTHONPATH=str(EXAMPLES.parent))
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), *CASES[name], "-w", str(workers)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=100,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("done in")
    assert sum("(checked)" in line for line in lines) == int(CASES[name][3]) + 1
