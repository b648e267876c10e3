"""Differential dataflow on pytimely (``pytimely.differential``), beside Pathway when asked.

Two workloads on one worker, fed as a user feeds them (``dd.new_input`` sessions: ``update``,
then ``advance_to`` and step until a probe has passed the epoch), each answer checked at the
end against a plain-Python computation from scratch:

* ``count`` -- an incremental count per key: ``--updates`` updates (default 1M) over ``--keys``
  keys in batches of ``--batch``, one epoch per batch; every tenth update retracts a record
  still present (10% retractions), counted by ``count()`` (``pytimely``: over ``int`` times a
  running count per key) and, as a second configuration in the same run, by the general
  ``arrange_by_self().reduce(...)`` that ``count()`` uses inside loops (``pytimely_reduce``;
  its arrangement's trace is inspected after compaction).  Figure: updates per second, from
  the first update fed to the last batch's counts out.
* ``reach`` -- the nodes reachable from ``--roots`` roots (nodes ``0 .. roots-1``) of a random
  graph of ``--edges`` edges over ``--nodes`` nodes (``iterate`` of join + concat + distinct,
  the edges arranged once outside the loop and read inside with ``Arrangement.enter``), then
  ``--rounds`` rounds of ``--changes`` random edge changes (half deletions of present edges,
  half insertions of new ones), one epoch per round.  Figures: the initial computation's time
  and each round's latency (from its first update fed to its answer complete), p50/p90/max,
  and their mean (the rounds' throughput is its inverse).

Each pytimely run is a child process of its own (a clean heap and its own peak RSS, from
``VmHWM`` in ``/proc/self/status``); wall and CPU (``time.process_time`` of the run's process, every
thread of it) cover the measured part only.  The figures are medians over ``--repeat`` runs.

``--pathway PYTHON`` (a Python with Pathway installed, e.g. a scratch ``/tmp/pw``) also runs the
same workloads, from the same pickled updates, by ``bench/differential_pathway.py`` (see its
docstring for how Pathway is fed and how its times map onto epochs), alternating with pytimely
run by run, and reports the ratios.  Prints one JSON object, with the machine's load.

    python bench/differential.py [--updates 1000000] [--batch 10000] [--keys 10000]
        [--edges 100000] [--nodes 50000] [--roots 3] [--rounds 100] [--changes 1000]
        [--repeat 3] [--only count|reach] [--pathway /tmp/pw/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from differential_pathway import _peak_rss_mb, _rss_mb  # noqa: E402 (standalone helpers)

# -- the workloads and their answers from scratch ----------------------------------------------


def count_plan(updates: int, keys: int, batch: int, seed: int = 0) -> list[list[tuple]]:
    """Batches of ``(uid, key, diff)``: an insertion of ``key`` numbered ``uid``, or (every
    tenth update) the retraction of a record still present, by the number that inserted it."""
    rng = random.Random(seed)
    live: list[tuple[int, int]] = []
    batches: list[list[tuple]] = []
    current: list[tuple] = []
    for i in range(updates):
        if i % 10 == 9 and live:
            j = rng.randrange(len(live))
            live[j], live[-1] = live[-1], live[j]
            uid, key = live.pop()
            current.append((uid, key, -1))
        else:
            key = rng.randrange(keys)
            live.append((i, key))
            current.append((i, key, 1))
        if len(current) == batch:
            batches.append(current)
            current = []
    if current:
        batches.append(current)
    return batches


def count_from_scratch(batches: list[list[tuple]]) -> list[tuple[int, int]]:
    """The final ``(key, count)`` pairs, counted directly."""
    counts: dict[int, int] = {}
    for b in batches:
        for _uid, key, diff in b:
            counts[key] = counts.get(key, 0) + diff
    return sorted((k, n) for k, n in counts.items() if n)


def reach_plan(edges: int, nodes: int, rounds: int, changes: int, seed: int = 0) -> list:
    """The edge updates of each round, ``[((src, dst), diff), ...]``; round 0 loads the graph,
    each later one deletes ``changes // 2`` present edges and inserts as many new ones."""
    rng = random.Random(seed)
    present: set[tuple[int, int]] = set()
    first = []
    while len(present) < min(edges, nodes * nodes):
        e = (rng.randrange(nodes), rng.randrange(nodes))
        if e not in present:
            present.add(e)
            first.append((e, 1))
    out = [first]
    pool = [e for e, _ in first]
    half = changes // 2
    for _ in range(rounds):
        step = []
        for _ in range(min(half, len(pool))):
            j = rng.randrange(len(pool))
            pool[j], pool[-1] = pool[-1], pool[j]
            e = pool.pop()
            present.discard(e)
            step.append((e, -1))
        added = 0
        while added < changes - half:
            e = (rng.randrange(nodes), rng.randrange(nodes))
            if e not in present:
                present.add(e)
                pool.append(e)
                step.append((e, 1))
                added += 1
        out.append(step)
    return out


def reach_from_scratch(rounds: list, roots: list[int]) -> list[int]:
    """The nodes reachable from ``roots`` after every round (a breadth-first search)."""
    edges: set[tuple[int, int]] = set()
    for changes in rounds:
        for e, diff in changes:
            (edges.add if diff > 0 else edges.discard)(e)
    adjacency: dict[int, list[int]] = {}
    for s, d in edges:
        adjacency.setdefault(s, []).append(d)
    seen, todo = set(roots), list(roots)
    while todo:
        for d in adjacency.get(todo.pop(), ()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return sorted(seen)


# -- pytimely's side (in a child process) -------------------------------------------------------


def pytimely_count(work: dict, via: str = "count") -> dict:
    """Workload ``count`` on one pytimely worker, one epoch per batch, closed loop; ``via``
    ``"count"`` (``Collection.count``) or ``"reduce"`` (a reduce of the arranged keys)."""
    import pytimely as pt
    import pytimely.differential as dd

    batches = work["batches"]

    def run(worker: pt.Worker) -> dict:
        state: dict[tuple[int, int], int] = {}

        def keep(update: tuple) -> None:
            (key, n), _t, diff = update
            c = state.get((key, n), 0) + diff
            if c:
                state[(key, n)] = c
            else:
                del state[(key, n)]

        def build(scope: pt.Scope) -> Any:
            session, keys = dd.new_input(scope)
            if via == "count":
                return session, None, None, keys.count().inspect(keep).probe()
            by_key = keys.arrange_by_self()  # what count() does inside loops, written out
            counts = by_key.reduce(lambda k, vals: [(vals[0][1], 1)], name="Count")
            return session, by_key, counts, counts.as_collection().inspect(keep).probe()

        session, by_key, counts, probe = worker.dataflow(build)
        rss_before = _rss_mb()
        wall, cpu = time.perf_counter(), time.process_time()
        for epoch, batch in enumerate(batches):
            for _uid, key, diff in batch:
                session.update(key, diff)
            session.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(epoch + 1))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        traces = {}
        if by_key is not None:
            trace, out_trace = by_key.trace.statistics(), counts.trace.statistics()
            traces = {
                "trace_updates": trace["updates"],
                "trace_batches": trace["batches"],
                "output_trace_updates": out_trace["updates"],
            }
        session.close()
        worker.run()
        updates = sum(len(b) for b in batches)
        final = sorted(kn for kn, c in state.items() if c > 0)
        return {
            "updates": updates,
            "wall_s": round(wall, 4),
            "cpu_s": round(cpu, 4),
            "updates_per_s": round(updates / wall),
            "rss_before_mb": rss_before,
            **traces,
            "live_keys": len(final),
            "final": final,
        }

    return pt.execute(run)[0]


def pytimely_reach(work: dict) -> dict:
    """Workload ``reach`` on one pytimely worker, one epoch per round, closed loop."""
    import pytimely as pt
    import pytimely.differential as dd

    rounds, roots = work["rounds"], work["roots"]

    def reachable(edges: dd.Collection, starts: dd.Collection) -> tuple[dd.Collection, Any]:
        by_src = edges.arrange_by_key()  # indexed once, outside the loop

        def step(nodes: dd.Collection) -> dd.Collection:
            inner_edges = by_src.enter(nodes.scope)
            visits = nodes.map(lambda n: (n, ())).arrange_by_key()
            return visits.join_map(inner_edges, lambda _n, _u, d: d).concat(nodes).distinct()

        return starts.iterate(step), by_src

    def run(worker: pt.Worker) -> dict:
        state: dict[int, int] = {}

        def keep(update: tuple) -> None:
            node, _t, diff = update
            c = state.get(node, 0) + diff
            if c:
                state[node] = c
            else:
                del state[node]

        def build(scope: pt.Scope) -> Any:
            edge_in, edges = dd.new_input(scope)
            root_in, starts = dd.new_input(scope)
            reach, by_src = reachable(edges, starts)
            return edge_in, root_in, by_src, reach.inspect(keep).probe()

        edge_in, root_in, by_src, probe = worker.dataflow(build)
        rss_before = _rss_mb()
        marks = []
        cpu = time.process_time()
        for epoch, changes in enumerate(rounds):
            start = time.perf_counter()
            if epoch == 0:
                for root in roots:
                    root_in.insert(root)
            for edge, diff in changes:
                edge_in.update(edge, diff)
            edge_in.advance_to(epoch + 1)
            root_in.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(epoch + 1))
            marks.append(time.perf_counter() - start)
        cpu = time.process_time() - cpu
        trace = by_src.trace.statistics()
        edge_in.close()
        root_in.close()
        worker.run()
        return {
            "initial_s": round(marks[0], 4),
            "round_ms": [round(m * 1e3, 3) for m in marks[1:]],
            "cpu_s": round(cpu, 4),
            "rss_before_mb": rss_before,
            "trace_updates": trace["updates"],
            "trace_batches": trace["batches"],
            "final": sorted(n for n, c in state.items() if c > 0),
        }

    return pt.execute(run)[0]


def _child(run: str, path: str) -> None:
    """Run one workload in this process and print its JSON line (with the peak RSS)."""
    with open(path, "rb") as f:
        work = pickle.load(f)
    if run == "reach":
        result = pytimely_reach(work)
    else:
        result = pytimely_count(work, "reduce" if run == "count_reduce" else "count")
    result["system"] = "pytimely"
    result["peak_rss_mb"] = _peak_rss_mb()
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    os._exit(0)


def _run(python: str, script: str, run: str, path: str) -> dict:
    done = subprocess.run(
        [python, os.path.join(HERE, script), "--run", run, "--workload", path],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"{script} --run {run} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- the report -------------------------------------------------------------------------------


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def _figures(run: str, result: dict) -> dict:
    """The figures of one run (the answers and the per-round list left out)."""
    out = {k: v for k, v in result.items() if k not in ("final", "round_ms")}
    if run == "reach":
        rounds = result["round_ms"]
        if rounds:
            out["round_p50_ms"] = round(statistics.median(rounds), 3)
            # The rounds' throughput: 1,000 / this many rounds a second.
            out["round_mean_ms"] = round(statistics.mean(rounds), 3)
            out["round_p90_ms"] = round(_percentile(rounds, 0.9), 3)
            out["round_max_ms"] = round(max(rounds), 3)
            # A drift shows as the last rounds' mean above the first rounds'.
            out["round_first10_mean_ms"] = round(statistics.mean(rounds[:10]), 3)
            out["round_last10_mean_ms"] = round(statistics.mean(rounds[-10:]), 3)
        out["reachable"] = len(result["final"])
    return out


MEDIAN_KEYS = {
    "count": ("wall_s", "cpu_s", "updates_per_s", "peak_rss_mb", "rss_before_mb"),
    "reach": (
        "initial_s",
        "round_p50_ms",
        "round_mean_ms",
        "round_p90_ms",
        "round_max_ms",
        "round_first10_mean_ms",
        "round_last10_mean_ms",
        "cpu_s",
        "peak_rss_mb",
        "rss_before_mb",
    ),
}


def _medians(run: str, runs: list[dict]) -> dict:
    out: dict[str, Any] = {"runs": len(runs)}
    for k in MEDIAN_KEYS[run]:
        values = [r[k] for r in runs if r.get(k) is not None]
        if values:
            out[k] = round(statistics.median(values), 4)
    return out


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark and print (and return) its JSON report."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--updates", type=int, default=1_000_000, help="count: updates in all")
    ap.add_argument("--batch", type=int, default=10_000, help="count: updates per epoch")
    ap.add_argument("--keys", type=int, default=10_000, help="count: distinct keys")
    ap.add_argument("--edges", type=int, default=100_000, help="reach: edges of the graph")
    ap.add_argument("--nodes", type=int, help="reach: nodes (default edges // 2)")
    ap.add_argument("--roots", type=int, default=3, help="reach: roots, nodes 0 .. roots-1")
    ap.add_argument("--rounds", type=int, default=100, help="reach: rounds of changes")
    ap.add_argument("--changes", type=int, default=1_000, help="reach: edge changes per round")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each system, alternating")
    ap.add_argument("--only", choices=("count", "reach"), help="one workload only")
    ap.add_argument("--pathway", metavar="PYTHON", help="a Python with Pathway, to run its side")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--run", choices=("count", "count_reduce", "reach"), help=argparse.SUPPRESS)
    ap.add_argument("--workload", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.run:
        _child(args.run, args.workload)

    from pytimely.openloop import LoadReading, MachineLoad

    nodes = args.nodes or max(1, args.edges // 2)
    roots = list(range(min(args.roots, nodes)))
    workloads = {
        "count": lambda: {"batches": count_plan(args.updates, args.keys, args.batch, args.seed)},
        "reach": lambda: {
            "rounds": reach_plan(args.edges, nodes, args.rounds, args.changes, args.seed),
            "roots": roots,
        },
    }
    checks = {
        "count": lambda w: count_from_scratch(w["batches"]),
        "reach": lambda w: reach_from_scratch(w["rounds"], w["roots"]),
    }
    # (name, python, script, the child's --run for the workload)
    systems = [("pytimely", sys.executable, "differential.py", None)]
    if args.pathway:
        systems.append(("pathway", args.pathway, "differential_pathway.py", None))
    configurations = {
        "count": [*systems, ("pytimely_reduce", sys.executable, "differential.py", "count_reduce")],
        "reach": systems,
    }
    before = LoadReading.now()
    report: dict[str, Any] = {}
    correct = True
    with tempfile.TemporaryDirectory(prefix="bench-differential-") as tmp:
        for run in ("count", "reach"):
            if args.only and run != args.only:
                continue
            work = workloads[run]()
            path = os.path.join(tmp, f"{run}.pickle")
            with open(path, "wb") as f:
                pickle.dump(work, f, protocol=pickle.HIGHEST_PROTOCOL)
            want = checks[run](work)
            runs: dict[str, list[dict]] = {name: [] for name, *_ in configurations[run]}
            checked: dict[str, bool] = {name: True for name, *_ in configurations[run]}
            for _ in range(args.repeat):
                for name, python, script, child_run in configurations[run]:
                    result = _run(python, script, child_run or run, path)
                    got = [tuple(x) for x in result["final"]] if run == "count" else None
                    ok = (got if run == "count" else result["final"]) == want
                    checked[name] = checked[name] and ok
                    runs[name].append(_figures(run, result))
                    print(json.dumps({run: runs[name][-1], "correct": ok}), file=sys.stderr)
            correct = correct and all(checked.values())
            section: dict[str, Any] = {
                name: {**_medians(run, rs), "correct": checked[name], "every_run": rs}
                for name, rs in runs.items()
            }
            if run == "count":
                section["live_keys"] = len(want)
            else:
                section["reachable"] = len(want)
            if "pathway" in section:
                mine, theirs = section["pytimely"], section["pathway"]
                if run == "count":
                    section["throughput_pytimely_over_pathway"] = round(
                        mine["updates_per_s"] / theirs["updates_per_s"], 3
                    )
                    section["throughput_pytimely_reduce_over_pathway"] = round(
                        section["pytimely_reduce"]["updates_per_s"] / theirs["updates_per_s"], 3
                    )
                else:
                    section["initial_pytimely_over_pathway"] = round(
                        mine["initial_s"] / theirs["initial_s"], 3
                    )
                    if "round_p50_ms" in mine and "round_p50_ms" in theirs:
                        section["round_p50_pytimely_over_pathway"] = round(
                            mine["round_p50_ms"] / theirs["round_p50_ms"], 3
                        )
                        section["round_mean_pytimely_over_pathway"] = round(
                            mine["round_mean_ms"] / theirs["round_mean_ms"], 3
                        )
                section["cpu_pytimely_over_pathway"] = round(mine["cpu_s"] / theirs["cpu_s"], 3)
            report[run] = section
    load = MachineLoad.between(before, LoadReading.now())
    out = {
        "benchmark": "differential",
        "python": sys.version.split()[0],
        "workers": 1,
        "parameters": {
            "count": {"updates": args.updates, "batch": args.batch, "keys": args.keys},
            "reach": {
                "edges": args.edges,
                "nodes": nodes,
                "roots": len(roots),
                "rounds": args.rounds,
                "changes": args.changes,
            },
            "repeat": args.repeat,
            "seed": args.seed,
        },
        "results": report,
        "correct": correct,
        "machine": load.to_dict(),
        "loadavg_end": list(os.getloadavg()),
        "quiet": not load.under_load(),
        "notes": NOTES,
    }
    print(json.dumps(out, indent=1))
    if not correct:
        raise SystemExit("a result differs from the computation from scratch")
    return out


NOTES = [
    "One worker each. pytimely: one epoch per batch (count) or round (reach), closed loop: feed"
    " it, advance_to, step until the probe passes it. Pathway: one commit (one Pathway"
    " timestamp) per batch or round through pw.io.python.ConnectorSubject (next/delete/commit).",
    "count: Pathway's batches are sent back to back without waiting (its engine runs in its own"
    " threads, feeding overlaps computing); its time runs from the first update sent to the last"
    " on_time_end. pytimely waits for each batch's counts before feeding the next.",
    "count: pytimely is fed keys (a multiset); Pathway rows need an identity, so each insertion"
    " carries its update number as primary key and a retraction deletes that row.",
    "reach: closed loop on both; a round's latency runs from its first update fed to its answer"
    " complete (pytimely: the probe; Pathway: on_time_end at a time whose output holds the"
    " round's marker row). initial_s is round 0: loading the graph and the roots.",
    "cpu_s: time.process_time of the run's process (all its threads) over the measured part;"
    " peak_rss_mb: VmHWM of that process (its own peak, not its parent's), rss_before_mb its"
    " RSS with the workload loaded"
    " (the pickled updates, the same for both) before the dataflow is fed.",
    "count: pytimely counts with count(), which over int times keeps a running count per key"
    " (no arrangement); pytimely_reduce, in the same run, with the reduce over arranged keys"
    " that count() uses inside loops.",
    "trace_updates/trace_batches: the arrangement of the input (count: pytimely_reduce's keys;"
    " reach: the edges) after the last batch, as the library's amortized merging left it;"
    " compare with live_keys and the live edge count (= edges).",
]


if __name__ == "__main__":
    main()
