"""Open-loop latency: the harness (seed 004, section 7.1) and NEXMark's Q4/Q7 measurement.

**The harness** (:func:`run_open_loop`, generic: any dataflow).  Input is offered at a fixed
rate whatever the system does: record ``i`` is *scheduled* at ``start + i / rate`` and stamped
with that instant as its event time, in nanoseconds, quantized down to a multiple of
``2**quantum_log2`` (the "timestamp granularity").  The harness feeds every record whose
scheduled instant has passed, advances the input to the current quantized instant (so time
moves even when no record is due, but never past the next unsent record's timestamp), and steps
the worker.  A record's *latency* is the moment the output's frontier passes its timestamp
minus its scheduled instant; latencies go into a log-bucketed :class:`LatencyHistogram`.  A run
is *DNF* (did not finish) as soon as a latency exceeds 1 s or the backlog of unfinished records
is older than 1 s.  The dataflow under test is ``build(scope, stream) -> output stream`` where
``stream`` carries the batches ``make_batch(first_index, count, times_ns)`` makes; everything
runs on every worker (each worker offers ``rate / peers``).

**NEXMark** (:func:`measure`, :func:`table`, :func:`plot`).  Events come from the canonical
generator: event ``n`` is scheduled at ``n / rate`` seconds and stamped with that instant (its
NEXMark ``date_time``), and Q4 (average closing price per category) or Q7 (highest bid per 10 s
window) is built with timestamp tokens, Naiad-style notifications or Flink-style watermarks
(:data:`IDIOMS`).  ``bench/nexmark_latency.py`` sweeps rates and workers with this;
``python -m pytimely.demo`` runs a short sweep and plots it.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..synchronization import barrier

__all__ = [
    "DNF_NS",
    "IDIOMS",
    "LatencyHistogram",
    "measure",
    "merge_results",
    "plot",
    "run_open_loop",
    "table",
]

DNF_NS = 1_000_000_000
IDIOMS = ("tokens", "notifications", "watermarks")


class LatencyHistogram:
    """Counts of latencies in logarithmic buckets: 16 sub-buckets per power of two (~4%
    relative precision), from 1 ns to ~2**40 ns."""

    SUB = 16

    def __init__(self) -> None:
        self.counts = np.zeros(41 * self.SUB, dtype=np.int64)
        self.max_ns = 0
        self.total = 0

    def _index(self, ns: np.ndarray) -> np.ndarray:
        ns = np.maximum(ns, 1).astype(np.float64)
        exp = np.floor(np.log2(ns))
        frac = ns / np.exp2(exp) - 1.0  # in [0, 1)
        idx = exp * self.SUB + np.floor(frac * self.SUB)
        return np.clip(idx, 0, len(self.counts) - 1).astype(np.int64)

    def record(self, latencies_ns: np.ndarray) -> None:
        if len(latencies_ns) == 0:
            return
        np.add.at(self.counts, self._index(latencies_ns), 1)
        self.max_ns = max(self.max_ns, int(latencies_ns.max()))
        self.total += len(latencies_ns)

    def merge(self, other: LatencyHistogram) -> None:
        self.counts += other.counts
        self.max_ns = max(self.max_ns, other.max_ns)
        self.total += other.total

    def quantile(self, q: float) -> float:
        """Upper edge of the bucket holding quantile ``q``, in nanoseconds."""
        if self.total == 0:
            return math.nan
        rank = q * self.total
        cum = np.cumsum(self.counts)
        i = int(np.searchsorted(cum, rank, side="left"))
        exp, sub = divmod(i, self.SUB)
        return min(2.0**exp * (1 + (sub + 1) / self.SUB), float(self.max_ns))

    def summary_ms(self) -> dict[str, float]:
        return {
            "p50_ms": round(self.quantile(0.5) / 1e6, 3),
            "p99_ms": round(self.quantile(0.99) / 1e6, 3),
            "p999_ms": round(self.quantile(0.999) / 1e6, 3),
            "max_ms": round(self.max_ns / 1e6, 3),
            "records": self.total,
        }

    def to_state(self) -> tuple:
        return (self.counts, self.max_ns, self.total)

    @classmethod
    def from_state(cls, state: tuple) -> LatencyHistogram:
        h = cls()
        h.counts, h.max_ns, h.total = state
        return h


def run_open_loop(
    worker: Any,
    build: Callable[[Any, Any], Any],
    rate: float,
    duration: float,
    quantum_log2: int = 0,
    make_batch: Callable[[int, int, np.ndarray], Any] | None = None,
    warmup: float = 0.5,
) -> dict[str, Any]:
    """Offer ``rate`` records/s (this worker's share: ``rate / peers``) for ``duration``
    seconds into ``build``'s dataflow; return this worker's latency histogram (as a state for
    :func:`merge_results`), the number of records it offered and ``dnf``."""
    peers, index = worker.peers, worker.index
    my_rate = rate / peers
    mask = ~((1 << quantum_log2) - 1)
    make_batch = make_batch or (lambda first, count, times: list(range(first, first + count)))

    def dataflow(scope: Any) -> Any:
        inp, stream = scope.new_input()
        out = build(scope, stream)
        return inp, out.probe()

    inp, probe = worker.dataflow(dataflow)
    barrier(worker)  # every worker has built its dataflow: start the clocks together
    hist = LatencyHistogram()
    pending: deque[tuple[int, np.ndarray]] = deque()  # (timestamp, scheduled ns of its records)
    sent = 0
    dnf = False
    start = time.perf_counter_ns()
    end = start + int((duration + warmup) * 1e9)
    warm_ns = start + int(warmup * 1e9)
    # Records this worker offers: global index i*peers + index, scheduled at i / my_rate.
    period_ns = 1e9 / my_rate
    while True:
        now = time.perf_counter_ns()
        if now >= end:
            break
        due = int((now - start) / period_ns)
        if due > sent:
            count = due - sent
            sched = start + (np.arange(sent, due, dtype=np.float64) * period_ns).astype(np.int64)
            times = (sched - start) & mask
            # One message per distinct timestamp (that is what a timestamp is).
            cut = np.flatnonzero(np.diff(times)) + 1
            bounds = [0, *cut.tolist(), count]
            for a, b in zip(bounds[:-1], bounds[1:]):
                t = int(times[a])
                if t > inp.time:
                    inp.advance_to(t)
                inp.send_batch(make_batch(sent + a, b - a, times[a:b]))
                pending.append((t, sched[a:b]))
            sent = due
        # Time moves even without records, but never past the next unsent record's timestamp.
        t_now = min(now - start, int(sent * period_ns)) & mask
        if t_now > inp.time:
            inp.advance_to(t_now)
        # Step; if nothing is ready, park until the next record is due (at most 1 ms) rather
        # than spin: an open-loop source must not steal the CPU the workers need.
        next_due = start + (sent + 1) * period_ns
        worker.step_or_park(max(0.0, min(1e-3, (next_due - time.perf_counter_ns()) / 1e9)))
        done_at = time.perf_counter_ns()
        while pending and not probe.less_equal(pending[0][0]):
            _t, sched = pending.popleft()
            if sched[-1] >= warm_ns:
                lat = done_at - sched[sched >= warm_ns]
                hist.record(lat)
                if lat.max() > DNF_NS:
                    dnf = True
        if pending and done_at - int(pending[0][1][0]) > DNF_NS:
            dnf = True
        if dnf:
            break
    inp.close()
    if not dnf:
        worker.step_while(lambda: not probe.done(), timeout=10)
    return {"worker": index, "offered": sent, "dnf": dnf, "histogram": hist.to_state()}


def merge_results(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Combine per-worker results of :func:`run_open_loop` into one summary (``dnf``,
    ``offered``, ``p50_ms``, ``p99_ms``, ``p999_ms``, ``max_ms``, ``records``)."""
    hist = LatencyHistogram()
    for r in results:
        hist.merge(LatencyHistogram.from_state(r["histogram"]))
    dnf = any(r["dnf"] for r in results) or hist.max_ns > DNF_NS
    out: dict[str, Any] = {"dnf": dnf, "offered": sum(r["offered"] for r in results)}
    out.update(hist.summary_ms())
    return out


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

        return run_open_loop(worker, build, rate, duration, quantum, make_batch=make_batch,
                             warmup=warmup)

    out = merge_results(pt.execute(work, workers=workers))
    out.update({"query": query, "idiom": idiom, "rate": rate, "workers": workers,
                "quantum_log2": quantum})
    return out


def _cell(run: dict[str, Any] | None) -> str:
    if run is None:
        return "-"
    if run["dnf"]:
        return "DNF"
    return f"{run['p50_ms']} / {run['p999_ms']} / {run['max_ms']}"


def table(runs: Sequence[dict[str, Any]], query: str,
          idioms: Sequence[str] = IDIOMS) -> list[str]:
    """Lines of a text table of ``query``'s runs: one row per (rate, workers), one column per
    idiom, cells ``p50 / p999 / max`` in ms or ``DNF``."""
    lines = [f"NEXMark {query.upper()} latency (ms): p50 / p999 / max, or DNF",
             "rate      workers  " + "  ".join(f"{i:>24}" for i in idioms)]
    keys = sorted({(r["rate"], r["workers"]) for r in runs if r["query"] == query})
    for rate, workers in keys:
        cells = []
        for idiom in idioms:
            run = next((x for x in runs if x["query"] == query and x["idiom"] == idiom
                        and x["rate"] == rate and x["workers"] == workers), None)
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
        top = max([r["p999_ms"] for r in mine if not r["dnf"]]
                  + [dnf_ms if any(r["dnf"] for r in mine) else 1.0])
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
                ax.bar(pos, run["p999_ms"], width * 0.9, color=color, alpha=0.35,
                       label=f"{idiom} p999" if x == 0 else None)
                ax.bar(pos, run["p50_ms"], width * 0.5, color=color,
                       label=f"{idiom} p50" if x == 0 else None)
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
