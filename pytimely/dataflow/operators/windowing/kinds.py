"""What a window computes: count, fold or collect (one class, three kinds)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from itertools import repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from .checks import user_error

if TYPE_CHECKING:
    pass

_MISSING = object()
_first = itemgetter(0)


# -- the aggregation kinds ------------------------------------------------------------------------


class Kind:
    """How one (key, window) aggregate is built: ``count``, ``fold`` or ``collect``."""

    __slots__ = ("name", "init", "fold")

    def __init__(self, name: str, init: Any = None, fold: Any = None) -> None:
        self.name = name
        self.init = init
        self.fold = fold

    def new_state(self) -> dict:
        """An empty ``key -> aggregate`` dict for one window."""
        return Counter() if self.name == "count" else {}

    def add(self, op: str, state: dict, keys: Iterable, values: Any, times: Any) -> None:
        """Add records (parallel iterables of keys and values -- ``values`` is not read for
        counts; ``times`` their event times, an iterable or one int for all) to a window's
        ``key -> aggregate`` dict."""
        name = self.name
        if name == "count":
            state.update(keys)  # Counter: C-level counting
        elif name == "collect":
            for k, v, x in zip(keys, values, repeat(times) if type(times) is int else times):
                lst = state.get(k)
                if lst is None:
                    state[k] = [(x, v)]
                else:
                    lst.append((x, v))
        else:
            init, fold, get = self.init, self.fold, state.get
            k = v = None
            try:
                for k, v in zip(keys, values):
                    acc = get(k, _MISSING)
                    if acc is _MISSING:
                        acc = init()
                    state[k] = fold(acc, v)
            except Exception as exc:
                raise user_error(op, "fold", fold, (k, v), exc) from exc

    def result(self, aggregate: Any) -> Any:
        """The emitted result of a finished aggregate."""
        if self.name == "collect":
            aggregate.sort(key=_first)  # stable: ties keep arrival order
            return [v for _x, v in aggregate]
        return aggregate
