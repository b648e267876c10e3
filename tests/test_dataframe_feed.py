"""Feeding Arrow batches into an input: many times per step, one token, event time as data.

``feed_batches`` is what every Spark worker of ``run_on_dataframe`` runs over its partition; it
is tested here without Spark, on batches made with pyarrow.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import pytimely as pt
from pytimely.errors import CapabilityError, TimelyError
from pytimely.spark.dataframe import feed_batches


class CountingWorker:
    """A worker that counts its ``step`` calls."""

    def __init__(self) -> None:
        self.worker = pt.Worker()
        self.steps = 0

    def step(self) -> bool:
        self.steps += 1
        return self.worker.step()


def _run(batches, time, records="tuples", delay=None, build=None, step_rows=10_000):
    """Feed ``batches``; return (what the stream carried, as ``(time, record)``, steps, and
    the changes of the input's time seen by a probe)."""
    counting = CountingWorker()
    seen: list = []

    def dataflow(scope):
        handle, stream = scope.new_input()
        out = stream if build is None else build(stream)
        out.inspect_batch(lambda t, batch: seen.extend((t, r) for r in batch))
        return handle

    handle = counting.worker.dataflow(dataflow)
    rows = feed_batches(counting, handle, batches, time, records, None, delay, step_rows)
    handle.close()
    counting.worker.run()
    return seen, counting.steps, rows


def _batch(times, values, name="t"):
    return pa.record_batch([pa.array(times, pa.int64()), pa.array(values)], [name, "v"])


def test_exact_times_step_once_per_batch_however_many_times_it_holds():
    times = list(range(1_000))
    batches = [_batch(times, list(range(1_000))), _batch([1_000, 1_000, 1_500], [7, 8, 9])]
    seen, steps, rows = _run(batches, "t")
    assert rows == 1_003
    assert steps == 2  # one per Arrow batch, not one per distinct time (1,002 of them)
    assert sorted(seen) == sorted([(t, (t, t)) for t in times] + [
        (1_000, (1_000, 7)), (1_000, (1_000, 8)), (1_500, (1_500, 9))
    ])  # fmt: skip


def test_large_batches_are_fed_in_slices_of_step_rows_each_with_its_watermark():
    times = list(range(0, 2_500, 10))  # 250 rows
    seen, steps, rows = _run([_batch(times, times)], "t", delay=0, step_rows=100)
    assert rows == 250 and steps == 3  # 100 + 100 + 50 rows, a step after each
    assert sorted({t for t, _r in seen}) == [0, 990, 1_990]  # a watermark per slice


def test_exact_times_in_arrow_form_come_as_one_slice_per_time():
    seen_batches: list = []

    def build(stream):
        stream.inspect_batch(lambda t, b: seen_batches.append((t, b.num_rows)))
        return stream

    _run([_batch([3, 3, 5, 9], [1, 2, 3, 4])], "t", records="arrow", build=build)
    assert seen_batches == [(3, 2), (5, 1), (9, 1)]


def test_an_unsorted_partition_is_refused_naming_the_column():
    with pytest.raises(TimelyError, match="time column 't'.*not sorted"):
        _run([_batch([5, 4], [1, 2])], "t")


def test_nulls_and_negative_times_name_the_column_and_the_row():
    nulls = pa.record_batch([pa.array([1, None], pa.int64()), pa.array([10, 11])], ["t", "v"])
    with pytest.raises(ValueError, match=r"time column 't' has a null in row 1.*'v': 11"):
        _run([nulls], "t")
    with pytest.raises(ValueError, match=r"negative time -3 in row 0"):
        _run([_batch([-3, 1], [1, 2])], "t")


def test_a_time_column_of_another_type_is_refused():
    text = pa.record_batch([pa.array(["a"]), pa.array([1])], ["t", "v"])
    with pytest.raises(TypeError, match="time column 't' is string"):
        _run([text], "t")


def test_event_time_rows_enter_at_the_watermark_once_per_batch():
    # Millisecond event times: each batch is one time, the watermark before it.
    batches = [_batch([1_000, 1_003, 1_007], [1, 2, 3]), _batch([1_009, 2_000], [4, 5])]
    seen, steps, _rows = _run(batches, "t", delay=5)
    assert steps == 2
    assert [t for t, _r in seen] == [0, 0, 0, 1_002, 1_002]  # 1_007 - 5, then 2_000 - 5 after
    assert [r for _t, r in seen] == [(1_000, 1), (1_003, 2), (1_007, 3), (1_009, 4), (2_000, 5)]


def test_timestamp_columns_arrive_as_milliseconds():
    stamps = pa.array([1_700_000_000_123_000, 1_700_000_000_456_000], pa.timestamp("us"))
    batch = pa.record_batch([stamps, pa.array([1, 2])], ["ts", "v"])

    def times_of(delay):
        times: list = []

        def build(stream):
            stream.inspect_batch(lambda t, b: times.append(t))
            return stream.map_batch(lambda b: [])

        _run([batch], "ts", records="arrow", delay=delay, build=build)
        return times

    assert times_of(None) == [1_700_000_000_123, 1_700_000_000_456]  # exact: the ms
    assert times_of(0) == [0]  # event time: the first batch enters at the initial watermark


def test_sessions_by_millisecond_event_time_equal_a_batch_computation():
    import random

    rng = random.Random(3)
    clicks = sorted((rng.randrange(60_000), rng.randrange(20)) for _ in range(2_000))
    batches = [
        pa.record_batch(
            [pa.array([u for _x, u in part], pa.int64()), pa.array([x for x, _u in part])],
            ["user", "ts_ms"],
        )
        for part in (clicks[i : i + 300] for i in range(0, len(clicks), 300))
    ]
    found: list = []

    def build(stream):
        return stream.window_count(
            pt.Session(1_000), key=lambda r: r[0], event_time=lambda r: r[1]
        ).output.inspect(found.append)

    _run(batches, "ts_ms", delay=0, build=build)
    expected = []
    for user in range(20):
        xs = sorted(x for x, u in clicks if u == user)
        start = last = xs[0]
        n = 0
        for x in xs:
            if x - last >= 1_000:
                expected.append((user, start, last + 1_000, n))
                start, n = x, 0
            last, n = x, n + 1
        expected.append((user, start, last + 1_000, n))
    assert sorted(found) == sorted(expected)


def test_send_batch_with_times_holds_the_least_token_and_checks_times():
    def build(scope):
        inp, stream = scope.new_input()
        out = stream.capture()
        inp.send_batch([("a", 1), ("b", 2), ("c", 3)], times=[30, 10, 30])
        assert inp.time == 0  # sending at later times does not advance the input
        inp.advance_to(20)
        with pytest.raises(CapabilityError, match=r"record 0 \('d'\) is at time 15"):
            inp.send_batch(["d"], times=[15])
        with pytest.raises(ValueError, match="2 records and 1 times"):
            inp.send_batch(["d", "e"], times=[25])
        return out

    assert pt.example(build).extract() == [(10, [("b", 2)]), (30, [("a", 1), ("c", 3)])]


@pytest.mark.timeout(60)
def test_a_probe_keeps_the_workers_inputs_within_a_slice_of_each_other():
    # Worker 0's partition streams in slowly, worker 1's at once: with the probe, worker 1
    # waits for worker 0 instead of running ahead with its whole partition.
    import time

    def work(worker):
        leads: list = []

        def dataflow(scope):
            handle, stream = scope.new_input()
            return handle, stream.probe()

        handle, probe = worker.dataflow(dataflow)

        def batches():
            for i in range(20):
                if worker.index == 0:
                    time.sleep(0.02)
                leads.append(handle.time - min(probe.frontier, default=handle.time))
                yield _batch(list(range(i * 100, i * 100 + 100)), list(range(100)))

        feed_batches(worker, handle, batches(), "t", "tuples", None, 0, 100, probe)
        handle.close()
        worker.run()
        return max(leads)

    most = pt.execute(work, workers=2, timeout=50)
    assert max(most) <= 200  # at most two slices (each spans 100 time units) ahead
