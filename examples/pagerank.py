"""PageRank by iteration: a loop whose operator holds a capability per iteration.

Inspired by timely's ``pagerank`` example.  An iterative scope holds the computation; its times
are ``Product(0, iteration)``.  The ``PageRank`` operator (``binary_frontier``) has two inputs,
both routed by node:

* the edges ``(src, dst)``, kept as adjacency lists by source (plus one ``(node, None)`` per
  node, so that each worker learns the nodes it owns), and
* rank *contributions* ``(dst, amount)``, which come back around the loop one iteration later.

It keeps its initial capability and moves it forward one iteration at a time.  Whenever both
input frontiers have passed the capability's time (every edge and every contribution for that
iteration has arrived), it computes the iteration's ranks — 1.0 at iteration 0, then
``0.15 + 0.85 * (sum of contributions)`` — and either sends ``rank / out-degree`` along each
out-edge (around the loop to the next iteration) or, after the last iteration, the final
ranks out of the loop.  Then it downgrades its capability to the next iteration, or drops it:
that is what lets the loop, and then the dataflow, complete.

    $ python examples/pagerank.py                # 1000 nodes, 4000 edges, 20 iterations
    $ python examples/pagerank.py 10000 40000 10 -w 2
"""

import random
from collections.abc import Callable
from typing import Any

import pytimely as pt

DAMPING = 0.85


def random_edges(nodes: int, edges: int, seed: int = 0) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randrange(nodes), rng.randrange(nodes)) for _ in range(edges)]


def pagerank(scope: pt.Scope, edges: pt.Stream, nodes: int, iterations: int) -> pt.Stream:
    """``(node, rank)`` after ``iterations`` rounds, for nodes ``0 .. nodes-1``."""

    # Every node is announced as a pseudo-edge ``(node, None)``, routed like its out-edges:
    # that is how each worker learns which nodes it owns, whatever the routing function.
    announced = edges.concat(
        scope.to_stream(range(scope.index, nodes, scope.peers)).map(lambda v: (v, None))
    )

    def body(inner: pt.Scope) -> pt.Stream:
        handle, contributions = inner.feedback(1)
        tagged = announced.enter(inner).binary_frontier(
            contributions,
            pt.Exchange(lambda edge: edge[0]),
            pt.Exchange(lambda contribution: contribution[0]),
            "PageRank",
            _pagerank_constructor(iterations),
        )
        final, flowing = tagged.branch(lambda t, record: record[0] == "flow")
        flowing.map(lambda record: (record[1], record[2])).connect_loop(handle)
        return final.map(lambda record: (record[1], record[2])).leave()

    return scope.iterative(body, name="PageRank loop")


def _pagerank_constructor(iterations: int) -> Callable:
    def constructor(capability: pt.Capability, info: pt.OperatorInfo) -> Callable:
        owned: list[int] = []  # the nodes the Exchange pact routes to this worker
        adjacency: dict[int, list[int]] = {}
        received: dict[Any, dict[int, float]] = {}  # time -> node -> sum of contributions
        held = [capability]

        def logic(edges: Any, flows: Any, output: Any) -> None:
            for _cap, batch in edges:
                for src, dst in batch:
                    if dst is None:
                        owned.append(src)
                    else:
                        adjacency.setdefault(src, []).append(dst)
            for cap, batch in flows:
                sums = received.setdefault(cap.time, {})
                for node, amount in batch:
                    sums[node] = sums.get(node, 0.0) + amount
            while held:
                cap = held[0]
                t = cap.time
                if edges.frontier.less_equal(t) or flows.frontier.less_equal(t):
                    return  # the iteration at t is not complete yet
                iteration = t.inner
                if iteration == 0:
                    ranks = {v: 1.0 for v in owned}
                else:
                    sums = received.pop(t, {})
                    ranks = {v: (1 - DAMPING) + DAMPING * sums.get(v, 0.0) for v in owned}
                session = output.session(cap)
                if iteration < iterations:
                    for v, rank in ranks.items():
                        targets = adjacency.get(v)
                        if targets:
                            share = rank / len(targets)
                            session.give_batch([("flow", dst, share) for dst in targets])
                    cap.downgrade(pt.Product(t.outer, iteration + 1))
                else:
                    session.give_batch([("rank", v, rank) for v, rank in ranks.items()])
                    cap.drop()
                    held.clear()

        return logic

    return constructor


def main() -> None:
    words = pt.args()
    nodes = int(words[0]) if words else 1000
    graph = random_edges(nodes, int(words[1]) if len(words) > 1 else 4 * nodes)
    iterations = int(words[2]) if len(words) > 2 else 20

    def work(worker: pt.Worker) -> list[tuple[int, float]]:
        ranks: list[tuple[int, float]] = []

        def build(scope: pt.Scope) -> None:
            mine = scope.to_stream(graph[worker.index :: worker.peers])
            pagerank(scope, mine, nodes, iterations).inspect(ranks.append)

        worker.dataflow(build)
        return ranks

    ranks = [pair for got in pt.execute_from_args(work) for pair in got]
    print(
        f"{len(ranks)} nodes after {iterations} iterations; total rank "
        f"{sum(rank for _node, rank in ranks):.3f}"
    )
    for node, rank in sorted(ranks, key=lambda pair: (-pair[1], pair[0]))[:5]:
        print(f"node {node}:\t{rank:.4f}")


if __name__ == "__main__":
    main()
