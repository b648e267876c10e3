"""The ``pytimely`` command line.

    pytimely replay FILE [--inspect] [--no-progress]   inspect or replay a capture file
    pytimely demo [ARGS...]                            the main job (needs pytimely[spark])
    pytimely graph SCRIPT [-o OUT] [-- ARGS...]        draw the dataflow graph SCRIPT builds
    pytimely --version

The benchmarks are not part of the installed package: they live in ``bench/`` of a source
checkout and run with ``make bench`` (or ``python bench/NAME.py``).
"""

from __future__ import annotations

import argparse
import os
import sys

__all__ = ["main"]


def _replay(args: argparse.Namespace) -> int:
    """Inspect or replay ``args.file``; a torn or corrupt capture is one line on stderr and exit
    status 1 (after whatever complete prefix could be shown)."""
    from .capture import inspect_file
    from .errors import CaptureError

    if not os.path.exists(args.file):
        print(f"pytimely replay: no such file: {args.file}", file=sys.stderr)
        return 2
    try:
        if args.inspect:
            error = inspect_file(args.file, progress=not args.no_progress).get("error")
        else:
            error = _replay_and_print(args.file, progress=not args.no_progress)
    except CaptureError as exc:
        error = str(exc)
    if error:
        print(f"pytimely replay: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    return 0


class _ReadingBar:
    """A capture reader that moves a progress bar (bytes read of the file's size) on every
    ``poll``; the bar shows only when stderr is a terminal (never in logs or pipes)."""

    def __init__(self, reader: object, size: int, enabled: bool, desc: str) -> None:
        from .capture.inspect import progress_bar

        self._reader = reader
        self._bar = progress_bar(size, enabled and hasattr(reader, "offset"), desc)

    def poll(self) -> list:
        events = self._reader.poll()  # type: ignore[attr-defined]
        if events:
            self._bar.update_to(self._reader.offset)  # type: ignore[attr-defined]
        return events

    @property
    def done(self) -> bool:
        return self._reader.done  # type: ignore[attr-defined,no-any-return]

    def close(self) -> None:
        self._bar.close()

    def __getattr__(self, name: str) -> object:
        return getattr(self._reader, name)


def _replay_and_print(path: str, progress: bool = True) -> str | None:
    """Replay the capture at ``path`` into a one-worker dataflow, printing every record with its
    time; the reader's error message if the capture is torn or corrupt (the prefix is printed).
    ``progress``: a bar of the bytes read, on stderr if it is a terminal."""
    import pytimely as pt

    from .capture import FileReader, ParquetReader, ReplayHandle, replay_into
    from .errors import CaptureError

    raw = ParquetReader(path) if path.endswith(".parquet") else FileReader(path)
    reader = _ReadingBar(
        raw, os.path.getsize(path), progress, f"replaying {os.path.basename(path)}"
    )
    handle = ReplayHandle()

    def build(scope):
        replayed = replay_into([reader], scope, on_error="close", handle=handle)
        replayed.inspect_time(lambda t, x: print(f"{t!r}\t{x!r}"))

    try:
        pt.example(build)
    finally:
        reader.close()
    if handle.errors:
        return str(handle.errors[0])
    try:  # the stream finished; the file must also end cleanly (with END, nothing torn after)
        while not reader.done:
            reader.poll()
    except CaptureError as exc:
        return str(exc)
    return None


def _graph(args: argparse.Namespace) -> int:
    """Write a picture of the dataflows ``args.script`` builds (see :mod:`pytimely.graph_tool`)."""
    from .graph import operators
    from .graph_tool import graph_of_script, write_picture

    if not os.path.exists(args.script):
        print(f"pytimely graph: no such file: {args.script}", file=sys.stderr)
        return 2
    out = args.output or os.path.splitext(os.path.basename(args.script))[0] + ".svg"
    try:
        description = graph_of_script(args.script, args.function, args.args)
        made_by = write_picture(description, out, use_graphviz=not args.no_graphviz)
    except (ValueError, RuntimeError) as exc:
        print(f"pytimely graph: {exc}", file=sys.stderr)
        return 2
    ops = len(operators(description))
    print(f"pytimely graph: wrote {out} ({ops} operators; {made_by})", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the ``pytimely`` command with ``argv`` (default: the process' arguments); returns the
    exit status."""
    from . import __version__, _native

    parser = argparse.ArgumentParser(prog="pytimely", description="timely dataflow for Python")
    parser.add_argument(
        "--version",
        action="version",
        version=f"pytimely {__version__} (exchange: {_native.implementation()})",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    rp = sub.add_parser("replay", help="inspect or replay a capture file")
    rp.add_argument("file", help="a capture file (written by capture_into or FileWriter)")
    rp.add_argument("--inspect", action="store_true", help="print events/records per time")
    rp.add_argument(
        "--no-progress", action="store_true", help="no progress bar (shown only on a terminal)"
    )
    sub.add_parser(
        "demo",
        help="run the main job (needs pytimely[spark])",
        description="The main job; any further options are the demo's own "
        "(python -m pytimely.demo --help lists them).",
    )
    gp = sub.add_parser(
        "graph", help="draw the dataflow graph a script builds (without running it)"
    )
    gp.add_argument("script", help="the Python script that builds the dataflow")
    gp.add_argument("-o", "--output", help="out.svg|png|html|dot|json|mmd (default: SCRIPT.svg)")
    gp.add_argument(
        "--function",
        help="build one dataflow with this function of the script "
        "(taking a scope) instead of running the script until its first step",
    )
    gp.add_argument("--no-graphviz", action="store_true", help="use pytimely's own SVG layout")
    gp.add_argument("args", nargs="*", help="arguments for the script (after --)")
    args, rest = parser.parse_known_args(argv)
    if rest and args.command != "demo":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "replay":
        try:
            return _replay(args)
        except Exception as exc:  # `pytimely replay FILE | head` closes our stdout early
            if isinstance(exc, BrokenPipeError) or isinstance(exc.__cause__, BrokenPipeError):
                sys.stderr.close()
                return 0
            raise
    if args.command == "graph":
        return _graph(args)
    return _demo(rest)


def _demo(args: list[str]) -> int:
    """The main job with ``args`` (``pytimely demo --help`` lists them); without pyspark, one
    line on stderr naming the extra to install, exit status 2."""
    from ._extras import MissingExtraError, require

    try:
        require("pytimely demo", "pyspark", "pandas", extra="spark")
    except MissingExtraError as exc:
        print(f"pytimely demo: {exc}", file=sys.stderr)
        return 2
    from .demo import main as demo_main

    return demo_main(args)


if __name__ == "__main__":
    sys.exit(main())
