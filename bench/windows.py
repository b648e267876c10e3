"""Event-time window throughput per worker, fed from Python per event batch as a source would.

Headline variants (the default): ``--events`` (3 M) ``(key, event_time)`` records over
``--keys`` (1,000) int keys, event times advancing 1 ms per event on average with a little
disorder (each event up to ``--disorder`` ms, 100, earlier than its place), in batches of
``--batch`` (1,000) records.  Each worker feeds its share of the batches the documented way::

    inp.send_batch(batch)
    inp.advance_to(watermark)  # the greatest event time so far minus --delay (100 ms)

stepping the worker every ``--step-every`` (16) batches, into
``window_count(pt.Tumbling(1 s), event_time=itemgetter(1))``.  The same events run twice, with
event times (and watermarks) in **milliseconds** and in **seconds** (divided by 1000):

* ``tumbling-ms`` / ``tumbling-s``: ``pt.Tumbling(1000)`` / ``pt.Tumbling(1)``;
* ``session-ms`` / ``session-s``: ``--session-events`` (1 M) events of ``--users`` (50,000)
  users, ``window_count(pt.Session(30_000))`` / ``pt.Session(30)``.

Fine-grained times should cost (almost) nothing: the target is ms >= 0.8x s, and >= 3 M
events/s on one worker for the tumbling count.  Batches are built before the clock starts
(no pool is cycled); every run checks that the counts plus the late records add up to the
events sent.

Library variants over the same millisecond events (``--variants count-windows,asof-join``):
``count-windows`` is ``window_count(pt.Count(100))`` per key (timestamps are the watermarks;
checked: the counts are each key's full windows); ``asof-join`` joins the events with a second
input of quotes (every 10th event, re-sent) by ``asof_join(event_time=..., other_event_time=...)``
(checked: every event answered once).

Extra variants (``--variants``; the benchmark before it was changed, which cycles 16 pre-built
batches whose timestamps are the event times): ``tumbling-records`` (``--pool-events``, 5 M,
``window_count(pt.Tumbling(1000))``), ``tumbling-columnar`` (numpy structured arrays of
``--columnar-batch`` rows, ``key="key"``) and ``sessions`` (``--clicks`` click events, one
batch per ms, ``pt.Session(--gap)``).

Each configuration runs ``--repeat`` times (3), the variants alternating within a round.
Prints JSON: every run (records/s per worker by wall time and by CPU time -- the busiest
worker's ``time.process_time``, steadier on a shared machine -- and the load average
before and after), then the medians per variant and worker count, and the ms/s ratios.

    python bench/windows.py [--events N] [--workers 1,2] [--repeat 3] [--variants a,b]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from operator import itemgetter

import numpy as np

import pytimely as pt
from pytimely.synchronization import barrier

POOL = 16  # distinct input batches cycled by the pool variants
HEADLINE = ("tumbling-ms", "tumbling-s", "session-ms", "session-s")
LIBRARY = ("count-windows", "asof-join")
POOLED = ("tumbling-records", "tumbling-columnar", "sessions")
VARIANTS = HEADLINE + LIBRARY + POOLED
_event_time = itemgetter(1)


def _events(
    worker_index: int, peers: int, events: int, keys: int, args: argparse.Namespace, unit: int
) -> list[tuple[list, int]]:
    """This worker's ``(batch, watermark)`` pairs.  Global batch ``b`` holds events
    ``b * batch ...`` and goes to worker ``b % peers``; event ``i`` is at ``i`` ms minus a
    disorder of up to ``--disorder`` ms (``unit`` ms per time unit: 1 or 1000)."""
    batch = args.batch
    out = []
    key_objects = list(range(keys))  # one int object per key, as a decoder would share them
    high = -1
    for b in range(worker_index, events // batch, peers):
        rng = np.random.default_rng(7_919 * b + keys)
        lo = b * batch
        ms = np.arange(lo, lo + batch, dtype=np.int64) - rng.integers(0, args.disorder, batch)
        ts = (ms // unit).tolist() if unit != 1 else ms.tolist()
        ks = [key_objects[k] for k in rng.integers(0, keys, batch).tolist()]
        high = max(high, int(ms.max()))
        out.append((list(zip(ks, ts)), (high - args.delay) // unit))
    return out


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


def _operator(variant: str, stream: pt.Stream, args: argparse.Namespace) -> pt.Windowed:
    if variant == "tumbling-ms":
        return stream.window_count(pt.Tumbling(1000), event_time=_event_time)
    if variant == "tumbling-s":
        return stream.window_count(pt.Tumbling(1), event_time=_event_time)
    if variant == "session-ms":
        return stream.window_count(pt.Session(30_000), event_time=_event_time)
    if variant == "session-s":
        return stream.window_count(pt.Session(30), event_time=_event_time)
    if variant == "sessions":
        return stream.window_count(pt.Session(args.gap))
    if variant == "tumbling-columnar":
        return stream.window_count(pt.Tumbling(1000), key="key")
    return stream.window_count(pt.Tumbling(1000))


def run(variant: str, args: argparse.Namespace, workers: int) -> dict:
    if variant in LIBRARY:
        return run_library(variant, args, workers)
    headline = variant in HEADLINE
    columnar = variant == "tumbling-columnar"
    batch = args.columnar_batch if columnar else args.batch
    if variant.startswith("session"):
        total = args.session_events if headline else args.clicks
    else:
        total = args.events if headline else args.pool_events
    n_batches = total // batch

    def work(worker):
        counted = [0, 0]  # records counted in windows, late records

        def build(scope):
            inp, stream = scope.new_input()
            w = _operator(variant, stream, args)

            # Sinks, as a user's job ends in one: they take their input in one go and send
            # nothing on (an inspect would forward every result, once per distinct time).
            # A plain loop: sessions at millisecond times arrive one per time, and a sink
            # that built a generator per time (``sum(r[3] for r in results)``) would add
            # its own cost per time (about 0.1 s per 550 k times here) to what is measured.
            def tally(inp):
                n = 0
                for _t, results in inp.drain_batches():
                    for r in results:
                        n += r[3]
                counted[0] += n

            def tally_late(inp):
                for _t, late in inp.drain_batches():
                    counted[1] += len(late)

            w.output.sink(pt.Pipeline, "Tally", tally)
            w.late.sink(pt.Pipeline, "TallyLate", tally_late)
            return inp

        inp = worker.dataflow(build)
        if headline:
            unit = 1000 if variant.endswith("-s") else 1
            keys = args.users if variant.startswith("session") else args.keys
            feed = _events(worker.index, worker.peers, total, keys, args, unit)
        elif variant == "sessions":
            feed = _clicks(worker.index, worker.peers, total, args.users, batch)
        else:
            pool = _pool(args.keys, batch, columnar)
            feed = [
                (k * args.tick, pool[k % POOL])
                for k in range(worker.index, n_batches, worker.peers)
            ]
        every = args.step_every
        barrier(worker)
        t0, c0 = time.perf_counter(), time.process_time()
        if headline:
            for step, (b, watermark) in enumerate(feed):
                inp.send_batch(b)
                if watermark > inp.time:
                    inp.advance_to(watermark)
                if step % every == every - 1:
                    worker.step()
        else:
            for step, (t, b) in enumerate(feed):
                inp.advance_to(t)
                inp.send_batch(b)
                if step % every == every - 1:
                    worker.step()
        inp.close()
        worker.run()
        return time.perf_counter() - t0, time.process_time() - c0, counted

    load_before = os.getloadavg()
    results = pt.execute(work, workers=workers)
    load_after = os.getloadavg()
    wall = max(r[0] for r in results)
    cpu = max(r[1] for r in results)
    counted = sum(r[2][0] for r in results)
    late = sum(r[2][1] for r in results)
    events = n_batches * batch
    return _report(variant, workers, events, batch, wall, cpu, late, counted + late == events,
                   load_before, load_after)  # fmt: skip


def _report(
    variant: str,
    workers: int,
    events: int,
    batch: int,
    wall: float,
    cpu: float,
    late: int,
    verified: bool,
    load_before: tuple,
    load_after: tuple,
) -> dict:
    """One run's figures (wall time: the slowest worker's; CPU: the busiest worker's)."""
    return {
        "variant": variant,
        "workers": workers,
        "events": events,
        "batch": batch,
        "seconds": round(wall, 3),
        "cpu_seconds": round(cpu, 3),
        "records_per_s_per_worker": round(events / wall / workers),
        "records_per_cpu_s_per_worker": round(events / cpu / workers),
        "late": late,
        "verified": verified,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in load_after],
    }


def run_library(variant: str, args: argparse.Namespace, workers: int) -> dict:
    """``count-windows`` and ``asof-join`` (module docstring), fed like the headline
    variants."""
    batch, total = args.batch, args.events
    size = 100

    def work(worker):
        got = [0]
        per_key: dict = {}

        def build(scope):
            inp, stream = scope.new_input()
            quotes_in, quotes = scope.new_input()
            if variant == "count-windows":
                out = stream.window_count(pt.Count(size)).output
            else:
                out = stream.asof_join(quotes, event_time=_event_time,
                                       other_event_time=_event_time)  # fmt: skip

            def tally(inp):
                n = 0
                for _t, results in inp.drain_batches():
                    if variant == "count-windows":
                        for r in results:
                            n += r[3]
                    else:
                        n += len(results)
                got[0] += n

            out.sink(pt.Pipeline, "Tally", tally)
            return inp, quotes_in

        inp, quotes_in = worker.dataflow(build)
        feed = _events(worker.index, worker.peers, total, args.keys, args, 1)
        quoted = [b[::10] for b, _w in feed]
        for b, _w in feed:
            for k, _t in b:
                per_key[k] = per_key.get(k, 0) + 1
        every = args.step_every
        barrier(worker)
        t0, c0 = time.perf_counter(), time.process_time()
        for step, ((b, watermark), q) in enumerate(zip(feed, quoted)):
            inp.send_batch(b)
            if variant == "asof-join":
                quotes_in.send_batch(q)
            if watermark > inp.time:
                inp.advance_to(watermark)
                quotes_in.advance_to(watermark)
            if step % every == every - 1:
                worker.step()
        inp.close()
        quotes_in.close()
        worker.run()
        return time.perf_counter() - t0, time.process_time() - c0, got[0], per_key

    load_before = os.getloadavg()
    results = pt.execute(work, workers=workers)
    load_after = os.getloadavg()
    wall = max(r[0] for r in results)
    cpu = max(r[1] for r in results)
    got = sum(r[2] for r in results)
    events = total // batch * batch
    if variant == "count-windows":
        keys: dict = {}
        for r in results:
            for k, n in r[3].items():
                keys[k] = keys.get(k, 0) + n
        expected = sum(n // size * size for n in keys.values())
    else:
        expected = events
    return _report(variant, workers, events, batch, wall, cpu, 0, got == expected,
                   load_before, load_after)  # fmt: skip


def _medians(runs: list[dict]) -> list[dict]:
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in runs:
        groups.setdefault((r["variant"], r["workers"]), []).append(r)
    out = []
    for (variant, workers), rs in groups.items():
        out.append(
            {
                "variant": variant,
                "workers": workers,
                "runs": len(rs),
                "records_per_s_per_worker": round(
                    statistics.median(r["records_per_s_per_worker"] for r in rs)
                ),
                "records_per_cpu_s_per_worker": round(
                    statistics.median(r["records_per_cpu_s_per_worker"] for r in rs)
                ),
                "seconds": round(statistics.median(r["seconds"] for r in rs), 3),
                "cpu_seconds": round(statistics.median(r["cpu_seconds"] for r in rs), 3),
                "loadavg_1min": round(statistics.median(r["loadavg_after"][0] for r in rs), 2),
                "verified": all(r["verified"] for r in rs),
            }
        )
    return out


def _ratios(medians: list[dict]) -> dict:
    """ms / s for each headline pair and worker count (wall and CPU)."""
    by = {(m["variant"], m["workers"]): m for m in medians}
    out = {}
    for kind in ("tumbling", "session"):
        for (variant, workers), ms in by.items():
            s = by.get((f"{kind}-s", workers))
            if variant != f"{kind}-ms" or s is None:
                continue
            out[f"{kind}_ms_over_s_{workers}w"] = {
                "wall": round(ms["records_per_s_per_worker"] / s["records_per_s_per_worker"], 3),
                "cpu": round(
                    ms["records_per_cpu_s_per_worker"] / s["records_per_cpu_s_per_worker"], 3
                ),
            }
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=3_000_000)
    ap.add_argument("--session-events", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--users", type=int, default=50_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--disorder", type=int, default=100, help="ms an event may be early")
    ap.add_argument("--delay", type=int, default=100, help="watermark delay in ms")
    ap.add_argument("--step-every", type=int, default=16, help="batches between worker steps")
    ap.add_argument("--pool-events", type=int, default=5_000_000)
    ap.add_argument("--columnar-batch", type=int, default=100_000)
    ap.add_argument("--tick", type=int, default=10, help="ms between pool batches")
    ap.add_argument("--clicks", type=int, default=1_000_000)
    ap.add_argument("--gap", type=int, default=100, help="pool sessions' gap in ms")
    ap.add_argument("--workers", default="1")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--variants", default=",".join(HEADLINE), help="or 'all'")
    ap.add_argument("--label", default="", help="a name for this run in the JSON")
    args = ap.parse_args(argv)
    variants = VARIANTS if args.variants == "all" else tuple(args.variants.split(","))
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        ap.error(f"unknown variants {sorted(unknown)}; choose from {', '.join(VARIANTS)}")
    runs = [
        run(v, args, int(w))
        for _round in range(args.repeat)
        for w in args.workers.split(",")
        for v in variants
    ]
    medians = _medians(runs)
    out = {
        "benchmark": "windows",
        "label": args.label,
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "medians": medians,
        "ms_over_s": _ratios(medians),
        "runs": runs,
        "targets": {
            "tumbling-ms_per_s_one_worker": 3_000_000,
            "ms_over_s": 0.8,
            "tumbling-records_per_s_per_worker": 2_500_000,
            "tumbling-columnar_per_s_per_worker": 20_000_000,
            "sessions_per_s_per_worker": 1_000_000,
        },
    }
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
