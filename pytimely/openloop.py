"""Open-loop latency measurement: offer input at a fixed rate, whatever the system does.

The method is the open-loop harness of "Megaphone: Latency-conscious state migration for
distributed streaming dataflows" (Hoffmann et al., PVLDB 12(9), 2019, its evaluation): a
closed loop (send the next record when the last one is done) hides queueing, an open loop
exposes it.

:func:`run_open_loop` serves any dataflow.  Record ``i`` is *scheduled* at ``start + i / rate``
and stamped with that instant as its event time, in nanoseconds, quantized down to a multiple of
``2**quantum_log2`` (the "timestamp granularity").  The harness feeds every record whose
scheduled instant has passed, advances the input to the current quantized instant (so time
moves even when no record is due, but never past the next unsent record's timestamp), and steps
the worker.  A record's *latency* is the moment the output's frontier passes its timestamp
minus its scheduled instant (with ``seen=``, also the moment the record's result leaves the
dataflow, as a sink sees it, whichever worker it reaches: the workers must share a clock, so
one machine); latencies go into a log-bucketed :class:`LatencyHistogram`.  A run
is *DNF* (did not finish) as soon as a latency exceeds :data:`DNF_NS` (1 s) or the backlog of
unfinished records is older than that.  The dataflow under test is
``build(scope, stream) -> output stream`` where ``stream`` carries the batches
``make_batch(first_index, count, times_ns)`` makes; everything runs on every worker (each worker
offers ``rate / peers``), and :func:`merge_results` combines the workers' results::

    results = pt.execute(lambda w: run_open_loop(w, build, rate=100_000, duration=2.0),
                         workers=2)
    print(merge_results(results))  # {'dnf': False, 'offered': ..., 'p50_ms': ..., ...}

:mod:`pytimely.nexmark.latency` measures NEXMark queries with it.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .synchronization import barrier

__all__ = [
    "BUSY_CPUS",
    "DNF_NS",
    "LatencyHistogram",
    "LoadReading",
    "MachineLoad",
    "median_run",
    "merge_results",
    "run_open_loop",
    "wait_until_quiet",
]

#: Latencies logged in the loop before they are counted into a histogram (8 MB each).
_LOG_LIMIT = 1 << 20

#: A run is "did not finish" once a latency (or the oldest unfinished record) exceeds this.
DNF_NS = 1_000_000_000

#: A latency measurement is *taken under load* when other processes used more than this many
#: CPUs on average while it ran: its numbers then describe the machine, not the dataflow.
BUSY_CPUS = 0.5


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
        """Count each latency of ``latencies_ns`` (nanoseconds) in its bucket."""
        if len(latencies_ns) == 0:
            return
        np.add.at(self.counts, self._index(latencies_ns), 1)
        self.max_ns = max(self.max_ns, int(latencies_ns.max()))
        self.total += len(latencies_ns)

    def merge(self, other: LatencyHistogram) -> None:
        """Add ``other``'s counts into this histogram (e.g. another worker's)."""
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
        """p50, p99, p99.9 and max latency in milliseconds, and the number of records."""
        return {
            "p50_ms": round(self.quantile(0.5) / 1e6, 3),
            "p99_ms": round(self.quantile(0.99) / 1e6, 3),
            "p999_ms": round(self.quantile(0.999) / 1e6, 3),
            "max_ms": round(self.max_ns / 1e6, 3),
            "records": self.total,
        }

    def to_state(self) -> tuple:
        """``(counts, max_ns, total)``: what :meth:`from_state` rebuilds the histogram from."""
        return (self.counts, self.max_ns, self.total)

    @classmethod
    def from_state(cls, state: tuple) -> LatencyHistogram:
        """The histogram whose :meth:`to_state` was ``state``."""
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
    seen: Callable[[Any], int] | None = None,
) -> dict[str, Any]:
    """Offer ``rate`` records/s (this worker's share: ``rate / peers``) for ``duration``
    seconds into ``build``'s dataflow; return this worker's latency histogram (as a state for
    :func:`merge_results`), the number of records it offered and ``dnf``.

    ``make_batch(first, count, times)`` makes the records with this worker's indices ``first``
    to ``first + count - 1`` (``times``: their timestamp, one per record); by default the
    indices themselves.  With ``seen``, the latency of a record is also taken where it leaves
    ``build``'s output, as a sink would see it: ``seen(output_record)`` returns its scheduled
    instant (``time.perf_counter_ns``), and the records are by default ``(index, scheduled
    ns)`` pairs for the dataflow to carry along.  Those latencies go into a second histogram
    (``seen_histogram``; :func:`merge_results` reports them as ``seen_p50_ms`` and so on).
    """
    peers, index = worker.peers, worker.index
    my_rate = rate / peers
    quantum = 1 << quantum_log2
    mask = ~(quantum - 1)
    seen_hist = LatencyHistogram() if seen is not None else None
    # Latencies are logged into flat int64 arrays (no object per sample for the collector to
    # trace) and counted into the histograms after the run, or when the logs grow large: a
    # histogram update in the loop would delay the next records (and show in the tail).
    seen_log = array("q")  # latencies at the sink of records scheduled after the warm-up

    def look(_t: Any, batch: Any) -> None:
        now = time.perf_counter_ns()
        seen_log.extend([now - s for s in map(seen, batch) if s >= warm_ns])  # type: ignore[arg-type]

    def dataflow(scope: Any) -> Any:
        inp, stream = scope.new_input()
        out = build(scope, stream)
        if seen is not None:
            out = out.inspect_batch(look, name="OpenLoopSink")
        return inp, out.probe()

    inp, probe = worker.dataflow(dataflow)
    barrier(worker)  # every worker has built its dataflow: start the clocks together
    hist = LatencyHistogram()
    # Timestamps sent and not yet complete: (timestamp, first index, end index), in order.
    pending: deque[tuple[int, int, int]] = deque()
    done = array("q")  # complete timestamps, flat: moment complete, first index, end index
    sent = 0
    dnf = False
    start = time.perf_counter_ns()
    end = start + int((duration + warmup) * 1e9)
    warm_ns = start + int(warmup * 1e9)
    # Record i of this worker is scheduled at start + int(i * period_ns), at timestamp
    # int(i * period_ns) & mask.  (The arithmetic below is per timestamp, not per record:
    # this loop is the source of the measurement and must cost little per iteration.)
    period_ns = 1e9 / my_rate

    def first_at_or_after(ns: int) -> int:
        """The least index whose scheduled offset is at least ``ns``."""
        i = max(0, math.ceil(ns / period_ns) - 1)
        while int(i * period_ns) < ns:
            i += 1
        return i

    if make_batch is None:
        if seen is None:

            def make(first: int, count: int, t: int) -> Any:
                return list(range(first, first + count))

        else:

            def make(first: int, count: int, t: int) -> Any:
                return [(i, start + int(i * period_ns)) for i in range(first, first + count)]

    else:
        user_batch = make_batch

        def make(first: int, count: int, t: int) -> Any:
            return user_batch(first, count, np.full(count, t, dtype=np.int64))

    def record_done() -> None:
        """Count the complete timestamps' latencies into the histogram (in bulk)."""
        if not done:
            return
        moments, firsts, ends = np.array(done, dtype=np.int64).reshape(-1, 3).T
        counts = ends - firsts
        offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        indices = np.repeat(firsts, counts) + offsets
        sched = start + (indices * period_ns).astype(np.int64)
        lat = np.repeat(moments, counts) - sched
        hist.record(lat[sched >= warm_ns])
        del done[:]

    def record_seen() -> None:
        """Count the latencies seen at the sink into their histogram (in bulk)."""
        if seen_log:
            seen_hist.record(np.array(seen_log, dtype=np.int64))  # type: ignore[union-attr]
            del seen_log[:]

    while True:
        now = time.perf_counter_ns()
        if now >= end:
            break
        due = int((now - start) / period_ns) + 1  # records 0 .. due - 1 are due by now
        # One message per distinct timestamp (that is what a timestamp is).
        a = sent
        while a < due:
            t = int(a * period_ns) & mask
            b = min(due, first_at_or_after(t + quantum))
            if t > inp.time:
                inp.advance_to(t)
            inp.send_batch(make(a, b - a, t))
            pending.append((t, a, b))
            a = b
        sent = due
        # Time moves even without records, but never past the next unsent record's timestamp.
        t_now = min(now - start, int(sent * period_ns)) & mask
        if t_now > inp.time:
            inp.advance_to(t_now)
        # Step; if nothing is ready, park until the next record is due (at most 1 ms) rather
        # than spin: an open-loop source must not steal the CPU the workers need.
        next_due = start + sent * period_ns
        worker.step_or_park(max(0.0, min(1e-3, (next_due - time.perf_counter_ns()) / 1e9)))
        done_at = time.perf_counter_ns()
        while pending and not probe.less_equal(pending[0][0]):
            _t, a, b = pending.popleft()
            done.extend((done_at, a, b))
            if done_at - (start + int(a * period_ns)) > DNF_NS:
                dnf = True
        if len(done) > _LOG_LIMIT:
            record_done()
        if len(seen_log) > _LOG_LIMIT:
            record_seen()
        if pending and done_at - (start + int(pending[0][1] * period_ns)) > DNF_NS:
            dnf = True
        if dnf:
            break
    inp.close()
    if not dnf:
        worker.step_while(lambda: not probe.done(), timeout=10)
    record_done()
    out: dict[str, Any] = {
        "worker": index, "offered": sent, "dnf": dnf, "histogram": hist.to_state()
    }  # fmt: skip
    if seen_hist is not None:
        record_seen()
        out["seen_histogram"] = seen_hist.to_state()
    return out


def merge_results(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Combine per-worker results of :func:`run_open_loop` into one summary (``dnf``,
    ``offered``, ``p50_ms``, ``p99_ms``, ``p999_ms``, ``max_ms``, ``records``; with
    ``seen``, the same figures taken at the sink as ``seen_p50_ms`` and so on); a run with
    no latency sample is DNF."""
    hist = LatencyHistogram()
    for r in results:
        hist.merge(LatencyHistogram.from_state(r["histogram"]))
    # No sample at all (nothing came out within the run, e.g. on a machine too busy to start
    # the dataflow in time) did not finish either: its quantiles would be NaN.
    dnf = any(r["dnf"] for r in results) or hist.max_ns > DNF_NS or hist.total == 0
    out: dict[str, Any] = {"dnf": dnf, "offered": sum(r["offered"] for r in results)}
    out.update(hist.summary_ms())
    if any("seen_histogram" in r for r in results):
        seen = LatencyHistogram()
        for r in results:
            seen.merge(LatencyHistogram.from_state(r["seen_histogram"]))
        summary: dict[str, Any] = seen.summary_ms()
        if seen.total == 0:  # nothing seen: no figure (never NaN)
            summary = {k: (0 if k == "records" else None) for k in summary}
        out.update({f"seen_{k}": v for k, v in summary.items()})
    return out


# --- repeated runs -----------------------------------------------------------------------------

_METRICS = ("p50_ms", "p99_ms", "p999_ms", "max_ms")


def median_run(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One summary for repeated runs of the same configuration (:func:`merge_results` outputs
    with the same parameters): each latency metric is the median over the runs, a DNF run
    counting as infinitely slow, so the result is DNF exactly when the median run is.

    The other keys come from the first run; ``repeats`` holds every run's ``dnf`` and metrics
    (in run order), so the spread stays visible.
    """
    if not runs:
        raise ValueError("median_run: no runs")
    out = dict(runs[0])
    out["repeats"] = [{k: r.get(k) for k in ("dnf", *_METRICS)} for r in runs]
    dnf = False
    for metric in _METRICS:
        values = [math.inf if r["dnf"] else r[metric] for r in runs if metric in r or r["dnf"]]
        if not values:
            continue
        mid = statistics.median(values)
        if math.isinf(mid):
            dnf = True
        else:
            out[metric] = mid
    out["dnf"] = dnf
    return out


# --- how busy the machine was ------------------------------------------------------------------


def _system_busy_seconds() -> float | None:
    """CPU seconds all processes spent busy since boot, from ``/proc/stat`` (Linux; None
    elsewhere): user, nice, system, irq, softirq and steal time."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 9:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds() -> float:
    """CPU seconds of this process and of its children that were waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _loadavg() -> tuple[float, float, float] | None:
    try:
        return os.getloadavg()
    except OSError:  # not available on this platform
        return None


@dataclass(frozen=True)
class LoadReading:
    """One instant's counters (:meth:`now`); two readings make a :class:`MachineLoad`."""

    wall: float
    system_busy: float | None
    own_cpu: float
    loadavg: tuple[float, float, float] | None

    @classmethod
    def now(cls) -> LoadReading:
        """The counters as they are now."""
        return cls(time.perf_counter(), _system_busy_seconds(), _own_cpu_seconds(), _loadavg())


@dataclass(frozen=True)
class MachineLoad:
    """What the rest of the machine did between two :class:`LoadReading` s.

    ``others_cpus`` is the average number of CPUs busy with anything but this process (and
    its waited-for children) — measured from ``/proc/stat``, ``None`` where that does not
    exist; the load averages (``os.getloadavg``, 1/5/15 min) are shown as the familiar figure,
    but they include this process and decay over minutes, so they only decide when
    ``others_cpus`` is unknown.
    """

    cpus: int
    seconds: float
    others_cpus: float | None
    loadavg_before: tuple[float, float, float] | None
    loadavg_after: tuple[float, float, float] | None

    @classmethod
    def between(cls, before: LoadReading, after: LoadReading) -> MachineLoad:
        """The load between two readings of this process (``before`` taken first)."""
        seconds = max(after.wall - before.wall, 1e-9)
        others = None
        if before.system_busy is not None and after.system_busy is not None:
            busy = after.system_busy - before.system_busy
            others = max(0.0, busy - (after.own_cpu - before.own_cpu)) / seconds
        return cls(os.cpu_count() or 1, seconds, others, before.loadavg, after.loadavg)

    def under_load(self, busy_cpus: float = BUSY_CPUS, own_cpus: float = 1.0) -> bool:
        """Other processes used more than ``busy_cpus`` CPUs on average; without
        ``/proc/stat``, the 1-minute load average exceeded ``own_cpus`` (the measurement's
        own share) by more than ``busy_cpus``."""
        if self.others_cpus is not None:
            return self.others_cpus > busy_cpus
        loads = [a[0] for a in (self.loadavg_before, self.loadavg_after) if a is not None]
        return bool(loads) and max(loads) > own_cpus + busy_cpus

    def describe(self) -> str:
        """One line: CPUs, load averages before and after, other processes' CPU use."""
        parts = [f"{self.cpus} CPUs"]

        def fmt(a: tuple[float, float, float] | None) -> str:
            return "n/a" if a is None else " / ".join(f"{x:.2f}" for x in a)

        parts.append(
            f"load average (1/5/15 min) {fmt(self.loadavg_before)} before, "
            f"{fmt(self.loadavg_after)} after"
        )
        if self.others_cpus is not None:
            parts.append(
                f"other processes busy {self.others_cpus:.2f} CPUs on average over "
                f"{self.seconds:.1f} s"
            )
        return "machine: " + "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """The figures as a JSON-ready dict (for ``latency.json``)."""
        return {
            "cpus": self.cpus,
            "seconds": round(self.seconds, 3),
            "others_cpus": None if self.others_cpus is None else round(self.others_cpus, 3),
            "loadavg_before": self.loadavg_before,
            "loadavg_after": self.loadavg_after,
        }


def wait_until_quiet(
    max_wait: float, busy_cpus: float = BUSY_CPUS, window: float = 1.0
) -> MachineLoad | None:
    """Sleep in ``window``-second steps until other processes use at most ``busy_cpus`` CPUs
    (e.g. a JVM that was just stopped winds down), for at most ``max_wait`` seconds.  Returns
    the last window's :class:`MachineLoad` (``None`` if ``max_wait`` allowed no window)."""
    deadline = time.perf_counter() + max_wait
    last = None
    while time.perf_counter() + window <= deadline:
        before = LoadReading.now()
        time.sleep(window)
        last = MachineLoad.between(before, LoadReading.now())
        if not last.under_load(busy_cpus, own_cpus=0.0):
            break
    return last
