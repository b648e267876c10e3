"""``/metrics``: the dashboard's figures in Prometheus' text format, scraped over HTTP and
parsed by the rules of the text exposition format (HELP and TYPE before a metric's samples,
``name{label="value",...} number`` lines, counters ending in ``_total``)."""

from __future__ import annotations

import re
import socket
import time
import urllib.request

import pytest

import pytimely as pt

pytestmark = pytest.mark.timeout(120)

DEADLINE = 30.0
_SAMPLE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_]\w*="(?:[^"\\]|\\.)*",?)*)\} (\S+)$'
)
_LABEL = re.compile(r'([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"')


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Fetch and parse ``url``: metric name -> [(labels, value)], checking the format."""
    with urllib.request.urlopen(url, timeout=DEADLINE) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    assert text.endswith("\n")
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    typed: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge") and name not in typed
            assert name.endswith("_total") == (kind == "counter"), name
            typed[name] = kind
            found[name] = []
            continue
        m = _SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        name, labels, value = m.groups()
        assert name in typed, f"{name} has samples before its TYPE"
        found[name].append((dict(_LABEL.findall(labels)), float(value)))
    return found


def _one(samples, **labels) -> float:
    matching = [v for ls, v in samples if all(ls.get(k) == v2 for k, v2 in labels.items())]
    assert len(matching) == 1, (labels, samples)
    return matching[0]


def test_a_worker_s_operators_inputs_and_steps_are_scraped():
    worker = pt.Worker()
    board = pt.serve_metrics(worker, port=0)
    try:

        def build(scope):
            fast_in, fast = scope.new_input()
            slow_in, slow = scope.new_input()
            fast.map(lambda x: x * 2, name="Double").probe()
            slow.map(lambda x: x, name="Slow").probe()
            return fast_in, slow_in

        fast_in, slow_in = worker.dataflow(build)
        fast_in.send_batch(list(range(100)))
        fast_in.advance_to(10)
        slow_in.advance_to(3)
        for _ in range(5):
            worker.step()
        board.publish()
        metrics = scrape(board.url + "metrics")
    finally:
        board.close()
    assert _one(metrics["pytimely_worker_steps_total"], worker="0") >= 1
    assert _one(metrics["pytimely_operator_records_in_total"], operator="Double") == 100
    assert _one(metrics["pytimely_operator_records_out_total"], operator="Double") == 100
    assert _one(metrics["pytimely_operator_invocations_total"], operator="Double") >= 1
    assert _one(metrics["pytimely_operator_schedule_seconds_total"], operator="Double") > 0
    # The slow input's frontier (3) trails the dataflow's most advanced one (10) by 7.
    assert _one(metrics["pytimely_input_frontier_lag"], operator="Slow", port="0") == 7
    assert _one(metrics["pytimely_input_frontier_lag"], operator="Double", port="0") == 0
    # The inputs hold a capability each; the maps hold none.
    held = metrics["pytimely_operator_capabilities_held"]
    assert sum(v for ls, v in held if ls["operator"] == "Input") == 2
    assert _one(held, operator="Double") == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_with_two_workers_worker_0_serves_both_workers_figures_and_channel_bytes():
    port = _free_port()

    def fn(worker):
        def build(scope):
            inp, stream = scope.new_input()
            return inp, stream.exchange(lambda x: x).map(lambda x: x, name="Spread").probe()

        inp, probe = worker.dataflow(build)
        if worker.index != 0:
            return None
        deadline, epoch = time.monotonic() + DEADLINE, 0
        while time.monotonic() < deadline:
            inp.send_batch(list(range(epoch * 10, epoch * 10 + 10)))
            epoch += 1
            inp.advance_to(epoch)
            worker.step_while(lambda: probe.less_than(epoch), timeout=DEADLINE)
            metrics = scrape(f"http://127.0.0.1:{port}/metrics")
            spread = metrics["pytimely_operator_records_in_total"]
            if any(ls["worker"] == "1" and ls["operator"] == "Spread" and v > 0
                   for ls, v in spread):  # fmt: skip
                return metrics
            time.sleep(0.05)
        raise AssertionError("worker 1's figures never reached worker 0's /metrics")

    metrics, _ = pt.execute(fn, workers=2, dashboard=port, timeout=90)
    steps = dict((ls["worker"], v) for ls, v in metrics["pytimely_worker_steps_total"])
    assert set(steps) == {"0", "1"} and all(v > 0 for v in steps.values())
    sent = metrics["pytimely_channel_bytes_sent_total"]
    assert any(ls["worker"] == "0" and ls["to"] == "1" and v > 0 for ls, v in sent), sent
