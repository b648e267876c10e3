"""Connected components by label propagation in an iterative scope, the fast way.

Every node starts labelled with its own id; each round, a node whose label went down offers it
to its neighbours, and a node takes the smallest label offered; the loop drains when no label
changes, and each node's last label is the smallest id of its component.  This is the
data-parallel algorithm of Naiad (SOSP 2013) and timely dataflow's examples, and the code of
the ``components`` row of the README's scaling table (``bench/scaling.py`` imports it from here).

What makes it fast in Python (docs/graphs.md says why, step by step):

* **columnar batches**: edges and offers are numpy structured arrays (:data:`EDGE`,
  :data:`OFFER`), routed with ``pt.Exchange(column=...)`` and sent without pickling records;
* **one operator per round, not one per record**: the ``LabelPropagation`` operator gathers a
  round's edges and offers and acts once both inputs are complete for it (a ``Notificator``);
* **only changes go around the loop**: a node offers its label only when it went down, and never
  to a neighbour already offered as low a label; each worker sends each node one offer a round.

    $ python examples/components.py                  # 50,000 nodes, 100,000 edges
    $ python examples/components.py 200000 400000 -w 2
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

import pytimely as pt

#: An edge ``(src, dst)`` / an offer ``(node, label)`` of :func:`label_propagation`, as numpy
#: records: whole batches are routed, split and sent as arrays, without per-record pickling.
EDGE = np.dtype([("src", np.int64), ("dst", np.int64)])
OFFER = np.dtype([("node", np.int64), ("label", np.int64)])


def edge_batches(nodes: int, edges: int, index: int, peers: int, batch: int) -> list[np.ndarray]:
    """Worker ``index`` of ``peers``'s share of a seeded random graph's ``edges`` edges on
    ``nodes`` nodes, in batches of ``batch`` :data:`EDGE` records (batch ``k`` is worker
    ``k % peers``'s: together the workers generate the same graph whatever ``peers``)."""
    out = []
    for k in range(index, -(-edges // batch), peers):
        n = min(batch, edges - k * batch)
        pairs = np.random.default_rng(1_000_000 + k).integers(0, nodes, (n, 2))
        part = np.empty(n, EDGE)
        part["src"], part["dst"] = pairs[:, 0], pairs[:, 1]
        out.append(part)
    return out


def label_propagation(edges: Any) -> Any:
    """Connected components of the undirected graph whose edges ``(a, b)`` are ``edges``, by
    label propagation in an iterative scope: the stream of ``(node, label)`` label changes, a
    node's last label being the smallest node id of its component.

    The standard data-parallel algorithm of Naiad and timely dataflow (Murray et al., "Naiad: a
    timely dataflow system", SOSP 2013): every node starts labelled with its own id;
    each round, a node whose label went down offers it to its neighbours, and a node takes the
    smallest label offered; the loop drains when no label changes.  Nodes, their adjacency lists
    and their labels are partitioned by node id (``node % peers``), so one worker and two
    workers run the same dataflow and the same rounds; two send more offers (each merges only
    its own offers to a node: 555,000 against 303,000 on the benchmark's graph).

    Invariant (why the answer is exact): whenever a node's label changes, or it gains an edge,
    its current label is offered along the edge, unless the neighbour's label is known to be no
    larger already: its id is no larger (a label never exceeds its node's id), or this worker
    offered it no larger a label before (offers only ever lower labels).  So once the loop
    drains, neighbours carry equal labels, and the label, always some member's id, is the
    component's smallest id.  Each worker sends each destination one offer per round (the
    smallest), as an array of :data:`OFFER` records.  On the benchmark's graph the loop runs
    about 15 rounds.
    """
    both_ways = edges.map_batch(_both_directions, name="BothDirections")

    def body(inner: Any) -> Any:
        handle, offers = inner.feedback(1)
        builder = pt.OperatorBuilder("LabelPropagation", inner)
        builder.new_input(both_ways.enter(inner), pt.Exchange(column="src"))
        builder.new_input(offers, pt.Exchange(column="node"))
        builder.new_output()  # offers (neighbour, label) for the next round
        builder.new_output()  # label changes (node, label), out of the loop
        offered, changes = builder.build(_label_propagation_logic)
        offered.connect_loop(handle)
        return changes.leave()

    return edges.scope.iterative(body, name="Components")


def _both_directions(edges: np.ndarray) -> np.ndarray:
    """Every edge of ``edges`` and its reverse."""
    out = np.empty(2 * len(edges), EDGE)
    out["src"] = np.concatenate([edges["src"], edges["dst"]])
    out["dst"] = np.concatenate([edges["dst"], edges["src"]])
    return out


def _offers(outgoing: dict[int, int]) -> np.ndarray:
    """``outgoing`` (node -> label) as an array of :data:`OFFER` records."""
    out = np.empty(len(outgoing), OFFER)
    out["node"] = np.fromiter(outgoing.keys(), np.int64, len(outgoing))
    out["label"] = np.fromiter(outgoing.values(), np.int64, len(outgoing))
    return out


def _label_propagation_logic(caps: list, info: Any) -> Callable[..., None]:
    """The ``LabelPropagation`` operator: a round's work once both inputs are complete for it."""
    for cap in caps:
        cap.drop()
    adjacency: dict[int, list[int]] = {}
    label: dict[int, int] = {}  # only nodes whose label went below their own id
    new_edges: dict[Any, list] = {}  # time -> the EDGE arrays received at that time
    best_offer: dict[Any, dict[int, int]] = {}  # time -> node -> smallest label offered
    change_caps: dict[Any, Any] = {}  # time -> capability of the changes output
    offered: dict[int, int] = {}  # neighbour -> smallest label this worker ever offered it
    notificator: list = []

    def log_time(ref: Any) -> None:
        t = ref.time
        if t not in change_caps:
            change_caps[t] = ref.retain(1)
            notificator[0].notify_at(ref.retain(0))

    def logic(edge_in: Any, offer_in: Any, offer_out: Any, change_out: Any) -> None:
        if not notificator:
            notificator.append(pt.Notificator([edge_in.frontier, offer_in.frontier]))
        for ref, batch in edge_in:
            log_time(ref)
            new_edges.setdefault(ref.time, []).append(batch)
        for ref, batch in offer_in:
            log_time(ref)
            best = best_offer.setdefault(ref.time, {})
            for node, offer in zip(batch["node"].tolist(), batch["label"].tolist()):
                if offer < best.get(node, node):
                    best[node] = offer
        for cap in notificator[0]:
            t = cap.time
            changed: set[int] = set()
            outgoing: dict[int, int] = {}  # neighbour -> smallest label offered to it
            for node, offer in best_offer.pop(t, {}).items():
                if offer < label.get(node, node):
                    label[node] = offer
                    changed.add(node)
            gained: dict[int, list[int]] = {}
            for part in new_edges.pop(t, ()):
                for node, neighbour in zip(part["src"].tolist(), part["dst"].tolist()):
                    gained.setdefault(node, []).append(neighbour)
            for node, neighbours in gained.items():
                adjacency.setdefault(node, []).extend(neighbours)
                mine = label.get(node, node)
                smallest = min(neighbours)
                if smallest < mine:  # a neighbour's id: at least as good as its label
                    label[node] = smallest
                    changed.add(node)
                else:
                    for u in neighbours:
                        if mine < offered.get(u, u):
                            offered[u] = outgoing[u] = mine
            for node in changed:
                mine = label[node]
                for u in adjacency.get(node, ()):
                    if mine < offered.get(u, u):
                        offered[u] = outgoing[u] = mine
            if outgoing:
                offer_out.give_batch(cap, _offers(outgoing))
            change_cap = change_caps.pop(t)
            if changed:
                change_out.give_batch(change_cap, [(v, label[v]) for v in changed])
            change_cap.drop()
            cap.drop()

    return logic


def components(scope: Any) -> tuple[Any, Callable[[], Any]]:
    labels: dict[int, int] = {}

    def keep_smallest(_t: Any, batch: list) -> None:
        for node, value in batch:
            if value < labels.get(node, node):
                labels[node] = value

    inp, edges = scope.new_input()
    label_propagation(edges).for_each(keep_smallest)
    return inp, lambda: labels


def union_find_labels(batches: list[np.ndarray]) -> dict[int, int]:
    """The reference answer without pytimely: node -> smallest id of its component, for the
    nodes whose label is not their own id."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        root = x
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(x, x) != root:
            parent[x], x = root, parent[x]
        return root

    for part in batches:
        for a, b in zip(part["src"].tolist(), part["dst"].tolist()):
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    labels = {x: find(x) for x in list(parent)}
    return {x: r for x, r in labels.items() if r != x}


def main() -> None:
    words = pt.args()
    nodes = int(words[0]) if words else 50_000
    edges = int(words[1]) if len(words) > 1 else 2 * nodes

    def work(worker: pt.Worker) -> tuple[dict[int, int], float]:
        batches = edge_batches(nodes, edges, worker.index, worker.peers, 1_000)
        inp, answer = worker.dataflow(components)
        start = time.perf_counter()
        for batch in batches:
            inp.send_batch(batch)
        inp.close()
        worker.run()
        return answer(), time.perf_counter() - start

    results = pt.execute_from_args(work)
    labels: dict[int, int] = {}
    for mine, _seconds in results:
        labels.update(mine)
    seconds = max(s for _mine, s in results)
    everything = edge_batches(nodes, edges, 0, 1, 1_000)
    assert labels == union_find_labels(everything), "labels differ from union-find"
    roots = len(set(range(nodes)) - set(labels))
    print(f"{nodes:,} nodes, {edges:,} edges: {roots:,} components in {seconds:.2f} s")


if __name__ == "__main__":
    main()
