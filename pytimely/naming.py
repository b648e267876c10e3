"""Names that point at the user's code.

A dataflow of twenty ``map`` operators all called "Map" tells a user nothing when one of them
raises; the operator's address ``(0, 3)`` does not say which function it runs.  So operators
that run a user function name it by default, as ``Map(parse @ job.py:12)``: the function's
qualified name (without the ``<locals>`` of enclosing functions), the basename of the file that
defines it and the line of its ``def`` (or ``lambda``).  Bytewax renders functions the same way
for the same reason (``f_repr`` in ``pysrc/bytewax/dataflow.py`` of
https://github.com/bytewax/bytewax).

Names are computed once, when the dataflow is built, never per record.  When user code
raises, :func:`raised_in` finds the user's function in the traceback, so the error names it
even under a name the user chose, and in the logic of a custom operator.

This module depends on nothing else in the package: both the progress layer (which wraps
exceptions into :class:`~pytimely.errors.OperatorError`) and the dataflow layer use it.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from types import CodeType
from typing import Any

from .errors import CapabilityError, OperatorCapabilityError, OperatorError

__all__ = ["describe_function", "operator_failure", "operator_name", "raised_in"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def describe_function(f: Callable[..., Any]) -> str:
    """``f`` as ``qualname @ file.py:line``, or just its name when it has no Python source
    (a builtin, a numpy ufunc) or is one of pytimely's own; a ``functools.partial`` is
    described by the function it wraps.

    >>> def parse(line): return line.split()
    >>> describe_function(parse)
    'parse @ <doctest pytimely.naming.describe_function[0]>:1'
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
    if code is None or _in_package(code):  # a location inside pytimely helps no user
        return name
    return _at(name, code)


def _in_package(code: CodeType) -> bool:
    return _is_package_file(code.co_filename)


@functools.lru_cache(maxsize=256)
def _is_package_file(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_PACKAGE)


def _at(name: str, code: CodeType) -> str:
    return f"{name} @ {os.path.basename(code.co_filename)}:{code.co_firstlineno}"


def operator_name(name: str | None, kind: str, f: Callable[..., Any]) -> str:
    """The operator's name: the user's ``name`` if given, else ``kind(describe_function(f))``.

    >>> operator_name("Parse", "Map", len), operator_name(None, "Map", len)
    ('Parse', 'Map(len)')
    """
    return name if name is not None else f"{kind}({describe_function(f)})"


def raised_in(exc: BaseException, operator: str) -> str:
    """``" in f @ file.py:line"`` for the user function that raised ``exc``: the first frame of
    its traceback outside this package that this package called (what the function called
    in turn stays in the traceback).  Empty when there is none, or when ``operator``, the
    operator's name, already names that function.

    >>> import pytimely as pt
    >>> def parse(line):
    ...     return int(line)
    >>> try:
    ...     pt.example(lambda s: s.to_stream(["x"]).map(parse, name="Parse"))
    ... except pt.errors.OperatorError as e:
    ...     print(e)
    operator 'Parse' at (0, 2) raised ValueError: invalid literal for int() with base 10: 'x' \
    in parse @ <doctest pytimely.naming.raised_in[1]>:1
    """
    tb = exc.__traceback__
    called_by_package = False
    while tb is not None:
        code = tb.tb_frame.f_code
        if _in_package(code):
            called_by_package = True
        elif called_by_package:
            where = _at(code.co_qualname.rpartition("<locals>.")[2], code)
            return "" if where in operator else f" in {where}"
        tb = tb.tb_next
    return ""


def operator_failure(exc: Exception, operator: str, address: tuple) -> OperatorError:
    """The error that names ``operator`` (at ``address``) and the user function in it that
    raised ``exc`` (raise it ``from exc``): an :class:`~pytimely.errors.OperatorError`, and
    also a :class:`~pytimely.errors.CapabilityError` when ``exc`` is one (token misuse stays
    catchable as such).  An exception whose message already says what and where (``leads``)
    comes first.

    >>> print(operator_failure(ValueError("no"), "Parse", (0, 2)))
    operator 'Parse' at (0, 2) raised ValueError: no
    """
    cls = OperatorCapabilityError if isinstance(exc, CapabilityError) else OperatorError
    where = f"operator {operator!r} at {address}"
    if getattr(exc, "leads", False):
        message = f"{exc} (raised while {where} sent it)"
    else:
        message = f"{where} raised {type(exc).__name__}: {exc}" + raised_in(exc, operator)
    return cls(message, operator, address)
