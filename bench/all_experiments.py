"""Regenerate every experiment of section 7 of the "Timestamp tokens" paper (SoCC 2022): JSON
and PNG in docs/results/.

python bench/all_experiments.py          # or: make results
"""

from __future__ import annotations

import os
import sys

from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import granularity  # noqa: E402
import idle_chain  # noqa: E402
import nexmark_latency  # noqa: E402
import process_scaling  # noqa: E402


def main() -> None:
    experiments = (granularity, process_scaling, idle_chain, nexmark_latency)
    # A bar over the experiments on a terminal (tqdm's disable=None: none in logs or pipes).
    bar = tqdm(experiments, desc="experiments", unit="experiment", file=sys.stderr, disable=None)
    for experiment in bar:
        bar.set_postfix_str(experiment.__name__)
        if bar.disable:
            print(f"== {experiment.__name__}", file=sys.stderr)
        experiment.main([])


if __name__ == "__main__":
    main()
