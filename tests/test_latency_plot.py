"""The demo's latency plot: a run that did not finish is a marker above the values, not a bar
that reads as a latency, and the axis fits the data."""

from __future__ import annotations

from pytimely.nexmark import latency
from pytimely.openloop import DNF_NS


def _run(query, idiom, rate, p50=None, p999=None, dnf=False):
    return {
        "query": query,
        "idiom": idiom,
        "rate": rate,
        "workers": 1,
        "dnf": dnf,
        "p50_ms": p50,
        "p999_ms": p999,
        "max_ms": p999,
    }


RUNS = [
    _run("q4", "tokens", 1000, 1.5, 12.0),
    _run("q4", "notifications", 1000, 2.0, 30.0),
    _run("q4", "watermarks", 1000, 3.0, 80.0),
    _run("q4", "tokens", 8000, 4.0, 200.0),
    _run("q4", "notifications", 8000, dnf=True),
    _run("q4", "watermarks", 8000, dnf=True),
]


def test_the_scale_fits_the_finished_runs_and_puts_dnf_above_them():
    scale = latency.plot_scale(RUNS)
    highest = max(r["p999_ms"] for r in RUNS if not r["dnf"])
    lowest = min(r["p50_ms"] for r in RUNS if not r["dnf"])
    assert scale["dnf"] > highest  # above every value: cannot be read as one
    assert scale["dnf"] < scale["top"]  # but inside the panel
    assert scale["bottom"] < lowest
    assert scale["top"] <= highest * 10 < DNF_NS / 1e6 * 20  # not stretched to the DNF bound


def test_every_run_dnf_still_has_a_scale():
    scale = latency.plot_scale([_run("q7", "tokens", 1000, dnf=True)])
    assert scale["bottom"] < scale["dnf"] < scale["top"]


def test_the_plot_draws_every_idiom_and_the_dnf_marker(tmp_path, monkeypatch):
    import matplotlib.axes

    drawn = {"markers": [], "legend": []}
    plot_marker = matplotlib.axes.Axes.plot
    legend = matplotlib.axes.Axes.legend

    def spy_plot(self, *args, **kwargs):
        drawn["markers"].append((args, kwargs.get("marker")))
        return plot_marker(self, *args, **kwargs)

    def spy_legend(self, *args, **kwargs):
        drawn["legend"] = [h.get_label() for h in kwargs.get("handles", [])]
        return legend(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", spy_plot)
    monkeypatch.setattr(matplotlib.axes.Axes, "legend", spy_legend)
    path = latency.plot(RUNS, str(tmp_path / "latency.png"))
    assert (tmp_path / "latency.png").stat().st_size > 0 and path.endswith("latency.png")
    dnf_y = latency.plot_scale(RUNS)["dnf"]
    assert [m for (args, m) in drawn["markers"] if m == "x" and args[1] == dnf_y] and len(
        [1 for _args, m in drawn["markers"] if m == "x"]
    ) == 2
    assert drawn["legend"][:3] == ["tokens", "notifications", "watermarks"]
    assert "did not finish" in drawn["legend"]
