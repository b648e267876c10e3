"""Open-loop latency harness (seed 004, section 7.1): now :mod:`pytimely.nexmark.latency`.

This module re-exports it so that the benchmark scripts keep working:

    from harness import run_open_loop, LatencyHistogram
"""

from __future__ import annotations

from pytimely.nexmark.latency import (  # noqa: F401
    DNF_NS,
    LatencyHistogram,
    merge_results,
    run_open_loop,
)

__all__ = ["LatencyHistogram", "run_open_loop", "merge_results", "DNF_NS"]
