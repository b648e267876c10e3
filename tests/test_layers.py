"""Every piece in its layer: the import graph and the homes of shared pieces.

The dataflow layer must not import the capture storage layer (the event model lives beside the
capture/replay operators, as in timely dataflow's ``dataflow/operators/core/capture/``), and
generic helpers live outside the packages that first needed them.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest


def _modules_after(statement: str) -> set[str]:
    """The ``pytimely`` modules loaded by a fresh interpreter after ``statement``."""
    listing = "print('\\n'.join(m for m in sys.modules if m.startswith('pytimely')))"
    code = f"{statement}\nimport sys\n{listing}"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return set(out.stdout.split())


def test_dataflow_does_not_load_the_capture_storage_layer():
    loaded = _modules_after("import pytimely.dataflow")
    assert "pytimely.dataflow.operators.event" in loaded
    assert not {m for m in loaded if m.startswith("pytimely.capture")}


def test_capture_reexports_the_event_model_and_replay_without_lazy_lookup():
    import pytimely.capture as capture
    import pytimely.capture.event as old_path
    from pytimely.dataflow.operators import event, replay

    assert "__getattr__" not in vars(capture)
    assert vars(capture)["replay_into"] is replay.replay_into
    assert vars(capture)["ReplayHandle"] is replay.ReplayHandle
    for name in event.__all__:
        assert getattr(capture, name) is getattr(event, name)
        assert getattr(old_path, name) is getattr(event, name)


def test_batch_kind_names_every_container_once():
    from pytimely.capture import codec, parquet
    from pytimely.dataflow.operators.event import batch_kind

    pa = pytest.importorskip("pyarrow")
    rb = pa.record_batch({"x": [1, 2]})
    assert batch_kind([1, 2]) is None
    assert batch_kind((1, 2)) is None
    assert batch_kind(np.arange(3)) == "numpy"
    assert batch_kind(np.int64(3)) is None  # a numpy scalar is not a batch
    assert batch_kind(rb) == "RecordBatch"
    assert batch_kind(pa.Table.from_batches([rb])) == "Table"
    # The storage layer uses this one helper rather than copies of its own.
    for module in (codec, parquet):
        assert not {"_is_numpy", "_arrow_kind", "_numpy_type", "_arrow_type"} & set(vars(module))


def test_open_loop_harness_is_generic_and_nexmark_reexports_it():
    import pytimely as pt
    from pytimely import openloop
    from pytimely.nexmark import latency

    for name in ("DNF_NS", "LatencyHistogram", "merge_results", "run_open_loop"):
        assert getattr(latency, name) is getattr(openloop, name)
    assert not _modules_after("import pytimely.openloop") & {"pytimely.nexmark"}

    def work(worker):
        return openloop.run_open_loop(
            worker,
            lambda scope, stream: stream.map(lambda x: x),
            rate=2_000,
            duration=0.3,
            quantum_log2=20,
            warmup=0.05,
        )

    summary = openloop.merge_results(pt.execute(work, workers=1, timeout=30))
    assert summary["offered"] > 0 and summary["records"] > 0
    assert not summary["dnf"] and 0 < summary["p50_ms"] <= summary["max_ms"] < 1000


def test_nexmark_generator_is_split_along_its_seams_and_reexports_everything():
    import pytimely.nexmark as nexmark
    from pytimely.nexmark import generator
    from pytimely.nexmark.generator import columnar, model, rng, scalar

    homes = {
        "NexmarkConfig": model,
        "EventBatch": model,
        "Bid": model,
        "CITIES": model,
        "Pcg64Mcg": rng,
        "raw_draws": rng,
        "prices_from_u24": rng,
        "ScalarWorkerGenerator": scalar,
        "generate_scalar": scalar,
        "WorkerStream": columnar,
        "generate": columnar,
    }
    for name, module in homes.items():
        assert getattr(generator, name) is vars(module)[name], name
    for name in nexmark.__all__:
        assert getattr(nexmark, name) is getattr(generator, name)
    # The scalar reference path does not depend on the fast path, nor the model on either.
    assert not {"columnar", "scalar"} & set(vars(model)) and "columnar" not in vars(scalar)


def test_tcp_allocator_takes_its_sockets_from_the_mesh_module():
    from pytimely.communication import mesh, tcp

    assert tcp.build_mesh is mesh.build_mesh
    assert not {"_connect", "_build_mesh", "_listen", "_Acceptor"} & set(vars(tcp))
    assert mesh.HANDSHAKE_TIMEOUT > 0


# -- allowed import directions between the rooms of the package ------------------------------

# A module's room is the first entry of ROOMS whose prefix its dotted name starts with.
ROOMS = [
    ("pytimely.dataflow.operators", "operators"),
    ("pytimely.dataflow.exchange", "exchange"),
    ("pytimely.dataflow", "dataflow"),
    ("pytimely.progress", "progress"),
    ("pytimely.communication", "communication"),
    ("pytimely.capture", "capture"),
    ("pytimely.io", "io"),
    ("pytimely.spark", "spark"),
    ("pytimely.nexmark", "nexmark"),
    ("pytimely.differential", "differential"),
    ("pytimely.order", "base"),
    ("pytimely.errors", "base"),
    ("pytimely.naming", "base"),
    ("pytimely.windows", "base"),
    ("pytimely._native", "native"),
    ("pytimely._speedups", "native"),
    ("pytimely._extras", "native"),
    ("pytimely.synchronization", "base"),
    ("pytimely.worker", "runtime"),
    ("pytimely.termination", "runtime"),
    ("pytimely.eventlog", "eventlog"),
    ("pytimely.execute", "running"),
    ("pytimely.testing", "running"),
    ("pytimely.graph", "tools"),
    ("pytimely.dashboard", "tools"),
    ("pytimely.metrics", "tools"),
    ("pytimely.openloop", "tools"),
    ("pytimely.graph_tool", "tools"),
    ("pytimely.demo", "apps"),
    ("pytimely.cli", "apps"),
    ("pytimely.__main__", "apps"),
    ("pytimely", "package"),  # pytimely/__init__.py and its names (__version__): no module
]

# Which rooms each room may import (its own room always).  Read downwards: the base knows
# nothing; progress knows only the base; the dataflow layer never imports the worker, the
# event log, the storage layer or the integrations; communication knows no dataflow; the
# event log observes operators through an interface of its own, not the dataflow layer.
ALLOWED = {
    "base": set(),
    "native": {"base"},
    "progress": {"base", "native"},  # native: the compiled drains of progress counts
    "communication": {"base", "native"},
    "exchange": {"base", "native", "communication", "dataflow"},  # dataflow: WorkerServices
    "dataflow": {"base", "native", "progress", "communication", "exchange", "operators"},
    "operators": {"base", "native", "progress", "dataflow", "exchange"},
    "eventlog": {"base", "native", "progress"},
    "runtime": {"base", "native", "progress", "communication", "dataflow", "eventlog", "tools"},
    "running": {
        "base",
        "native",
        "progress",
        "communication",
        "dataflow",
        "runtime",
        "eventlog",
        "tools",
    },
    "capture": {"base", "native", "communication", "dataflow", "operators"},
    # native: the compiled lookup of a key's updates across a trace's batches
    "differential": {"base", "native", "progress", "dataflow", "operators", "running"},
    # Sources, sinks and checkpoints: jobs run on the worker, state through the dataflow's
    # snapshot registry, checkpoint parts in the capture file format.
    "io": {"base", "native", "progress", "dataflow", "operators", "runtime", "capture"},
    "tools": {"base", "native", "communication", "runtime", "eventlog"},
    "spark": {
        "io",
        "base",
        "native",
        "progress",
        "communication",
        "dataflow",
        "exchange",
        "operators",
        "runtime",
        "eventlog",
        "running",
        "capture",
        "tools",
        "package",
    },
    "nexmark": {
        "base",
        "native",
        "progress",
        "capture",
        "dataflow",
        "exchange",
        "operators",
        "running",
        "tools",
        "spark",
        "package",
    },
    "apps": {
        "base",
        "native",
        "capture",
        "nexmark",
        "spark",
        "tools",
        "runtime",
        "eventlog",
        "running",
        "package",
    },
    "package": {
        "base",
        "native",
        "progress",
        "dataflow",
        "operators",
        "runtime",
        "eventlog",
        "running",
        "tools",
    },
}


# What must never be allowed, whatever the table above becomes: (room, rooms it may not import).
FORBIDDEN = [
    ("progress", {"dataflow", "operators", "exchange", "communication", "runtime", "eventlog"}),
    ("progress", {"running", "capture", "spark", "nexmark"}),  # (two lines: one is too long)
    ("dataflow", {"runtime", "eventlog", "running", "spark", "nexmark", "capture"}),
    ("operators", {"runtime", "eventlog", "running", "spark", "nexmark", "capture"}),
    ("exchange", {"runtime", "eventlog", "running", "spark", "nexmark", "capture", "progress"}),
    ("eventlog", {"dataflow", "operators", "exchange", "runtime", "communication"}),
    ("communication", {"dataflow", "operators", "exchange", "progress", "runtime", "eventlog"}),
]


def _room(module: str) -> str:
    for prefix, room in ROOMS:
        if module == prefix or module.startswith(prefix + "."):
            return room
    raise AssertionError(f"{module} is in no room: add it to ROOMS")


def _modules() -> list[str]:
    """The dotted name of every module of the package."""
    from pathlib import Path

    import pytimely

    root = Path(pytimely.__file__).parent
    return sorted(
        ".".join(p for p in path.relative_to(root.parent).with_suffix("").parts if p != "__init__")
        for path in root.rglob("*.py")
    )


def test_every_module_has_a_room():
    """A new module of the package root is placed in ROOMS on purpose, not by the catch-all
    ``pytimely`` entry (which is for ``__init__.py`` and the names it holds)."""
    unplaced = [
        m
        for m in _modules()
        if m != "pytimely"
        and next(p for p, _ in ROOMS if m == p or m.startswith(p + ".")) == "pytimely"
    ]
    assert not unplaced, f"modules in no room (add them to ROOMS): {unplaced}"


def _imports() -> list[tuple[str, int, str]]:
    """Every ``(importing file, line, imported pytimely module)`` of the package: module
    level, inside functions and under ``TYPE_CHECKING`` alike."""
    import ast
    from pathlib import Path

    import pytimely

    root = Path(pytimely.__file__).parent
    out = []
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        package = parts if is_package else parts[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                names = [f"{target}.{a.name}" for a in node.names]
                # ``from . import x`` names a module; ``from .m import f`` names m's member
                targets = names if not node.module else [target]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for t in targets:
                if t == "pytimely" or t.startswith("pytimely."):
                    out.append((str(path.relative_to(root.parent)), node.lineno, t))
    return out


def test_rooms_import_only_in_the_allowed_directions():
    violations = []
    for path, line, target in _imports():
        module = path[:-3].replace("/", ".").removesuffix(".__init__")
        mine, theirs = _room(module), _room(target)
        if theirs != mine and theirs not in ALLOWED[mine]:
            violations.append(f"{path}:{line}: {mine} imports {theirs} ({target})")
    assert not violations, "imports against the direction of the rooms:\n" + "\n".join(violations)


def test_the_table_keeps_the_key_rules():
    """Widening ALLOWED may not open a forbidden direction (progress knows nothing of
    dataflows, the dataflow layer nothing of the worker or the event log, ...)."""
    assert set(ALLOWED) == {room for _, room in ROOMS}
    opened = [
        f"{room} -> {sorted(ALLOWED[room] & no)}" for room, no in FORBIDDEN if ALLOWED[room] & no
    ]
    assert not opened, f"the table allows forbidden directions: {opened}"


# Import cycles tolerated for now, each the sorted list of its modules (a strongly connected
# component of the runtime import graph).  Empty: when ``stream.py`` and the modules of
# ``dataflow/operators/`` still imported each other at runtime, their cycle went here until
# its removal; a cycle found again goes here only while someone is removing it.
KNOWN_CYCLES: list[list[str]] = []


def _runtime_imports() -> dict[str, set[str]]:
    """Module -> the package modules that importing it runs: its imports at module level
    (also inside ``try``, ``with``, class bodies and an ``if`` other than ``TYPE_CHECKING``,
    but not inside functions), and the ``__init__`` of every package an imported module is in
    (bar the importer's own packages, which are already being imported)."""
    import ast
    from pathlib import Path

    import pytimely

    root = Path(pytimely.__file__).parent
    modules = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        modules[".".join(p for p in parts if p != "__init__")] = (path, parts[-1] == "__init__")

    def run_at_import(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                yield node
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                yield from run_at_import(node.orelse)
            else:  # class, try, with, for, while, another if, match: run at import
                for field in ("body", "orelse", "finalbody"):
                    yield from run_at_import(getattr(node, field, []))
                for clause in getattr(node, "handlers", []) + getattr(node, "cases", []):
                    yield from run_at_import(clause.body)

    graph: dict[str, set[str]] = {}
    for module, (path, is_package) in modules.items():
        package = module.split(".") if is_package else module.split(".")[:-1]
        edges: set[str] = set()
        for node in run_at_import(ast.parse(path.read_text()).body):
            if isinstance(node, ast.ImportFrom):
                base = package[: len(package) - (node.level - 1)] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                for a in node.names:
                    name = f"{target}.{a.name}"
                    edges.add(name if name in modules else target)
            else:
                edges.update(a.name for a in node.names)
        ancestors = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
        for target in list(edges):
            parts = target.split(".")
            edges.update(".".join(parts[:i]) for i in range(1, len(parts)))
        graph[module] = {t for t in edges if t in modules and t != module and t not in ancestors}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycles_between_modules():
    """No two modules need each other when imported (the runtime import graph has no
    strongly connected component of more than one module), bar KNOWN_CYCLES."""
    graph = _runtime_imports()
    assert "pytimely.dataflow.stream" in graph and graph["pytimely.worker"]  # the graph is read
    bad = [c for c in _cycles(graph) if c not in KNOWN_CYCLES]
    assert not bad, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in bad)


def test_the_cycle_check_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
