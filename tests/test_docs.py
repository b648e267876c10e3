"""Every ```python block of the README and of docs/*.md runs, and prints what it says it prints.

The blocks of one page run in order in one namespace (a later block may use what an earlier one
defined), in a fresh temporary directory.  A ``print(...)`` whose line ends in a comment, or is
followed by a comment-only line, states its output: ``print(x)  # [1, 2]``; the block's printed
lines must contain those outputs, in order.

A block that cannot run here (it needs several worker processes, a Spark session or a cluster)
starts with the visible line ``# not run by the test suite: <why>``; there are only a few, and
:data:`MAX_NOT_RUN` keeps it so.
"""

from __future__ import annotations

import contextlib
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_RUN = "# not run by the test suite:"
MAX_NOT_RUN = 6
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def blocks(page: Path) -> list[tuple[int, str]]:
    """The ```python blocks of ``page``: (line number of the fence, code)."""
    text = page.read_text()
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in FENCE.finditer(text)]


def stated_outputs(code: str) -> list[str]:
    """What the ``print`` calls of ``code`` state they print (see the module docstring)."""
    lines = code.splitlines()
    comments = {}
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = (tok.start[1], tok.string[1:].strip())
    out = []
    for number, line in enumerate(lines, start=1):
        if not line.lstrip().startswith("print("):
            continue
        if number in comments and comments[number][0] > 0:
            out.append(comments[number][1])
        elif number + 1 in comments and not lines[number].split("#")[0].strip():
            out.append(comments[number + 1][1])
    return out


def _cases() -> list:
    cases = []
    for page in PAGES:
        if blocks(page):
            cases.append(pytest.param(page, id=str(page.relative_to(ROOT))))
    return cases


def test_the_guide_has_pages_and_few_blocks_that_do_not_run():
    names = {p.name for p in PAGES}
    for page in (
        "index.md",
        "concepts.md",
        "operators.md",
        "workers.md",
        "capture.md",
        "spark.md",
        "troubleshooting.md",
        "results.md",
    ):
        assert page in names, page
    not_run = [(p.name, n) for p in PAGES for n, code in blocks(p) if code.startswith(NOT_RUN)]
    assert len(not_run) <= MAX_NOT_RUN, not_run


@pytest.mark.timeout(120)
@pytest.mark.parametrize("page", _cases())
def test_python_blocks_run_and_print_what_they_state(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    for line, code in blocks(page):
        if code.startswith(NOT_RUN):
            compile(code, f"{page.name}:{line}", "exec")  # it must at least be Python
            continue
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            exec(compile(code, f"{page.name}:{line}", "exec"), namespace)
        printed = stdout.getvalue().splitlines()
        it = iter(printed)
        for expected in stated_outputs(code):
            assert any(got == expected for got in it), (
                f"{page.name}:{line}: expected a line {expected!r} in order; printed:\n"
                + "\n".join(printed)
            )
