"""The compiled drains of a child's counts (``pytimely._speedups``) give exactly what
``ChangeBatch.drain_at_into`` / ``drain_located_into`` give: the same located counts, both
batches consolidated, the drained batch empty; and the scope uses them only when built."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pytimely as pt
from pytimely import _native
from pytimely.order import Product
from pytimely.progress import subgraph
from pytimely.progress.change_batch import ChangeBatch

speedups = _native.speedups
compiled = pytest.mark.skipif(
    speedups is None or not hasattr(speedups, "drain_at_into"),
    reason="the compiled extension is not built",
)

times = st.one_of(st.integers(0, 5), st.builds(Product, st.integers(0, 3), st.integers(0, 3)))
deltas = st.integers(-3, 3).filter(bool) | st.sampled_from([2**70, -(2**70)])
counts = st.lists(st.tuples(times, deltas), max_size=12)
located = st.lists(st.tuples(st.tuples(st.integers(0, 3), times), deltas), max_size=12)
weights = st.sampled_from([1, -1, 2, 3])


def _pair(changes, into_changes):
    return ChangeBatch(changes), ChangeBatch(into_changes)


@compiled
@settings(max_examples=300, deadline=None, derandomize=True)
@given(counts, located, st.integers(0, 3), weights)
def test_drain_at_into_matches_the_python_method(changes, into_changes, loc, weight):
    a, into_a = _pair(changes, into_changes)
    b, into_b = _pair(changes, into_changes)
    ChangeBatch.drain_at_into(a, into_a, loc, weight)
    speedups.drain_at_into(b, into_b, loc, weight)
    assert dict(into_b) == dict(into_a) and list(into_b) == list(into_a)  # order kept too
    assert not a and not b
    assert all(d != 0 for _k, d in into_b)


@compiled
@settings(max_examples=300, deadline=None, derandomize=True)
@given(counts, located, st.lists(st.tuples(st.integers(0, 3), weights), max_size=3))
def test_drain_located_into_matches_the_python_method(changes, into_changes, locations):
    a, into_a = _pair(changes, into_changes)
    b, into_b = _pair(changes, into_changes)
    ChangeBatch.drain_located_into(a, into_a, locations)
    speedups.drain_located_into(b, into_b, tuple(locations))
    assert dict(into_b) == dict(into_a) and list(into_b) == list(into_a)
    assert not a and not b
    assert all(d != 0 for _k, d in into_b)


@compiled
def test_the_compiled_drains_refuse_what_the_method_would_not_take():
    batch = ChangeBatch([(1, 1)])
    with pytest.raises(ValueError, match="into itself"):
        speedups.drain_at_into(batch, batch, 0, 1)
    with pytest.raises(TypeError, match="ChangeBatch"):
        speedups.drain_at_into(batch, [], 0, 1)
    with pytest.raises(TypeError, match="pairs"):
        speedups.drain_located_into(batch, ChangeBatch(), [3])
    assert batch == {1: 1}  # nothing drained by a refused call


def test_a_scope_drains_with_the_compiled_functions_only_when_they_exist(monkeypatch):
    if speedups is not None and hasattr(speedups, "drain_at_into"):
        assert subgraph._drains() == (speedups.drain_at_into, speedups.drain_located_into)
    monkeypatch.setattr(_native, "speedups", None)
    assert subgraph._drains() == (ChangeBatch.drain_at_into, ChangeBatch.drain_located_into)

    def build(scope):  # the pure path still counts right: a loop completes, in order
        start = scope.to_stream(range(5))

        def body(inner):
            handle, loop = inner.feedback(1)
            step = start.enter(inner).concat(loop).map(lambda x: x + 1)
            step.filter(lambda x: x < 10).connect_loop(handle)
            return step.filter(lambda x: x == 10).leave()

        return scope.iterative(body).capture()

    assert pt.example(build).extract() == [(0, [10] * 5)]
