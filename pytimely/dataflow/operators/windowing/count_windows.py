"""Count windows (:class:`pytimely.Count`): per key, windows of ``size`` records, one every
``every`` records, on ``stateful_map``.

A key's state is ``(n, open)``: how many of its records came so far, and the windows still
filling, ``[start, aggregate]`` in start order.  Record number ``n`` opens a window if ``n`` is a
multiple of ``every``, is added to every open window, and closes the oldest one when
``n == start + size - 1`` (windows start ``every`` apart, so only the oldest can end there).
``stateful_map`` applies each key's records in timestamp order (records of one timestamp in
arrival order) and emits at the record's timestamp, so a window leaves at the timestamp of its
last record, and the state is snapshot and restored (per key, on any number of workers) like
``stateful_map``'s.  Memory: at most ``ceil(size / every)`` open aggregates per live key.

>>> import pytimely as pt
>>> def build(scope):
...     clicks = scope.to_stream([("ann", "a"), ("bob", "b"), ("ann", "c"), ("ann", "d")])
...     return clicks.window_collect(pt.Count(2)).output.capture()
>>> pt.example(build).extract()
[(0, [('ann', 0, 2, ['a', 'c'])])]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ....windows import Count
from ..keyed import StateStats, stateful_map
from ..map import map_batch
from .checks import user_error
from .kinds import Kind

if TYPE_CHECKING:
    from ...stream import Stream


class CountState:
    """What :meth:`~.api.Windowed.state_size` reads: the keys with state on this worker."""

    __slots__ = ("stats",)

    def __init__(self) -> None:
        self.stats = StateStats()

    def size(self) -> int:
        """Keys with state (a count so far, windows filling) on this worker."""
        return self.stats.keys


def count_window_stream(
    stream: Stream, op: str, windower: Count, kind: Kind, key: Any, name: str
) -> tuple[Stream, Stream, CountState]:
    """``(output, late, state)`` of a count window operator: ``output`` carries ``(key, start,
    end, result)``; ``late`` is empty (count windows follow the stream's order: nothing is
    late)."""
    size, every = windower.size, windower.every
    if kind.name == "count":
        new: Callable[[], Any] = int

        def add(acc: Any, _value: Any) -> Any:
            return acc + 1

        finish: Callable[[Any], Any] = int
    elif kind.name == "collect":
        new = list

        def add(acc: Any, value: Any) -> Any:
            acc.append(value)
            return acc

        finish = list
    else:
        new, fold = kind.init, kind.fold

        def add(acc: Any, value: Any) -> Any:
            try:
                return fold(acc, value)
            except Exception as exc:
                raise user_error(op, "fold", fold, value, exc) from exc

        def finish(acc: Any) -> Any:
            return acc

    def step(state: tuple[int, list], value: Any) -> tuple[tuple[int, list], list]:
        n, filling = state
        if n % every == 0:
            filling.append([n, new()])
        for window in filling:
            window[1] = add(window[1], value)
        if filling[0][0] + size == n + 1:
            start, acc = filling.pop(0)
            return (n + 1, filling), [(start, start + size, finish(acc))]
        return (n + 1, filling), []

    step.__qualname__ = f"{op}({windower!r})"
    state = CountState()
    per_key = stateful_map(stream, _empty, step, key=key, name=name, stats=state.stats)

    def windows(batch: list) -> list:
        return [(k, s, e, r) for k, done in batch if done for s, e, r in done]

    output = map_batch(per_key, windows, name=f"{name}Windows")
    late = map_batch(stream, _nothing, name=f"{name}Late")
    return output, late, state


def _empty() -> tuple[int, list]:
    return (0, [])


def _nothing(_batch: list) -> list:
    return []
