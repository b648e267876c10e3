"""Event-time window throughput: keyed tumbling counts (record and columnar paths) and
sessionization, per worker.

* ``tumbling-records``: ``--events`` (default 5 M) ``(key, 1)`` records over ``--keys``
  (1,000) int keys, timestamps in ms used as event times, ``window_count(pt.Tumbling(1000))``
  (1 s windows).  Batches of ``--batch`` records per timestamp, ``--tick`` ms apart.
* ``tumbling-columnar``: the same events as numpy structured arrays (``key`` column), batches
  of ``--columnar-batch`` rows, ``window_count(pt.Tumbling(1000), key="key")``.
* ``sessions``: ``--clicks`` (default 1 M) click events of ``--users`` users, one batch of
  ``--batch`` clicks per ms, ``window_count(pt.Session(--gap))``.

Input batches are built before the clock starts (a small pool is cycled for the tumbling
variants, so memory stays small); every run checks that the counts add up to the events sent.
Prints JSON with records/s per worker, by wall time and by CPU time (the busiest worker's
``time.process_time``: steadier than wall time on a shared machine).  Targets (issue 14):
tumbling >= 2.5 M records/s per worker (records), >= 20 M/s (columnar); sessionization
>= 1 M events/s per worker.

    python bench/windows.py [--events N] [--clicks N] [--workers 1,2] [--variants a,b]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

import pytimely as pt
from pytimely.synchronization import barrier

POOL = 16  # distinct input batches cycled by the tumbling variants
VARIANTS = ("tumbling-records", "tumbling-columnar", "sessions")


def _pool(keys: int, batch: int, columnar: bool) -> list:
    out = []
    for i in range(POOL):
        ids = np.random.default_rng(i).integers(0, keys, batch)
        if columnar:
            b = np.zeros(batch, dtype=[("key", "i8")])
            b["key"] = ids
            out.append(b)
        else:
            out.append([(k, 1) for k in ids.tolist()])
    return out


def _clicks(worker_index: int, peers: int, clicks: int, users: int, batch: int) -> list:
    """This worker's ``(ms, [(user, page)])`` batches: batch ``k`` is at ms ``k``."""
    out = []
    for k in range(worker_index, clicks // batch, peers):
        rng = np.random.default_rng(1_000_003 + k)
        out.append((k, [(u, 1) for u in rng.integers(0, users, batch).tolist()]))
    return out


def run(variant: str, args: argparse.Namespace, workers: int) -> dict:
    columnar = variant == "tumbling-columnar"
    sessions = variant == "sessions"
    batch = args.columnar_batch if columnar else args.batch
    total = args.clicks if sessions else args.events
    n_batches = total // batch

    def work(worker):
        counted = [0]

        def build(scope):
            inp, stream = scope.new_input()
            if sessions:
                w = stream.window_count(pt.Session(args.gap))
            elif columnar:
                w = stream.window_count(pt.Tumbling(1000), key="key")
            else:
                w = stream.window_count(pt.Tumbling(1000))

            def tally(_t, results):
                counted[0] += sum(r[3] for r in results)

            w.output.inspect_batch(tally)
            return inp

        inp = worker.dataflow(build)
        if sessions:
            local = _clicks(worker.index, worker.peers, total, args.users, batch)
        else:
            pool = _pool(args.keys, batch, columnar)
            local = [
                (k * args.tick, pool[k % POOL])
                for k in range(worker.index, n_batches, worker.peers)
            ]
        barrier(worker)
        t0, c0 = time.perf_counter(), time.process_time()
        for step, (t, b) in enumerate(local):
            inp.advance_to(t)
            inp.send_batch(b)
            if step % 16 == 15:
                worker.step()
        inp.close()
        worker.run()
        return time.perf_counter() - t0, time.process_time() - c0, counted[0]

    results = pt.execute(work, workers=workers)
    compute = max(e for e, _cpu, _c in results)
    cpu = max(c for _e, c, _n in results)
    counted = sum(n for _e, _cpu, n in results)
    events = n_batches * batch
    return {
        "variant": variant,
        "workers": workers,
        "events": events,
        "batch": batch,
        "seconds": round(compute, 3),
        "records_per_s": round(events / compute),
        "records_per_s_per_worker": round(events / compute / workers),
        "cpu_seconds": round(cpu, 3),
        "records_per_cpu_s_per_worker": round(events / cpu / workers),
        "verified": counted == events,
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=5_000_000)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--columnar-batch", type=int, default=100_000)
    ap.add_argument("--tick", type=int, default=10, help="ms between tumbling batches")
    ap.add_argument("--clicks", type=int, default=1_000_000)
    ap.add_argument("--users", type=int, default=50_000)
    ap.add_argument("--gap", type=int, default=100, help="session gap in ms")
    ap.add_argument("--workers", default="1")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args(argv)
    results = [
        run(v, args, int(w)) for v in args.variants.split(",") for w in args.workers.split(",")
    ]
    out = {
        "benchmark": "windows",
        "python": sys.version.split()[0],
        "results": results,
        "targets": {
            "tumbling-records_per_s_per_worker": 2_500_000,
            "tumbling-columnar_per_s_per_worker": 20_000_000,
            "sessions_per_s_per_worker": 1_000_000,
        },
    }
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
