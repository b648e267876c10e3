"""The columnar path: numpy structured arrays and Arrow record batches aggregated with
array arithmetic.

A columnar batch is a *single* message whose ``len()`` is its number of rows (progress
tracking counts rows, as for a list of records).  The logic reads columns with :func:`column`
and keeps rows with :func:`select`; ``Exchange(column=name)`` routes rows by a key column with
the one routing rule of :mod:`pytimely.dataflow.exchange.routing`.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat
from typing import TYPE_CHECKING, Any

from ....windows import Sliding
from .checks import check_time
from .fixed import FixedWindows
from .kinds import Kind

if TYPE_CHECKING:
    from ...capability import Capability
    from ...ports import InputPort, OutputPort

_MISSING = object()


# -- the columnar path ---------------------------------------------------------------------------


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


def _group(keys: Any, values: Any, ufunc: Any) -> tuple[list, list]:
    """Distinct keys and, per key, the count (``ufunc is None``) or ``ufunc.reduce`` of its
    values, both as Python lists."""
    import numpy as np

    n = len(keys)
    if ufunc is None and keys.dtype.kind in "iu" and n:
        lo, hi = int(keys.min()), int(keys.max())
        if lo >= 0 and hi < 4 * n + 65536:  # dense small ids: O(n) counting
            counts = np.bincount(keys)
            present = np.flatnonzero(counts)
            return present.tolist(), counts[present].tolist()
    if ufunc is None:
        uniq, counts = np.unique(keys, return_counts=True)
        return uniq.tolist(), counts.tolist()
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    return sorted_keys[starts].tolist(), ufunc.reduceat(values[order], starts).tolist()


def columnar_logic(
    op: str,
    windower: Sliding,
    kind: Kind,
    key: str,
    event_time: Any,
    value: Any,
    lateness: int,
    state: FixedWindows,
) -> Callable:
    """The logic of ``window_count`` / ``window_fold`` over columnar batches, aggregating
    into ``state`` (the fixed windows' store) with array arithmetic."""
    import numpy as np

    width, step, offset = windower.width, windower.step, windower.offset
    n_windows = windower.max_windows()
    ufunc = kind.fold if kind.name == "fold" else None
    init = kind.init

    def merge(aggs: dict, keys: list, partials: list) -> None:
        get = aggs.get
        if ufunc is None:
            for k, c in zip(keys, partials):
                aggs[k] = get(k, 0) + c
        else:
            for k, p in zip(keys, partials):
                acc = get(k, _MISSING)
                aggs[k] = ufunc(init() if acc is _MISSING else acc, p)

    def emit(out: OutputPort, cap: Capability, emit_at: int, aggs: dict) -> None:
        end = emit_at - lateness
        start = end - width
        out.give_batch(
            cap, list(zip(aggs.keys(), repeat(start), repeat(end), aggs.values())), emit_at
        )

    def logic(inp: InputPort, out: OutputPort, late_out: OutputPort) -> None:
        for ref, batch in inp:
            t = ref.time
            check_time(op, t)
            keys = column(batch, key)
            values = column(batch, value) if ufunc is not None else None
            if event_time is None:
                xs = None
                last = t - (t - offset) % step
                for j in range(n_windows):
                    s = last - j * step
                    if s <= t - width:
                        break
                    aggs = state.entry(ref, s + width + lateness, kind)
                    merge(aggs, *_group(keys, values, ufunc))
                continue
            xs = column(batch, event_time)
            if xs.dtype.kind not in "iu":
                raise TypeError(
                    f"{op}: event times must be integers, column {event_time!r} has dtype "
                    f"{xs.dtype} (first row {batch[:1]!r})"
                )
            last = xs - (xs - offset) % step  # latest window start containing each row
            missed = np.zeros(len(xs), dtype=bool)
            for j in range(n_windows):
                starts = last - j * step
                member = starts > xs - width
                emit_ats = starts + (width + lateness)
                on_time = member & (emit_ats > t)
                missed |= member & ~on_time
                if not on_time.any():
                    continue
                if on_time.all():
                    sel_e, sel_k, sel_v = emit_ats, keys, values
                else:
                    sel_e, sel_k = emit_ats[on_time], keys[on_time]
                    sel_v = values[on_time] if values is not None else None
                lo, hi = int(sel_e.min()), int(sel_e.max())
                if lo == hi:  # the common case: one window per batch and offset
                    merge(state.entry(ref, lo, kind), *_group(sel_k, sel_v, ufunc))
                    continue
                for e in np.unique(sel_e).tolist():
                    m = sel_e == e
                    merge(
                        state.entry(ref, e, kind),
                        *_group(sel_k[m], sel_v[m] if sel_v is not None else None, ufunc),
                    )
            if missed.any():
                late_out.session(ref).give_batch(select(batch, missed))
        state.release(inp.frontier, lambda cap, e, aggs: emit(out, cap, e, aggs))

    return logic
