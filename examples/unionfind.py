"""Connected components by union-find, in two levels: per worker, then on one worker.

Inspired by timely's ``unionfind`` example.  A ``UnionFind`` operator (a plain ``unary``)
keeps a union-find forest over the node ids it has seen and forwards only the edges that merged
two components — a spanning forest of the edges it received, at most ``nodes - 1`` of them.
Running it first on every worker's share of the edges and then, after ``exchange(lambda e: 0)``,
on worker 0 over the survivors, leaves a spanning forest of the whole graph on worker 0, from
which the components follow.

    $ python examples/unionfind.py               # 1000 nodes, 1500 edges
    $ python examples/unionfind.py 100000 150000 -w 2
"""

import random
from collections.abc import Callable, Sequence
from typing import Any

import pytimely as pt


def random_edges(nodes: int, edges: int, seed: int = 0) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randrange(nodes), rng.randrange(nodes)) for _ in range(edges)]


def union_find(stream: pt.Stream) -> pt.Stream:
    """The edges of ``stream`` that join two components not joined by an earlier edge."""

    def constructor(capability: pt.Capability, info: pt.OperatorInfo) -> Callable:
        capability.drop()
        parent: dict[int, int] = {}
        rank: dict[int, int] = {}

        def find(x: int) -> int:
            root = x
            while parent.get(root, root) != root:
                root = parent[root]
            while x != root:  # path compression
                x, parent[x] = parent[x], root
            return root

        def logic(input: Any, output: Any) -> None:
            for cap, batch in input:
                merged = []
                for a, b in batch:
                    ra, rb = find(a), find(b)
                    if ra == rb:
                        continue
                    if rank.get(ra, 0) < rank.get(rb, 0):
                        ra, rb = rb, ra
                    parent[rb] = ra
                    if rank.get(ra, 0) == rank.get(rb, 0):
                        rank[ra] = rank.get(ra, 0) + 1
                    merged.append((a, b))
                if merged:
                    output.session(cap).give_batch(merged)

        return logic

    return stream.unary(pt.Pipeline, "UnionFind", constructor)


def components(forest: Sequence[tuple[int, int]], nodes: int) -> list[int]:
    """The smallest node id of each node's component, given a spanning forest."""
    adjacency: dict[int, list[int]] = {}
    for a, b in forest:
        adjacency.setdefault(a, []).append(b)
        adjacency.setdefault(b, []).append(a)
    label = list(range(nodes))
    seen = [False] * nodes
    for start in range(nodes):
        if seen[start]:
            continue
        seen[start] = True
        group, stack = [start], [start]
        while stack:
            for w in adjacency.get(stack.pop(), ()):
                if not seen[w]:
                    seen[w] = True
                    group.append(w)
                    stack.append(w)
        smallest = min(group)
        for v in group:
            label[v] = smallest
    return label


def main() -> None:
    words = pt.args()
    nodes = int(words[0]) if words else 1000
    graph = random_edges(nodes, int(words[1]) if len(words) > 1 else nodes * 3 // 2)

    def work(worker: pt.Worker) -> list[tuple[int, int]]:
        forest: list[tuple[int, int]] = []

        def build(scope: pt.Scope) -> None:
            mine = scope.to_stream(graph[worker.index :: worker.peers])
            union_find(union_find(mine).exchange(lambda edge: 0)).inspect(forest.append)

        worker.dataflow(build)
        return forest

    forest = [edge for got in pt.execute_from_args(work) for edge in got]
    count = len(set(components(forest, nodes)))
    print(f"{len(forest)} spanning edges; {count} components among {nodes} nodes")


if __name__ == "__main__":
    main()
