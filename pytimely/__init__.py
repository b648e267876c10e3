"""pytimely: timely dataflow for Python.

Data carry logical timestamps; operators coordinate through timestamp tokens (capabilities) and
learn from progress tracking which times may still arrive at their inputs, as in Naiad ("Naiad:
a timely dataflow system", SOSP 2013) and the Rust timely-dataflow crate
(https://github.com/TimelyDataflow/timely-dataflow).  The user guide is ``docs/`` in the source
distribution, starting at ``docs/index.md``.

Importing this package imports only numpy (pyarrow when a feature needs it).  Spark support
(:mod:`pytimely.spark`) and plots need the extras ``pytimely[spark]`` and ``pytimely[plot]``
and say so when they are missing.

A short map of the package (``docs/internals.md`` has the full one, and what each room may
import): :mod:`pytimely.order` (timestamps), :mod:`pytimely.progress` (progress tracking; knows
nothing of dataflows), :mod:`pytimely.communication` (workers reaching each other),
:mod:`pytimely.dataflow` (scopes, streams, ports, pacts, the exchange and the operator library
in ``dataflow.operators``), :mod:`pytimely.worker` (the step loop), :mod:`pytimely.execute`
(running on many workers), :mod:`pytimely.capture` (capture and replay storage),
:mod:`pytimely.spark` and :mod:`pytimely.nexmark` (integrations).
"""

import logging as _logging

from . import dataflow as _dataflow
from . import errors

# The dataflow layer's names (Scope, Stream, the capabilities, pacts, builders and handles),
# re-exported as its __all__ lists them.
from .dataflow import *  # noqa: F403
from .dataflow.operators.keyed import KeyedContext, StateStats
from .execute import args, example, execute, execute_from_args
from .order import Product, ProductSummary
from .progress.operate import FrontierInterest
from .windows import Count, Session, Sliding, Tumbling
from .worker import StuckError, Worker

# The one place the version is written: pyproject.toml reads it from here.
__version__ = "0.1.0"

# Library convention: silent unless the application configures logging ("pytimely.*" loggers:
# mesh formed, dataflow built / completed, worker failure, stuck, slow steps).
_logging.getLogger(__name__).addHandler(_logging.NullHandler())


def serve_dashboard(
    worker: Worker, port: int = 8080, host: str = "127.0.0.1", interval: float = 0.2
) -> object:
    """Serve a live web dashboard of ``worker``; see :func:`pytimely.dashboard.serve_dashboard`
    (imported on first use: ``http.server`` is not needed otherwise)."""
    from .dashboard import serve_dashboard as serve

    return serve(worker, port=port, host=host, interval=interval)


def serve_metrics(
    worker: Worker, port: int = 9464, host: str = "127.0.0.1", interval: float = 1.0
) -> object:
    """Serve ``/metrics`` (Prometheus' text format) for ``worker``; see
    :func:`pytimely.metrics.serve_metrics` (imported on first use)."""
    from .metrics import serve_metrics as serve

    return serve(worker, port=port, host=host, interval=interval)


__all__ = [
    "args",
    "errors",
    "example",
    "execute",
    "execute_from_args",
    "Worker",
    "StuckError",
    "Product",
    "ProductSummary",
    "FrontierInterest",
    "KeyedContext",
    "StateStats",
    "Tumbling",
    "Sliding",
    "Session",
    "Count",
    "serve_dashboard",
    "serve_metrics",
]
__all__ += _dataflow.__all__  # Scope, Stream, ...: the dataflow layer's own list
