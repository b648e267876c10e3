"""``worker.graph()`` and ``pytimely graph``: the dataflow graph as JSON, DOT, Mermaid, SVG."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

import pytimely as pt
from pytimely import graph

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _halving(scope):
    """Input -> [Iterative: Feedback, Concat, Map, Exchange, Filter, loop] -> Inspect, and a
    Broadcast edge from the input to a second Inspect."""
    inp, numbers = scope.new_input()

    def loop(inner):
        handle, back = inner.feedback(1)
        halves = (
            numbers.enter(inner)
            .concat(back)
            .map(lambda x: x // 2)
            .exchange(lambda x: x)
            .filter(lambda x: x > 0)
        )
        halves.connect_loop(handle)
        return halves.leave()

    scope.iterative(loop, name="Halving").inspect(lambda x: None)
    numbers.broadcast().inspect(lambda x: None)
    return inp


@pytest.fixture
def worker():
    w = pt.Worker()
    w.dataflow(_halving, name="halving")
    return w


def _kind(name):
    """``Map`` of ``Map(<lambda> @ test_graph.py:26)``: default names also name the function."""
    return name.partition("(")[0]


def _names(description):
    return {_kind(op["name"]): tuple(op["address"]) for op in graph.operators(description)}


def test_json_has_operators_nested_scope_pacts_and_the_feedback_edge(worker):
    d = json.loads(worker.graph("json"))
    [df] = d["dataflows"]
    assert (df["index"], df["name"]) == (0, "halving")
    root = df["scope"]
    assert [_kind(op["name"]) for op in root["operators"]] == [
        "Input",
        "Inspect",
        "Broadcast",
        "Inspect",
    ]
    [loop] = root["scopes"]
    assert loop["name"] == "Halving" and loop["address"] == [0, 2]
    assert [_kind(op["name"]) for op in loop["operators"]] == [
        "Feedback",
        "Concat",
        "Map",
        "Exchange",
        "Filter",
    ]
    assert all(op["address"][:2] == [0, 2] for op in loop["operators"])
    names = _names(d)
    edges = {(tuple(e["source"]), tuple(e["target"])): e for e in graph.operator_edges(d)}
    into_exchange = edges[(names["Map"], names["Exchange"])]
    assert (into_exchange["pact"], into_exchange["feedback"]) == ("Exchange", False)
    loop_back = edges[(names["Filter"], names["Feedback"])]
    assert (loop_back["pact"], loop_back["feedback"]) == ("Pipeline", True)
    assert [e for e in graph.operator_edges(d) if e["feedback"]] == [loop_back]
    assert edges[(names["Input"], names["Broadcast"])]["pact"] == "Broadcast"
    # Scope boundaries are resolved: the input feeds Concat inside the loop, Filter feeds the
    # Inspect outside it.
    assert (names["Input"], names["Concat"]) in edges
    assert (names["Filter"], (0, 3)) in edges
    # The raw edges keep the boundary: scope input 0 of the loop, seen from inside.
    inner_sources = [e["source"] for e in loop["edges"] if e["source"]["address"] == [0, 2]]
    assert inner_sources == [{"address": [0, 2], "port": 0}]


def test_dot_has_clusters_labels_and_a_dashed_feedback_edge(worker):
    dot = worker.graph("dot")
    assert dot.startswith("digraph pytimely {")
    assert "subgraph cluster_n0 {" in dot and "subgraph cluster_n0_2 {" in dot
    assert 'label="Halving (0, 2)"' in dot
    assert 'n0_2_3 -> n0_2_4 [label="Exchange"' in dot
    assert 'n0_2_5 -> n0_2_1 [label="feedback", style=dashed, constraint=false]' in dot
    assert 'n0_1 -> n0_4 [label="Broadcast"' in dot
    assert "n0_2_2 -> n0_2_3;" in dot  # a pipeline edge is not labelled


def test_mermaid_has_subgraphs_pacts_and_a_dotted_feedback_edge(worker):
    mmd = worker.graph("mermaid")
    assert mmd.splitlines()[0] == "flowchart LR"
    assert '  subgraph n0s["dataflow 0: halving"]' in mmd
    assert '    subgraph n0_2s["Halving (0, 2)"]' in mmd
    assert "  n0_2_3 -->|Exchange| n0_2_4" in mmd
    assert "  n0_2_5 -.->|feedback| n0_2_1" in mmd
    assert mmd.count("end") == 2


def test_svg_is_well_formed_with_one_box_per_operator(worker):
    svg = worker.graph("svg")
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    boxes = {g.get("id") for g in root.iter(ns + "g") if g.get("class") == "operator"}
    assert boxes == {graph.node_id(a) for a in _names(json.loads(worker.graph())).values()} | {
        "n0_3",
        "n0_5",
    }
    frames = {g.get("id") for g in root.iter(ns + "g") if g.get("class") == "scope"}
    assert frames == {"n0s", "n0_2s"}
    assert any(p.get("stroke-dasharray") for p in root.iter(ns + "path"))  # the feedback edge


def test_an_unknown_format_is_named():
    with pytest.raises(ValueError, match="unknown format 'png'.*json, dot, mermaid, svg"):
        pt.Worker().graph("png")


def test_retired_operators_stay_in_the_graph():
    def build(scope):
        inp, live = scope.new_input()
        scope.to_stream([1]).concat(live).inspect(lambda x: None)
        return inp

    w = pt.Worker()
    inp = w.dataflow(build)
    w.step()
    retired = {_kind(op["name"]): op["retired"] for op in graph.operators(json.loads(w.graph()))}
    assert retired == {"Input": False, "ToStream": True, "Concat": False, "Inspect": False}
    inp.close()
    w.run()
    assert json.loads(w.graph()) == {"dataflows": []}  # completed dataflows are not installed


def _script(tmp_path, body: str) -> str:
    path = tmp_path / "job.py"
    path.write_text(body)
    return str(path)


_JOB = """
import pytimely as pt

def build(scope):
    inp, s = scope.new_input()
    s.exchange(lambda x: x).map(lambda x: x + 1).inspect(print)
    return inp

def work(worker):
    inp = worker.dataflow(build)
    for r in range(10**9):  # would run forever: pytimely graph must stop it at the first step
        inp.send(r)
        inp.advance_to(r + 1)
        worker.step()

if __name__ == "__main__":
    pt.execute(work, workers=2)
"""


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run(
        [sys.executable, "-m", "pytimely.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@pytest.mark.parametrize("ext", ["svg", "html", "dot", "json", "mmd"])
def test_pytimely_graph_writes_the_picture_of_a_script(tmp_path, ext):
    script = _script(tmp_path, _JOB)
    out = tmp_path / f"job.{ext}"
    done = _cli("graph", script, "-o", str(out), "--no-graphviz")
    assert done.returncode == 0, done.stderr
    assert "4 operators" in done.stderr
    text = out.read_text()
    for name in ("Input", "Exchange", "Map", "Inspect"):
        assert name in text
    if ext == "svg":
        ET.fromstring(text)
    if ext == "html":
        assert "<svg" in text and "flowchart LR" in text and "<script" not in text


def test_pytimely_graph_uses_graphviz_for_png(tmp_path):
    script = _script(tmp_path, _JOB)
    out = tmp_path / "job.png"
    done = _cli("graph", script, "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "graphviz" in done.stderr  # apt package graphviz, installed by scripts/ensure-browser.sh
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 2000


def test_pytimely_graph_function_builds_one_dataflow(tmp_path):
    script = _script(tmp_path, _JOB)
    out = tmp_path / "job.json"
    done = _cli("graph", script, "--function", "build", "-o", str(out))
    assert done.returncode == 0, done.stderr
    [df] = json.loads(out.read_text())["dataflows"]
    assert df["name"] == "build"
    missing = _cli("graph", script, "--function", "nope", "-o", str(out))
    assert missing.returncode == 2 and "defines no function 'nope'" in missing.stderr


def test_a_long_operator_name_is_shortened_in_its_box_and_whole_on_hover():
    def build(scope):
        running = scope.to_stream([("ann", 1)]).stateful_map(int, _a_step_with_a_long_name)
        return running.probe()

    w = pt.Worker()
    w.dataflow(build)
    root = ET.fromstring(w.graph("svg"))
    ns = "{http://www.w3.org/2000/svg}"
    [box] = [
        g for g in root.iter(ns + "g") if g.get("class") == "operator" and "Stateful" in g[0].text
    ]
    hover = box.find(ns + "title").text
    assert hover.startswith("StatefulMap(_a_step_with_a_long_name @ test_graph.py:")
    shown = [t.text for t in box.iter(ns + "text")]
    assert shown[0].endswith("…") and len(shown[0]) <= 22


def _a_step_with_a_long_name(state, value):
    return state + value, state
