"""Progress bars on long batch work: shown on a terminal, never written into logs or pipes."""

from __future__ import annotations

import io
import sys

import pytest

import pytimely as pt
from pytimely.capture import FileWriter, inspect_file


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _capture(path: str) -> None:
    def build(scope):
        scope.to_stream(range(5000)).capture_into(FileWriter(str(path)))

    pt.example(build)


def test_inspecting_a_capture_shows_a_bar_only_on_a_terminal(tmp_path, monkeypatch, capsys):
    path = tmp_path / "c.ptcap"
    _capture(path)
    inspect_file(str(path), progress=True)
    out, err = capsys.readouterr()
    assert "events:" in out
    assert err == ""  # stderr is captured here, not a terminal: no bar in logs or pipes
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    inspect_file(str(path), progress=True)
    assert "inspecting c.ptcap" in terminal.getvalue()
    terminal.seek(0)
    terminal.truncate(0)
    inspect_file(str(path), progress=False)  # --no-progress
    assert terminal.getvalue() == ""


def _feed_epochs(progress_for):
    """Feed one worker a DataFrame partition's Arrow batches (epochs 0, 1 and 3 of the
    DataFrame's 0..4) through ``feed_batches``; ``progress_for(epochs)`` makes the bar."""
    import pyarrow as pa

    from pytimely.spark.dataframe import feed_batches

    worker = pt.Worker()
    seen: list = []

    def build(scope):
        handle, stream = scope.new_input()
        stream.inspect(seen.append)
        return handle

    handle = worker.dataflow(build)
    batches = [
        pa.record_batch([pa.array([0, 0, 1]), pa.array([10, 11, 12])], ["epoch", "v"]),
        pa.record_batch([pa.array([3]), pa.array([13])], ["epoch", "v"]),
    ]
    bar = progress_for([0, 1, 2, 3, 4])
    assert feed_batches(worker, handle, batches, "epoch", "tuples", bar) == 4
    handle.close()
    if bar is not None:
        bar.finish()
    worker.run()
    return seen


def test_dataframe_feeding_shows_epochs_done_of_total_only_on_a_terminal(monkeypatch, capsys):
    from pytimely.spark.dataframe import EpochProgress

    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    advances: list[int] = []

    class Recording(EpochProgress):
        def advanced_to(self, t):
            advances.append(t)
            super().advanced_to(t)

    seen = _feed_epochs(lambda epochs: Recording(epochs, "worker 0 epochs"))
    assert sorted(seen) == [(0, 10), (0, 11), (1, 12), (3, 13)]
    assert advances == [1, 3]
    shown = terminal.getvalue()
    assert "worker 0 epochs" in shown and "5/5" in shown  # every epoch done once closed
    monkeypatch.undo()

    _feed_epochs(lambda epochs: EpochProgress(epochs, "worker 0 epochs"))
    assert capsys.readouterr().err == ""  # not a terminal: no bar in logs or pipes


def test_dataframe_feeding_does_without_tqdm(monkeypatch):
    from pytimely.spark.dataframe import EpochProgress

    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setitem(sys.modules, "tqdm", None)  # `import tqdm` raises ImportError
    seen = _feed_epochs(lambda epochs: EpochProgress(epochs, "worker 0 epochs"))
    assert len(seen) == 4 and terminal.getvalue() == ""


def _count_rows(scope, stream):
    rows: list = []
    stream.inspect(rows.append)
    return rows


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_run_on_dataframe_collects_the_epochs_only_for_a_bar(spark, monkeypatch):
    from pytimely import spark as ps
    from pytimely.spark import dataframe

    collected: list = []
    real = dataframe._distinct_epochs

    def distinct_epochs(df, time):
        collected.append(real(df, time))
        return collected[-1]

    monkeypatch.setattr(dataframe, "_distinct_epochs", distinct_epochs)
    df = spark.createDataFrame([(e, k) for e in (0, 2, 5) for k in range(4)], "epoch long, k long")
    quiet = ps.run_on_dataframe(df, _count_rows, time="epoch", records="tuples", timeout=120)
    assert collected == []  # stderr is not a terminal here: no bar, no extra Spark job
    shown = ps.run_on_dataframe(
        df, _count_rows, time="epoch", records="tuples", progress=True, timeout=120
    )
    assert collected == [[0, 2, 5]]
    assert sum(map(len, shown)) == sum(map(len, quiet)) == 12


def test_replaying_a_capture_shows_a_bar_only_on_a_terminal(tmp_path, monkeypatch, capsys):
    from pytimely.cli import _replay_and_print

    path = tmp_path / "c.ptcap"
    _capture(path)
    assert _replay_and_print(str(path)) is None
    out, err = capsys.readouterr()
    assert out.count("\n") == 5000 and err == ""  # every record; no bar in logs or pipes
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert _replay_and_print(str(path)) is None
    assert "replaying c.ptcap" in terminal.getvalue()
    terminal.seek(0)
    terminal.truncate(0)
    assert _replay_and_print(str(path), progress=False) is None  # --no-progress
    assert terminal.getvalue() == ""
