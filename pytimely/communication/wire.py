"""The wire format between workers: frames, and how payloads become bytes.

Once two workers have authenticated each other (:mod:`.handshake`), their TCP connection carries
a sequence of *frames*.  Every frame starts with a fixed 32-byte little-endian header::

    offset size  field
    0      1     kind            DATA (1), GOODBYE (2), ABORT (3), CONTROL (4), HEARTBEAT (5),
                                 ACK (6)
    1      1     version         WIRE_VERSION
    2      2     magic           0x5954 ("TY"): catches a stream that lost its framing
    4      4     source          index of the sending worker
    8      8     channel         DATA: channel id;  ABORT: index of the worker that failed first;
                                 ACK: bytes consumed from the receiver so far
    16     8     payload length  bytes of the payload that follows
    24     4     buffer count    number of out-of-band buffers (DATA only)
    28     4     reserved        zero

followed by ``buffer count`` 8-byte buffer lengths, the payload, and the buffers, in that order.

* DATA: the payload is either the records codec (:mod:`.codec`: lists and tuples of ``str``,
  ``int``, ``float``, ``bytes``, ``bool`` and ``None``, the common shape of a batch, written
  without pickle's per-object memo) or a pickle (protocol 5, everything else); the payload's
  first byte says which (``0xC5`` codec, ``0x80`` pickle).  Large contiguous buffers a pickled
  object exposes — numpy arrays, Arrow buffers — travel *out of band*: pickle hands them to us
  instead of copying them into its stream, the sender passes them to ``sendmsg`` as they are,
  and the receiver reads each straight into its own ``bytearray`` that becomes the array's
  memory.  A multi-megabyte array therefore costs one copy from the socket, not three.  Small
  buffers (under ``OUT_OF_BAND_MIN`` bytes) stay in band, where they are cheaper.
* GOODBYE: the sender is shutting down in order; it sends nothing after this, and closing the
  connection afterwards is not a failure.  The payload, if any, is a pickle: the sender's
  farewell (its final message counts and what its worker built, for termination detection).
* CONTROL: a pickled message of the control plane (termination detection).  Control frames are
  deliberately *not* data: they are not counted as messages, so asking whether the computation
  is quiescent does not disturb the counts that answer the question.
* HEARTBEAT: no payload; sent periodically by a background thread so that a silent peer can be
  told apart from an idle one.
* ACK: no payload; flow control's acknowledgement (:mod:`.flow`): the channel field is the
  running total of DATA payload bytes the sender has consumed from the receiver.  Not data:
  not counted, never handed to the worker.
* ABORT: the sender is shutting down because a worker failed.  The payload is the failure's
  message (UTF-8), the channel field names the worker that failed first, so that a failure
  cascading through the mesh keeps naming its root cause.

The header carries no target: a broadcast frame is built once and sent unchanged to every peer.
Frames are only ever decoded from authenticated peers; the header checks below exist to turn a
bug (or a corrupted stream) into a clear :class:`~pytimely.errors.CommunicationError` naming the
peer, not to defend against a hostile peer that knows the secret.

Alternatives not taken: a self-describing format (msgpack, Arrow IPC) for every payload would
not round-trip arbitrary Python objects; pickle without out-of-band buffers copies large arrays
twice more; one frame per flush holding many messages would save headers but forces the receiver
to split batches before it can hand anything to the worker.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Callable
from typing import Any

from ..errors import SerializationError
from . import codec

__all__ = [
    "HEADER",
    "KIND_ABORT",
    "KIND_ACK",
    "KIND_CONTROL",
    "KIND_DATA",
    "KIND_GOODBYE",
    "KIND_HEARTBEAT",
    "FrameError",
    "FrameReader",
    "StreamEnded",
    "deserialize",
    "encode_abort",
    "encode_ack",
    "encode_control",
    "encode_data",
    "encode_goodbye",
    "encode_heartbeat",
    "data_payload_bytes",
    "serialize",
]

HEADER = struct.Struct("<BBHIQQI4x")
HEADER_SIZE = HEADER.size  # 32
WIRE_VERSION = 6  # 2: CONTROL and HEARTBEAT frames, GOODBYE with a farewell; 3: ACK frames;
# 4: DATA payloads in the records codec; 5: the codec's short-tuple tag; 6: the codec's dicts
MAGIC = 0x5954

KIND_DATA = 1
KIND_GOODBYE = 2
KIND_ABORT = 3
KIND_CONTROL = 4
KIND_HEARTBEAT = 5
KIND_ACK = 6
_KINDS = (KIND_DATA, KIND_GOODBYE, KIND_ABORT, KIND_CONTROL, KIND_HEARTBEAT, KIND_ACK)

#: Buffers smaller than this are pickled in band (a separate buffer costs a length, an iovec and
#: an allocation on the receiver, which only pays off for large buffers).
OUT_OF_BAND_MIN = 1 << 15
_CODEC_TAG = bytes([codec.MAGIC])
#: Sanity limits that catch a stream that lost its framing before we try to allocate for it.
MAX_BUFFERS = 1 << 16
MAX_FRAME_BYTES = 1 << 36
#: Abort messages (usually a traceback) are cut to this many bytes.
MAX_ABORT_BYTES = 1 << 16
#: Payloads up to this size are joined to their header (one iovec, one small copy).
_JOIN_BELOW = 1 << 12
#: Reads larger than this bypass the reader's buffer and go straight into their own bytearray.
_DIRECT_READ = 1 << 16


class FrameError(Exception):
    """A frame violated the wire format; the receiver turns it into a CommunicationError that
    names the peer."""


class StreamEnded(FrameError):
    """The stream ended in the middle of a frame: the sender died while writing it."""


# --- payloads ---------------------------------------------------------------------------------


def serialize(payload: Any) -> tuple[bytes, list[memoryview]]:
    """``payload`` as bytes: in the records codec if it is a list or tuple of the shapes the
    codec carries (:mod:`.codec`, compiled extension only), else pickled (protocol 5) with
    large contiguous buffers kept out of band.

    Raises :class:`~pytimely.errors.SerializationError` if ``payload`` cannot be pickled.
    The returned memoryviews alias the payload's memory (no copy): the caller must not mutate
    those arrays until the frame has been flushed.
    """
    if type(payload) is tuple or type(payload) is list:
        data = codec.encode(payload)
        if data is not None:
            return data, []
    buffers: list[memoryview] = []

    def keep_out_of_band(buffer: pickle.PickleBuffer) -> bool:
        try:
            raw = buffer.raw()
        except BufferError:  # not contiguous: let pickle copy it in band
            return True
        if raw.nbytes < OUT_OF_BAND_MIN:
            return True
        buffers.append(raw)
        return False

    try:
        data = pickle.dumps(payload, protocol=5, buffer_callback=keep_out_of_band)
    except Exception as e:  # pickle raises TypeError, PicklingError, AttributeError, ...
        raise SerializationError(f"cannot serialize a {type(payload).__name__}: {e}") from e
    return data, buffers


def deserialize(data: bytes | bytearray, buffers: list[bytearray]) -> Any:
    """Inverse of :func:`serialize` (the buffers become the arrays' memory, writable)."""
    if data[:1] == _CODEC_TAG:
        return codec.decode(data)
    if buffers:
        return pickle.loads(data, buffers=buffers)
    return pickle.loads(data)


# --- encoding ---------------------------------------------------------------------------------


def encode_data(
    channel: int, source: int, data: bytes, buffers: list[memoryview]
) -> list[bytes | memoryview]:
    """The chunks of one DATA frame, ready for ``sendmsg`` (large pieces are not copied)."""
    header = HEADER.pack(KIND_DATA, WIRE_VERSION, MAGIC, source, channel, len(data), len(buffers))
    if buffers:
        header += struct.pack(f"<{len(buffers)}Q", *[b.nbytes for b in buffers])
        return [header, data, *buffers]
    if len(data) < _JOIN_BELOW:
        return [header + data]
    return [header, data]


def encode_goodbye(source: int, farewell: object = None) -> bytes:
    """A GOODBYE frame: worker ``source`` shuts down in order.

    ``farewell``, if given, travels pickled (see :meth:`Allocator.set_farewell`).
    """
    body = b"" if farewell is None else pickle.dumps(farewell, protocol=5)
    return HEADER.pack(KIND_GOODBYE, WIRE_VERSION, MAGIC, source, 0, len(body), 0) + body


def encode_control(source: int, message: object) -> bytes:
    """A CONTROL frame from worker ``source`` carrying ``message`` (pickled)."""
    body = pickle.dumps(message, protocol=5)
    return HEADER.pack(KIND_CONTROL, WIRE_VERSION, MAGIC, source, 0, len(body), 0) + body


def encode_heartbeat(source: int) -> bytes:
    """A HEARTBEAT frame from worker ``source`` (no payload)."""
    return HEADER.pack(KIND_HEARTBEAT, WIRE_VERSION, MAGIC, source, 0, 0, 0)


def encode_ack(source: int, consumed_total: int) -> bytes:
    """An ACK frame: ``source`` has consumed ``consumed_total`` payload bytes from us."""
    return HEADER.pack(KIND_ACK, WIRE_VERSION, MAGIC, source, consumed_total, 0, 0)


def data_payload_bytes(data: bytes | bytearray, buffers: list[Any]) -> int:
    """What one DATA frame's payload weighs for flow control: the pickle plus its out-of-band
    buffers (``memoryview``s when sending, ``bytearray``s when received), headers excluded."""
    return len(data) + sum(len(b) if isinstance(b, bytearray) else b.nbytes for b in buffers)


def encode_abort(source: int, origin: int, message: str) -> bytes:
    """An ABORT frame: worker ``origin`` failed first, for reason ``message``.

    The message is UTF-8, truncated to :data:`MAX_ABORT_BYTES`.
    """
    body = message.encode("utf-8", "replace")[:MAX_ABORT_BYTES]
    return HEADER.pack(KIND_ABORT, WIRE_VERSION, MAGIC, source, origin, len(body), 0) + body


# --- decoding ---------------------------------------------------------------------------------


class FrameReader:
    """Reads frames from a byte stream through one reusable buffer.

    ``recv_into`` is the stream (a socket's ``recv_into``; it returns 0 at end of stream).
    ``before_block`` is called before every ``recv_into`` — i.e. before the reader might block —
    so that its owner can hand over the frames it has collected so far: the receiver batches the
    frames of one burst and still never sits on a frame while waiting for the next.

    Small reads are served from the buffer (one ``recv_into`` may bring many frames); a read
    larger than ``_DIRECT_READ`` gets its own ``bytearray`` and the socket writes into it
    directly.
    """

    __slots__ = ("_before_block", "_buf", "_end", "_recv_into", "_start", "_view", "bytes_read")

    def __init__(
        self,
        recv_into: Callable[[memoryview], int],
        before_block: Callable[[], None] | None = None,
        size: int = 1 << 18,
    ) -> None:
        self._recv_into = recv_into
        self._before_block = before_block
        self._buf = bytearray(size)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        self.bytes_read = 0

    def _recv(self, into: memoryview) -> int:
        if self._before_block is not None:
            self._before_block()
        got = self._recv_into(into)
        self.bytes_read += got
        return got

    def _fill(self, n: int) -> bool:
        """Make at least ``n`` bytes available (``n`` <= buffer size); False at end of stream."""
        available = self._end - self._start
        if available >= n:
            return True
        if self._start + n > len(self._buf):  # not enough room behind: move the tail forward
            self._view[:available] = self._view[self._start : self._end]
            self._start, self._end = 0, available
        while self._end - self._start < n:
            got = self._recv(self._view[self._end :])
            if not got:
                return False
            self._end += got
        return True

    def _read(self, n: int, what: str) -> bytes | bytearray:
        if n <= _DIRECT_READ:
            if not self._fill(n):
                raise StreamEnded(f"connection closed in the middle of a frame ({what})")
            start = self._start
            self._start = start + n
            return bytes(self._view[start : start + n])
        return self._read_direct(n, what)

    def _read_direct(self, n: int, what: str) -> bytearray:
        out = bytearray(n)
        view = memoryview(out)
        have = min(self._end - self._start, n)
        view[:have] = self._view[self._start : self._start + have]
        self._start += have
        while have < n:
            got = self._recv(view[have:])
            if not got:
                raise StreamEnded(f"connection closed in the middle of a frame ({what})")
            have += got
        return out

    def read_frame(self) -> tuple[int, int, int, bytes | bytearray, list[bytearray]] | None:
        """The next frame as ``(kind, source, channel, payload, buffers)``, or None if the stream
        ended cleanly between frames.  Raises :class:`FrameError` on a malformed frame."""
        if self._start == self._end:
            self._start = self._end = 0
        if not self._fill(HEADER_SIZE):
            if self._start == self._end:
                return None
            raise StreamEnded("connection closed in the middle of a frame header")
        kind, version, magic, source, channel, length, count = HEADER.unpack_from(
            self._buf, self._start
        )
        self._start += HEADER_SIZE
        if magic != MAGIC or version != WIRE_VERSION:
            raise FrameError(
                f"bad frame header (magic {magic:#06x}, version {version}): the stream lost its "
                "framing or the peer runs an incompatible pytimely"
            )
        if kind not in _KINDS:
            raise FrameError(f"unknown frame kind {kind}")
        if count > MAX_BUFFERS or length > MAX_FRAME_BYTES:
            raise FrameError(f"implausible frame ({length} payload bytes, {count} buffers)")
        if count:
            if kind != KIND_DATA:
                raise FrameError(f"frame of kind {kind} with {count} out-of-band buffers")
            lengths = struct.unpack(f"<{count}Q", self._read(8 * count, "buffer lengths"))
            if sum(lengths) + length > MAX_FRAME_BYTES:
                raise FrameError(f"implausible frame ({sum(lengths)} bytes of buffers)")
            payload = self._read(length, "payload")
            buffers = [self._read_direct(n, "buffer") for n in lengths]
            return kind, source, channel, payload, buffers
        payload = self._read(length, "payload") if length else b""
        return kind, source, channel, payload, []
