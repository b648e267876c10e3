"""Incremental reachability with differential dataflow: edges come and go, the answer follows.

The nodes reachable from node 0 are the fixed point of "the roots, plus the neighbours of
what is reachable", computed by ``iterate`` in an iterative scope with ``join`` and
``distinct`` (``pytimely.differential``); the edges are indexed once, outside the loop, and
the loop reads that index in place (``Arrangement.enter``).  Each round deletes some random
edges and inserts others; the dataflow updates the reachable set from the changes alone, and
the program checks it, every round, against a breadth-first search from scratch.

    $ python examples/dd_reachability.py                  # 300 nodes, 600 edges, 10 rounds
    $ python examples/dd_reachability.py 2000 4000 --rounds 20 --changes 50 -w 2
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

import pytimely as pt
import pytimely.differential as dd


def reachable(edges: dd.Collection, root: int = 0) -> dd.Collection:
    """The nodes reachable from ``root`` along ``edges`` (``(src, dst)`` records)."""
    roots = edges.filter(lambda e: e[0] == root).map(lambda e: e[0]).distinct()
    by_src = edges.arrange_by_key()  # indexed once, outside the loop

    def step(nodes: dd.Collection) -> dd.Collection:
        inner_edges = by_src.enter(nodes.scope)  # the same index, read in every round
        visits = nodes.map(lambda n: (n, ())).arrange_by_key()
        neighbours = visits.join_map(inner_edges, lambda _n, _u, d: d)
        return neighbours.concat(nodes).distinct()

    return roots.iterate(step)


def plan(nodes: int, edges: int, rounds: int, changes: int, seed: int = 0) -> list:
    """The edge updates of each round: ``[(edge, diff), ...]`` (round 0 loads the graph)."""
    rng = random.Random(seed)
    present: set[tuple[int, int]] = set()
    out = []
    first = []
    while len(present) < min(edges, nodes * nodes):
        e = (rng.randrange(nodes), rng.randrange(nodes))
        if e not in present:
            present.add(e)
            first.append((e, 1))
    out.append(first)
    for _ in range(rounds):
        step = []
        for e in rng.sample(sorted(present), min(changes, len(present))):
            present.discard(e)
            step.append((e, -1))
        for _ in range(changes):
            e = (rng.randrange(nodes), rng.randrange(nodes))
            if e not in present:
                present.add(e)
                step.append((e, 1))
        out.append(step)
    return out


def from_scratch(edges: set[tuple[int, int]], root: int = 0) -> set[int]:
    """Breadth-first search: the nodes reachable from ``root`` (with an out-edge)."""
    if not any(s == root for s, _ in edges):
        return set()
    adjacency: dict[int, list[int]] = {}
    for s, d in edges:
        adjacency.setdefault(s, []).append(d)
    seen, todo = {root}, [root]
    while todo:
        for d in adjacency.get(todo.pop(), ()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


def work(worker: pt.Worker, rounds: list) -> tuple[list, list]:
    """Feed one round per epoch (from worker 0), wait for it, note how much was captured."""

    def build(scope: pt.Scope) -> Any:
        session, edges = dd.new_input(scope)
        reach = reachable(edges)
        return session, reach.capture(), reach.probe()

    session, captured, probe = worker.dataflow(build)
    marks = []
    for epoch, changes in enumerate(rounds):
        if worker.index == 0:
            for edge, diff in changes:
                session.update(edge, diff)
        session.advance_to(epoch + 1)
        worker.step_while(lambda: probe.less_than(epoch + 1))
        marks.append(len(captured.raw))
    session.close()
    return captured.raw, marks


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("nodes", type=int, nargs="?", default=300)
    parser.add_argument("edges", type=int, nargs="?", default=600)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--changes", type=int, default=10)
    options = parser.parse_args(pt.args())
    rounds = plan(options.nodes, options.edges, options.rounds, options.changes)
    started = time.perf_counter()
    results = pt.execute_from_args(lambda worker: work(worker, rounds))
    elapsed = time.perf_counter() - started
    edges: set[tuple[int, int]] = set()
    for epoch, changes in enumerate(rounds):
        for edge, diff in changes:
            (edges.add if diff > 0 else edges.discard)(edge)
        got = dd.as_of([u for raw, marks in results for u in raw[: marks[epoch]]], epoch)
        want = from_scratch(edges)
        assert got == [(n, 1) for n in sorted(want)], f"round {epoch}: wrong answer"
        print(f"round {epoch}: {len(edges)} edges, {len(want)} nodes reachable (checked)")
    print(f"done in {elapsed:.2f} s")


if __name__ == "__main__":
    main()
