"""``Stream``'s operator methods cannot drift from the operators they delegate to.

Every method of :class:`~pytimely.dataflow.stream.Stream` that ends in ``return
_module.function(self, ...)`` must have the operator function's signature after its first
parameter (names, kinds, defaults and annotations, as written) and pass its parameters on in
order, by name.  Adding a parameter to an operator, renaming one or changing a default in only
one of the two places fails here.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest

from pytimely.dataflow import stream as stream_module
from pytimely.dataflow.stream import Stream


def _delegations() -> list[tuple[str, object, list[str]]]:
    """``(method name, operator function, argument names passed after self)``."""
    out = []
    for name, method in vars(Stream).items():
        if name.startswith("_") or not inspect.isfunction(method):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
        returns = [n for n in ast.walk(tree) if isinstance(n, ast.Return) and n.value is not None]
        call = returns[-1].value if returns else None
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id.startswith("_")
            and call.args
            and isinstance(call.args[0], ast.Name)
            and call.args[0].id == "self"
        ):
            continue
        module = getattr(stream_module, call.func.value.id)
        passed = [a.id if isinstance(a, ast.Name) else ast.dump(a) for a in call.args[1:]]
        passed += [f"{k.arg}={ast.unparse(k.value)}" for k in call.keywords]
        out.append((name, getattr(module, call.func.attr), passed))
    return out


DELEGATIONS = _delegations()


def test_most_operator_methods_delegate():
    assert len(DELEGATIONS) > 30


@pytest.mark.parametrize(("name", "function", "passed"), DELEGATIONS, ids=lambda x: str(x)[:30])
def test_method_has_the_operator_signature(name, function, passed):
    method = inspect.signature(getattr(Stream, name))
    operator = inspect.signature(function)
    mine = list(method.parameters.values())[1:]
    theirs = list(operator.parameters.values())[1:]
    assert [(p.name, p.kind, p.default, p.annotation) for p in mine] == [
        (p.name, p.kind, p.default, p.annotation) for p in theirs
    ], f"Stream.{name} and {function.__module__}.{function.__name__} differ"
    assert method.return_annotation == operator.return_annotation, name
    expected = [
        p.name if p.kind is not p.KEYWORD_ONLY else f"{p.name}={p.name}"
        for p in mine
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    varargs = [p for p in mine if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if not varargs:
        assert passed == expected, f"Stream.{name} passes {passed}, expected {expected}"
