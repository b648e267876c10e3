"""Kafka as a source and a sink, through ``confluent-kafka`` (``pip install 'pytimely[kafka]'``).

:class:`KafkaSource` reads a topic: its partitions are the job's partitions, and the offset
of a partition is the Kafka offset of the next record to read, kept in the job's checkpoint
(never committed to a consumer group: the checkpoint is the only truth, so a restart rereads
exactly what the last committed checkpoint did not cover).  With ``stop_at_end=True`` a
partition is finished once the reader reaches its end (the broker's end-of-partition signal):
a bounded job over what the topic holds.

:class:`KafkaSink` is **at-least-once**: a worker stages its records in a local file per
checkpoint (under ``staging``), and publishing produces the file's records (idempotent
producer) and then marks the file sent.  A crash between the two produces the file again on
restart.  Every message carries the headers ``pytimely-staged`` (the staged file's name) and
``pytimely-seq`` (the record's place in it), unique per record and equal across a replay, so a
consumer that keeps the last pair it saw per staged file drops the repeats (or use the same
pair as the message key on a compacted topic).  Kafka transactions would make it exactly-once
without that; they are not used because the broker the test suite runs (Tansu) does not
implement them.

**A broker that goes away.**  librdkafka reconnects by itself (with backoff: 0.1 s doubling
to ``reconnect.backoff.max.ms``, which these connectors set to 1 s unless ``config`` says
otherwise), and what it reports meanwhile -- ``_TRANSPORT``, ``_ALL_BROKERS_DOWN`` and any other
error it recovers from -- is taken as transient, for up to ``timeout`` seconds (30):

* the source counts from the first such error and starts again from nothing once a record or
  the end of a partition arrives, or a metadata request answers (asked at most once a second
  while librdkafka has been quiet for a second); it reads on where it was, so a job over a
  broker that came back within the bound loses and doubles nothing;
* the sink produces and waits for the deliveries, and counts from the last delivery: a file
  is published as long as the broker keeps taking records, however long it takes in all.

After ``timeout`` seconds without the broker a :class:`~pytimely.errors.TimelyError` names the
connector (``KafkaSource`` / ``KafkaSink`` and its name), the topic, the bootstrap address,
how long it waited and the last error librdkafka gave; in a job ``pt.execute`` raises it as a
``WorkerFailure``.  Errors librdkafka does not recover from (a fatal error, a partition error
that is not retriable, a record the broker refused) are raised at once.  A broker that does not
answer at the start (the source's metadata request) is the same error after ``timeout``.

>>> KafkaSource("127.0.0.1:9092", "clicks").describe()
"KafkaSource 'kafka:clicks' (topic 'clicks' at 127.0.0.1:9092)"
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import TimelyError
from .api import PartitionReader, Sink, SinkWriter, Source
from .staging import StagedFileWriter, discard_staged, mark_sent, unsent

try:
    import confluent_kafka as _ck
    from confluent_kafka.admin import AdminClient
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "pytimely.io.kafka needs confluent-kafka: pip install 'pytimely[kafka]'"
    ) from exc

__all__ = ["KafkaSink", "KafkaSource"]

STAGED_HEADER = "pytimely-staged"
SEQ_HEADER = "pytimely-seq"


#: librdkafka's longest wait between two attempts to reach a broker, unless ``config`` sets it
#: (librdkafka's own default, 10 s, would keep a job waiting that long after the broker is back).
RECONNECT_BACKOFF_MAX_MS = 1000


def _json_value(value: bytes) -> Any:
    return json.loads(value)


class _Outage:
    """What librdkafka reported since its broker was last known to answer: when the first
    error came (``since``; ``None``: no outage), the last one and when, and a fatal one."""

    def __init__(self, chained: Callable[[Any], None] | None = None) -> None:
        self.since: float | None = None
        self.last: Any = None
        self.last_at = 0.0
        self.probed_at = 0.0
        self.fatal: Any = None
        self._chained = chained

    def error(self, error: Any) -> None:
        """An error librdkafka reported (its ``error_cb``, or a partition's retriable one)."""
        now = time.monotonic()
        if error.fatal():
            self.fatal = error
        if self.since is None:
            self.since = now
        self.last, self.last_at = error, now
        if self._chained is not None:
            self._chained(error)

    def clear(self) -> None:
        """The broker answered."""
        self.since = None

    def describe(self) -> str:
        return "none" if self.last is None else self.last.str()


def _client_config(config: dict[str, Any], outage: _Outage) -> dict[str, Any]:
    """``config`` with the error callback that feeds ``outage`` (calling the one ``config``
    has, if any) and a short reconnection backoff unless ``config`` sets one."""
    return {
        "reconnect.backoff.max.ms": RECONNECT_BACKOFF_MAX_MS,
        **config,
        "error_cb": outage.error,
    }


class _KafkaReader(PartitionReader):
    def __init__(self, source: KafkaSource, partition: int, offset: int | None) -> None:
        self._source = source
        self._next = offset
        self._outage = _Outage(source.config.get("error_cb"))
        conf = {
            "bootstrap.servers": source.bootstrap,
            "group.id": f"pytimely-{source.topic}",  # required; offsets are never committed
            "enable.auto.commit": False,
            "enable.partition.eof": source.stop_at_end,
            **_client_config(source.config, self._outage),
        }
        self._consumer = _ck.Consumer(conf)
        start = offset if offset is not None else _ck.OFFSET_BEGINNING
        self._consumer.assign([_ck.TopicPartition(source.topic, partition, start)])
        self._partition = partition
        self._at_end = False

    def _where(self) -> str:
        return f"{self._source.describe()}, partition {self._partition}"

    def read(self, limit: int) -> list[Any]:
        messages = self._consumer.consume(num_messages=limit, timeout=self._source.poll_seconds)
        decode, timestamps = self._source.decode, self._source.timestamps
        outage = self._outage
        out: list[Any] = []
        for m in messages:
            error = m.error()
            if error is not None:
                if error.code() == _ck.KafkaError._PARTITION_EOF:
                    self._at_end = True
                    outage.clear()
                    continue
                if error.retriable() and not error.fatal():
                    outage.error(error)
                    continue
                raise TimelyError(f"{self._where()}: {error.str()}")
            value = decode(m.value())
            out.append((m.timestamp()[1], value) if timestamps else value)
            self._next = m.offset() + 1
            self._at_end = False
        if out:
            outage.clear()
        if outage.since is not None or outage.fatal is not None:
            self._check_outage()
        return out

    def _broker_answers(self) -> bool:
        self._outage.probed_at = time.monotonic()
        try:
            metadata = self._consumer.list_topics(self._source.topic, timeout=0.25)
        except _ck.KafkaException:
            return False
        return self._source.topic in metadata.topics

    def _check_outage(self) -> None:
        """Carry on while the broker has been away for less than the source's ``timeout``
        (module docstring); then an error naming the source, the broker and the last error."""
        outage = self._outage
        if outage.fatal is not None:
            raise TimelyError(f"{self._where()}: fatal error: {outage.fatal.str()}")
        assert outage.since is not None
        now = time.monotonic()
        timeout = self._source.timeout
        quiet = now - outage.last_at >= 1.0 and now - outage.probed_at >= 1.0
        if (quiet or now - outage.since >= timeout) and self._broker_answers():
            outage.clear()
            return
        waited = time.monotonic() - outage.since
        if waited >= timeout:
            raise TimelyError(
                f"{self._where()}: no answer from the broker for {waited:.1f} s "
                f"(librdkafka reconnecting with backoff; timeout={timeout:g} s); "
                f"last error: {outage.describe()}"
            )

    def offset(self) -> int | None:
        return self._next

    def exhausted(self) -> bool:
        return self._source.stop_at_end and self._at_end

    def close(self) -> None:
        self._consumer.close()


class KafkaSource(Source):
    """Topic ``topic`` of the cluster at ``bootstrap`` (module docstring).  ``decode`` turns a
    message's value into a record (default: JSON); ``timestamps=True`` makes records
    ``(timestamp_ms, value)`` with the message's timestamp; ``config``: more librdkafka
    consumer settings; ``timeout``: seconds without the broker (at the start or mid-run)
    before the error names it."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        name: str | None = None,
        decode: Callable[[bytes], Any] = _json_value,
        timestamps: bool = False,
        stop_at_end: bool = False,
        config: dict[str, Any] | None = None,
        timeout: float = 30.0,
        poll_seconds: float = 0.01,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.name = name or f"kafka:{topic}"
        self.decode = decode
        self.timestamps = timestamps
        self.stop_at_end = stop_at_end
        self.config = dict(config or {})
        self.timeout = timeout
        self.poll_seconds = poll_seconds

    def describe(self) -> str:
        """How errors name this source."""
        return f"KafkaSource {self.name!r} (topic {self.topic!r} at {self.bootstrap})"

    def partitions(self) -> list[str]:
        """The topic's partitions, as ``"0"``, ``"1"``, ..."""
        outage = _Outage(self.config.get("error_cb"))
        admin = AdminClient(
            {"bootstrap.servers": self.bootstrap, **_client_config(self.config, outage)}
        )
        try:
            metadata = admin.list_topics(self.topic, timeout=self.timeout)
        except _ck.KafkaException as exc:
            admin.poll(0)  # serves the errors librdkafka queued meanwhile
            last = f"; last error: {outage.describe()}" if outage.last is not None else ""
            raise TimelyError(
                f"{self.describe()}: the broker did not answer within {self.timeout:g} s: "
                f"{exc.args[0].str() if exc.args else exc}{last}"
            ) from exc
        topic = metadata.topics.get(self.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            reason = (
                topic.error if topic is not None and topic.error is not None else "no such topic"
            )
            raise TimelyError(f"{self.describe()}: {reason}")
        return [str(p) for p in sorted(topic.partitions)]

    def open(self, partition: str, offset: Any) -> PartitionReader:
        """A reader of ``partition`` from Kafka offset ``offset`` (``None``: the beginning)."""
        return _KafkaReader(self, int(partition), None if offset is None else int(offset))


class KafkaSink(Sink):
    """At-least-once into topic ``topic`` (module docstring).  ``encode`` turns a record
    into the message value as ``str`` (default: JSON); ``key``, if given, the message key;
    ``staging``: a local directory for the staged files (each worker's host needs it);
    ``timeout``: seconds a publish waits without a delivery (the broker away) before the
    error names it."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        staging: str | os.PathLike,
        *,
        name: str | None = None,
        encode: Callable[[Any], str] = json.dumps,
        key: Callable[[Any], str] | None = None,
        config: dict[str, Any] | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.staging = os.fspath(staging)
        self.name = name or f"kafka:{topic}"
        self.encode = encode
        self.key = key
        self.config = dict(config or {})
        self.timeout = timeout
        self._producer: Any = None
        self._outage = _Outage(self.config.get("error_cb"))

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_producer": None}  # a producer stays in its process

    def describe(self) -> str:
        """How errors name this sink."""
        return f"KafkaSink {self.name!r} (topic {self.topic!r} at {self.bootstrap})"

    def writer(self, index: int, peers: int, attempt: str) -> SinkWriter:
        """Worker ``index``'s writer: staged files ``<attempt>-w<index>-<seq>.staged``."""
        encode = self.encode
        return StagedFileWriter(
            self.staging, f"{attempt}-w{index}", lambda r: json.dumps(encode(r))
        )

    def _produce(self) -> Any:
        if self._producer is None:
            self._producer = _ck.Producer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "enable.idempotence": True,
                    **_client_config(self.config, self._outage),
                }
            )
        return self._producer

    def publish(self, staged: Any) -> None:
        """Produce the staged file's records, then mark it sent (module docstring): waits
        while the broker is away, up to ``timeout`` seconds without a delivery."""
        path = unsent(self.staging, staged, self.describe())
        if path is None:
            return
        name = staged["file"]
        producer = self._produce()
        outage = self._outage
        outage.clear()
        delivered = [0]
        failures: list[str] = []
        progress = [0, time.monotonic()]  # deliveries seen, and when their number last grew

        def on_delivery(error: Any, _message: Any) -> None:
            if error is None:
                delivered[0] += 1
            else:
                failures.append(error.str())

        def check(sent: int) -> None:
            """Raise if a record failed, or if nothing was delivered for ``timeout`` s."""
            if failures or outage.fatal is not None:
                first = failures[0] if failures else f"fatal error: {outage.fatal.str()}"
                raise TimelyError(
                    f"{self.describe()}: {sent - delivered[0]} of {sent} records of "
                    f"{name} undelivered; first error: {first}"
                )
            now = time.monotonic()
            if delivered[0] != progress[0]:
                progress[:] = [delivered[0], now]
            elif now - progress[1] >= self.timeout:
                raise TimelyError(
                    f"{self.describe()}: {sent - delivered[0]} of {sent} records of {name} "
                    f"undelivered after {now - progress[1]:.1f} s without a delivery "
                    f"(librdkafka reconnecting with backoff; timeout={self.timeout:g} s); "
                    f"last error: {outage.describe()}"
                )

        sent = 0
        with open(path, encoding="utf-8") as f:
            for seq, line in enumerate(f):
                value = json.loads(line)
                headers = [(STAGED_HEADER, name.encode()), (SEQ_HEADER, str(seq).encode())]
                key = self.key(value) if self.key is not None else None
                while True:
                    try:
                        producer.produce(
                            self.topic,
                            value=value,
                            key=key,
                            headers=headers,
                            on_delivery=on_delivery,
                        )
                        sent += 1
                        break
                    except BufferError:  # the local queue is full: let it drain
                        producer.poll(0.1)
                        check(sent)
        while producer.flush(min(1.0, self.timeout)):
            check(sent)
        check(sent)  # the last delivery reports
        mark_sent(path)

    def discard(self, keep: Sequence[Any]) -> None:
        """Delete the staged files not in ``keep`` (sent ones stay as the record of it)."""
        discard_staged(self.staging, keep)
