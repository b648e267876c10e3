"""Columnar batches: numpy structured arrays and Arrow record batches as one batch type.

A columnar batch is a *single* message whose ``len()`` is its number of rows (progress
tracking counts rows, as for a list of records).  Operators that understand columns read them
with :func:`column` and keep rows with :func:`select`; ``Exchange(column=name)`` routes rows by
a key column with the one routing rule of :mod:`pytimely.communication.routing`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["column", "select"]


def column(batch: Any, name: str) -> Any:
    """Column ``name`` of a numpy structured array or an Arrow record batch, as numpy."""
    import numpy as np

    if isinstance(batch, np.ndarray):
        return batch[name]
    return batch.column(name).to_numpy()


def select(batch: Any, mask: Any) -> Any:
    """The rows of ``batch`` where ``mask`` is true, as a batch of the same type."""
    import numpy as np

    if isinstance(batch, np.ndarray):
        return batch[mask]
    return batch.filter(mask)
