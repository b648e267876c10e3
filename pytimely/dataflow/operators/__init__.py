"""The operator library: a module per family of operators (maps, aggregation, joins, keyed
state, windows, ...), and the token holders they share (:mod:`.tokens`).

``stream.map(f)`` is ``map.map(stream, f)``: the modules hold the implementations and their
documentation, and :class:`~pytimely.dataflow.stream.Stream` takes each operator as a method by
assignment (``map = _map.map``), so type checkers see one signature.  The modules import
``Stream`` only for annotations; they make their output streams with ``Scope.stream``.
"""

from __future__ import annotations

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
    "windowing",
]
