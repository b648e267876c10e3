"""Captured streams as Parquet files, for pandas, Spark and friends (needs ``pyarrow``).

``ParquetWriter(path)`` is an :class:`~pytimely.capture.event.EventWriter`; every ``flush()``
writes the rows pushed since the previous flush as **one row group** and ``close()`` writes the
footer.  (A Parquet file is only readable once closed: for crash-safe or tail-able captures use
:class:`~pytimely.capture.fileformat.FileWriter` and convert later.)  ``ParquetReader(path)`` is
an :class:`~pytimely.capture.event.EventReader` that gives back the identical events.

Schema (one row per progress change and one row per record)
-----------------------------------------------------------
=========  ===========================  ===================================================
column     type                         meaning
=========  ===========================  ===================================================
``seq``    int64                        event number (0, 1, ...); all rows of an event share it
``kind``   string                       ``"progress"`` or ``"messages"``
``time``   int64, or struct             the change's / the batch's time.  ``Product`` times
                                        are ``struct<outer, inner>`` (nested for nested
                                        products, leaves int64): ``time.outer`` in Spark SQL
``delta``  int64                        the change's delta (null on messages rows)
``pos``    int64                        position of the change / record within its event;
                                        null on the single marker row that stands for an
                                        *empty* event (no changes / an empty batch)
batch      see below                    null on progress rows
=========  ===========================  ===================================================

The batch columns depend on what the stream carries (fixed by the first ``Messages`` event and
the same for the whole file; a later batch that does not fit raises ``CaptureError``):

* **lists of records** -- one column ``value``: ``int64``, ``double``, ``string``, ``binary`` or
  ``bool`` when every record is of that one Python type (``None`` is a null); ``struct<_1, _2,
  ...>`` for tuples of such scalars (same arity and field types throughout); ``struct<key,
  ...>`` for dicts with the same string keys; otherwise ``binary`` holding each record in the
  safe tagged codec of :mod:`pytimely.capture.codec` (``value_type="tagged"`` forces this).
* **1-D numpy arrays** (bool/int/uint/float dtypes) -- one column ``value`` of the array's
  dtype; read back as an array of that dtype.  (Spark has no unsigned types: prefer signed.)
* **pyarrow RecordBatch / Table** -- the batch's own columns, side by side with the ones above
  (they must not be named ``seq``, ``kind``, ``time``, ``delta`` or ``pos``); read back with the
  original schema, as the same container type as the first batch.

The key ``pytimely.capture`` of the file's schema metadata holds a JSON description
(format version, time encoding, batch mode, value type) that ``ParquetReader`` relies on.
Rows of one event are contiguous and in event order.  ``spark.read.parquet(path)`` and
``pandas.read_parquet(path)`` read the file as is.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any, Self

from ..dataflow.operators.event import Messages, Progress, batch_kind
from ..errors import CaptureError
from ..order import Product
from . import codec

__all__ = ["PARQUET_FORMAT_VERSION", "ParquetWriter"]

PARQUET_FORMAT_VERSION = 1
META_KEY = b"pytimely.capture"
RESERVED = ("seq", "kind", "time", "delta", "pos")
_SCALARS = {int: "int64", float: "double", str: "string", bytes: "binary", bool: "bool"}
VALUE_TYPES = ("auto", "int64", "double", "string", "binary", "bool", "tagged")


def load_pyarrow() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise CaptureError("Parquet capture needs pyarrow: pip install pyarrow") from e
    return pa


# --------------------------------------------------------------------------------------------
# time encoding: "int" or a nested shape like ["P", "int", ["P", "int", "int"]]


def _time_shape(t: Any) -> Any:
    if type(t) is int:
        return "int"
    if type(t) is Product:
        return ["P", _time_shape(t[0]), _time_shape(t[1])]
    raise CaptureError(
        f"Parquet capture supports int and Product times, not {type(t).__qualname__}; "
        "use FileWriter for other time types"
    )


def _time_arrow_type(pa: Any, shape: Any) -> Any:
    if shape == "int":
        return pa.int64()
    return pa.struct(
        [("outer", _time_arrow_type(pa, shape[1])), ("inner", _time_arrow_type(pa, shape[2]))]
    )


def _time_to_row(t: Any, shape: Any) -> Any:
    if shape == "int":
        if type(t) is not int:
            raise CaptureError(f"time {t!r} does not match this capture's int times")
        return t
    if type(t) is not Product:
        raise CaptureError(f"time {t!r} does not match this capture's Product times")
    return {"outer": _time_to_row(t[0], shape[1]), "inner": _time_to_row(t[1], shape[2])}


def time_from_row(v: Any, shape: Any) -> Any:
    if v is None or shape == "int":
        return v
    return Product(time_from_row(v["outer"], shape[1]), time_from_row(v["inner"], shape[2]))


# --------------------------------------------------------------------------------------------
# record value types


def _infer_value_type(records: list) -> Any:
    """The Parquet representation of a list of records (JSON-able description)."""
    types = {type(r) for r in records if r is not None}
    if not types:
        return "int64"
    if len(types) == 1:
        (t,) = types
        if t in _SCALARS:
            if t is int and any(
                r is not None and not (-(1 << 63) <= r < (1 << 63)) for r in records
            ):
                return "tagged"
            return _SCALARS[t]
        if t is tuple:
            arity = {len(r) for r in records if r is not None}
            if len(arity) == 1 and arity != {0}:
                (k,) = arity
                fields = []
                for i in range(k):
                    ft = _infer_scalar([r[i] for r in records if r is not None])
                    if ft is None:
                        return "tagged"
                    fields.append([f"_{i + 1}", ft])
                return {"tuple": fields}
        if t is dict:
            keysets = {tuple(r.keys()) for r in records if r is not None}
            if len(keysets) == 1:
                (keys,) = keysets
                if keys and all(type(k) is str for k in keys) and len(set(keys)) == len(keys):
                    fields = []
                    for k in keys:
                        ft = _infer_scalar([r[k] for r in records if r is not None])
                        if ft is None:
                            return "tagged"
                        fields.append([k, ft])
                    return {"dict": fields}
    return "tagged"


def _infer_scalar(values: list) -> str | None:
    types = {type(v) for v in values if v is not None}
    if not types:
        return "int64"
    if len(types) != 1:
        return None
    (t,) = types
    if t not in _SCALARS:
        return None
    if t is int and any(v is not None and not (-(1 << 63) <= v < (1 << 63)) for v in values):
        return None
    return _SCALARS[t]


def _scalar_arrow(pa: Any, name: str) -> Any:
    return {
        "int64": pa.int64(),
        "double": pa.float64(),
        "string": pa.string(),
        "binary": pa.binary(),
        "bool": pa.bool_(),
        "tagged": pa.binary(),
    }[name]


def _value_arrow_type(pa: Any, vt: Any) -> Any:
    if isinstance(vt, str):
        return _scalar_arrow(pa, vt)
    ((_, fields),) = vt.items()
    return pa.struct([(name, _scalar_arrow(pa, ft)) for name, ft in fields])


PY_OF = {"int64": int, "double": float, "string": str, "binary": bytes, "bool": bool}


def _check_scalar(v: Any, ft: str) -> None:
    if v is not None and type(v) is not PY_OF[ft]:
        raise CaptureError(
            f"record {v!r} does not fit this Parquet capture's column type {ft} (chosen from the "
            "first records); pass value_type='tagged' to ParquetWriter for mixed records"
        )
    if ft == "int64" and v is not None and not (-(1 << 63) <= v < (1 << 63)):
        raise CaptureError(f"record {v!r} does not fit int64; pass value_type='tagged'")


def _record_to_row(r: Any, vt: Any) -> Any:
    if vt == "tagged":
        out = bytearray()
        try:
            codec.encode_value(r, out, False)
        except codec.CodecError as e:
            raise CaptureError(f"cannot store record in Parquet: {e}") from None
        return bytes(out)
    if isinstance(vt, str):
        _check_scalar(r, vt)
        return r
    if r is None:
        return None
    ((kind, fields),) = vt.items()
    if kind == "tuple":
        if type(r) is not tuple or len(r) != len(fields):
            raise CaptureError(
                f"record {r!r} does not fit this capture's {len(fields)}-tuple column"
            )
        for v, (_, ft) in zip(r, fields):
            _check_scalar(v, ft)
        return {name: v for v, (name, _) in zip(r, fields)}
    if type(r) is not dict or list(r.keys()) != [n for n, _ in fields]:
        raise CaptureError(
            f"record {r!r} does not fit this capture's dict column {[n for n, _ in fields]}"
        )
    for name, ft in fields:
        _check_scalar(r[name], ft)
    return r


def records_from_column(values: list, vt: Any) -> list:
    if vt == "tagged":
        out = []
        for b in values:
            if b is None:
                out.append(None)
                continue
            try:
                v, end = codec.decode_value(b, 0, len(b), False)
            except codec.CodecError as e:
                raise CaptureError(f"bad tagged record in Parquet capture: {e}") from None
            if end != len(b):
                raise CaptureError("bad tagged record in Parquet capture: trailing bytes")
            out.append(v)
        return out
    if isinstance(vt, str):
        return values
    ((kind, fields),) = vt.items()
    if kind == "tuple":
        names = [n for n, _ in fields]
        return [None if d is None else tuple(d[n] for n in names) for d in values]
    return [None if d is None else dict(d) for d in values]


# --------------------------------------------------------------------------------------------


class ParquetWriter:
    """Writes events to a Parquet file; one row group per ``flush()``.  See the module docs."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        value_type: str = "auto",
        compression: str = "snappy",
        metadata: dict | None = None,
    ) -> None:
        if value_type not in VALUE_TYPES:
            raise ValueError(f"value_type must be one of {VALUE_TYPES}")
        self._pa = load_pyarrow()
        self.path = os.fspath(path)
        self._value_type_opt = value_type
        self._compression = compression
        self._user_meta = dict(metadata or {})
        self._events: list = []  # pushed, not yet written
        self._seq = 0
        self._writer: Any = None
        self._schema: Any = None
        self._time_shape: Any = None
        self._mode: str | None = None  # "records" | "numpy" | "arrow"
        self._vt: Any = None
        self._np_dtype: Any = None
        self._arrow_schema: Any = None
        self._container: str | None = None
        self._closed = False
        try:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            with open(self.path, "wb"):
                pass  # fail early on a bad path
        except OSError as e:
            raise CaptureError(f"{self.path}: cannot create Parquet file: {e}") from e

    # -- EventWriter ---------------------------------------------------------------------------

    def push(self, event: Progress | Messages) -> None:
        """See :meth:`EventWriter.push`: kept in memory until ``flush`` or ``close``.

        Its time and batch types are learned here: they fix the file's schema.
        """
        if self._closed:
            raise CaptureError(f"{self.path}: push() after close()")
        t = type(event)
        if t is Progress:
            for time, _ in event.changes:
                self._learn_time(time)
        elif t is Messages:
            self._learn_time(event.time)
            self._learn_batch(event.batch)
        else:
            raise CaptureError(f"can only capture Progress or Messages events, not {t.__name__}")
        self._events.append(event)

    def flush(self, fsync: bool = False) -> None:
        """Write the events pushed since the last flush as one row group.

        Until the first ``Messages`` event fixes the batch columns, rows are held back.
        """
        if self._closed or not self._events:
            return
        if self._mode is None:
            return
        self._write_group()
        if fsync:
            self._fsync()

    def close(self) -> None:
        """Write the remaining rows and the footer (idempotent)."""
        if self._closed:
            return
        try:
            if self._mode is None:
                self._mode = "records"
                self._vt = self._value_type_opt if self._value_type_opt != "auto" else "int64"
            if self._time_shape is None:
                self._time_shape = "int"
            if self._events or self._writer is None:
                self._write_group()
            self._writer.close()
            self._fsync()
        finally:
            self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------------

    def _fsync(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError:
            pass

    def _learn_time(self, t: Any) -> None:
        if self._time_shape is None:
            self._time_shape = _time_shape(t)
        elif _time_shape(t) != self._time_shape:
            raise CaptureError(
                f"time {t!r} does not match this capture's time type {self._time_shape}"
            )

    def _learn_batch(self, batch: Any) -> None:
        kind = batch_kind(batch)
        if type(batch) is list:
            mode = "records"
        elif kind == "numpy":
            mode = "numpy"
            if batch.ndim != 1 or batch.dtype.kind not in "biuf":
                raise CaptureError(
                    "Parquet capture stores 1-D numpy arrays of bool/int/uint/float dtypes, not "
                    f"shape {batch.shape} dtype {batch.dtype}; use FileWriter for others"
                )
        elif kind is not None:
            mode = "arrow"
        else:
            raise CaptureError(
                "Parquet capture stores lists, numpy arrays and arrow batches, "
                f"not {type(batch).__name__}"
            )
        if self._mode is None:
            self._mode = mode
            if mode == "numpy":
                self._np_dtype = batch.dtype
            elif mode == "arrow":
                clash = [n for n in batch.schema.names if n in RESERVED]
                if clash:
                    raise CaptureError(
                        f"arrow batch columns {clash} clash with the capture columns {RESERVED}"
                    )
                self._arrow_schema = batch.schema
                self._container = kind
        elif mode != self._mode:
            raise CaptureError(
                f"a Parquet capture holds one kind of batch: {self._mode}, not {mode}"
            )
        elif mode == "numpy" and batch.dtype != self._np_dtype:
            raise CaptureError(
                f"numpy batch of dtype {batch.dtype}; this capture holds {self._np_dtype}"
            )
        elif mode == "arrow" and not batch.schema.equals(self._arrow_schema):
            raise CaptureError("arrow batch schema differs from the first batch's schema")

    def _decide_value_type(self) -> None:
        if self._mode == "records" and self._vt is None:
            if self._value_type_opt != "auto":
                self._vt = self._value_type_opt
            else:
                recs: list = []
                for ev in self._events:
                    if type(ev) is Messages:
                        recs.extend(ev.batch)
                self._vt = _infer_value_type(recs)

    def _make_schema(self) -> Any:
        pa = self._pa
        fields = [
            pa.field("seq", pa.int64(), nullable=False),
            pa.field("kind", pa.string(), nullable=False),
            pa.field("time", _time_arrow_type(pa, self._time_shape)),
            pa.field("delta", pa.int64()),
            pa.field("pos", pa.int64()),
        ]
        desc: dict = {
            "format": "pytimely-capture-parquet",
            "version": PARQUET_FORMAT_VERSION,
            "time": self._time_shape,
            "mode": self._mode,
            "user": self._user_meta,
        }
        if self._mode == "records":
            fields.append(pa.field("value", _value_arrow_type(pa, self._vt)))
            desc["value"] = self._vt
        elif self._mode == "numpy":
            fields.append(pa.field("value", pa.from_numpy_dtype(self._np_dtype)))
            desc["dtype"] = self._np_dtype.str
        else:
            for f in self._arrow_schema:
                fields.append(f.with_nullable(True))
            desc["container"] = self._container
            desc["arrow_schema"] = base64.b64encode(
                self._arrow_schema.serialize().to_pybytes()
            ).decode()
        return pa.schema(fields, metadata={META_KEY: json.dumps(desc).encode()})

    def _write_group(self) -> None:
        pa = self._pa
        import pyarrow.parquet as pq

        self._decide_value_type()
        if self._schema is None:
            if self._time_shape is None:
                self._time_shape = "int"
            self._schema = self._make_schema()
        shape = self._time_shape
        seq: list = []
        kind: list = []
        time: list = []
        delta: list = []
        pos: list = []
        values: list = []  # records / numpy pieces / arrow pieces
        arrow_parts: list = []  # (n_null_rows | batch)
        mode = self._mode
        for ev in self._events:
            s = self._seq
            self._seq += 1
            if type(ev) is Progress:
                ch = ev.changes
                if not ch:
                    (
                        seq.append(s),
                        kind.append("progress"),
                        time.append(None),
                        delta.append(None),
                        pos.append(None),
                    )
                    n = 1
                else:
                    n = len(ch)
                    seq.extend([s] * n)
                    kind.extend(["progress"] * n)
                    time.extend([_time_to_row(t, shape) for t, _ in ch])
                    delta.extend([d for _, d in ch])
                    pos.extend(range(n))
                if mode == "arrow":
                    arrow_parts.append(n)
                elif mode == "numpy":
                    values.append(n)
                else:
                    values.extend([None] * n)
                continue
            b = ev.batch
            n = b.num_rows if mode == "arrow" else len(b)
            tr = _time_to_row(ev.time, shape)
            if n == 0:
                (
                    seq.append(s),
                    kind.append("messages"),
                    time.append(tr),
                    delta.append(None),
                    pos.append(None),
                )
                if mode == "arrow":
                    arrow_parts.append(1)
                elif mode == "numpy":
                    values.append(1)
                else:
                    values.append(None)
                continue
            seq.extend([s] * n)
            kind.extend(["messages"] * n)
            time.extend([tr] * n)
            delta.extend([None] * n)
            pos.extend(range(n))
            if mode == "records":
                vt = self._vt
                values.extend([_record_to_row(r, vt) for r in b])
            elif mode == "numpy":
                values.append(b)
            else:
                arrow_parts.append(b)
        self._events = []
        schema = self._schema
        cols = [
            pa.array(seq, pa.int64()),
            pa.array(kind, pa.string()),
            pa.array(time, schema.field("time").type),
            pa.array(delta, pa.int64()),
            pa.array(pos, pa.int64()),
        ]
        try:
            if mode == "records":
                cols.append(pa.array(values, schema.field("value").type))
            elif mode == "numpy":
                cols.append(self._numpy_column(values))
            else:
                cols.extend(self._arrow_columns(arrow_parts))
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
            raise CaptureError(
                f"{self.path}: cannot convert batch to the Parquet schema: {e}"
            ) from e
        table = pa.Table.from_arrays(cols, schema=schema)
        try:
            if self._writer is None:
                self._writer = pq.ParquetWriter(
                    self.path, schema, compression=self._compression, write_page_checksum=True
                )
            self._writer.write_table(table, row_group_size=max(1, table.num_rows))
        except (OSError, pa.ArrowException) as e:
            raise CaptureError(f"{self.path}: writing Parquet failed: {e}") from e

    def _numpy_column(self, parts: list) -> Any:
        pa = self._pa
        typ = self._schema.field("value").type
        chunks = []
        for p in parts:
            if isinstance(p, int):
                chunks.append(pa.nulls(p, typ))
            else:
                chunks.append(pa.array(p, typ))
        return pa.concat_arrays(chunks) if chunks else pa.array([], typ)

    def _arrow_columns(self, parts: list) -> list:
        pa = self._pa
        out = []
        for i, f in enumerate(self._arrow_schema):
            typ = f.type
            chunks = []
            for p in parts:
                if isinstance(p, int):
                    chunks.append(pa.nulls(p, typ))
                else:
                    col = p.column(i)
                    if isinstance(col, pa.ChunkedArray):
                        chunks.extend(col.chunks)
                    else:
                        chunks.append(col)
            out.append(pa.concat_arrays(chunks) if chunks else pa.array([], typ))
        return out
