"""A private PostgreSQL 15 cluster for the test session, started with ``initdb``/``pg_ctl``.

:class:`PostgresCluster` runs ``initdb`` (trust authentication, ``wal_level=logical``) in a
temporary directory, starts the server on a free port of 127.0.0.1 with its socket in that
directory, and stops it (``pg_ctl stop``, then its pid) at the end.  PostgreSQL refuses to run
as root: when the tests run as root (CI), the cluster runs as the ``postgres`` user of the
machine image, which owns the directory.  :meth:`~PostgresCluster.halt` stops the server and
keeps its data, :meth:`~PostgresCluster.start` starts it again on the same port: a server that
goes away and comes back (the tests of that use a cluster of their own).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time

from brokers import free_port


class PostgresCluster:
    """``with PostgresCluster() as pg:`` -- ``pg.dsn`` connects as superuser ``pytimely``."""

    def __init__(self, start_timeout: float = 60.0) -> None:
        self.port = free_port()
        self.directory = tempfile.mkdtemp(prefix="pytimely-pg-")
        self.data = os.path.join(self.directory, "data")
        self.dsn = f"host=127.0.0.1 port={self.port} user=pytimely dbname=postgres"
        self.start_timeout = start_timeout
        self._as: list[str] = []
        self._pid: int | None = None

    def _run(self, *args: str, timeout: float = 60.0) -> None:
        done = subprocess.run(
            [*self._as, *args], capture_output=True, text=True, timeout=timeout, cwd=self.directory
        )
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {done.stdout[-1000:]}{done.stderr[-2000:]}")

    def __enter__(self) -> PostgresCluster:
        initdb = shutil.which("initdb")
        if initdb is None or shutil.which("pg_ctl") is None:
            raise RuntimeError("PostgreSQL's initdb/pg_ctl are not on PATH")
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.directory, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self._run(initdb, "-D", self.data, "-U", "pytimely", "--auth=trust", "-E", "UTF8")
        return self.start()

    def start(self) -> PostgresCluster:
        """Start the server (``pg_ctl start -w``: returns once it accepts connections)."""
        options = (
            f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 "
            "-c wal_level=logical -c max_replication_slots=4 -c max_wal_senders=4 "
            "-c fsync=off"
        )
        self._run(shutil.which("pg_ctl") or "pg_ctl", "-D", self.data, "-o", options, "-l",
                  os.path.join(self.directory, "log"), "-w", "-t", str(int(self.start_timeout)),
                  "start", timeout=self.start_timeout + 10)  # fmt: skip
        with open(os.path.join(self.data, "postmaster.pid")) as f:
            self._pid = int(f.readline())
        return self

    def halt(self) -> None:
        """Stop the server (``pg_ctl stop -m fast``, then its pid) and keep its data."""
        if self._pid is None:
            return
        try:
            self._run(shutil.which("pg_ctl") or "pg_ctl", "-D", self.data, "-m", "fast", "stop")
        except (RuntimeError, subprocess.TimeoutExpired):
            try:
                os.kill(self._pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(self._pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        self._pid = None

    def stop(self) -> None:
        """Stop the server (:meth:`halt`) and delete the cluster."""
        self.halt()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __exit__(self, *exc: object) -> None:
        self.stop()
