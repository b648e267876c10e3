"""Reachability: compiled path summaries and the pointstamp tracker of one scope.

This is the engine behind every frontier.  It answers, for each location of a scope's graph,
"which timestamps may still arrive here?", given counts of *pointstamps* — ``(location, time)``
pairs with a count of capabilities (at operator outputs, :class:`Source` locations) or of
messages in flight (at operator inputs, :class:`Target` locations).

The graph
    Node ``n`` is an operator with numbered inputs and outputs; its *internal summary* says, for
    each ``(input i, output o)``, the antichain of path summaries by which a time arriving at
    ``i`` may advance before it can appear at ``o`` (an empty antichain: no path at all).  Edges
    connect a ``Source(n, o)`` to a ``Target(m, i)``; a source may feed many targets.  Node 0 is
    the scope's own boundary, seen from inside: its *inputs* are the scope's outputs and its
    *outputs* are the scope's inputs, and it has no internal paths.

The safety rule
    Pointstamp ``(l1, t1)`` *could-result-in* ``(l2, t2)`` if some path summary ``p`` from ``l1``
    to ``l2`` has ``p(t1) <= t2``.  The frontier at ``l2`` is the antichain of minimal times
    ``p(t1)`` over positive-count pointstamps ``(l1, t1)`` and paths ``p``.  No message can later
    arrive at ``l2`` with a time not ``>=`` some frontier element (the "Progress Tracking"
    chapter of the timely-dataflow book, https://timelydataflow.github.io/timely-dataflow/).
    The builder rejects graphs with a cycle that does not strictly advance time, since on such
    a cycle could-result-in is not antisymmetric and the argument breaks.

How the tracker works (after Naiad and the Rust crate)
    Each location keeps two :class:`MutableAntichain` s: ``pointstamps`` (the counts reported at
    that location) and ``implications`` (counts of *frontier elements* arriving from upstream,
    including its own pointstamps).  An update changes a location's pointstamp frontier; each
    frontier change (±1 at a time) enters a worklist; popping in increasing time order, a change
    is applied to the location's implications, and every change of *that* frontier is pushed
    along the location's outgoing edges (identity) or internal summaries (``results_in``).  Work
    is therefore proportional to the frontier changes an update implies — an update that does
    not move any frontier stops at once — never to the size of the graph.

    Processing in time order makes coalescing work: all contributions to ``(t, l)`` are summed
    before ``l`` is touched, and because summaries never move times backwards and every cycle
    advances them, nothing already processed can be invalidated.

Locations are dense integers internally (lists beat dicts of tuples by a wide margin in
CPython); :class:`Source` / :class:`Target` are the public names.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from ..errors import CycleError
from ..order import domain_of, followed_by, results_in, summary_less_equal
from .antichain import Antichain, MutableAntichain
from .change_batch import ChangeBatch

__all__ = ["Source", "Target", "Builder", "Tracker"]


class _Port(NamedTuple):
    node: int
    port: int


class _Location(_Port):
    """A port of a node, equal only to a location of the same kind.

    ``Source(1, 0)`` and ``Target(1, 0)`` name different locations and must not collide as dict
    keys (plain tuple equality would make them equal).
    """

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.node, self.port))


class Source(_Location):
    """An operator output port (a source of timestamped data).  Equal only to a ``Source``."""

    __slots__ = ()


class Target(_Location):
    """An operator input port (a target of timestamped data).  Equal only to a ``Target``."""

    __slots__ = ()


def _minimal_summaries(
    start: Any,
    identity: Any,
    adjacent: Any,
    backwards: bool,
) -> dict[Any, Antichain]:
    """The minimal path summaries between ``start`` and every location reachable from it.

    ``adjacent[loc]`` lists ``(next, step)``: one step of a path, with its summary (``None``
    for an edge, which leaves times alone).  Walking forwards, a path with summary ``s`` then
    the step has summary ``s`` followed by ``step``; walking ``backwards`` (from a destination
    towards sources), ``step`` followed by ``s``.  Returns ``reach[loc]``, the antichain of
    minimal summaries (the identity for ``start`` itself).  Cost: proportional to the paths
    that improve some antichain, which every cycle bounds by strictly advancing time.
    """
    reach: dict[Any, Antichain] = {start: Antichain.from_elem(identity)}
    todo: list[tuple[Any, Any]] = [(start, identity)]
    while todo:
        loc, s = todo.pop()
        for nloc, step in adjacent[loc]:
            if step is None:
                ns = s
            else:
                ns = followed_by(step, s) if backwards else followed_by(s, step)
                if ns is None:
                    continue
            a = reach.get(nloc)
            if a is None:
                a = reach[nloc] = Antichain()
            if a.insert(ns):
                todo.append((nloc, ns))
    return reach


def _summary_antichain(items: Iterable[Any]) -> Antichain:
    a = Antichain()
    for s in items:
        a.insert(s)
    return a


class Builder:
    """Collects a scope's nodes and edges and compiles them into a :class:`Tracker`.

    ``add_node(index, inputs, outputs, summary, name)``: ``summary[i][o]`` is an iterable of path
    summaries from input ``i`` to output ``o`` (empty: no path).  Indices need not be added in
    order, but must be dense ``0..n-1`` when ``build`` is called.
    """

    def __init__(self, domain: Any = int) -> None:
        self.domain = domain_of(domain)
        self._nodes: dict[int, tuple[int, int, list[list[Antichain]], str]] = {}
        self._edges: list[tuple[Source, Target]] = []

    def add_node(
        self,
        index: int,
        inputs: int,
        outputs: int,
        summary: Sequence[Sequence[Iterable[Any]]],
        name: str | None = None,
    ) -> None:
        """Declare node ``index``: its ports and internal summaries; once per index.

        ``summary[i][o]`` holds the path summaries from input ``i`` to output ``o`` (empty: no
        path).
        """
        if index in self._nodes:
            raise ValueError(f"node {index} added twice")
        if len(summary) != inputs or any(len(row) != outputs for row in summary):
            raise ValueError(
                f"node {index} ({name}): summary must be {inputs} rows of {outputs} antichains"
            )
        # Most cells of a wide node are empty (no path): skip the per-cell work for those.
        rows = [
            [_summary_antichain(cell) if cell else Antichain() for cell in row] for row in summary
        ]
        self._nodes[index] = (inputs, outputs, rows, name or f"node {index}")

    def add_edge(self, source: tuple[int, int], target: tuple[int, int]) -> None:
        """Connect output ``source`` to input ``target`` (each a ``(node, port)`` pair)."""
        self._edges.append((Source(*source), Target(*target)))

    # ----------------------------------------------------------------------------------------

    def _check_shape(self) -> int:
        n = len(self._nodes)
        if sorted(self._nodes) != list(range(n)):
            raise ValueError(f"node indices must be 0..{n - 1}, got {sorted(self._nodes)}")
        for s, t in self._edges:
            if s.node not in self._nodes or s.port >= self._nodes[s.node][1]:
                raise ValueError(f"edge from missing output {s}")
            if t.node not in self._nodes or t.port >= self._nodes[t.node][0]:
                raise ValueError(f"edge into missing input {t}")
        return n

    def node_name(self, index: int) -> str:
        """The name node ``index`` was added with (``node <index>`` if none was given)."""
        return self._nodes[index][3]

    def check_cycles(self) -> None:
        """Raise :class:`CycleError` naming the operators of a non-advancing cycle, if any."""
        identity = self.domain.identity()
        succ: dict[tuple, list[tuple]] = {}
        for s, t in self._edges:
            succ.setdefault(("s", s.node, s.port), []).append(("t", t.node, t.port))
        for index, (inputs, outputs, rows, _name) in self._nodes.items():
            for i in range(inputs):
                for o, cell in enumerate(rows[i]):
                    if cell and any(summary_less_equal(s, identity) for s in cell):
                        succ.setdefault(("t", index, i), []).append(("s", index, o))
        cycle = _find_cycle(succ)
        if cycle is not None:
            names: list[str] = []
            for _kind, node, _port in cycle:
                name = self._nodes[node][3]
                if not names or names[-1] != name:
                    names.append(name)
            if len(names) > 1 and names[-1] == names[0]:
                names.pop()
            raise CycleError(
                "the dataflow graph has a cycle that does not advance timestamps "
                f"(every cycle needs a feedback edge with a non-zero summary): "
                f"{' -> '.join(names + names[:1])}"
            )

    def compile(self) -> dict[tuple, dict[tuple, Antichain]]:
        """All-pairs minimal path summaries, keyed by ``Source``/``Target`` locations.

        ``result[l1][l2]`` is the antichain of minimal summaries over all paths from ``l1`` to
        ``l2`` (the identity for ``l1 == l2``).  Quadratic in the graph; used for scope summaries
        of small graphs, for explanations and for tests.  The tracker never needs it.
        """
        self._check_shape()
        self.check_cycles()
        identity = self.domain.identity()
        # One step from each location: an edge (no summary) or an internal path of a node.
        steps: dict[tuple, list[tuple[tuple, Any]]] = {}
        for index, (inputs, outputs, rows, _n) in sorted(self._nodes.items()):
            for i in range(inputs):
                steps[Target(index, i)] = [
                    (Source(index, o), internal) for o in range(outputs) for internal in rows[i][o]
                ]
            for o in range(outputs):
                steps[Source(index, o)] = []
        for s, t in self._edges:
            steps[s].append((t, None))
        return {start: _minimal_summaries(start, identity, steps, False) for start in steps}

    def build(self) -> Tracker:
        """Validate the graph and compile it into a :class:`Tracker`."""
        self._check_shape()
        self.check_cycles()
        return Tracker(self.domain, self._nodes, self._edges)


def _find_cycle(succ: dict[tuple, list[tuple]]) -> list[tuple] | None:
    """Return the vertices of some directed cycle, or ``None``.  Iterative DFS (no recursion)."""
    WHITE, GREY, BLACK = 0, 1, 2
    color: dict[tuple, int] = {}
    for root in list(succ):
        if color.get(root, WHITE) != WHITE:
            continue
        stack: list[tuple[tuple, int]] = [(root, 0)]
        path: list[tuple] = [root]
        color[root] = GREY
        while stack:
            v, i = stack[-1]
            nexts = succ.get(v, ())
            if i < len(nexts):
                stack[-1] = (v, i + 1)
                w = nexts[i]
                c = color.get(w, WHITE)
                if c == GREY:
                    return path[path.index(w) :]
                if c == WHITE:
                    color[w] = GREY
                    stack.append((w, 0))
                    path.append(w)
            else:
                color[v] = BLACK
                stack.pop()
                path.pop()
    return None


def _shared_projections(
    nlocs: int, projections: dict[int, list[tuple[int, Any]]]
) -> list[tuple[tuple[int, Any], ...]]:
    """Per location, its ``(scope output, summary)`` pairs as a tuple (``()`` for none), equal
    tuples shared: along a chain of operators every location projects onto the scope's outputs
    by the same summaries, so one tuple serves them all.  A summary that cannot be hashed just
    keeps its own tuple."""
    out: list[tuple[tuple[int, Any], ...]] = [()] * nlocs
    shared: dict[tuple[tuple[int, Any], ...], tuple[tuple[int, Any], ...]] = {}
    for loc, pairs in projections.items():
        key = tuple(pairs)
        try:
            out[loc] = shared.setdefault(key, key)
        except TypeError:
            out[loc] = key
    return out


class Tracker:
    """Pointstamp counts of one scope (summed over all workers' reports) and their frontiers.

    Use: ``update_source`` / ``update_target`` / ``update_loc`` buffer count changes;
    ``propagate_all`` applies them and records (a) every change to an implication frontier
    (``drain_pushed``), (b) the nodes whose capabilities all went (``drain_released``) and (c)
    changes to the frontier of internal pointstamps projected onto each scope output, in
    ``output_changes[q]`` (a :class:`ChangeBatch` per output).  Callers drain all three after
    each ``propagate_all`` that returned ``True``.

    Invariant after ``propagate_all``: for every location ``l``, ``implications[l]``'s frontier
    equals the minimal elements of ``{p(t) : pointstamps[l'] has t with positive count, p a
    minimal summary from l' to l}``.
    """

    def __init__(
        self,
        domain: Any,
        nodes: dict[int, tuple[int, int, list[list[Antichain]], str]],
        edges: list[tuple[Source, Target]],
    ) -> None:
        """From a :class:`Builder`'s validated nodes and edges (use ``Builder.build``)."""
        self.domain = domain
        n = len(nodes)
        self.node_names = [nodes[i][3] for i in range(n)]
        self.node_inputs = [nodes[i][0] for i in range(n)]
        self.node_outputs = [nodes[i][1] for i in range(n)]
        # Dense location numbering: per node its targets, then its sources.
        target_loc: list[tuple[int, ...]] = []
        source_loc: list[tuple[int, ...]] = []
        loc_node: list[int] = []
        loc_port: list[int] = []
        loc_is_source: list[bool] = []
        for i in range(n):
            ins, outs = nodes[i][0], nodes[i][1]
            target_loc.append(tuple(range(len(loc_node), len(loc_node) + ins)))
            loc_node.extend([i] * ins)
            loc_port.extend(range(ins))
            loc_is_source.extend([False] * ins)
            source_loc.append(tuple(range(len(loc_node), len(loc_node) + outs)))
            loc_node.extend([i] * outs)
            loc_port.extend(range(outs))
            loc_is_source.extend([True] * outs)
        self.target_loc = target_loc
        self.source_loc = source_loc
        self.loc_node = loc_node
        self.loc_port = loc_port
        self.loc_is_source = loc_is_source
        nlocs = len(loc_node)
        # Forward structure: source -> targets (edges); target -> [(source, summary)] (internal).
        forward: list[list[Any]] = [[] for _ in range(nlocs)]
        backward: list[list[tuple[int, Any]]] = [[] for _ in range(nlocs)]
        identity = domain.identity()
        for s, t in edges:
            sl = source_loc[s.node][s.port]
            tl = target_loc[t.node][t.port]
            if tl not in forward[sl]:
                forward[sl].append(tl)
                backward[tl].append((sl, identity))
        for i in range(n):
            ins, outs, rows, _name = nodes[i]
            for p in range(ins):
                tl = target_loc[i][p]
                for o, cell in enumerate(rows[p]):
                    if not cell:
                        continue
                    sl = source_loc[i][o]
                    for summary in cell:
                        forward[tl].append((sl, summary))
                        backward[sl].append((tl, summary))
        # Tuples once complete: a location's successors never change, and a tuple is half
        # the memory of a list (a million operators are a common size).
        self._forward: list[tuple[Any, ...]] = [tuple(f) for f in forward]
        # Summaries from each location to each scope output (node 0's targets), computed
        # backwards.  Locations of node 0's sources (scope inputs) give the scope summary and
        # are excluded from the projection: the parent's frontier is not our capability.
        n_scope_outputs = nodes[0][0] if n else 0
        n_scope_inputs = nodes[0][1] if n else 0
        projections: dict[int, list[tuple[int, Any]]] = {}
        self.scope_summary: list[list[Antichain]] = [
            [Antichain() for _ in range(n_scope_outputs)] for _ in range(n_scope_inputs)
        ]
        for q in range(n_scope_outputs):
            reach = _minimal_summaries(target_loc[0][q], identity, backward, True)
            for loc, a in reach.items():
                if loc_node[loc] == 0 and loc_is_source[loc]:
                    self.scope_summary[loc_port[loc]][q] = a
                else:
                    projections.setdefault(loc, []).extend((q, s) for s in a)
        self._to_outputs = _shared_projections(nlocs, projections)
        self._pointstamps: list[MutableAntichain | None] = [None] * nlocs
        self._implications: list[MutableAntichain | None] = [None] * nlocs
        # Every input's frontier exists from the start (operators bind to them anyway), so
        # ``inputs_done`` — asked after every operator invocation — is a plain scan.
        self._input_frontiers = [tuple(self.implication(tl) for tl in tls) for tls in target_loc]
        self._pending: dict[int, list[tuple[Any, int]]] = {}
        self.cap_counts = [0] * n
        self.total_counts = 0
        self._pushed: list[tuple[int, Any, int]] = []
        # Nodes whose capability frontier became empty in this view (callers drain it).
        self._released: list[int] = []
        self.output_changes = [ChangeBatch() for _ in range(n_scope_outputs)]

    # ----------------------------------------------------------------------------------------
    # Updates.

    def update_loc(self, loc: int, t: Any, delta: int) -> None:
        """Buffer a change in the count at dense location ``loc`` for time ``t`` (applied by
        ``propagate_all``)."""
        p = self._pending.get(loc)
        if p is None:
            self._pending[loc] = [(t, delta)]
        else:
            p.append((t, delta))

    def update_source(self, node: int, port: int, t: Any, delta: int) -> None:
        """A change in the count of capabilities at ``Source(node, port)`` for time ``t``."""
        self.update_loc(self.source_loc[node][port], t, delta)

    def update_target(self, node: int, port: int, t: Any, delta: int) -> None:
        """A change in the count of messages in flight to ``Target(node, port)`` at ``t``."""
        self.update_loc(self.target_loc[node][port], t, delta)

    def has_pending(self) -> bool:
        """Some update is buffered (``propagate_all`` has work to do)."""
        return bool(self._pending)

    def propagate_all(self) -> bool:
        """Apply buffered updates and propagate their consequences (see module docstring).

        Returns whether there was anything to apply; only then may ``drain_released``,
        ``drain_pushed`` and ``output_changes`` have something new.
        """
        if not self._pending:
            return False
        pending = self._pending
        self._pending = {}
        pointstamps = self._pointstamps
        to_outputs = self._to_outputs
        output_changes = self.output_changes
        loc_is_source = self.loc_is_source
        loc_node = self.loc_node
        cap_counts = self.cap_counts
        worklist: list[tuple[Any, int, int]] = []
        push = heapq.heappush
        released = self._released
        for loc, updates in pending.items():
            ps = pointstamps[loc]
            if ps is None:
                ps = pointstamps[loc] = MutableAntichain()
            changes = ps.update_iter(updates)
            if not changes:
                continue
            is_source = loc_is_source[loc]
            projections = to_outputs[loc]
            for t, d in changes:
                self.total_counts += d
                if is_source:
                    node = loc_node[loc]
                    cap_counts[node] += d
                    if not cap_counts[node]:
                        released.append(node)
                for q, s in projections:
                    t2 = t + s if type(s) is int else s.results_in(t)
                    if t2 is not None:
                        output_changes[q].update(t2, d)
                push(worklist, (t, loc, d))
        if worklist:
            self._drain(worklist)
        return True

    def drain_released(self) -> list[int]:
        """The nodes whose capability count fell to zero since the last call (a node may be
        listed more than once, or have acquired capabilities again since)."""
        released = self._released
        if not released:
            return []
        self._released = []
        return released

    def drain_pushed(self) -> list[tuple[int, Any, int]]:
        """Every ``(location, time, ±1)`` change of an implication frontier since the last
        call, in the order they happened."""
        pushed = self._pushed
        if not pushed:
            return []
        self._pushed = []
        return pushed

    def inputs_done(self, node: int) -> bool:
        """No more messages can ever arrive at any input of ``node`` (every input frontier
        is empty)."""
        for frontier in self._input_frontiers[node]:
            if not frontier.is_empty():
                return False
        return True

    def _drain(self, worklist: list[tuple[Any, int, int]]) -> None:
        """Pop ``(time, location, delta)`` in increasing order, summing equal ``(time,
        location)`` entries, apply each to its location's implications and push the frontier
        changes on.

        A change whose single consequence would be the next entry popped anyway (it sorts
        before the heap's head) is applied at once instead of being pushed and popped: the
        order of processing, and so the result, is exactly the heap's.  Along a chain of
        operators that is every change, and the heap is left out entirely.
        """
        implications = self._implications
        forward = self._forward
        loc_is_source = self.loc_is_source
        pushed = self._pushed
        record = pushed.append
        pop = heapq.heappop
        push = heapq.heappush
        while worklist:
            t, loc, d = pop(worklist)
            while worklist and worklist[0][1] == loc and worklist[0][0] == t:
                d += pop(worklist)[2]
            while d:
                imp = implications[loc]
                if imp is None:
                    imp = implications[loc] = MutableAntichain()
                changes = imp.update_one(t, d)
                if not changes:
                    break
                nexts = forward[loc]
                if len(changes) == 1 and len(nexts) == 1:
                    # One change, one successor: continue there directly if that entry would
                    # be the heap's minimum (strictly: an equal entry must be summed first).
                    t2, d2 = changes[0]
                    record((loc, t2, d2))
                    if loc_is_source[loc]:
                        nloc = nexts[0]
                    else:
                        nloc, s = nexts[0]
                        t2 = t2 + s if type(s) is int else s.results_in(t2)
                        if t2 is None:
                            break
                    if worklist:
                        head = worklist[0]
                        if not (t2 < head[0] or (t2 == head[0] and nloc < head[1])):
                            push(worklist, (t2, nloc, d2))
                            break
                    t, loc, d = t2, nloc, d2
                    continue
                if loc_is_source[loc]:
                    for t2, d2 in changes:
                        record((loc, t2, d2))
                        for tl in nexts:
                            push(worklist, (t2, tl, d2))
                else:
                    for t2, d2 in changes:
                        record((loc, t2, d2))
                        for sl, s in nexts:
                            t3 = t2 + s if type(s) is int else s.results_in(t2)
                            if t3 is not None:
                                push(worklist, (t3, sl, d2))
                break

    # ----------------------------------------------------------------------------------------
    # Queries.

    def implication(self, loc: int) -> MutableAntichain:
        """The live frontier at location ``loc`` (created if it has none yet).

        The object is updated in place by ``propagate_all``; children that read their input
        frontiers from it need no copies of the changes.
        """
        imp = self._implications[loc]
        if imp is None:
            imp = self._implications[loc] = MutableAntichain()
        return imp

    def target_frontier(self, node: int, port: int) -> Antichain:
        """Times that may still arrive at ``Target(node, port)``."""
        imp = self._implications[self.target_loc[node][port]]
        return imp.frontier() if imp is not None else Antichain()

    def source_frontier(self, node: int, port: int) -> Antichain:
        """Times that may still be produced at ``Source(node, port)``."""
        imp = self._implications[self.source_loc[node][port]]
        return imp.frontier() if imp is not None else Antichain()

    def pointstamp_count(self, location: Source | Target, t: Any) -> int:
        """The net count of pointstamps at ``location`` for time ``t`` (0 if none)."""
        loc = self.location_id(location)
        ps = self._pointstamps[loc]
        return ps.count_for(t) if ps is not None else 0

    def location_id(self, location: Source | Target) -> int:
        """The dense location number of a :class:`Source` or :class:`Target`."""
        if isinstance(location, Source):
            return self.source_loc[location.node][location.port]
        return self.target_loc[location.node][location.port]

    def location(self, loc: int) -> Source | Target:
        """The :class:`Source` or :class:`Target` whose location number is ``loc``."""
        if self.loc_is_source[loc]:
            return Source(self.loc_node[loc], self.loc_port[loc])
        return Target(self.loc_node[loc], self.loc_port[loc])

    def tracking_anything(self) -> bool:
        """Some location has a positive pointstamp (or updates are still buffered)."""
        return self.total_counts > 0 or bool(self._pending)

    def holds_capability(self, node: int) -> bool:
        """Some output of ``node`` has a positive capability frontier in this view."""
        return self.cap_counts[node] > 0

    def positive_pointstamps(self) -> list[tuple[Source | Target, Any, int]]:
        """Every ``(location, time, count)`` with a non-zero count, for debugging."""
        out = []
        for loc, ps in enumerate(self._pointstamps):
            if ps is not None:
                for t, c in ps.counts().items():
                    out.append((self.location(loc), t, c))
        return out

    def explain(self, location: Source | Target) -> list[tuple[str, Source | Target, Any]]:
        """Which positive pointstamps hold the frontier at ``location``: ``(name, loc, time)``.

        A pointstamp ``(l, t)`` holds it if some minimal path summary ``p`` from ``l`` to
        ``location`` puts ``p(t)`` exactly on the frontier.  Walks the graph backwards from
        ``location``, composing summaries; cost proportional to the graph.  This is how a user
        finds out why a dataflow is stuck.
        """
        target = self.location_id(location)
        frontier = self._implications[target]
        if frontier is None or frontier.is_empty():
            return []
        identity = self.domain.identity()
        back: list[list[tuple[int, Any]]] = [[] for _ in self._forward]
        for src, fw in enumerate(self._forward):
            for item in fw:
                if type(item) is int:
                    back[item].append((src, identity))
                else:
                    back[item[0]].append((src, item[1]))
        # reach[l]: minimal summaries of the paths from l to ``target``.
        reach = _minimal_summaries(target, identity, back, True)
        at_frontier = frontier.frontier_list()
        holding = []
        for loc in sorted(reach):
            ps = self._pointstamps[loc]
            if ps is None:
                continue
            summaries = list(reach[loc])
            for t in ps.frontier_list():
                for s in summaries:
                    t2 = results_in(s, t)
                    if t2 is not None and t2 in at_frontier:
                        holding.append((self.node_names[self.loc_node[loc]], self.location(loc), t))
                        break
        return holding
