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


def plot(runs: Sequence[dict[str, Any]], path: str, title: str = "") -> str:
    """A PNG at ``path``: per query, grouped bars per offered rate, one bar per idiom: p999
    latency (light) with p50 (dark) inside, log scale; a DNF run is a hatched bar up to 1 s
    labelled DNF.
    Needs matplotlib (Agg backend)."""
    from .._extras import require

    require("plotting latencies", "matplotlib", extra="plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    queries = sorted({r["query"] for r in runs})
    fig, axes = plt.subplots(1, len(queries), figsize=(5.5 * len(queries), 4.2), squeeze=False)
    width = 0.8 / len(IDIOMS)
    for ax, query in zip(axes[0], queries):
        mine = [r for r in runs if r["query"] == query]
        rates = sorted({r["rate"] for r in mine})
        dnf_ms = DNF_NS / 1e6
        top = max(
            [r["p999_ms"] for r in mine if not r["dnf"]]
            + [dnf_ms if any(r["dnf"] for r in mine) else 1.0]
        )
        for k, idiom in enumerate(IDIOMS):
            color = COLORS.get(idiom)
            for x, rate in enumerate(rates):
                run = next((r for r in mine if r["idiom"] == idiom and r["rate"] == rate), None)
                if run is None:
                    continue
                pos = x - 0.4 + width * (k + 0.5)
                if run["dnf"]:
                    ax.bar(pos, dnf_ms, width * 0.9, color="none", edgecolor=color, hatch="//")
                    ax.text(pos, dnf_ms * 1.1, "DNF", ha="center", va="bottom", fontsize=8)
                    continue
                ax.bar(
                    pos,
                    run["p999_ms"],
                    width * 0.9,
                    color=color,
                    alpha=0.35,
                    label=f"{idiom} p999" if x == 0 else None,
                )
                ax.bar(
                    pos,
                    run["p50_ms"],
                    width * 0.5,
                    color=color,
                    label=f"{idiom} p50" if x == 0 else None,
                )
        ax.set_xticks(range(len(rates)), [f"{int(r):,}" for r in rates])
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.set_xlabel("offered events/s (open loop)")
        ax.set_ylabel("latency (ms)")
        ax.set_title(f"NEXMark {query.upper()}")
        ax.grid(True, axis="y", which="major", alpha=0.3)
        ax.legend(fontsize=7, ncol=3, loc="upper left")
        ax.set_ylim(top=top * 20)  # room for the legend
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
