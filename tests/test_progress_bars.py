"""Progress bars on long batch work: shown on a terminal, never written into logs or pipes."""

from __future__ import annotations

import io
import sys

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
