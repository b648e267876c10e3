"""The four windowing operators and the handles they return."""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from ....naming import describe_function
from ....progress.operate import FrontierInterest
from ....windows import Count, Session, Sliding
from ... import snapshot
from ...pacts import Exchange, Pact
from ..generic import OperatorBuilder
from ..keyed import InTimeOrder
from ..map import map_batch
from .checks import apply_user, check_lateness, check_time, check_windower
from .columnar import columnar_logic
from .count_windows import count_window_stream
from .event_sessions import EventTimeSessions, event_session_logic
from .fixed import FixedWindows, fixed_logic
from .kinds import Kind
from .session_counts import SessionCounts
from .sessions import (
    Sessions,
    drained_first,
    read_event_times,
    session_count_logic,
    session_logic,
    split_keys,
)

if TYPE_CHECKING:
    from ....windows import Windower
    from ...capability import Capability
    from ...operator import OperatorInfo
    from ...stream import Stream

_first = itemgetter(0)


class Windowed:
    """What a windowing operator returns: ``output`` — ``(key, start, end, result)`` records,
    each at timestamp ``end + lateness`` — and ``late`` — the late records, unchanged, at
    their own timestamps.

    With ``lateness=5`` window ``[0, 10)`` takes records stamped up to 14 and answers at 15:

    >>> import pytimely as pt
    >>> def build(scope):
    ...     inp, clicks = scope.new_input()
    ...     counted = clicks.window_count(pt.Tumbling(10), event_time=lambda r: r[1], lateness=5)
    ...     out, late = counted.output.capture(), counted.late.capture()
    ...     inp.send(("ann", 3))
    ...     inp.advance_to(12)
    ...     inp.send(("ann", 8))  # on time: 12 < 10 + 5
    ...     inp.advance_to(15)
    ...     inp.send(("ann", 9))  # late
    ...     return out, late
    >>> out, late = pt.example(build)
    >>> out.extract(), late.extract()
    ([(15, [('ann', 0, 10, 2)])], [(15, [('ann', 9)])])
    """

    __slots__ = ("output", "late", "_state")

    def __init__(self, output: Stream, late: Stream, state: Any) -> None:
        self.output = output
        self.late = late
        self._state = state

    def state_size(self) -> int:
        """Live (key, window) aggregates plus pending emission times held by this worker's
        instance of the operator (``0`` when every window has been emitted).

        >>> import pytimely as pt
        >>> def build(scope):
        ...     inp, clicks = scope.new_input()
        ...     return inp, clicks.window_count(pt.Tumbling(10))
        >>> worker = pt.Worker()
        >>> inp, counted = worker.dataflow(build)
        >>> inp.send_batch([("ann", "home"), ("bob", "home"), ("ann", "cart")])
        >>> _ = worker.step()
        >>> counted.state_size()  # two counts in [0, 10), one emission time
        3
        >>> inp.close()
        >>> worker.run()
        >>> counted.state_size()
        0
        """
        return self._state.size()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} output={self.output!r} late={self.late!r}>"


class WindowJoined(Windowed):
    """What ``window_join`` returns: ``output`` — ``(key, start, end, left, right)`` — ``late``
    (late records of ``stream``) and ``other_late`` (late records of ``other``).

    >>> import pytimely as pt
    >>> def build(scope):
    ...     views_in, views = scope.new_input()
    ...     buys_in, buys = scope.new_input()
    ...     at = lambda r: r[1]
    ...     joined = views.window_join(buys, pt.Tumbling(10), event_time=at, other_event_time=at)
    ...     out, late = joined.output.capture(), joined.other_late.capture()
    ...     views_in.send(("ann", 2))
    ...     buys_in.send(("ann", 4))
    ...     views_in.advance_to(10)
    ...     buys_in.advance_to(10)
    ...     buys_in.send(("ann", 7))  # [0, 10) closed at 10: late
    ...     return out, late
    >>> out, late = pt.example(build)
    >>> out.extract(), late.extract()
    ([(10, [('ann', 0, 10, 2, 4)])], [(10, [('ann', 7)])])
    """

    __slots__ = ("other_late",)

    def __init__(self, output: Stream, late: Stream, other_late: Stream, state: Any) -> None:
        super().__init__(output, late, state)
        self.other_late = other_late


# -- building --------------------------------------------------------------------------------------


def _build(
    stream: Stream,
    op: str,
    windower: Windower,
    kind: Kind,
    key: Any,
    event_time: Any,
    lateness: int,
    name: str,
    value: Any = None,
) -> Windowed:
    check_windower(op, windower)
    lateness = check_lateness(op, lateness)
    if isinstance(windower, Count):
        return _count_windows(stream, op, windower, kind, key, event_time, lateness, name)
    state_source: Callable[[], list] | None = None  # for snapshots; else ``state.per_key``
    if isinstance(key, str):
        if not isinstance(windower, Sliding):
            raise TypeError(
                f"{op}: the columnar path (key={key!r}) supports pt.Tumbling and "
                f"pt.Sliding, not {windower!r}"
            )
        if event_time is not None and not isinstance(event_time, str):
            raise TypeError(f"{op}: with a key column, event_time must be a column name too")
        if kind.name == "fold":
            if not isinstance(value, str) or not hasattr(kind.fold, "reduceat"):
                raise TypeError(
                    f"{op}: the columnar path needs value=<column name> and a numpy ufunc as "
                    f"fold (np.add, np.maximum, ...), got value={value!r}, fold={kind.fold!r}"
                )
        elif kind.name == "collect":
            raise TypeError(f"{op}: window_collect has no columnar path; use a key function")
        pact: Pact = Exchange(column=key)
        state: Any = FixedWindows()
        logic = columnar_logic(op, windower, kind, key, event_time, value, lateness, state)
    else:
        if key is not None and not callable(key):
            raise TypeError(f"{op}: key must be a function or None, got {key!r}")
        if event_time is not None and not callable(event_time):
            raise TypeError(f"{op}: event_time must be a function or None, got {event_time!r}")
        pact = Exchange(_first) if key is None else Exchange(key)
        if isinstance(windower, Session) and kind.name == "count" and event_time is not None:
            # Event times in the records, as fine as the source's clock: sessions in dicts,
            # a few dictionary operations per record (:mod:`.event_sessions`).
            state = EventTimeSessions(windower.gap, lateness)
            logic = event_session_logic(
                op,
                lambda batch: split_keys(op, key, batch, False)[0],
                lambda batch: read_event_times(op, event_time, batch),
                lateness,
                state,
                check_time,
            )
        elif isinstance(windower, Session) and kind.name == "count":
            state = SessionCounts(windower.gap, lateness)
            waiting = InTimeOrder()
            logic = session_count_logic(op, key, state, waiting)
            state_source = drained_first(op, name, waiting, state.per_key)
        elif isinstance(windower, Session):
            state = Sessions(windower.gap, lateness)
            logic = session_logic(op, windower, kind, key, event_time, lateness, state)
        else:
            state = FixedWindows()
            logic = fixed_logic(op, windower, kind, key, event_time, lateness, state)

    builder = OperatorBuilder(name, stream.scope)
    builder.new_input(stream, pact, interest=FrontierInterest.IF_CAPABILITY)
    builder.new_output()
    builder.new_output()

    def ctor(caps: list[Capability], info: OperatorInfo) -> Callable[..., None]:
        restored = snapshot.attach(info, state_source or state.per_key)
        if restored:
            if isinstance(state, (Sessions, SessionCounts, EventTimeSessions)):
                state.restore(caps[0], restored)
            else:
                state.restore(caps[0], restored, kind)
        for cap in caps:
            cap.drop()  # hold nothing until a window opens
        return logic

    output, late = builder.build(ctor)
    return Windowed(output, late, state)


def _count_windows(
    stream: Stream,
    op: str,
    windower: Count,
    kind: Kind,
    key: Any,
    event_time: Any,
    lateness: int,
    name: str,
) -> Windowed:
    """Count windows (:mod:`.count_windows`): they number each key's records in timestamp
    order, so neither event times nor lateness apply."""
    if event_time is not None or lateness:
        raise TypeError(
            f"{op}: pt.Count windows count each key's records in timestamp order; event_time "
            "and lateness do not apply (make the event time the timestamp: io.read("
            "event_time=...), or reclock the stream)"
        )
    if key is not None and not callable(key):
        raise TypeError(f"{op}: pt.Count windows take a key function or None, got {key!r}")
    output, late, state = count_window_stream(stream, op, windower, kind, key, name)
    return Windowed(output, late, state)


def window_fold(
    stream: Stream,
    windower: Windower,
    init: Callable[[], Any],
    fold: Callable[[Any, Any], Any],
    key: Any = None,
    event_time: Any = None,
    lateness: int = 0,
    value: str | None = None,
    name: str = "WindowFold",
) -> Windowed:
    """Per key and window, ``acc = fold(acc, value)`` from ``init()`` (called once per
    (key, window)); ``output`` is ``(key, start, end, acc)`` at timestamp ``end + lateness``.

    Tumbling and sliding windows fold records as they arrive (arrival order: use an
    order-insensitive fold — sum, min, max — for results independent of batching, or
    ``window_collect``); sessions fold at emission in event-time order (ties in arrival order).
    Columnar: ``key``/``event_time``/``value`` name columns and ``fold`` is a numpy ufunc.
    See the module documentation for lateness and the emission rule.

    >>> import pytimely as pt
    >>> def build(scope):
    ...     clicks = scope.to_stream([("ann", 3), ("bob", 1), ("ann", 4)])
    ...     return clicks.window_fold(pt.Tumbling(10), int, lambda a, v: a + v).output.capture()
    >>> pt.example(build).extract()
    [(10, [('ann', 0, 10, 7), ('bob', 0, 10, 1)])]
    """
    return _build(
        stream,
        "window_fold",
        windower,
        Kind("fold", init, fold),
        key,
        event_time,
        lateness,
        name,
        value,
    )


def window_count(
    stream: Stream,
    windower: Windower,
    key: Any = None,
    event_time: Any = None,
    lateness: int = 0,
    name: str = "WindowCount",
) -> Windowed:
    """Per key and window, the number of records: ``(key, start, end, count)`` at timestamp
    ``end + lateness``.  Columnar when ``key`` names a column (see the module documentation).

    >>> import pytimely as pt
    >>> def build(scope):
    ...     inp, clicks = scope.new_input()
    ...     counted = clicks.window_count(pt.Sliding(4, 2), event_time=lambda r: r[1])
    ...     out, late = counted.output.capture(), counted.late.capture()
    ...     inp.send_batch([("ann", 1), ("ann", 2)])  # at timestamp 0
    ...     inp.advance_to(5)
    ...     inp.send(("ann", 0))  # window [-2, 2) closed at 2: late
    ...     return out, late
    >>> out, late = pt.example(build)
    >>> out.extract()
    [(2, [('ann', -2, 2, 1)]), (4, [('ann', 0, 4, 2)]), (6, [('ann', 2, 6, 1)])]
    >>> late.extract()
    [(5, [('ann', 0)])]
    """
    return _build(stream, "window_count", windower, Kind("count"), key, event_time, lateness, name)


def window_collect(
    stream: Stream,
    windower: Windower,
    key: Any = None,
    event_time: Any = None,
    lateness: int = 0,
    name: str = "WindowCollect",
) -> Windowed:
    """Per key and window, the list of values sorted by event time (ties in arrival order):
    ``(key, start, end, values)`` at timestamp ``end + lateness``.

    >>> import pytimely as pt
    >>> def build(scope):
    ...     inp, clicks = scope.new_input()
    ...     sessions = clicks.window_collect(pt.Session(gap=5)).output.capture()
    ...     for t, page in [(1, "home"), (4, "cart"), (8, "pay"), (20, "home")]:
    ...         inp.advance_to(t)
    ...         inp.send(("ann", page))
    ...     return sessions
    >>> pt.example(build).extract()
    [(13, [('ann', 1, 13, ['home', 'cart', 'pay'])]), (25, [('ann', 20, 25, ['home'])])]
    """
    return _build(
        stream, "window_collect", windower, Kind("collect"), key, event_time, lateness, name
    )


def window_join(
    stream: Stream,
    other: Stream,
    windower: Windower,
    key: Any = None,
    other_key: Any = None,
    event_time: Any = None,
    other_event_time: Any = None,
    lateness: int = 0,
    name: str = "WindowJoin",
    how: str = "inner",
) -> WindowJoined:
    """Pairs of records, one from each stream, with equal keys in the same window:
    ``(key, start, end, left, right)`` at the window's close timestamp ``end + lateness``.

    ``other_key`` defaults to ``key``.  Event times: both ``None`` (timestamps are event
    times) or both functions — mixing is refused.  Sessions are formed over the records of
    both streams together.  Late records of ``stream`` go to ``late``, those of ``other`` to
    ``other_late``.  Built on ``window_collect`` of the two streams tagged by side; pairs of a
    window come in event-time order of the left, then of the right record.  ``how="left"``,
    ``"right"`` or ``"outer"`` also emits, when a window closes, ``(key, start, end, left,
    None)`` for the left records of a window with no right record of their key (and
    ``(key, start, end, None, right)`` the other way round).

    >>> import pytimely as pt
    >>> def build(scope):
    ...     views = scope.to_stream([("ann", "home"), ("bob", "cart")])
    ...     buys = scope.to_stream([("ann", "book")])
    ...     return views.window_join(buys, pt.Tumbling(10)).output.capture()
    >>> pt.example(build).extract()
    [(10, [('ann', 0, 10, 'home', 'book')])]
    """
    op = "window_join"
    if how not in ("inner", "left", "right", "outer"):
        raise ValueError(f"{op}: how must be 'inner', 'left', 'right' or 'outer', got {how!r}")
    keep_left, keep_right = how in ("left", "outer"), how in ("right", "outer")
    check_windower(op, windower, counts=False)
    if (event_time is None) != (other_event_time is None):
        raise ValueError(
            f"{op}: give both event_time and other_event_time, or neither (timestamps as "
            "event times on both sides)"
        )
    other_key = key if other_key is None else other_key
    left = _tagged(stream, 0, key, op, name)
    right = _tagged(other, 1, other_key, op, name)
    joined_time = None
    if event_time is not None:
        sides = (event_time, other_event_time)

        def joined_time(tagged: Any) -> Any:
            side, record = tagged[1]
            return sides[side](record)

        joined_time.__qualname__ = (
            f"event_time of side {{0: {describe_function(event_time)}, "
            f"1: {describe_function(other_event_time)}}}"
        )
    both = left.concat(right)
    collected = window_collect(both, windower, event_time=joined_time, lateness=lateness, name=name)
    key_given, other_key_given = key is not None, other_key is not None

    def pairs(result: Any) -> list:
        k, start, end, tagged = result
        lefts = [r if key_given else r[1] for side, r in tagged if side == 0]
        rights = [r if other_key_given else r[1] for side, r in tagged if side == 1]
        if not rights:
            return [(k, start, end, a, None) for a in lefts] if keep_left else []
        if not lefts:
            return [(k, start, end, None, b) for b in rights] if keep_right else []
        return [(k, start, end, a, b) for a in lefts for b in rights]

    output = collected.output.flat_map(pairs)
    late_left = collected.late.filter(lambda kv: kv[1][0] == 0).map(lambda kv: kv[1][1])
    late_right = collected.late.filter(lambda kv: kv[1][0] == 1).map(lambda kv: kv[1][1])
    return WindowJoined(output, late_left, late_right, collected._state)


def _tagged(stream: Stream, side: int, key: Any, op: str, name: str) -> Stream:
    """``(key, (side, record))`` for every record (``key=None``: records are pairs)."""

    def tag_batch(batch: list) -> list:
        keys = list(map(_first, batch)) if key is None else apply_user(op, "key", key, batch)
        return [(k, (side, r)) for k, r in zip(keys, batch)]

    return map_batch(stream, tag_batch, name=f"{name}Tag{side}")
