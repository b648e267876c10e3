"""Iteration: fixed points of collection transformations, maintained incrementally.

Inside an iterative scope times are ``Product(outer, round)``.  A :class:`Variable` is a
collection defined by a feedback edge: its value in round ``i + 1`` is whatever was ``set``
as its definition in round ``i``.  Built from a *source* collection it starts as the source
in round 0; its updates are then

    variable = source + (definition - source), delayed by one round,

so the variable at round ``i + 1`` is the definition at round ``i``.  Only the *changes*
circulate: once the definition stops changing from one round to the next (a ``distinct`` or
other ``reduce`` inside makes it settle), nothing more goes around the loop, the round's
frontier closes and the scope's output -- the definition summed over every round, that is
its value at the fixed point -- is final for that outer time.  When the outer inputs change
later, only the differences they cause flow around again: the fixed point is updated, not
recomputed.

:func:`iterate` is the usual shape: one variable from the collection, ``logic`` applied, the
result out.  Several variables in one scope give mutually recursive definitions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..order import Product
from .collection import Collection

if TYPE_CHECKING:
    from ..dataflow.scope import Scope

__all__ = ["Variable", "iterate"]


def _next_round(batch: list[tuple[Any, Any, int]]) -> list[tuple[Any, Any, int]]:
    """The batch one round later.  A batch's records mostly share one time, and then share one
    object for the next (fewer objects to build, and fewer for every later reader to visit).

    >>> _next_round([("a", Product(0, 1), 1), ("b", Product(0, 1), -1)])
    [('a', (0, 2), 1), ('b', (0, 2), -1)]
    """
    out = []
    append = out.append
    last = after = None
    for d, t, r in batch:
        if t != last:
            last, after = t, Product(t[0], t[1] + 1)
        append((d, after, r))
    return out


class Variable:
    """A collection of an iterative scope defined later (possibly in terms of itself).

    ``Variable(scope, source)`` starts as ``source`` (a collection of ``scope``) in round 0;
    ``variable.collection`` is the collection to use; ``variable.set(definition)`` closes the
    loop (exactly once).  Without a source the variable starts empty.

    >>> import pytimely as pt
    >>> import pytimely.differential as dd
    >>> def build(scope):
    ...     session, edges = dd.new_input(scope)
    ...     def loop(inner):
    ...         e = edges.enter(inner)
    ...         # odd / even path lengths from node 0, defined in terms of each other
    ...         odd = dd.Variable(inner, e.filter(lambda x: x[0] == 0).map(lambda x: x[1]))
    ...         even = dd.Variable(inner)
    ...         step = lambda nodes: nodes.map(lambda n: (n, ())).join_map(e, lambda k, _u, v: v)
    ...         even.set(step(odd.collection).distinct())
    ...         odd.set(step(even.collection).concat(odd.collection).distinct())
    ...         return odd.collection.leave().capture()
    ...     captured = scope.iterative(loop)
    ...     for edge in [(0, 1), (1, 2), (2, 3)]:
    ...         session.insert(edge)
    ...     session.close()
    ...     return captured
    >>> pt.example(build).as_of(0)
    [(1, 1), (3, 1)]
    """

    def __init__(self, scope: Scope, source: Collection | None = None) -> None:
        self.scope = scope
        self._handle, loop = scope.feedback(1)
        fed = Collection(loop)
        self._source = source
        self.collection = fed if source is None else source.concat(fed)
        self._set = False

    def set(self, definition: Collection) -> Collection:
        """Define the variable: its next round is ``definition``'s this round.  Returns
        ``definition``.

        >>> import pytimely.differential as dd
        >>> def count_to_five(c):
        ...     def loop(inner):
        ...         v = dd.Variable(inner, c.enter(inner))
        ...         nxt = v.collection.map(lambda n: min(n + 1, 5)).concat(v.collection)
        ...         return v.set(nxt.distinct()).leave()
        ...     return c.scope.iterative(loop)
        >>> dd.example([0], count_to_five)
        [(0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1)]
        """
        if self._set:
            raise ValueError("Variable.set called twice")
        self._set = True
        delta = definition if self._source is None else definition.concat(self._source.negate())
        delta.stream.map_batch(_next_round, name="NextRound").connect_loop(self._handle)
        return definition


def iterate(collection: Collection, logic: Callable[[Collection], Collection]) -> Collection:
    """The fixed point of ``logic`` starting from ``collection``: in an iterative scope,
    ``x`` starts as ``collection`` and becomes ``logic(x)`` until it stops changing.  Other
    collections are brought in with ``other.enter(x.scope)``.

    >>> import pytimely.differential as dd
    >>> def reach(edges):
    ...     roots = edges.filter(lambda e: e[0] == 1).map(lambda e: e[0]).distinct()
    ...     def step(nodes):
    ...         e = edges.enter(nodes.scope)
    ...         nxt = nodes.map(lambda n: (n, ())).join_map(e, lambda k, _u, v: v)
    ...         return nxt.concat(nodes).distinct()
    ...     return iterate(roots, step)
    >>> dd.example([(1, 2), (2, 3), (3, 1), (4, 5)], reach)
    [(1, 1), (2, 1), (3, 1)]
    """

    def body(inner: Scope) -> Collection:
        variable = Variable(inner, collection.enter(inner))
        return variable.set(logic(variable.collection)).leave()

    return collection.scope.iterative(body)
