"""Snapshots of the stateful operators' state: ``(key, state)`` records out, and back in.

The protocol, between a *registry* (one per worker and dataflow) and the library's stateful
operators (windows, ``stateful_map``, ``keyed_process``, ``join``):

* A dataflow built inside ``with registry.building():`` has every stateful operator *attach*
  itself when it is constructed: it names itself (:func:`operator_id`: its name and address,
  the same on every worker and in every run of the same build function) and gives a function
  returning its per-key state as ``(key, state)`` pairs.  In return it gets the pairs to start
  from (restored state; empty for a fresh start), which it installs before its first
  invocation -- minting from its initial capability the tokens its restored state needs
  (pending windows, timers), so no capability is ever part of a snapshot.
* Outside ``building()`` (the normal case) operators attach nothing: their logic is the same
  closure either way, the hot paths never look at a registry.
* :meth:`StateRegistry.snapshot` reads every attached operator's state *as it is*, as
  ``(operator, key, blob)`` records (``blob``: the key's state pickled).  It is consistent when
  the caller takes it at a completed epoch: every operator's input has passed all times
  ``< e`` and nothing at ``e`` or later has been sent, so the state is exactly "all input before
  ``e`` applied" -- the condition of a consistent cut in "Distributed Snapshots: Determining
  Global States of Distributed Systems" (Chandy and Lamport, 1985), reached here by draining
  rather than by markers.
* State is keyed, and the keyed operators route records with
  :func:`pytimely.dataflow.exchange.routing.route`, so state restored onto ``peers`` workers is
  re-partitioned by giving worker ``i`` the records whose ``route(key, peers) == i``
  (:func:`partition`).
"""

from __future__ import annotations

import contextlib
import contextvars
import pickle
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import TimelyError
from .exchange.routing import route

if TYPE_CHECKING:
    from .operator import OperatorInfo

__all__ = ["StateRegistry", "attach", "operator_id", "partition"]

#: A state source: the operator's live state as ``(key, state)`` pairs.
StateSource = Callable[[], Iterable[tuple[Any, Any]]]

_BUILDING: contextvars.ContextVar[StateRegistry | None] = contextvars.ContextVar(
    "pytimely_state_registry", default=None
)


def operator_id(info: OperatorInfo, name: str | None = None) -> str:
    """``"name@address"``: what identifies an operator's state across workers and runs.

    ``name`` replaces the operator's displayed name when that name would not be stable across
    runs: ``StatefulMap(step @ job.py:12)`` names the user's function and its line, which
    moves when the file is edited, so such operators key their state by their kind.

    >>> class Info: name, address = "WindowCount", (0, 3)
    >>> operator_id(Info()), operator_id(Info(), "Totals")
    ('WindowCount@0.3', 'Totals@0.3')
    """
    return f"{name if name is not None else info.name}@{'.'.join(map(str, info.address))}"


def attach(
    info: OperatorInfo, source: StateSource, name: str | None = None
) -> list[tuple[Any, Any]] | None:
    """For an operator's constructor: ``None`` when no registry is building (snapshots are
    off: do nothing more), else attach ``source`` and return the ``(key, state)`` pairs to
    restore (possibly none).  ``name``: the stable name of :func:`operator_id`.

    >>> class Info: name, address = "Totals", (0, 2)
    >>> attach(Info(), list) is None  # no registry is building
    True
    >>> with StateRegistry({"Totals@0.2": [("ann", pickle.dumps(7))]}).building():
    ...     attach(Info(), list)
    [('ann', 7)]
    """
    registry = _BUILDING.get()
    if registry is None:
        return None
    return registry.attach(operator_id(info, name), source)


def partition(
    records: Iterable[tuple[str, Any, bytes]], index: int, peers: int
) -> dict[str, list[tuple[Any, bytes]]]:
    """The ``(operator, key, blob)`` records worker ``index`` of ``peers`` owns, by operator:
    those whose key routes to it (the rule every Exchange uses).

    >>> partition([("Op@0", 1, b"a"), ("Op@0", 2, b"b"), ("Op@0", 3, b"c")], 1, 2)
    {'Op@0': [(1, b'a'), (3, b'c')]}
    """
    owned: dict[str, list[tuple[Any, bytes]]] = {}
    for operator, key, blob in records:
        if route(key, peers) == index:
            owned.setdefault(operator, []).append((key, blob))
    return owned


class StateRegistry:
    """The stateful operators of one dataflow on one worker (module docstring).

    ``restore``: operator id -> ``(key, blob)`` records to seed that operator with.  Every
    restored operator must attach during :meth:`building` (see :meth:`unclaimed`): state for
    an operator the build function no longer makes is an error, not silently dropped.

    Running totals, snapshotted once epoch 0 is complete, then restored into a new dataflow
    that carries on from them:

    >>> import pytimely as pt
    >>> def build(scope):
    ...     inp, amounts = scope.new_input()
    ...     totals = amounts.stateful_map(int, lambda n, v: (n + v, n + v), name="Totals")
    ...     return inp, totals.capture(), totals.probe()
    >>> before = StateRegistry()
    >>> worker = pt.Worker()
    >>> with before.building():
    ...     inp, _out, probe = worker.dataflow(build)
    >>> inp.send_batch([("ann", 3), ("bob", 1), ("ann", 4)])
    >>> inp.advance_to(1)
    >>> worker.step_while(lambda: probe.less_than(1))
    >>> records = before.snapshot()
    >>> [(op, key, pickle.loads(blob)) for op, key, blob in records]
    [('Totals@0.2', 'ann', 7), ('Totals@0.2', 'bob', 1)]
    >>> after = StateRegistry(partition(records, 0, 1))
    >>> worker = pt.Worker()
    >>> with after.building():
    ...     inp, out, _probe = worker.dataflow(build)
    >>> inp.advance_to(1)
    >>> inp.send(("ann", 10))
    >>> inp.close()
    >>> worker.run()
    >>> out.extract()
    [(1, [('ann', 17)])]
    """

    def __init__(self, restore: Mapping[str, list[tuple[Any, bytes]]] | None = None) -> None:
        self._restore = dict(restore or {})
        self._sources: dict[str, StateSource] = {}

    @contextlib.contextmanager
    def building(self) -> Iterator[StateRegistry]:
        """Operators constructed inside this block attach to this registry."""
        token = _BUILDING.set(self)
        try:
            yield self
        finally:
            _BUILDING.reset(token)

    def attach(self, operator: str, source: StateSource) -> list[tuple[Any, Any]]:
        """Register ``operator``'s state source; returns its restored ``(key, state)`` pairs."""
        if operator in self._sources:
            raise TimelyError(f"two stateful operators are both named {operator!r}")
        self._sources[operator] = source
        return [(key, pickle.loads(blob)) for key, blob in self._restore.pop(operator, ())]

    @property
    def operators(self) -> list[str]:
        """The attached operators' ids, in construction order."""
        return list(self._sources)

    def unclaimed(self) -> list[str]:
        """Operators with restored state that never attached (the build function changed)."""
        return sorted(self._restore)

    def snapshot(self) -> list[tuple[str, Any, bytes]]:
        """Every attached operator's state now, as ``(operator, key, blob)`` records."""
        records = []
        for operator, source in self._sources.items():
            try:
                for key, state in source():
                    records.append((operator, key, pickle.dumps(state, protocol=5)))
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                raise TimelyError(
                    f"cannot snapshot the state of operator {operator!r}: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
        return records
