"""Pathway's side of ``bench/differential.py``: the same two workloads, in a Pathway program.

Run by ``bench/differential.py --pathway PYTHON`` (a Python with Pathway installed, in a
scratch environment outside the repository), never imported by pytimely's code: it needs only
Pathway and the standard library.  It reads the workload the benchmark wrote (a pickle: the
exact updates pytimely is fed), runs it once and prints one JSON line.

How a user feeds Pathway incremental updates with retractions: a
``pw.io.python.ConnectorSubject`` whose ``run`` calls ``next(...)`` to insert a row and
``delete(...)`` (the same values) to retract it, and ``commit()`` to close a batch -- one
Pathway timestamp per commit (``autocommit_duration_ms=None``: commits only when told).  Rows
need an identity: the counted records carry their update number as primary key (a retraction
deletes the row that inserted the record), the edges are their own key ``(src, dst)``.  The
results come out through ``pw.io.subscribe``: ``on_change`` keeps the output collection,
``on_time_end`` says a timestamp is complete.

* ``count``: ``groupby(key).reduce(key, n=count())``; the subject sends every batch and commits
  it without waiting (Pathway's engine runs in its own threads, so feeding and computing
  overlap); the time is from the first update sent to the last ``on_time_end``.
* ``reach``: ``pw.iterate`` of "roots, plus the targets of the edges leaving the reachable set,
  distinct" (a join, a concat, a ``groupby().reduce()``), the reachable set's universe changing
  (``pw.iterate_universe``).  Closed loop, as pytimely's side: the subject sends a round, commits
  it and waits for its answer before the next round.  A round's answer is complete when
  ``on_time_end`` reports a time at which the output also holds the round's *marker* (a row
  that goes through the same connector and into the subscribed table by a concat, so that its
  time cannot be closed before the reachable set's): Pathway calls ``on_time_end`` only for
  times at which the subscribed table changes, and a round that changes no reachable node
  would otherwise never report.

    /tmp/pw/bin/python bench/differential_pathway.py --workload FILE --run count|reach
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import sys
import threading
import time
from time import perf_counter, process_time


def _rss_mb() -> float:
    """This process' resident set now (MB), from ``/proc`` (0 where there is none)."""
    try:
        with open("/proc/self/statm") as f:
            return round(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
    except OSError:  # pragma: no cover - not Linux
        return 0.0


def _peak_rss_mb() -> float:
    """This process' peak resident set (MB): ``VmHWM`` of ``/proc/self/status``, which starts
    afresh at ``exec`` (``ru_maxrss`` keeps the parent's peak across it: a child started by a
    parent holding a large workload would report the parent's)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:  # pragma: no cover - not Linux
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def run_count(work: dict) -> dict:
    """Workload (a): incremental count per key, batches sent back to back."""
    import pathway as pw

    class Updates(pw.Schema):
        uid: int = pw.column_definition(primary_key=True)
        key: int

    batches = work["batches"]
    clock: dict = {}

    class Feed(pw.io.python.ConnectorSubject):
        def run(self) -> None:
            clock["start"] = time.perf_counter()
            clock["cpu_start"] = time.process_time()
            for batch in batches:
                for uid, key, diff in batch:
                    if diff > 0:
                        self.next(uid=uid, key=key)
                    else:
                        self.delete(uid=uid, key=key)
                self.commit()
            clock["fed"] = time.perf_counter()

    table = pw.io.python.read(Feed(), schema=Updates, autocommit_duration_ms=None)
    counts = table.groupby(pw.this.key).reduce(pw.this.key, n=pw.reducers.count())
    state: dict = {}
    times = [0]

    def on_change(key, row, time, is_addition) -> None:  # noqa: A002 - Pathway's names
        kn = (row["key"], row["n"])
        c = state.get(kn, 0) + (1 if is_addition else -1)
        if c:
            state[kn] = c
        else:
            del state[kn]

    def on_time_end(time) -> None:  # noqa: A002
        times[0] += 1
        clock["end"] = perf_counter()
        clock["cpu_end"] = process_time()

    pw.io.subscribe(counts, on_change=on_change, on_time_end=on_time_end)
    pw.run(monitoring_level=pw.MonitoringLevel.NONE)
    seconds = clock["end"] - clock["start"]
    updates = sum(len(b) for b in batches)
    final = sorted(kn for kn, c in state.items() if c > 0)
    return {
        "updates": updates,
        "wall_s": round(seconds, 4),
        "cpu_s": round(clock["cpu_end"] - clock["cpu_start"], 4),
        "updates_per_s": round(updates / seconds),
        "feeding_s": round(clock["fed"] - clock["start"], 4),
        "pathway_times_reported": times[0],
        "final": final,
    }


def run_reach(work: dict) -> dict:
    """Workload (b): reachability from the roots, then rounds of edge changes, closed loop."""
    import pathway as pw

    class Changes(pw.Schema):
        src: int = pw.column_definition(primary_key=True)
        dst: int = pw.column_definition(primary_key=True)
        kind: int  # 0: an edge; 1: a root (src, dst -1); 2: round r's marker (-1 - r, -2)

    rounds = work["rounds"]  # rounds[0] loads the graph
    roots = work["roots"]
    complete = threading.Semaphore(0)
    clock: dict = {"marks": []}
    seen: dict = {}

    class Feed(pw.io.python.ConnectorSubject):
        def run(self) -> None:
            for r, changes in enumerate(rounds):
                start = time.perf_counter()
                if r == 0:
                    clock["cpu_start"] = time.process_time()
                    for root in roots:
                        self.next(src=root, dst=-1, kind=1)
                for (s, d), diff in changes:
                    if diff > 0:
                        self.next(src=s, dst=d, kind=0)
                    else:
                        self.delete(src=s, dst=d, kind=0)
                if r > 0:
                    self.delete(src=-r, dst=-2, kind=2)
                self.next(src=-1 - r, dst=-2, kind=2)
                self.commit()
                while True:  # until on_time_end has seen this round's marker
                    complete.acquire()
                    if seen.get(-1 - r, 0) > 0:
                        break
                clock["marks"].append(time.perf_counter() - start)
            clock["cpu_end"] = time.process_time()

    changes = pw.io.python.read(Feed(), schema=Changes, autocommit_duration_ms=None)
    edges = changes.filter(pw.this.kind == 0).select(pw.this.src, pw.this.dst)
    start_nodes = changes.filter(pw.this.kind == 1).select(node=pw.this.src)
    markers = changes.filter(pw.this.kind == 2).select(node=pw.this.src)

    def step(reach: pw.Table, edges: pw.Table) -> dict:
        hop = reach.join(edges, reach.node == edges.src).select(node=edges.dst)
        nodes = reach.concat_reindex(hop).groupby(pw.this.node).reduce(pw.this.node)
        return {"reach": nodes.with_id_from(pw.this.node), "edges": edges}

    start = pw.iterate_universe(start_nodes.with_id_from(pw.this.node))
    reach = pw.iterate(step, reach=start, edges=edges)["reach"]
    out = reach.concat_reindex(markers)
    state: dict = {}

    def on_change(key, row, time, is_addition) -> None:  # noqa: A002 - Pathway's names
        n = row["node"]
        c = state.get(n, 0) + (1 if is_addition else -1)
        if c:
            state[n] = c
        else:
            del state[n]

    def on_time_end(time) -> None:  # noqa: A002
        seen.clear()
        seen.update((n, c) for n, c in state.items() if n < 0)
        complete.release()

    pw.io.subscribe(out, on_change=on_change, on_time_end=on_time_end)
    pw.run(monitoring_level=pw.MonitoringLevel.NONE)
    marks = clock["marks"]
    return {
        "initial_s": round(marks[0], 4),
        "round_ms": [round(m * 1e3, 3) for m in marks[1:]],
        "cpu_s": round(clock["cpu_end"] - clock["cpu_start"], 4),
        "final": sorted(n for n, c in state.items() if c > 0 and n >= 0),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--workload", required=True, help="the pickle bench/differential.py wrote")
    ap.add_argument("--run", choices=("count", "reach"), required=True)
    args = ap.parse_args()
    with open(args.workload, "rb") as f:
        work = pickle.load(f)
    import pathway as pw

    rss_before = _rss_mb()
    started = time.perf_counter()
    result = run_count(work) if args.run == "count" else run_reach(work)
    result["system"] = "pathway"
    result["version"] = pw.__version__
    result["process_wall_s"] = round(time.perf_counter() - started, 4)
    result["rss_before_mb"] = rss_before
    result["peak_rss_mb"] = _peak_rss_mb()
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    os._exit(0)  # Pathway's engine threads need no tearing down


if __name__ == "__main__":
    main()
