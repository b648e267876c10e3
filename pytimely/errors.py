"""The exceptions pytimely raises.  Everything derives from :class:`TimelyError`, except
:class:`UnroutableKey`, which is a ``TypeError`` about the user's key.

Messages name the operator (and its address in the dataflow) whenever one is involved, and say
what to do about the problem where we can tell.  :func:`failure_report` is how a supervisor
(local processes or Spark tasks) learns which worker to blame for a :class:`WorkerFailure`.

The exceptions stay importable from the modules that raise them (``pytimely.worker``,
``pytimely.communication``, ...).
"""

from __future__ import annotations

import traceback
from typing import Any

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
    "SecretMismatch",
    "SerializationError",
    "CaptureError",
    "TruncatedCapture",
    "CaptureFileExists",
    "ConfigError",
    "HandshakeRejected",
    "HandshakeTimeout",
    "UnroutableKey",
    "failure_report",
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


def failure_report(index: int, exc: BaseException, prefix: str = "") -> dict[str, Any]:
    """What worker ``index`` tells its supervisor about the exception ``exc`` that ended it.

    A :class:`WorkerFailure` naming *another* worker anywhere in ``exc``'s chain (``__cause__``,
    or ``__context__`` unless suppressed by ``raise ... from None``) means "not my fault": the
    report is *relayed* and blames that worker.  A chain ended by ``from None`` (say a
    :class:`StuckError` that replaces the failure it explains) is this worker's own error.

    The keys (plain values, so the report pickles and serializes as JSON):

    * ``worker`` -- ``index``; ``origin`` -- the worker to blame (``index`` unless relayed);
    * ``relayed`` -- ``True`` when another worker's failure ended this one;
    * ``stuck`` -- ``exc`` is a :class:`StuckError`;
    * ``summary`` -- ``prefix`` + ``"Type: message"`` of ``exc``;
    * ``blame`` -- the relayed failure's message, or ``summary`` when not relayed;
    * ``traceback`` -- ``prefix`` + ``exc``'s formatted traceback.

    >>> failure_report(1, WorkerFailure("worker 0 raised ValueError", worker=0))["origin"]
    0
    >>> failure_report(1, ValueError("bad"))["blame"]
    'ValueError: bad'
    """
    blamed: WorkerFailure | None = None
    link: BaseException | None = exc
    while link is not None:
        if isinstance(link, WorkerFailure) and link.worker is not None and link.worker != index:
            blamed = link
            break
        link = link.__cause__ or (None if link.__suppress_context__ else link.__context__)
    summary = f"{prefix}{type(exc).__name__}: {exc}"
    return {
        "worker": index,
        "origin": index if blamed is None else blamed.worker,
        "relayed": blamed is not None,
        "stuck": isinstance(exc, StuckError),
        "summary": summary,
        "blame": summary if blamed is None else str(blamed),
        "traceback": prefix + "".join(traceback.format_exception(exc)),
    }


class ConfigError(TimelyError, ValueError):
    """Command-line flags or a host file that do not describe a valid set of workers."""


class CommunicationError(TimelyError):
    """A connection between workers broke, or carried a malformed frame."""


class AuthenticationError(CommunicationError):
    """A peer did not prove knowledge of the shared secret."""


class SecretMismatch(AuthenticationError):
    """The process at a peer's listed address does not share this process' secret (or reported
    that ours failed): the processes of one cluster were started with different secrets."""


class HandshakeRejected(CommunicationError):
    """The other side closed the connection or sent something that is not a pytimely hello."""


class HandshakeTimeout(HandshakeRejected):
    """The whole handshake did not complete before its deadline."""


class UnroutableKey(TypeError):
    """A key that no worker can route: equal keys could not be guaranteed to meet.

    Raised by an exchange channel with a message that names the channel, the consuming
    operator and the key (``leads``): a scope reporting it puts that message first and the
    sending operator after it, since the mistake is the key, not the sender's code."""

    #: The message says what went wrong and where: wrappers lead with it.
    leads = True


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
