"""pytimely: timely dataflow for Python.

Data carry logical timestamps; operators coordinate through timestamp tokens (capabilities) and
learn from progress tracking which times may still arrive at their inputs.  See the README for
a tour, DESIGN.md for the architecture.
"""

from . import errors
from .dataflow import (
    ActivateCapability,
    Activator,
    Broadcast,
    Capability,
    CapabilityRef,
    CapabilitySet,
    CaptureHandle,
    Exchange,
    InputHandle,
    LoopHandle,
    Notificator,
    OperatorBuilder,
    OperatorInfo,
    Pipeline,
    ProbeHandle,
    Scope,
    Stream,
    UnorderedHandle,
)
from .dataflow.operators.keyed import KeyedContext, StateStats
from .execute import args, example, execute, execute_from_args
from .order import Product, ProductSummary
from .progress.operate import FrontierInterest
from .windows import Session, Sliding, Tumbling
from .worker import StuckError, Worker

__version__ = "0.1.0"

__all__ = [
    "args", "errors", "example", "execute", "execute_from_args", "Worker", "StuckError",
    "Product", "ProductSummary", "FrontierInterest",
    "Scope", "Stream", "Capability", "CapabilityRef", "CapabilitySet", "ActivateCapability",
    "Pipeline", "Exchange", "Broadcast", "OperatorBuilder", "OperatorInfo", "Activator",
    "InputHandle", "UnorderedHandle", "ProbeHandle", "CaptureHandle", "LoopHandle", "Notificator",
    "KeyedContext", "StateStats", "Tumbling", "Sliding", "Session",
]
