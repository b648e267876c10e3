"""The smallest dataflow: a stream of ten numbers, inspected.

Port of timely's ``simple`` example.  ``pt.example`` builds one dataflow on a single worker and
runs it to completion; ``to_stream`` emits the iterable at time 0 and ``inspect`` looks at each
record as it flows past.

    $ python examples/simple.py          # seen: 0 ... seen: 9
    $ python examples/simple.py 20       # seen: 0 ... seen: 19
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

import pytimely as pt


def run(count: int = 10, out: Callable[[str], Any] | None = None) -> list[int]:
    """Inspect ``range(count)``; returns the records in the order they were seen."""
    seen: list[int] = []

    def look(x: int) -> None:
        seen.append(x)
        if out is not None:
            out(f"seen: {x}")

    pt.example(lambda scope: scope.to_stream(range(count)).inspect(look))
    return seen


def main(argv: Sequence[str] | None = None) -> list[int]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("count", nargs="?", type=int, default=10, help="numbers to inspect")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    return run(args.count, out=print)


if __name__ == "__main__":
    main()
