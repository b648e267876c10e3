"""Running pytimely on Spark: Spark places the workers, feeds them and stores their output.

Deployment model: N pytimely workers are the N tasks of **one barrier
stage**, each a long-running task holding one task slot.  The tasks find each other once via
``BarrierTaskContext.allGather`` and then talk over pytimely's own authenticated TCP mesh; the
driver keeps a control connection to each.

* :func:`local_session` -- an embedded ``local[N]`` Spark with a fast-starting configuration
  whose Python workers run this interpreter; :func:`connect` -- a session on a cluster
  (standalone, YARN, Kubernetes) with authentication and this driver's pytimely shipped.
* :func:`run` -- ``fn(worker)`` on N Spark-placed workers; results in worker order.
  :func:`run_to_dataframe` -- the same, the workers' rows as one DataFrame.  Both, and
  :func:`run_on_dataframe`, also run from a Spark Connect session
  (:mod:`pytimely.spark.remote`; ``connect("sc://...")``).
* :func:`run_on_dataframe` -- a dataflow over a DataFrame: worker ``i`` reads partition ``i``
  (Arrow batches, sorted by the time column) through one input whose time advances with the
  partition's times.
* :func:`write_parquet` -- Parquet output from every worker, written as epochs complete:
  rolling files of many epochs (``dir/worker=i/part-<first>-<last>.parquet``, an ``epoch``
  column) by default, one file per epoch (``dir/worker=i/epoch=e.parquet``) with
  ``per_epoch=True`` or inside a :class:`StreamingBridge`; :func:`read_output` /
  :func:`output_files` read / list what it committed;
  :func:`capture_parquet` / :func:`capture_readers` -- captured streams as Parquet, readable
  by ``spark.read.parquet`` and replayable with ``replay_into``.
* :class:`StreamingBridge` -- a Structured Streaming query's micro-batches pushed into running
  workers, one epoch per batch (``writeStream.foreachBatch(bridge.foreach_batch)``).

Errors: :class:`~pytimely.errors.WorkerFailure` when a worker fails (naming it), and before
anything is submitted :class:`NotEnoughSlots` / :class:`SparkSetupError` (dynamic allocation,
wrong Python), :class:`JavaUnavailable`; :class:`SparkJobFailed` for other job failures.
"""

from .._extras import require

# Before anything else: without pyspark, say which extra brings it (E402 ignored in pyproject).
require("pytimely.spark", "pyspark", "pandas", extra="spark")

from .dataframe import feed_batches, prepare_dataframe, run_on_dataframe
from .datasource import register_data_source
from .launcher import (
    NotEnoughSlots,
    SparkJobFailed,
    available_slots,
    check_deployable,
    run,
    run_to_dataframe,
)
from .session import (
    FAST_START_JAVA_OPTIONS,
    LOCAL_CONF,
    JavaUnavailable,
    MasterUnreachable,
    SparkSetupError,
    check_master,
    connect,
    java_version,
    local_session,
    package_fingerprint,
    prepare_environment,
    ship_package,
)
from .sinks import (
    capture_parquet,
    capture_readers,
    epoch_path,
    output_files,
    read_output,
    to_arrow,
    write_parquet,
)
from .streaming import BatchInterrupted, StreamingBridge

__all__ = [
    "FAST_START_JAVA_OPTIONS",
    "BatchInterrupted",
    "LOCAL_CONF",
    "JavaUnavailable",
    "MasterUnreachable",
    "NotEnoughSlots",
    "SparkJobFailed",
    "SparkSetupError",
    "StreamingBridge",
    "available_slots",
    "capture_parquet",
    "capture_readers",
    "check_deployable",
    "check_master",
    "connect",
    "epoch_path",
    "feed_batches",
    "java_version",
    "local_session",
    "output_files",
    "package_fingerprint",
    "prepare_dataframe",
    "prepare_environment",
    "read_output",
    "register_data_source",
    "run",
    "run_on_dataframe",
    "run_to_dataframe",
    "ship_package",
    "to_arrow",
    "write_parquet",
]
