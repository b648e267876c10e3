"""The examples in the keyed operators' docstrings run and give the answers they show."""

from __future__ import annotations

import doctest

import pytest

from pytimely.dataflow.operators import join, keyed

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("module", [keyed, join], ids=lambda m: m.__name__)
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{module.__name__} has no docstring example"
    assert result.failed == 0
