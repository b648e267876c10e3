"""The live dashboard, read by a real headless Chromium (Debian's ``chromium``).

Chromium is installed by ``make test`` (scripts/ensure-browser.sh).  Without it these tests
fail, saying how to install it: a dashboard nobody has seen rendered is not tested.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import socket
import struct
import subprocess
import threading
import time
import urllib.request
import zlib

import pytest

import pytimely as pt
from pytimely import graph
from pytimely.dashboard import serve_dashboard, snapshot

DEADLINE = 60.0  # seconds any one test may wait for the worker or the browser


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        exe = shutil.which(name)
        if exe:
            return exe
    pytest.fail(
        "the dashboard tests need a headless Chromium: run `make test` (it calls "
        "scripts/ensure-browser.sh) or, as root, `apt-get update && apt-get install -y "
        "chromium chromium-driver`"
    )


def _browse(url: str, tmp_path, *args: str) -> subprocess.CompletedProcess:
    """Load ``url`` in headless Chromium, letting the page's script run ~2.5 s of its time."""
    profile = tmp_path / f"profile-{time.monotonic_ns()}"
    return subprocess.run(
        [
            _chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=2500",
            *args,
            url,
        ],
        capture_output=True,
        text=not any(a.startswith("--screenshot") for a in args),
        timeout=DEADLINE,
    )


def _halving(scope):
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

    probe = scope.iterative(loop, name="Halving").probe()
    return inp, probe


class RunningDataflow:
    """A worker on its own thread feeding an epoch every 50 ms until stopped (or
    ``DEADLINE``); the dashboard snapshots on that thread."""

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.board = None
        self.names: list[str] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(DEADLINE), "the worker did not start"
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            worker = pt.Worker()
            inp, probe = worker.dataflow(_halving, name="halving")
            self.board = serve_dashboard(worker, port=0, interval=0.05)
            self.names = [op["name"] for op in graph.operators(json.loads(worker.graph()))]
            self.ready.set()
            started, epoch = time.monotonic(), 0
            while not self.stop.is_set() and time.monotonic() - started < DEADLINE:
                inp.send_batch(list(range(50)))
                epoch += 1
                inp.advance_to(epoch)
                worker.step_while(lambda: probe.less_than(epoch), timeout=DEADLINE)
                time.sleep(0.05)
            inp.close()
            worker.run()
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            self.error = exc
            self.ready.set()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(DEADLINE)
        if self.board is not None:
            self.board.close()
        if self.error is not None:
            raise self.error


@pytest.fixture
def running():
    r = RunningDataflow()
    yield r
    r.close()


_ROW = re.compile(
    r"<tr id=\"row-(n[\d_]+)\"[^>]*><td class=\"name\">([^<]*)</td>"
    r"<td>[^<]*</td><td class=\"frontier\">([^<]*)"
)


def _rows(dom: str) -> dict[str, tuple[str, str]]:
    return {node: (html.unescape(name), frontier) for node, name, frontier in _ROW.findall(dom)}


def test_the_page_shows_every_operator_and_a_frontier_advances(running, tmp_path):
    first = _browse(running.board.url, tmp_path, "--dump-dom")
    assert first.returncode == 0, first.stderr[-2000:]
    rows = _rows(first.stdout)
    assert sorted(name for name, _ in rows.values()) == sorted(running.names)
    assert len(rows) == 7
    assert '<g class="operator" id="n0_2_4">' in first.stdout  # the graph, inline SVG
    assert "What holds the frontiers" in first.stdout and "Input capability" in first.stdout
    time.sleep(1.0)
    second = _browse(running.board.url, tmp_path, "--dump-dom")
    before = int(re.fullmatch(r"0: \[(\d+)\]", rows["n0_3"][1]).group(1))  # the probe's input
    after = int(re.fullmatch(r"0: \[(\d+)\]", _rows(second.stdout)["n0_3"][1]).group(1))
    assert after > before, (before, after)


def _png_pixels(data: bytes) -> tuple[int, int, bytes]:
    """Width, height and the inflated scanlines of a PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    idat, pos = b"", 8
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        if kind == b"IDAT":
            idat += data[pos + 8 : pos + 8 + length]
        pos += 12 + length
    return width, height, zlib.decompress(idat)


def test_screenshot_of_the_dashboard(running, tmp_path):
    shot = tmp_path / "dashboard.png"
    done = _browse(
        running.board.url,
        tmp_path,
        f"--screenshot={shot}",
        "--window-size=1000,700",
        "--hide-scrollbars",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    width, height, pixels = _png_pixels(shot.read_bytes())
    assert (width, height) == (1000, 700)
    assert shot.stat().st_size > 10_000
    assert len(set(pixels)) > 64  # text, boxes and colours, not a blank page


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=DEADLINE) as r:
        return json.load(r)


def test_execute_with_a_dashboard_shows_why_the_run_is_stuck():
    port = _free_port()

    def stuck(worker):
        worker.dataflow(lambda s: s.new_input()[1].probe(), name="never closed")
        worker.step()
        worker.step_while(lambda: True)  # nothing can ever change

    with pytest.raises(pt.StuckError):
        pt.execute(stuck, dashboard=port)
    state = _get(f"http://127.0.0.1:{port}/api/state")
    assert state["error"].startswith("StuckError: step_while: the condition still holds")
    assert "dataflow 0 (never closed):" in state["describe"]
    assert [op["name"] for op in state["operators"].values()] == ["Input", "Probe"]
    assert _get(f"http://127.0.0.1:{port}/api/graph")["dataflows"][0]["name"] == "never closed"
    # A second run on the same port re-attaches the dashboard, which forgets the old error.
    pt.execute(
        lambda w: w.dataflow(lambda s: s.to_stream([1]).inspect(lambda x: None)), dashboard=port
    )
    assert _get(f"http://127.0.0.1:{port}/api/state")["error"] is None


class _MeasuringWorker(pt.Worker):
    """A worker reporting the per-operator statistics of the contract: ``enable_statistics``
    and ``statistics()["operators"]`` with timings."""

    enabled = False

    def enable_statistics(self) -> None:
        self.enabled = True

    def statistics(self):
        stats = super().statistics()
        if self.enabled:
            stats["operators"] = [
                {
                    "name": "Map",
                    "address": [0, 2],
                    "invocations": 7,
                    "time_total_s": 0.5 * self.steps,
                    "records_in": 3,
                }
            ]
            stats["totals"] = {"steps": self.steps, "parks": 0, "parked_s": 0.0}
        return stats


def test_statistics_are_shown_when_the_worker_reports_them():
    w = _MeasuringWorker()
    w.dataflow(lambda s: s.new_input()[1].map(str).probe())
    plain = snapshot(w)
    assert "time_total_s" not in plain["operators"]["n0_2"]  # absent: shown without
    board = serve_dashboard(w, port=0, interval=0.0)
    try:
        assert w.enabled
        for _ in range(3):
            w.step()
            time.sleep(0.01)
        state = _get(board.url + "api/state")
    finally:
        board.close()
    op = state["operators"]["n0_2"]
    assert (op["invocations"], op["records_in"], op["time_total_s"]) == (7, 3, 0.5 * w.steps)
    assert op["busy"] > 0
    assert state["totals"]["steps"] == w.steps


def _read_own_dashboard(port: int):
    def fn(worker):
        inp = worker.dataflow(lambda s: s.new_input()[0])
        inp.advance_to(3)
        worker.step_while(lambda: False)
        worker.step()
        if worker.index != 0:
            return None
        time.sleep(0.3)  # past the snapshot interval, then one more step publishes
        worker.step()
        return _get(f"http://127.0.0.1:{port}/api/state")

    return fn


def test_with_several_workers_worker_0_serves_the_dashboard():
    port = _free_port()
    state, other = pt.execute(_read_own_dashboard(port), workers=2, dashboard=port, timeout=60)
    assert other is None
    assert (state["worker"], state["peers"]) == (0, 2)
    [op] = state["operators"].values()
    assert op["name"] == "Input" and op["held_here"] == [{"output": 0, "time": "3", "count": 1}]


def _spread(scope):
    """Input -> Exchange -> Map -> Probe: every worker's Map gets records."""
    inp, stream = scope.new_input()
    return inp, stream.exchange(lambda x: x).map(lambda x: x + 1).probe()


def _map_row(state: dict) -> dict:
    """The Map operator's row ({} in a snapshot taken before the dataflow was built)."""
    return next((op for op in state["operators"].values() if op["name"].startswith("Map")), {})


def _gathered(port: int, tmp_path):
    """Worker 0 feeds both workers until its dashboard shows records into worker 1's Map, then
    lets Chromium render the page; worker 1 only runs what it is sent."""

    def fn(worker):
        inp, probe = worker.dataflow(_spread, name="spread")
        if worker.index != 0:
            return None
        url = f"http://127.0.0.1:{port}/"
        deadline, epoch = time.monotonic() + DEADLINE / 2, 0
        while time.monotonic() < deadline:
            inp.send_batch(list(range(epoch * 10, epoch * 10 + 10)))
            epoch += 1
            inp.advance_to(epoch)
            worker.step_while(lambda: probe.less_than(epoch), timeout=DEADLINE)
            state = _get(url + "api/state")
            if _map_row(state).get("workers", {}).get("1", {}).get("records_in", 0) > 0:
                break
            time.sleep(0.05)
        dom = _browse(url, tmp_path, "--dump-dom")
        return state, dom.returncode, dom.stdout

    return fn


def test_worker_0_shows_the_figures_of_every_worker(tmp_path):
    port = _free_port()
    results = pt.execute(_gathered(port, tmp_path), workers=2, dashboard=port, timeout=90)
    (state, returncode, dom), _ = results
    assert state["workers"] == [0, 1]
    per_worker = _map_row(state)["workers"]
    assert set(per_worker) == {"0", "1"}
    assert per_worker["1"]["invocations"] > 0 and per_worker["1"]["records_in"] > 0
    assert _map_row(state)["invocations"] == sum(f["invocations"] for f in per_worker.values())
    assert returncode == 0
    assert '<option value="1">worker 1</option>' in dom
    cells = re.findall(r"<td class=\"per-worker\">w0: (\d+) · w1: (\d+)</td>", dom)
    assert cells and any(int(w1) > 0 for _w0, w1 in cells), dom[-3000:]


def _stuck_after_some_work(worker):
    inp, probe = worker.dataflow(_spread, name="left open")
    for epoch in range(1, 4):  # both workers step, so both send figures
        inp.send_batch([epoch, epoch + 1])
        inp.advance_to(epoch)
        worker.step_while(lambda: probe.less_than(epoch), timeout=DEADLINE)
    worker.step_while(lambda: probe.less_than(100))  # the inputs stay open: stuck


def test_a_stuck_run_with_a_dashboard_on_two_workers_is_still_declared_stuck():
    started = time.monotonic()
    with pytest.raises(pt.StuckError):
        pt.execute(
            _stuck_after_some_work, workers=2, dashboard=_free_port(), stuck_after=1.0, timeout=40
        )
    assert time.monotonic() - started < 30


def test_a_stuck_run_shows_a_stuck_banner_in_the_browser(tmp_path):
    """The stuck detector's verdict reaches the page: a red banner that says STUCK, and a header
    that no longer says the dataflow is running."""
    port = _free_port()

    def stuck(worker):
        worker.dataflow(lambda s: s.new_input()[1].map(str).probe(), name="never closed")
        worker.step_while(lambda: True)

    with pytest.raises(pt.StuckError):
        pt.execute(stuck, dashboard=port)
    state = _get(f"http://127.0.0.1:{port}/api/state")
    assert state["verdict"] == "stuck"
    dom = _browse(f"http://127.0.0.1:{port}/", tmp_path, "--dump-dom").stdout
    banner = re.search(r'<div id="verdict" class="(\w+)">([^<]*)</div>', dom)
    assert banner is not None, dom[:2000]
    assert banner.group(1) == "stuck" and banner.group(2).startswith("STUCK")
    status = re.search(r'<div id="status">([^<]*)</div>', dom).group(1)
    assert "stuck with 1 dataflow(s) incomplete" in status and "running" not in status


def test_a_worker_stepped_by_hand_reports_its_stuck_verdict_to_the_dashboard():
    """Without ``execute``: the worker tells its observers before raising StuckError."""
    worker = pt.Worker()
    board = serve_dashboard(worker, port=0)
    worker.dataflow(lambda s: s.new_input()[1].probe())
    assert json.loads(board.state_json())["verdict"] in ("idle", "running")
    with pytest.raises(pt.StuckError):
        worker.step_while(lambda: True)
    state = json.loads(board.state_json())
    assert state["verdict"] == "stuck"
    assert state["error"].startswith("StuckError: step_while")


def test_finished_and_idle_runs_are_told_apart():
    worker = pt.Worker()
    board = serve_dashboard(worker, port=0)
    inp = worker.dataflow(lambda s: s.new_input()[0])
    worker.step()
    board.publish()
    assert json.loads(board.state_json())["verdict"] == "idle"  # installed, nothing ran lately
    inp.close()
    worker.run()
    board.publish()
    assert json.loads(board.state_json())["verdict"] == "finished"


def test_the_first_paint_holds_the_current_state(running):
    """The page carries the latest snapshot inline: a browser (or a screenshot taken without
    letting scripts fetch) shows the operators at once, not "connecting..."."""
    with urllib.request.urlopen(running.board.url, timeout=DEADLINE) as r:
        page = r.read().decode()
    initial = re.search(r"const INITIAL = (\{.*?\});\n", page)
    assert initial is not None
    state = json.loads(initial.group(1))
    assert sorted(op["name"] for op in state["operators"].values()) == sorted(running.names)
