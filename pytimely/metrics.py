"""Metrics a monitoring system can scrape: ``/metrics`` in Prometheus' text format.

The dashboard (:func:`pytimely.serve_dashboard`, ``execute(..., dashboard=PORT)``) serves
``/metrics`` beside its page, and :func:`serve_metrics` serves the same without asking anyone
to look at a page.  Both render the dashboard's latest snapshot of the worker (taken at the end
of its steps, at most every ``interval`` seconds; with several worker processes, worker 0's,
with every worker's own figures merged in by :func:`pytimely.dashboard.share_figures`), so a
scrape never touches the worker's own data.

Series (counters end in ``_total``; every series carries ``worker``, operator series also
``operator`` -- its name -- and ``address``):

* ``pytimely_worker_steps_total``, ``pytimely_worker_parks_total``,
  ``pytimely_worker_parked_seconds_total``;
* ``pytimely_operator_invocations_total``, ``pytimely_operator_schedule_seconds_total``,
  ``pytimely_operator_records_in_total`` / ``_out_total``, ``pytimely_operator_batches_in_total``
  / ``_out_total``, ``pytimely_operator_capabilities_held`` (by this worker);
* per operator input (``port``): ``pytimely_input_records_in_flight`` (all workers) and
  ``pytimely_input_frontier_lag`` -- for integer times, how far the input's frontier is behind
  the most advanced input frontier of its dataflow, in time units (0 when it is the most
  advanced; absent when the frontier is empty or not an integer);
* per channel and destination worker: ``pytimely_channel_bytes_sent_total``,
  ``pytimely_channel_records_sent_total``.

>>> state = {"worker": 0, "workers": [0], "totals": {"steps": 3, "parks": 1, "parked_s": 0.5},
...          "channels": [], "operators": {"n1": {"name": "Map", "address": [0, 1],
...          "invocations": 2, "records_in": 10, "held_here": [],
...          "inputs": [{"port": 0, "frontier": ["7"], "in_flight": 4}]}}}
>>> print(prometheus_text(state))  # doctest: +ELLIPSIS
# HELP pytimely_worker_steps_total ...
# TYPE pytimely_worker_steps_total counter
pytimely_worker_steps_total{worker="0"} 3
...
pytimely_operator_records_in_total{worker="0",operator="Map",address="0.1"} 10
...
pytimely_input_frontier_lag{worker="0",operator="Map",address="0.1",port="0"} 0
...
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["prometheus_text", "serve_metrics"]

#: name -> (type, help), in the order they are written.
METRICS = {
    "pytimely_worker_steps_total": ("counter", "Steps the worker took."),
    "pytimely_worker_parks_total": ("counter", "Times the worker slept waiting for work."),
    "pytimely_worker_parked_seconds_total": ("counter", "Seconds the worker slept."),
    "pytimely_operator_invocations_total": ("counter", "Times the operator was scheduled."),
    "pytimely_operator_schedule_seconds_total": ("counter", "Seconds spent in the operator."),
    "pytimely_operator_records_in_total": ("counter", "Records the operator received."),
    "pytimely_operator_records_out_total": ("counter", "Records the operator sent."),
    "pytimely_operator_batches_in_total": ("counter", "Batches the operator received."),
    "pytimely_operator_batches_out_total": ("counter", "Batches the operator sent."),
    "pytimely_operator_capabilities_held": ("gauge", "Capabilities this worker holds."),
    "pytimely_input_records_in_flight": ("gauge", "Records on their way to the input."),
    "pytimely_input_frontier_lag": (
        "gauge",
        "Time units the input's frontier trails the dataflow's most advanced input frontier.",
    ),
    "pytimely_channel_bytes_sent_total": ("counter", "Bytes sent on the channel to a worker."),
    "pytimely_channel_records_sent_total": ("counter", "Records sent on the channel to a worker."),
}

_OPERATOR_FIGURES = {
    "invocations": "pytimely_operator_invocations_total",
    "time_total_s": "pytimely_operator_schedule_seconds_total",
    "records_in": "pytimely_operator_records_in_total",
    "records_out": "pytimely_operator_records_out_total",
    "batches_in": "pytimely_operator_batches_in_total",
    "batches_out": "pytimely_operator_batches_out_total",
}


def prometheus_text(state: dict[str, Any]) -> str:
    """The Prometheus text exposition of a dashboard snapshot (module docstring)."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {name: [] for name in METRICS}
    own = str(state.get("worker"))
    peers = state.get("peers_figures", {})
    totals = {own: state.get("totals") or {}}
    channels = {own: state.get("channels") or []}
    for w, figures in peers.items():
        totals[str(w)] = figures.get("totals") or {}
        channels[str(w)] = figures.get("channels") or []
    for w, t in totals.items():
        labels = {"worker": w}
        samples["pytimely_worker_steps_total"].append((labels, t.get("steps", 0)))
        samples["pytimely_worker_parks_total"].append((labels, t.get("parks", 0)))
        samples["pytimely_worker_parked_seconds_total"].append((labels, t.get("parked_s", 0.0)))
    operators = state.get("operators", {})
    leading = _leading_frontiers(operators.values())
    for op in operators.values():
        address = ".".join(map(str, op.get("address", ())))
        per_worker = op.get("workers") or {own: op}
        for w, figures in per_worker.items():
            labels = {"worker": str(w), "operator": op.get("name", "?"), "address": address}
            for key, name in _OPERATOR_FIGURES.items():
                if key in figures:
                    samples[name].append((labels, figures[key]))
            held = sum(c.get("count", 1) for c in figures.get("held_here", ()))
            samples["pytimely_operator_capabilities_held"].append((labels, held))
        labels = {"worker": own, "operator": op.get("name", "?"), "address": address}
        dataflow = op.get("address", [None])[0]
        for inp in op.get("inputs", ()):
            port = {**labels, "port": str(inp["port"])}
            samples["pytimely_input_records_in_flight"].append((port, inp.get("in_flight", 0)))
            least = _least_int(inp.get("frontier", ()))
            lead = leading.get(dataflow)
            if least is not None and lead is not None:
                samples["pytimely_input_frontier_lag"].append((port, lead - least))
    for w, per_channel in channels.items():
        for ch in per_channel:
            for to, sent in ch.get("to", {}).items():
                labels = {"worker": w, "channel": str(ch["channel"]), "to": str(to)}
                samples["pytimely_channel_bytes_sent_total"].append((labels, sent["bytes"]))
                samples["pytimely_channel_records_sent_total"].append((labels, sent["records"]))
    lines = []
    for name, (kind, text) in METRICS.items():
        lines.append(f"# HELP {name} {text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(f"{name}{_labels(labels)} {_number(v)}" for labels, v in samples[name])
    return "\n".join(lines) + "\n"


def serve_metrics(
    worker: Any, port: int = 9464, host: str = "127.0.0.1", interval: float = 1.0
) -> Any:
    """Serve ``/metrics`` for ``worker`` at ``http://host:port/metrics`` (``port=0``: any free
    port) from a daemon thread; returns the :class:`~pytimely.dashboard.Dashboard` that
    serves it (its ``url``, ``close()``).  The snapshot behind it is refreshed at the end of the
    worker's steps, at most every ``interval`` seconds.  Call it on the worker's thread.

    >>> import pytimely as pt, urllib.request
    >>> worker = pt.Worker()
    >>> board = serve_metrics(worker, port=0)
    >>> inp = worker.dataflow(lambda scope: scope.new_input()[0])
    >>> _ = worker.step()
    >>> board.publish()
    >>> text = urllib.request.urlopen(board.url + "metrics").read().decode()
    >>> "pytimely_worker_steps_total" in text
    True
    >>> board.close()
    """
    from .dashboard import serve_dashboard

    return serve_dashboard(worker, port=port, host=host, interval=interval)


def _leading_frontiers(operators: Iterable[dict[str, Any]]) -> dict[Any, int]:
    """Per dataflow, the greatest least element of an integer input frontier."""
    lead: dict[Any, int] = {}
    for op in operators:
        dataflow = op.get("address", [None])[0]
        for inp in op.get("inputs", ()):
            least = _least_int(inp.get("frontier", ()))
            if least is not None and (dataflow not in lead or least > lead[dataflow]):
                lead[dataflow] = least
    return lead


def _least_int(frontier: Iterable[str]) -> int | None:
    """The least element of a frontier shown as ``repr`` strings, if all are integers."""
    values = []
    for text in frontier:
        try:
            values.append(int(text))
        except ValueError:
            return None
    return min(values) if values else None


def _labels(labels: dict[str, str]) -> str:
    def escape(v: str) -> str:
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in labels.items()) + "}"


def _number(v: Any) -> str:
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, int):
        return str(v)
    return repr(float(v))
