"""The docstring examples of the public API run as tests, so they cannot rot."""

from __future__ import annotations

import doctest
import importlib

import pytest

pytestmark = pytest.mark.timeout(60)

MODULES = [
    "pytimely.windows",
    "pytimely.dataflow.operators.windowing",
    "pytimely.dataflow.operators.keyed",
    "pytimely.dataflow.operators.join",
]


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples_run(module_name):
    module = importlib.import_module(module_name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{module_name} has no docstring examples"
    assert result.failed == 0, f"{result.failed} docstring example(s) of {module_name} failed"
