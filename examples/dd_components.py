"""Connected components with differential dataflow, kept up to date as edges are deleted.

Every node takes the least node id of its component as its label: labels start as the nodes'
own ids and, in an iterative scope, each node keeps the least label among its own and its
neighbours' (``iterate`` with ``join_map`` and ``min`` of ``pytimely.differential``).  Each
round deletes some random edges -- splitting components -- and inserts others; the labels
are updated from the changes, and checked every round against union-find from scratch.

    $ python examples/dd_components.py                    # 300 nodes, 300 edges, 10 rounds
    $ python examples/dd_components.py 2000 1800 --rounds 20 --changes 40 -w 2
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

import pytimely as pt
import pytimely.differential as dd


def components(edges: dd.Collection) -> dd.Collection:
    """``(node, least node of its component)`` for every node with an edge (undirected)."""
    both_ways = edges.flat_map(lambda e: [e, (e[1], e[0])])
    nodes = both_ways.map(lambda e: (e[0], e[0])).distinct()

    by_src = both_ways.arrange_by_key()  # indexed once, read in place by every round

    def step(labels: dd.Collection) -> dd.Collection:
        inner_edges = by_src.enter(labels.scope)
        inner_nodes = nodes.enter(labels.scope)
        proposed = labels.arrange_by_key().join_map(inner_edges, lambda _n, lab, dst: (dst, lab))
        return proposed.concat(inner_nodes).min()

    return nodes.iterate(step)


def plan(nodes: int, edges: int, rounds: int, changes: int, seed: int = 0) -> list:
    """The edge updates of each round: ``[(edge, diff), ...]`` (round 0 loads the graph)."""
    rng = random.Random(seed)
    present: set[tuple[int, int]] = set()

    def fresh() -> tuple[int, int] | None:
        e = (rng.randrange(nodes), rng.randrange(nodes))
        return None if e in present else e

    out = [[]]
    while len(present) < min(edges, nodes * nodes):
        e = fresh()
        if e is not None:
            present.add(e)
            out[0].append((e, 1))
    for _ in range(rounds):
        step = []
        for e in rng.sample(sorted(present), min(changes, len(present))):
            present.discard(e)
            step.append((e, -1))
        for _ in range(changes):
            e = fresh()
            if e is not None:
                present.add(e)
                step.append((e, 1))
        out.append(step)
    return out


def from_scratch(edges: set[tuple[int, int]]) -> dict[int, int]:
    """Union-find: every node with an edge to the least node of its component."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        parent.setdefault(a, a)
        parent.setdefault(b, b)
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {n: find(n) for n in parent}


def work(worker: pt.Worker, rounds: list) -> tuple[list, list]:
    """Feed one round per epoch (from worker 0), wait for it, note how much was captured."""

    def build(scope: pt.Scope) -> Any:
        session, edges = dd.new_input(scope)
        labels = components(edges)
        return session, labels.capture(), labels.probe()

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
    parser.add_argument("edges", type=int, nargs="?", default=300)
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
        assert got == [(nl, 1) for nl in sorted(want.items())], f"round {epoch}: wrong answer"
        count = len(set(want.values()))
        print(f"round {epoch}: {len(edges)} edges, {count} components (checked)")
    print(f"done in {elapsed:.2f} s")


if __name__ == "__main__":
    main()
