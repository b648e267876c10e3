"""pytimely.io.kafka against a real Kafka-protocol broker (Tansu, started by the session).

Source: a topic of two partitions -> running totals per user -> JSON lines, on 1 and 2 workers,
and through a failure and a restart on another worker count (offsets from the checkpoint).
Sink: every record arrives, each once after dropping repeats by the pytimely headers.

A broker that goes away mid-run: each of these tests runs a broker of its own (stopped by
pid), never the session's.  Away for a few seconds and back (a relay in front of the broker is
killed and restarted on the same port, since Tansu's memory storage would not survive a restart
of the broker itself: tests/brokers.py), a source reads on exactly once and a sink delivers
every record; gone for good, the job fails with a WorkerFailure naming the connector and the
address within the connector's ``timeout``.
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import pytimely as pt
from pytimely import io
from pytimely.errors import TimelyError, WorkerFailure

sys.path.insert(0, os.path.dirname(__file__))
# The [kafka] extra is part of [all], which `make test` installs: missing, the tests fail.
import confluent_kafka as kafka  # noqa: E402
import io_job  # noqa: E402
from brokers import (
    TansuBroker,
    TcpRelay,
    free_port,
    meanwhile,
    wait_for_a_commit,
    wait_for_a_publish,
)  # noqa: E402

from pytimely.io.kafka import SEQ_HEADER, STAGED_HEADER, KafkaSink, KafkaSource  # noqa: E402

pytestmark = pytest.mark.timeout(180)

SMALL_EPOCHS = dict(snapshot_every=2, epoch_seconds=0.05, epoch_records=200, read_batch=50)


def _topic(broker, partitions: int) -> str:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions)
    return topic


def _produce_clicks(broker, topic: str, n: int, users: int) -> collections.Counter:
    producer = kafka.Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    counts: collections.Counter = collections.Counter()
    for i in range(n):
        user = f"u{(i * 7919) % users}"
        counts[user] += 1
        value = json.dumps({"user": user, "file": i % 2, "i": i})
        producer.produce(topic, value=value, partition=i % 2)
    assert producer.flush(30) == 0
    return counts


def _build(broker, topic: str, out: str, fail_at: str | None = None):
    source = KafkaSource(broker.bootstrap, topic, stop_at_end=True)
    build = io_job.make_build("", out, fail_at=fail_at, source=source)
    build.__qualname__ = "kafka_totals"
    return build


def _exactly_once(out: str, clicks) -> None:
    got = io_job.totals_by_user(out)
    wrong = {
        u: got.get(u, [])[:5] for u, n in clicks.items() if got.get(u) != list(range(1, n + 1))
    }
    assert not wrong, f"users whose totals are not 1..n (first five shown): {wrong}"


@pytest.mark.parametrize("workers", [1, 2])
def test_a_topic_is_read_once_into_running_totals(kafka_broker, tmp_path, workers):
    topic = _topic(kafka_broker, 2)
    clicks = _produce_clicks(kafka_broker, topic, 2000, 25)
    out = str(tmp_path / "out")
    job = io.job(_build(kafka_broker, topic, out), checkpoint=str(tmp_path / "ck"), **SMALL_EPOCHS)
    reports = pt.execute(job, workers=workers)
    assert sum(r.records for r in reports) == 2000
    _exactly_once(out, clicks)
    assert not os.listdir(os.path.join(out, "_staging"))


def test_a_failed_kafka_job_restarts_from_the_checkpoints_offsets(kafka_broker, tmp_path):
    topic = _topic(kafka_broker, 2)
    clicks = _produce_clicks(kafka_broker, topic, 4000, 25)
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    failing = io.job(_build(kafka_broker, topic, out, "1:3001"), checkpoint=ck, **SMALL_EPOCHS)
    with pytest.raises(WorkerFailure, match="injected failure"):
        pt.execute(failing, workers=2)
    store = io.CheckpointStore(ck, "kafka_totals")
    meta = store.latest()
    assert meta is not None  # some checkpoints committed before the failure
    offsets = store.load(meta).offsets[f"kafka:{topic}"]
    # A partition whose reader had delivered nothing by that checkpoint is None (read again
    # from the beginning): on a busy machine one worker's consumer may start late.
    assert set(offsets) == {"0", "1"}
    # Partition 0 holds the even clicks and may be read to its end (2000) before the failure;
    # partition 1's reader never got past the failing click 1:3001, its 1501st record.
    assert offsets["0"] is None or 0 < offsets["0"] <= 2000, offsets
    assert offsets["1"] is None or 0 < offsets["1"] <= 1500, offsets
    reports = pt.execute(
        io.job(_build(kafka_broker, topic, out), checkpoint=ck, **SMALL_EPOCHS), workers=1
    )
    assert reports[0].restored == meta["epoch"]
    # Only what the checkpoint lacked is read again.
    assert reports[0].records == 4000 - sum(o or 0 for o in offsets.values())
    _exactly_once(out, clicks)
    assert not os.listdir(os.path.join(out, "_staging"))


def test_the_kafka_sink_delivers_every_record_and_marks_repeats(kafka_broker, tmp_path):
    topic = _topic(kafka_broker, 1)
    inp = str(tmp_path / "in")
    io_job.write_clicks(inp, 2, 300, 10)
    staging = str(tmp_path / "staging")

    def build(scope):
        clicks = io.read(scope, io.JsonLinesSource(inp))
        io.write(
            clicks.map(lambda c: [c["file"], c["i"]]),
            KafkaSink(kafka_broker.bootstrap, topic, staging),
        )

    pt.execute(io.job(build, checkpoint=str(tmp_path / "ck"), **SMALL_EPOCHS), workers=2)
    consumer = kafka.Consumer(
        {
            "bootstrap.servers": kafka_broker.bootstrap,
            "group.id": "check",
            "enable.partition.eof": True,
        }  # fmt: skip
    )
    consumer.assign([kafka.TopicPartition(topic, 0, kafka.OFFSET_BEGINNING)])
    seen, ids, deadline = [], set(), time.monotonic() + 30
    while time.monotonic() < deadline:
        batch = consumer.consume(500, 0.5)
        if any(m.error() for m in batch):
            seen += [m for m in batch if not m.error()]
            break
        seen += batch
    consumer.close()
    records = [tuple(json.loads(m.value())) for m in seen]
    ids = {(dict(m.headers())[STAGED_HEADER], dict(m.headers())[SEQ_HEADER]) for m in seen}
    assert sorted(set(records)) == sorted((f, i) for f in range(2) for i in range(300))
    assert len(ids) == len(seen) == 600  # no repeats in a run without failures
    assert all(name.endswith(".sent") for name in os.listdir(staging))


def test_a_broker_that_does_not_answer_is_named(tmp_path):
    source = KafkaSource("127.0.0.1:1", "clicks", timeout=1.0)
    started = time.monotonic()
    with pytest.raises(TimelyError, match=r"topic 'clicks' at 127\.0\.0\.1:1.*did not answer"):
        source.partitions()
    assert time.monotonic() - started < 10


def test_the_kafka_sessions_example_finds_the_sessions_plain_python_finds(kafka_broker, tmp_path):
    example = os.path.join(os.path.dirname(__file__), "..", "examples", "kafka_sessions.py")
    topic = f"clicks-{uuid.uuid4().hex[:8]}"
    out = str(tmp_path / "sessions")
    words = ["--bootstrap", kafka_broker.bootstrap, "--topic", topic, "--out", out,
             "--checkpoint", str(tmp_path / "ck"), "--workers", "2"]  # fmt: skip
    done = subprocess.run([sys.executable, example, *words, "--produce", "6000"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "read 6000 clicks on 2 worker(s)" in done.stdout
    consumer = kafka.Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": "s",
                               "enable.partition.eof": True})  # fmt: skip
    consumer.assign([kafka.TopicPartition(topic, p, kafka.OFFSET_BEGINNING) for p in range(4)])
    clicks, ends, deadline = [], 0, time.monotonic() + 30
    while ends < 4 and time.monotonic() < deadline:
        for m in consumer.consume(500, 0.5):
            if m.error():
                ends += 1
            else:
                c = json.loads(m.value())
                clicks.append((c["user"], c["ts"]))
    consumer.close()
    expected = []
    for user in sorted({u for u, _ in clicks}):
        times = sorted(t for u, t in clicks if u == user)
        start, n = times[0], 0
        for prev, t in zip([times[0], *times], times):
            if t - prev >= 2_000:
                expected.append((user, start, prev + 2_000, n))
                start, n = t, 0
            n += 1
        expected.append((user, start, times[-1] + 2_000, n))
    got = sorted(
        tuple(json.loads(line))
        for name in io.JsonLinesSink(out).published()
        for line in open(os.path.join(out, name))
    )
    assert got == sorted(expected)


# -- a broker that goes away ------------------------------------------------------------------


class _UpTo(KafkaSource):
    """The topic up to offset ``ends[partition]`` of each partition: a bounded job over a topic
    that gets records while the job runs (``stop_at_end`` would end a partition at the first
    end of it the reader sees)."""

    def __init__(self, *args, ends: dict[int, int], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.ends = ends

    def open(self, partition, offset):
        reader = super().open(partition, offset)
        end = self.ends[int(partition)]
        reader.exhausted = lambda: (reader.offset() or 0) >= end
        return reader


@contextmanager
def _relayed_broker() -> Iterator[tuple[TansuBroker, TcpRelay]]:
    """A broker of the test's own that clients reach through a relay on a port of its own (the
    address the broker advertises)."""
    port = free_port()
    with (
        TansuBroker(advertised=f"127.0.0.1:{port}") as broker,
        TcpRelay(broker.bootstrap, port) as relay,
    ):
        yield broker, relay


def _consume_all(bootstrap: str, topic: str, partitions: int) -> list:
    consumer = kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "check",
                               "enable.partition.eof": True})  # fmt: skip
    consumer.assign([kafka.TopicPartition(topic, p, kafka.OFFSET_BEGINNING)
                     for p in range(partitions)])  # fmt: skip
    seen, ends, deadline = [], 0, time.monotonic() + 30
    while ends < partitions and time.monotonic() < deadline:
        for m in consumer.consume(500, 0.5):
            if m.error():
                ends += 1
            else:
                seen.append(m)
    consumer.close()
    assert ends == partitions, "the topic was not read to its end within 30 s"
    return seen


def test_a_kafka_source_reads_on_exactly_once_after_its_broker_went_away_and_came_back(tmp_path):
    """Two workers read 1,000 clicks through a relay (a slow map); after the first checkpoint
    the relay is killed for 3 s, started again on its port, and 1,000 more clicks are produced:
    the job reads them through the broker it got back (librdkafka fetches a small topic whole,
    so the first clicks may come from its queue meanwhile) and every user's totals are exactly
    1..n."""
    with _relayed_broker() as (broker, relay):
        topic = _topic(broker, 2)
        clicks = _produce_clicks(broker, topic, 1000, 25)
        out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
        source = _UpTo(relay.address, topic, timeout=30, ends={0: 1000, 1: 1000})
        build = io_job.make_build("", out, slow=0.002, source=source)
        build.__qualname__ = "kafka_outage"

        def outage() -> None:
            wait_for_a_commit(ck, time.monotonic() + 60)
            relay.stop()
            try:
                time.sleep(3)
            finally:
                relay.start()
            clicks.update(_produce_clicks(broker, topic, 1000, 25))

        with meanwhile(outage):  # the job cannot end before it has read the second clicks
            reports = pt.execute(io.job(build, checkpoint=ck, **SMALL_EPOCHS), workers=2)
    assert sum(r.records for r in reports) == 2000
    _exactly_once(out, clicks)


def test_a_kafka_sink_delivers_every_record_after_its_broker_went_away_and_came_back(tmp_path):
    """Two workers publish 1,000 running totals to a topic through a relay that is killed for
    3 s after the first publish and started again: the job finishes, and the topic holds every
    record, each once after dropping repeats by the pytimely headers."""
    inp, staging, ck = str(tmp_path / "in"), str(tmp_path / "staging"), str(tmp_path / "ck")
    clicks = io_job.write_clicks(inp, 2, 500, 10)
    with _relayed_broker() as (broker, relay):
        topic = _topic(broker, 1)
        sink = KafkaSink(relay.address, topic, staging, timeout=30)
        build = io_job.make_build(inp, "", slow=0.004, sink=sink)  # running totals, as lists
        seen: dict[str, float] = {}

        def outage() -> None:
            wait_for_a_publish(staging, time.monotonic() + 60)
            relay.stop()
            try:
                seen["sent before"] = sum(n.endswith(".sent") for n in os.listdir(staging))
                time.sleep(3)
            finally:
                relay.start()
                seen["back"] = time.monotonic()

        with meanwhile(outage):
            pt.execute(io.job(build, checkpoint=ck, **SMALL_EPOCHS), workers=2)
            ended = time.monotonic()
        assert ended > seen["back"]  # the job published across the outage
        messages = _consume_all(broker.bootstrap, topic, 1)
    files = os.listdir(staging)
    assert all(n.endswith(".sent") for n in files) and len(files) > seen["sent before"]
    once = {(dict(m.headers())[STAGED_HEADER], dict(m.headers())[SEQ_HEADER]): m for m in messages}
    totals: dict[str, list[int]] = collections.defaultdict(list)
    for m in once.values():  # each record once after dropping repeats (at-least-once)
        user, total = json.loads(m.value())
        totals[user].append(total)
    assert {u: sorted(t) for u, t in totals.items()} == {
        u: list(range(1, n + 1)) for u, n in clicks.items()
    }


@pytest.mark.parametrize("side", ["KafkaSource", "KafkaSink"])
def test_a_broker_gone_for_good_fails_the_job_naming_the_connector(tmp_path, side):
    """A broker of the test's own is killed by pid after the first checkpoint (the sink: its
    first publish): the job fails
    with a WorkerFailure naming the connector, the topic and the address within the
    connector's 3 s timeout (and a few seconds to stop the workers)."""
    out, ck, staging = str(tmp_path / "out"), str(tmp_path / "ck"), str(tmp_path / "staging")
    inp = str(tmp_path / "in")
    io_job.write_clicks(inp, 2, 1000, 10)
    with TansuBroker() as broker:
        topic = _topic(broker, 2)
        if side == "KafkaSource":
            _produce_clicks(broker, topic, 200, 10)
            source = KafkaSource(broker.bootstrap, topic, timeout=3)  # unbounded: reads on
            build = io_job.make_build("", out, source=source)
        else:
            sink = KafkaSink(broker.bootstrap, topic, staging, timeout=3)
            build = io_job.make_build(inp, "", slow=0.002, sink=sink)
        stopped: list[float] = []

        def outage() -> None:
            if side == "KafkaSource":
                wait_for_a_commit(ck, time.monotonic() + 60)
            else:
                wait_for_a_publish(staging, time.monotonic() + 60)
            broker.kill()
            stopped.append(time.monotonic())

        name = re.escape(f"{side} 'kafka:{topic}' (topic '{topic}' at {broker.bootstrap})")
        with meanwhile(outage), pytest.raises(WorkerFailure, match=name) as failure:
            pt.execute(io.job(build, checkpoint=ck, **SMALL_EPOCHS), workers=2)
        failed = time.monotonic()
    assert stopped and failed - stopped[0] < 20
    text = str(failure.value)
    assert "timeout=3 s" in text and "last error:" in text
    if side == "KafkaSource":
        assert re.search(r"no answer from the broker for \d+\.\d s", text)
    else:
        assert re.search(r"undelivered after \d+\.\d s without a delivery", text)
