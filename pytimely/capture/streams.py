"""Captures over sockets, pipes and binary file objects: :class:`StreamWriter` and
:class:`StreamReader`, the same frames as files (:mod:`pytimely.capture.frames`).
"""

from __future__ import annotations

import os
import select
import socket
import time as _time
from typing import Any

from ..errors import CaptureError
from .frames import DEFAULT_MAX_FRAME, BufferedWriter, Parser, ReaderBase, encode_header

__all__ = ["StreamReader", "StreamWriter"]

# --------------------------------------------------------------------------------------------
# Streams (sockets, pipes, file objects)


def _stream_name(obj: Any) -> str:
    if isinstance(obj, socket.socket):
        try:
            peer = obj.getpeername()
            return f"<socket {peer}>" if peer else f"<socket fd={obj.fileno()}>"
        except OSError:
            return f"<socket fd={obj.fileno()}>"
    return f"<stream {getattr(obj, 'name', type(obj).__name__)}>"


class StreamWriter(BufferedWriter):
    """Writes a capture to a socket or a binary file object (the header is sent at once).

    ``close()`` sends END, then shuts the socket down for writing and closes it (or closes the
    file object); pass ``close_target=False`` to leave it open.
    """

    def __init__(
        self,
        target: Any,
        allow_pickle: bool = False,
        *,
        time_type: Any = None,
        metadata: dict | None = None,
        buffer_size: int = 1 << 16,
        close_target: bool = True,
        name: str | None = None,
    ) -> None:
        self.target = target
        self.name = name or _stream_name(target)
        self._is_socket = isinstance(target, socket.socket)
        self._close_target = close_target
        self._init_writer(allow_pickle, buffer_size)
        header, self.metadata = encode_header(time_type, metadata)
        self._write(header)

    def _write(self, data: bytes) -> None:
        try:
            if self._is_socket:
                sock = self.target
                if sock.gettimeout() == 0.0:
                    mv = memoryview(data)
                    while mv:
                        try:
                            n = sock.send(mv)
                        except (BlockingIOError, InterruptedError):
                            select.select([], [sock], [])
                            continue
                        mv = mv[n:]
                else:
                    sock.sendall(data)
            else:
                mv = memoryview(data)
                while mv:
                    n = self.target.write(mv)
                    if n is None:  # non-blocking raw stream with nothing written
                        _time.sleep(0.001)
                        continue
                    mv = mv[n:]
        except OSError as e:
            raise CaptureError(f"{self.name}: write failed: {e}") from e

    def _sync(self) -> None:
        if self._is_socket:
            return
        try:
            if hasattr(self.target, "flush"):
                self.target.flush()
            fileno = getattr(self.target, "fileno", None)
            if fileno is not None:
                try:
                    fd = fileno()
                except (OSError, ValueError):
                    return
                try:
                    os.fsync(fd)
                except OSError:
                    pass  # pipes and ttys cannot be fsynced
        except OSError as e:
            raise CaptureError(f"{self.name}: flush failed: {e}") from e

    def flush(self, fsync: bool = False) -> None:
        """Send buffered frames; for file objects also flush them (``fsync`` forces to disk)."""
        if self._closed:
            return
        self._write_out()
        if not self._is_socket and hasattr(self.target, "flush"):
            try:
                self.target.flush()
            except OSError as e:
                raise CaptureError(f"{self.name}: flush failed: {e}") from e
        if fsync:
            self._sync()

    def _release(self) -> None:
        if not self._close_target:
            return
        try:
            if self._is_socket:
                try:
                    self.target.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
            self.target.close()
        except OSError:
            pass

    def __repr__(self) -> str:
        return f"StreamWriter({self.name}, events={self.events}, closed={self._closed})"


class StreamReader(ReaderBase):
    """Reads a capture from a socket, pipe or binary file object without ever blocking.

    A socket is switched to non-blocking mode; an object with a ``fileno()`` (a pipe) is read
    with non-blocking ``os.read``; any other object's ``read(n)`` is called as is (it should not
    block, e.g. ``io.BytesIO``).  ``done`` at the END frame; end of stream without END raises
    :class:`~pytimely.errors.TruncatedCapture` (after the complete prefix).
    """

    def __init__(
        self,
        source: Any,
        allow_pickle: bool = False,
        *,
        max_frame: int = DEFAULT_MAX_FRAME,
        name: str | None = None,
        max_read: int = 64 << 20,
        close_source: bool = True,
    ) -> None:
        self.source = source
        self.name = name or _stream_name(source)
        self._parser = Parser(self.name, allow_pickle, max_frame)
        self._max_read = max_read
        self._close_source = close_source
        self._init_state()
        self._fd: int | None = None
        if isinstance(source, socket.socket):
            source.setblocking(False)
            self._kind = "socket"
        else:
            fd = None
            fileno = getattr(source, "fileno", None)
            if fileno is not None:
                try:
                    fd = fileno()
                except (OSError, ValueError, AttributeError):
                    fd = None
            if fd is not None and not hasattr(source, "getvalue"):
                os.set_blocking(fd, False)
                self._fd = fd
                self._kind = "fd"
            else:
                self._kind = "read"

    def _read_available(self) -> tuple[bytes, bool]:
        """(bytes available now, eof)."""
        chunks = []
        total = 0
        eof = False
        while total < self._max_read:
            try:
                if self._kind == "socket":
                    data = self.source.recv(1 << 20)
                elif self._kind == "fd":
                    data = os.read(self._fd, 1 << 20)  # type: ignore[arg-type]
                else:
                    data = self.source.read(1 << 20)
                    if data is None:
                        break
            except (BlockingIOError, InterruptedError):
                break
            except ConnectionResetError:
                eof = True
                break
            except OSError as e:
                raise CaptureError(f"{self.name}: read failed: {e}") from e
            if not data:
                eof = True
                break
            chunks.append(data)
            total += len(data)
        return b"".join(chunks), eof

    def poll(self, max_events: int | None = None) -> list:
        """Complete events available now (``[]`` if none); raises a deferred error."""
        settled = self._settled()
        if settled is not None:
            return settled
        p = self._parser
        limit = -1 if max_events is None else max_events
        events = p.parse(limit)
        eof = False
        if p.error is None and not p.ended and (limit < 0 or len(events) < limit):
            data, eof = self._read_available()
            if data:
                p.feed(data)
                events += p.parse(limit - len(events) if limit >= 0 else -1)
        if p.error is not None:
            self._pending_error = p.error
        elif p.ended:
            self._done = True
            self._release()
        elif eof:
            self._pending_error = p.eof_error(
                "stream closed without an END frame (the writer stopped before close())"
            )
            self._release()
        return self._finish(events)

    def _release(self) -> None:
        if self._close_source:
            try:
                self.source.close()
            except OSError:
                pass

    def close(self) -> None:
        """Stop reading; closes the source unless made with ``close_source=False``."""
        self._release()

    def __repr__(self) -> str:
        return f"StreamReader({self.name}, offset={self.offset}, done={self._done})"
