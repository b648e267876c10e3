"""Reading a failed Spark job: the worker's marked report, Spark's reason, the failed task.

A failing worker task raises with its report between two markers in the message
(:mod:`.executor`); Spark's exception carries that message inside its own, with the task's
Python traceback and the JVM's frames.  Both launchers (classic, :mod:`.launcher`; Spark
Connect, :mod:`.remote`) read it with these functions.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..errors import WorkerFailure
from .errors import SparkJobFailed
from .executor import MARK_CLOSE, MARK_OPEN

__all__ = [
    "failed_task",
    "parse_marker",
    "python_mismatch",
    "report_head",
    "retryable",
    "spark_reason",
]


def parse_marker(text: str) -> dict[str, Any] | None:
    """The report a worker task marked in ``text``, or None.

    >>> parse_marker('Traceback ... <<pytimely-failure {"worker": 1} pytimely-failure>> ...')
    {'worker': 1}
    """
    start = text.find(MARK_OPEN)
    while start >= 0:
        end = text.find(MARK_CLOSE, start)
        if end < 0:
            return None
        try:
            return json.loads(text[start + len(MARK_OPEN) : end])
        except ValueError:
            start = text.find(MARK_OPEN, end)
    return None


FAILED_TASK = re.compile(r"barrier task ResultTask\(\d+, (\d+)\)|Exception in task (\d+)\.\d+ ")


def spark_reason(exc: BaseException) -> tuple[str, str]:
    """``(reason, jvm_frames)`` from a failed Spark job's exception: the reason is Spark's whole
    message (with the failing task's Python traceback) without the JVM's stack frames, which
    are the second part."""
    text = str(exc)
    for needle in ("Job aborted due to stage failure: ", "SparkException: "):
        at = text.find(needle)
        if at >= 0:
            text = text[at + len(needle) :]
            break
    text, _sep, driver_stack = text.partition("Driver stacktrace:")
    reason: list[str] = []
    frames: list[str] = []
    for line in text.splitlines():
        if line.startswith(("\tat ", "\t... ")):
            frames.append(line)
        elif line.strip():
            reason.append(line)
    if driver_stack.strip():
        frames.append("Driver stacktrace:" + driver_stack)
    return "\n".join(reason), "\n".join(frames)


def failed_task(reason: str) -> int | None:
    """The partition (= worker index) of the task Spark names as the one that failed."""
    match = FAILED_TASK.search(reason)
    if match is None:
        return None
    return int(match.group(1) or match.group(2))


_PYTHON_MISMATCH = re.compile(
    r"Python in worker has different version:? (\S+) than that in driver:? (\d+\.\d+)"
)


def python_mismatch(text: str) -> tuple[str, str] | None:
    """``(executors' Python, driver's Python)`` when PySpark's own version check failed a task
    (its message is in ``text``), else None.

    >>> python_mismatch("Python in worker has different version: 3.12 than that in driver: 3.11")
    ('3.12', '3.11')
    """
    match = _PYTHON_MISMATCH.search(text)
    return None if match is None else (match.group(1), match.group(2))


def report_head(report: dict[str, Any]) -> str:
    """The first line of the error for a worker's failure ``report``: who failed and why.

    >>> report_head({"worker": 0, "origin": 1, "relayed": True, "summary": "WorkerFailure: ..."})
    'WorkerFailure: ... (reported by worker 0)'
    >>> report_head({"worker": 1, "origin": 1, "summary": "ValueError: no such user"})
    'worker 1 failed: ValueError: no such user'
    """
    if report.get("relayed"):
        return f"{report['summary']} (reported by worker {report['worker']})"
    if report.get("lost"):
        return report["summary"]
    return f"worker {report.get('origin', report.get('worker'))} failed: {report['summary']}"


def retryable(exc: BaseException) -> bool:
    """Whether ``attempts`` resubmits after ``exc``: any worker failure -- an exception, a
    killed worker process or executor, a lost barrier task -- but not a deliberate stop
    (timeout, the caller's interrupt) nor a cluster that cannot host the workers."""
    if isinstance(exc, WorkerFailure):
        return True
    return isinstance(exc, SparkJobFailed) and exc.retryable
