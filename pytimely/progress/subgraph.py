"""A scope as an operator: schedule children, exchange their progress, compute frontiers.

A *subgraph* hosts children (operators or nested subgraphs) connected by edges, and presents
itself to its own parent as one node: an operator whose inputs are the scope's inputs, whose
outputs are the scope's outputs, and whose internal summary is computed from its insides.

What one ``schedule()`` does (after Naiad and ``Subgraph::schedule`` in timely-dataflow's
``progress/subgraph.rs``; each step is one method below):

1. *Accept the parent's frontier* (``_accept_frontier``): changes to the frontier of scope
   input ``p`` become capability changes at ``Source(0, p)`` — "child zero" is the scope
   boundary seen from inside, and the outside world's possibility of sending data looks, from
   inside, like a capability held at the boundary.
2. *Harvest inputs* (``_harvest_inputs``): records that crossed scope input ``p`` are moved, in
   the counts, from ``Source(0, p)`` to the internal targets it feeds.
3. *Receive* (``_receive_progress``) every worker's progress batches for this scope (our own
   included) from the :class:`Progcaster`.
4. *Propagate* (``_propagate_pointstamps``): apply the received counts to the tracker.  Counts
   at the boundary go to the parent instead (records leaving through scope output ``q`` are
   the parent's produced messages; records harvested at input ``p`` are the parent's consumed
   messages).  A frontier change at a child's input is visible at once to an operator (it
   reads the tracker's live frontier), is queued in a nested scope's
   ``SharedProgress.frontiers``, and wakes the child only if its :class:`FrontierInterest` asks
   for it — ``ALWAYS``, or ``IF_CAPABILITY`` while the child holds a capability in the aggregated
   view (``_notify_children``).  A child whose inputs are all finished and who holds nothing is
   woken once to retire (``_wake_released``).
5. *Run the activated children* (``_schedule_children``), in index order, each at most once
   per pass: a child activated again after it ran waits for the next pass, and at most a few
   passes run per ``schedule()`` (so a loop that always has work cannot hold the worker
   forever).  After each run the child's counts are drained: a plain operator's into the batch
   to be exchanged with other workers, a nested scope's (already aggregated across workers)
   straight into our own accumulation.
6. *Send* (``_send_progress``) this worker's batch to every worker, then go back to 3 while
   newly activated children remain — so a single-worker dataflow settles within one step.
7. *Report* to the parent (``_report_outputs``, the end of step 4): the frontier of internal
   pointstamps projected onto each scope output (our "capabilities" as an operator), plus
   consumed/produced counts at the boundary.

Laziness (Frank McSherry, "Speeding up Timely Dataflow by 100x", https://github.com/
frankmcsherry/blog; timely's ``notify`` flag on ``Operate``): the parent calls ``schedule()``
only when something inside asked for it or when a frontier change reaches us and our interest
asks for it.  A region whose children hold nothing reports no capability, so its
``IF_CAPABILITY`` interest lets the parent skip it entirely when only time moves; the changes
pile up (and cancel) in ``shared.frontiers`` and are applied when the region next runs for any
reason.

Invariants: every batch handed to the progcaster is the sum of whole per-invocation batches of
this worker (never a part of one); nothing is applied to the tracker before it has come back
through the progcaster, so every worker's tracker sees the same multiset of batches.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from types import FrameType
from typing import Any, Protocol

from .. import _native
from ..errors import OperatorError
from ..naming import operator_failure
from .antichain import MutableAntichain
from .broadcast import Progcaster
from .change_batch import ChangeBatch
from .operate import FrontierInterest, Operate, SharedProgress
from .reachability import Tracker

__all__ = ["BatchPush", "EdgeEnd", "Subgraph", "SubgraphObserver"]

#: Where an edge delivers its batches: ``push(time, batch)``.
BatchPush = Callable[[Any, Any], None]
#: One end of an edge inside a scope: ``(child index, port)``, child 0 being the scope boundary.
EdgeEnd = tuple[int, int]

_ALWAYS = FrontierInterest.ALWAYS
# Passes over the activated children per schedule(): each child runs at most once per pass, in
# index order; what a pass activates runs in the next one.  Several passes let a one-worker
# dataflow settle within one step (data, then the frontier it unblocks); the bound keeps a loop
# that always has work from holding the worker inside one step.
_MAX_PASSES = 4
_IF_CAPABILITY = FrontierInterest.IF_CAPABILITY


class Subgraph:
    """Runtime of one scope instance on one worker (see the module docstring).

    Built by the dataflow layer from its children, edges and a compiled :class:`Tracker`; it
    attaches every child (``Operate.attach`` / ``bind_frontiers``) and is itself an
    :class:`~pytimely.progress.operate.Operate` for its parent.
    """

    local = False

    def __init__(
        self,
        name: str,
        path: tuple[int, ...],
        children: list[Operate | None],
        edges: list[tuple[tuple[int, int], tuple[int, int], int]],
        tracker: Tracker,
        peers: int,
        to_inner: Callable[[Any], Any],
        to_outer: Callable[[Any], Any],
        summarize: Callable[[Any], Any],
        progcaster: Progcaster | None = None,
        pacts: list[str] | None = None,
        edge_taps: list[Callable[[Callable[[Any], Any]], None]] | None = None,
    ) -> None:
        """``pacts``: per edge, the name of its channel (``Pipeline``, ``Exchange``,
        ``Broadcast``, ``Feedback``), kept only to describe the graph (:meth:`edges`).
        ``edge_taps``: per edge, a function that replaces the edge's push ``f`` by
        ``wrap(f)`` when given ``wrap`` -- kept only for :meth:`observe`."""
        self.name = name
        self.path = path
        self.children = children  # index 0 is None: the boundary
        self.tracker = tracker
        self.peers = peers
        self._to_inner = to_inner
        self._to_outer = to_outer
        self._summarize = summarize
        self.progcaster = progcaster if progcaster is not None else Progcaster()
        self.progcaster.on_receive(self.activate)
        self.inputs = tracker.node_outputs[0]
        self.outputs = tracker.node_inputs[0]
        self.shared = SharedProgress(self.inputs, self.outputs)
        n = len(children)
        # Edge targets per (node, output), as (dense target location, weight): a record sent
        # on the output is counted ``weight`` times at the target (weight > 1 only for
        # broadcast edges, which deliver every record to every worker).
        self._edge_targets: list[list[list[tuple[int, int]]]] = [
            [[] for _ in range(tracker.node_outputs[i])] for i in range(n)
        ]
        for (snode, sport), (tnode, tport), weight in edges:
            tl = tracker.target_loc[tnode][tport]
            self._edge_targets[snode][sport].append((tl, weight))
        _count_past_inline(self._edge_targets, children, tracker.target_loc)
        self._input_targets = self._edge_targets[0]  # targets fed by scope input p
        names = pacts if pacts is not None else ["Pipeline"] * len(edges)
        self._described_edges = [(s, t, p) for (s, t, _w), p in zip(edges, names)]
        self._edge_taps = edge_taps or []
        # Nested scopes by child index, kept after they retire so the graph stays describable.
        self._nested = {i: c for i, c in enumerate(children) if isinstance(c, Subgraph)}
        self._ingress = [ChangeBatch() for _ in range(self.inputs)]
        self._output_capabilities = [MutableAntichain() for _ in range(self.outputs)]
        self._local = ChangeBatch()  # this worker's counts, to be exchanged
        self._final = ChangeBatch()  # counts every worker agrees on, to be applied
        # Capabilities held by *this worker's* operators, by (source location, time): the
        # tracker only knows the sum over all workers, which cannot say who holds what.
        self._held = ChangeBatch()
        self._interest: list[list[FrontierInterest]] = [[] for _ in range(n)]
        # Children that read their input frontiers straight from the tracker (operators) are
        # bound to its live antichains and get no copies of the changes; nested scopes keep
        # receiving changes in ``shared.frontiers`` (they translate them to inner times).
        self._reads_tracker = [False] * n
        for i in range(1, n):
            child = children[i]
            assert child is not None, "every child index is built before its scope"
            self._interest[i] = list(child.interest())
            child.attach(self.activate_child, i)
            self._reads_tracker[i] = child.bind_frontiers(
                [tracker.implication(loc) for loc in tracker.target_loc[i]]
            )
        # What step 5 calls to run child i: its ``schedule``, or an observer's replacement.
        self._schedulers = [_retired if c is None else c.schedule for c in children]
        # Where child i's counts go after each invocation, fixed once (the batches of its
        # ``SharedProgress`` are never replaced).  The common one-input one-output child gets
        # one flat tuple ``(local, consumed, target, produced, targets, capabilities, source)``;
        # any other child ``(local, consumed, produced, capabilities)``, pairing each input's
        # consumed batch with its target location, each output's produced batch with the
        # targets it feeds, and each output's capability batch with its source.  (The flat form
        # is a fifth of the memory: a million operators are a common size.)
        self._count_routes: list[tuple | None] = [None] * n
        for i in range(1, n):
            child = children[i]
            assert child is not None
            sp = child.shared
            if len(sp.consumeds) == 1 and len(sp.produceds) == 1:
                self._count_routes[i] = (
                    child.local,
                    sp.consumeds[0],
                    tracker.target_loc[i][0],
                    sp.produceds[0],
                    self._edge_targets[i][0],
                    sp.internals[0],
                    tracker.source_loc[i][0],
                )
                continue
            self._count_routes[i] = (
                child.local,
                tuple(zip(sp.consumeds, tracker.target_loc[i])),
                tuple(zip(sp.produceds, self._edge_targets[i])),
                tuple(zip(sp.internals, tracker.source_loc[i])),
            )
        self._active: list[int] = []
        self._active_set: set[int] = set()
        self._scheduled_self = False
        self._incomplete = [False] * n
        self._live = n - 1
        self._parent_activate: Callable[[int], None] = _ignore
        self._index_in_parent = 0
        self.invocations = 0

    # ----------------------------------------------------------------------------------------
    # As an operator in the parent.

    def summary(self) -> list[list[list[Any]]]:
        """See :meth:`Operate.summary`: the tracker's scope summaries, outer type.

        Each inner summary is converted to the parent's summary type.
        """
        s = self._summarize
        return [[[s(x) for x in a] for a in row] for row in self.tracker.scope_summary]

    def interest(self) -> list[FrontierInterest]:
        """See :meth:`Operate.interest`: the strongest interest of any inner child.

        The same for every input, and at least ``IF_CAPABILITY`` when the scope has outputs.
        """
        level = FrontierInterest.IF_CAPABILITY if self.outputs else FrontierInterest.NEVER
        for row in self._interest[1:]:
            for x in row:
                if x > level:
                    level = x
        return [level] * self.inputs

    def attach(self, activate: Callable[[int], None], index: int) -> None:
        """We are child ``index`` of our parent, which schedules us after ``activate(index)``."""
        self._parent_activate = activate
        self._index_in_parent = index

    def bind_frontiers(self, antichains: list[MutableAntichain]) -> bool:
        """No: our inputs' frontier changes must be translated to inner times, so we take them
        in ``shared.frontiers`` (step 1 of ``schedule``)."""
        return False

    def built(self) -> None:
        """Nothing to do: our own children were told when we were built."""

    def forwards_inline(self) -> bool:
        """See :meth:`Operate.forwards_inline`: a scope never does."""
        return False

    def initial_internals(self) -> list[tuple[int, Any, int]]:
        """Our first report to the parent: the projected frontier of the children's initial
        capabilities (computed by ``initialize``), counted once, without exchange."""
        return [(q, t, d) for q, cb in enumerate(self.shared.internals) for t, d in cb.drain()]

    def initialize(self) -> None:
        """Count every child's initial capabilities, compute the first frontiers, and tell
        every child that the scope is built (``Operate.built``).

        Initial capabilities are common knowledge (``peers`` per output, one per worker), so
        they go straight into the tracker rather than through the exchange.
        """
        tracker = self.tracker
        children = self.children
        for index in range(1, len(children)):
            child = children[index]
            assert child is not None
            for o, t, d in child.initial_internals():
                tracker.update_source(index, o, t, d)
                if child.local:  # ``peers`` initial capabilities: one per worker
                    self._held.update((tracker.source_loc[index][o], t), d // self.peers)
            self.activate_child(index)  # everyone runs once (to drop or keep initial tokens)
        self._receive_progress()
        self._propagate_pointstamps()
        for child in children[1:]:
            if child is not None:
                child.built()

    # ----------------------------------------------------------------------------------------
    # Activation.

    def activate_child(self, index: int) -> None:
        """Schedule child ``index`` at this scope's next opportunity."""
        if index not in self._active_set:
            self._active_set.add(index)
            heapq.heappush(self._active, index)
            if not self._scheduled_self:
                self._scheduled_self = True
                self._parent_activate(self._index_in_parent)

    def activate(self) -> None:
        """Ask the parent to schedule this scope (e.g. progress or data arrived)."""
        if not self._scheduled_self:
            self._scheduled_self = True
            self._parent_activate(self._index_in_parent)

    def record_ingress(self, port: int, t: Any, count: int) -> None:
        """``count`` records at inner time ``t`` crossed scope input ``port``."""
        self._ingress[port].update(t, count)
        self.activate()

    # ----------------------------------------------------------------------------------------
    # Scheduling.

    def retire(self) -> None:
        """See :meth:`Operate.retire`: a scope retires once all its children have, each of
        which let go of its own state then; nothing is left to release here."""

    def schedule(self) -> bool:
        """One invocation: the atomic steps of the module docstring, in order.

        Each guard below is the cheap "is there anything to do" test of the step it guards
        (this runs once per scope per worker step, so empty steps must cost no call).
        """
        self._scheduled_self = True  # activations during this call must not re-enter parent
        self.invocations += 1
        accepted = False  # the tracker holds updates not yet propagated
        if self.inputs:
            accepted = self._accept_frontier()
            self._harvest_inputs()
        if self._local:
            self._send_progress()
        progcaster = self.progcaster
        passes = 0
        while True:
            if progcaster.inbox:
                self._receive_progress()
            if self._final or accepted:
                accepted = False
                self._propagate_pointstamps()
            if not self._active or passes >= _MAX_PASSES:
                break
            passes += 1
            self._schedule_children()
            if self._local:
                self._send_progress()
        self._scheduled_self = False
        if self._active or progcaster.inbox or self._final:
            self.activate()
        return self._live > 0 or self.tracker.tracking_anything()

    def _accept_frontier(self) -> bool:
        """Step 1: the parent's frontier changes, as capabilities at the boundary (straight
        into the tracker: the parent's frontier is the same on every worker).  Returns whether
        there were any."""
        tracker = self.tracker
        to_inner = self._to_inner
        accepted = False
        for p, cb in enumerate(self.shared.frontiers):
            if cb:
                accepted = True
                for t, d in cb.drain():
                    tracker.update_source(0, p, to_inner(t), d)
        return accepted

    def _harvest_inputs(self) -> None:
        """Step 2: records that entered through scope input ``p`` move, in this worker's
        counts, from ``Source(0, p)`` to the targets it feeds."""
        source_loc = self.tracker.source_loc[0]
        local = self._local
        for p, cb in enumerate(self._ingress):
            if cb:
                src = source_loc[p]
                targets = self._input_targets[p]
                for t, k in cb.drain():
                    local.update((src, t), -k)
                    for tl, w in targets:
                        local.update((tl, t), k * w)

    def _receive_progress(self) -> None:
        """Step 3: every worker's batches for this scope, ours included, become final."""
        final = self._final
        for batch in self.progcaster.recv():
            final.extend(batch)

    def _send_progress(self) -> None:
        """Step 6: this worker's accumulated counts, as one batch, to every worker."""
        self.progcaster.send(self._local.drain())

    def _schedule_children(self) -> None:
        """Step 5: one pass over the activated children; what the pass activates again runs
        in the next pass."""
        deferred: list[int] = []
        self._run_children(set(), deferred)
        active = self._active
        active_set = self._active_set
        for index in deferred:
            if index not in active_set:
                active_set.add(index)
                heapq.heappush(active, index)

    def _run_children(self, ran: set[int], deferred: list[int]) -> None:
        children = self.children
        active = self._active
        active_set = self._active_set
        tracker = self.tracker
        cap_counts = tracker.cap_counts
        inputs_done = tracker.inputs_done
        schedulers = self._schedulers
        count_routes = self._count_routes
        local = self._local
        final = self._final
        held = self._held
        incomplete_children = self._incomplete
        pop = heapq.heappop
        drain_at, drain_located = _drains()
        while active:
            index = pop(active)
            active_set.discard(index)
            if index in ran:
                deferred.append(index)
                continue
            ran.add(index)
            child = children[index]
            if child is None:
                continue
            try:
                incomplete = schedulers[index]()
            except OperatorError:
                raise  # already names the operator
            except Exception as exc:  # user logic: name the operator and where it lives
                raise operator_failure(exc, child.name, self.path + (index,)) from exc
            # Drain the counts of this invocation into the right accumulation: records
            # consumed count -1 at the input's location, records produced +weight at every
            # target the output feeds, capability changes at the output's location.  (An empty
            # batch is false without a Python call: most are empty most of the time.)
            route = count_routes[index]
            if len(route) == 7:  # type: ignore[arg-type]
                is_local, consumed, tl, produced, targets, capability, sl = route  # type: ignore[misc]
                into = local if is_local else final
                if consumed:
                    drain_at(consumed, into, tl, -1)
                if produced:
                    drain_located(produced, into, targets)
                if capability:
                    if is_local:
                        for t, d in capability.items():
                            held.update((sl, t), d)
                    drain_at(capability, into, sl, 1)
            else:
                is_local, consumeds, produceds, capabilities = route  # type: ignore[misc]
                into = local if is_local else final
                for batch, tl in consumeds:
                    if batch:
                        drain_at(batch, into, tl, -1)
                for batch, targets in produceds:
                    if batch:
                        drain_located(batch, into, targets)
                for batch, sl in capabilities:
                    if batch:
                        if is_local:
                            for t, d in batch.items():
                                held.update((sl, t), d)
                        drain_at(batch, into, sl, 1)
            incomplete_children[index] = incomplete
            if not incomplete and not cap_counts[index] and inputs_done(index):
                # Retire: the child can never be asked to do anything again.  (Its final
                # reports were just extracted.)
                if not self._pending_counts(child):
                    child.retire()
                    children[index] = None
                    schedulers[index] = _retired
                    self._live -= 1

    def _pending_counts(self, child: Any) -> bool:
        sp = child.shared
        return any(sp.internals) or any(sp.produceds) or any(sp.consumeds)

    def _propagate_pointstamps(self) -> None:
        """Step 4: apply the final counts (the boundary's go to the parent), propagate them
        through the tracker, wake the children whose frontiers moved, report our outputs."""
        final = self._final
        tracker = self.tracker
        if final:
            shared = self.shared
            to_outer = self._to_outer
            loc_node = tracker.loc_node
            loc_port = tracker.loc_port
            loc_is_source = tracker.loc_is_source
            for (loc, t), d in final.drain():
                if loc_node[loc] == 0:
                    if loc_is_source[loc]:
                        shared.consumeds[loc_port[loc]].update(to_outer(t), -d)
                    else:
                        shared.produceds[loc_port[loc]].update(to_outer(t), d)
                else:
                    tracker.update_loc(loc, t, d)
        if not tracker.propagate_all():
            return
        released = tracker.drain_released()
        if released:
            self._wake_released(released)
        pushed = tracker.drain_pushed()
        if pushed:
            self._notify_children(pushed)
        if self.outputs:
            self._report_outputs()

    def _wake_released(self, released: list[int]) -> None:
        """A child that let go of its last capability may be finished: let it retire."""
        tracker = self.tracker
        children = self.children
        for node in released:
            if (
                node
                and children[node] is not None
                and not tracker.cap_counts[node]
                and tracker.inputs_done(node)
            ):
                self.activate_child(node)

    def _notify_children(self, pushed: list[tuple[int, Any, int]]) -> None:
        """Hand frontier changes at children's inputs to them, waking those whose
        :class:`FrontierInterest` asks for it (or who may now retire)."""
        tracker = self.tracker
        children = self.children
        interest = self._interest
        loc_node = tracker.loc_node
        loc_port = tracker.loc_port
        loc_is_source = tracker.loc_is_source
        cap_counts = tracker.cap_counts
        reads_tracker = self._reads_tracker
        touched: set[int] = set()
        for loc, t, d in pushed:
            if loc_is_source[loc]:
                continue
            node = loc_node[loc]
            if node == 0:
                continue
            child = children[node]
            if child is None:
                continue
            port = loc_port[loc]
            if not reads_tracker[node]:
                child.shared.frontiers[port].update(t, d)
            level = interest[node][port]
            if level == _ALWAYS or (level == _IF_CAPABILITY and cap_counts[node] > 0):
                self.activate_child(node)
            elif d < 0:
                touched.add(node)
            else:
                # The node's latest change added a time to an input frontier, so that input
                # is not finished (whatever came before): no need to ask the tracker.
                touched.discard(node)
        active_set = self._active_set
        for node in touched:
            # Shutdown override: finished inputs and nothing held means "come and retire".
            # (Only nodes whose last input frontier change was a retraction can qualify.)
            if node not in active_set and not cap_counts[node] and tracker.inputs_done(node):
                self.activate_child(node)

    def _report_outputs(self) -> None:
        """Our capabilities as an operator of the parent: the internal pointstamps' frontier
        projected onto each scope output, as changes in ``shared.internals``."""
        to_outer = self._to_outer
        for q, cb in enumerate(self.tracker.output_changes):
            if cb:
                changes = self._output_capabilities[q].update_iter(
                    [(to_outer(t), d) for t, d in cb.drain()]
                )
                if changes:
                    self.shared.internals[q].extend(changes)

    # ----------------------------------------------------------------------------------------
    # Observation (logging and statistics).

    def observe(self, observer: SubgraphObserver) -> None:
        """From now on, run every child (here and in nested scopes) through
        ``observer.scheduler``, push every edge's batches through ``observer.edge``, and tell
        it of every progress batch sent and received.  The replacements are swapped in here,
        so an unobserved scope pays nothing (timely registers loggers the same way: by
        installing them, not by testing for them).  Observe a scope at most once."""
        for index, child in enumerate(self.children):
            if child is None:
                continue
            address = self.path + (index,)
            self._schedulers[index] = observer.scheduler(address, child, child.schedule)
            if isinstance(child, Subgraph):
                child.observe(observer)
        for index, ((source, target, _pact), tap) in enumerate(
            zip(self._described_edges, self._edge_taps)
        ):

            def wrap(
                push: Any, index: int = index, source: Any = source, target: Any = target
            ) -> Any:
                return observer.edge(self.path, index, source, target, push)

            tap(wrap)
        path = self.path
        send_progress, receive_progress = self._send_progress, self._receive_progress
        local, progcaster = self._local, self.progcaster

        def observed_send() -> None:
            if local:
                observer.progress_sent(path, len(local))
            send_progress()

        def observed_receive() -> None:
            for batch in progcaster.inbox:
                observer.progress_received(path, len(batch))
            receive_progress()

        # Instance attributes shadow the methods: ``schedule`` now calls these.
        self._send_progress = observed_send  # type: ignore[method-assign]
        self._receive_progress = observed_receive  # type: ignore[method-assign]

    # ----------------------------------------------------------------------------------------
    # Introspection.

    @staticmethod
    def scheduling(frame: FrameType) -> tuple[str, tuple[int, ...]] | None:
        """If ``frame`` is a subgraph scheduling one of its children: that child's name and
        address.  For describing, from another thread, what a worker is busy with."""
        if frame.f_code is not Subgraph._run_children.__code__:
            return None
        local = frame.f_locals
        child, scope, index = local.get("child"), local.get("self"), local.get("index")
        if child is None or scope is None or index is None:
            return None
        return getattr(child, "name", "?"), scope.path + (index,)

    def edge_targets(self) -> list[list[list[int]]]:
        """``[node][output]``: the sorted dense target locations each output feeds (the
        graph's shape, for checking that every worker built the same graph)."""
        return [[sorted(tl for tl, _w in o) for o in node] for node in self._edge_targets]

    def held_capabilities(self) -> list[tuple[Any, Any, int]]:
        """``(Source, time, count)`` of the capabilities this worker's own operators hold in
        this scope (not in nested scopes), where :meth:`tracker.positive_pointstamps` sums all
        workers."""
        location = self.tracker.location
        return [(location(loc), t, c) for (loc, t), c in self._held if c > 0]

    def edges(self) -> list[tuple[tuple[int, int], tuple[int, int], str]]:
        """Every edge as built: ``((node, output), (node, input), channel name)``; node 0 is
        this scope's boundary (its inputs as sources, its outputs as targets)."""
        return list(self._described_edges)

    def nested_scopes(self) -> dict[int, Subgraph]:
        """The nested scopes by child index, including those that have already retired."""
        return dict(self._nested)

    def statistics(self) -> dict[str, Any]:
        """What this scope is doing: live children, pending activations, held pointstamps."""
        held = [
            (self.tracker.node_names[loc.node], str(loc), t, c)
            for loc, t, c in self.tracker.positive_pointstamps()
            if c
        ]
        return {
            "name": self.name,
            "path": self.path,
            "live_children": self._live,
            "active_children": sorted(self._active_set),
            "invocations": self.invocations,
            "pointstamps": held,
        }


class SubgraphObserver(Protocol):
    """What :meth:`Subgraph.observe` reports to (implemented by :mod:`pytimely.eventlog`)."""

    def scheduler(
        self, address: tuple[int, ...], child: Any, schedule: Callable[[], bool]
    ) -> Callable[[], bool]:
        """The function to call instead of ``schedule`` (child ``child`` at ``address``)."""
        ...

    def edge(
        self, scope: tuple[int, ...], index: int, source: EdgeEnd, target: EdgeEnd, push: BatchPush
    ) -> BatchPush:
        """The function to push edge ``index``'s batches into instead of ``push``."""
        ...

    def progress_sent(self, address: tuple[int, ...], updates: int) -> None:
        """The scope at ``address`` sends a batch of ``updates`` pointstamp changes."""
        ...

    def progress_received(self, address: tuple[int, ...], updates: int) -> None:
        """The scope at ``address`` takes a batch of ``updates`` changes from its inbox."""
        ...


def _count_past_inline(
    edge_targets: list[list[list[tuple[int, int]]]],
    children: list[Any],
    target_loc: list[list[int]],
) -> None:
    """Count records sent to a child that forwards inline (:meth:`Operate.forwards_inline`)
    at the targets of its output instead, transitively along chains of such children, with
    the weights multiplied: ``edge_targets[node][port]`` lists ``(target location, weight)``
    and is rewritten in place.  A record handed to such a child is at its consumers when the
    call that delivered it returns, so the pointstamp the sender's count stands for is there.

    >>> class Child:  # child 1 forwards inline to child 2's input (location 1)
    ...     def __init__(self, inline): self.inline = inline
    ...     def forwards_inline(self): return self.inline
    >>> targets = [[[(0, 1)]], [[(1, 1)]], [[]]]  # scope input -> 1 -> 2
    >>> _count_past_inline(targets, [None, Child(True), Child(False)], [[], [0], [1]])
    >>> targets[0], targets[1]
    ([[(1, 1)]], [[(1, 1)]])
    """
    inline = {
        target_loc[i][0]: i
        for i, child in enumerate(children)
        if i and child is not None and child.forwards_inline()
    }
    if not inline:
        return
    expanded: dict[int, list[tuple[int, int]]] = {}

    def past(node: int) -> list[tuple[int, int]]:
        """Where records sent to inline child ``node`` end up (a chain is acyclic: a cycle
        passes through a feedback operator, which does not forward inline)."""
        done = expanded.get(node)
        if done is None:
            ports = edge_targets[node]  # none: a sink that drops what it is handed (a probe)
            done = expanded[node] = resolve(ports[0]) if ports else []
        return done

    def resolve(targets: list[tuple[int, int]]) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for tl, w in targets:
            node = inline.get(tl)
            if node is None:
                out.append((tl, w))
            else:
                out.extend((tl2, w * w2) for tl2, w2 in past(node))
        return out

    rewritten = [[resolve(targets) for targets in ports] for ports in edge_targets]
    for ports, new in zip(edge_targets, rewritten):
        for targets, resolved in zip(ports, new):
            targets[:] = resolved


def _drains() -> tuple[Callable[..., None], Callable[..., None]]:
    """How a child's counts move into the scope's batch after each invocation:
    ``ChangeBatch.drain_at_into`` and ``drain_located_into``, compiled when the extension has
    them (looked up per pass, so that switching ``_native.speedups`` takes effect)."""
    speedups = _native.speedups
    drain_at = getattr(speedups, "drain_at_into", None)
    drain_located = getattr(speedups, "drain_located_into", None)
    if drain_at is None or drain_located is None:
        return ChangeBatch.drain_at_into, ChangeBatch.drain_located_into
    return drain_at, drain_located


def _retired() -> bool:
    """The scheduler of a child index that holds no child."""
    return False


def _ignore(index: int) -> None:
    """The parent activator of a subgraph not attached to a parent yet."""
