"""``Stream``'s operator methods are the operators themselves, so they cannot drift.

Every operator function of ``pytimely.dataflow.operators`` whose first parameter is a
``Stream`` is a method of :class:`~pytimely.dataflow.stream.Stream` by assignment
(``map = _map.map``): one signature, one docstring.  These tests hold that shape: the methods
*are* the functions, each takes the stream first, and a method written out by hand in
``stream.py`` does not merely call an operator (it would then repeat its signature).
"""

from __future__ import annotations

import ast
import inspect
import textwrap

from pytimely.dataflow.stream import Stream


def _public_methods() -> dict[str, object]:
    return {
        name: obj
        for name, obj in vars(Stream).items()
        if not name.startswith("_") and inspect.isfunction(obj)
    }


def test_operator_methods_are_the_operator_functions():
    operators = {
        name: f
        for name, f in _public_methods().items()
        if f.__module__.startswith("pytimely.dataflow.operators.")
    }
    assert len(operators) >= 39
    for name, f in operators.items():
        module = inspect.getmodule(f)
        assert getattr(module, f.__name__) is f, name
        first = next(iter(inspect.signature(f).parameters.values()))
        assert (first.name, first.annotation) == ("stream", "Stream"), (name, first)


def test_hand_written_methods_do_not_just_delegate():
    """A method of ``stream.py`` that only passes its parameters on to an operator function
    should be that function, assigned."""
    for name, method in _public_methods().items():
        if method.__module__ != "pytimely.dataflow.stream":
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
        body = tree.body[0].body
        statements = [s for s in body if not isinstance(s, ast.Expr)] or body[-1:]
        call = statements[-1].value if len(statements) == 1 else None
        params = list(inspect.signature(method).parameters)
        plain = (
            isinstance(call, ast.Call)
            and [a.id for a in call.args if isinstance(a, ast.Name)] == params
            and not call.keywords
        )
        assert not plain, f"Stream.{name} only delegates: assign the operator function instead"
