"""The errors of running pytimely on Spark (all :class:`~pytimely.errors.TimelyError` s)."""

from __future__ import annotations

from ..errors import TimelyError

__all__ = [
    "JavaUnavailable",
    "MasterUnreachable",
    "NotEnoughSlots",
    "SparkJobFailed",
    "SparkSetupError",
]


class SparkSetupError(TimelyError):
    """Spark cannot host pytimely workers as configured (the message says what to change).

    When Spark itself raised, its JVM stack frames are kept out of the message, in
    :attr:`jvm_frames`.
    """

    def __init__(self, message: str, *, jvm_frames: str = "") -> None:
        super().__init__(message)
        self.jvm_frames = jvm_frames


class JavaUnavailable(SparkSetupError):
    """No Java 17+ to run Spark 4 (``scripts/ensure-java.sh`` installs one on Debian/Ubuntu)."""


class MasterUnreachable(SparkSetupError):
    """The master URL given to :func:`pytimely.spark.connect` names no master that answers
    (nothing listens there, the host is unknown, or the URL is not a master URL)."""


class NotEnoughSlots(SparkSetupError):
    """The cluster has fewer task slots than the run needs (workers, plus room for other jobs)."""


class SparkJobFailed(TimelyError):
    """The Spark job hosting the workers failed for a reason no worker reported (cancelled,
    executor lost, barrier sync timeout, ...).

    The message holds Spark's reason in full, with the Python traceback of the task that
    failed, but without the JVM's stack frames: those are in :attr:`jvm_frames`.  ``worker`` is
    the index of the worker whose task failed when Spark says which, else None.  ``retryable``
    is False when the run was stopped on purpose (its timeout, or workers that never started):
    ``attempts`` does not resubmit those.
    """

    def __init__(
        self,
        message: str,
        *,
        worker: int | None = None,
        jvm_frames: str = "",
        retryable: bool = True,
    ) -> None:
        super().__init__(message)
        self.worker = worker
        self.jvm_frames = jvm_frames
        self.retryable = retryable
