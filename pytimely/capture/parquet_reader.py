"""Reading a Parquet capture back: :class:`ParquetReader` gives the events a
:class:`~pytimely.capture.parquet.ParquetWriter` wrote, identical (the layout is specified in
:mod:`pytimely.capture.parquet`)."""

from __future__ import annotations

import base64
import json
import os
from typing import Any

from ..dataflow.operators.event import Messages, Progress
from ..errors import CaptureError
from .parquet import (
    META_KEY,
    PARQUET_FORMAT_VERSION,
    PY_OF,
    VALUE_TYPES,
    load_pyarrow,
    records_from_column,
    time_from_row,
)

__all__ = ["ParquetReader"]


class ParquetReader:
    """Reads a capture written by :class:`ParquetWriter` (all events on the first ``poll()``)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self._pa = load_pyarrow()
        self.path = os.fspath(path)
        self._done = False
        self.metadata: dict | None = None

    @property
    def done(self) -> bool:
        """Whether :meth:`poll` has returned the capture (it returns everything at once)."""
        return self._done

    def poll(self) -> list:
        """See :meth:`EventReader.poll`: the whole file on the first call, then nothing."""
        if self._done:
            return []
        events = self._read()
        self._done = True
        return events

    def __iter__(self):
        return iter(self.poll())

    def _read(self) -> list:
        """Every event of the file.  Any failure to decode it -- a page checksum, a malformed
        footer or row group, metadata this reader does not know, rows that do not form events
        -- is a :class:`CaptureError` naming the file (and the row group, when known)."""
        pa = self._pa
        try:
            table, desc = self._read_table()
            self.metadata = desc
            return _events_from_table(pa, table, desc)
        except CaptureError as e:
            if str(e).startswith(self.path):
                raise
            raise CaptureError(f"{self.path}: {e}") from e
        except (
            pa.ArrowException,
            OSError,
            ValueError,
            TypeError,
            KeyError,
            IndexError,
            AttributeError,
            OverflowError,
            UnicodeDecodeError,
        ) as e:
            raise CaptureError(
                f"{self.path}: corrupt pytimely Parquet capture: {type(e).__name__}: {e}"
            ) from e

    def _read_table(self) -> tuple[Any, dict]:
        """The whole table, read row group by row group with page checksums verified, and the
        capture's metadata description (validated)."""
        pa = self._pa
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(self.path, page_checksum_verification=True)
        except (OSError, pa.ArrowException) as e:
            raise CaptureError(f"{self.path}: not a readable Parquet file: {e}") from e
        with pf:
            desc = _describe(self.path, pf.schema_arrow.metadata)
            groups = []
            for i in range(pf.num_row_groups):
                try:
                    groups.append(pf.read_row_group(i))
                except (
                    OSError,
                    pa.ArrowException,
                    ValueError,
                    TypeError,
                    KeyError,
                    IndexError,
                ) as e:
                    raise CaptureError(
                        f"{self.path}: corrupt Parquet row group {i} of {pf.num_row_groups}: {e}"
                    ) from e
            if not groups:
                return pf.schema_arrow.empty_table(), desc
            return pa.concat_tables(groups), desc


def _describe(path: str, schema_metadata: dict | None) -> dict:
    """The capture description stored in the schema metadata; a missing, malformed or unknown
    (format or version) description is a :class:`CaptureError`, never a guess."""
    raw = (schema_metadata or {}).get(META_KEY)
    if raw is None:
        raise CaptureError(
            f"{path}: not a pytimely Parquet capture (no {META_KEY.decode()} metadata)"
        )
    try:
        desc = json.loads(raw)
        if not isinstance(desc, dict) or desc.get("format") != "pytimely-capture-parquet":
            raise ValueError("wrong format tag")
        desc["time"], desc["mode"]  # noqa: B018 - required keys
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise CaptureError(f"{path}: bad pytimely Parquet metadata: {e}") from e
    version = desc.get("version")
    if type(version) is not int or version != PARQUET_FORMAT_VERSION:
        raise CaptureError(
            f"{path}: unsupported Parquet capture version {version!r} "
            f"(this pytimely reads version {PARQUET_FORMAT_VERSION})"
        )
    problem = _description_problem(desc)
    if problem:
        raise CaptureError(f"{path}: bad pytimely Parquet metadata: {problem}")
    return desc


def _description_problem(desc: dict) -> str | None:
    """What in a (version 1) description this reader does not know, or None."""
    if not _known_time_shape(desc["time"]):
        return f"unknown time encoding {desc['time']!r}"
    mode = desc["mode"]
    if mode == "records":
        if not _known_value_type(desc.get("value")):
            return f"unknown value type {desc.get('value')!r}"
    elif mode == "numpy":
        if not isinstance(desc.get("dtype"), str):
            return "numpy capture without a dtype"
    elif mode == "arrow":
        if desc.get("container") not in ("RecordBatch", "Table"):
            return f"unknown arrow container {desc.get('container')!r}"
        if not isinstance(desc.get("arrow_schema"), str):
            return "arrow capture without its schema"
    else:
        return f"unknown batch mode {mode!r}"
    return None


def _known_time_shape(shape: Any) -> bool:
    if shape == "int":
        return True
    return (
        type(shape) is list
        and len(shape) == 3
        and shape[0] == "P"
        and _known_time_shape(shape[1])
        and _known_time_shape(shape[2])
    )


def _known_value_type(vt: Any) -> bool:
    if isinstance(vt, str):
        return vt in VALUE_TYPES and vt != "auto"
    if type(vt) is not dict or len(vt) != 1:
        return False
    ((kind, fields),) = vt.items()
    return (
        kind in ("tuple", "dict")
        and type(fields) is list
        and all(
            type(f) is list and len(f) == 2 and type(f[0]) is str and f[1] in PY_OF for f in fields
        )
    )


def _events_from_table(pa: Any, table: Any, desc: dict) -> list:
    """The events the rows of ``table`` stand for (raises on rows that do not form events)."""
    import numpy as np

    shape, mode = desc["time"], desc["mode"]
    n = table.num_rows
    if n == 0:
        return []
    seq = table.column("seq").to_numpy()
    if n > 1 and not bool(np.all(seq[1:] >= seq[:-1])):
        idx = pa.compute.sort_indices(table, [("seq", "ascending"), ("pos", "ascending")])
        table = table.take(idx)
        seq = table.column("seq").to_numpy()
    kinds = table.column("kind").to_pylist()
    times = table.column("time").to_pylist()
    deltas = table.column("delta").to_pylist()
    pos = table.column("pos").to_pylist()
    if mode == "records":
        values = records_from_column(table.column("value").to_pylist(), desc["value"])
    elif mode == "numpy":
        dtype = np.dtype(desc["dtype"])
        col = table.column("value")
    else:
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(desc["arrow_schema"])))
        batch_table = table.select(schema.names)
        container = desc["container"]
    bounds = (np.flatnonzero(np.diff(seq)) + 1).tolist()
    starts = [0] + bounds
    ends = bounds + [n]
    events: list = []
    for a, b in zip(starts, ends):
        k = kinds[a]
        empty = pos[a] is None
        if k == "progress":
            if empty:
                events.append(Progress(()))
            else:
                events.append(
                    Progress([(time_from_row(times[i], shape), deltas[i]) for i in range(a, b)])
                )
        elif k == "messages":
            t = time_from_row(times[a], shape)
            if mode == "records":
                batch: Any = [] if empty else values[a:b]
            elif mode == "numpy":
                if empty:
                    batch = np.empty(0, dtype=dtype)
                else:
                    batch = (
                        col.slice(a, b - a).to_numpy(zero_copy_only=False).astype(dtype, copy=True)
                    )
            else:
                part = batch_table.slice(a, 0 if empty else b - a).combine_chunks()
                part = part.cast(schema)
                if container == "Table":
                    batch = part
                else:
                    batches = part.to_batches()
                    batch = (
                        batches[0]
                        if len(batches) == 1
                        else pa.RecordBatch.from_pylist([], schema=schema)
                    )
            events.append(Messages(t, batch))
        else:
            raise ValueError(f"unknown event kind {k!r} in row {a}")
    return events
