"""The records codec: the common payload shapes as bytes, without pickle's per-object cost.

A batch that crosses workers is usually a list of ``str``, ``int``, small tuples of these, or
dicts (parsed JSON events).
Pickle memoizes every tuple and string it writes and reads (a dict entry each, on both sides),
which costs more than the encoding itself.  This codec writes such payloads as a flat tag stream
instead; anything else (another type, a subclass such as ``np.str_`` or a namedtuple, an
``int`` beyond 64 bits, a ``str`` with lone surrogates, a dict subclass such as
``OrderedDict``, nesting deeper than 32) is left to pickle, and the result is the same object
either way.

Format (all integers little-endian)::

    payload := 0xC5 value
    value   := 'N' | 'T' | 'F'                       None, True, False
             | 'j' u8  | 'h' u16 | 'k' i32 | 'i' i64    int (the shortest that holds it)
             | 'f' f64                               float (IEEE-754 bits)
             | 's' u8 utf8       | 'S' u32 utf8      str (length in bytes, then UTF-8)
             | 'b' u8 data       | 'B' u32 data      bytes
             | 'r' u8 value*                         tuple of < 256 items (a record)
             | 't' u32 value*    | 'l' u32 value*    tuple, list (count, then the items)
             | 'W' u32 (u8 ascii u8)*                list of word records (str, int): per
                                                     record the text's length, the text (of
                                                     < 256 ASCII bytes), the int (< 256)
             | 'd' u32 (value value)*                dict: count, then each entry's key and
                                                     value, in the dict's order

The first byte tells a codec payload from a pickle (protocol 5 starts with ``0x80``), which is
how :func:`pytimely.communication.wire.deserialize` dispatches.

Only the compiled extension encodes (:mod:`pytimely._native`); without it every payload is
pickled.  Decoding works either way: :func:`decode` here is the pure-Python reader, so a worker
without the extension still understands a peer that has it.
"""

from __future__ import annotations

import struct
from typing import Any

from .. import _native

__all__ = ["MAGIC", "encode", "decode", "encode_pair_of_lists", "list_form"]

MAGIC = 0xC5
_MAX_DEPTH = 32
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")


def encode(payload: Any) -> bytes | None:
    """``payload`` in the codec, or None if it holds something only pickle can carry (or the
    compiled extension is not in use)."""
    speedups = _native.speedups
    if speedups is None:
        return None
    return speedups.encode(payload)


#: Bytes before the first item of an encoded list: the magic byte, its form (``'l'`` or
#: ``'W'``) and the u32 count.
_LIST_HEAD = 6


def encode_pair_of_lists(first: bytes, lists: list[bytes]) -> bytes:
    """``encode((x, a + b + ...))`` from ``first = encode(x)`` and the encodings of the lists
    ``a``, ``b``, ... (each a non-None result of :func:`encode` of a ``list``, all in the same
    form: :func:`list_form`): their items are spliced under one header, so that no item is
    encoded twice.

    >>> if encode([1]) is not None:  # the compiled extension encodes
    ...     pair = encode_pair_of_lists(encode(7), [encode([1, "a"]), encode([(2, "b")])])
    ...     assert pair == encode((7, [1, "a", (2, "b")]))
    ...     assert decode(pair) == (7, [1, "a", (2, "b")])
    """
    form = lists[0][1:2]
    if form not in (b"l", b"W") or any(data[1:2] != form for data in lists):
        raise ValueError("encode_pair_of_lists: not the encodings of lists of one form")
    total = sum(_U32.unpack_from(data, 2)[0] for data in lists)
    pieces: list[Any] = [bytes((MAGIC, ord("r"), 2)), memoryview(first)[1:], form, _U32.pack(total)]
    pieces.extend(memoryview(data)[_LIST_HEAD:] for data in lists)
    return b"".join(pieces)


def list_form(data: bytes) -> int:
    """The form of an encoded list (what :func:`encode_pair_of_lists` may splice together):
    ``ord("W")`` for a list of word records, ``ord("l")`` for any other."""
    return data[1]


def decode(data: bytes | bytearray | memoryview) -> Any:
    """The object :func:`encode` wrote.  Raises ``ValueError`` on a malformed payload."""
    speedups = _native.speedups
    if speedups is not None:
        return speedups.decode(data)
    view = memoryview(data)
    if not len(view) or view[0] != MAGIC:
        raise ValueError("malformed records-codec payload: not a records-codec payload")
    try:
        value, end = _decode_value(view, 1, 0)
    except (IndexError, struct.error):
        raise ValueError("malformed records-codec payload: truncated") from None
    if end != len(view):
        raise ValueError("malformed records-codec payload: trailing bytes")
    return value


def _decode_value(view: memoryview, at: int, depth: int) -> tuple[Any, int]:
    tag = chr(view[at])
    at += 1
    if tag == "N":
        return None, at
    if tag == "T":
        return True, at
    if tag == "F":
        return False, at
    if tag == "j":
        return view[at], at + 1
    if tag == "h":
        return _U16.unpack_from(view, at)[0], at + 2
    if tag == "k":
        return _I32.unpack_from(view, at)[0], at + 4
    if tag == "i":
        return _I64.unpack_from(view, at)[0], at + 8
    if tag == "f":
        return _F64.unpack_from(view, at)[0], at + 8
    if tag in "sSbB":
        if tag in "sb":
            n, at = view[at], at + 1
        else:
            n, at = _U32.unpack_from(view, at)[0], at + 4
        if at + n > len(view):
            raise IndexError
        raw = bytes(view[at : at + n])
        return (raw.decode("utf-8", "surrogatepass") if tag in "sS" else raw), at + n
    if tag == "W":
        if depth >= _MAX_DEPTH - 1:
            raise ValueError("malformed records-codec payload: nested too deeply")
        n, at = _U32.unpack_from(view, at)[0], at + 4
        records = []
        for _ in range(n):
            size = view[at]
            end = at + 1 + size
            if end >= len(view):
                raise IndexError
            records.append((bytes(view[at + 1 : end]).decode("utf-8", "surrogatepass"), view[end]))
            at = end + 1
        return records, at
    if tag in "rtl":
        if depth >= _MAX_DEPTH:
            raise ValueError("malformed records-codec payload: nested too deeply")
        if tag == "r":
            n, at = view[at], at + 1
        else:
            n, at = _U32.unpack_from(view, at)[0], at + 4
        items = []
        for _ in range(n):
            item, at = _decode_value(view, at, depth + 1)
            items.append(item)
        return (items if tag == "l" else tuple(items)), at
    if tag == "d":
        if depth >= _MAX_DEPTH:
            raise ValueError("malformed records-codec payload: nested too deeply")
        n, at = _U32.unpack_from(view, at)[0], at + 4
        entries: dict[Any, Any] = {}
        for _ in range(n):
            key, at = _decode_value(view, at, depth + 1)
            value, at = _decode_value(view, at, depth + 1)
            try:
                entries[key] = value
            except TypeError:
                raise ValueError(
                    "malformed records-codec payload: a dict key that cannot be hashed"
                ) from None
        return entries, at
    raise ValueError(f"malformed records-codec payload: unknown tag {ord(tag)}")
