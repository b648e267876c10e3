"""The ``pytimely`` command line.

    pytimely replay FILE [--inspect] [--no-progress]   inspect or replay a capture file
    pytimely bench NAME [ARGS...]                      run a benchmark from bench/
    pytimely demo                                      the main job (see README)
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys

__all__ = ["main"]


def _replay(args: argparse.Namespace) -> int:
    from .capture import inspect_file

    if not os.path.exists(args.file):
        print(f"pytimely replay: no such file: {args.file}", file=sys.stderr)
        return 2
    if args.inspect:
        summary = inspect_file(args.file, progress=not args.no_progress)
        return 1 if summary.get("error") else 0
    # Replay into a one-worker dataflow and print every record with its time.
    import pytimely as pt

    from .capture import FileReader, ParquetReader, replay_into

    reader = ParquetReader(args.file) if args.file.endswith(".parquet") else FileReader(args.file)

    def build(scope):
        replay_into([reader], scope).inspect_time(lambda t, x: print(f"{t!r}\t{x!r}"))

    pt.example(build)
    return 0


def _bench(args: argparse.Namespace) -> int:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(here, "bench", f"{args.name}.py")
    if not os.path.exists(path):
        names = sorted(f[:-3] for f in os.listdir(os.path.join(here, "bench")) if f.endswith(".py"))
        print(f"pytimely bench: unknown benchmark {args.name!r}; have: {', '.join(names)}",
              file=sys.stderr)
        return 2
    sys.argv = [path, *args.args]
    runpy.run_path(path, run_name="__main__")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pytimely", description="timely dataflow for Python")
    sub = parser.add_subparsers(dest="command", required=True)
    rp = sub.add_parser("replay", help="inspect or replay a capture file")
    rp.add_argument("file")
    rp.add_argument("--inspect", action="store_true", help="print events/records per time")
    rp.add_argument("--no-progress", action="store_true", help="no progress bar")
    bp = sub.add_parser("bench", help="run a benchmark from bench/")
    bp.add_argument("name")
    bp.add_argument("args", nargs=argparse.REMAINDER)
    sub.add_parser("demo", help="run the main job")
    args = parser.parse_args(argv)
    if args.command == "replay":
        try:
            return _replay(args)
        except Exception as exc:  # `pytimely replay FILE | head` closes our stdout early
            if isinstance(exc, BrokenPipeError) or isinstance(exc.__cause__, BrokenPipeError):
                sys.stderr.close()
                return 0
            raise
    if args.command == "bench":
        return _bench(args)
    from .demo import main as demo_main

    return demo_main()


if __name__ == "__main__":
    sys.exit(main())
