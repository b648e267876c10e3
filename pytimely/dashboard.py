"""A live web dashboard of one worker: ``serve_dashboard(worker, port=8080)``; ``/metrics``
serves the same figures in Prometheus' text format (:mod:`pytimely.metrics`).

The page (no external resources: the graph is an inline SVG laid out by :mod:`pytimely.graph`)
shows every operator of the installed dataflows with each input's current frontier, the
records in flight towards it, the capabilities held (by this worker, and by all workers), its
activity over the last seconds (invocations per second, and the share of time spent in it when
the worker collects per-operator statistics), colour-coded in the graph; below, what holds the
frontiers (``Worker.describe()``) and the error that stopped the worker, e.g. a
:class:`~pytimely.errors.StuckError`'s explanation.  It polls ``/api/state`` twice a second.

Threads: the worker's dicts are only ever read on the worker's own thread.  A step observer
(``Worker.observe_steps``) builds a *snapshot* -- fresh plain data, never mutated afterwards --
at most every ``interval`` seconds and swaps it in under a lock; the HTTP thread (a daemon,
stdlib ``http.server``) only serves the latest snapshot.  A worker that is not stepping (parked,
or running user code) keeps its last snapshot.

With several worker processes the dashboard runs in worker 0: frontiers and records in flight
are the global view every worker's progress tracker agrees on; capabilities "held here",
invocations, timings and records are each worker's own.  When every worker calls
:func:`share_figures` at the same point of its program (``execute(..., dashboard=PORT)`` does,
before ``fn``), the other workers send theirs to worker 0 over the mesh, where they are merged
by operator and worker: each operator's ``workers`` maps a worker index to its figures, and its
own invocations, timings and records are the sums over the workers heard from.

Termination detection (:mod:`pytimely.termination`) counts data messages, and the figures are
data messages; so a worker sends them only if it stepped since the last ones it sent (and at
most every ``interval`` seconds): a worker that is idle sends nothing, so the figures neither
keep a stuck run from being declared stuck nor make an idle run look busy.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from . import graph
from .errors import GraphError, StuckError
from .metrics import prometheus_text

__all__ = ["Dashboard", "serve_dashboard", "share_figures", "snapshot", "worker_figures"]

#: Seconds over which the dashboard reports activity.
WINDOW = 5.0


def serve_dashboard(
    worker: Any, port: int = 8080, host: str = "127.0.0.1", interval: float = 0.2
) -> Dashboard:
    """Serve the dashboard of ``worker`` at ``http://host:port/`` (``port=0``: any free port;
    see :attr:`Dashboard.url`) from a daemon thread, until :meth:`Dashboard.close` or the end of
    the process.  A second call for the same address in this process re-attaches the running
    dashboard to ``worker`` (e.g. successive ``execute(..., dashboard=PORT)`` runs).

    Call it on the worker's thread, before or after building dataflows; the snapshot is taken
    at the end of the worker's steps, at most every ``interval`` seconds.  If the worker has
    ``enable_statistics()``, it is called so that the per-operator timings can be shown.
    """
    key = (host, port)
    with _LOCK:
        board = _SERVING.get(key) if port else None
        if board is None or board.closed:
            board = Dashboard(host, port, interval)
            _SERVING[(host, board.port)] = board
    board.attach(worker)
    return board


_LOCK = threading.Lock()
_SERVING: dict[tuple[str, int], Dashboard] = {}


class Dashboard:
    """A running dashboard (see :func:`serve_dashboard`).  Invariant: ``_state`` and
    ``_graph`` are replaced whole under ``_lock``, never mutated, so the HTTP thread may encode
    them while the worker goes on."""

    def __init__(self, host: str, port: int, interval: float) -> None:
        self.interval = interval
        self.closed = False
        self._lock = threading.Lock()
        self._state: dict[str, Any] = {"operators": {}, "worker": None}
        self._graph: dict[str, Any] = {"version": 0, "svg": "", "description": {"dataflows": []}}
        self._graph_key: Any = None
        self._history: deque[tuple[float, dict[str, tuple[int, float | None]]]] = deque()
        self._last = 0.0
        self._error: str | None = None
        self._verdict: str | None = None  # "stuck" or "failed" once an error was reported
        self._stop_observing: Any = None
        self._worker: Any = None
        self._peer_figures: dict[int, dict[str, Any]] = {}  # other workers' latest figures
        self._server = ThreadingHTTPServer((host, port), _handler(self))
        self._server.daemon_threads = True
        self.host = host
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"pytimely-dashboard-{self.port}", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        """The address to open in a browser: ``http://host:port/``."""
        return f"http://{self.host}:{self.port}/"

    def attach(self, worker: Any) -> None:
        """Show ``worker`` from now on (on the worker's thread)."""
        if self._stop_observing is not None:
            self._stop_observing()
        enable = getattr(worker, "enable_statistics", None)
        if callable(enable):
            enable()
        self._worker = worker
        self._error = None
        self._verdict = None
        self._peer_figures = {}
        self._history.clear()
        self._graph_key = None
        stop_steps = worker.observe_steps(self._on_step)
        stop_verdicts = worker.observe_verdicts(self.report_error)

        def stop() -> None:
            stop_steps()
            stop_verdicts()

        self._stop_observing = stop
        self.publish()

    def receive_figures(self, figures: dict[str, Any]) -> None:
        """Keep another worker's latest :func:`worker_figures` for the next snapshot (on the
        attached worker's thread, which receives them)."""
        self._peer_figures[figures["worker"]] = figures

    def _on_step(self) -> None:
        now = time.monotonic()
        if now - self._last >= self.interval:
            self.publish(now)

    def publish(self, now: float | None = None) -> None:
        """Take a snapshot of the attached worker now (on the worker's thread)."""
        worker = self._worker
        if worker is None:
            return
        now = time.monotonic() if now is None else now
        self._last = now
        key = tuple(worker.installed_dataflows())
        fresh_graph = None
        if key != self._graph_key and key:  # a finished run keeps showing its last graph
            self._graph_key = key
            description = graph.describe(worker.dataflow_scopes())
            fresh_graph = {
                "version": self._graph["version"] + 1,
                "svg": graph.to_svg(description),
                "description": description,
            }
        state = snapshot(worker)
        state["error"] = self._error
        state["workers"] = _merge_workers(state, self._peer_figures)
        state["peers_figures"] = {
            w: {"totals": f.get("totals"), "channels": f.get("channels")}
            for w, f in self._peer_figures.items()
        }
        rows = _activity_rows(state["operators"])
        state["activity_window_s"] = self._activity(now, rows)
        state["verdict"] = self._verdict or _verdict(state, rows.values())
        with self._lock:
            if fresh_graph is not None:
                self._graph = fresh_graph
            state["graph_version"] = self._graph["version"]
            self._state = state

    def report_error(self, error: BaseException) -> None:
        """Show ``error`` (e.g. the :class:`StuckError` that stopped the worker) with a last
        snapshot (on the worker's thread)."""
        self._error = f"{type(error).__name__}: {error}"
        self._verdict = "stuck" if isinstance(error, (StuckError, GraphError)) else "failed"
        self.publish()

    def _activity(self, now: float, rows: dict[Any, dict[str, Any]]) -> float:
        """Add ``invocations_per_s`` and (with statistics) ``busy`` -- the share of the last
        :data:`WINDOW` seconds spent in the operator, per worker -- to each figures dict of
        ``rows`` (see :func:`_activity_rows`); returns the window actually covered."""
        history = self._history
        history.append(
            (
                now,
                {
                    k: (f["invocations"], f.get("time_total_s"), f.get("records_in"))
                    for k, f in rows.items()
                },
            )
        )
        while len(history) > 2 and now - history[1][0] >= WINDOW:
            history.popleft()
        span = now - history[0][0]
        for k, f in rows.items():
            # The oldest figures of this row in the window (it may be younger than it).
            then, before = next(((t, old[k]) for t, old in history if k in old))
            if now <= then:
                f["invocations_per_s"] = 0.0
                if f.get("records_in") is not None:
                    f["records_in_per_s"] = 0.0
                continue
            f["invocations_per_s"] = round((f["invocations"] - before[0]) / (now - then), 2)
            if f.get("records_in") is not None and before[2] is not None:
                f["records_in_per_s"] = round((f["records_in"] - before[2]) / (now - then), 1)
            if f.get("time_total_s") is not None and before[1] is not None:
                workers = len(f.get("workers", ())) or 1  # a sum over workers: their mean
                share = (f["time_total_s"] - before[1]) / (now - then) / workers
                f["busy"] = round(min(1.0, share), 4)
        return round(span, 2)

    def page(self) -> bytes:
        """The page, with the latest snapshot inlined so that its first paint shows it (no
        "connecting..." and empty tables before the first poll returns)."""
        state = self.state_json().decode().replace("</", "<\\/")
        return PAGE.replace("const INITIAL = null;", f"const INITIAL = {state};").encode()

    def state_json(self) -> bytes:
        """The latest snapshot as JSON (other values as their ``repr``); for the HTTP thread."""
        with self._lock:
            state = self._state
        return json.dumps(state, default=repr).encode()

    def metrics_text(self) -> bytes:
        """The latest snapshot in Prometheus' text format (:mod:`pytimely.metrics`)."""
        with self._lock:
            state = self._state
        return prometheus_text(state).encode()

    def graph_json(self) -> bytes:
        """The description of the dataflows' graph as JSON, as of the latest snapshot."""
        with self._lock:
            g = self._graph
        return json.dumps(g["description"]).encode()

    def graph_svg(self) -> bytes:
        """The dataflows' graph drawn as SVG (empty until a worker has published one)."""
        with self._lock:
            return self._graph["svg"].encode()

    def close(self) -> None:
        """Stop serving and stop observing the worker."""
        if self.closed:
            return
        self.closed = True
        if self._stop_observing is not None:
            self._stop_observing()
        self._server.shutdown()
        self._server.server_close()
        with _LOCK:
            _SERVING.pop((self.host, self.port), None)


def snapshot(worker: Any) -> dict[str, Any]:
    """The worker's state as plain data (call it on the worker's thread): per operator
    (keyed by :func:`pytimely.graph.node_id`) its input frontiers, records in flight per input,
    capabilities held, invocations, and the per-operator statistics the worker reports."""
    stats = worker.statistics()
    by_address = {tuple(s["address"]): s for s in stats.get("operators", ()) if "address" in s}
    operators: dict[str, dict[str, Any]] = {}
    for _index, _name, sg in worker.dataflow_scopes():
        _snapshot_scope(sg, operators, by_address)
    return {
        "worker": worker.index,
        "peers": worker.peers,
        "steps": stats.get("steps", 0),
        "wall_time": time.time(),
        "dataflows": worker.installed_dataflows(),
        "operators": operators,
        "describe": worker.describe(),
        "totals": stats.get("totals"),
        "channels": stats.get("channels"),
    }


def worker_figures(worker: Any) -> dict[str, Any]:
    """What only ``worker`` knows of its operators, as small plain data to send to worker 0
    (call it on the worker's thread, after ``worker.enable_statistics()``): per operator (keyed
    by :func:`pytimely.graph.node_id`) its invocations, timings, records and batches, and the
    capabilities this worker holds."""
    stats = worker.statistics()
    operators = {}
    for op in stats.get("operators", ()):
        figures: dict[str, Any] = {k: op[k] for k in ("invocations", *_STAT_KEYS) if k in op}
        figures["held_here"] = [
            {"output": c["output"], "time": repr(c["time"]), "count": c["count"]}
            for c in op.get("capabilities", ())
        ]
        operators[graph.node_id(tuple(op["address"]))] = figures
    return {
        "worker": worker.index,
        "steps": stats.get("steps", 0),
        "wall_time": time.time(),
        "operators": operators,
        "totals": stats.get("totals"),
        "channels": stats.get("channels"),
    }


def _merge_workers(state: dict[str, Any], peers: dict[int, dict[str, Any]]) -> list[int]:
    """Give each operator of ``state`` (worker 0's snapshot) a ``workers`` map -- worker index
    (a string, as in JSON) to that worker's figures -- and make its invocations, timings and
    records the sums over the workers; returns the workers merged."""
    own = state["worker"]
    merged = [own, *sorted(w for w in peers if w != own)]
    for k, op in state["operators"].items():
        mine = {key: op[key] for key in ("invocations", *_STAT_KEYS) if key in op}
        mine["held_here"] = op["held_here"]
        per_worker = {str(own): mine}
        for w in merged[1:]:
            theirs = peers[w]["operators"].get(k)
            if theirs is not None:
                per_worker[str(w)] = dict(theirs)
        op["workers"] = per_worker
        for key in ("invocations", *_STAT_KEYS):
            values = [f[key] for f in per_worker.values() if key in f]
            if values:
                op[key] = max(values) if key == "time_max_s" else sum(values)
    return merged


def _activity_rows(operators: dict[str, dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    """The figures dicts whose activity the dashboard reports: every operator's (summed over
    the workers) and each of its workers' own."""
    rows: dict[Any, dict[str, Any]] = {}
    for k, op in operators.items():
        rows[k] = op
        for w, figures in op.get("workers", {}).items():
            rows[(k, w)] = figures
    return rows


def share_figures(
    worker: Any, board: Dashboard | None = None, interval: float = 0.5, collector: int = 0
) -> Any:
    """Gather every worker's operator figures on worker ``collector``, which serves ``board``.

    Every worker of the computation must call it at the same point of its program, before
    building the dataflows that come after (it allocates a channel, and channels are numbered
    in allocation order).  On ``collector`` the figures that arrive go to ``board``; every
    other worker sends its :func:`worker_figures` after a step, at most every ``interval``
    seconds and only if it stepped since its last send (see the module docstring).  Returns a
    function that stops sending (a no-op on the collector)."""
    channel = worker.allocate_channel()
    if worker.index == collector:
        if board is None:
            raise ValueError(
                f"share_figures: worker {collector} collects the figures, so it "
                "needs the dashboard (board) they are shown on"
            )
        worker.register_data_channel(
            channel, lambda _sender, figures: board.receive_figures(figures)
        )
        return lambda: None
    worker.enable_statistics()
    sent_at_step = -1
    last = 0.0

    def send_if_stepped() -> None:
        nonlocal sent_at_step, last
        now = time.monotonic()
        if worker.steps == sent_at_step or now - last < interval:
            return
        sent_at_step, last = worker.steps, now
        worker.allocator.send(channel, collector, (worker.index, worker_figures(worker)))

    return worker.observe_steps(send_if_stepped)


_STAT_KEYS = (
    "time_total_s",
    "time_max_s",
    "records_in",
    "records_out",
    "batches_in",
    "batches_out",
)


def _verdict(state: dict[str, Any], rows: Any) -> str:
    """What the run is doing, for the banner: ``finished`` (no dataflow installed after some
    steps), ``idle`` (dataflows installed, no operator invoked over the activity window:
    waiting for input, or stuck before the detector has spoken) or ``running``.  A reported
    error makes it ``stuck`` or ``failed`` instead (:meth:`Dashboard.report_error`).  ``rows``:
    the figures dicts of :func:`_activity_rows`, with their rates."""
    if not state["dataflows"]:
        return "finished" if state["steps"] else "idle"
    if any(f.get("invocations_per_s", 0) > 0 for f in rows):
        return "running"
    return "idle"


def _snapshot_scope(sg: Any, out: dict[str, dict[str, Any]], stats: dict[tuple, Any]) -> None:
    tracker = sg.tracker
    path = tuple(sg.path)
    nested = sg.nested_scopes()
    in_flight: dict[tuple[int, int], int] = {}
    held_all: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for loc, t, c in tracker.positive_pointstamps():
        if type(loc).__name__ == "Target":
            in_flight[(loc.node, loc.port)] = in_flight.get((loc.node, loc.port), 0) + c
        else:
            held_all.setdefault((loc.node, loc.port), []).append((repr(t), c))
    held_here: dict[int, list[dict[str, Any]]] = {}
    for loc, t, c in sg.held_capabilities():
        held_here.setdefault(loc.node, []).append({"output": loc.port, "time": repr(t), "count": c})
    for node in range(1, len(tracker.node_names)):
        if node in nested:
            continue
        address = path + (node,)
        child = sg.children[node]
        inputs = [
            {
                "port": p,
                "frontier": [repr(t) for t in tracker.target_frontier(node, p).elements()],
                "in_flight": in_flight.get((node, p), 0),
            }
            for p in range(tracker.node_inputs[node])
        ]
        held = [
            {"output": o, "time": t, "count": c}
            for o in range(tracker.node_outputs[node])
            for t, c in sorted(held_all.get((node, o), ()))
        ]
        op: dict[str, Any] = {
            "name": tracker.node_names[node],
            "address": list(address),
            "retired": child is None,
            "inputs": inputs,
            "held_all_workers": held,
            "held_here": held_here.get(node, []),
            "invocations": getattr(child, "invocations", 0) if child is not None else 0,
        }
        figures = stats.get(address)
        if figures is not None:
            op["invocations"] = figures.get("invocations", op["invocations"])
            for k in _STAT_KEYS:
                if k in figures:
                    op[k] = figures[k]
        out[graph.node_id(address)] = op
    for i in sorted(nested):
        _snapshot_scope(nested[i], out, stats)


def _handler(board: Dashboard) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server protocol
            route = self.path.split("?", 1)[0]
            if route == "/":
                self._send(200, "text/html; charset=utf-8", board.page())
            elif route == "/api/state":
                self._send(200, "application/json", board.state_json())
            elif route == "/api/graph":
                self._send(200, "application/json", board.graph_json())
            elif route == "/graph.svg":
                self._send(200, "image/svg+xml", board.graph_svg())
            elif route == "/metrics":
                self._send(200, "text/plain; version=0.0.4; charset=utf-8", board.metrics_text())
            else:
                self._send(404, "text/plain", b"not found")

        def _send(self, status: int, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # no access log on stderr

    return Handler


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>pytimely dashboard</title>
<style>
body { font-family: Helvetica, Arial, sans-serif; margin: 16px; color: #223; font-size: 13px; }
h1 { font-size: 18px; margin: 0 0 4px 0; } h2 { font-size: 14px; margin: 16px 0 6px 0; }
#status { color: #556; } #graph { overflow: auto; border: 1px solid #ccd; border-radius: 6px; }
table { border-collapse: collapse; } th, td { border-bottom: 1px solid #dde; padding: 3px 8px;
  text-align: left; vertical-align: top; } th { background: #eef; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.retired td { color: #999; } pre { background: #f6f6fa; padding: 8px; border-radius: 6px;
  white-space: pre-wrap; } #error { background: #fde8e8; color: #800; display: none; }
.legend span { display: inline-block; width: 14px; height: 10px; margin: 0 3px 0 10px; }
#verdict { margin: 8px 0; padding: 6px 10px; border-radius: 6px; font-weight: bold; }
#verdict.stuck, #verdict.failed { background: #c62828; color: white; }
#verdict.idle { background: #fff3cd; color: #664d03; }
#verdict.running { background: #e3f2e1; color: #1e5c1a; }
#verdict.finished { background: #e8eaf6; color: #283593; }
</style></head><body>
<h1>pytimely dashboard</h1>
<div id="status">connecting&hellip;</div>
<div id="verdict"></div>
<div>Figures of <select id="worker"><option value="all">all workers</option></select></div>
<pre id="error"></pre>
<h2>Graph <span class="legend"><span style="background:hsl(210,40%,93%)"></span>idle
<span style="background:hsl(50,90%,70%)"></span>active
<span style="background:hsl(0,85%,62%)"></span>busy</span></h2>
<div id="graph"></div>
<h2>Operators</h2>
<table id="operators"><thead><tr><th>Operator</th><th>Address</th><th>Input frontiers</th>
<th>In flight</th><th>Capabilities (held by the worker / all workers)</th><th>Invocations</th>
<th>Activity</th><th>Records in / out</th><th>Records in/s</th><th>Time (s)</th>
<th>Invocations per worker</th></tr></thead><tbody></tbody>
</table>
<h2>What holds the frontiers</h2>
<pre id="explain"></pre>
<script>
"use strict";
let graphVersion = -1;
const INITIAL = null;
const VERDICTS = {
  stuck: "STUCK: no dataflow can make progress, and none ever will; the error below and " +
    "\u201cWhat holds the frontiers\u201d say which capability or input nobody releases.",
  failed: "FAILED: the run stopped with the error below.",
  idle: "Idle: no operator ran over the activity window (waiting for input?).",
  running: "Running.",
  finished: "Finished: every dataflow completed.",
};
function text(s) { return String(s).replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;",
  ">": "&gt;", '"': "&quot;"}[c])); }
function heat(op, maxRate) {
  let level = 0;
  if (op.busy !== undefined) level = Math.min(1, op.busy * 4);
  else if (maxRate > 0) level = op.invocations_per_s / maxRate;
  if (op.invocations_per_s === 0) level = 0;
  if (level <= 0) return "hsl(210,40%,93%)";
  return "hsl(" + Math.round(55 - 55 * level) + ",90%," + Math.round(72 - 10 * level) + "%)";
}
function caps(list) {
  return list.map(c => "out " + c.output + " @ " + c.time + " x" + c.count).join("<br>");
}
async function loadGraph(version) {
  const r = await fetch("graph.svg");
  const box = document.getElementById("graph");
  box.innerHTML = await r.text();
  const svg = box.querySelector("svg");
  if (svg) { svg.style.maxWidth = "100%"; svg.style.height = "auto"; }  // fit the page
  graphVersion = version;
}
const noFigures = {invocations: 0, invocations_per_s: 0, held_here: []};
function workerOptions(workers) {
  const select = document.getElementById("worker");
  const want = ["all", ...workers.map(String)];
  const have = Array.from(select.options).map(o => o.value);
  if (want.join() === have.join()) return;
  const chosen = select.value;
  select.innerHTML = want.map(w => "<option value='" + w + "'>" +
    (w === "all" ? "all workers" : "worker " + w) + "</option>").join("");
  select.value = want.includes(chosen) ? chosen : "all";
}
function figuresOf(o, chosen) {  // the operator's figures summed, or one worker's own
  if (chosen === "all") return o;
  return (o.workers && o.workers[chosen]) || noFigures;
}
let lastState = null;
function render(s) {
  lastState = s;
  workerOptions(s.workers || [s.worker]);
  const chosen = document.getElementById("worker").value;
  const ops = Object.entries(s.operators);
  const figs = Object.fromEntries(ops.map(([id, o]) => [id, figuresOf(o, chosen)]));
  const maxRate = Math.max(0, ...Object.values(figs).map(f => f.invocations_per_s || 0));
  const done = s.dataflows.length === 0;
  const verdict = s.verdict || (done ? "finished" : "running");
  const banner = document.getElementById("verdict");
  banner.className = verdict;
  banner.textContent = VERDICTS[verdict] || verdict;
  const held = verdict === "stuck" || verdict === "failed" ? verdict + " with " +
    s.dataflows.length + " dataflow(s) incomplete" : (done ? "no dataflow running" :
    s.dataflows.length + " dataflow(s) " + verdict);
  document.getElementById("status").textContent = "worker " + s.worker + " of " + s.peers +
    " \\u00b7 step " + s.steps + " \\u00b7 " + held + " \\u00b7 activity over the last " +
    s.activity_window_s + " s \\u00b7 updated " + new Date(s.wall_time * 1000).toLocaleTimeString();
  const err = document.getElementById("error");
  err.style.display = s.error ? "block" : "none";
  err.textContent = s.error || "";
  const rows = ops.map(([id, o]) => {
    const fr = o.inputs.map(i => i.port + ": [" + i.frontier.join(", ") + "]").join("<br>");
    const fl = o.inputs.map(i => i.in_flight).join("<br>");
    const f = figs[id];
    const all = o.held_all_workers;
    const held = chosen === "all" ? caps(all) :
      caps(f.held_here) + (all.length ? " / " + caps(all) : "");
    const t = f.time_total_s === undefined ? "" : f.time_total_s.toFixed(3);
    const act = f.invocations_per_s + "/s" + (f.busy === undefined ? "" :
      " \\u00b7 " + Math.round(f.busy * 100) + "% busy");
    const perWorker = Object.entries(o.workers || {}).map(([w, x]) =>
      "w" + w + ": " + x.invocations).join(" \\u00b7 ");
    return "<tr id='row-" + id + "' class='" + (o.retired ? "retired" : "") + "'>" +
      "<td class='name'>" + text(o.name) + "</td><td>(" + o.address.join(", ") + ")</td>" +
      "<td class='frontier'>" + text(fr).replace(/&lt;br&gt;/g, "<br>") + "</td>" +
      "<td class='num'>" + fl + "</td>" +
      "<td class='caps'>" + text(held).replace(/&lt;br&gt;/g, "<br>") +
      "</td><td class='num invocations'>" + f.invocations + "</td>" +
      "<td class='activity' style='background:" + heat(f, maxRate) + "'>" + act + "</td>" +
      "<td class='num records'>" + (f.records_in === undefined ? "" :
        f.records_in + " / " + (f.records_out === undefined ? "" : f.records_out)) + "</td>" +
      "<td class='num rate'>" + (f.records_in_per_s === undefined ? "" : f.records_in_per_s) +
      "</td><td class='num'>" + t + "</td><td class='per-worker'>" + perWorker + "</td></tr>";
  });
  document.querySelector("#operators tbody").innerHTML = rows.join("");
  for (const [id, o] of ops) {
    const box = document.querySelector("#graph g#" + id + " rect");
    if (box) box.setAttribute("fill", o.retired ? "#f4f4f4" : heat(figs[id], maxRate));
  }
  document.getElementById("explain").textContent = s.describe;
}
async function poll() {
  try {
    const r = await fetch("api/state", {cache: "no-store"});
    const s = await r.json();
    if (s.graph_version !== graphVersion) await loadGraph(s.graph_version);
    render(s);
  } catch (e) {
    document.getElementById("status").textContent = "disconnected (" + e + ")";
  }
  setTimeout(poll, 500);
}
document.getElementById("worker").addEventListener("change", () => {
  if (lastState) render(lastState);
});
if (INITIAL) render(INITIAL);
poll();
</script></body></html>
"""
