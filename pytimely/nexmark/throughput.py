"""Closed-loop throughput of the NEXMark queries: ``python3 -m pytimely.nexmark.throughput``.

Feeds one worker's generator stream as fast as the dataflow accepts it: events are cut into
ticks of ``quantum`` ns of event time; each tick's events are sent at the tick's start time,
the input advances to the next tick, and the worker steps until the output probe has passed the
tick.  Reports events per second of wall time, with generation inside the loop (Megaphone's
setting) and with the batches generated beforehand (the dataflow alone).

This is a rough measurement tool (no open-loop latency; that is the harness' job).

    python3 -m pytimely.nexmark.throughput q7 tokens --events 2000000 --rate 1000000
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from .generator import NexmarkConfig, WorkerStream
from .queries import IDIOMS, build_query


def _ticks(config: NexmarkConfig, worker: int, events: int, quantum: int):
    """``(tick start, EventBatch)`` for the worker's first ``events`` events."""
    stream = WorkerStream(config, worker)
    n_total = events * config.workers
    tick = 0
    while stream.next_number < n_total:
        end = min(config.events_before(tick + quantum), n_total)
        batch = stream.next_batch(end)
        if len(batch):
            yield tick, batch
        tick += quantum


def measure(
    query: str,
    idiom: str = "tokens",
    events: int = 1_000_000,
    rate: int = 1_000_000,
    quantum: int = 1_000_000,
    in_flight: int | None = None,
    pregenerate: bool = False,
    **params: Any,
) -> dict[str, Any]:
    """Events per second through ``query`` on one worker (see the module docstring)."""
    import pytimely as pt

    config = NexmarkConfig(rate=rate, workers=1, in_flight_auctions=in_flight)
    worker = pt.Worker()
    counted = [0]

    def build(scope: Any) -> Any:
        inp, stream = scope.new_input()
        out = build_query(query, scope, stream, idiom=idiom, **params)
        out.inspect_batch(lambda t, b: counted.__setitem__(0, counted[0] + len(b)))
        return inp, out.probe()

    inp, probe = worker.dataflow(build)
    source = _ticks(config, 0, events, quantum)
    if pregenerate:
        source = list(source)
    start = time.perf_counter()
    cpu = time.process_time()
    sent = 0
    for tick, batch in source:
        inp.advance_to(tick)
        inp.send_batch(batch)
        sent += len(batch)
        inp.advance_to(tick + quantum)
        worker.step_while(lambda t=tick + quantum: probe.less_than(t))
    inp.close()
    worker.run()
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu
    return {
        "query": query,
        "idiom": idiom,
        "events": sent,
        "rate": rate,
        "quantum_ns": quantum,
        "pregenerated": pregenerate,
        "outputs": counted[0],
        "wall_s": round(wall, 3),
        "events_per_s": round(sent / wall),
        "events_per_cpu_s": round(sent / cpu) if cpu else None,
    }


def main(argv: list[str] | None = None) -> None:
    """Command line: measure one query and idiom and print the result as one JSON line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("query")
    ap.add_argument("idiom", nargs="?", default="tokens")
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--rate", type=int, default=1_000_000)
    ap.add_argument("--quantum", type=int, default=1_000_000, help="tick, ns of event time")
    ap.add_argument(
        "--in-flight",
        type=int,
        default=None,
        help="in-flight auctions (default: the harness' 2592 * rate)",
    )
    ap.add_argument("--pregenerate", action="store_true")
    args = ap.parse_args(argv)
    if args.idiom not in IDIOMS.get(args.query, ()):
        ap.error(f"{args.query} has idioms {IDIOMS.get(args.query)}")
    print(
        json.dumps(
            measure(
                args.query,
                args.idiom,
                args.events,
                args.rate,
                args.quantum,
                args.in_flight,
                args.pregenerate,
            )
        )
    )


if __name__ == "__main__":
    main()
