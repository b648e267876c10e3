"""Sessionize clicks read from Kafka by their event time, exactly once into JSON-lines files.

Each Kafka message is a click ``{"user": ..., "ts": milliseconds}``.  The job reads the topic
(offsets kept in its checkpoint), takes the clicks' event time as its time (a partition's
clicks may be up to ``--delay`` ms out of order), groups each user's clicks into sessions that
end after ``--gap`` ms without a click, and writes every session ``[user, start, end,
clicks]`` once to JSON-lines files in ``--out``.  Run it again after a crash, on any number of
workers: it carries on from its last checkpoint.

    $ python examples/kafka_sessions.py --bootstrap 127.0.0.1:9092 --topic clicks \\
          --out sessions/ --checkpoint ck/ [--workers 2] [--produce 10000]

``--produce N`` first writes N synthetic clicks to the topic (creating it with 4 partitions if
need be), so that the example runs against an empty broker.  The job stops at the end of what
the topic holds (``stop_at_end``); drop that in ``build`` to follow the topic.
"""

from __future__ import annotations

import argparse
import json
import random

import pytimely as pt
from pytimely import io
from pytimely.io.kafka import KafkaSource


def produce(bootstrap: str, topic: str, clicks: int, users: int = 200, seed: int = 1) -> None:
    """Write ``clicks`` synthetic clicks to ``topic`` (4 partitions), each partition in time
    order but for up to 50 ms of jitter."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic not in admin.list_topics(timeout=10).topics:
        for future in admin.create_topics([NewTopic(topic, num_partitions=4)]).values():
            future.result(timeout=30)
    rng = random.Random(seed)
    producer = ck.Producer({"bootstrap.servers": bootstrap})
    times = [1_700_000_001_000] * 4  # after the job's start (main), jitter included
    for i in range(clicks):
        p = i % 4
        times[p] += rng.randrange(1, 40)
        click = {"user": f"u{rng.randrange(users)}", "ts": times[p] - rng.randrange(0, 50)}
        producer.produce(topic, value=json.dumps(click), partition=p)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(60)


def build_for(bootstrap: str, topic: str, out: str, gap: int, delay: int):
    """The job's build function."""

    def build(scope):
        source = KafkaSource(bootstrap, topic, stop_at_end=True)
        clicks = io.read(scope, source, event_time=lambda c: c["ts"], delay=delay)
        pairs = clicks.map(lambda c: (c["user"], c["ts"]))
        sessions = pairs.window_count(pt.Session(gap), event_time=lambda r: r[1])
        io.write(sessions.output, io.JsonLinesSink(out, name="sessions"))

    build.__qualname__ = "kafka_sessions"
    return build


def main(argv: list[str] | None = None) -> None:
    """Parse the command line, fill the topic if asked, run the job."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    ap.add_argument("--topic", required=True)
    ap.add_argument("--out", required=True, help="folder of the sessions' JSON-lines files")
    ap.add_argument("--checkpoint", required=True, help="checkpoint directory")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--gap", type=int, default=2_000, help="session gap, ms")
    ap.add_argument("--delay", type=int, default=100, help="out-of-order bound, ms")
    ap.add_argument("--produce", type=int, default=0, help="synthetic clicks to write first")
    args = ap.parse_args(argv)
    if args.produce:
        produce(args.bootstrap, args.topic, args.produce)
    job = io.job(
        build_for(args.bootstrap, args.topic, args.out, args.gap, args.delay),
        checkpoint=args.checkpoint,
        snapshot_every=10_000,  # every 10 s of event time
        start=1_700_000_000_000,  # the event time the first run starts at
    )
    reports = pt.execute(job, workers=args.workers)
    print(f"read {sum(r.records for r in reports)} clicks on {args.workers} worker(s)")


if __name__ == "__main__":
    main()
