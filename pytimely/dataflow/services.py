"""What the dataflow layer may ask of its worker: :class:`WorkerServices`.

Scopes, pacts and operators never see the :class:`~pytimely.worker.Worker` itself, only this
interface (timely's ``AsWorker`` trait in ``worker.rs``): channels, progress exchanges, timed
activations, activations from other threads, input tracking and flow control.  The worker
implements it; keeping it here, on the dataflow side, is what lets the dataflow layer not
depend on the worker module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..communication.allocator import Allocator
    from ..progress.broadcast import Progcaster

__all__ = ["WorkerServices"]


class WorkerServices(Protocol):
    """What the dataflow layer (scopes, pacts, operators) may ask of its worker — an internal
    interface, like timely's ``AsWorker`` trait in ``worker.rs``; user code has no need of it.

    Channel identifiers are allocated in construction order, so every worker that builds the
    same dataflows in the same order allocates the same identifiers (see the module docstring).
    """

    index: int
    peers: int
    strict: bool
    allocator: Allocator

    def allocate_channel(self) -> int:
        """A new channel identifier (for a data exchange or a scope's progress)."""
        ...

    def register_data_channel(self, channel: int, push: Callable[[Any, Any], None]) -> None:
        """Deliver the ``(time, batch)`` payloads other workers send on ``channel`` to
        ``push`` (payloads that arrived earlier are delivered at once)."""
        ...

    def progcaster(self, channel: int) -> Progcaster:
        """The progress exchange of one scope on ``channel``: its sends go to every other
        worker, and what they send on ``channel`` is handed to its ``receive``."""
        ...

    def activate_after(self, activate: Callable[[], None], delay: float) -> None:
        """Call ``activate()`` once, at the first step at least ``delay`` seconds from now."""
        ...

    def call_soon_threadsafe(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` on the worker's thread at the start of its next step, waking
        the worker if it is parked.  The one method any thread may call: how work done
        elsewhere (an event loop's calls, see ``Stream.map_async``) activates an operator."""
        ...

    def expect_from_threads(self, delta: int) -> None:
        """Count ``delta`` more (negative: fewer) calls running on other threads that will
        report back through :meth:`call_soon_threadsafe`.  While any is expected the worker is
        busy: it parks until woken, and is never declared idle or stuck.  Worker thread
        only."""
        ...

    def before_flush(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once, just before this worker next transmits what it queued for
        the other workers (at the end of every step, before it parks, and before a progress
        batch leaves): for a channel that holds data back to send it in fewer, larger
        messages.  Whatever the callback sends leaves in that transmission."""
        ...

    def track_input(self, handle: Any) -> None:
        """``handle.close()`` when the worker's inputs are closed (:meth:`Worker.close_inputs`,
        what leaving :func:`pytimely.execute`'s function does)."""
        ...

    def congested(self) -> bool:
        """Some peer has more data in flight from this worker than the flow-control bound
        (:mod:`pytimely.communication.flow`): sources should hold back."""
        ...

    @property
    def scheduling(self) -> bool:
        """Whether the worker is inside a step (running its dataflows' operators) now."""
        ...

    def wait_for_credit(self, who: str) -> None:
        """For inputs fed from user code: step this worker until no peer is congested
        (returns at once when called from inside a step: operators never wait).  ``who``
        names the input in the error raised if a peer acknowledges nothing for too long."""
        ...
