"""The dataflow graph of a worker, as data and as pictures.

:func:`describe` reads the installed dataflows through their scopes' public methods (names and
port counts from each scope's tracker, edges with their channel from ``Subgraph.edges()``,
nested scopes from ``Subgraph.nested_scopes()``) and returns plain data (the ``"json"`` format
of ``Worker.graph``)::

    {"dataflows": [{"index": 0, "name": "Dataflow 0", "scope": SCOPE}]}
    SCOPE = {"name", "address", "inputs", "outputs",
             "operators": [{"name", "address", "inputs", "outputs", "retired"}],
             "scopes": [SCOPE, ...],
             "edges": [{"source": {"address", "port"}, "target": {"address", "port"},
                        "pact": "Pipeline" | "Exchange" | "Broadcast", "feedback": bool}]}

An address is the path of child indices from the worker down (as in timely's operator
addresses).  An edge endpoint whose address is the scope's own is the scope boundary: as a
source it is scope input ``port``, as a target scope output ``port``.  A *feedback* edge is the
one given to ``connect_loop``: it closes a cycle (into the loop's ``Feedback`` operator).

:func:`operator_edges` resolves scope boundaries away (an edge into a nested scope continues
at the operators that scope input feeds), which is what the pictures draw: :func:`to_dot`
(Graphviz, nested scopes as clusters), :func:`to_mermaid` (``flowchart LR`` with subgraphs) and
:func:`to_svg` (a self-contained SVG with a simple layered layout, used by the dashboard and
when Graphviz is not installed).  Layering follows the longest-path method of Sugiyama, Tagawa
and Toda, "Methods for Visual Understanding of Hierarchical System Structures" (1981), without
crossing reduction.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "describe",
    "render",
    "operator_edges",
    "operators",
    "to_dot",
    "to_mermaid",
    "to_svg",
    "FORMATS",
]

#: The formats of ``Worker.graph``.
FORMATS = ("json", "dot", "mermaid", "svg")

Address = tuple[int, ...]


def describe(dataflows: Iterable[tuple[int, str, Any]]) -> dict[str, Any]:
    """The description (see the module docstring) of ``(index, name, subgraph)`` dataflows."""
    return {
        "dataflows": [
            {"index": index, "name": name, "scope": _describe_scope(subgraph)}
            for index, name, subgraph in dataflows
        ]
    }


def _describe_scope(sg: Any) -> dict[str, Any]:
    tracker = sg.tracker
    path = tuple(sg.path)
    nested = sg.nested_scopes()
    ops = []
    for node in range(1, len(tracker.node_names)):
        if node in nested:
            continue
        ops.append(
            {
                "name": tracker.node_names[node],
                "address": list(path + (node,)),
                "inputs": tracker.node_inputs[node],
                "outputs": tracker.node_outputs[node],
                "retired": sg.children[node] is None,
            }
        )

    def at(node: int) -> list[int]:
        return list(path if node == 0 else path + (node,))

    edges = [
        {
            "source": {"address": at(s), "port": sp},
            "target": {"address": at(t), "port": tp},
            "pact": "Pipeline" if pact == "Feedback" else pact,
            "feedback": pact == "Feedback",
        }
        for (s, sp), (t, tp), pact in sg.edges()
    ]
    return {
        "name": sg.name,
        "address": list(path),
        "inputs": sg.inputs,
        "outputs": sg.outputs,
        "operators": ops,
        "scopes": [_describe_scope(nested[i]) for i in sorted(nested)],
        "edges": edges,
    }


def _walk(scope: dict[str, Any]) -> Iterable[dict[str, Any]]:
    yield scope
    for inner in scope["scopes"]:
        yield from _walk(inner)


def operators(description: dict[str, Any]) -> list[dict[str, Any]]:
    """Every operator of every dataflow (nested scopes' included), in address order."""
    ops = [
        op for df in description["dataflows"] for s in _walk(df["scope"]) for op in s["operators"]
    ]
    return sorted(ops, key=lambda op: op["address"])


def operator_edges(description: dict[str, Any]) -> list[dict[str, Any]]:
    """Edges between operators, scope boundaries resolved away: ``{"source", "target"}``
    (operator addresses), ``"pact"`` (of the last hop, the one into the operator: crossing a
    scope boundary is a pipeline) and ``"feedback"`` (some hop closes a loop)."""
    scopes: set[Address] = set()
    # Wires by endpoint key (address, port, side): a scope's input p is (scope, p, "in") both as
    # the target of an edge outside it and as the source of edges inside it; likewise "out".
    wires: dict[tuple[Address, int, str], list[tuple[Address, int, str, str, bool]]] = {}
    for df in description["dataflows"]:
        for scope in _walk(df["scope"]):
            scopes.add(tuple(scope["address"]))
    for df in description["dataflows"]:
        for scope in _walk(df["scope"]):
            own = tuple(scope["address"])
            for e in scope["edges"]:
                s, t = tuple(e["source"]["address"]), tuple(e["target"]["address"])
                skey = (s, e["source"]["port"], "in" if s == own else "out")
                tside = "out" if t == own else "in"
                wires.setdefault(skey, []).append(
                    (t, e["target"]["port"], tside, e["pact"], e["feedback"])
                )
    out = []
    for op in operators(description):
        address = tuple(op["address"])
        for port in range(op["outputs"]):
            stack = [((address, port, "out"), False, 0)]
            seen = set()
            while stack:
                key, feedback, depth = stack.pop()
                if key in seen or depth > 64:
                    continue
                seen.add(key)
                for t, tport, side, pact, fb in wires.get(key, ()):
                    if t in scopes:  # a scope boundary: continue on its other side
                        stack.append(((t, tport, side), feedback or fb, depth + 1))
                    else:
                        out.append(
                            {
                                "source": list(address),
                                "source_port": port,
                                "target": list(t),
                                "target_port": tport,
                                "pact": pact,
                                "feedback": feedback or fb,
                            }
                        )
    return out


def render(description: dict[str, Any], format: str) -> str:
    """``description`` in one of :data:`FORMATS`."""
    if format == "json":
        return json.dumps(description, indent=2)
    if format == "dot":
        return to_dot(description)
    if format == "mermaid":
        return to_mermaid(description)
    if format == "svg":
        return to_svg(description)
    raise ValueError(f"graph(): unknown format {format!r}; use one of {', '.join(FORMATS)}")


def node_id(address: Iterable[int]) -> str:
    """An identifier for an operator or scope, usable in DOT, Mermaid and HTML."""
    return "n" + "_".join(str(a) for a in address)


def _label(op_or_scope: dict[str, Any]) -> str:
    return f"{op_or_scope['name']} {tuple(op_or_scope['address'])}"


def _dataflow_title(dataflow: dict[str, Any]) -> str:
    return f"dataflow {dataflow['index']}: {dataflow['name']}"


def _scope_lines(
    description: dict[str, Any],
    opening: Callable[[dict[str, Any], str], list[str]],
    operator: Callable[[dict[str, Any]], str],
    closing: str,
) -> list[str]:
    """The text lines that draw every dataflow's scopes, nested, in a text format (DOT,
    Mermaid): per scope, ``opening(scope, title)``, then ``operator(op)`` for each of its
    operators and its nested scopes drawn the same way one level deeper, then ``closing``.
    Each level is indented two spaces more, a dataflow's top scope by two."""
    lines: list[str] = []

    def scope(s: dict[str, Any], indent: str, title: str) -> None:
        lines.extend(indent + line for line in opening(s, title))
        for op in s["operators"]:
            lines.append(f"{indent}  {operator(op)}")
        for inner in s["scopes"]:
            scope(inner, indent + "  ", _label(inner))
        lines.append(indent + closing)

    for df in description["dataflows"]:
        scope(df["scope"], "  ", _dataflow_title(df))
    return lines


# -- Graphviz -------------------------------------------------------------------------------


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(description: dict[str, Any]) -> str:
    """Graphviz DOT: one cluster per dataflow and per nested scope."""
    lines = [
        "digraph pytimely {",
        '  rankdir=LR; fontname="Helvetica";',
        '  node [shape=box, style="rounded,filled", fillcolor="#e8eef8", fontname="Helvetica"];',
        '  edge [fontname="Helvetica", fontsize=10];',
    ]

    lines += _scope_lines(
        description,
        lambda s, title: [
            f"subgraph cluster_{node_id(s['address'])} {{",
            f'  label={_dot_quote(title)}; style=rounded; color="#8899aa";',
        ],
        lambda op: f"{node_id(op['address'])} [label={_dot_quote(_label(op))}];",
        "}",
    )
    for e in operator_edges(description):
        attrs = []
        if e["feedback"]:
            attrs += ['label="feedback"', "style=dashed", "constraint=false"]
        elif e["pact"] != "Pipeline":
            attrs.append(f"label={_dot_quote(e['pact'])}")
        if e["pact"] == "Exchange":
            attrs.append('color="#c05020"')
        elif e["pact"] == "Broadcast":
            attrs.append('color="#2060c0"')
        suffix = f" [{', '.join(attrs)}]" if attrs else ""
        lines.append(f"  {node_id(e['source'])} -> {node_id(e['target'])}{suffix};")
    lines.append("}")
    return "\n".join(lines) + "\n"


# -- Mermaid --------------------------------------------------------------------------------


def _mermaid_text(text: str) -> str:
    return '"' + text.replace('"', "#quot;") + '"'


def to_mermaid(description: dict[str, Any]) -> str:
    """A Mermaid ``flowchart LR``: nested scopes as subgraphs, feedback edges dotted."""
    lines = ["flowchart LR"]

    lines += _scope_lines(
        description,
        lambda s, title: [f"subgraph {node_id(s['address'])}s[{_mermaid_text(title)}]"],
        lambda op: f"{node_id(op['address'])}[{_mermaid_text(_label(op))}]",
        "end",
    )
    for e in operator_edges(description):
        a, b = node_id(e["source"]), node_id(e["target"])
        if e["feedback"]:
            lines.append(f"  {a} -.->|feedback| {b}")
        elif e["pact"] != "Pipeline":
            lines.append(f"  {a} -->|{e['pact']}| {b}")
        else:
            lines.append(f"  {a} --> {b}")
    return "\n".join(lines) + "\n"


# -- SVG with a layered layout ----------------------------------------------------------------

_GAP_X, _GAP_Y = 70, 18  # between layers, and between items of a layer
_BOX_W, _BOX_H = 150, 34
_PAD, _TITLE = 12, 20  # a scope frame's padding, and the height of its title
_PACT_COLOURS = {"Exchange": "#c05020", "Broadcast": "#2060c0"}


def layout(description: dict[str, Any]) -> dict[str, Any]:
    """Positions for :func:`to_svg`: ``{"nodes": {id: (x, y)}, "frames": [(scope, title, x0,
    y0, x1, y1)], "width", "height"}``.  Each scope is laid out on its own, as a block: its
    children (operators, and nested scopes as blocks) in layers by longest path from its
    sources, ignoring feedback edges (which close every cycle), stacked in address order.  So
    frames never overlap and a scope's operators stay together."""
    nodes: dict[str, tuple[float, float]] = {}
    frames: list[tuple[dict[str, Any], str, float, float, float, float]] = []
    y = 10.0
    width = 0.0
    for df in description["dataflows"]:
        w, h = _place(df["scope"], _dataflow_title(df), 10.0, y, nodes, frames)
        y += h + 20
        width = max(width, w + 20)
    return {"nodes": nodes, "frames": frames, "width": width or 200, "height": y}


def _block_size(scope: dict[str, Any]) -> tuple[float, float]:
    return _place(scope, "", 0.0, 0.0, {}, [])


def _place(
    scope: dict[str, Any],
    title: str,
    x: float,
    y: float,
    nodes: dict[str, tuple[float, float]],
    frames: list[Any],
) -> tuple[float, float]:
    """Lay ``scope`` out with its frame's top left corner at ``(x, y)``; returns its size."""
    own = tuple(scope["address"])
    depth = len(own)
    items: dict[int, tuple[str, dict[str, Any], float, float]] = {}
    for op in scope["operators"]:
        items[op["address"][depth]] = ("op", op, _BOX_W, _BOX_H)
    for inner in scope["scopes"]:
        w, h = _block_size(inner)
        items[inner["address"][depth]] = ("scope", inner, w, h)
    layer = dict.fromkeys(items, 0)
    succs: dict[int, list[int]] = {i: [] for i in items}
    waiting = dict.fromkeys(items, 0)
    for e in scope["edges"]:
        s, t = e["source"]["address"], e["target"]["address"]
        if e["feedback"] or len(s) == depth or len(t) == depth:
            continue  # a loop, or the scope boundary
        succs[s[depth]].append(t[depth])
        waiting[t[depth]] += 1
    ready = [i for i in items if not waiting[i]]
    while ready:  # Kahn's topological order; a cycle without feedback edge stays in layer 0
        i = ready.pop()
        for j in succs[i]:
            layer[j] = max(layer[j], layer[i] + 1)
            waiting[j] -= 1
            if not waiting[j]:
                ready.append(j)
    columns: dict[int, list[int]] = {}
    for i in sorted(items):
        columns.setdefault(layer[i], []).append(i)
    cx = x + _PAD
    bottom = y + _TITLE
    for col in sorted(columns):
        cy = y + _TITLE
        col_w = 0.0
        for i in columns[col]:
            kind, item, w, h = items[i]
            if kind == "op":
                nodes[node_id(item["address"])] = (cx, cy)
            else:
                _place(item, _label(item), cx, cy, nodes, frames)
            cy += h + _GAP_Y
            col_w = max(col_w, w)
        bottom = max(bottom, cy - _GAP_Y)
        cx += col_w + _GAP_X
    width = max(cx - _GAP_X + _PAD - x, 160.0) if columns else 160.0
    height = bottom + _PAD - y + (_BOX_H if any(e["feedback"] for e in scope["edges"]) else 0)
    frames.append((scope, title, x, y, x + width, y + height))
    return width, height


def to_svg(description: dict[str, Any]) -> str:
    """A self-contained SVG picture: operators as boxes (``id`` = :func:`node_id`, for the
    dashboard to recolour), scopes as dashed frames around their operators, exchange edges
    orange, broadcast blue, feedback dashed."""
    pos = layout(description)
    nodes = pos["nodes"]
    esc = html.escape
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{pos["width"]}" '
        f'height="{pos["height"]}" viewBox="0 0 {pos["width"]} {pos["height"]}" '
        'font-family="Helvetica, Arial, sans-serif" font-size="12">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'fill="#556"/></marker></defs>',
        '<rect width="100%" height="100%" fill="white"/>',
    ]
    for scope, title, x0, y0, x1, y1 in sorted(pos["frames"], key=lambda f: len(f[0]["address"])):
        parts.append(
            f'<g class="scope" id="{node_id(scope["address"])}s"><rect x="{x0}" y="{y0}" '
            f'width="{x1 - x0}" height="{y1 - y0}" rx="10" fill="none" stroke="#8899aa" '
            f'stroke-dasharray="5,3"/><text x="{x0 + 8}" y="{y0 + 14}" fill="#556" '
            f'font-size="11">{esc(title)}</text></g>'
        )
    for e in operator_edges(description):
        sx, sy = nodes[node_id(e["source"])]
        tx, ty = nodes[node_id(e["target"])]
        x0, y0 = sx + _BOX_W, sy + _BOX_H / 2
        x1, y1 = tx, ty + _BOX_H / 2
        colour = _PACT_COLOURS.get(e["pact"], "#556")
        dash = ' stroke-dasharray="6,4"' if e["feedback"] else ""
        if e["feedback"]:  # loop back below the boxes
            low = max(y0, y1) + _BOX_H + 4
            d = f"M{x0},{y0} C{x0 + 60},{low} {x1 - 60},{low} {x1},{y1}"
            label, lx, ly = "feedback", (x0 + x1) / 2, low - 4
        else:
            mid = (x0 + x1) / 2
            d = f"M{x0},{y0} C{mid},{y0} {mid},{y1} {x1},{y1}"
            label = "" if e["pact"] == "Pipeline" else e["pact"]
            lx, ly = mid, (y0 + y1) / 2 - 4
        parts.append(
            f'<path class="edge" d="{d}" fill="none" stroke="{colour}" '
            f'stroke-width="1.4"{dash} marker-end="url(#arrow)"/>'
        )
        if label:
            parts.append(
                f'<text x="{lx}" y="{ly}" fill="{colour}" font-size="10" '
                f'text-anchor="middle">{label}</text>'
            )
    for op in operators(description):
        x, y = nodes[node_id(op["address"])]
        name = op["name"] if len(op["name"]) <= 22 else op["name"][:21] + "…"
        parts.append(
            f'<g class="operator" id="{node_id(op["address"])}"><title>{esc(_label(op))}</title>'
            f'<rect x="{x}" y="{y}" width="{_BOX_W}" height="{_BOX_H}" rx="6" fill="#e8eef8" '
            f'stroke="#445"/><text x="{x + _BOX_W / 2}" y="{y + 14}" text-anchor="middle">'
            f'{esc(name)}</text><text class="sub" x="{x + _BOX_W / 2}" y="{y + 28}" '
            f'text-anchor="middle" font-size="10" fill="#556">'
            f"{esc(str(tuple(op['address'])))}</text></g>"
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
