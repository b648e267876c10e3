"""Every piece in its layer: the import graph and the homes of shared pieces.

The dataflow layer must not import the capture storage layer (the event model lives beside the
capture/replay operators, as in timely dataflow's ``dataflow/operators/core/capture/``), and
generic helpers live outside the packages that first needed them.
"""

from __future__ import annotations

import subprocess
import sys

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
