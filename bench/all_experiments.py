"""Regenerate every experiment of seed 004 section 7 (JSON and PNG in docs/results/).

    python bench/all_experiments.py          # or: make results
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import granularity  # noqa: E402
import idle_chain  # noqa: E402
import nexmark_latency  # noqa: E402
import scaling  # noqa: E402


def main() -> None:
    for experiment in (granularity, scaling, idle_chain, nexmark_latency):
        print(f"== {experiment.__name__}", file=sys.stderr)
        experiment.main([])


if __name__ == "__main__":
    main()
