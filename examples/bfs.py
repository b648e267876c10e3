"""Breadth-first search in an iterative scope, the fast way: one operator a depth, numpy batches.

Inspired by timely's ``bfs`` example.  An iterative scope holds the search: its times are
``Product(0, depth)``.  The ``BFS`` operator has two inputs, both routed by node
(``pt.Exchange(column=...)``: node ``v`` lives on worker ``v % peers``), so that a node's
out-edges and the proposals to visit it meet on one worker:

* the edges, numpy arrays of :data:`EDGE` records, which arrive at depth 0 and become a sorted
  adjacency index (:class:`Adjacency`), and
* the nodes proposed at each depth, arrays of :data:`NODE` records (the root at depth 0, then
  whatever comes around the loop).

When both inputs are complete for a depth (a ``Notificator`` over their frontiers), the
proposed nodes not yet visited are marked reached at that depth, reported in one array, and
their neighbours proposed for the next depth -- each neighbour at most once by each worker, in
one array per destination.  The loop drains when a depth proposes nothing.  Every step is a
numpy operation on a whole depth: no Python call per edge (docs/graphs.md says why).

    $ python examples/bfs.py                 # 1000 nodes, 4000 edges
    $ python examples/bfs.py 1000000 2000000 -w 2
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import pytimely as pt

#: A directed edge, and a node proposed for a depth / reached at it, as numpy records.
EDGE = np.dtype([("src", np.int64), ("dst", np.int64)])
NODE = np.dtype([("node", np.int64)])
REACHED = np.dtype([("node", np.int64), ("depth", np.int64)])


def random_edges(nodes: int, edges: int, seed: int = 0) -> np.ndarray:
    """``edges`` random directed edges between ``nodes`` nodes, an array of :data:`EDGE` (the
    same array on every worker: each sends its slice ``[index::peers]``)."""
    pairs = np.random.default_rng(seed).integers(0, max(nodes, 1), (edges, 2))
    out = np.empty(edges, EDGE)
    out["src"], out["dst"] = pairs[:, 0], pairs[:, 1]
    return out


class Adjacency:
    """Out-edges sorted by source: the neighbours of many nodes at once by two binary searches
    and one gather.

    >>> edges = np.array([(2, 5), (0, 1), (2, 3)], EDGE)
    >>> Adjacency([edges]).neighbours(np.array([2, 4])).tolist()
    [5, 3]
    """

    def __init__(self, parts: list[np.ndarray]) -> None:
        edges = np.concatenate(parts) if parts else np.empty(0, EDGE)
        order = np.argsort(edges["src"], kind="stable")
        self.src = edges["src"][order]
        self.dst = edges["dst"][order]

    def neighbours(self, nodes: np.ndarray) -> np.ndarray:
        """Every out-neighbour of every node of ``nodes`` (with repeats)."""
        lo = np.searchsorted(self.src, nodes, "left")
        counts = np.searchsorted(self.src, nodes, "right") - lo
        total = int(counts.sum())
        if total == 0:
            return np.empty(0, np.int64)
        starts = np.repeat(lo - (np.cumsum(counts) - counts), counts)
        return self.dst[np.arange(total) + starts]


def bfs(edges: pt.Stream, roots: pt.Stream, nodes: int) -> pt.Stream:
    """Arrays of :data:`REACHED` ``(node, depth)`` records: every node of ``0 .. nodes-1``
    reachable from a root of ``roots`` (arrays of :data:`NODE`), ``depth`` its distance."""

    def body(inner: pt.Scope) -> pt.Stream:
        handle, proposed_again = inner.feedback(1)
        proposed = roots.enter(inner).concat(proposed_again)
        builder = pt.OperatorBuilder("BFS", inner)
        builder.new_input(edges.enter(inner), pt.Exchange(column="src"))
        builder.new_input(proposed, pt.Exchange(column="node"))
        builder.new_output()  # proposals for the next depth
        builder.new_output()  # reached nodes, out of the loop
        again, reached = builder.build(_bfs_constructor(nodes))
        again.connect_loop(handle)
        return reached.leave()

    return edges.scope.iterative(body, name="BFS loop")


def _bfs_constructor(nodes: int) -> Callable[..., Callable[..., None]]:
    def constructor(caps: list[pt.Capability], info: pt.OperatorInfo) -> Callable[..., None]:
        for cap in caps:
            cap.drop()
        visited = np.zeros(nodes, bool)  # reached, for the nodes this worker owns
        proposed = np.zeros(nodes, bool)  # proposed by this worker (once is enough)
        edge_parts: list[np.ndarray] = []
        adjacency: list[Adjacency] = []
        pending: dict[Any, list[np.ndarray]] = {}  # time -> proposed node arrays
        reached_caps: dict[Any, pt.Capability] = {}  # time -> capability of the output
        notificator: list[pt.Notificator] = []

        def note(ref: Any) -> list[np.ndarray]:
            t = ref.time
            if t not in reached_caps:
                reached_caps[t] = ref.retain(1)
                notificator[0].notify_at(ref.retain(0))
            return pending.setdefault(t, [])

        def logic(edge_in: Any, node_in: Any, propose: Any, reach: Any) -> None:
            if not notificator:
                notificator.append(pt.Notificator([edge_in.frontier, node_in.frontier]))
            for ref, batch in edge_in:
                note(ref)
                edge_parts.append(batch)
            for ref, batch in node_in:
                note(ref).append(batch["node"])
            for cap in notificator[0]:
                t = cap.time
                if not adjacency:  # depth 0 is complete: every edge is in
                    adjacency.append(Adjacency(edge_parts))
                    edge_parts.clear()
                parts = pending.pop(t)
                candidates = np.unique(np.concatenate(parts)) if parts else np.empty(0, np.int64)
                new = candidates[~visited[candidates]]
                visited[new] = True
                reached_cap = reached_caps.pop(t)
                if len(new):
                    out = np.empty(len(new), REACHED)
                    out["node"], out["depth"] = new, t.inner
                    reach.give_batch(reached_cap, out)
                    ahead = np.unique(adjacency[0].neighbours(new))
                    ahead = ahead[~proposed[ahead]]
                    proposed[ahead] = True
                    if len(ahead):
                        propose.give_batch(cap, ahead.astype(np.int64).view(NODE))
                reached_cap.drop()
                cap.drop()

        return logic

    return constructor


def bfs_job(nodes: int, root: int = 0) -> Callable[[pt.Scope], tuple[Any, Callable[[], Any]]]:
    """A dataflow builder for ``worker.dataflow``: feed :data:`EDGE` arrays to the input it
    returns; the answer function gives ``{node: depth}`` of the nodes this worker owns."""

    def build(scope: pt.Scope) -> tuple[Any, Callable[[], dict[int, int]]]:
        depth: dict[int, int] = {}

        def keep(_t: Any, batch: np.ndarray) -> None:
            depth.update(zip(batch["node"].tolist(), batch["depth"].tolist()))

        inp, edges = scope.new_input()
        roots_in, roots = scope.new_input()
        if scope.index == 0:
            roots_in.send_batch(np.array([root], np.int64).view(NODE))
        roots_in.close()
        bfs(edges, roots, nodes).for_each(keep)
        return inp, lambda: depth

    return build


def main() -> None:
    words = pt.args()
    nodes = int(words[0]) if words else 1000
    edges = int(words[1]) if len(words) > 1 else 4 * nodes
    graph = random_edges(nodes, edges)

    def work(worker: pt.Worker) -> tuple[dict[int, int], float]:
        inp, depths = worker.dataflow(bfs_job(nodes))
        mine = graph[worker.index :: worker.peers]
        start = time.perf_counter()
        for at in range(0, len(mine), 10_000):
            inp.send_batch(mine[at : at + 10_000])
        inp.close()
        worker.run()
        return depths(), time.perf_counter() - start

    results = pt.execute_from_args(work)
    counts: dict[int, int] = {}
    for depths, _seconds in results:
        for d in depths.values():
            counts[d] = counts.get(d, 0) + 1
    for d in sorted(counts):
        print(f"depth {d}:\t{counts[d]} nodes")
    print(f"reached {sum(counts.values())} of {nodes} nodes")
    print(f"{max(s for _d, s in results):.2f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
