"""The dataflow layer: scopes, streams, channels, capabilities, operator builders and the
operator library.  Built on :mod:`pytimely.progress` and :mod:`pytimely.communication`."""

from . import operators  # noqa: F401  (the operator library behind the Stream methods)
from .capability import Capability, CapabilityRef, CapabilitySet
from .operator import Activator, OperatorInfo
from .operators.capture import CaptureHandle
from .operators.feedback import LoopHandle
from .operators.generic import OperatorBuilder
from .operators.input import ActivateCapability, InputHandle, UnorderedHandle
from .operators.notify import Notificator
from .operators.probe import ProbeHandle
from .pacts import Broadcast, Exchange, Pipeline
from .scope import Scope
from .stream import Stream

__all__ = [
    "Scope",
    "Stream",
    "Capability",
    "CapabilityRef",
    "CapabilitySet",
    "ActivateCapability",
    "Pipeline",
    "Exchange",
    "Broadcast",
    "OperatorBuilder",
    "OperatorInfo",
    "Activator",
    "InputHandle",
    "UnorderedHandle",
    "ProbeHandle",
    "CaptureHandle",
    "LoopHandle",
    "Notificator",
]
