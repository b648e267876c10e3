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

Errors name the connector, the broker and the topic: a broker that does not answer within
``timeout`` seconds, a topic that does not exist, a record that cannot be delivered.
"""

from __future__ import annotations

import json
import os
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


def _json_value(value: bytes) -> Any:
    return json.loads(value)


class _KafkaReader(PartitionReader):
    def __init__(self, source: KafkaSource, partition: int, offset: int | None) -> None:
        self._source = source
        self._next = offset
        conf = {
            "bootstrap.servers": source.bootstrap,
            "group.id": f"pytimely-{source.topic}",  # required; offsets are never committed
            "enable.auto.commit": False,
            "enable.partition.eof": source.stop_at_end,
            **source.config,
        }
        self._consumer = _ck.Consumer(conf)
        start = offset if offset is not None else _ck.OFFSET_BEGINNING
        self._consumer.assign([_ck.TopicPartition(source.topic, partition, start)])
        self._partition = partition
        self._at_end = False

    def read(self, limit: int) -> list[Any]:
        messages = self._consumer.consume(num_messages=limit, timeout=self._source.poll_seconds)
        decode, timestamps = self._source.decode, self._source.timestamps
        out: list[Any] = []
        for m in messages:
            error = m.error()
            if error is not None:
                if error.code() == _ck.KafkaError._PARTITION_EOF:
                    self._at_end = True
                    continue
                raise TimelyError(
                    f"{self._source.describe()}, partition {self._partition}: {error}"
                )
            value = decode(m.value())
            out.append((m.timestamp()[1], value) if timestamps else value)
            self._next = m.offset() + 1
            self._at_end = False
        return out

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
    consumer settings."""

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
        timeout: float = 10.0,
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
        return f"Kafka source {self.name!r} (topic {self.topic!r} at {self.bootstrap})"

    def partitions(self) -> list[str]:
        """The topic's partitions, as ``"0"``, ``"1"``, ..."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap, **self.config})
        try:
            metadata = admin.list_topics(self.topic, timeout=self.timeout)
        except _ck.KafkaException as exc:
            raise TimelyError(
                f"{self.describe()}: the broker did not answer within {self.timeout} s: {exc}"
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
    ``staging``: a local directory for the staged files (each worker's host needs it)."""

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

    def describe(self) -> str:
        """How errors name this sink."""
        return f"Kafka sink {self.name!r} (topic {self.topic!r} at {self.bootstrap})"

    def writer(self, index: int, peers: int, attempt: str) -> SinkWriter:
        """Worker ``index``'s writer: staged files ``<attempt>-w<index>-<seq>.staged``."""
        encode = self.encode
        return StagedFileWriter(
            self.staging, f"{attempt}-w{index}", lambda r: json.dumps(encode(r))
        )

    def _produce(self) -> Any:
        if self._producer is None:
            self._producer = _ck.Producer(
                {"bootstrap.servers": self.bootstrap, "enable.idempotence": True, **self.config}
            )
        return self._producer

    def publish(self, staged: Any) -> None:
        """Produce the staged file's records, then mark it sent (module docstring)."""
        path = unsent(self.staging, staged, self.describe())
        if path is None:
            return
        name = staged["file"]
        producer = self._produce()
        failures: list[str] = []

        def delivered(error: Any, _message: Any) -> None:
            if error is not None:
                failures.append(str(error))

        with open(path, encoding="utf-8") as f:
            for seq, line in enumerate(f):
                value = json.loads(line)
                headers = [(STAGED_HEADER, name.encode()), (SEQ_HEADER, str(seq).encode())]
                key = self.key(value) if self.key is not None else None
                while True:
                    try:
                        producer.produce(
                            self.topic, value=value, key=key, headers=headers, on_delivery=delivered
                        )
                        break
                    except BufferError:  # the local queue is full: let it drain
                        producer.poll(0.1)
        remaining = producer.flush(self.timeout)
        if remaining or failures:
            raise TimelyError(
                f"{self.describe()}: {remaining} records undelivered after {self.timeout} s"
                + (f"; first error: {failures[0]}" if failures else "")
            )
        mark_sent(path)

    def discard(self, keep: Sequence[Any]) -> None:
        """Delete the staged files not in ``keep`` (sent ones stay as the record of it)."""
        discard_staged(self.staging, keep)
