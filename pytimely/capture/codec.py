"""Safe binary codecs for capture frame bodies: timestamps, records and batches.

Nothing here unpickles unless the caller passes ``allow_pickle=True``.  Every decoder checks
every length against the bytes actually present and raises :class:`CodecError` (never
``IndexError``/``struct.error``/``RecursionError``...) on malformed input; callers turn it into a
:class:`~pytimely.errors.CaptureError` naming the file and offset.

Tagged values (times and records), all integers little-endian::

    0x00 None            0x01 False           0x02 True
    0x03 int   (i64)     0x04 big int  (u32 n, n bytes two's complement, little-endian)
    0x05 float (f64)     0x06 str      (u32 n, n bytes UTF-8, surrogates passed through)
    0x07 bytes (u32 n, n bytes)
    0x08 tuple (u32 n, n values)       0x09 Product (2 values: outer, inner)
    0x0A list  (u32 n, n values)       0x0B dict    (u32 n, n key/value pairs)
    0x0C numpy scalar (u8 n, n bytes ASCII dtype.str, dtype.itemsize raw bytes)
    0x7F pickle (u32 n, n bytes) -- only written/read with allow_pickle=True

Nesting is limited to ``MAX_DEPTH`` levels.  Only exact types are encoded (``bool`` before
``int``; an ``int`` subclass such as ``IntEnum`` or a namedtuple is *not* silently flattened:
it needs pickle).

Batches (one codec byte, then the payload)::

    0x01 LIST      u32 n, n tagged values
    0x02 LIST_I64  u32 n, n x i64             (a list of exact ints, all in int64 range)
    0x03 LIST_F64  u32 n, n x f64             (a list of exact floats)
    0x04 LIST_STR  u32 n, n x u32 byte lengths, concatenated UTF-8   (a list of exact strs)
    0x10 NUMPY     u32 n, JSON dtype descr (numpy.lib.format), u8 ndim, ndim x u64 shape,
                   u64 nbytes, C-order raw bytes                      (no object dtypes)
    0x20 ARROW     u8 container (0 RecordBatch, 1 Table), u64 n, n bytes Arrow IPC stream
    0x7F PICKLE    u32 n, n bytes (any other container; only with allow_pickle=True)
"""

from __future__ import annotations

import json
import pickle
import struct
import sys
from array import array
from collections.abc import Callable
from typing import Any

from ..dataflow.operators.event import batch_kind
from ..order import Product

__all__ = [
    "MAX_DEPTH",
    "CodecError",
    "decode_batch",
    "decode_value",
    "encode_batch",
    "encode_value",
]

MAX_DEPTH = 100

T_NONE, T_FALSE, T_TRUE, T_INT, T_BIGINT, T_FLOAT, T_STR, T_BYTES = range(8)
T_TUPLE, T_PRODUCT, T_LIST, T_DICT, T_NPSCALAR = 8, 9, 10, 11, 12
T_PICKLE = 0x7F

B_LIST, B_I64, B_F64, B_STR, B_NUMPY, B_ARROW, B_PICKLE = 0x01, 0x02, 0x03, 0x04, 0x10, 0x20, 0x7F

_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_LITTLE = sys.byteorder == "little"

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


class CodecError(ValueError):
    """Malformed or unencodable value (internal; surfaced as CaptureError)."""


class NeedsPickle(CodecError):
    """A value has no safe encoding and pickle was not allowed."""


# --------------------------------------------------------------------------------------------
# Tagged values


def encode_value(v: Any, out: bytearray, allow_pickle: bool = False, _depth: int = 0) -> bool:
    """Append the tagged encoding of ``v`` to ``out``; return True if pickle was used."""
    t = type(v)
    if t is int:
        if _INT64_MIN <= v <= _INT64_MAX:
            out.append(T_INT)
            out += _I64.pack(v)
        else:
            n = (v.bit_length() + 8) // 8
            out.append(T_BIGINT)
            out += _U32.pack(n)
            out += v.to_bytes(n, "little", signed=True)
        return False
    if t is str:
        b = v.encode("utf-8", "surrogatepass")
        out.append(T_STR)
        out += _U32.pack(len(b))
        out += b
        return False
    if t is float:
        out.append(T_FLOAT)
        out += _F64.pack(v)
        return False
    if v is None:
        out.append(T_NONE)
        return False
    if t is bool:
        out.append(T_TRUE if v else T_FALSE)
        return False
    if t is bytes:
        out.append(T_BYTES)
        out += _U32.pack(len(v))
        out += v
        return False
    if _depth >= MAX_DEPTH:
        raise CodecError(f"value nested deeper than {MAX_DEPTH} levels")
    if t is Product:
        out.append(T_PRODUCT)
        p = encode_value(v[0], out, allow_pickle, _depth + 1)
        return encode_value(v[1], out, allow_pickle, _depth + 1) or p
    if t is tuple or t is list:
        out.append(T_TUPLE if t is tuple else T_LIST)
        out += _U32.pack(len(v))
        used = False
        for x in v:
            used = encode_value(x, out, allow_pickle, _depth + 1) or used
        return used
    if t is dict:
        out.append(T_DICT)
        out += _U32.pack(len(v))
        used = False
        for k, x in v.items():
            used = encode_value(k, out, allow_pickle, _depth + 1) or used
            used = encode_value(x, out, allow_pickle, _depth + 1) or used
        return used
    if t.__module__ == "numpy" and hasattr(v, "dtype") and getattr(v, "ndim", None) == 0:
        dt = v.dtype
        if not dt.hasobject and dt.names is None and dt.subdtype is None:
            ds = dt.str.encode("ascii")
            out.append(T_NPSCALAR)
            out.append(len(ds))
            out += ds
            out += v.tobytes()
            return False
    supported = (
        "supported are None, bool, int, float, str, bytes, tuple, list, dict, Product and numpy "
        "scalars (or pass allow_pickle=True to the writer and the reader)"
    )
    return _pickled(v, "value", supported, T_PICKLE, out, allow_pickle)


def _pickled(v: Any, what: str, supported: str, tag: int, out: bytearray, allow: bool) -> bool:
    """Append ``v`` pickled, after ``tag`` and its length, if pickling is ``allow`` ed; else
    :class:`NeedsPickle` naming its type and what is ``supported``.  Returns True (used)."""
    t = type(v)
    if not allow:
        raise NeedsPickle(
            f"cannot encode a {what} of type {t.__module__}.{t.__qualname__} safely; {supported}"
        )
    try:
        b = pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:
        raise CodecError(f"cannot pickle a {what} of type {t.__qualname__}: {e}") from e
    out.append(tag)
    out += _U32.pack(len(b))
    out += b
    return True


def _unsigned_reader(layout: struct.Struct) -> Callable[[_Cursor], int]:
    """A :class:`_Cursor` method reading one little-endian unsigned integer of ``layout``
    (bounds-checked); a function made per width, so a read costs one call, not two."""
    size, unpack = layout.size, layout.unpack_from

    def read(self: _Cursor) -> int:
        p = self.pos
        if p + size > self.end:
            raise CodecError("value runs past the end of the frame body")
        self.pos = p + size
        return unpack(self.buf, p)[0]

    return read


class _Cursor:
    """Bounds-checked reads from a bytes-like object holding exactly the bytes to decode."""

    __slots__ = ("allow_pickle", "buf", "end", "pos")

    def __init__(self, buf: Any, pos: int = 0, end: int | None = None, allow_pickle: bool = False):
        mv = buf if type(buf) is memoryview else memoryview(buf)
        if end is not None and end != len(mv):
            mv = mv[:end]
        self.buf = mv
        self.pos = pos
        self.end = len(mv)
        self.allow_pickle = allow_pickle

    def take(self, n: int) -> Any:
        p = self.pos
        if n < 0 or p + n > self.end:
            raise CodecError(f"value runs past the end of the frame body (needs {n} bytes at {p})")
        self.pos = p + n
        return self.buf[p : p + n]

    def u8(self) -> int:
        p = self.pos
        if p >= self.end:
            raise CodecError("value runs past the end of the frame body")
        self.pos = p + 1
        return self.buf[p]

    u32 = _unsigned_reader(_U32)
    u64 = _unsigned_reader(_U64)

    def count(self, min_item_size: int = 1) -> int:
        n = self.u32()
        if n * min_item_size > self.end - self.pos:
            raise CodecError(f"count {n} exceeds the bytes left in the frame body")
        return n

    def value(self) -> Any:
        v, self.pos = _dec(self.buf, self.pos, 0, self.allow_pickle)
        return v


_unpack_q = _I64.unpack_from
_unpack_d = _F64.unpack_from
_unpack_I = _U32.unpack_from


def _dec(buf: Any, p: int, depth: int, allow_pickle: bool) -> tuple[Any, int]:
    """Decode the tagged value at ``buf[p]``; ``buf`` ends exactly where the body ends.

    Out-of-range reads surface as ``struct.error``/``IndexError`` (converted by the callers
    through :func:`_guard`); slices are checked explicitly.
    """
    tag = buf[p]
    p += 1
    if tag == T_INT:
        return _unpack_q(buf, p)[0], p + 8
    if tag == T_STR:
        n = _unpack_I(buf, p)[0]
        p += 4
        q = p + n
        if q > len(buf):
            raise CodecError("string runs past the end of the frame body")
        return str(buf[p:q], "utf-8", "surrogatepass"), q
    if tag == T_TUPLE or tag == T_LIST:
        n = _unpack_I(buf, p)[0]
        p += 4
        if n > len(buf) - p:
            raise CodecError(f"count {n} exceeds the bytes left in the frame body")
        if depth >= MAX_DEPTH:
            raise CodecError(f"value nested deeper than {MAX_DEPTH} levels")
        items = []
        append = items.append
        d = depth + 1
        for _ in range(n):
            v, p = _dec(buf, p, d, allow_pickle)
            append(v)
        return (tuple(items) if tag == T_TUPLE else items), p
    if tag == T_FLOAT:
        return _unpack_d(buf, p)[0], p + 8
    if tag == T_NONE:
        return None, p
    if tag == T_FALSE:
        return False, p
    if tag == T_TRUE:
        return True, p
    if tag == T_PRODUCT:
        if depth >= MAX_DEPTH:
            raise CodecError(f"value nested deeper than {MAX_DEPTH} levels")
        a, p = _dec(buf, p, depth + 1, allow_pickle)
        b, p = _dec(buf, p, depth + 1, allow_pickle)
        return Product(a, b), p
    if tag == T_BYTES or tag == T_BIGINT or tag == T_PICKLE:  # a length, then that many bytes
        n = _unpack_I(buf, p)[0]
        p += 4
        q = p + n
        if q > len(buf):
            what = "pickle" if tag == T_PICKLE else "value"
            raise CodecError(f"{what} runs past the end of the frame body")
        if tag == T_BYTES:
            return bytes(buf[p:q]), q
        if tag == T_BIGINT:
            return int.from_bytes(buf[p:q], "little", signed=True), q
        if not allow_pickle:
            raise CodecError("pickled value found but allow_pickle is False")
        return _unpickle(buf[p:q]), q
    if tag == T_DICT:
        n = _unpack_I(buf, p)[0]
        p += 4
        if 2 * n > len(buf) - p:
            raise CodecError(f"count {n} exceeds the bytes left in the frame body")
        if depth >= MAX_DEPTH:
            raise CodecError(f"value nested deeper than {MAX_DEPTH} levels")
        out: dict = {}
        for _ in range(n):
            k, p = _dec(buf, p, depth + 1, allow_pickle)
            v, p = _dec(buf, p, depth + 1, allow_pickle)
            try:
                out[k] = v
            except TypeError:
                raise CodecError("unhashable dict key") from None
        return out, p
    if tag == T_NPSCALAR:
        import numpy as np

        n = buf[p]
        p += 1
        ds = bytes(buf[p : p + n])
        p += n
        try:
            dt = np.dtype(ds.decode("ascii"))
        except (TypeError, ValueError, SyntaxError):
            raise CodecError(f"bad numpy scalar dtype {ds!r}") from None
        if dt.hasobject or dt.names is not None or dt.subdtype is not None or dt.itemsize == 0:
            raise CodecError(f"numpy scalar dtype {ds!r} not allowed")
        q = p + dt.itemsize
        if q > len(buf):
            raise CodecError("numpy scalar runs past the end of the frame body")
        return np.frombuffer(bytes(buf[p:q]), dtype=dt)[0], q
    raise CodecError(f"unknown value tag 0x{tag:02x}")


def _guard(fn: Any, *args: Any) -> Any:
    """Run a decoder, turning every low-level failure into :class:`CodecError`."""
    try:
        return fn(*args)
    except CodecError:
        raise
    except (struct.error, IndexError):
        raise CodecError("value runs past the end of the frame body") from None
    except UnicodeDecodeError as e:
        raise CodecError(f"invalid UTF-8 in a string: {e.reason}") from None
    except RecursionError:
        raise CodecError("value nested too deeply") from None
    except (ValueError, TypeError, OverflowError, MemoryError) as e:
        raise CodecError(f"{type(e).__name__}: {e}") from None


def _unpickle(raw: Any) -> Any:
    try:
        return pickle.loads(bytes(raw))
    except Exception as e:  # the user trusted the file; still report cleanly
        raise CodecError(f"unpickling failed: {type(e).__name__}: {e}") from e


def decode_value(buf: Any, pos: int = 0, end: int | None = None, allow_pickle: bool = False):
    """Decode one tagged value from ``buf[pos:end]``; return ``(value, new_pos)``."""
    mv = memoryview(buf)
    if end is not None:
        mv = mv[:end]
    return _guard(_dec, mv, pos, 0, allow_pickle)


# --------------------------------------------------------------------------------------------
# Batches


def encode_batch(batch: Any, out: bytearray, allow_pickle: bool = False) -> bool:
    """Append codec byte + payload for ``batch``; return True if pickle was used."""
    t = type(batch)
    if t is list:
        n = len(batch)
        if n:
            first = type(batch[0])
            if first is int and all(type(x) is int for x in batch):
                try:
                    a = array("q", batch)
                except OverflowError:
                    a = None
                if a is not None:
                    _append_array(out, B_I64, a)
                    return False
            elif first is float and all(type(x) is float for x in batch):
                _append_array(out, B_F64, array("d", batch))
                return False
            elif first is str and all(type(x) is str for x in batch):
                bs = [s.encode("utf-8", "surrogatepass") for s in batch]
                lens = array("I", [len(b) for b in bs])
                if lens.itemsize == 4:
                    _append_array(out, B_STR, lens)  # the lengths, then the UTF-8 bytes
                    out += b"".join(bs)
                    return False
        out.append(B_LIST)
        out += _U32.pack(n)
        used = False
        for x in batch:
            used = encode_value(x, out, allow_pickle) or used
        return used
    kind = batch_kind(batch)
    if kind == "numpy":
        return _encode_numpy(batch, out, allow_pickle)
    if kind is not None:
        import pyarrow as pa

        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as w:
            if kind == "RecordBatch":
                w.write_batch(batch)
            else:
                w.write_table(batch)
        buf = sink.getvalue()
        out.append(B_ARROW)
        out.append(0 if kind == "RecordBatch" else 1)
        out += _U64.pack(buf.size)
        out += memoryview(buf)
        return False
    supported = (
        "batches are lists, numpy arrays or pyarrow RecordBatch/Table (or pass allow_pickle=True)"
    )
    return _pickled(batch, "batch", supported, B_PICKLE, out, allow_pickle)


def _append_array(out: bytearray, codec: int, values: array) -> None:
    """Append the codec byte ``codec``, the item count and ``values`` as little-endian bytes
    (the layout of the I64, F64 and STR batches; ``values`` is byte-swapped in place on a
    big-endian machine)."""
    if not _LITTLE:
        values.byteswap()
    out.append(codec)
    out += _U32.pack(len(values))
    out += values.tobytes()


def _encode_numpy(a: Any, out: bytearray, allow_pickle: bool) -> bool:
    import numpy as np
    from numpy.lib import format as npformat

    if a.dtype.hasobject:
        if not allow_pickle:
            raise NeedsPickle(
                "cannot encode a numpy array of object dtype safely (or pass allow_pickle=True)"
            )
        b = pickle.dumps(a, protocol=pickle.HIGHEST_PROTOCOL)
        out.append(B_PICKLE)
        out += _U32.pack(len(b))
        out += b
        return True
    descr = json.dumps(npformat.dtype_to_descr(a.dtype)).encode("ascii")
    data = np.ascontiguousarray(a).tobytes()
    out.append(B_NUMPY)
    out += _U32.pack(len(descr))
    out += descr
    out.append(a.ndim)
    for d in a.shape:
        out += _U64.pack(d)
    out += _U64.pack(len(data))
    out += data
    return False


def _descr_from_json(x: Any) -> Any:
    # JSON turns tuples into lists; numpy's descr format wants tuples for fields and shapes.
    if isinstance(x, str):
        return x
    if isinstance(x, list):
        out = []
        for field in x:
            if not isinstance(field, list) or len(field) not in (2, 3):
                raise CodecError("bad numpy dtype description")
            name = field[0]
            if isinstance(name, list):
                name = tuple(name)
            item = [name, _descr_from_json(field[1])]
            if len(field) == 3:
                if not isinstance(field[2], list):
                    raise CodecError("bad numpy dtype description")
                item.append(tuple(field[2]))
            out.append(tuple(item))
        return out
    raise CodecError("bad numpy dtype description")


def _decode_numpy(c: _Cursor) -> Any:
    import numpy as np
    from numpy.lib import format as npformat

    descr_raw = bytes(c.take(c.u32()))
    try:
        descr = _descr_from_json(json.loads(descr_raw.decode("ascii")))
        dt = npformat.descr_to_dtype(descr)
    except CodecError:
        raise
    except (TypeError, ValueError, KeyError, IndexError, SyntaxError) as e:
        raise CodecError(f"bad numpy dtype description {descr_raw[:80]!r}: {e}") from None
    if dt.hasobject:
        raise CodecError("numpy object dtype is not allowed in a NUMPY batch")
    ndim = c.u8()
    if ndim > 64:
        raise CodecError(f"numpy array with {ndim} dimensions")
    shape = tuple(c.u64() for _ in range(ndim))
    nbytes = c.u64()
    count = 1
    for d in shape:
        count *= d
    if count * dt.itemsize != nbytes:
        raise CodecError(f"numpy array of shape {shape} and dtype {dt} cannot have {nbytes} bytes")
    raw = c.take(nbytes)
    try:
        arr = np.frombuffer(bytes(raw), dtype=dt).reshape(shape)
    except (TypeError, ValueError) as e:
        raise CodecError(f"bad numpy array: {e}") from None
    return arr.copy()  # writable, owns its memory


def decode_batch(buf: Any, pos: int, end: int, allow_pickle: bool = False) -> Any:
    """Decode a batch occupying exactly ``buf[pos:end]``."""
    return _guard(_decode_batch, _Cursor(buf, pos, end, allow_pickle))


def _decode_batch(c: _Cursor) -> Any:
    allow_pickle = c.allow_pickle
    codec = c.u8()
    if codec == B_I64 or codec == B_F64:
        n = c.count(8)
        raw = c.take(8 * n)
        a = array("q" if codec == B_I64 else "d")
        a.frombytes(bytes(raw))
        if not _LITTLE:
            a.byteswap()
        batch: Any = a.tolist()
    elif codec == B_STR:
        n = c.count(4)
        lens = array("I")
        lens.frombytes(bytes(c.take(4 * n)))
        if not _LITTLE:
            lens.byteswap()
        total = sum(lens)
        blob = bytes(c.take(total))
        batch = []
        p = 0
        try:
            for ln in lens:
                batch.append(blob[p : p + ln].decode("utf-8", "surrogatepass"))
                p += ln
        except UnicodeDecodeError as e:
            raise CodecError(f"invalid UTF-8 in a string: {e}") from None
    elif codec == B_LIST:
        n = c.count()
        buf, p = c.buf, c.pos
        batch = []
        append = batch.append
        for _ in range(n):
            v, p = _dec(buf, p, 0, allow_pickle)
            append(v)
        c.pos = p
    elif codec == B_NUMPY:
        batch = _decode_numpy(c)
    elif codec == B_ARROW:
        container = c.u8()
        if container not in (0, 1):
            raise CodecError(f"unknown arrow container {container}")
        n = c.u64()
        raw = c.take(n)
        batch = _decode_arrow(bytes(raw), container)
    elif codec == B_PICKLE:
        raw = c.take(c.u32())
        if not allow_pickle:
            raise CodecError("pickled batch found but allow_pickle is False")
        batch = _unpickle(raw)
    else:
        raise CodecError(f"unknown batch codec 0x{codec:02x}")
    if c.pos != c.end:
        raise CodecError(f"{c.end - c.pos} unexpected bytes after the batch")
    return batch


def _decode_arrow(raw: bytes, container: int) -> Any:
    try:
        import pyarrow as pa
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise CodecError("this capture holds Arrow batches; install pyarrow to read it") from e
    try:
        table = pa.ipc.open_stream(pa.py_buffer(raw)).read_all()
        table.validate(full=True)
    except Exception as e:  # noqa: BLE001 - arrow raises many types on malformed IPC
        raise CodecError(f"bad Arrow IPC payload: {type(e).__name__}: {e}") from None
    if container == 1:
        return table
    batches = table.to_batches()
    if len(batches) == 1:
        return batches[0]
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=table.schema)
    return table.combine_chunks().to_batches()[0]
