"""The pytimely capture format: files and byte streams of events.

A *capture* is a self-describing, versioned, append-only sequence of checksummed frames, one per
event.  The same bytes are written to files (:class:`FileWriter` / :class:`FileReader`) and to
sockets, pipes or any binary stream (:class:`StreamWriter` / :class:`StreamReader`).  Decoding
never unpickles anything unless *both* the writer and the reader opted in with
``allow_pickle=True``.

FORMAT (version 1)
==================

All integers are little-endian.  CRC32 is ``zlib.crc32`` (IEEE 802.3, as in gzip and PNG).

Header (once, at byte 0)::

    offset  size  field
    0       8     magic  b"\\x89PTC\\r\\n\\x1a\\n"   (PNG-style: catches 7-bit and newline mangling)
    8       2     format version (u16) = 1
    10      2     flags (u16) = 0, reserved
    12      4     metadata length M (u32), at most 1 MiB
    16      4     CRC32 of bytes 0..16 followed by the metadata
    20      M     metadata: a UTF-8 JSON object

Metadata keys: ``"format": "pytimely-capture"``, ``"version": 1``, ``"creator"`` (pytimely and
Python versions), ``"created"`` (UTC ISO-8601), ``"time_type"`` (informational: ``"int"``,
``"Product(int, int)"``, ... or ``"any"``; every time in a frame is self-describing anyway),
``"batch_codec": "pytimely-tagged-1"`` and ``"user"`` (the writer's ``metadata=`` dict).  Readers
ignore unknown keys.

Frames (any number, back to back, immediately after the header)::

    offset  size  field
    0       4     body length N (u32)
    4       1     frame type: 1 PROGRESS, 2 MESSAGES, 3 END
    5       1     flags: bit 0 = the body contains pickled data; other bits 0
    6       2     reserved (u16) = 0
    8       4     CRC32 of the body
    12      4     CRC32 of bytes 0..12 of this frame header
    16      N     body

Bodies (codecs of :mod:`pytimely.capture.codec`: *tagged values* for times and records, *batch
codecs* for lists / numpy arrays / Arrow IPC)::

    PROGRESS  u8 mode; mode 0: u32 n, n x (tagged time, tagged delta)
                       mode 1: u32 n, n x i64 time, n x i64 delta   (all times ints)
    MESSAGES  tagged time, then the batch (codec byte + payload) up to the end of the body
    END       empty: the writer's close() -- the stream was finished cleanly

Every byte of a capture is covered by a checksum (no padding), and CRC32 detects every error
confined to 32 consecutive bits, so any single corrupted byte is always detected.

Reading rules
-------------
* Frames are decoded strictly in order.  Anything wrong -- magic, unsupported version, a header
  or body checksum, an unknown frame type or flag, a non-zero reserved field, a length above
  the reader's ``max_frame`` (default 4 GiB - 1, the format's limit), an undecodable body, a
  pickle frame without opt-in -- is a
  :class:`~pytimely.errors.CaptureError` whose message names the file (or stream) and the byte
  offset of the offending header or frame (also available as ``err.path`` / ``err.offset``).
* **Errors come after the good prefix.**  ``poll()`` first returns every event decoded before the
  problem; the *next* ``poll()`` raises.  A raised error is sticky (every later ``poll()``
  raises it again); ``done`` becomes true only once it has been raised, so a replay that drains
  ``poll()`` until ``done`` always sees all complete events *and then* the error.
* **Truncation.**  Only an END frame as the last frame makes a capture complete.  A final
  frame (or header) cut short, and equally a capture that ends *between* two frames without END
  (what a killed writer leaves), is a :class:`~pytimely.errors.TruncatedCapture`, raised in the
  same way after the complete prefix.  ``reader.truncated`` holds the byte offset where the
  partial frame starts (or where the missing END should be) as soon as it is known (``None``
  otherwise).  With ``FileReader(path, tail=True)`` neither is an error: the file is still being
  written, so a partial or missing frame is simply "not yet available" and the reader waits.
* ``done``: a ``FileReader`` with ``tail=False`` is done at end of file if the last frame is END
  (otherwise it raises ``TruncatedCapture`` there); with ``tail=True`` when the last frame it
  has read is END and nothing follows it.  A ``StreamReader`` is done at the END frame; a stream
  that closes without one raises ``TruncatedCapture`` (the writer died).
  ``reader.closed_cleanly`` tells whether the last frame read was END.
* The header's JSON ``"version"`` (when present) must equal the header's binary version and its
  ``"batch_codec"`` (when present) must be one this reader knows; anything else is a
  ``CaptureError`` rather than a guess.

Writing rules
-------------
* ``push()`` encodes the event into a buffer (written out once it exceeds ``buffer_size``);
  ``flush(fsync=False)`` hands the buffer to the OS (visible to tailing readers), ``fsync=True``
  also forces it to stable storage; ``close()`` appends END, flushes and fsyncs.  Leaving a
  ``with`` block by an exception flushes but does *not* write END (the stream did not finish).
* **Modes.**  ``FileWriter(path)`` (``mode="x"``, the default) creates a new file and refuses
  an existing one (:class:`~pytimely.errors.CaptureFileExists`), so re-running a job never
  silently doubles, nor destroys, an earlier capture.  ``mode="w"`` truncates an existing file.
* **Appending.**  ``FileWriter(path, mode="a")`` on an existing non-empty file first validates
  it: the magic and version must match (and ``time_type``, if both give one),
  every frame's checksums must hold, and the file must not end in a partial frame (pass
  ``repair=True`` to cut such a torn tail off, the only time a writer ever shrinks a file).  New
  frames then go after the existing ones; an END frame already there stays where it is (bytes
  are never rewritten), readers simply read on past it.  Note for replay: every captured stream
  retracts its implicit initial capability itself, so appending a *second, independent* capture
  to a file does not make one valid stream -- keep separate captures in separate files (replay
  takes many readers).  A writer holds an exclusive advisory lock (``flock``) on its file; a
  second writer fails fast.
"""

from __future__ import annotations

import datetime
import json
import struct
import sys
import time as _time
import zlib
from array import array
from collections.abc import Iterator
from typing import Any, Self

from ..dataflow.operators.event import Messages, Progress
from ..errors import CaptureError, TruncatedCapture
from . import codec
from .codec import CodecError

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "encode_end",
    "encode_event",
    "encode_header",
    "decode_body",
]

MAGIC = b"\x89PTC\r\n\x1a\n"
FORMAT_VERSION = 1
BATCH_CODEC = "pytimely-tagged-1"

_HEADER = struct.Struct("<8sHHII")  # magic, version, flags, metadata length, crc
HEADER_SIZE = _HEADER.size  # 20
MAX_METADATA = 1 << 20

_FRAME = struct.Struct("<IBBHII")  # length, type, flags, reserved, body crc, header crc
FRAME_HEADER_SIZE = _FRAME.size  # 16
_FRAME_PREFIX = struct.Struct("<IBBHI")  # the 12 bytes covered by the header crc

F_PROGRESS, F_MESSAGES, F_END = 1, 2, 3
_FRAME_NAMES = {F_PROGRESS: "PROGRESS", F_MESSAGES: "MESSAGES", F_END: "END"}
FLAG_PICKLE = 0x01
_KNOWN_FLAGS = FLAG_PICKLE

MAX_BODY = (1 << 32) - 1
DEFAULT_MAX_FRAME = (1 << 32) - 1  # readers accept anything a writer can write

_U32 = struct.Struct("<I")
_LITTLE = sys.byteorder == "little"
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def _error(cls: type, name: str, offset: int, what: str) -> CaptureError:
    e = cls(f"{name}: {what} at byte offset {offset}")
    e.path = name  # type: ignore[attr-defined]
    e.offset = offset  # type: ignore[attr-defined]
    return e


# --------------------------------------------------------------------------------------------
# Encoding


def _creator() -> str:
    try:
        from importlib.metadata import version

        v = version("pytimely")
    except Exception:  # noqa: BLE001 - not installed, or broken metadata
        v = "dev"
    return f"pytimely {v} (Python {sys.version.split()[0]})"


def time_type_name(tt: Any) -> str:
    if tt is None:
        return "any"
    if isinstance(tt, str):
        return tt
    name = getattr(tt, "__name__", None)
    return name if isinstance(name, str) else repr(tt)


def encode_header(time_type: Any = None, metadata: dict | None = None) -> tuple[bytes, dict]:
    """The header bytes of a new capture and the metadata dict they carry."""
    meta = {
        "format": "pytimely-capture",
        "version": FORMAT_VERSION,
        "creator": _creator(),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "time_type": time_type_name(time_type),
        "batch_codec": BATCH_CODEC,
        "user": dict(metadata or {}),
    }
    try:
        raw = json.dumps(meta, sort_keys=True, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise CaptureError(f"capture metadata must be JSON-serializable: {e}") from e
    if len(raw) > MAX_METADATA:
        raise CaptureError("capture metadata larger than 1 MiB")
    prefix = struct.pack("<8sHHI", MAGIC, FORMAT_VERSION, 0, len(raw))
    crc = zlib.crc32(raw, zlib.crc32(prefix))
    return prefix + _U32.pack(crc) + raw, meta


def _frame(ftype: int, flags: int, body: Any) -> bytes:
    n = len(body)
    if n > MAX_BODY:
        raise CaptureError(f"event too large for one frame ({n} bytes; the limit is 4 GiB)")
    prefix = _FRAME_PREFIX.pack(n, ftype, flags, 0, zlib.crc32(body))
    return prefix + _U32.pack(zlib.crc32(prefix)) + bytes(body)


def encode_end() -> bytes:
    """The END frame that closes a capture cleanly."""
    return _frame(F_END, 0, b"")


def encode_event(event: Any, allow_pickle: bool = False) -> bytes:
    """One complete frame (header + body) for ``event``."""
    body = bytearray()
    t = type(event)
    try:
        if t is Messages:
            used = codec.encode_value(event.time, body, allow_pickle)
            used = codec.encode_batch(event.batch, body, allow_pickle) or used
            ftype = F_MESSAGES
        elif t is Progress:
            used = _encode_progress(event.changes, body, allow_pickle)
            ftype = F_PROGRESS
        else:
            raise CaptureError(
                f"can only capture Progress or Messages events, not {t.__module__}.{t.__qualname__}"
            )
    except CodecError as e:
        raise CaptureError(f"cannot encode {t.__name__} event: {e}") from None
    return _frame(ftype, FLAG_PICKLE if used else 0, body)


def _encode_progress(changes: tuple, out: bytearray, allow_pickle: bool) -> bool:
    n = len(changes)
    if all(
        type(t) is int and _I64_MIN <= t <= _I64_MAX and _I64_MIN <= d <= _I64_MAX
        for t, d in changes
    ):
        times = array("q", [t for t, _ in changes])
        deltas = array("q", [d for _, d in changes])
        if not _LITTLE:
            times.byteswap()
            deltas.byteswap()
        out.append(1)
        out += _U32.pack(n)
        out += times.tobytes()
        out += deltas.tobytes()
        return False
    out.append(0)
    out += _U32.pack(n)
    used = False
    for t, d in changes:
        used = codec.encode_value(t, out, allow_pickle) or used
        codec.encode_value(int(d), out, False)
    return used


def _decode_progress(c: Any) -> Progress:
    mode = c.u8()
    if mode == 1:
        n = c.count(16)
        times = array("q")
        times.frombytes(c.take(8 * n))
        deltas = array("q")
        deltas.frombytes(c.take(8 * n))
        if not _LITTLE:
            times.byteswap()
            deltas.byteswap()
        changes = tuple(zip(times.tolist(), deltas.tolist()))
    elif mode == 0:
        n = c.count(2)
        changes_l = []
        for _ in range(n):
            t = c.value()
            d = c.value()
            if type(d) is not int:
                raise CodecError("progress delta is not an integer")
            changes_l.append((t, d))
        changes = tuple(changes_l)
    else:
        raise CodecError(f"unknown progress encoding {mode}")
    if c.pos != c.end:
        raise CodecError(f"{c.end - c.pos} unexpected bytes after the progress changes")
    ev = Progress.__new__(Progress)
    object.__setattr__(ev, "changes", changes)
    return ev


def _decode_messages(c: Any) -> Messages:
    t = c.value()
    return Messages(t, codec._decode_batch(c))


def decode_body(ftype: int, body: Any, allow_pickle: bool = False) -> Any:
    """The event of a PROGRESS or MESSAGES frame body (raises ``CodecError``)."""
    c = codec._Cursor(body, 0, None, allow_pickle)
    return codec._guard(_decode_messages if ftype == F_MESSAGES else _decode_progress, c)


# --------------------------------------------------------------------------------------------
# Incremental parsing (shared by file and stream readers and by the append scan)


def _header_metadata(raw: bytes, version: int) -> tuple[dict, str | None]:
    """The JSON metadata ``raw`` of a header in format ``version``, and what is wrong with it
    (None when nothing is): not JSON, not an object, another version, or a batch codec this
    pytimely does not read."""
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        return {}, f"header metadata is not valid JSON ({e})"
    if not isinstance(meta, dict):
        return {}, "header metadata is not a JSON object"
    if meta.get("version", version) != version:
        return meta, (
            f"header metadata version {meta.get('version')!r} differs from the format "
            f"version {version} (corrupt or foreign header)"
        )
    if meta.get("batch_codec", BATCH_CODEC) != BATCH_CODEC:
        codec = meta.get("batch_codec")
        return meta, f"unknown batch codec {codec!r} (this pytimely reads {BATCH_CODEC!r})"
    return meta, None


class Parser:
    """Turns a growing byte buffer into events; never reads past what it was fed."""

    def __init__(self, name: str, allow_pickle: bool, max_frame: int, decode: bool = True):
        self.name = name
        self.allow_pickle = allow_pickle
        self.max_frame = max_frame
        self.decode = decode
        self.buf = bytearray()
        self.start = 0  # index in buf of the first unparsed byte
        self.base = 0  # absolute offset of buf[0]
        self.metadata: dict | None = None
        self.version: int | None = None
        self.ended = False  # the last frame parsed was END
        self.frames = 0
        self.error: CaptureError | None = None

    @property
    def offset(self) -> int:
        """Absolute offset of the first byte not yet parsed."""
        return self.base + self.start

    @property
    def pending(self) -> int:
        """Bytes fed but not yet part of a complete frame."""
        return len(self.buf) - self.start

    def feed(self, data: bytes) -> None:
        if self.start and (self.start > (1 << 20) or self.start == len(self.buf)):
            self.buf = self.buf[self.start :]  # a copy: never resizes a buffer still viewed
            self.base += self.start
            self.start = 0
        try:
            self.buf += data
        except BufferError:  # pragma: no cover - a decoded object still views the buffer
            self.buf = self.buf + data

    def _fail(self, offset: int, what: str) -> None:
        self.error = _error(CaptureError, self.name, offset, what)

    def _parse_header(self) -> bool:
        buf, s = self.buf, self.start
        have = len(buf) - s
        k = min(have, len(MAGIC))
        if buf[s : s + k] != MAGIC[:k]:
            self._fail(self.offset, "not a pytimely capture (bad magic bytes)")
            return False
        if have < HEADER_SIZE:
            return False
        _, version, flags, mlen, crc = _HEADER.unpack_from(buf, s)
        if version != FORMAT_VERSION:
            self._fail(
                self.offset + 8,
                f"unsupported capture format version {version} "
                f"(this pytimely reads version {FORMAT_VERSION})",
            )
            return False
        if mlen > MAX_METADATA:
            self._fail(
                self.offset + 12, f"header metadata length {mlen} is too large (corrupt header)"
            )
            return False
        if have < HEADER_SIZE + mlen:
            return False
        raw = bytes(buf[s + HEADER_SIZE : s + HEADER_SIZE + mlen])
        if zlib.crc32(raw, zlib.crc32(buf[s : s + 16])) != crc:
            self._fail(self.offset, "header checksum mismatch (corrupt header)")
            return False
        if flags != 0:
            self._fail(self.offset + 10, f"unknown header flags 0x{flags:04x}")
            return False
        meta, problem = _header_metadata(raw, version)
        if problem is not None:
            self._fail(self.offset + HEADER_SIZE, problem)
            return False
        self.metadata = meta
        self.version = version
        self.start = s + HEADER_SIZE + mlen
        return True

    def parse(self, limit: int = -1) -> list:
        """Decode complete frames (at most ``limit`` events; -1 = all).  Sets ``self.error``."""
        out: list = []
        if self.error is not None:
            return out
        if self.metadata is None and not self._parse_header():
            return out
        buf = self.buf
        while limit != 0:
            s = self.start
            if len(buf) - s < FRAME_HEADER_SIZE:
                break
            n, ftype, flags, reserved, bcrc, hcrc = _FRAME.unpack_from(buf, s)
            off = self.base + s
            if zlib.crc32(buf[s : s + 12]) != hcrc:
                self._fail(off, "frame header checksum mismatch (corrupt frame)")
                break
            if ftype not in _FRAME_NAMES:
                self._fail(off, f"unknown frame type {ftype}")
                break
            if flags & ~_KNOWN_FLAGS or reserved:
                self._fail(off, f"unknown frame flags 0x{flags:02x}/0x{reserved:04x}")
                break
            if n > self.max_frame:
                self._fail(off, f"frame length {n} exceeds the limit max_frame={self.max_frame}")
                break
            if ftype == F_END and (n or flags):
                self._fail(off, "END frame with a body")
                break
            if len(buf) - s - FRAME_HEADER_SIZE < n:
                break
            b0 = s + FRAME_HEADER_SIZE
            body = memoryview(buf)[b0 : b0 + n]
            try:
                if zlib.crc32(body) != bcrc:
                    self._fail(
                        off, f"{_FRAME_NAMES[ftype]} frame body checksum mismatch (corrupt frame)"
                    )
                    break
                if flags & FLAG_PICKLE and self.decode and not self.allow_pickle:
                    self._fail(
                        off,
                        f"{_FRAME_NAMES[ftype]} frame contains pickled data; pass "
                        "allow_pickle=True to the reader only if you trust where this capture "
                        "came from",
                    )
                    break
                if ftype == F_END:
                    ev = None
                elif not self.decode:
                    ev = True
                else:
                    try:
                        ev = decode_body(ftype, body, self.allow_pickle)
                    except CodecError as e:
                        self._fail(off, f"undecodable {_FRAME_NAMES[ftype]} frame: {e}")
                        break
            finally:
                body.release()
            self.start = b0 + n
            self.frames += 1
            if ev is None:
                self.ended = True
            else:
                self.ended = False
                out.append(ev)
                limit -= 1
        return out

    def eof_error(self, what_if_clean: str | None = None) -> CaptureError | None:
        """The error to report when no more bytes will come (None if the end is clean)."""
        if self.error is not None:
            return self.error
        if self.metadata is None:
            have = self.pending
            if have == 0:
                return _error(TruncatedCapture, self.name, self.offset, "empty capture (no header)")
            return _error(
                TruncatedCapture,
                self.name,
                self.offset,
                f"truncated header ({have} bytes present)",
            )
        if self.pending:
            s = self.start
            if self.pending >= FRAME_HEADER_SIZE:
                n = _FRAME.unpack_from(self.buf, s)[0]
                what = (
                    f"truncated final frame ({self.pending} of {FRAME_HEADER_SIZE + n} bytes "
                    "present); the complete frames before it are intact"
                )
            else:
                what = (
                    f"truncated final frame ({self.pending} bytes of its "
                    f"{FRAME_HEADER_SIZE}-byte header present); the complete frames before it "
                    "are intact"
                )
            return _error(TruncatedCapture, self.name, self.offset, what)
        if what_if_clean is not None and not self.ended:
            return _error(TruncatedCapture, self.name, self.offset, what_if_clean)
        return None


NO_END = (
    "capture ends without an END frame (the writer stopped before close(), or the file was cut "
    "between two frames); the complete frames before this offset are intact"
)


class ReaderBase:
    """Deferred-error bookkeeping shared by the file and stream readers."""

    _parser: Parser

    def _init_state(self) -> None:
        self._pending_error: CaptureError | None = None
        self._raised = False
        self._done = False

    @property
    def done(self) -> bool:
        """True once no more events will come (and any error has been raised)."""
        return self._done

    @property
    def error(self) -> CaptureError | None:
        """The error met so far (raised by the poll after the good prefix), or None."""
        return self._pending_error

    @property
    def truncated(self) -> int | None:
        """Byte offset where a truncated final frame (or header) starts, once known."""
        e = self._pending_error
        return e.offset if isinstance(e, TruncatedCapture) else None  # type: ignore[attr-defined]

    @property
    def metadata(self) -> dict | None:
        """The header's metadata dict (None until the header has been read)."""
        return self._parser.metadata

    @property
    def offset(self) -> int:
        """Bytes of the capture consumed so far (header and complete frames)."""
        return self._parser.offset

    @property
    def closed_cleanly(self) -> bool:
        """Whether the last frame read so far is END."""
        return self._parser.ended

    def _settled(self) -> list | None:
        """What ``poll`` returns before reading anything: ``[]`` once done, the deferred error
        (raised by ``_finish``) once every event before it was returned, else None (read on).
        Raises an error already raised before."""
        self._check_raised()
        if self._done:
            return []
        if self._pending_error is not None:  # every event before it was already returned
            return self._finish([])
        return None

    def _finish(self, events: list) -> list:
        if self._pending_error is not None and not events:
            self._raised = True
            self._done = True
            raise self._pending_error
        return events

    def _check_raised(self) -> None:
        if self._raised:
            raise self._pending_error  # type: ignore[misc]

    def __iter__(self) -> Iterator:
        """All events until ``done`` (sleeping briefly while a tailing reader waits)."""
        while not self._done:
            evs = self.poll()  # type: ignore[attr-defined]
            if evs:
                yield from evs
            elif not self._done:
                _time.sleep(0.005)


class BufferedWriter:
    """Shared push/flush logic; subclasses provide ``_write(bytes)`` and ``_sync()``."""

    name: str

    def _init_writer(self, allow_pickle: bool, buffer_size: int) -> None:
        self.allow_pickle = allow_pickle
        self._buf = bytearray()
        self._buffer_size = buffer_size
        self._closed = False
        self.events = 0

    def push(self, event: Progress | Messages) -> None:
        """Append one event (buffered; see ``flush``)."""
        if self._closed:
            raise CaptureError(f"{self.name}: push() after close()")
        self._buf += encode_event(event, self.allow_pickle)
        self.events += 1
        if len(self._buf) >= self._buffer_size:
            self._write_out()

    def _write_out(self) -> None:
        if self._buf:
            data = bytes(self._buf)
            self._buf.clear()
            self._write(data)

    def flush(self, fsync: bool = False) -> None:
        """Hand buffered frames to the OS; with ``fsync`` force them to stable storage."""
        if self._closed:
            return
        self._write_out()
        if fsync:
            self._sync()

    def close(self) -> None:
        """Append the END frame, flush, fsync, release (idempotent)."""
        if self._closed:
            return
        try:
            self._buf += encode_end()
            self.flush(fsync=True)
        finally:
            self._closed = True
            self._release()

    def _abort(self) -> None:
        """Flush what was pushed, without END, and release."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            self._release()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self._abort()

    @property
    def closed(self) -> bool:
        return self._closed
