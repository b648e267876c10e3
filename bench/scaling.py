"""Does a second worker pay?  1 worker and 2 processes side by side, wall and CPU time.

Each workload runs once on one worker and once on two worker processes.  Every worker process
generates its own half of the input (seeded, before the clock starts), the workers start
together (a barrier) and each measures its own wall time (``time.perf_counter``) and CPU time
(``time.process_time``: all threads of the process, receiver threads included).  Reported per
workload:

* ``wall_s``: the slowest worker's wall time;  ``cpu_s``: CPU time summed over the processes;
* ``cpu_efficiency`` = CPU(1 worker) / sum of CPU(2 processes): 1.0 means the exchange costs
  nothing; it does not depend on how many cores are free, so it is the figure that decides
  scaling on a larger machine;
* ``speedup`` = wall(1 worker) / wall(2 processes);
* ``ok``: the answer matches one computed without pytimely.

With ``--repeat N`` (default 3) the two configurations run alternately N times (1 worker, 2
processes, 1 worker, ...) and each figure is the median over the runs; ``runs`` lists every
run's efficiency and speedup, so that the spread a shared machine adds is in the report.

Workloads (issue 13), over words drawn from a 10,000-word vocabulary in batches of 1,000:

* ``keyed_count``: ``map(w -> (w, 1))`` then ``aggregate`` (a per-record fold, exchanged by word);
* ``batch_count``: ``exchange()`` by word, then ``Counter.update`` per batch;
* ``components``: connected components of a seeded random graph (``--edges`` edges on
  ``edges // 2`` nodes: 100,000 on 50,000 by default) by label propagation in an iterative
  scope (``examples/components.py``, the code of docs/graphs.md): each node's label is the
  smallest node id of its component; the same dataflow on one worker and on two, nodes
  partitioned by id.  Its answer is checked against a plain union-find;
* ``bfs``: breadth-first search from node 0 of a seeded random directed graph
  (``--graph-nodes`` nodes, four times as many edges: 500,000 and 2,000,000 by default) in an
  iterative scope (``examples/bfs.py``, docs/graphs.md), checked against a plain Python BFS;
* ``pagerank``: 10 PageRank iterations on the same graph (``examples/pagerank.py``), checked
  against the same iterations in numpy (to within 1e-9);
* ``cpu_map``: a per-record map doing about 5 us of arithmetic, then the batch count.

    python bench/scaling.py [--words 4000000] [--heavy-words 400000] [--edges 100000]
                            [--graph-nodes 500000]
                            [--workloads keyed_count,batch_count,components,bfs,pagerank,cpu_map]
                            [--workers 1,2,4,8 [--equal-load]]
                            [--repeat 3] [--quick]

With ``--workers 1,2,4,8 --equal-load`` each count below 8 also runs beside stand-in processes
(``8 - N`` of them, each a loop of the batch count's own work), so that every configuration
shares the CPUs among eight busy processes: on a machine with fewer cores than workers, the
plain figures for 8 include what running with cold caches on a shared core costs, and the
``equal_load`` rows separate that from what more workers cost.

Prints JSON (and writes it to ``--out`` if given), with the machine's load over all the runs
(``machine``: CPUs, load averages before and after, ``others_cpus``: the average number of CPUs
other processes kept busy) and ``quiet``: ``false`` when other processes used more than half a
CPU on average, and then the figures are not reliable: the efficiencies move with the load.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import pytimely as pt
from pytimely.openloop import LoadReading, MachineLoad
from pytimely.synchronization import barrier

# The graph workloads are the examples of docs/graphs.md, imported as they are.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from bfs import bfs_job  # noqa: E402
from bfs import random_edges as random_graph  # noqa: E402
from components import components, edge_batches  # noqa: E402
from pagerank import DAMPING, pagerank_job  # noqa: E402

VOCAB = 10_000
WORKLOADS = ("keyed_count", "batch_count", "components", "bfs", "pagerank", "cpu_map")
#: Workloads whose input must arrive at one time (their loop starts once every edge is in).
ONE_EPOCH = ("components", "bfs", "pagerank")
PAGERANK_ITERATIONS = 10
GRAPH_BATCH = 10_000
#: Iterations of :func:`heavy`: about 5 us per call on the 2-vCPU benchmark machine under load
#: (CPython 3.11), less on a quiet fast core.
HEAVY_ROUNDS = 160


def vocabulary() -> list[str]:
    rng = np.random.default_rng(7)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words: set[str] = set()
    while len(words) < VOCAB:
        words.add("".join(rng.choice(letters, int(rng.integers(3, 10)))))
    return sorted(words)


def word_batches(
    vocab: list[str], index: int, peers: int, words: int, batch: int
) -> list[list[str]]:
    """The batches worker ``index`` of ``peers`` generates: batch ``k`` is worker ``k % peers``'s;
    together the workers generate the same ``words // batch`` batches whatever ``peers``."""
    return [
        [vocab[i] for i in np.random.default_rng(k).integers(0, VOCAB, batch).tolist()]
        for k in range(index, words // batch, peers)
    ]


def heavy(word: str) -> int:
    """About 5 us of pure-Python arithmetic on ``word``; deterministic."""
    h = len(word)
    for i in range(HEAVY_ROUNDS):
        h = (h * 31 + i) & 0xFFFFF
    return h


# --- the dataflows: each returns (input handle, a function giving this worker's answer) -------


def feed(
    worker: pt.Worker, inp: Any, batches: list, per_step: int = 16, per_time: int = 256
) -> None:
    """Send ``batches``, stepping the worker every ``per_step`` batches and moving to a new
    time every ``per_time`` batches (a window of 256,000 words: per-time operators such as
    ``aggregate`` emit once per window); then run the dataflow to completion."""
    for i, b in enumerate(batches):
        inp.send_batch(b)
        if i % per_time == per_time - 1:
            inp.advance_to(i // per_time + 1)
        if i % per_step == per_step - 1:
            worker.step()
    inp.close()
    worker.run()


def keyed_count(scope: Any) -> tuple[Any, Callable[[], Any]]:
    totals: collections.Counter = collections.Counter()
    inp, stream = scope.new_input()
    (
        stream.map(lambda w: (w, 1))
        .aggregate(lambda _k, v, acc: acc + v, lambda k, acc: (k, acc))
        .for_each(lambda _t, batch: [totals.update(dict(batch))])
    )
    return inp, lambda: dict(totals)


def batch_count(
    scope: Any, stream_of: Callable[[Any], Any] = lambda s: s
) -> tuple[Any, Callable[[], Any]]:
    totals: collections.Counter = collections.Counter()
    inp, stream = scope.new_input()
    stream_of(stream).exchange().for_each(lambda _t, batch: totals.update(batch))
    return inp, lambda: dict(totals)


def cpu_map(scope: Any) -> tuple[Any, Callable[[], Any]]:
    return batch_count(scope, lambda s: s.map(heavy))


# --- running ----------------------------------------------------------------------------------


def run(workers: int, args: argparse.Namespace) -> dict[str, Any]:
    """Every workload on ``workers`` workers: per workload, each worker's wall and CPU time and
    answer."""
    names = args.workloads

    def work(worker: pt.Worker) -> dict[str, Any]:
        vocab = vocabulary()
        me, peers = worker.index, worker.peers
        words = word_batches(vocab, me, peers, args.words, args.batch)  # read-only: shared
        inputs = {
            "keyed_count": (keyed_count, lambda: words),
            "batch_count": (batch_count, lambda: words),
            "cpu_map": (
                cpu_map,
                lambda: word_batches(vocab, me, peers, args.heavy_words, args.batch),
            ),
            "components": (
                components,
                lambda: edge_batches(args.edges // 2, args.edges, me, peers, args.batch),
            ),
            "bfs": (bfs_job(args.graph_nodes), lambda: graph_batches(args, me, peers)),
            "pagerank": (
                pagerank_job(args.graph_nodes, PAGERANK_ITERATIONS),
                lambda: graph_batches(args, me, peers),
            ),
        }
        out = {}
        for name in names:
            build, make_batches = inputs[name]
            batches = make_batches()
            inp, answer = worker.dataflow(build, name=name)
            barrier(worker)
            sent0 = sum(worker.allocator.message_counts()[0])
            wall0, cpu0 = time.perf_counter(), time.process_time()
            feed(worker, inp, batches, per_time=len(batches) + 1 if name in ONE_EPOCH else 256)
            out[name] = {
                "wall_s": time.perf_counter() - wall0,
                "cpu_s": time.process_time() - cpu0,
                "messages": sum(worker.allocator.message_counts()[0]) - sent0,
                "answer": answer(),
            }
        return out

    results = pt.execute(work, workers=workers, timeout=args.timeout)
    return {name: [r[name] for r in results] for name in names}


def graph_batches(args: argparse.Namespace, index: int, peers: int) -> list[np.ndarray]:
    """Worker ``index`` of ``peers``'s share of the ``bfs`` / ``pagerank`` graph, in batches."""
    mine = random_graph(args.graph_nodes, 4 * args.graph_nodes)[index::peers]
    return [mine[at : at + GRAPH_BATCH] for at in range(0, len(mine), GRAPH_BATCH)]


@functools.lru_cache(maxsize=1)
def graph_adjacency(nodes: int) -> dict[int, list[int]]:
    adjacency: dict[int, list[int]] = {}
    for a, b in random_graph(nodes, 4 * nodes).tolist():
        adjacency.setdefault(a, []).append(b)
    return adjacency


def plain_bfs(nodes: int) -> dict[int, int]:
    """``node -> depth`` from node 0 by a plain Python BFS (the reference for ``bfs``)."""
    adjacency = graph_adjacency(nodes)
    depth = {0: 0}
    queue = collections.deque([0])
    while queue:
        v = queue.popleft()
        for w in adjacency.get(v, ()):
            if w not in depth:
                depth[w] = depth[v] + 1
                queue.append(w)
    return depth


def numpy_pagerank(nodes: int) -> dict[int, float]:
    """The ``pagerank`` workload's ranks, by whole-graph numpy (the reference)."""
    graph = random_graph(nodes, 4 * nodes)
    degree = np.bincount(graph["src"], minlength=nodes).astype(np.float64)
    ranks = np.ones(nodes)
    for _ in range(PAGERANK_ITERATIONS):
        share = (ranks / np.maximum(degree, 1.0))[graph["src"]]
        ranks = (1 - DAMPING) + DAMPING * np.bincount(graph["dst"], share, nodes)
    return dict(enumerate(ranks.tolist()))


def smallest_member_labels(nodes: int, edges: int, batch: int) -> dict[int, int]:
    """``node -> smallest node id of its component`` for every node not itself the smallest, by
    a plain union-find over all the edges (the reference for ``components``)."""
    parent = list(range(nodes))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for part in edge_batches(nodes, edges, 0, 1, batch):
        for a, b in zip(part["src"].tolist(), part["dst"].tolist()):
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)  # the root stays the smallest member
    return {v: find(v) for v in range(nodes) if find(v) != v}


def expected(name: str, args: argparse.Namespace) -> Any:
    """The answer of workload ``name`` computed without pytimely."""
    if name == "components":
        return smallest_member_labels(args.edges // 2, args.edges, args.batch)
    if name == "bfs":
        return plain_bfs(args.graph_nodes)
    if name == "pagerank":
        return numpy_pagerank(args.graph_nodes)
    words = args.heavy_words if name == "cpu_map" else args.words
    counts: collections.Counter = collections.Counter()
    for b in word_batches(vocabulary(), 0, 1, words, args.batch):
        counts.update(map(heavy, b) if name == "cpu_map" else b)
    return dict(counts)


def merged(name: str, answers: list[Any]) -> Any:
    """One answer from the workers' answers (counts and labels must be disjoint: each key on one
    worker)."""
    total: dict = {}
    for part in answers:
        if set(part) & set(total):
            return None  # a key counted on two workers: the exchange is broken
        total.update(part)
    return total


def summarize(name: str, one: list, two: list, args: argparse.Namespace) -> dict[str, Any]:
    """One run's figures for workload ``name``: ``one`` and ``two`` are its workers' results."""
    cpu1, cpu2 = one[0]["cpu_s"], sum(r["cpu_s"] for r in two)
    wall1, wall2 = one[0]["wall_s"], max(r["wall_s"] for r in two)
    want = expected(name, args)
    return {
        "1": {"wall_s": round(wall1, 3), "cpu_s": round(cpu1, 3)},
        "2": {
            "wall_s": round(wall2, 3),
            "cpu_s": round(cpu2, 3),
            "cpu_per_process_s": [round(r["cpu_s"], 3) for r in two],
        },
        "cpu_efficiency": round(cpu1 / cpu2, 3),
        "speedup": round(wall1 / wall2, 3),
        "ok": agrees(name, merged(name, [one[0]["answer"]]), want)
        and agrees(name, merged(name, [r["answer"] for r in two]), want),
    }


def agrees(name: str, got: Any, want: Any) -> bool:
    """Whether a workload's answer is the reference's (ranks to within 1e-9: sums of floats in
    another order)."""
    if name != "pagerank" or got is None or got.keys() != want.keys():
        return bool(got == want)
    return all(abs(got[v] - want[v]) <= 1e-9 for v in want)


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The runs of one workload as one report: each figure the median over the runs (the
    per-process CPU times of the run whose summed CPU time is the median), every run's
    efficiency and speedup under ``runs``, and ``ok`` if every run's answer was right."""
    middle = sorted(runs, key=lambda r: r["2"]["cpu_s"])[(len(runs) - 1) // 2]
    return {
        "1": {side: statistics.median(r["1"][side] for r in runs) for side in ("wall_s", "cpu_s")},
        "2": {
            "wall_s": statistics.median(r["2"]["wall_s"] for r in runs),
            "cpu_s": statistics.median(r["2"]["cpu_s"] for r in runs),
            "cpu_per_process_s": middle["2"]["cpu_per_process_s"],
        },
        "cpu_efficiency": statistics.median(r["cpu_efficiency"] for r in runs),
        "speedup": statistics.median(r["speedup"] for r in runs),
        "runs": [{"cpu_efficiency": r["cpu_efficiency"], "speedup": r["speedup"]} for r in runs],
        "ok": all(r["ok"] for r in runs),
    }


def records_of(name: str, args: argparse.Namespace) -> int:
    """What a workload's CPU time is divided by: its words, or its graph's edges."""
    if name in ("keyed_count", "batch_count"):
        return args.words
    if name == "cpu_map":
        return args.heavy_words
    if name == "components":
        return args.edges
    return args.graph_nodes * 4


# A stand-in for a worker process that takes its share of the CPUs and caches without being a
# worker: Counter.update over batches of words drawn from a 10,000-word vocabulary, the batch
# count's own work, in a loop until it is killed (or, should the benchmark die, for at most
# the number of seconds it is given).
_STAND_IN = """
import collections, random, sys, time
rng = random.Random(int(sys.argv[2]))
vocab = ["w%d_%d" % (i, rng.randrange(10**9)) for i in range(10_000)]
batches = [[vocab[rng.randrange(10_000)] for _ in range(1_000)] for _ in range(256)]
counts, end, i = collections.Counter(), time.monotonic() + float(sys.argv[1]), 0
while time.monotonic() < end:
    counts.update(batches[i % 256])
    i += 1
"""


def run_beside(stand_ins: int, workers: int, args: argparse.Namespace) -> dict[str, Any]:
    """:func:`run` on ``workers`` processes while ``stand_ins`` other processes keep the CPUs
    as busy as that many more workers would (see ``--equal-load``); they are stopped by pid
    when the run ends, however it ends."""
    procs = [
        subprocess.Popen([sys.executable, "-c", _STAND_IN, str(args.timeout), str(i)])
        for i in range(stand_ins)
    ]
    try:
        return run(workers, args)
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait(timeout=30)


def growth(args: argparse.Namespace, counts: list[int]) -> dict[str, Any]:
    """``--workers``: every workload on each number of worker processes in ``counts``,
    alternately ``--repeat`` times; per workload and count the medians of the CPU summed over
    the processes, the slowest worker's wall time, the CPU nanoseconds per record (word, or
    edge) and the messages the workers sent each other (data and progress), and whether every
    answer was right.

    With ``--equal-load`` every count below the largest also runs beside as many stand-in
    processes as it has fewer workers than the largest (alternately with the plain run), so
    that the CPUs are shared by as many busy processes in every configuration: rows under
    ``equal_load``.  On a machine with fewer cores than the largest count, the plain growth of
    CPU per record mixes what more workers cost (more records cross, more messages) with what
    sharing a core costs a process (it runs with cold caches); the equal-load growth is the
    former alone."""
    configs = [(n, 0) for n in counts]
    if args.equal_load:
        configs += [(n, max(counts) - n) for n in counts if n < max(counts)]
    runs: dict[str, dict[tuple[int, int], list[dict[str, Any]]]] = {
        name: {c: [] for c in configs} for name in args.workloads
    }
    for _ in range(args.repeat):
        for n, stand_ins in sorted(configs):
            results = run_beside(stand_ins, n, args)
            for name in args.workloads:
                per = results[name]
                want = expected(name, args)
                runs[name][(n, stand_ins)].append(
                    {
                        "cpu_s": sum(r["cpu_s"] for r in per),
                        "wall_s": max(r["wall_s"] for r in per),
                        "messages": sum(r["messages"] for r in per),
                        "ok": agrees(name, merged(name, [r["answer"] for r in per]), want),
                    }
                )
    report: dict[str, Any] = {}
    for name, by_config in runs.items():
        rows: dict[str, Any] = {}
        equal: dict[str, Any] = {}
        for (n, stand_ins), rs in by_config.items():
            cpu = statistics.median(r["cpu_s"] for r in rs)
            row = {
                "cpu_s": round(cpu, 3),
                "wall_s": round(statistics.median(r["wall_s"] for r in rs), 3),
                "cpu_ns_per_record": round(cpu * 1e9 / records_of(name, args)),
                "messages": int(statistics.median(r["messages"] for r in rs)),
                "ok": all(r["ok"] for r in rs),
            }
            if stand_ins:
                equal[str(n)] = {**row, "stand_ins": stand_ins}
            else:
                rows[str(n)] = row
        if args.equal_load:
            top = str(max(counts))
            equal[top] = {**rows[top], "stand_ins": 0}  # the largest count is its own load
            rows["equal_load"] = dict(sorted(equal.items(), key=lambda kv: int(kv[0])))
        report[name] = rows
    return report


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--words", type=int, default=4_000_000)
    ap.add_argument(
        "--heavy-words",
        type=int,
        default=400_000,
        help="words of the CPU-heavy map (about 5 us each)",
    )
    ap.add_argument(
        "--edges", type=int, default=100_000, help="edges of the random graph (on edges/2 nodes)"
    )
    ap.add_argument(
        "--graph-nodes",
        type=int,
        default=500_000,
        help="nodes of the bfs and pagerank graph (with four times as many edges)",
    )
    ap.add_argument("--batch", type=int, default=1_000)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="run both configurations this many times, alternately; report medians",
    )
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument(
        "--workers",
        help="e.g. 1,2,4,8: instead of the 1-vs-2 comparison, CPU per record and messages sent "
        "on each number of worker processes",
    )
    ap.add_argument(
        "--equal-load",
        action="store_true",
        help="with --workers: also run each smaller count beside stand-in processes that keep "
        "as many processes busy as the largest count has workers (rows under equal_load)",
    )
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    ap.add_argument("--out", help="also write the JSON to this file")
    args = ap.parse_args(argv)
    args.workloads = [w for w in args.workloads.split(",") if w]
    unknown = set(args.workloads) - set(WORKLOADS)
    if unknown:
        ap.error(f"unknown workloads {sorted(unknown)}; choose from {','.join(WORKLOADS)}")
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    if args.quick:
        args.words, args.heavy_words, args.edges, args.batch = 40_000, 4_000, 2_000, 500
        args.graph_nodes = 2_000
    if args.workers:
        try:
            counts = [int(n) for n in args.workers.split(",") if n]
        except ValueError:
            counts = []
        if not counts or min(counts) < 1:
            ap.error("--workers takes positive numbers of workers, e.g. 1,2,4,8")
    elif args.equal_load:
        ap.error("--equal-load compares the counts of --workers: give --workers too")
    if args.workers:
        before = LoadReading.now()
        report = growth(args, counts)
        load = MachineLoad.between(before, LoadReading.now())
        out = {
            "benchmark": "scaling-growth",
            "words": args.words,
            "batch": args.batch,
            "repeat": args.repeat,
            "workers": counts,
            "workloads": report,
        }
        return emit(out, load, args)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in args.workloads}
    before = LoadReading.now()
    for _ in range(args.repeat):
        one, two = run(1, args), run(2, args)
        for name in args.workloads:
            runs[name].append(summarize(name, one[name], two[name], args))
    load = MachineLoad.between(before, LoadReading.now())
    out = {
        "benchmark": "scaling",
        "python": sys.version.split()[0],
        "words": args.words,
        "heavy_words": args.heavy_words,
        "edges": args.edges,
        "graph_nodes": args.graph_nodes,
        "batch": args.batch,
        "vocabulary": VOCAB,
        "repeat": args.repeat,
        "workloads": {name: median_of(runs[name]) for name in args.workloads},
    }
    return emit(out, load, args)


def emit(out: dict[str, Any], load: MachineLoad, args: argparse.Namespace) -> dict[str, Any]:
    """Add the machine's load to the report ``out``, warn on stderr if it was busy, print the
    JSON (and write it to ``--out``); returns the report."""
    out["machine"] = load.to_dict()
    out["quiet"] = not load.under_load()
    print(load.describe(), file=sys.stderr)
    if load.under_load():
        print(
            "scaling: other processes kept the machine busy during the runs: "
            'the figures are not reliable ("quiet": false in the report)',
            file=sys.stderr,
        )
    text = json.dumps(out, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return out


if __name__ == "__main__":
    main()
