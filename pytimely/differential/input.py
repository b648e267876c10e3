"""Feeding a collection: an input session of ``(data, time, diff)`` updates.

A session wraps a timely :class:`~pytimely.InputHandle`.  Updates are buffered and sent as one
batch per :meth:`InputSession.flush` (``advance_to`` flushes first), each carrying its own time,
at the handle's current time (the least time the session may still use).  So updates at many
distinct times -- out of order, too -- cost one message and one progress change per flush, not
one per time: the operators downstream hold tokens only for their least pending times.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .lattice import less_equal

if TYPE_CHECKING:
    from ..dataflow.operators.input import InputHandle
    from ..dataflow.scope import Scope
    from .collection import Collection

__all__ = ["InputSession", "new_input"]


class InputSession:
    """Updates to a collection: ``insert``, ``remove``, ``update``, ``update_at``, then
    ``advance_to`` (which sends them) or ``flush``.

    >>> import pytimely as pt
    >>> import pytimely.differential as dd
    >>> def build(scope):
    ...     session, words = dd.new_input(scope)
    ...     captured = words.count().capture()
    ...     session.insert("a"); session.insert("b"); session.update("a", 2)
    ...     session.update_at("b", 5, -1)       # a later time, sent now
    ...     session.advance_to(1)
    ...     session.remove("a")
    ...     session.close()
    ...     return captured
    >>> cap = pt.example(build)
    >>> cap.as_of(0), cap.as_of(1), cap.as_of(5)
    ([(('a', 3), 1), (('b', 1), 1)], [(('a', 2), 1), (('b', 1), 1)], [(('a', 2), 1)])
    """

    def __init__(self, handle: InputHandle) -> None:
        self.handle = handle
        self._buffer: list[tuple[Any, Any, int]] = []
        handle.on_close(self.flush)

    @property
    def time(self) -> Any:
        """The time updates are made at (``advance_to`` moves it)."""
        return self.handle.time

    def insert(self, data: Any) -> None:
        """Add one copy of ``data`` at :attr:`time`."""
        self._buffer.append((data, self.handle.time, 1))

    def remove(self, data: Any) -> None:
        """Remove one copy of ``data`` at :attr:`time`."""
        self._buffer.append((data, self.handle.time, -1))

    def update(self, data: Any, diff: int) -> None:
        """Change the count of ``data`` by ``diff`` at :attr:`time`."""
        self._buffer.append((data, self.handle.time, diff))

    def update_at(self, data: Any, time: Any, diff: int) -> None:
        """Change the count of ``data`` by ``diff`` at ``time``, which may be any time at or
        after :attr:`time` (in any order)."""
        if not less_equal(self.handle.time, time):
            raise ValueError(
                f"update at {time!r} is before the session's time {self.handle.time!r}"
            )
        self._buffer.append((data, time, diff))

    def flush(self) -> None:
        """Send the buffered updates now (one batch)."""
        if self._buffer:
            batch, self._buffer = self._buffer, []
            self.handle.send_batch(batch)

    def advance_to(self, time: Any) -> None:
        """Send the buffered updates, then promise no updates before ``time``."""
        self.flush()
        self.handle.advance_to(time)

    def close(self) -> None:
        """Send the buffered updates and end the input."""
        self.flush()
        self.handle.close()


def new_input(scope: Scope) -> tuple[InputSession, Collection]:
    """A new input of ``scope``: ``(session, collection)``.

    >>> import pytimely as pt
    >>> import pytimely.differential as dd
    >>> def build(scope):
    ...     session, numbers = dd.new_input(scope)
    ...     captured = numbers.map(lambda x: x * 10).capture()
    ...     session.insert(1); session.insert(2); session.close()
    ...     return captured
    >>> pt.example(build).updates()
    [(10, 0, 1), (20, 0, 1)]
    """
    from .collection import Collection

    handle, stream = scope.new_input()
    return InputSession(handle), Collection(stream)
