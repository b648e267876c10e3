"""``query.stop()`` while a micro-batch is in the bridge is a clean stop, not a JVM crash.

Spark decides whether a failed ``foreachBatch`` was its own stop by matching the Python error's
text against ``StreamExecution.PROXY_ERROR`` (``...calling((.|\\n)*)(...Interrupted...)``).
Java's regex engine recurses once per character of that group, and the Py4J error of an
interrupted ``collect`` carries the whole JVM stack (about 9,000 characters): 2 of 12 stops
under load printed ``java.lang.StackOverflowError`` and a thousand ``Pattern`` frames.  The
bridge re-raises interruptions as a short :class:`BatchInterrupted`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pytimely.spark.streaming import _interruption

pytestmark = pytest.mark.spark

#: A query whose micro-batch waits in a slow Spark stage when the query is stopped.
JOB = r"""
import json, os, sys, time
import pyarrow as pa
from pytimely import spark as ps

tmp = sys.argv[1]
marker = os.path.join(tmp, "slow-stage-started")
spark = ps.local_session(cores=4)

def slow(batches):  # runs in Spark's Python workers
    for b in batches:
        open(marker, "w").close()
        time.sleep(3)
        yield b

def build(scope, stream):
    return stream.map(lambda r: r["value"]).probe()

raised = []
with ps.StreamingBridge(spark, build, workers=1) as bridge:
    def batch(df, batch_id):
        try:
            bridge.foreach_batch(df, batch_id)
        except BaseException as e:
            raised.append(type(e).__name__)
            raise

    rows = spark.readStream.format("rate").option("rowsPerSecond", 50).load()
    slowed = rows.mapInArrow(slow, rows.schema)
    query = (slowed.writeStream.foreachBatch(batch)
             .option("checkpointLocation", os.path.join(tmp, "checkpoint"))
             .trigger(processingTime="100 milliseconds").start())
    deadline = time.monotonic() + 90
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the batch's collect is waiting in the slow stage
    query.stop()
    exception = query.exception()
print(json.dumps({"raised": raised, "exception": None if exception is None else str(exception)}))
"""


@pytest.mark.timeout(240)
def test_stopping_a_query_mid_batch_is_quiet(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", JOB, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["raised"] == ["BatchInterrupted"]  # the stop did interrupt the batch
    assert report["exception"] is None  # and Spark took it for its own stop
    assert "StackOverflowError" not in done.stderr
    assert "\tat java.base/java.util.regex" not in done.stderr


def test_spark_reads_the_short_message_as_its_stop_and_the_long_one_overflows(spark):
    """Spark's own check (``StreamExecution.isInterruptionException``) on both texts."""
    jvm = spark.sparkContext._jvm
    sc = spark.sparkContext._jsc.sc()
    check = jvm.org.apache.spark.sql.execution.streaming.runtime.StreamExecution

    class Py4JJavaError(Exception):
        errmsg = "An error occurred while calling o233.collectToPython.\n"
        java_exception = "java.lang.InterruptedException"

    short = f"micro-batch 3 was interrupted: {_interruption(Py4JJavaError())}"
    assert check.isInterruptionException(jvm.py4j.Py4JException(short), sc)
    frames = "".join(f"\tat org.example.Frame{i}.call(Frame.java:{i})\n" for i in range(120))
    long = (
        "py4j.protocol.Py4JJavaError: An error occurred while calling o233.collectToPython.\n"
        f": java.lang.InterruptedException\n{frames}"
    )
    with pytest.raises(Exception, match="StackOverflowError"):
        check.isInterruptionException(jvm.py4j.Py4JException(long), sc)
