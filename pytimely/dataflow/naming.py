"""Names that point at the user's code.

A dataflow of twenty ``map`` operators all called "Map" tells a user nothing when one of them
raises; the operator's address ``(0, 3)`` does not say which function it runs.  So operators
that run a user function name it by default, as ``Map(parse @ job.py:12)``: the function's
qualified name (without the ``<locals>`` of enclosing functions), the basename of the file that
defines it and the line of its ``def`` (or ``lambda``).  Bytewax renders functions the same way
for the same reason (``f_repr`` in ``pysrc/bytewax/dataflow.py`` of
https://github.com/bytewax/bytewax).

Names are computed once, when the dataflow is built, never per record.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

__all__ = ["describe_function", "operator_name"]


def describe_function(f: Callable[..., Any]) -> str:
    """``f`` as ``qualname @ file.py:line``, or just its name when it has no Python source
    (a builtin, a numpy ufunc); a ``functools.partial`` is described by the function it wraps.

    >>> def parse(line): return line.split()
    >>> describe_function(parse)
    'parse @ <doctest pytimely.dataflow.naming.describe_function[0]>:1'
    >>> describe_function(lambda x: x).startswith('<lambda> @ ')
    True
    >>> describe_function(len), describe_function(functools.partial(len))
    ('len', 'partial(len)')
    """
    if isinstance(f, functools.partial):
        return f"partial({describe_function(f.func)})"
    name = getattr(f, "__qualname__", None) or getattr(f, "__name__", None)
    if not isinstance(name, str):
        name = type(f).__qualname__  # a callable object: its class says what it is
    name = name.rpartition("<locals>.")[2]
    code = getattr(f, "__code__", None)
    if code is None:
        return name
    return f"{name} @ {os.path.basename(code.co_filename)}:{code.co_firstlineno}"


def operator_name(name: str | None, kind: str, f: Callable[..., Any]) -> str:
    """The operator's name: the user's ``name`` if given, else ``kind(describe_function(f))``.

    >>> operator_name("Parse", "Map", len), operator_name(None, "Map", len)
    ('Parse', 'Map(len)')
    """
    return name if name is not None else f"{kind}({describe_function(f)})"
