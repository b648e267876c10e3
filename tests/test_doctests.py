"""The docstring examples of the public API run as tests, so they cannot rot."""

from __future__ import annotations

import doctest
import importlib
import inspect

import pytest

pytestmark = pytest.mark.timeout(60)

MODULES = [
    "pytimely.dataflow.stream",
    "pytimely.naming",
    "pytimely.windows",
    "pytimely.dataflow.operators.windowing.api",
    "pytimely.dataflow.operators.keyed",
    "pytimely.dataflow.operators.asynchronous",
    "pytimely.dataflow.operators.join",
    "pytimely.dataflow.snapshot",
    "pytimely.testing",
    "pytimely.eventlog",
    "pytimely.differential",
    "pytimely.differential.lattice",
    "pytimely.differential.trace",
    "pytimely.differential.collection",
    "pytimely.differential.input",
    "pytimely.differential.results",
    "pytimely.differential.arrange",
    "pytimely.differential.join",
    "pytimely.differential.reduce",
    "pytimely.differential.iterate",
    "pytimely.differential.total",
]

# Modules whose examples run, although not every public name in them has one (their builder
# API does: see BUILDERS).
RUN_ONLY = [
    # The io modules' examples are in their module docstrings: one job, source and sink each.
    "pytimely.io.api",
    "pytimely.io.checkpoint",
    "pytimely.io.files",
    "pytimely.io.directory",
    "pytimely.io.parquet",
    "pytimely.io.driver",
    "pytimely.io.staging",
    "pytimely.io.storage",
    "pytimely.capture.fileformat",
    "pytimely.io.kafka",
    "pytimely.io.postgres",
    "pytimely.io.postgres_cdc",
    "pytimely.dataflow.scope",
    "pytimely.spark.sinks",
    "pytimely.spark.datasource",
    "pytimely.spark.dataframe",
    "pytimely.spark.remote",
    "pytimely.spark.reasons",
    "pytimely.spark.session",
    "pytimely.spark.streaming",
    "pytimely.dataflow.operators.generic",
    "pytimely.dataflow.operators.tokens",
    "pytimely.dataflow.operators.windowing.event_sessions",
    "pytimely.dataflow.operators.windowing.count_windows",
    "pytimely.dataflow.operators.asof",
    "pytimely.metrics",
    "pytimely.dataflow.operators.input",
    "pytimely.communication.codec",
    "pytimely.communication.timers",
    "pytimely.dataflow.exchange",
]

# The methods users build dataflows with: each has an example.
BUILDERS = {
    "pytimely.dataflow.scope.Scope": [
        "new_input",
        "new_unordered_input",
        "to_stream",
        "replay",
        "source",
        "region",
        "iterative",
        "feedback",
    ],
    "pytimely.dataflow.operators.generic.OperatorBuilder": [""],  # the class docstring
}


@pytest.mark.parametrize("module_name", MODULES + RUN_ONLY)
def test_docstring_examples_run(module_name):
    module = importlib.import_module(module_name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{module_name} has no docstring examples"
    assert result.failed == 0, f"{result.failed} docstring example(s) of {module_name} failed"


@pytest.mark.parametrize("module_name", MODULES)
def test_every_public_function_and_class_has_an_example(module_name):
    module = importlib.import_module(module_name)
    public = [
        name
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and getattr(obj, "__module__", None) == module_name
        and (inspect.isfunction(obj) or inspect.isclass(obj))
    ]
    assert public, f"{module_name} defines no public functions or classes"
    missing = [name for name in public if ">>>" not in (getattr(module, name).__doc__ or "")]
    assert not missing, f"{module_name}: no docstring example for {', '.join(missing)}"


@pytest.mark.parametrize("qualified", sorted(BUILDERS))
def test_every_builder_method_has_an_example(qualified):
    module_name, _, class_name = qualified.rpartition(".")
    cls = getattr(importlib.import_module(module_name), class_name)
    missing = [
        name or class_name
        for name in BUILDERS[qualified]
        if ">>>" not in ((getattr(cls, name) if name else cls).__doc__ or "")
    ]
    assert not missing, f"{class_name}: no docstring example for {', '.join(missing)}"


def test_every_public_stream_method_has_an_example():
    from pytimely.dataflow.stream import Stream

    methods = [
        name
        for name, obj in vars(Stream).items()
        if not name.startswith("_") and inspect.isfunction(obj)
    ]
    assert len(methods) > 40, "Stream has its operator methods"
    missing = [name for name in methods if ">>>" not in (getattr(Stream, name).__doc__ or "")]
    assert not missing, f"Stream methods without a docstring example: {', '.join(missing)}"


def test_worker_log_to_example_runs():
    from pytimely.worker import Worker

    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    (test,) = finder.find(Worker.log_to, "Worker.log_to", globs={})
    assert test.examples, "Worker.log_to has no docstring example"
    result = runner.run(test)
    assert result.failed == 0, "the docstring example of Worker.log_to failed"
