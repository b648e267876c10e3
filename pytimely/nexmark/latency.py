"""NEXMark's open-loop latency: Q4/Q7 measured per idiom, tabulated and plotted.

Events come from the canonical generator: event ``n`` is scheduled at ``n / rate`` seconds and
stamped with that instant (its NEXMark ``date_time``), and Q4 (average closing price per
category) or Q7 (highest bid per 10 s window) is built with timestamp tokens, Naiad-style
notifications or Flink-style watermarks (:data:`IDIOMS`), then offered open loop by the generic
harness :func:`pytimely.openloop.run_open_loop` (re-exported here with :class:`LatencyHistogram`,
:func:`merge_results` and :data:`DNF_NS`).  ``bench/nexmark_latency.py`` sweeps rates and
workers with :func:`measure`; ``python -m pytimely.demo`` runs a short sweep and plots it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..openloop import (
    DNF_NS,
    LatencyHistogram,
    LoadReading,
    MachineLoad,
    median_run,
    merge_results,
    run_open_loop,
)

__all__ = [
    "DNF_NS",
    "plot_scale",
    "IDIOMS",
    "LatencyHistogram",
    "measure",
    "merge_results",
    "plot",
    "run_open_loop",
    "sweep",
    "table",
]

IDIOMS = ("tokens", "notifications", "watermarks")


# --- NEXMark Q4 / Q7 ----------------------------------------------------------------------------


def measure(
    query: str,
    idiom: str,
    rate: float,
    workers: int = 1,
    duration: float = 2.0,
    quantum: int = 16,
    in_flight: int | None = 10_000,
    warmup: float = 0.5,
) -> dict[str, Any]:
    """Open-loop latency of NEXMark ``query`` built with ``idiom`` at ``rate`` events/s on
    ``workers`` local workers (:func:`pytimely.execute`) for ``duration`` seconds after
    ``warmup``; timestamps quantized to ``2**quantum`` ns; ``in_flight`` auctions (small: they
    close during the run).  Returns :func:`merge_results`' summary with the parameters."""
    import pytimely as pt

    from .generator import NexmarkConfig, WorkerStream
    from .queries import build_query

    def work(worker: Any) -> dict[str, Any]:
        config = NexmarkConfig(rate=int(rate), workers=worker.peers, in_flight_auctions=in_flight)
        events = WorkerStream(config, worker.index, block_events=4096)  # small blocks: no stalls
        peers, me = worker.peers, worker.index

        def make_batch(first: int, count: int, times: np.ndarray) -> Any:
            # This worker's events with local indices < first + count (global n = i*P + w).
            return events.next_batch((first + count - 1) * peers + me + 1)

        def build(scope: Any, stream: Any) -> Any:
            return build_query(query, scope, stream, idiom=idiom)

        return run_open_loop(
            worker, build, rate, duration, quantum, make_batch=make_batch, warmup=warmup
        )

    out = merge_results(pt.execute(work, workers=workers))
    out.update(
        {"query": query, "idiom": idiom, "rate": rate, "workers": workers, "quantum_log2": quantum}
    )
    return out


def sweep(
    queries: Sequence[str],
    rates: Sequence[float],
    *,
    repeats: int = 3,
    idioms: Sequence[str] = IDIOMS,
    **measure_options: Any,
) -> tuple[list[dict[str, Any]], MachineLoad]:
    """Every ``(query, rate, idiom)`` measured ``repeats`` times (:func:`measure` with
    ``measure_options``), round after round over all configurations, so that a passing
    disturbance hits one repeat of many configurations rather than every repeat of one.

    Returns the median run of each configuration (:func:`~pytimely.openloop.median_run`) and
    the machine's load over the whole sweep (:class:`~pytimely.openloop.MachineLoad`).
    """
    if repeats < 1:
        raise ValueError("sweep: repeats must be at least 1")
    before = LoadReading.now()
    runs: dict[tuple[str, float, str], list[dict[str, Any]]] = {}
    for _ in range(repeats):
        for query in queries:
            for rate in rates:
                for idiom in idioms:
                    runs.setdefault((query, rate, idiom), []).append(
                        measure(query, idiom, rate, **measure_options)
                    )
    load = MachineLoad.between(before, LoadReading.now())
    return [median_run(r) for r in runs.values()], load


def _cell(run: dict[str, Any] | None) -> str:
    if run is None:
        return "-"
    if run["dnf"]:
        return "DNF"
    return f"{run['p50_ms']} / {run['p999_ms']} / {run['max_ms']}"


def table(
    runs: Sequence[dict[str, Any]], query: str, idioms: Sequence[str] = IDIOMS, caveat: str = ""
) -> list[str]:
    """Lines of a text table of ``query``'s runs: one row per (rate, workers), one column per
    idiom, cells ``p50 / p999 / max`` in ms or ``DNF``; ``caveat`` ends the title line."""
    lines = [
        f"NEXMark {query.upper()} latency (ms): p50 / p999 / max, or DNF{caveat}",
        "rate      workers  " + "  ".join(f"{i:>24}" for i in idioms),
    ]
    keys = sorted({(r["rate"], r["workers"]) for r in runs if r["query"] == query})
    for rate, workers in keys:
        cells = []
        for idiom in idioms:
            run = next(
                (
                    x
                    for x in runs
                    if x["query"] == query
                    and x["idiom"] == idiom
                    and x["rate"] == rate
                    and x["workers"] == workers
                ),
                None,
            )
            cells.append(_cell(run))
        lines.append(f"{int(rate):<9} {workers:<8} " + "  ".join(f"{c:>24}" for c in cells))
    return lines


COLORS = {"tokens": "tab:blue", "notifications": "tab:orange", "watermarks": "tab:green"}


def plot_scale(runs: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The value scale of one query's panel: ``bottom`` and ``top`` of the log axis, fitted to
    the finished runs' p50 and p999 (not to the DNF threshold), and ``dnf``, the height of the
    did-not-finish markers, in a band of their own above every value (without a run that did
    not finish, the axis ends below the band, at ``dnf / 2``).

    >>> runs = [{"dnf": False, "p50_ms": 2.0, "p999_ms": 40.0}, {"dnf": True}]
    >>> plot_scale(runs)
    {'bottom': 1.0, 'top': 400.0, 'dnf': 160.0}
    """
    done = [r for r in runs if not r["dnf"]]
    high = max((r["p999_ms"] for r in done), default=1.0)
    low = min((r["p50_ms"] for r in done), default=1.0)
    return {"bottom": max(low / 2, 0.01), "top": high * 10, "dnf": high * 4}


def plot(runs: Sequence[dict[str, Any]], path: str, title: str = "") -> str:
    """A PNG at ``path``: per query, grouped bars per offered rate, one bar per idiom: p999
    latency (light) with p50 (dark) inside, log scale fitted to the values
    (:func:`plot_scale`); a run that did not finish is an ``x`` marker in its idiom's colour in
    a band above the values, marked DNF.  The legend names every idiom that ran, the two
    shades and the DNF marker.  Needs matplotlib (Agg backend)."""
    from .._extras import require

    require("plotting latencies", "matplotlib", extra="plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter

    queries = sorted({r["query"] for r in runs})
    fig, axes = plt.subplots(1, len(queries), figsize=(5.5 * len(queries), 5.0), squeeze=False)
    width = 0.8 / len(IDIOMS)
    for ax, query in zip(axes[0], queries):
        mine = [r for r in runs if r["query"] == query]
        rates = sorted({r["rate"] for r in mine})
        scale = plot_scale(mine)
        ran = [i for i in IDIOMS if any(r["idiom"] == i for r in mine)]
        for k, idiom in enumerate(IDIOMS):
            color = COLORS.get(idiom)
            for x, rate in enumerate(rates):
                run = next((r for r in mine if r["idiom"] == idiom and r["rate"] == rate), None)
                if run is None:
                    continue
                pos = x - 0.4 + width * (k + 0.5)
                if run["dnf"]:
                    ax.plot(pos, scale["dnf"], marker="x", markersize=9, color=color, mew=2)
                    continue
                ax.bar(pos, run["p999_ms"], width * 0.9, color=color, alpha=0.35)
                ax.bar(pos, run["p50_ms"], width * 0.5, color=color)
        ax.set_xticks(range(len(rates)), [f"{int(r):,}" for r in rates])
        ax.set_yscale("log")
        ax.set_ylim(scale["bottom"], scale["top"])
        # Value ticks only below the DNF band; the band (drawn only if a run did not finish)
        # has one tick, which says DNF.
        dnf = any(r["dnf"] for r in mine)
        separator = scale["dnf"] / 2
        if not dnf:
            ax.set_ylim(scale["bottom"], separator)
        first, last = math.floor(math.log10(scale["bottom"])), math.ceil(math.log10(separator))
        ticks = [10.0**k for k in range(first, last + 1) if scale["bottom"] <= 10.0**k < separator]
        band = [scale["dnf"]] if dnf else []
        ax.set_yticks(ticks + band, [f"{t:g}" for t in ticks] + ["DNF"] * len(band))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: ""))
        if dnf:
            ax.axhline(separator, color="grey", linewidth=0.6, linestyle="--")
        ax.set_xlabel("offered events/s (open loop)")
        ax.set_ylabel("latency (ms)")
        ax.set_title(f"NEXMark {query.upper()}")
        ax.grid(True, axis="y", which="major", alpha=0.3)
        handles = [Patch(color=COLORS.get(i), label=i) for i in ran]
        handles += [
            Patch(color="grey", alpha=0.35, label="p999"),
            Patch(color="grey", label="p50"),
            Line2D([], [], marker="x", color="grey", linestyle="", mew=2, label="did not finish"),
        ]
        ax.legend(
            handles=handles, fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.2)
        )
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
