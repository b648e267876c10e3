"""Judging open-loop latency measurements: the median of repeated runs and the machine's load
while they ran (``pytimely.openloop``)."""

from __future__ import annotations

import os

import pytest

from pytimely.openloop import (
    LatencyHistogram,
    LoadReading,
    MachineLoad,
    median_run,
    merge_results,
    wait_until_quiet,
)


def _run(p50, p999, mx, dnf=False):
    return {
        "query": "q4",
        "idiom": "tokens",
        "rate": 1000,
        "workers": 1,
        "dnf": dnf,
        "p50_ms": p50,
        "p99_ms": p50,
        "p999_ms": p999,
        "max_ms": mx,
    }


def test_median_run_takes_each_metric_median_and_keeps_the_repeats():
    runs = [_run(3.0, 9.0, 40.0), _run(1.0, 7.0, 12.0), _run(2.0, 30.0, 11.0)]
    m = median_run(runs)
    assert (m["p50_ms"], m["p999_ms"], m["max_ms"]) == (2.0, 9.0, 12.0)
    assert not m["dnf"] and m["query"] == "q4" and m["rate"] == 1000
    assert [r["p50_ms"] for r in m["repeats"]] == [3.0, 1.0, 2.0]


def test_median_run_is_dnf_exactly_when_the_median_run_is():
    one_dnf = [_run(1.0, 2.0, 3.0), _run(5.0, 6.0, 7.0, dnf=True), _run(2.0, 3.0, 4.0)]
    m = median_run(one_dnf)
    assert not m["dnf"] and m["p50_ms"] == 2.0 and m["max_ms"] == 4.0
    two_dnf = [_run(1.0, 2.0, 3.0), _run(5.0, 6.0, 7.0, dnf=True), _run(2.0, 3.0, 4.0, True)]
    assert median_run(two_dnf)["dnf"]
    with pytest.raises(ValueError):
        median_run([])


def test_a_run_without_samples_is_dnf_not_nan():
    # A machine too busy to bring a record through within the run: no latency at all.
    empty = {"offered": 100, "dnf": False, "histogram": LatencyHistogram().to_state()}
    merged = merge_results([empty])
    assert merged["dnf"] and merged["records"] == 0
    m = median_run([merged, merged, _run(1.0, 2.0, 3.0)])
    assert m["dnf"]  # two of three runs did not finish: the median run did not


def _reading(wall, busy, own, load=(0.5, 0.5, 0.5)):
    return LoadReading(wall=wall, system_busy=busy, own_cpu=own, loadavg=load)


def test_machine_load_counts_other_processes_cpu_not_ours():
    # 10 s; the machine was busy 14 CPU-seconds, 9 of them ours: others used 0.5 CPU.
    load = MachineLoad.between(_reading(100.0, 1000.0, 50.0), _reading(110.0, 1014.0, 59.0))
    assert load.others_cpus == pytest.approx(0.5)
    assert load.cpus == (os.cpu_count() or 1)
    assert not load.under_load(busy_cpus=0.6) and load.under_load(busy_cpus=0.4)
    text = load.describe()
    assert text.startswith(f"machine: {load.cpus} CPUs") and "0.50 / 0.50 / 0.50" in text
    assert "other processes busy 0.50 CPUs" in text
    assert load.to_dict()["others_cpus"] == 0.5


def test_machine_load_falls_back_to_the_load_average_without_proc_stat():
    quiet = MachineLoad.between(
        _reading(0.0, None, 0.0, (1.2, 1, 1)), _reading(5.0, None, 5.0, (1.3, 1, 1))
    )
    assert quiet.others_cpus is None
    assert not quiet.under_load(busy_cpus=0.5, own_cpus=1.0)  # 1.3 <= our 1 + 0.5
    busy = MachineLoad.between(
        _reading(0.0, None, 0.0, (1.2, 1, 1)), _reading(5.0, None, 5.0, (2.9, 1, 1))
    )
    assert busy.under_load(busy_cpus=0.5, own_cpus=1.0)
    assert (
        "n/a"
        in MachineLoad.between(_reading(0, None, 0, None), _reading(1, None, 1, None)).describe()
    )


def test_a_real_reading_and_a_bounded_wait():
    before = LoadReading.now()
    after = LoadReading.now()
    load = MachineLoad.between(before, after)
    assert load.seconds >= 0 and load.cpus >= 1
    assert wait_until_quiet(0.0) is None  # no time for a single window: no waiting at all
    last = wait_until_quiet(0.5, busy_cpus=1e9, window=0.2)  # anything counts as quiet
    assert last is not None and not last.under_load(1e9)


def test_open_loop_stamps_each_record_with_its_scheduled_offset_and_sees_it_at_the_sink():
    import pytimely as pt
    from pytimely.openloop import run_open_loop

    rate, quantum_log2 = 20_000, 14
    stamped = []

    def build(scope, stream):
        return stream.inspect_time(lambda t, r: stamped.append((r[0], t)))

    def work(worker):
        return run_open_loop(
            worker, build, rate, 0.3, quantum_log2, warmup=0.1, seen=lambda r: r[1]
        )

    summary = merge_results(pt.execute(work, timeout=60))
    period_ns = 1e9 / rate
    mask = ~((1 << quantum_log2) - 1)
    # Every offered record went through once, at its scheduled offset rounded to the quantum.
    assert sorted(i for i, _t in stamped) == list(range(summary["offered"]))
    assert all(t == int(i * period_ns) & mask for i, t in stamped)
    # Measured twice: at the sink, and once its time was complete (never earlier).
    if not summary["dnf"]:  # (a machine too busy to keep up stops the run early)
        assert summary["records"] == summary["seen_records"] > 0
        assert 0 < summary["seen_p50_ms"] <= summary["p50_ms"]
        assert summary["seen_max_ms"] <= summary["max_ms"]
