"""PageRank in an iterative scope, the fast way: one operator an iteration, numpy batches.

Inspired by timely's ``pagerank`` example.  An iterative scope holds the computation; its times
are ``Product(0, iteration)``.  The ``PageRank`` operator has two inputs, both routed by node
(``pt.Exchange(column=...)``: node ``v`` lives on worker ``v % peers``):

* the edges, numpy arrays of :data:`EDGE` records, kept by source (they arrive at iteration 0),
* rank *contributions*, arrays of :data:`SHARE` records ``(node, amount)``, which come back
  around the loop one iteration later.

It holds one capability per output and moves them forward one iteration at a time.  Once both
input frontiers have passed the current iteration (every edge and every contribution for it
has arrived), it computes the iteration's ranks of the nodes it owns -- 1.0 at iteration 0,
then ``0.15 + 0.85 * (sum of contributions)`` -- and either sends each node's
``rank / out-degree`` along its out-edges, summed per destination on this worker first (one
:data:`SHARE` per destination node and worker, not one per edge), or, after the last
iteration, the final ranks out of the loop.  Every step is a numpy operation on a whole
iteration (``np.bincount`` sums; no Python call per edge; docs/graphs.md says why).

    $ python examples/pagerank.py                # 1000 nodes, 4000 edges, 20 iterations
    $ python examples/pagerank.py 1000000 4000000 10 -w 2
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import pytimely as pt

DAMPING = 0.85
#: A directed edge, a contribution to a node's next rank, and a final rank, as numpy records.
EDGE = np.dtype([("src", np.int64), ("dst", np.int64)])
SHARE = np.dtype([("node", np.int64), ("amount", np.float64)])
RANK = np.dtype([("node", np.int64), ("rank", np.float64)])


def random_edges(nodes: int, edges: int, seed: int = 0) -> np.ndarray:
    """``edges`` random directed edges between ``nodes`` nodes, an array of :data:`EDGE` (the
    same array on every worker: each sends its slice ``[index::peers]``)."""
    pairs = np.random.default_rng(seed).integers(0, max(nodes, 1), (edges, 2))
    out = np.empty(edges, EDGE)
    out["src"], out["dst"] = pairs[:, 0], pairs[:, 1]
    return out


def pagerank(edges: pt.Stream, nodes: int, iterations: int) -> pt.Stream:
    """Arrays of :data:`RANK` records: every node of ``0 .. nodes-1`` with its rank after
    ``iterations`` rounds."""

    def body(inner: pt.Scope) -> pt.Stream:
        handle, shares = inner.feedback(1)
        builder = pt.OperatorBuilder("PageRank", inner)
        builder.new_input(edges.enter(inner), pt.Exchange(column="src"))
        builder.new_input(shares, pt.Exchange(column="node"))
        builder.new_output()  # contributions for the next iteration
        builder.new_output()  # the final ranks, out of the loop
        flowing, final = builder.build(_pagerank_constructor(nodes, iterations))
        flowing.connect_loop(handle)
        return final.leave()

    return edges.scope.iterative(body, name="PageRank loop")


class _Graph:
    """This worker's part of the graph, indexed once: nodes it owns are ``index + k * peers``
    for local ids ``k``; its edges' sources as local ids, and each edge's destination as a
    position in :attr:`targets` (the distinct destinations), for ``np.bincount`` sums."""

    def __init__(self, parts: list[np.ndarray], nodes: int, index: int, peers: int) -> None:
        edges = np.concatenate(parts) if parts else np.empty(0, EDGE)
        self.owned = np.arange(index, nodes, peers, dtype=np.int64)
        self.local_src = edges["src"] // peers
        self.degree = np.bincount(self.local_src, minlength=len(self.owned)).astype(np.float64)
        self.targets, self.target_of = np.unique(edges["dst"], return_inverse=True)
        self.peers = peers

    def shares(self, ranks: np.ndarray) -> np.ndarray:
        """Each destination's sum of ``rank / out-degree`` over this worker's edges into it."""
        per_edge = (ranks / np.maximum(self.degree, 1.0))[self.local_src]
        out = np.empty(len(self.targets), SHARE)
        out["node"] = self.targets
        out["amount"] = np.bincount(self.target_of, weights=per_edge, minlength=len(self.targets))
        return out

    def ranks(self, received: list[np.ndarray]) -> np.ndarray:
        """The owned nodes' ranks from the contributions ``received`` for one iteration."""
        sums = np.zeros(len(self.owned))
        for part in received:
            sums += np.bincount(part["node"] // self.peers, part["amount"], len(self.owned))
        return (1 - DAMPING) + DAMPING * sums


def _pagerank_constructor(nodes: int, iterations: int) -> Callable[..., Callable[..., None]]:
    def constructor(caps: list[pt.Capability], info: pt.OperatorInfo) -> Callable[..., None]:
        edge_parts: list[np.ndarray] = []
        received: dict[Any, list[np.ndarray]] = {}  # time -> contribution arrays
        graph: list[_Graph] = []

        def logic(edge_in: Any, share_in: Any, flow_out: Any, rank_out: Any) -> None:
            for _ref, batch in edge_in:
                edge_parts.append(batch)
            for ref, batch in share_in:
                received.setdefault(ref.time, []).append(batch)
            while caps:
                t = caps[0].time
                if edge_in.frontier.less_equal(t) or share_in.frontier.less_equal(t):
                    return  # the iteration at t is not complete yet
                if not graph:  # iteration 0 is complete: every edge is in
                    graph.append(_Graph(edge_parts, nodes, info.worker_index, info.peers))
                    edge_parts.clear()
                g = graph[0]
                if t.inner == 0:
                    ranks = np.ones(len(g.owned))
                else:
                    ranks = g.ranks(received.pop(t, []))
                if t.inner < iterations:
                    flow_out.give_batch(caps[0], g.shares(ranks))
                    following = pt.Product(t.outer, t.inner + 1)
                    for cap in caps:
                        cap.downgrade(following)
                else:
                    out = np.empty(len(g.owned), RANK)
                    out["node"], out["rank"] = g.owned, ranks
                    rank_out.give_batch(caps[1], out)
                    for cap in caps:
                        cap.drop()
                    caps.clear()

        return logic

    return constructor


def pagerank_job(
    nodes: int, iterations: int
) -> Callable[[pt.Scope], tuple[Any, Callable[[], dict[int, float]]]]:
    """A dataflow builder for ``worker.dataflow``: feed :data:`EDGE` arrays to the input it
    returns; the answer function gives ``{node: rank}`` of the nodes this worker owns."""

    def build(scope: pt.Scope) -> tuple[Any, Callable[[], dict[int, float]]]:
        ranks: dict[int, float] = {}

        def keep(_t: Any, batch: np.ndarray) -> None:
            ranks.update(zip(batch["node"].tolist(), batch["rank"].tolist()))

        inp, edges = scope.new_input()
        pagerank(edges, nodes, iterations).for_each(keep)
        return inp, lambda: ranks

    return build


def main() -> None:
    words = pt.args()
    nodes = int(words[0]) if words else 1000
    graph = random_edges(nodes, int(words[1]) if len(words) > 1 else 4 * nodes)
    iterations = int(words[2]) if len(words) > 2 else 20

    def work(worker: pt.Worker) -> tuple[dict[int, float], float]:
        inp, ranks = worker.dataflow(pagerank_job(nodes, iterations))
        mine = graph[worker.index :: worker.peers]
        start = time.perf_counter()
        for at in range(0, len(mine), 10_000):
            inp.send_batch(mine[at : at + 10_000])
        inp.close()
        worker.run()
        return ranks(), time.perf_counter() - start

    results = pt.execute_from_args(work)
    ranks = [pair for got, _seconds in results for pair in got.items()]
    print(
        f"{len(ranks)} nodes after {iterations} iterations; total rank "
        f"{sum(rank for _node, rank in ranks):.3f}"
    )
    for node, rank in sorted(ranks, key=lambda pair: (-pair[1], pair[0]))[:5]:
        print(f"node {node}:\t{rank:.4f}")
    print(f"{max(s for _r, s in results):.2f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
