"""Breadth-first search on a random graph: a loop, ``binary_notify``, and ``Exchange`` pacts.

Inspired by timely's ``bfs`` example.  An iterative scope holds the search: its times are
``Product(0, depth)``.  The ``BFS`` operator has two inputs, both routed by node so that a node's
out-edges and the proposals to visit it meet on one worker:

* the edges ``(src, dst)``, which it keeps as adjacency lists (they arrive at depth 0), and
* the nodes proposed at each depth (the root at depth 0, then whatever comes around the loop).

It asks to be *notified* at every depth it received proposals for.  A notification at a depth
arrives once both input frontiers have passed it — all edges are in and every proposal for that
depth has arrived — and then each not yet visited node is marked reached at that depth, reported,
and its neighbours are proposed for the next depth (``feedback(1)`` adds one to the depth).  The
loop drains when a depth proposes only visited nodes.

    $ python examples/bfs.py                 # 1000 nodes, 2000 edges
    $ python examples/bfs.py 100000 200000 -w 2
"""

import random
from collections.abc import Callable
from typing import Any

import pytimely as pt


def random_edges(nodes: int, edges: int, seed: int = 0) -> list[tuple[int, int]]:
    """``edges`` directed edges between ``nodes`` nodes (the same on every worker)."""
    rng = random.Random(seed)
    return [(rng.randrange(nodes), rng.randrange(nodes)) for _ in range(edges)]


def bfs(scope: pt.Scope, edges: pt.Stream, roots: pt.Stream) -> pt.Stream:
    """``(node, depth)`` for every node reachable from a root, ``depth`` its distance."""

    def body(inner: pt.Scope) -> pt.Stream:
        handle, proposed_again = inner.feedback(1)
        proposed = roots.enter(inner).concat(proposed_again)
        tagged = edges.enter(inner).binary_notify(
            proposed,
            pt.Exchange(lambda edge: edge[0]),
            pt.Exchange(lambda node: node),
            "BFS",
            [],
            _bfs_logic(),
        )
        reached, expand = tagged.branch(lambda t, record: record[0] == "next")
        expand.map(lambda record: record[1]).connect_loop(handle)
        return reached.map(lambda record: (record[1], record[2])).leave()

    return scope.iterative(body, name="BFS loop")


def _bfs_logic() -> Callable:
    adjacency: dict[int, list[int]] = {}
    visited: set[int] = set()
    pending: dict[Any, list[int]] = {}  # time -> proposed nodes

    def logic(edges: Any, proposals: Any, output: Any, notificator: pt.Notificator) -> None:
        for _cap, batch in edges:
            for src, dst in batch:
                adjacency.setdefault(src, []).append(dst)
        for cap, batch in proposals:
            queued = pending.get(cap.time)
            if queued is None:
                pending[cap.time] = list(batch)
                notificator.notify_at(cap.retain())
            else:
                queued.extend(batch)
        for cap in notificator:
            depth = cap.time.inner
            session = output.session(cap)
            for node in pending.pop(cap.time):
                if node in visited:
                    continue
                visited.add(node)
                session.give(("reached", node, depth))
                for neighbour in adjacency.get(node, ()):
                    if neighbour not in visited:
                        session.give(("next", neighbour))
            cap.drop()

    return logic


def main() -> None:
    words = pt.args()
    nodes = int(words[0]) if words else 1000
    graph = random_edges(nodes, int(words[1]) if len(words) > 1 else 2 * nodes)

    def work(worker: pt.Worker) -> list[tuple[int, int]]:
        found: list[tuple[int, int]] = []

        def build(scope: pt.Scope) -> None:
            mine = scope.to_stream(graph[worker.index :: worker.peers])
            roots = scope.to_stream([0] if worker.index == 0 else [])
            bfs(scope, mine, roots).inspect(found.append)

        worker.dataflow(build)
        return found

    depths = [depth for found in pt.execute_from_args(work) for _node, depth in found]
    for depth in sorted(set(depths)):
        print(f"depth {depth}:\t{depths.count(depth)} nodes")
    print(f"reached {len(depths)} of {nodes} nodes")


if __name__ == "__main__":
    main()
