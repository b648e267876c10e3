"""Columnar batches: numpy structured arrays and Arrow record batches as one batch type.

A columnar batch is a *single* message whose ``len()`` is its number of rows (progress
tracking counts rows, as for a list of records).  Operators that understand columns read them
with :func:`column` and keep rows with :func:`select`; :class:`ColumnExchange` routes rows by a
key column with the rule of :class:`~pytimely.Exchange`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .channels import Pact

__all__ = ["column", "select", "ColumnExchange"]


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


class ColumnExchange(Pact):
    """Route the rows of numpy structured arrays or Arrow record batches by the ``column``
    (the same rule as :class:`~pytimely.Exchange`: an int key to worker ``key % peers``, any
    other through ``stable_hash``), one vectorized pass per batch."""

    def __init__(self, column: str) -> None:
        self.column = column

    def connect(self, worker: Any, push: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
        import numpy as np

        from ..communication.hashing import stable_hash

        channel = worker._allocate_channel()
        peers = worker.peers
        if peers == 1:
            return push
        worker._register_data_channel(channel, push)
        me, send, key_column = worker.index, worker.allocator.send, self.column

        def columnar_push(t: Any, batch: Any) -> None:
            keys = column(batch, key_column)
            if keys.dtype.kind in "iu":
                dest = keys % peers
            else:
                uniq, inverse = np.unique(keys, return_inverse=True)
                dest = np.array([stable_hash(k) % peers for k in uniq.tolist()])[inverse]
            for w in range(peers):
                part = select(batch, dest == w)
                if len(part):
                    if w == me:
                        push(t, part)
                    else:
                        send(channel, w, (t, part))

        return columnar_push

    def __repr__(self) -> str:
        return f"ColumnExchange({self.column!r})"
