"""Throughput of the NEXMark generator: ``python3 -m pytimely.nexmark.bench [events]``.

Reports events per second of wall time and of process CPU time (the machine may be shared),
for the fast columnar path (one worker's stream, and ``generate`` over all workers) and for
the scalar reference path.
"""

from __future__ import annotations

import sys
import time

from .generator import NexmarkConfig, WorkerStream, generate, generate_scalar
from .generator.columnar import _CHECKPOINTS


def _measure(fn) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def main(argv: list[str] | None = None) -> None:
    """Command line: print generator events per second for 1, 4 and 12 workers."""
    argv = sys.argv[1:] if argv is None else argv
    count = int(argv[0]) if argv else 2_000_000
    print(f"events per measurement: {count:,}")
    for workers in (1, 4, 12):
        cfg = NexmarkConfig(rate=4_000_000, workers=workers)
        generate(cfg, 0, 60_000)  # warm-up: tables, imports
        s = WorkerStream(cfg, 0)
        s.seek(100_000)
        res = {}
        res["one worker's stream"] = _measure(
            lambda s=s, w=workers: s.generate_until(100_000 + count * w)
        )
        res["generate, all workers"] = _measure(lambda cfg=cfg: generate(cfg, 0, count))
        s2 = WorkerStream(cfg, 0)
        _CHECKPOINTS.clear()  # measure a real walk, not a cached checkpoint
        res["seek: skip (no fields)"] = _measure(lambda s2=s2, w=workers: s2.seek(count * w))
        for name, (wall, cpu) in res.items():
            print(
                f"P={workers:3d} {name:24s} {count / wall / 1e6:6.2f} M ev/s wall, "
                f"{count / cpu / 1e6:6.2f} M ev/s cpu"
            )
    n = 50_000
    wall, cpu = _measure(lambda: generate_scalar(NexmarkConfig(), 0, n))
    print(
        f"scalar reference path          {n / wall / 1e3:6.0f} k ev/s wall, "
        f"{n / cpu / 1e3:6.0f} k ev/s cpu"
    )


if __name__ == "__main__":
    main()
