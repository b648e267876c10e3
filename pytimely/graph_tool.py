"""``pytimely graph script.py``: the graph a script builds, as a picture, without running it.

Two ways to find the graph:

* ``function=None`` (default): run the script as ``__main__`` with ``sys.argv = [script,
  *argv]``, and stop it at the first step any worker takes.  Whatever dataflows were built by
  then (typically all of them: ``pt.execute(fn)`` and ``pt.example(fn)`` build before they
  step) are described.  ``execute(fn, workers=N)`` runs on one worker here: every worker builds
  the same graph.  A script that never steps is described when it ends.
* ``function="build"``: import the script without running its ``__main__`` block and build one
  dataflow with ``build(scope)``.

:func:`write_picture` writes ``.json``, ``.dot``, ``.mmd`` (Mermaid) as text; ``.svg`` and
``.png`` with Graphviz's ``dot`` when it is installed (else ``.svg`` with pytimely's own layout;
``.png`` needs Graphviz); ``.html`` as a self-contained page (the SVG picture, and the Mermaid
source for pasting into Mermaid tools -- no script is fetched).
"""

from __future__ import annotations

import contextlib
import html
import os
import runpy
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from . import graph
from .worker import Worker

__all__ = ["graph_of_script", "write_picture", "PICTURE_FORMATS"]

#: File extensions :func:`write_picture` knows.
PICTURE_FORMATS = ("svg", "png", "html", "dot", "json", "mmd")


class _Built(BaseException):
    """Raised at a worker's first step to stop the script once its graph is built (a
    BaseException so that the script's own ``except Exception`` does not swallow it)."""

    def __init__(self, worker: Worker) -> None:
        super().__init__("graph built")
        self.worker = worker


def graph_of_script(
    path: str, function: str | None = None, argv: Sequence[str] = ()
) -> dict[str, Any]:
    """The description (:func:`pytimely.graph.describe`) of the dataflows ``path`` builds."""
    if function is not None:
        namespace = runpy.run_path(path, run_name="__pytimely_graph__")
        build = namespace.get(function)
        if not callable(build):
            raise ValueError(f"{path} defines no function {function!r} (taking a scope)")
        worker = Worker()
        worker.dataflow(build, name=function)
        return graph.describe(worker.dataflow_scopes())
    workers: list[Worker] = []
    saved = sys.argv
    sys.argv = [path, *argv]
    try:
        with _stopping_at_first_step(workers):
            runpy.run_path(path, run_name="__main__")
    except _Built as built:
        return graph.describe(built.worker.dataflow_scopes())
    finally:
        sys.argv = saved
    if not workers:
        raise ValueError(f"{path} built no dataflow (try --function NAME)")
    return graph.describe(workers[-1].dataflow_scopes())


@contextlib.contextmanager
def _stopping_at_first_step(workers: list[Worker]) -> Iterator[None]:
    """Within: a worker's first step raises :class:`_Built`; ``execute`` runs one worker in
    this process; every worker that builds a dataflow is appended to ``workers``."""
    from .communication import launch
    from .communication.allocator import ThreadAllocator

    dataflow, step_or_park, run_processes = (
        Worker.dataflow,
        Worker.step_or_park,
        launch.run_processes,
    )

    def recording_dataflow(self: Worker, *args: Any, **kwargs: Any) -> Any:
        if self not in workers:
            workers.append(self)
        return dataflow(self, *args, **kwargs)

    def stop(self: Worker, timeout: float | None = None) -> bool:
        raise _Built(self)

    def one_worker(body: Any, processes: int, *args: Any, **kwargs: Any) -> list[Any]:
        return [body(ThreadAllocator())]

    Worker.dataflow = recording_dataflow  # type: ignore[method-assign]
    Worker.step_or_park = stop  # type: ignore[method-assign]
    launch.run_processes = one_worker  # type: ignore[assignment]
    try:
        yield
    finally:
        Worker.dataflow = dataflow  # type: ignore[method-assign]
        Worker.step_or_park = step_or_park  # type: ignore[method-assign]
        launch.run_processes = run_processes  # type: ignore[assignment]


def write_picture(description: dict[str, Any], out: str, use_graphviz: bool = True) -> str:
    """Write ``description`` to ``out`` in the format its extension names; returns what made
    it (``"graphviz"``, ``"pytimely"`` or ``"text"``)."""
    ext = os.path.splitext(out)[1].lstrip(".").lower()
    if ext not in PICTURE_FORMATS:
        raise ValueError(f"cannot write {out!r}: use one of .{', .'.join(PICTURE_FORMATS)}")
    text = {"json": "json", "dot": "dot", "mmd": "mermaid"}.get(ext)
    if text is not None:
        _write(out, graph.render(description, text))
        return "text"
    dot = shutil.which("dot") if use_graphviz else None
    if ext in ("svg", "png") and dot is not None:
        subprocess.run(
            [dot, f"-T{ext}", "-o", out],
            input=graph.to_dot(description).encode(),
            check=True,
            capture_output=True,
        )
        return "graphviz"
    if ext == "png":
        raise RuntimeError(
            "writing PNG needs Graphviz (apt-get install graphviz); or write "
            ".svg or .html, which pytimely renders itself"
        )
    if ext == "svg":
        _write(out, graph.to_svg(description))
    else:
        _write(out, to_html(description))
    return "pytimely"


def to_html(description: dict[str, Any]) -> str:
    """A self-contained page: the SVG picture and the Mermaid source."""
    names = ", ".join(df["name"] for df in description["dataflows"]) or "no dataflow"
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>pytimely graph: {html.escape(names)}</title></head>\n"
        '<body style="font-family: Helvetica, Arial, sans-serif">\n'
        f'<h1 style="font-size: 18px">{html.escape(names)}</h1>\n'
        f"{graph.to_svg(description)}"
        '<h2 style="font-size: 14px">Mermaid</h2>\n'
        f'<pre class="mermaid">{html.escape(graph.to_mermaid(description))}</pre>\n'
        "</body></html>\n"
    )


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
