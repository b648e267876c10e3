"""In-memory capture: a singly linked list of events shared by one writer and its readers.

::

    link = EventLink()                  # or: writer, reader = EventLink.pair()
    writer = link.writer()              # give to capture_into
    reader = link.reader()              # give to replay_into (poll() never blocks)

The writer appends nodes at the tail; each reader walks from the head and keeps only its own
position, so nodes every reader has passed are freed by reference counting (memory stays
proportional to the *unread* part of the stream).  Because the link must be able to hand a new
reader the whole stream, it keeps the head until the declared number of readers
(``EventLink(readers=1)``) has been created; ``readers=None`` keeps the whole history forever
(any number of readers, each seeing everything).

``close()`` on the writer appends an end marker; a reader that reaches it reports ``done``.
Appending and reading are safe across threads (each step is a single attribute assignment or
read under the GIL), so one thread may capture while another replays.
"""

from __future__ import annotations

from typing import Any, Self

from ..dataflow.operators.event import Messages, Progress
from ..errors import CaptureError

__all__ = ["EventLink", "LinkReader", "LinkWriter"]


class _Node:
    __slots__ = ("event", "next")

    def __init__(self, event: Any) -> None:
        self.event = event
        self.next: _Node | None = None


_END = object()


class EventLink:
    """A shared, append-only, in-memory event list: one writer, ``readers`` readers."""

    def __init__(self, readers: int | None = 1) -> None:
        if readers is not None and readers < 0:
            raise ValueError("readers must be >= 0 or None")
        self._head: _Node | None = _Node(None)  # sentinel; readers start *after* it
        self._tail: _Node | None = self._head
        self._readers_left = readers
        self._writer: LinkWriter | None = None
        self._closed = False
        if readers == 0:
            self._head = None

    @classmethod
    def pair(cls) -> tuple[LinkWriter, LinkReader]:
        """A fresh link's writer and (single) reader."""
        link = cls(readers=1)
        return link.writer(), link.reader()

    def writer(self) -> LinkWriter:
        """The link's writer (a captured stream has exactly one producer)."""
        if self._writer is not None:
            raise CaptureError("this EventLink already has a writer (one capture per link)")
        self._writer = LinkWriter(self)
        self._tail = None  # only the writer tracks the tail (holding it here would pin nodes)
        return self._writer

    def reader(self) -> LinkReader:
        """A new reader positioned at the start of the stream."""
        if self._head is None:
            raise CaptureError(
                "all declared readers of this EventLink were already created and its history "
                "was released; construct it with EventLink(readers=N) or readers=None"
            )
        r = LinkReader(self._head)
        if self._readers_left is not None:
            self._readers_left -= 1
            if self._readers_left == 0:
                self._head = None  # from now on only readers keep unread nodes alive
        return r

    def __repr__(self) -> str:
        return f"EventLink(closed={self._closed})"


class LinkWriter:
    """Appends events to an :class:`EventLink`."""

    __slots__ = ("_closed", "_link", "_tail")

    def __init__(self, link: EventLink) -> None:
        self._link = link
        self._tail = link._tail
        self._closed = False

    def push(self, event: Progress | Messages) -> None:
        """See :meth:`EventWriter.push`: the event is visible to the link's readers at once.

        Raises :class:`CaptureError` after :meth:`close`.
        """
        if self._closed:
            raise CaptureError("push() on a closed LinkWriter")
        if type(event) is not Progress and type(event) is not Messages:
            raise CaptureError(
                f"can only push Progress or Messages events, not {type(event).__name__}"
            )
        node = _Node(event)
        self._tail.next = node
        self._tail = node

    def flush(self, fsync: bool = False) -> None:
        """Nothing to do: pushed events are visible to readers at once."""

    def close(self) -> None:
        """Append the end marker (idempotent)."""
        if self._closed:
            return
        self._closed = True
        node = _Node(_END)
        self._tail.next = node
        self._tail = node
        self._link._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LinkReader:
    """Reads an :class:`EventLink` from its start; ``poll()`` never blocks."""

    __slots__ = ("_done", "_pos")

    def __init__(self, start: _Node) -> None:
        self._pos = start  # last consumed node
        self._done = False

    def poll(self, max_events: int | None = None) -> list:
        """All events appended since the last poll (at most ``max_events`` if given)."""
        out: list = []
        pos = self._pos
        nxt = pos.next
        append = out.append
        limit = -1 if max_events is None else max_events
        while nxt is not None and limit != 0:
            ev = nxt.event
            if ev is _END:
                self._done = True
                pos = nxt
                break
            append(ev)
            pos = nxt
            nxt = pos.next
            limit -= 1
        self._pos = pos
        return out

    @property
    def done(self) -> bool:
        """True once the end marker has been reached."""
        return self._done

    def __iter__(self):
        """Iterate the events available now (stops at the current end of the link)."""
        return iter(self.poll())

    def __repr__(self) -> str:
        return f"LinkReader(done={self._done})"
