"""Spark processes on this machine for tests and demos: a standalone cluster (a master and N
workers as separate JVMs), and a Spark Connect server (:class:`ConnectServer`).

For tests and demos of the cluster path (``make cluster-demo``): the processes are those of a
real deployment -- ``spark-class org.apache.spark.deploy.master.Master`` and
``...deploy.worker.Worker`` from the installed pyspark's ``SPARK_HOME``, with
``spark.authenticate`` and the shared secret on the master and every worker (the application
must present the same secret, :func:`pytimely.spark.connect` does) -- bound to one address
(``127.0.0.1`` by default).  See Spark's "Spark Standalone Mode" and "Security" guides
(https://spark.apache.org/docs/latest/spark-standalone.html,
https://spark.apache.org/docs/latest/security.html).

Every process is started in a session of its own; :meth:`StandaloneCluster.stop` ends exactly
those process groups (the master, the workers and the executor JVMs the workers started), and
nothing else, also when starting failed half-way.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, NamedTuple

from .errors import SparkSetupError
from .session import FAST_START_JAVA_OPTIONS, LOCAL_CONF, _check_java

__all__ = ["ConnectServer", "Host", "StandaloneCluster", "spark_home"]


def spark_home() -> str:
    """The Spark installation of the installed pyspark (``bin/spark-class`` is inside)."""
    import pyspark

    home = os.environ.get("SPARK_HOME") or os.path.dirname(os.path.abspath(pyspark.__file__))
    if not os.path.exists(os.path.join(home, "bin", "spark-class")):
        raise SparkSetupError(f"no bin/spark-class under SPARK_HOME={home}")
    return home


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _spawn_logged(argv: list[str], env: dict[str, str], log: str) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a session of its own (so its whole process group can be ended),
    output to the file ``log``."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            argv,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Send ``sig`` to the process group of ``proc``, started in a session of its own (its
    group id is its pid); a group already gone is fine."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _port(host: Host, default: int) -> int:
    """A free port on this machine, or Spark's ``default`` on another host (whose ports this
    machine cannot probe; a fresh host has them free)."""
    return default if host.prefix else _free_port(host.address)


class Host(NamedTuple):
    """Where a cluster process runs: the address it binds and advertises, and the command
    prefix that starts a program there (``()`` for this machine; ``("ip", "netns", "exec",
    "h1")`` for a network namespace standing for another host)."""

    address: str
    prefix: tuple[str, ...] = ()


class StandaloneCluster:
    """A master and ``workers`` workers (``cores`` cores, ``memory`` each) on ``host``.

    Use as a context manager, or :meth:`start` / :meth:`stop`.  :attr:`master_url` is the URL
    to connect to, :attr:`secret` the ``spark.authenticate.secret``, :attr:`log_dir` holds every
    process's log and the workers' work directories.

    ``master_host`` and ``worker_hosts`` (worker ``i`` on ``worker_hosts[i % len]``) place the
    processes on other hosts (:class:`Host`) instead of all on ``host``; a driver for such a
    cluster runs on the master's host (:meth:`driver_prefix`).  A host with a prefix is
    another machine: its ports are Spark's defaults (7077 for the master, 8080 and up for web
    UIs), and readiness is read from the processes' logs.
    """

    def __init__(
        self,
        workers: int = 2,
        *,
        cores: int = 1,
        memory: str = "1g",
        host: str = "127.0.0.1",
        secret: str | None = None,
        log_dir: str | None = None,
        java_options: str = FAST_START_JAVA_OPTIONS,
        master_host: Host | None = None,
        worker_hosts: list[Host] | None = None,
    ) -> None:
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.master_host = master_host or Host(host)
        self.host = self.master_host.address
        self.worker_hosts = worker_hosts or [self.master_host]
        self.secret = secret or secrets.token_hex(16)
        self.log_dir = log_dir or tempfile.mkdtemp(prefix="pytimely-standalone-")
        self.java_options = java_options
        self.master_url = ""
        self.processes: list[subprocess.Popen[bytes]] = []

    # -- starting ------------------------------------------------------------------------------

    def _environment(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PYSPARK_", "SPARK_")) and k != "PYTHONPATH"
        }
        env["SPARK_HOME"] = spark_home()
        env["SPARK_DAEMON_JAVA_OPTS"] = self.java_options
        env["SPARK_LOG_DIR"] = self.log_dir
        # The executors' Python (spark.pyspark.python of the application overrides it).
        env["PYSPARK_PYTHON"] = sys.executable
        return env

    def _properties(self) -> str:
        """The secret goes in a properties file readable by this user only (not on the
        command line, where every user of the machine could read it)."""
        path = os.path.join(self.log_dir, "spark-daemon.conf")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("spark.authenticate true\n")
            f.write(f"spark.authenticate.secret {self.secret}\n")
            f.write(f"spark.executor.extraJavaOptions {self.java_options}\n")
        return path

    def _spawn(
        self, name: str, host: Host, args: list[str], env: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        proc = _spawn_logged(
            [*host.prefix, os.path.join(env["SPARK_HOME"], "bin", "spark-class"), *args],
            {**env, "SPARK_LOCAL_IP": host.address},
            os.path.join(self.log_dir, f"{name}.log"),
        )
        self.processes.append(proc)
        return proc

    def _log(self, name: str) -> str:
        try:
            with open(
                os.path.join(self.log_dir, f"{name}.log"), encoding="utf-8", errors="replace"
            ) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def _wait_for(self, what: str, ready: Any, deadline: float) -> None:
        while not ready():
            for proc in self.processes:
                if proc.poll() is not None:
                    raise SparkSetupError(
                        f"a Spark standalone process exited with {proc.returncode} while "
                        f"waiting for {what}; logs in {self.log_dir}"
                    )
            if time.monotonic() > deadline:
                raise SparkSetupError(f"timed out waiting for {what}; logs in {self.log_dir}")
            time.sleep(0.2)

    def start(self, timeout: float = 120.0) -> StandaloneCluster:
        """Start the master, then the workers; return once every worker has registered."""
        _check_java()
        deadline = time.monotonic() + timeout
        env = self._environment()
        conf = self._properties()
        master = self.master_host
        port = _port(master, 7077)
        self.master_url = f"spark://{self.host}:{port}"
        try:
            self._spawn(
                "master",
                master,
                [
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    self.host,
                    "--port",
                    str(port),
                    "--webui-port",
                    str(_port(master, 8080)),
                    "--properties-file",
                    conf,
                ],
                env,
            )

            def master_up() -> bool:
                if master.prefix:  # another host: this machine may have no route to it
                    return "Starting Spark master at" in self._log("master")
                try:
                    socket.create_connection((self.host, port), timeout=0.5).close()
                    return True
                except OSError:
                    return False

            self._wait_for("the master", master_up, deadline)
            for i in range(self.workers):
                work = os.path.join(self.log_dir, f"work-{i}")
                os.makedirs(work, exist_ok=True)
                host = self.worker_hosts[i % len(self.worker_hosts)]
                self._spawn(
                    f"worker-{i}",
                    host,
                    [
                        "org.apache.spark.deploy.worker.Worker",
                        "--host",
                        host.address,
                        "--cores",
                        str(self.cores),
                        "--memory",
                        self.memory,
                        "--webui-port",
                        str(_port(host, 8081 + i)),
                        "--work-dir",
                        work,
                        "--properties-file",
                        conf,
                        self.master_url,
                    ],
                    env,
                )
            self._wait_for(
                f"{self.workers} workers to register",
                lambda: all(
                    "Successfully registered with master" in self._log(f"worker-{i}")
                    for i in range(self.workers)
                ),
                deadline,
            )
        except BaseException:
            self.stop()
            raise
        return self

    # -- running applications -----------------------------------------------------------------

    def application_conf(self) -> dict[str, str]:
        """Spark settings for an application on this cluster (besides the secret, which
        :meth:`driver_environment` passes): a driver on the cluster's address, and executors
        small enough that each worker hosts exactly one (so N pytimely workers run in N
        different executors)."""
        return {
            "spark.driver.host": self.host,
            "spark.driver.bindAddress": self.host,
            "spark.executor.cores": str(self.cores),
            "spark.executor.memory": "512m",
            "spark.executor.extraJavaOptions": self.java_options,
            "spark.driver.extraJavaOptions": self.java_options,
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": str(max(self.workers * self.cores, 1)),
            "spark.default.parallelism": str(max(self.workers * self.cores, 1)),
        }

    def driver_prefix(self) -> list[str]:
        """The command prefix that runs a driver on the master's host."""
        return list(self.master_host.prefix)

    def driver_environment(self) -> dict[str, str]:
        """The environment of a driver process for this cluster: the secret (read by
        :func:`pytimely.spark.connect`) and the local address."""
        env = dict(os.environ)
        env["SPARK_AUTHENTICATE_SECRET"] = self.secret
        env["SPARK_LOCAL_IP"] = self.host
        return env

    def demo_command(self, *options: str) -> list[str]:
        """``python -m pytimely.demo --master URL --conf ... options`` for this cluster."""
        argv = [*self.driver_prefix(), sys.executable, "-m", "pytimely.demo"]
        argv += ["--master", self.master_url]
        for key, value in self.application_conf().items():
            argv += ["--conf", f"{key}={value}"]
        return [*argv, *options]

    # -- stopping ------------------------------------------------------------------------------

    def pids(self) -> list[int]:
        """The process ids of the master and the workers this cluster started."""
        return [p.pid for p in self.processes]

    def stop(self, timeout: float = 15.0) -> None:
        """End the process groups this cluster started (workers first, with their executors),
        politely (SIGTERM), then by force (SIGKILL) after ``timeout``."""
        procs = list(reversed(self.processes))
        for proc in procs:
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            # The group may hold executors that outlived their worker: end them too.
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
        self.processes = []

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ConnectServer:
    """A Spark Connect server on ``host`` (loopback by default), started from the installed
    pyspark's own ``sbin/start-connect-server.sh`` in a session of its own, over a
    ``local[cores]`` master whose Python workers run this interpreter, configured as
    :func:`~pytimely.spark.local_session` configures a classic one (``conf`` overrides).

    :attr:`url` is the ``sc://host:port`` a client connects to
    (``SparkSession.builder.remote(url)``); :meth:`stop` ends the server's process group.
    ``fast_start`` (as for :func:`~pytimely.spark.local_session`) trades the JVM's optimizing
    compiler for start-up time: right for tests, wrong for a benchmark of throughput.
    Use as a context manager, or :meth:`start` / :meth:`stop`.
    """

    def __init__(
        self,
        cores: int = 4,
        *,
        host: str = "127.0.0.1",
        conf: dict[str, str] | None = None,
        log_dir: str | None = None,
        fast_start: bool = True,
    ) -> None:
        self.cores = cores
        self.fast_start = fast_start
        self.host = host
        self.conf = dict(conf or {})
        self.log_dir = log_dir or tempfile.mkdtemp(prefix="pytimely-connect-")
        self.port = 0
        self.url = ""
        self.process: subprocess.Popen[bytes] | None = None

    def _log(self) -> str:
        try:
            with open(os.path.join(self.log_dir, "server.log"), errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def start(self, timeout: float = 120.0) -> ConnectServer:
        """Start the server; return once it accepts clients."""
        _check_java()
        home = spark_home()
        self.port = _free_port(self.host)
        self.url = f"sc://{self.host}:{self.port}"
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PYSPARK_", "SPARK_")) or k == "PYSPARK_PIN_THREAD"
        }
        env.update(
            SPARK_HOME=home,
            SPARK_LOCAL_IP=self.host,
            SPARK_NO_DAEMONIZE="1",  # the script runs the server in the foreground: our pid
            SPARK_LOG_DIR=self.log_dir,
            SPARK_PID_DIR=self.log_dir,
            PYSPARK_PYTHON=sys.executable,
        )
        settings = {
            **LOCAL_CONF,  # as a classic local_session: same batch sizes, barrier checks, ...
            "spark.driver.bindAddress": self.host,
            "spark.driver.host": self.host,
            "spark.connect.grpc.binding.address": self.host,
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.sql.shuffle.partitions": str(self.cores),
            "spark.default.parallelism": str(self.cores),
        }
        if self.fast_start:
            settings["spark.driver.extraJavaOptions"] = FAST_START_JAVA_OPTIONS
        settings.update(self.conf)
        argv = [os.path.join(home, "sbin", "start-connect-server.sh"), "--master"]
        argv.append(f"local[{self.cores}]")
        for key, value in settings.items():
            argv += ["--conf", f"{key}={value}"]
        self.process = _spawn_logged(argv, env, os.path.join(self.log_dir, "server.log"))
        deadline = time.monotonic() + timeout
        try:
            while "Spark Connect server started" not in self._log():
                if self.process.poll() is not None:
                    raise SparkSetupError(
                        f"the Spark Connect server exited with {self.process.returncode}; "
                        f"log in {self.log_dir}"
                    )
                if time.monotonic() > deadline:
                    raise SparkSetupError(
                        f"the Spark Connect server did not start within {timeout:g} s; log in "
                        f"{self.log_dir}"
                    )
                time.sleep(0.2)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 15.0) -> None:
        """End the server's process group: SIGTERM, then SIGKILL after ``timeout``."""
        proc, self.process = self.process, None
        if proc is None:
            return
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        _signal_group(proc, signal.SIGKILL)
        proc.wait()

    def __enter__(self) -> ConnectServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
