"""The capture event model, re-exported for the storage layer.

The model itself (:class:`Event`, :class:`Progress`, :class:`Messages`, the writer and reader
protocols, :func:`extract`) lives in :mod:`pytimely.dataflow.operators.event`, beside the
capture and replay operators that produce and consume it, as timely dataflow keeps it in
``dataflow/operators/core/capture/event.rs``.  This module keeps ``pytimely.capture.event``
imports working.
"""

from ..dataflow.operators import event as _model
from ..dataflow.operators.event import *  # noqa: F403  (re-exported as they are)

__all__: list[str] = []
__all__ += _model.__all__
