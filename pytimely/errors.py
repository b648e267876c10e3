"""The exceptions pytimely raises.  Everything derives from :class:`TimelyError`.

Messages name the operator (and its address in the dataflow) whenever one is involved, and say
what to do about the problem where we can tell.
"""

from __future__ import annotations

__all__ = [
    "TimelyError",
    "CycleError",
    "GraphError",
    "StuckError",
    "CapabilityError",
    "OperatorError",
    "OperatorCapabilityError",
    "WorkerFailure",
    "CommunicationError",
    "AuthenticationError",
    "SerializationError",
    "CaptureError",
    "TruncatedCapture",
    "CaptureFileExists",
]


class TimelyError(Exception):
    """Base class of every pytimely error."""


class GraphError(TimelyError):
    """The dataflow graph is malformed (bad connection, streams of two scopes mixed, ...)."""


class StuckError(TimelyError):
    """The computation would wait forever: no worker has anything to do and no message is in
    flight, yet a dataflow is incomplete (or a ``step_while`` condition still holds).  The
    message names what holds the frontier, on every worker."""


class CycleError(GraphError):
    """A cycle of the dataflow graph does not strictly advance timestamps."""


class CapabilityError(TimelyError):
    """A timestamp token (capability) was misused: sending without one, using one of another
    output, downgrading backwards, or using one that was dropped."""


class OperatorError(TimelyError):
    """User logic inside an operator raised; the original exception is ``__cause__``."""

    def __init__(self, message: str, operator: str = "", address: tuple = ()) -> None:
        super().__init__(message)
        self.operator = operator
        self.address = address


class OperatorCapabilityError(OperatorError, CapabilityError):
    """A capability was misused inside an operator's logic: both an :class:`OperatorError`
    (with the operator's name and address) and a :class:`CapabilityError`."""


class WorkerFailure(TimelyError):
    """Another worker failed or disappeared; this worker cannot continue."""

    def __init__(self, message: str, worker: int | None = None) -> None:
        super().__init__(message)
        self.worker = worker


class CommunicationError(TimelyError):
    """A connection between workers broke, or carried a malformed frame."""


class AuthenticationError(CommunicationError):
    """A peer did not prove knowledge of the shared secret."""


class SerializationError(CommunicationError, TypeError):
    """A payload bound for another worker cannot be pickled.  Also a ``TypeError`` (what
    ``pickle`` itself mostly raises); the pickling exception is ``__cause__``."""


class CaptureError(TimelyError):
    """A capture file or stream is malformed (bad magic, version, checksum, or frame)."""


class TruncatedCapture(CaptureError):
    """The last frame of a capture is incomplete (the complete prefix remains readable)."""


class CaptureFileExists(CaptureError, FileExistsError):
    """A capture writer refused to overwrite or append to an existing file it was not told to
    (pass ``mode="w"`` to overwrite or ``mode="a"`` to append)."""
