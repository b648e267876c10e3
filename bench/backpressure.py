"""Slow consumer: does flow control keep memory flat when one worker cannot keep up?

Two worker processes.  Worker 0's input sends batches of ``--batch`` integers as fast as it
can, each batch at a new time, all exchanged to worker 1, whose operator spends ``--cost``
seconds (default 150 us) per record.  A thread in each process samples its resident set size
every ``--every`` seconds for ``--seconds`` (default 180); then the producer stops, the consumer
stops spending time per record, and the run drains.  Without flow control the consumer's
memory grows for as long as the producer runs; with it the producer waits for credit
(:mod:`pytimely.communication.flow`) and both stay flat once the bound is reached.

Prints JSON: per worker the series of ``[seconds, RSS MB, records sent / consumed]`` and its
RSS growth from the first sample and from the
first sample after ``--warmup`` seconds (the time the bound takes to fill), the producer's
flow-control counters (waits, peak backlog), and how many records the consumer was behind.

    python bench/backpressure.py [--seconds 180] [--max-in-flight BYTES] [--cost 150e-6]
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections.abc import Callable

import pytimely as pt

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE / 2**20


class Sampler:
    """Samples ``(seconds, RSS MB, count())`` every ``every`` seconds on a daemon thread until
    stopped (``count``: records sent or consumed so far by this process)."""

    def __init__(self, every: float, count: Callable[[], int]) -> None:
        self.start = time.monotonic()
        self.series: list[tuple[float, float, int]] = []
        self._count = count
        self._stop = threading.Event()
        self._every = every
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self.series.append(
                (round(time.monotonic() - self.start, 2), round(rss_mb(), 1), self._count())
            )
            if self._stop.wait(self._every):
                return

    def stop(self) -> list[tuple[float, float, int]]:
        self._stop.set()
        self._thread.join()
        return self.series


def growth(series: list[tuple[float, float, int]], after: float) -> float | None:
    """Relative RSS change from the first sample at or after ``after`` seconds to the last."""
    later = [rss for t, rss, _count in series if t >= after]
    if len(later) < 2:
        return None
    return round(later[-1] / later[0] - 1, 4)


def work(worker: pt.Worker, args: argparse.Namespace, stop_at: float) -> dict:
    consumed = [0, -1]  # records, latest time

    def consume(t: int, batch: list) -> None:
        if time.time() < stop_at:
            time.sleep(args.cost * len(batch))  # the slow part: ~150 us per record
        consumed[0] += len(batch)
        consumed[1] = max(consumed[1], t)

    def build(scope):
        handle, numbers = scope.new_input()
        numbers.exchange(lambda n: 1).inspect_batch(consume)
        return handle

    handle = worker.dataflow(build)
    sent = 0
    sampler = Sampler(args.every, lambda: sent if worker.index == 0 else consumed[0])
    if worker.index == 0:
        t = 0
        while time.time() < stop_at:
            handle.send_batch(list(range(sent, sent + args.batch)))
            sent += args.batch
            t += 1
            handle.advance_to(t)
    else:
        worker.step_while(lambda: time.time() < stop_at)
    series = sampler.stop()
    handle.close()
    worker.run()
    flow = worker.allocator.flow_statistics()
    return {
        "worker": worker.index,
        "rss_mb": series,
        "growth_from_start": growth(series, 0.0),
        "growth_after_warmup": growth(series, args.warmup),
        "records_sent": sent,
        "flow_waits": worker.flow_waits,
        "max_in_flight": flow.get("max_in_flight"),
        "peak_backlog_bytes": flow.get("peak_backlog"),
        "acks_sent": flow.get("acks_sent"),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--every", type=float, default=2.0, help="seconds between RSS samples")
    parser.add_argument(
        "--warmup",
        type=float,
        default=None,
        help="seconds before the flat phase is judged (default: a sixth)",
    )
    parser.add_argument("--cost", type=float, default=150e-6, help="consumer seconds/record")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument(
        "--max-in-flight",
        type=int,
        default=None,
        help="flow-control bound in bytes (default: the library's)",
    )
    args = parser.parse_args(argv)
    if args.warmup is None:
        args.warmup = args.seconds / 6
    stop_at = time.time() + args.seconds + 2.0  # 2 s to start the processes
    out = pt.execute(
        lambda w: work(w, args, stop_at),
        workers=2,
        max_in_flight=args.max_in_flight,
        timeout=args.seconds + 600,
    )
    producer, consumer = out[0]["rss_mb"], out[1]["rss_mb"]
    samples = min(len(producer), len(consumer))
    result = {
        "seconds": args.seconds,
        "cost_per_record_s": args.cost,
        "batch": args.batch,
        "warmup_s": args.warmup,
        "records_behind": [
            (producer[i][0], producer[i][2] - consumer[i][2]) for i in range(samples)
        ],
        "producer": out[0],
        "consumer": out[1],
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
