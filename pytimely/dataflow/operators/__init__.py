"""The operator library, one small module per family, attached to :class:`Stream` as methods.

``stream.map(f)`` is ``map.map(stream, f)``; the modules hold the implementations and their
documentation.  Attaching them here keeps ``Stream`` itself a small class while giving users
the fluent API of DESIGN §3.
"""

from __future__ import annotations

from typing import Any

from ..stream import Stream
from . import (
    aggregation,
    capture,
    feedback,
    generic,
    join,
    keyed,
    map,
    notify,
    probe,
    routing,
    watermarks,
    window,
    windowing,
)

__all__ = [
    "aggregation",
    "capture",
    "feedback",
    "generic",
    "join",
    "keyed",
    "map",
    "notify",
    "probe",
    "routing",
    "watermarks",
    "window",
    "windowing",
]


def _connect_loop(self: Stream, handle: feedback.LoopHandle) -> None:
    """Feed this stream into a loop (see :meth:`Scope.feedback`)."""
    handle.connect(self)


def _concatenate(self: Stream, others: Any, name: str = "Concatenate") -> Stream:
    """This stream and all ``others`` merged."""
    return routing.concatenate(self.scope, [self, *others], name)


_METHODS = {
    "map": map.map,
    "map_batch": map.map_batch,
    "flat_map": map.flat_map,
    "filter": map.filter,
    "inspect": map.inspect,
    "inspect_time": map.inspect_time,
    "inspect_batch": map.inspect_batch,
    "for_each": map.for_each,
    "exchange": routing.exchange,
    "broadcast": routing.broadcast,
    "concat": routing.concat,
    "concatenate": _concatenate,
    "partition": routing.partition,
    "branch": routing.branch,
    "ok_err": routing.ok_err,
    "accumulate": aggregation.accumulate,
    "count": aggregation.count,
    "aggregate": aggregation.aggregate,
    "delay": aggregation.delay,
    "reclock": aggregation.reclock,
    "probe": probe.probe,
    "probe_with": probe.probe_with,
    "capture": capture.capture,
    "capture_into": capture.capture_into,
    "connect_loop": _connect_loop,
    "unary": generic.unary,
    "unary_frontier": generic.unary_frontier,
    "binary": generic.binary,
    "binary_frontier": generic.binary_frontier,
    "sink": generic.sink,
    "unary_notify": notify.unary_notify,
    "binary_notify": notify.binary_notify,
    "tumbling_average": window.tumbling_average,
    "assign_watermarks": watermarks.assign_watermarks,
    "stateful_map": keyed.stateful_map,
    "keyed_process": keyed.keyed_process,
    "join": join.join,
    "window_fold": windowing.window_fold,
    "window_count": windowing.window_count,
    "window_collect": windowing.window_collect,
    "window_join": windowing.window_join,
}

for _name, _fn in _METHODS.items():
    setattr(Stream, _name, _fn)
