"""Captures in files: :class:`FileWriter` and :class:`FileReader` (tailing a file still being
written), and the one-call helpers :func:`write_events` / :func:`read_events`.  The format, and
the rules for reading and writing it, are specified in :mod:`pytimely.capture.frames`.
"""

from __future__ import annotations

import os
from typing import Any, Self

from ..dataflow.operators.event import Messages
from ..errors import CaptureError, CaptureFileExists
from .frames import (
    DEFAULT_MAX_FRAME,
    MAX_BODY,
    NO_END,
    BufferedWriter,
    Parser,
    ReaderBase,
    encode_end,
    encode_event,
    encode_header,
    time_type_name,
)

__all__ = [
    "FileReader",
    "FileWriter",
    "read_events",
    "read_events_and_metadata",
    "decode_capture",
    "encode_capture",
    "read_header",
    "write_events",
    "write_records_atomically",
]

# --------------------------------------------------------------------------------------------
# Files


class FileReader(ReaderBase):
    """Reads a capture file; ``poll()`` returns every complete event available now.

    ``tail=True`` follows a file that is still being written (it may not even exist yet); a
    partial final frame is then just not available yet.  See the module docs for errors,
    truncation and ``done``.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        tail: bool = False,
        allow_pickle: bool = False,
        *,
        max_frame: int = DEFAULT_MAX_FRAME,
        chunk_size: int = 16 << 20,
    ) -> None:
        self.path = os.fspath(path)
        self.tail = tail
        self._parser = Parser(self.path, allow_pickle, max_frame)
        self._chunk = chunk_size
        self._f: Any = None
        self._init_state()
        if not tail:
            self._open()

    def _open(self) -> bool:
        try:
            self._f = open(self.path, "rb", buffering=0)  # noqa: SIM115 - held by the reader
            return True
        except FileNotFoundError as e:
            if self.tail:
                return False
            raise CaptureError(f"{self.path}: no such capture file") from e
        except OSError as e:
            raise CaptureError(f"{self.path}: cannot open capture file: {e}") from e

    def poll(self, max_events: int | None = None) -> list:
        """Complete events available now (``[]`` if none); raises a deferred error."""
        settled = self._settled()
        if settled is not None:
            return settled
        if self._f is None and not self._open():
            return []
        p = self._parser
        limit = -1 if max_events is None else max_events
        events: list = []
        eof = False
        while True:
            events += p.parse(limit - len(events) if limit >= 0 else -1)
            if p.error is not None or (limit >= 0 and len(events) >= limit):
                break
            try:
                data = self._f.read(self._chunk)
            except OSError as e:
                raise CaptureError(f"{self.path}: read failed: {e}") from e
            if not data:
                eof = True
                break
            p.feed(data)
        if p.error is not None:
            self._pending_error = p.error
        elif eof:
            if not self.tail:
                err = p.eof_error(NO_END)
                if err is not None:
                    self._pending_error = err
                else:
                    self._done = True
                    self.close()
            elif p.ended and not p.pending:
                self._done = True
                self.close()
        return self._finish(events)

    def close(self) -> None:
        """Release the file handle (the reader can no longer poll new data)."""
        if self._f is not None:
            self._f.close()
            self._f = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"FileReader({self.path!r}, tail={self.tail}, offset={self.offset}, done={self._done})"
        )


def read_header(path: str | os.PathLike) -> dict:
    """The metadata of a capture file's header (validates magic, version and checksum)."""
    name = os.fspath(path)
    p = Parser(name, False, DEFAULT_MAX_FRAME)
    try:
        with open(name, "rb") as f:
            while p.metadata is None and p.error is None:
                data = f.read(65536)
                if not data:
                    break
                p.feed(data)
                p.parse(0)
    except OSError as e:
        raise CaptureError(f"{name}: cannot read: {e}") from e
    if p.metadata is None:
        raise p.error or p.eof_error()  # type: ignore[misc]
    return p.metadata


class FileWriter(BufferedWriter):
    """Writes a capture file: a new one by default (``mode="x"``), or ``mode="w"`` to overwrite,
    or ``mode="a"`` to append.  See the module docs for the rules."""

    def __init__(
        self,
        path: str | os.PathLike,
        allow_pickle: bool = False,
        *,
        mode: str = "x",
        time_type: Any = None,
        metadata: dict | None = None,
        buffer_size: int = 1 << 20,
        repair: bool = False,
        lock: bool = True,
    ) -> None:
        if mode not in ("a", "w", "x"):
            raise ValueError("mode must be 'a' (append), 'w' (truncate) or 'x' (new file only)")
        self.path = self.name = os.fspath(path)
        self._init_writer(allow_pickle, buffer_size)
        self._fd: int | None = None
        flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
        if mode == "x":
            flags |= os.O_EXCL
        try:
            fd = os.open(self.path, flags, 0o644)
        except FileExistsError as e:
            raise CaptureFileExists(
                f"{self.path}: capture file already exists; pass mode='a' to append to it or "
                "mode='w' to overwrite it"
            ) from e
        except OSError as e:
            raise CaptureError(f"{self.path}: cannot open for writing: {e}") from e
        try:
            if lock:
                self._lock(fd)
            size = os.fstat(fd).st_size
            if mode == "w" and size:
                os.ftruncate(fd, 0)
                size = 0
            if size:
                end, meta = self._validate_existing(size, time_type, repair)
                if end < size:
                    os.ftruncate(fd, end)
                self.metadata = meta
                os.lseek(fd, 0, os.SEEK_END)
            else:
                header, self.metadata = encode_header(time_type, metadata)
                os.lseek(fd, 0, os.SEEK_SET)
                self._fd = fd
                self._write(header)
                os.fsync(fd)
        except BaseException:
            self._fd = None
            os.close(fd)
            raise
        self._fd = fd

    def _lock(self, fd: int) -> None:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - non-POSIX
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            raise CaptureError(f"{self.path}: another writer has this capture file open") from e

    def _validate_existing(self, size: int, time_type: Any, repair: bool) -> tuple[int, dict]:
        p = Parser(self.path, True, MAX_BODY, decode=False)
        try:
            with open(self.path, "rb", buffering=0) as f:
                while True:
                    p.parse()
                    if p.error is not None:
                        break
                    data = f.read(16 << 20)
                    if not data:
                        break
                    p.feed(data)
        except OSError as e:
            raise CaptureError(f"{self.path}: cannot read existing capture: {e}") from e
        if p.error is not None:
            raise p.error
        err = p.eof_error()
        if err is not None and (p.metadata is None or not repair):
            if p.metadata is not None:
                err.args = (err.args[0] + "; pass repair=True to cut the torn tail off and append",)
            raise err
        meta = p.metadata or {}
        if time_type is not None and meta.get("time_type", "any") not in (
            "any",
            time_type_name(time_type),
        ):
            raise CaptureError(
                f"{self.path}: capture has time type {meta.get('time_type')!r}, "
                f"not {time_type_name(time_type)!r}; cannot append"
            )
        return p.offset, meta

    def _write(self, data: bytes) -> None:
        if self._fd is None:
            raise CaptureError(f"{self.path}: writer is closed")
        mv = memoryview(data)
        try:
            while mv:
                n = os.write(self._fd, mv)
                mv = mv[n:]
        except OSError as e:
            raise CaptureError(f"{self.path}: write failed: {e}") from e

    def _sync(self) -> None:
        if self._fd is not None:
            try:
                os.fsync(self._fd)
            except OSError as e:
                raise CaptureError(f"{self.path}: fsync failed: {e}") from e

    def _release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            try:
                self._write_out()
            except Exception:  # noqa: BLE001, S110 - best effort during garbage collection
                pass
            os.close(fd)
            self._fd = None

    def __repr__(self) -> str:
        return f"FileWriter({self.path!r}, events={self.events}, closed={self._closed})"


def write_events(
    path: str | os.PathLike, events: Any, allow_pickle: bool = False, **kw: Any
) -> None:
    """Write ``events`` to a new capture file (``mode="w"``) and close it cleanly."""
    kw.setdefault("mode", "w")
    with FileWriter(path, allow_pickle, **kw) as w:
        for ev in events:
            w.push(ev)


def write_records_atomically(
    path: str, time: Any, records: list, metadata: dict, allow_pickle: bool = True
) -> None:
    """Write ``records`` as one message at ``time`` with user ``metadata`` to a new capture file
    at ``path`` -- under a hidden temporary name first, renamed when complete, so that a file
    that exists is whole (the folder is created if need be)."""
    folder, name = os.path.split(path)
    os.makedirs(folder, exist_ok=True)
    temp = os.path.join(folder, f".{name}.tmp")
    write_events(temp, [Messages(time, records)], allow_pickle=allow_pickle, metadata=metadata)
    os.replace(temp, path)


def encode_capture(events: Any, metadata: dict | None = None, allow_pickle: bool = False) -> bytes:
    """A whole capture (header, ``events``, END) as bytes: what :func:`write_events` would write,
    for storage that takes whole objects (:mod:`pytimely.io.storage`).

    >>> events, meta = decode_capture(encode_capture([Messages(3, ["a", "b"])], {"k": 1}), "x")
    >>> events, meta
    ([Messages(3, ['a', 'b'])], {'k': 1})
    """
    header, _meta = encode_header(None, metadata)
    out = bytearray(header)
    for event in events:
        out += encode_event(event, allow_pickle)
    out += encode_end()
    return bytes(out)


def decode_capture(data: bytes, name: str, allow_pickle: bool = False) -> tuple[list, dict]:
    """Every event of a whole capture held in ``data`` and its user metadata; ``name`` names
    it in errors.  Raises :class:`~pytimely.errors.CaptureError` on corruption or truncation
    (a capture without its END frame is truncated)."""
    p = Parser(name, allow_pickle, MAX_BODY)
    p.feed(data)
    events = p.parse()
    err = p.eof_error(NO_END)
    if err is not None:
        raise err
    return events, ((p.metadata or {}).get("user") or {})


def read_events(path: str | os.PathLike, allow_pickle: bool = False) -> list:
    """Every event of a capture file (raises on truncation or corruption)."""
    return read_events_and_metadata(path, allow_pickle)[0]


def read_events_and_metadata(
    path: str | os.PathLike, allow_pickle: bool = False
) -> tuple[list, dict]:
    """Every event of a capture file and the user metadata of its header (``{}`` if none):
    what a file written with ``write_events(..., metadata=...)`` holds."""
    r = FileReader(path, allow_pickle=allow_pickle)
    try:
        out: list = []
        while not r.done:
            out += r.poll()
        return out, (r.metadata or {}).get("user") or {}
    finally:
        r.close()
