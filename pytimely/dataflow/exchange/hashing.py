"""``stable_hash``: a hash for routing records to workers that every process agrees on.

An Exchange channel sends a record whose key is not an integer to worker
``stable_hash(key) % peers`` (the full rule, and why equal keys of different types meet, is in
:mod:`.routing`).  For that to be correct, every process must compute the same hash for the
same key — in this run and the
next, on every host.  Python's ``hash()`` does not qualify: ``hash("a")`` changes with
``PYTHONHASHSEED``, which differs between processes by default.

Design, with speed on the common keys first:

* ``int`` — one multiplication by the 64-bit golden-ratio constant, then the high half folded
  into the low half (``x ^= x >> 32``).  The multiplication alone would leave the low bits
  depending only on the key's low bits (all even keys would land on the even workers); the fold
  fixes that for any modulus.  :func:`stable_hash_array` does the same to a numpy integer array
  and agrees element for element.
* ``str`` / ``bytes`` — CRC-32 of the (UTF-8) bytes, in C, then the integer mixer.
* ``float`` — an integral float hashes like the equal ``int`` (as Python's ``hash`` does:
  ``1 == 1.0 == True`` must route alike); others by their IEEE-754 bits.
* ``bool``, ``None``, tuples of all of these (element hashes combined in order).
* Anything with a ``__stable_hash__()`` method; numpy scalars and other ``numbers``.

Results are in ``[0, 2**64)``.  The hash is for load distribution, not for security or for
equality: distinct keys may collide.
"""

from __future__ import annotations

import numbers
import struct
import zlib
from typing import Any

import numpy as np

__all__ = ["stable_hash", "stable_hash_array", "stable_hash_strs"]

_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIN_I64 = -(1 << 63)
_NONE = 0x5BD1E9955BD1E995
_STR = 0x27D4EB2F165667C5
_BYTES = 0x165667B19E3779F9
_FLOAT = 0x85EBCA77C2B2AE63
_TUPLE = 0xC2B2AE3D27D4EB4F
_BIG = 0x94D049BB133111EB
_DOUBLE = struct.Struct("<d")


def _mix(x: int) -> int:
    """Mix a 64-bit value so that every bit of the input affects the low bits."""
    x = (x * _GOLDEN) & _M64
    return x ^ (x >> 32)


def stable_hash(key: Any) -> int:
    """A non-negative 64-bit hash of ``key``, the same in every process and run.

    Supports ``int``, ``str``, ``bytes``, ``float``, ``bool``, ``None``, tuples of these,
    numpy scalars, and objects with a ``__stable_hash__()`` method; raises ``TypeError``
    otherwise (route by a key function that returns one of those).
    """
    kind = type(key)
    if kind is int:
        if _MIN_I64 <= key <= _M64:
            return _mix(key & _M64)
        return _big_int(key)
    if kind is str:
        return _mix(zlib.crc32(key.encode("utf-8", "surrogatepass")) ^ _STR)
    if kind is tuple:
        h = _TUPLE ^ len(key)
        for item in key:
            h = _mix(h ^ stable_hash(item))
        return h
    if kind is bytes:
        return _mix(zlib.crc32(key) ^ _BYTES)
    if kind is float:
        if key.is_integer():
            return stable_hash(int(key))
        return _mix(int.from_bytes(_DOUBLE.pack(key), "little") ^ _FLOAT)
    if kind is bool:
        return _mix(int(key))
    if key is None:
        return _mix(_NONE)
    return _other(key)


def _big_int(key: int) -> int:
    size = (key.bit_length() + 8) // 8
    return _mix(zlib.crc32(key.to_bytes(size, "little", signed=True)) ^ _BIG)


def _other(key: Any) -> int:
    method = getattr(type(key), "__stable_hash__", None)
    if method is not None:
        return int(method(key)) & _M64
    if isinstance(key, (bytes, bytearray, memoryview)):  # np.bytes_ too
        return _mix(zlib.crc32(key) ^ _BYTES)
    if isinstance(key, (bool, np.bool_)):
        return _mix(int(key))
    if isinstance(key, numbers.Integral):  # numpy integers, IntEnum, int subclasses
        return stable_hash(int(key))
    if isinstance(key, str):
        return _mix(zlib.crc32(str.encode(key, "utf-8", "surrogatepass")) ^ _STR)
    if isinstance(key, numbers.Real):  # numpy floats, float subclasses
        return stable_hash(float(key))
    if isinstance(key, tuple):
        return stable_hash(tuple.__new__(tuple, key))
    raise TypeError(
        f"stable_hash cannot hash {type(key).__name__!r} values: route by a key of type int, "
        "str, bytes, float, bool, None or a tuple of these, or give the type a "
        "__stable_hash__() method"
    )


def stable_hash_strs(keys: list[str]) -> np.ndarray:
    """:func:`stable_hash` of every ``str`` of ``keys``, as ``uint64``: one CRC-32 per string,
    the mixing vectorized (several times cheaper per key than :func:`stable_hash`, which is
    what routing a stream's first batches, full of new words, mostly costs).

    Element ``i`` equals ``stable_hash(keys[i])``.
    """
    crc = zlib.crc32
    x = np.fromiter((crc(k.encode("utf-8", "surrogatepass")) for k in keys), np.uint64, len(keys))
    x ^= np.uint64(_STR)
    x *= np.uint64(_GOLDEN)  # wraps modulo 2**64, as _mix
    x ^= x >> np.uint64(32)
    return x


def stable_hash_array(keys: np.ndarray) -> np.ndarray:
    """:func:`stable_hash` of every element of an integer (or bool) numpy array, as ``uint64``.

    Element ``i`` equals ``stable_hash(int(keys[i]))``.
    """
    keys = np.asarray(keys)
    if keys.dtype.kind not in "iub":
        raise TypeError(f"stable_hash_array needs an integer array, not {keys.dtype}")
    x = keys.astype(np.uint64)  # two's complement for negative keys, as `key & _M64`
    x *= np.uint64(_GOLDEN)  # wraps modulo 2**64
    x ^= x >> np.uint64(32)
    return x
