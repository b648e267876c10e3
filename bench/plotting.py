"""Shared plotting for the experiments: PNG files with matplotlib's non-interactive backend."""

from __future__ import annotations

import math
import os
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

RESULTS_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "results"
)
COLORS = {
    "tokens": "tab:blue",
    "notifications": "tab:orange",
    "watermarks": "tab:green",
    "watermarks-X": "tab:green",
    "watermarks-P": "tab:olive",
    "tokens (region)": "tab:cyan",
}


def path(name: str) -> str:
    os.makedirs(RESULTS_DIR, exist_ok=True)
    return os.path.join(RESULTS_DIR, name)


def latency_lines(
    ax: Any, xs: list, runs: list[dict], label: str, metric: str = "p50_ms", style: str = "-o"
) -> None:
    """One line of ``metric`` over ``xs``; DNF runs are drawn as an x at the top."""
    ys = [math.nan if r["dnf"] else r[metric] for r in runs]
    ax.plot(xs, ys, style, label=label, color=COLORS.get(label))
    dnf_x = [x for x, r in zip(xs, runs) if r["dnf"]]
    if dnf_x:
        # DNF marks sit above 1 s, one row per idiom so that they do not hide each other.
        row = 1000.0 * 1.35 ** (list(COLORS).index(label) if label in COLORS else 0)
        ax.plot(dnf_x, [row] * len(dnf_x), "x", color=COLORS.get(label), markersize=9)


def finish(ax: Any, xlabel: str, ylabel: str, title: str) -> None:
    """Log latency axis, labels, grid and legend: the frame every experiment's panel shares."""
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()


def save(fig: Any, name: str) -> str:
    out = path(name)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


__all__ = ["plt", "path", "latency_lines", "finish", "save", "RESULTS_DIR"]
