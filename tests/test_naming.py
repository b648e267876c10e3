"""Errors and default operator names point at the user's function (``Map(parse @ file.py:12)``),
so one failing map among twenty says which one it is."""

from __future__ import annotations

import functools

import pytest

import pytimely as pt
from pytimely.errors import OperatorError
from pytimely.naming import describe_function

pytestmark = pytest.mark.timeout(30)

HERE = "test_naming.py"


def parse(line: str) -> int:
    return int(line)


def _failure(build) -> OperatorError:
    with pytest.raises(OperatorError) as info:
        pt.example(build)
    return info.value


def test_a_failing_map_is_named_after_its_function():
    err = _failure(lambda s: s.to_stream(["1", "x"]).map(parse).capture())
    where = f"parse @ {HERE}:{parse.__code__.co_firstlineno}"
    assert err.operator == f"Map({where})"
    assert f"operator 'Map({where})'" in str(err)
    assert isinstance(err.__cause__, ValueError)


def test_a_failing_lambda_is_named_by_its_line():
    bad = lambda x: 1 // x  # noqa: E731
    err = _failure(lambda s: s.to_stream([0]).filter(bad).capture())
    assert err.operator == f"Filter(<lambda> @ {HERE}:{bad.__code__.co_firstlineno})"


def test_a_user_chosen_name_is_kept_and_the_error_still_names_the_function():
    err = _failure(lambda s: s.to_stream(["x"]).map(parse, name="Parse").capture())
    assert err.operator == "Parse"
    assert str(err).endswith(f" in parse @ {HERE}:{parse.__code__.co_firstlineno}")


def test_the_logic_of_a_custom_operator_is_named_when_it_raises():
    def ctor(cap, info):
        cap.drop()

        def logic(inp, out):
            for _ref, batch in inp:
                raise KeyError(batch[0])

        return logic

    err = _failure(lambda s: s.to_stream(["k"]).unary(pt.Pipeline, "Lookup", ctor).capture())
    assert err.operator == "Lookup"
    line = ctor.__code__.co_firstlineno + 3
    assert str(err).endswith(f"raised KeyError: 'k' in logic @ {HERE}:{line}")


def boom(*_args):
    raise RuntimeError("boom")


@pytest.mark.parametrize(
    ("kind", "build"),
    [
        ("FlatMap", lambda s: s.to_stream(["a"]).flat_map(boom).probe()),
        ("Exchange", lambda s: s.to_stream(["a"]).exchange(boom).probe()),
        ("Partition", lambda s: s.to_stream(["a"]).partition(2, boom)[0].probe()),
        ("Branch", lambda s: s.to_stream(["a"]).branch(boom)[0].probe()),
        ("Accumulate", lambda s: s.to_stream(["a"]).accumulate(int, boom).probe()),
        ("Delay", lambda s: s.to_stream(["a"]).delay(boom).probe()),
    ],
)
def test_default_names_of_other_operators_name_their_function(kind, build):
    err = _failure(build)
    assert f"{kind}(boom @ {HERE}:{boom.__code__.co_firstlineno})" in str(err)


def test_describe_function_forms():
    assert describe_function(parse) == f"parse @ {HERE}:{parse.__code__.co_firstlineno}"
    assert describe_function(len) == "len"
    assert describe_function(functools.partial(parse)).startswith("partial(parse @ ")

    class Scale:
        def __call__(self, x):
            return 2 * x

        def apply(self, x):
            return x

    assert describe_function(Scale()) == "Scale"
    assert describe_function(Scale().apply).startswith("Scale.apply @ test_naming.py:")
