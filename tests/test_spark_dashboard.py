"""The live dashboard of a pytimely job on Spark: ``pytimely.spark.run(..., dashboard=PORT)``."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from pytimely import spark as ps

DEADLINE = 90.0  # seconds the workers keep running without being told to stop


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None  # not serving yet


def _feed_until(stop_file: str):
    """A worker body: epochs through an Exchange and a Map until ``stop_file`` exists."""

    def work(worker):
        import os

        def build(scope):
            inp, stream = scope.new_input()
            return inp, stream.exchange(lambda x: x).map(lambda x: x * 2).probe()

        inp, probe = worker.dataflow(build, name="doubling")
        started, epoch = time.monotonic(), 0
        while not os.path.exists(stop_file) and time.monotonic() - started < DEADLINE:
            inp.send_batch(list(range(epoch * 10, epoch * 10 + 10)))
            epoch += 1
            inp.advance_to(epoch)
            worker.step_while(lambda: probe.less_than(epoch), timeout=DEADLINE)
            time.sleep(0.02)
        return epoch

    return work


@pytest.mark.spark
@pytest.mark.timeout(240)
def test_run_serves_the_dashboard_while_the_job_runs(spark, tmp_path):
    port = _free_port()
    stop_file = str(tmp_path / "stop")
    outcome: dict = {}

    def job():
        try:
            outcome["epochs"] = ps.run(
                spark, _feed_until(stop_file), workers=2, dashboard=port, timeout=DEADLINE + 60
            )
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            outcome["error"] = exc

    runner = threading.Thread(target=job, daemon=True)
    runner.start()
    url = f"http://127.0.0.1:{port}/"
    state = page = None
    deadline = time.monotonic() + DEADLINE
    try:
        while time.monotonic() < deadline and runner.is_alive():
            body = _get(url + "api/state")
            if body is not None:
                state = json.loads(body)
                names = [op["name"] for op in state["operators"].values()]
                workers = [op.get("workers", {}) for op in state["operators"].values()]
                if any(n.startswith("Map") for n in names) and any("1" in w for w in workers):
                    page = _get(url)
                    break
            time.sleep(0.2)
    finally:
        open(stop_file, "w").close()
        runner.join(DEADLINE)
    assert "error" not in outcome, outcome.get("error")
    assert state is not None, "the dashboard never answered while the job ran"
    assert (state["worker"], state["peers"]) == (0, 2)
    assert page is not None and b"pytimely dashboard" in page
    assert sorted(n.split("(")[0] for n in (op["name"] for op in state["operators"].values())) == [
        "Exchange",
        "Input",
        "Map",
        "Probe",
    ]
    assert state["workers"] == [0, 1]
    epochs = outcome["epochs"]
    assert len(epochs) == 2 and all(e > 0 for e in epochs)


def test_demo_dashboard_flag_reaches_the_spark_workers(tmp_path, monkeypatch):
    """``python -m pytimely.demo --dashboard PORT``: the port goes from the command line to
    ``run_on_dataframe`` (so to every worker's ``run_worker``); the run itself is the Spark
    test above."""
    import pytimely.demo as demo
    import pytimely.spark as spark_api

    demos: list[dict] = []
    monkeypatch.setattr(demo, "run_demo", lambda workload, **kw: demos.append(kw) or {"ok": 1})
    assert demo.main(["--workload", "wordcount", "--dashboard", "8123"]) == 0
    assert demos[0]["dashboard"] == 8123

    launches: list[dict] = []
    monkeypatch.setattr(
        spark_api, "run_on_dataframe", lambda df, build, **kw: launches.append(kw) or []
    )
    lines: list[str] = []
    ctx = demo.Context(
        spark=None,
        out=str(tmp_path),
        workers=2,
        rows=10,
        epochs=2,
        say=lines.append,
        dashboard=8123,
    )
    dirs = {"results": str(tmp_path / "r"), "capture": str(tmp_path / "c")}
    demo.WORDCOUNT.run_dataflow(ctx, None, {"dirs": dirs})
    assert launches[0]["dashboard"] == 8123
    assert "http://127.0.0.1:8123/" in "\n".join(lines)


def _state_seen_by_worker_0(port: int):
    """A ``run_on_dataframe`` build whose worker 0 reads its own dashboard from inside the
    dataflow (so while the job runs) when the first rows arrive."""

    def build(scope, stream):
        seen: list = []

        def look(_row):
            if scope.index == 0 and not seen:
                seen.append(json.loads(_get(f"http://127.0.0.1:{port}/api/state")))

        stream.inspect(look)
        return seen

    return build


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_run_on_dataframe_serves_the_dashboard(spark):
    port = _free_port()
    df = spark.createDataFrame([(e, k) for e in range(3) for k in range(4)], "epoch long, k long")
    results = ps.run_on_dataframe(
        df, _state_seen_by_worker_0(port), time="epoch", workers=2, dashboard=port, timeout=120
    )
    [state] = results[0]
    assert (state["worker"], state["peers"]) == (0, 2)
    assert results[1] == []
