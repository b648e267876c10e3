"""Building a Spark session that can host pytimely workers, and checking one that exists.

:func:`local_session` starts an embedded Spark (``local[cores]``) with the lean, fast-starting
configuration (UI off, loopback only, few shuffle partitions, barrier
slot checks that fail in seconds instead of ten minutes).  Most importantly it makes Spark's
Python workers run **this** interpreter: ``PYSPARK_PYTHON`` must name ``sys.executable`` before
the JVM starts, otherwise the workers run whatever ``python3`` is on the PATH, which usually
lacks pyarrow or pytimely.  It also puts the directory pytimely is imported from on the
workers' ``PYTHONPATH``, so a source checkout works without installing it.

:func:`ship_package` is for real clusters: it zips the pytimely package and hands it to
``SparkContext.addPyFile`` so that executors can import it (numpy and pyarrow must be
installed there).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import zipfile
from typing import Any

from .errors import JavaUnavailable, MasterUnreachable, SparkSetupError

__all__ = [
    "FAST_START_JAVA_OPTIONS",
    "LOCAL_CONF",
    "JavaUnavailable",
    "SparkSetupError",
    "java_version",
    "local_session",
    "connect",
    "package_fingerprint",
    "package_location",
    "prepare_environment",
    "ship_package",
]


#: JVM flags that halve Spark's start-up (C1 only, serial GC).  They cost about a third of the
#: JVM's throughput: good for tests and demos, not for benchmarks.
FAST_START_JAVA_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"

#: The configuration :func:`local_session` starts from (Spark's settings are described in
#: https://spark.apache.org/docs/latest/configuration.html).
LOCAL_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
    # A barrier stage that needs more slots than exist fails after maxFailures x interval
    # (default 40 x 15 s = 10 minutes); pytimely checks the slots itself before submitting.
    "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "1",
    "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "1s",
    # allGather / barrier() wait this long for the slowest task (default: 365 days).
    "spark.barrier.sync.timeout": "120s",
    "spark.python.task.killTimeout": "2s",
}


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (a client without a ``SparkContext``)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def default_bind_host(master: str) -> str:
    """Where the workers listen by default for a run on ``master``: loopback for ``local``
    masters (the executors live on this machine), every interface on a cluster.

    >>> default_bind_host("local[4]"), default_bind_host("spark://10.0.0.1:7077")
    ('127.0.0.1', '0.0.0.0')
    """
    return "127.0.0.1" if master.startswith("local") else "0.0.0.0"


def java_version(java: str | None = None) -> tuple[int, str] | None:
    """``(major, first line of java -version)`` of the Java Spark would use, or None."""
    home = os.environ.get("JAVA_HOME")
    if java is None:
        candidate = os.path.join(home, "bin", "java") if home else None
        java = candidate if candidate and os.path.exists(candidate) else shutil.which("java")
    if java is None:
        return None
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    text = (out.stderr or out.stdout).strip()
    match = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if not match:
        return None
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_x" is Java 8
        major = int(match.group(2))
    return major, text.splitlines()[0] if text else ""


def _check_java() -> None:
    found = java_version()
    if found is None:
        raise JavaUnavailable(
            "Spark needs Java 17 or newer, and no `java` was found (JAVA_HOME or PATH).  On "
            "Debian/Ubuntu: scripts/ensure-java.sh, or apt-get install openjdk-17-jre-headless"
        )
    if found[0] < 17:
        raise JavaUnavailable(
            f"Spark 4 needs Java 17 or newer; found {found[1]!r}.  Install openjdk-17 "
            "(scripts/ensure-java.sh) and point JAVA_HOME or PATH at it"
        )


def _package_root() -> str:
    """The directory the ``pytimely`` package is imported from (its parent directory)."""
    import pytimely

    return os.path.dirname(os.path.dirname(os.path.abspath(pytimely.__file__)))


def prepare_environment(local_ip: str | None = "127.0.0.1") -> None:
    """Set what Spark's launcher and Python workers read from the environment.

    Must run before the first SparkSession (i.e. the JVM) of the process is created:
    ``PYSPARK_PYTHON`` and ``PYSPARK_DRIVER_PYTHON`` become ``sys.executable``; the directory
    pytimely is imported from is added to ``PYTHONPATH``; ``SPARK_LOCAL_IP`` is set to
    ``local_ip`` unless already set (None: leave it).
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    if local_ip is not None:
        os.environ.setdefault("SPARK_LOCAL_IP", local_ip)
    root = _package_root()
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *parts])


_SAME_PYTHON: dict[str, bool] = {}


def _same_python(exe: str) -> bool:
    """Whether ``exe`` (as Spark would start it) is this interpreter."""
    known = _SAME_PYTHON.get(exe)
    if known is not None:
        return known
    resolved = shutil.which(exe) or exe
    try:
        same = os.path.samefile(resolved, sys.executable)
    except OSError:
        same = False
    if not same:  # e.g. a pyenv shim or a wrapper script: ask the interpreter itself
        try:
            out = subprocess.run(
                [resolved, "-c", "import sys; print(sys.executable)"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            reported = out.stdout.strip()
            same = bool(reported) and os.path.samefile(reported, sys.executable)
        except (OSError, subprocess.SubprocessError):
            same = False
    _SAME_PYTHON[exe] = same
    return same


def local_session(
    cores: int = 4,
    *,
    app_name: str = "pytimely",
    conf: dict[str, str] | None = None,
    driver_memory: str = "1g",
    fast_start: bool = True,
    log_level: str = "ERROR",
) -> Any:
    """An embedded Spark on this machine, ``local[cores]``, ready to host pytimely workers.

    ``cores`` is the number of task slots: ``N`` long-running pytimely workers hold ``N`` of them
    for their whole life, and anything else Spark does meanwhile (a streaming query's
    micro-batches, writes, reads) needs more, so use at least ``N + 1`` (over-subscribing the
    machine's cores is fine).  ``conf`` overrides :data:`LOCAL_CONF`; ``fast_start`` adds
    :data:`FAST_START_JAVA_OPTIONS` to the driver JVM.

    If a SparkContext is already running in this process it is reused (``getOrCreate``) provided
    its Python workers run this interpreter; otherwise :class:`SparkSetupError` says why.
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    active = SparkContext._active_spark_context
    if active is not None:
        if not _same_python(active.pythonExec):
            raise SparkSetupError(
                f"the running SparkContext starts Python workers with {active.pythonExec!r}, not "
                f"this interpreter ({sys.executable}); set PYSPARK_PYTHON={sys.executable} "
                "before the first SparkSession is created (pytimely.spark.local_session does)"
            )
        return SparkSession.builder.getOrCreate()
    if cores < 1:
        raise ValueError("local_session: cores must be at least 1")
    _check_java()
    prepare_environment()
    settings = dict(LOCAL_CONF)
    settings["spark.master"] = f"local[{cores}]"
    settings["spark.sql.shuffle.partitions"] = str(cores)
    settings["spark.default.parallelism"] = str(cores)
    settings["spark.app.name"] = app_name
    settings["spark.driver.memory"] = driver_memory
    if fast_start:
        settings["spark.driver.extraJavaOptions"] = FAST_START_JAVA_OPTIONS
    settings.update(conf or {})
    return _session(settings, log_level)


def package_fingerprint() -> str:
    """A digest of the source of the pytimely package this process imports (from a directory
    or from a shipped zip alike): two processes with equal fingerprints run the same code."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        import importlib.resources

        digest = hashlib.sha256()
        pending = [("", importlib.resources.files("pytimely"))]
        sources = []
        while pending:
            prefix, folder = pending.pop()
            for entry in folder.iterdir():
                if entry.is_dir():
                    if entry.name != "__pycache__":
                        pending.append((f"{prefix}{entry.name}/", entry))
                elif entry.name.endswith(".py"):
                    sources.append((f"{prefix}{entry.name}", entry))
        for name, entry in sorted(sources, key=lambda item: item[0]):
            digest.update(name.encode())
            digest.update(hashlib.sha256(entry.read_bytes()).digest())
        _FINGERPRINT = digest.hexdigest()[:16]
    return _FINGERPRINT


_FINGERPRINT: str | None = None


def package_location() -> str:
    """Where this process imports pytimely from (a directory, or a path inside a zip)."""
    import pytimely

    return os.path.dirname(os.path.abspath(pytimely.__file__))


def ship_package(spark: Any, directory: str | None = None) -> str:
    """Zip the pytimely package this driver imports and ``addPyFile`` it, so that executors
    run exactly the driver's pytimely (the zip comes first on their ``sys.path``, before an
    installed copy).

    For clusters whose executors do not have pytimely installed (numpy and pyarrow they must
    have), or have another version.  :func:`connect` calls it for non-local masters.  Workers
    compare their package's :func:`package_fingerprint` with the driver's and refuse to run
    with different code.  Returns the path of the zip file.
    """
    import pytimely

    package = os.path.dirname(os.path.abspath(pytimely.__file__))
    directory = directory or tempfile.mkdtemp(prefix="pytimely-ship-")
    path = os.path.join(directory, "pytimely.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for base, dirs, files in os.walk(package):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                if name.endswith((".py", ".typed")):
                    full = os.path.join(base, name)
                    zf.write(full, os.path.relpath(full, os.path.dirname(package)))
    if is_connect(spark):
        spark.addArtifacts(path, pyfile=True)
    else:
        spark.sparkContext.addPyFile(path)
    return path


#: What :func:`connect` sets for a cluster master unless ``conf`` says otherwise.
CLUSTER_CONF: dict[str, str] = {
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
    "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "4",
    "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "5s",
    "spark.barrier.sync.timeout": "300s",
    "spark.python.task.killTimeout": "2s",
    # Barrier stages refuse dynamic allocation (SPARK-24942).
    "spark.dynamicAllocation.enabled": "false",
}


def connect(
    master: str,
    *,
    app_name: str = "pytimely",
    conf: dict[str, str] | None = None,
    secret: str | None = None,
    ship: bool = True,
    log_level: str = "ERROR",
) -> Any:
    """A SparkSession on ``master`` (``spark://host:7077``, ``yarn``, ``k8s://...``, or
    ``local[N]``, which is :func:`local_session`), ready to host pytimely workers; for a Spark
    Connect URL (``sc://host:15002``) a Connect session (``app_name``, ``conf``, ``secret`` and
    ``log_level`` are the server's business then; ``ship`` adds this pytimely as an artifact).

    * The driver and the executors' Python is this interpreter unless ``conf`` sets
      ``spark.pyspark.python`` (it must have numpy and pyarrow on the executors' machines);
      ``spark.pyspark.driver.python`` is pinned to this interpreter, so the driver does not
      switch to another one.
    * ``secret`` (default: ``SPARK_AUTHENTICATE_SECRET`` from the environment) turns on
      ``spark.authenticate`` with that secret -- a standalone master and its workers must have
      been started with the same secret.
    * ``ship`` zips this driver's pytimely and ships it to the executors
      (:func:`ship_package`), so they need no pytimely installed and never run another version.
    """
    if master.startswith("local"):
        cores = _parse_cores(master)
        return local_session(cores=cores, app_name=app_name, conf=conf, log_level=log_level)
    check_master(master)
    if master.startswith("sc://"):
        return _remote_session(master, ship)

    _check_java()
    # PySpark's tasks name their interpreter from the driver's PYSPARK_PYTHON (the conf key is
    # read by spark-submit only), so a ``spark.pyspark.python`` in ``conf`` must set it too.
    executor_python = (conf or {}).get("spark.pyspark.python")
    os.environ["PYSPARK_PYTHON"] = executor_python or os.environ.get(
        "PYSPARK_PYTHON", sys.executable
    )
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    settings = dict(CLUSTER_CONF)
    settings["spark.master"] = master
    settings["spark.app.name"] = app_name
    settings["spark.pyspark.driver.python"] = sys.executable
    settings.setdefault("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
    secret = secret if secret is not None else os.environ.get("SPARK_AUTHENTICATE_SECRET")
    if secret:
        settings["spark.authenticate"] = "true"
        settings["spark.authenticate.secret"] = secret
    settings.update(conf or {})
    spark = _session(settings, log_level)
    if ship:
        ship_package(spark)
    return spark


#: Master URL schemes :func:`connect` takes (``local[N]`` is handled before).
MASTER_SCHEMES = ("spark://", "yarn", "k8s://", "mesos://", "sc://")
#: How long :func:`check_master` waits for a standalone master to accept a connection.
MASTER_PROBE_SECONDS = 5.0


def check_master(master: str, timeout: float = MASTER_PROBE_SECONDS) -> None:
    """Refuse, within ``timeout`` seconds per address and before any JVM starts, a master URL
    that cannot work: an unknown scheme, or a standalone ``spark://host:port[,host:port]``
    where no master accepts a TCP connection (Spark itself would retry for about a minute
    and then fail with a stopped SparkContext).  Raises :class:`MasterUnreachable` naming the
    URL and the cause.

    >>> check_master("sprak://127.0.0.1:7077")
    Traceback (most recent call last):
    ...
    pytimely.spark.errors.MasterUnreachable: 'sprak://127.0.0.1:7077' is not a Spark master URL: ...
    """
    if not master.startswith(MASTER_SCHEMES):
        raise MasterUnreachable(
            f"{master!r} is not a Spark master URL: use spark://host:port (standalone), yarn, "
            "k8s://https://host:port, mesos://host:port or local[N]"
        )
    scheme = "sc://" if master.startswith("sc://") else "spark://"
    if not master.startswith(scheme):
        return  # yarn, k8s and mesos find their masters through their own configuration
    causes = []
    # A Connect URL may carry parameters after the address: sc://host:port/;token=...
    addresses = master[len(scheme) :].split("/", 1)[0].split(",")
    for address in addresses:
        host, _, port = address.strip().rpartition(":")
        if not host or not port.isdigit():
            if scheme == "sc://" and host == "" and port == "":
                host, port = address.strip(), "15002"  # Spark Connect's default port
            else:
                raise MasterUnreachable(
                    f"{master!r}: {address!r} is not host:port (a standalone master listens "
                    "on port 7077 by default: spark://host:7077)"
                )
        try:
            with socket.create_connection((host, int(port)), timeout=timeout):
                return  # some master of the list answers
        except OSError as e:
            causes.append(f"{address}: {e.strerror or e}")
    if scheme == "sc://":
        raise MasterUnreachable(
            f"no Spark Connect server answers at {master!r} ({'; '.join(causes)}): is it "
            "running ($SPARK_HOME/sbin/start-connect-server.sh; port 15002 by default) and is "
            "this its host and port?"
        )
    raise MasterUnreachable(
        f"no Spark master answers at {master!r} ({'; '.join(causes)}): is the master running "
        "(sbin/start-master.sh) and is this its host and port? (The master's web UI, port 8080 "
        "by default, shows its spark:// URL.)"
    )


def _remote_session(url: str, ship: bool) -> Any:
    """A Spark Connect session on ``url`` whose server's pytimely is this client's."""
    try:
        from pyspark import SparkContext

        if SparkContext._active_spark_context is None:
            # pyspark's generic builder: it also puts pyspark.sql.functions in Connect mode.
            from pyspark.sql import SparkSession
        else:
            # It refuses a remote session in a process that holds a classic one: the Connect
            # client's own builder does not (pyspark.sql.functions then stays classic; use
            # pyspark.sql.connect.functions with this session).
            from pyspark.sql.connect.session import SparkSession  # type: ignore[assignment]

        spark = SparkSession.builder.remote(url).getOrCreate()
    except ImportError as exc:
        raise SparkSetupError(
            f"a Spark Connect session needs the client's dependencies ({exc}): "
            "pip install 'pytimely[connect]' (pyspark[connect]: grpcio, protobuf, zstandard)"
        ) from exc
    if ship:
        ship_package(spark)
    return spark


def _session(settings: dict[str, str], log_level: str) -> Any:
    """The SparkSession with ``settings`` (created, or the running one), logging at
    ``log_level``."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


def local_slots(master: str) -> int | None:
    """The task slots of a ``local`` master URL (``local``, ``local[N]``, ``local[*]``,
    ``local-cluster[E, C, M]``), None for a cluster master.

    >>> local_slots("local[4]"), local_slots("local-cluster[2, 3, 1024]"), local_slots("yarn")
    (4, 6, None)
    """
    if master == "local":
        return 1
    for prefix in ("local[", "local-cluster["):
        if master.startswith(prefix) and master.endswith("]"):
            inner = master[len(prefix) : -1].split(",")
            if prefix == "local[":
                first = inner[0].strip()
                return (os.cpu_count() or 1) if first == "*" else int(first)
            return int(inner[0]) * int(inner[1])
    return None


def _parse_cores(master: str) -> int:
    if master.startswith("local[") and master.endswith("]"):
        first = master[len("local[") : -1].split(",")[0].strip()
        return (os.cpu_count() or 1) if first == "*" else int(first)
    return 1
