"""The routing rule: which worker a key goes to.  Every Exchange channel routes by this module.

**Invariant: keys that compare equal route to the same worker** — on every worker, in every
process, run and batch, whatever their Python or numpy type.  ``1``, ``1.0``, ``True``,
``np.int64(1)``, ``np.float64(1.0)`` and ``np.bool_(True)`` all go to one worker; so do
``"a"`` and ``np.str_("a")``, ``b"a"`` and ``np.bytes_(b"a")``, and ``(1, "a")`` and
``(1.0, np.str_("a"))``.

How: every key is first reduced to a *canonical form* (:func:`canonical_key`) in which equal
keys are identical:

* ``bool``, numpy integers and booleans, other ``numbers.Integral`` → ``int``;
* ``float``, numpy floats, other ``numbers.Real`` → ``int`` if integral (``-0.0`` → ``0``,
  ``1e300`` → ``int(1e300)``), else ``float`` (``nan`` and ``±inf`` stay floats: ``nan``
  equals nothing, so any fixed route is right for it);
* ``str`` subclasses (``np.str_``) → ``str``; ``bytes`` subclasses (``np.bytes_``),
  ``bytearray``, ``memoryview`` → ``bytes``;
* ``None`` → ``None``; tuples (namedtuples too) → tuples of canonical elements;
* objects with a ``__stable_hash__()`` method are their own canonical form.

Anything else (a ``list``, a ``dict``, a ``Decimal``, an object whose hash differs between
processes) cannot be routed: :class:`UnroutableKey` (a ``TypeError``).

Then a canonical ``int`` goes to worker ``key % peers`` — as timely does, so integer keys keep
their familiar placement — and every other canonical key to
``stable_hash(key) % peers`` (:mod:`.hashing`, identical in every process).

The vectorized routes :func:`route_array` (numpy) and :func:`route_arrow` (Arrow arrays) give,
element for element, what :func:`route` gives for the element as a Python value (``arr[i]``,
respectively ``arr[i].as_py()``).

**Twin.**  ``direct_route`` in ``pytimely/_speedups.c`` computes the same routes for exact
``int`` and ASCII ``str`` keys without calling this module: a change to the rule (or to
:mod:`.hashing`) must be made there too (see :mod:`pytimely.dataflow.exchange`).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ...errors import UnroutableKey
from .hashing import stable_hash, stable_hash_strs

__all__ = [
    "UnroutableKey",
    "ALWAYS_ROUTABLE",
    "canonical_key",
    "route",
    "route_array",
    "route_arrow",
    "route_strs",
]

_M64 = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_FLOAT = np.uint64(0x85EBCA77C2B2AE63)  # as hashing._FLOAT: a non-integral float's bits tag

#: Key types whose every value is routable (a check of the type suffices).  Tuples are not
#: here: a tuple is routable only if its elements are.
ALWAYS_ROUTABLE: frozenset[type] = frozenset(
    {int, str, bytes, float, bool, type(None), np.str_, np.bytes_, np.bool_}
    | {
        t
        for t in np.sctypeDict.values()
        if issubclass(t, (np.integer, np.floating)) and not issubclass(t, np.timedelta64)
    }
)


def canonical_key(key: Any) -> Any:
    """The canonical form of ``key``: ``a == b`` implies ``canonical_key(a) == canonical_key(b)``
    with equal types, so that both route alike (see the module docstring).

    Raises :class:`UnroutableKey` for a key with no stable canonical form.
    """
    kind = type(key)
    if kind is int or kind is str or kind is bytes or key is None:
        return key
    if kind is tuple:
        return tuple(map(canonical_key, key))
    if kind is float:
        return int(key) if key.is_integer() else key
    if kind is bool:
        return int(key)
    return _canonical_other(key)


def _canonical_other(key: Any) -> Any:
    if isinstance(key, (np.timedelta64, np.datetime64)):
        # Unit-dependent: timedelta64(1, "s") == timedelta64(1000, "ms").
        raise UnroutableKey(
            f"a value of type {type(key).__qualname__} cannot be routed: it compares equal across "
            "units; convert it to an int in one fixed unit"
        )
    if isinstance(key, (bool, np.bool_, numbers.Integral)):
        return int(key)
    if isinstance(key, numbers.Real):  # numpy floats, float subclasses, Fraction
        if isinstance(key, numbers.Rational) and key.denominator == 1:
            return int(key.numerator)
        x = float(key)
        return int(x) if x.is_integer() else x
    if isinstance(key, str):
        return str.__str__(key)
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    if isinstance(key, tuple):
        return tuple(map(canonical_key, key))
    if getattr(type(key), "__stable_hash__", None) is not None:
        return key
    raise UnroutableKey(
        f"a value of type {type(key).__qualname__} cannot be routed: "
        "routable keys are int, str, bytes, float, bool, None, numpy scalars, tuples of these, "
        "and objects with a __stable_hash__() method"
    )


def route(key: Any, peers: int) -> int:
    """The worker, in ``range(peers)``, that ``key`` goes to."""
    c = canonical_key(key)
    if type(c) is int:
        return c % peers
    return stable_hash(c) % peers


def route_strs(keys: list[str], peers: int) -> list[int]:
    """:func:`route` of every ``str`` of ``keys`` (a ``str`` is its own canonical key), with
    the hashing vectorized: what an Exchange pays once per new word of its stream."""
    return (stable_hash_strs(keys) % np.uint64(peers)).tolist()


def route_array(keys: Any, peers: int) -> np.ndarray:
    """:func:`route` of every element of the one-dimensional numpy array ``keys``, as ``int64``.

    Integer, boolean and float arrays are routed without a Python loop; ``str``/``bytes``
    arrays hash each distinct value once; object arrays fall back to :func:`route` per element.
    """
    keys = np.asarray(keys)
    if keys.ndim != 1:
        raise UnroutableKey(
            f"the rows of a {keys.ndim}-dimensional array cannot be routed: give one key per "
            "record (a one-dimensional array or a key column)"
        )
    kind = keys.dtype.kind
    if kind in "bi":
        return np.remainder(keys, peers, dtype=np.int64, casting="unsafe")
    if kind == "u":
        return (keys % np.uint64(peers)).astype(np.int64)
    if kind == "f":
        return _route_floats(keys.astype(np.float64, copy=False), peers)
    if kind in "US":
        if len(keys) == 0:
            return np.zeros(0, dtype=np.int64)
        distinct, where = np.unique(keys, return_inverse=True)
        table = np.fromiter((route(k, peers) for k in distinct.tolist()), np.int64, len(distinct))
        return table[where.reshape(-1)]
    if kind == "O":
        return np.fromiter((route(k, peers) for k in keys), np.int64, len(keys))
    raise UnroutableKey(f"keys of numpy dtype {keys.dtype} cannot be routed")


def _route_floats(x: np.ndarray, peers: int) -> np.ndarray:
    """Integral floats as the equal ``int`` (``fmod`` of an integral double is exact, so
    ``remainder`` equals ``int(x) % peers`` even for ``1e300``); others by the hash of their
    IEEE-754 bits, as :func:`~.hashing.stable_hash` does for a ``float``."""
    dest = np.empty(len(x), dtype=np.int64)
    with np.errstate(invalid="ignore"):
        integral = np.isfinite(x) & (np.floor(x) == x)
    dest[integral] = np.remainder(x[integral], peers)
    rest = ~integral
    if rest.any():
        h = x[rest].view(np.uint64) ^ _FLOAT
        h *= _GOLDEN  # wraps modulo 2**64, as hashing._mix
        h ^= h >> np.uint64(32)
        dest[rest] = h % np.uint64(peers)
    return dest


def route_arrow(keys: Any, peers: int) -> np.ndarray:
    """:func:`route` of every element of an Arrow ``Array`` or ``ChunkedArray`` (its
    ``as_py()`` value; a null routes as ``None``), as an ``int64`` numpy array."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    kind = keys.type
    if pa.types.is_dictionary(kind):
        table = route_arrow(keys.dictionary, peers)
        return _with_nulls(keys, table[pc.fill_null(keys.indices, 0).to_numpy()], peers)
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
        filled = pc.fill_null(keys, False if pa.types.is_boolean(kind) else 0)
        return _with_nulls(keys, route_array(filled.to_numpy(zero_copy_only=False), peers), peers)
    if (
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    ):
        encoded = keys.dictionary_encode()
        table = np.fromiter(
            (route(k, peers) for k in encoded.dictionary.to_pylist()),
            np.int64,
            len(encoded.dictionary),
        )
        indices = pc.fill_null(encoded.indices, 0).to_numpy()
        return _with_nulls(keys, table[indices] if len(table) else indices.astype(np.int64), peers)
    return np.fromiter((route(k, peers) for k in keys.to_pylist()), np.int64, len(keys))


def _with_nulls(keys: Any, dest: np.ndarray, peers: int) -> np.ndarray:
    if keys.null_count:
        dest = dest.copy()
        dest[~keys.is_valid().to_numpy(zero_copy_only=False)] = route(None, peers)
    return dest
