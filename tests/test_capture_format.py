"""Capture event model and storage formats: in-memory links, the binary file/stream format,
Parquet, and the inspector.  (The capture_into / replay_into operators are tested elsewhere.)"""

from __future__ import annotations

import io
import json
import os
import random
import socket
import struct
import threading
import time
import zlib

import numpy as np
import pyarrow as pa  # noqa: E402  (a dependency of pytimely)
import pytest

from pytimely.capture import (
    Event,
    EventLink,
    EventReader,
    EventWriter,
    FileReader,
    FileWriter,
    Messages,
    Progress,
    StreamReader,
    StreamWriter,
    codec,
    extract,
    inspect_file,
    read_events,
    read_header,
    write_events,
)
from pytimely.capture.frames import FRAME_HEADER_SIZE, encode_event
from pytimely.errors import CaptureError, CaptureFileExists, TimelyError, TruncatedCapture
from pytimely.order import Product


class Custom:
    def __init__(self, x):
        self.x = x

    def __eq__(self, other):
        return type(other) is Custom and other.x == self.x

    def __repr__(self):
        return f"Custom({self.x})"


def int_events():
    return [
        Progress([(0, -1), (1, 1)]),
        Messages(0, [1, 2, 3]),
        Messages(0, [-5, 2**63 - 1, -(2**63)]),
        Progress([(1, -1), (2, 1)]),
        Messages(2, []),
        Progress([(2, -1)]),
    ]


def product_events():
    P = Product
    return [
        Progress([(P(0, 0), -1), (P(0, 1), 1)]),
        Messages(P(0, 1), ["a", "bb", "ccc"]),
        Messages(P(P(1, 2), 3), [(1, "x"), (2, None)]),
        Progress([(P(0, 1), -1), (P(5, 0), 2)]),
        Progress([(P(P(1, 2), 3), -1)]),
    ]


def mixed_events():
    return [
        Messages(
            0,
            [
                1,
                2.5,
                "s",
                b"b",
                True,
                False,
                None,
                (1, ("n", None)),
                [1, [2]],
                {"k": 1, 2: (3,)},
                2**100,
                -(2**90),
                "\u00e9\u4e2d\U0001f600",
                "\udc80",
                np.int32(7),
                np.float64(1.5),
                np.bool_(True),
                1e308,
                -0.0,
            ],
        ),
        Messages(1, [1.0, 2.0]),
        Messages(1, ["only", "strings", ""]),
        Messages(1, [(1, 2), (3, 4)]),
        Messages(1, [True, 1]),  # bool and int must not be confused
        Messages(2**80, [Product(1, 2)]),
    ]


def numpy_events():
    st = np.array(
        [(1, 2.5, b"ab"), (3, 4.5, b"c")], dtype=[("a", "<i4"), ("b", "<f8"), ("c", "S2")]
    )
    return [
        Messages(0, np.arange(10, dtype=np.int64)),
        Messages(0, np.arange(12, dtype=np.float32).reshape(3, 4)),
        Messages(1, np.asfortranarray(np.arange(6, dtype=">i2").reshape(2, 3))),
        Messages(1, np.array([], dtype=np.uint8)),
        Messages(2, np.array(3.5)),
        Messages(2, st),
        Messages(3, np.array(["2024-01-01", "NaT"], dtype="datetime64[ns]")),
        Messages(3, np.array([True, False])),
        Messages(3, np.array(["ab", "c"], dtype="U3")),
    ]


def arrow_events():
    s = pa.schema([("x", pa.int64()), ("y", pa.string())])
    return [
        Messages(0, pa.RecordBatch.from_pydict({"x": [1, 2], "y": ["a", None]}, schema=s)),
        Messages(0, pa.RecordBatch.from_pydict({"x": [], "y": []}, schema=s)),
        Messages(1, pa.table({"x": [1, 2, 3], "z": [[1], [], None]})),
        Progress([(0, -1)]),
    ]


ALL = {
    "int": int_events,
    "product": product_events,
    "mixed": mixed_events,
    "numpy": numpy_events,
    "arrow": arrow_events,
}


def drain(reader):
    """Poll until done; return (events, error)."""
    out = []
    for _ in range(100000):
        if reader.done:
            return out, None
        try:
            out += reader.poll()
        except CaptureError as e:
            return out, e
    raise AssertionError("reader never finished")


# --------------------------------------------------------------------------------------------
# The event model


def test_event_model():
    p = Progress([(0, -1), (Product(1, 2), 3)])
    assert p.changes == ((0, -1), (Product(1, 2), 3))
    with pytest.raises(AttributeError):
        p.changes = ()
    assert p == Event.Progress(iter([(0, -1), (Product(1, 2), 3)]))
    assert hash(p) == hash(Progress([(0, -1), (Product(1, 2), 3)]))
    m = Event.Messages(3, [1, 2])
    assert isinstance(p, Event) and isinstance(m, Event) and not isinstance(3, Event)
    assert m == Messages(3, [1, 2]) and m != Messages(3, [2, 1]) and m != p
    assert Messages(0, np.arange(3)) == Messages(0, np.arange(3))
    assert Messages(0, np.arange(3)) != Messages(0, np.arange(3, dtype=np.int32))
    assert Messages(0, np.arange(3)) != Messages(0, [0, 1, 2])
    with pytest.raises(TypeError):
        Event()
    match m:
        case Event.Messages(t, batch):
            assert (t, batch) == (3, [1, 2])
    match p:
        case Event.Progress(changes):
            assert len(changes) == 2
    assert extract([m, p, Messages(1, [5, 4]), Messages(3, [0]), Messages(2, [])]) == [
        (1, [4, 5]),
        (3, [0, 1, 2]),
    ]


def test_protocols(tmp_path):
    link = EventLink()
    assert isinstance(link.writer(), EventWriter) and isinstance(link.reader(), EventReader)
    with FileWriter(tmp_path / "c.cap") as w:
        assert isinstance(w, EventWriter)
    assert isinstance(FileReader(tmp_path / "c.cap"), EventReader)


# --------------------------------------------------------------------------------------------
# In-memory links


def test_link_roundtrip_and_done():
    w, r = EventLink.pair()
    assert r.poll() == [] and not r.done
    evs = int_events()
    for e in evs[:3]:
        w.push(e)
    assert r.poll() == evs[:3]
    for e in evs[3:]:
        w.push(e)
    assert r.poll(max_events=2) == evs[3:5]
    w.close()
    assert r.poll() == evs[5:] and r.done and r.poll() == []
    with pytest.raises(CaptureError):
        w.push(evs[0])


def test_link_million_events():
    link = EventLink()
    w, r = link.writer(), link.reader()
    ev = Messages(0, [1])
    for _ in range(1_000_000):
        w.push(ev)
    w.close()
    got = r.poll()
    assert len(got) == 1_000_000 and r.done
    # dropping a long unread chain must not recurse
    link2 = EventLink()
    w2, r2 = link2.writer(), link2.reader()
    for _ in range(1_000_000):
        w2.push(ev)
    del link2, w2, r2


def test_link_readers():
    link = EventLink(readers=2)
    w = link.writer()
    w.push(Messages(0, [1]))
    r1, r2 = link.reader(), link.reader()
    with pytest.raises(CaptureError):
        link.reader()
    with pytest.raises(CaptureError):
        link.writer()
    w.close()
    assert r1.poll() == r2.poll() == [Messages(0, [1])]
    keep = EventLink(readers=None)
    kw = keep.writer()
    kw.push(Progress([(0, -1)]))
    assert [keep.reader().poll() for _ in range(3)] == [[Progress([(0, -1)])]] * 3


def test_link_threads():
    w, r = EventLink.pair()
    evs = [Messages(i, [i]) for i in range(20000)]

    def produce():
        for e in evs:
            w.push(e)
        w.close()

    t = threading.Thread(target=produce)
    t.start()
    got, err = drain(r)
    t.join()
    assert err is None and got == evs


# --------------------------------------------------------------------------------------------
# Binary file format: round trips


@pytest.mark.parametrize("kind", sorted(ALL))
def test_file_roundtrip(tmp_path, kind):
    path = tmp_path / "c.cap"
    evs = ALL[kind]()
    write_events(path, evs, time_type="int", metadata={"job": kind})
    back = read_events(path)
    assert back == evs
    for a, b in zip(evs, back):
        assert type(a.batch if type(a) is Messages else a) is type(
            b.batch if type(b) is Messages else b
        )
        if type(a) is Messages:
            assert type(a.time) is type(b.time)
    meta = read_header(path)
    assert meta["format"] == "pytimely-capture" and meta["version"] == 1
    assert meta["user"] == {"job": kind} and meta["time_type"] == "int" and "creator" in meta
    r = FileReader(path)
    got, err = drain(r)
    assert err is None and got == evs and r.closed_cleanly and r.truncated is None


def test_types_survive_exactly(tmp_path):
    path = tmp_path / "c.cap"
    evs = mixed_events()
    write_events(path, evs)
    back = read_events(path)
    rec0 = back[0].batch
    assert [type(x) for x in rec0] == [type(x) for x in evs[0].batch]
    assert type(rec0[7][1]) is tuple and type(rec0[8]) is list and type(back[5].batch[0]) is Product
    assert [type(x) for x in back[4].batch] == [bool, int]
    assert rec0[14].dtype == np.int32


def test_unencodable_without_pickle(tmp_path):
    with FileWriter(tmp_path / "c.cap", mode="w") as w:
        for bad in (
            Messages(0, [Custom(1)]),
            Messages(Custom(1), [1]),
            Messages(0, (1, 2)),
            Messages(0, np.array([object()], dtype=object)),
            42,
        ):
            with pytest.raises(CaptureError):
                w.push(bad)
        deep = 1
        for _ in range(500):
            deep = (deep,)
        with pytest.raises(CaptureError):
            w.push(Messages(0, [deep]))
        w.push(Messages(0, [1]))
    assert read_events(tmp_path / "c.cap") == [Messages(0, [1])]


def test_pickle_opt_in(tmp_path):
    path = tmp_path / "p.cap"
    evs = [
        Messages(0, [1]),
        Messages(0, [Custom(1), 2]),
        Messages(Custom(2), (1, 2)),
        Progress([(0, -1)]),
    ]
    write_events(path, evs, allow_pickle=True)
    r = FileReader(path)
    assert r.poll() == evs[:1]  # the good prefix first
    with pytest.raises(CaptureError, match="allow_pickle") as ei:
        r.poll()
    assert str(path) in str(ei.value) and "byte offset" in str(ei.value)
    with pytest.raises(CaptureError):  # sticky
        r.poll()
    assert r.done
    assert read_events(path, allow_pickle=True) == evs
    # a file without pickled frames is fine either way
    write_events(path, int_events(), allow_pickle=True)
    assert read_events(path) == int_events()


def test_deferred_error_and_poll_limits(tmp_path):
    path = tmp_path / "c.cap"
    evs = [Messages(i, [i]) for i in range(10)]
    write_events(path, evs)
    data = bytearray(path.read_bytes())
    data[-FRAME_HEADER_SIZE - 3] ^= 0x01  # corrupt the last Messages body
    path.write_bytes(bytes(data))
    r = FileReader(path)
    assert r.poll(max_events=4) == evs[:4]
    assert r.poll() == evs[4:9]
    assert not r.done and r.error is not None
    with pytest.raises(CaptureError, match="checksum"):
        r.poll()
    assert r.done


# --------------------------------------------------------------------------------------------
# Truncation and corruption


def _write_with_boundaries(path, evs):
    """Write evs, flushing after each; return the file offsets where each frame ends."""
    ends = []
    with FileWriter(path, mode="w") as w:
        ends.append(os.path.getsize(path))
        for e in evs:
            w.push(e)
            w.flush()
            ends.append(os.path.getsize(path))
    ends.append(os.path.getsize(path))  # after END
    return ends


def test_truncate_at_every_offset(tmp_path):
    """Cut a small capture at every byte offset -- between frames (what a killed writer leaves)
    and inside frames: a plain reader returns exactly the complete frames, then reports
    TruncatedCapture; only the whole file, ending in END, reads as complete."""
    src = tmp_path / "full.cap"
    evs = product_events() + [Messages(9, np.arange(5)), Messages(9, ["x" * 40])]
    ends = _write_with_boundaries(src, evs)
    full = src.read_bytes()
    cut = tmp_path / "cut.cap"
    tried = 0
    for n in range(ends[0], len(full) + 1):
        cut.write_bytes(full[:n])
        r = FileReader(cut)
        got, err = drain(r)
        tried += 1
        complete = sum(1 for e in ends[1:-1] if e <= n)
        assert got == evs[:complete], n
        assert r.done
        if n == len(full):
            assert err is None and r.closed_cleanly and r.truncated is None
            continue
        assert isinstance(err, TruncatedCapture), (n, err)
        assert r.truncated == max(e for e in ends if e <= n)
        assert f"byte offset {r.truncated}" in str(err) and str(cut) in str(err)
        if n in ends:
            assert "without an END frame" in str(err), n
        with pytest.raises(TruncatedCapture):
            r.poll()
        with pytest.raises(TruncatedCapture):
            read_events(cut)
    assert tried == len(full) - ends[0] + 1 > 100


def test_tail_reader_waits_at_a_frame_boundary_without_end(tmp_path):
    """A tailing reader of a file that stops between frames is waiting for its writer, not
    failing: it returns what is there, is not done, and picks up the rest once written."""
    path = tmp_path / "live.cap"
    w = FileWriter(path)
    w.push(Messages(0, [1]))
    w.flush()
    r = FileReader(path, tail=True)
    assert r.poll() == [Messages(0, [1])]
    deadline = time.monotonic() + 0.2
    while time.monotonic() < deadline:
        assert r.poll() == [] and not r.done and r.error is None
    w.push(Messages(1, [2]))
    w.close()
    assert r.poll() == [Messages(1, [2])]
    assert r.poll() == [] and r.done and r.closed_cleanly


def test_truncated_header(tmp_path):
    src = tmp_path / "full.cap"
    write_events(src, int_events())
    full = src.read_bytes()
    hdr = full.index(b"}") + 1
    for n in range(hdr):
        p = tmp_path / "h.cap"
        p.write_bytes(full[:n])
        got, err = drain(FileReader(p))
        assert got == [] and isinstance(err, TruncatedCapture)


def _check_corrupt_read(path, evs):
    r = FileReader(path)
    got, err = drain(r)
    assert got == evs[: len(got)], "a wrong event was read silently"
    if err is None:
        assert got == evs
    return err


def test_every_single_byte_flip_is_detected(tmp_path):
    src = tmp_path / "full.cap"
    evs = int_events() + product_events()[:2] + [Messages(1, np.arange(3)), Messages(2, [(1, "a")])]
    write_events(src, evs)
    full = src.read_bytes()
    p = tmp_path / "f.cap"
    for i in range(len(full)):
        data = bytearray(full)
        data[i] ^= 0xFF
        p.write_bytes(bytes(data))
        err = _check_corrupt_read(p, evs)
        assert isinstance(err, CaptureError), i  # CRC32 catches every single-byte error
        assert str(p) in str(err) and "byte offset" in str(err)


def test_random_corruption_seeded(tmp_path):
    rng = random.Random(1234)
    src = tmp_path / "full.cap"
    evs = mixed_events() + numpy_events()[:3] + arrow_events() + int_events()
    write_events(src, evs)
    full = src.read_bytes()
    p = tmp_path / "f.cap"
    detected = 0
    for trial in range(300):
        data = bytearray(full)
        for _ in range(rng.randint(1, 6)):
            i = rng.randrange(len(data))
            data[i] = (data[i] + rng.randint(1, 255)) % 256
        if rng.random() < 0.3:
            data = data[: rng.randrange(len(data))]
        p.write_bytes(bytes(data))
        err = _check_corrupt_read(p, evs)
        detected += err is not None
    assert detected == 300


def _raw_frame(ftype, body, flags=0):
    prefix = struct.pack("<IBBHI", len(body), ftype, flags, 0, zlib.crc32(body))
    return prefix + struct.pack("<I", zlib.crc32(prefix)) + body


def test_forged_frames_never_crash_the_decoder(tmp_path):
    """Bodies with *valid* checksums but garbage or mutated contents: a CaptureError or some
    valid event, never another exception."""
    rng = random.Random(99)
    header = tmp_path / "h.cap"
    write_events(header, [])
    hdr = header.read_bytes()[:-FRAME_HEADER_SIZE]  # drop END
    seeds = []
    for e in mixed_events() + numpy_events() + arrow_events() + product_events():
        f = encode_event(e)
        seeds.append((f[4], f[FRAME_HEADER_SIZE:]))
    p = tmp_path / "x.cap"
    for trial in range(1500):
        if trial % 3 == 0:
            body = bytes(rng.randrange(256) for _ in range(rng.randint(0, 40)))
            ftype = rng.choice([1, 2])
        else:
            ftype, body = rng.choice(seeds)
            body = bytearray(body)
            for _ in range(rng.randint(1, 3)):
                if body:
                    body[rng.randrange(len(body))] = rng.randrange(256)
            body = bytes(body)
        p.write_bytes(hdr + _raw_frame(ftype, body))
        r = FileReader(p)
        try:
            got, err = drain(r)
        except TimelyError:
            raise AssertionError("drain should have caught it") from None
        assert err is None or isinstance(err, CaptureError)
        for ev in got:
            assert isinstance(ev, Event)


def test_bad_magic_version_and_frame_fields(tmp_path):
    src = tmp_path / "c.cap"
    write_events(src, int_events())
    full = src.read_bytes()
    p = tmp_path / "bad.cap"

    p.write_bytes(b"PK\x03\x04" + full[4:])
    with pytest.raises(CaptureError, match=r"bad magic.*byte offset 0") as ei:
        FileReader(p).poll()
    assert str(p) in str(ei.value)
    assert ei.value.path == str(p) and ei.value.offset == 0

    data = bytearray(full)
    data[8:10] = struct.pack("<H", 2)
    p.write_bytes(bytes(data))
    with pytest.raises(CaptureError, match=r"unsupported capture format version 2.*byte offset 8"):
        FileReader(p).poll()

    # a frame with an unknown type but valid checksums
    p.write_bytes(full[:-FRAME_HEADER_SIZE] + _raw_frame(9, b""))
    r = FileReader(p)
    got, err = drain(r)
    assert got == int_events() and "unknown frame type 9" in str(err)
    assert f"byte offset {len(full) - FRAME_HEADER_SIZE}" in str(err)

    # an absurd length is rejected at once rather than waited for
    p.write_bytes(full[:-FRAME_HEADER_SIZE] + _raw_frame(2, b"x" * 100)[:20])
    r = FileReader(p, tail=True, max_frame=50)
    got, err = drain(r)
    assert "exceeds" in str(err)

    with pytest.raises(CaptureError, match="no such"):
        FileReader(tmp_path / "missing.cap")
    (tmp_path / "empty.cap").write_bytes(b"")
    with pytest.raises(TruncatedCapture, match="empty"):
        FileReader(tmp_path / "empty.cap").poll()


@pytest.mark.parametrize(
    "key, value, message",
    [("version", 2, "metadata version 2 differs"), ("batch_codec", "x-9", "unknown batch codec")],
)
def test_unknown_metadata_version_or_codec_is_an_error(tmp_path, key, value, message):
    """A header whose checksums hold but whose metadata names a version or codec this reader
    does not know is refused, not read on a guess."""
    src = tmp_path / "c.cap"
    write_events(src, int_events())
    full = src.read_bytes()
    (mlen,) = struct.unpack_from("<I", full, 12)
    meta = json.loads(full[20 : 20 + mlen])
    meta[key] = value
    raw = json.dumps(meta).encode()
    prefix = full[:12] + struct.pack("<I", len(raw))
    forged = prefix + struct.pack("<I", zlib.crc32(raw, zlib.crc32(prefix))) + raw
    p = tmp_path / "forged.cap"
    p.write_bytes(forged + full[20 + mlen :])
    with pytest.raises(CaptureError, match=message):
        FileReader(p).poll()


# --------------------------------------------------------------------------------------------
# Tailing, appending, locking


def test_tail_reader_follows_concurrent_writer(tmp_path):
    path = tmp_path / "live.cap"
    evs = [Progress([(0, -1), (1, 1)])] + [
        Messages(i // 10, list(range(i % 7))) for i in range(300)
    ]
    reader = FileReader(path, tail=True)  # before the file exists
    assert reader.poll() == [] and not reader.done

    def produce():
        with FileWriter(path, buffer_size=37) as w:  # tiny buffer: partial frames hit the disk
            for i, e in enumerate(evs):
                w.push(e)
                if i % 13 == 0:
                    w.flush()
                    time.sleep(0.001)

    t = threading.Thread(target=produce)
    t.start()
    got = []
    deadline = time.time() + 20
    while not reader.done and time.time() < deadline:
        got += reader.poll()
        time.sleep(0.0005)
    t.join()
    assert reader.done and got == evs and reader.closed_cleanly


def test_append_and_repair(tmp_path):
    path = tmp_path / "a.cap"
    a, b = int_events(), product_events()
    with FileWriter(path, time_type=int) as w:
        for e in a:
            w.push(e)
    with FileWriter(path, mode="a") as w:  # append after a clean END
        for e in b:
            w.push(e)
    r = FileReader(path)
    got, err = drain(r)
    assert err is None and got == a + b and r.closed_cleanly
    assert read_header(path)["time_type"] == "int"
    with pytest.raises(CaptureError, match="time type"):
        FileWriter(path, mode="a", time_type="Product(int, int)")

    # a torn tail: refuse unless repair=True
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(encode_event(Messages(7, [7]))[:-3])
    with pytest.raises(TruncatedCapture, match="repair=True"):
        FileWriter(path, mode="a")
    with FileWriter(path, mode="a", repair=True) as w:
        assert path.stat().st_size == size
        w.push(Messages(8, [8]))
    assert read_events(path) == a + b + [Messages(8, [8])]

    # not a capture / corrupt: never appended to
    other = tmp_path / "other.bin"
    other.write_bytes(b"hello world, not a capture")
    with pytest.raises(CaptureError, match="magic"):
        FileWriter(other, mode="a")
    assert other.read_bytes() == b"hello world, not a capture"

    # mode="w" truncates, mode="x" refuses existing files
    with FileWriter(path, mode="w") as w:
        w.push(Messages(0, [0]))
    assert read_events(path) == [Messages(0, [0])]
    with pytest.raises(CaptureError, match="exists"):
        FileWriter(path, mode="x")


def test_writer_refuses_an_existing_file_unless_told(tmp_path):
    """Re-running a job must not double (append to) nor silently replace an earlier capture."""
    path = tmp_path / "job.cap"
    with FileWriter(path) as w:
        w.push(Messages(0, [1]))
    with pytest.raises(FileExistsError, match="mode='a' to append.*mode='w' to overwrite"):
        FileWriter(path)  # the same job, run again
    with pytest.raises(CaptureFileExists):
        FileWriter(path)
    assert read_events(path) == [Messages(0, [1])]
    with FileWriter(path, mode="w") as w:  # overwrite, explicitly
        w.push(Messages(0, [2]))
    assert read_events(path) == [Messages(0, [2])]
    with FileWriter(path, mode="a") as w:  # append, explicitly
        w.push(Messages(1, [3]))
    assert read_events(path) == [Messages(0, [2]), Messages(1, [3])]


def test_writer_lock_flush_and_abort(tmp_path):
    path = tmp_path / "l.cap"
    w = FileWriter(path)
    with pytest.raises(CaptureError, match="another writer"):
        FileWriter(path, mode="a")
    w.push(Messages(0, [1]))
    r = FileReader(path, tail=True)
    assert r.poll() == []  # buffered, not flushed
    w.flush(fsync=True)
    assert r.poll() == [Messages(0, [1])]
    w.close()
    w.close()  # idempotent
    assert r.poll() == [] and r.done
    with pytest.raises(CaptureError):
        w.push(Messages(0, [1]))

    path2 = tmp_path / "abort.cap"
    with pytest.raises(RuntimeError), FileWriter(path2) as w2:
        w2.push(Messages(0, [1]))
        raise RuntimeError("boom")
    r2 = FileReader(path2)
    got, err = drain(r2)
    assert got == [Messages(0, [1])] and not r2.closed_cleanly
    assert isinstance(err, TruncatedCapture) and "without an END frame" in str(err)


# --------------------------------------------------------------------------------------------
# Streams


def test_stream_socketpair():
    a, b = socket.socketpair()
    evs = (
        mixed_events()
        + numpy_events()
        + arrow_events()
        + [Messages(i, list(range(200))) for i in range(300)]
    )
    reader = StreamReader(b)
    t0 = time.time()
    assert reader.poll() == [] and not reader.done  # nothing yet: returns at once
    assert time.time() - t0 < 0.5

    def produce():
        w = StreamWriter(a)
        for i, e in enumerate(evs):
            w.push(e)
            if i % 17 == 0:
                w.flush()
        w.close()

    t = threading.Thread(target=produce)
    t.start()
    got = []
    deadline = time.time() + 20
    while not reader.done and time.time() < deadline:
        got += reader.poll()
        time.sleep(0.0005)
    t.join()
    assert reader.done and got == evs and reader.closed_cleanly
    assert reader.metadata["format"] == "pytimely-capture"


def test_stream_closed_without_end():
    a, b = socket.socketpair()
    w = StreamWriter(a, close_target=False)
    w.push(Messages(0, [1]))
    w.flush()
    payload = encode_event(Messages(1, [2]))
    a.sendall(payload[:5])
    a.close()
    r = StreamReader(b)
    got, err = drain(r)
    assert got == [Messages(0, [1])] and isinstance(err, TruncatedCapture)

    a, b = socket.socketpair()
    w = StreamWriter(a, close_target=False)
    w.push(Messages(0, [1]))
    w.flush()
    a.close()
    got, err = drain(StreamReader(b))
    assert got == [Messages(0, [1])] and isinstance(err, TruncatedCapture) and "END" in str(err)


def test_stream_pipe_and_fileobj(tmp_path):
    rfd, wfd = os.pipe()
    rf, wf = os.fdopen(rfd, "rb", buffering=0), os.fdopen(wfd, "wb")
    reader = StreamReader(rf)
    assert reader.poll() == []
    with StreamWriter(wf) as w:
        for e in int_events():
            w.push(e)
    got, err = drain(reader)
    assert err is None and got == int_events()

    buf = io.BytesIO()
    w = StreamWriter(buf, close_target=False)
    for e in product_events():
        w.push(e)
    w.close()
    # the stream bytes are exactly a capture file
    (tmp_path / "s.cap").write_bytes(buf.getvalue())
    assert read_events(tmp_path / "s.cap") == product_events()
    got, err = drain(StreamReader(io.BytesIO(buf.getvalue())))
    assert err is None and got == product_events()


# --------------------------------------------------------------------------------------------
# Codec details


def test_codec_values_roundtrip():
    values = [
        None,
        True,
        False,
        0,
        -1,
        2**63 - 1,
        -(2**63),
        2**63,
        -(2**63) - 1,
        10**40,
        1.25,
        float("inf"),
        "",
        "abc",
        b"",
        b"\x00\xff",
        (),
        (1, (2, (3,))),
        [],
        [1, "a"],
        {},
        {"a": [1, {"b": None}]},
        Product(Product(0, 1), 2),
        np.uint64(2**64 - 1),
    ]
    for v in values:
        out = bytearray()
        codec.encode_value(v, out)
        back, end = codec.decode_value(bytes(out))
        assert end == len(out) and back == v and type(back) is type(v)


# --------------------------------------------------------------------------------------------
# Parquet


def _parquet_roundtrip(path, evs, flush_every=2, **kw):
    from pytimely.capture import ParquetReader, ParquetWriter

    with ParquetWriter(path, **kw) as w:
        for i, e in enumerate(evs):
            w.push(e)
            if i % flush_every == flush_every - 1:
                w.flush()
    r = ParquetReader(path)
    got = r.poll()
    assert r.done and r.poll() == []
    return got


@pytest.mark.parametrize(
    "case",
    [
        "int",
        "product",
        "tuples",
        "dicts",
        "tagged",
        "numpy",
        "arrow",
        "table",
        "floats",
        "progress_only",
    ],
)
def test_parquet_roundtrip(tmp_path, case):
    import pandas as pd
    import pyarrow.parquet as pq

    s = pa.schema([("x", pa.int64()), ("y", pa.string())])
    cases = {
        "int": int_events(),
        "product": [
            e
            for e in product_events()
            if not (type(e) is Messages and type(e.time[0]) is Product)
            and not (type(e) is Progress and type(e.changes[0][0][0]) is Product)
        ],
        "tuples": [
            Messages(0, [(1, "a", 2.5), (2, None, 3.5)]),
            Progress([(0, -1)]),
            Messages(1, []),
        ],
        "dicts": [Messages(0, [{"k": 1, "v": "a"}]), Messages(1, [{"k": 2, "v": None}, None])],
        "tagged": [Messages(0, [1, "a", (1, (2,)), [3], b"x", None, 2**70]), Progress([(0, -1)])],
        "numpy": [
            Messages(0, np.arange(5, dtype=np.int32)),
            Progress([(0, -1), (1, 1)]),
            Messages(1, np.array([], dtype=np.int32)),
        ],
        "arrow": [
            Messages(0, pa.RecordBatch.from_pydict({"x": [1, 2], "y": ["a", None]}, schema=s)),
            Progress([(0, -1)]),
            Messages(1, pa.RecordBatch.from_pydict({"x": [], "y": []}, schema=s)),
        ],
        "table": [Messages(0, pa.table({"x": [1.5, 2.5]})), Messages(3, pa.table({"x": [0.5]}))],
        "floats": [Messages(0, [1.5, None]), Messages(0, [2.0]), Progress([])],
        "progress_only": [Progress([(0, -1), (5, 1)]), Progress([(5, -1)])],
    }
    evs = cases[case]
    path = tmp_path / "c.parquet"
    assert _parquet_roundtrip(path, evs) == evs
    df = pd.read_parquet(path)
    assert list(df.columns[:5]) == ["seq", "kind", "time", "delta", "pos"]
    assert set(df["kind"]) <= {"progress", "messages"}
    f = pq.ParquetFile(path)
    assert f.num_row_groups == max(1, (len(evs) + 1) // 2)


def test_parquet_nested_product_time_is_struct(tmp_path):
    import pandas as pd

    P = Product
    evs = [Messages(P(P(1, 2), 3), [1, 2]), Progress([(P(P(1, 2), 3), -1)])]
    path = tmp_path / "p.parquet"
    assert _parquet_roundtrip(path, evs) == evs
    df = pd.read_parquet(path)
    assert df["time"][0] == {"outer": {"outer": 1, "inner": 2}, "inner": 3}
    assert df["value"].tolist()[:2] == [1, 2]


def test_parquet_rejects_what_it_cannot_store(tmp_path):
    from pytimely.capture import ParquetWriter

    w = ParquetWriter(tmp_path / "a.parquet")
    w.push(Messages(0, [1, 2]))
    w.flush()
    w.push(Messages(0, ["a"]))  # checked when converted
    with pytest.raises(CaptureError, match="value_type"):
        w.flush()
    w2 = ParquetWriter(tmp_path / "b.parquet")
    w2.push(Messages(0, [1]))
    with pytest.raises(CaptureError):
        w2.push(Messages(Product(0, 1), [1]))
    with pytest.raises(CaptureError):
        w2.push(Messages(0, np.arange(3)))
    with pytest.raises(CaptureError):
        ParquetWriter(tmp_path / "c.parquet").push(Messages(0, pa.table({"seq": [1]})))
    with pytest.raises(CaptureError):
        ParquetWriter(tmp_path / "d.parquet").push(Messages("t", [1]))


@pytest.mark.parametrize("value_type", ["auto", "tagged"])
def test_parquet_flipped_byte_is_a_capture_error_or_harmless(tmp_path, value_type):
    """Flip a byte at every offset of a small Parquet capture: reading either gives back the
    very same events (the byte was not significant) or raises CaptureError naming the file --
    never wrong events (page checksums) and never a bare TypeError or Arrow error."""
    from pytimely.capture import ParquetReader, ParquetWriter

    evs = [
        Progress([(0, -1), (1, 1)]),
        Messages(1, [1, 2, 3]),
        Messages(1, [4]),
        Progress([(1, -1)]),
    ]
    src = tmp_path / "c.parquet"
    with ParquetWriter(src, value_type=value_type) as w:
        for e in evs:
            w.push(e)
    full = src.read_bytes()
    p = tmp_path / "flipped.parquet"
    errors = in_row_group = 0
    for i in range(len(full)):
        data = bytearray(full)
        data[i] ^= 0x01 if i % 2 else 0xFF
        p.write_bytes(bytes(data))
        try:
            got = ParquetReader(p).poll()
        except CaptureError as e:
            errors += 1
            in_row_group += "row group 0" in str(e)
            assert str(p) in str(e), (i, e)
            continue
        assert got == evs, i
    assert errors > len(full) // 2 and in_row_group > 0


def _parquet_with_description(path, **changes):
    import pyarrow.parquet as pq

    from pytimely.capture import ParquetWriter

    with ParquetWriter(path) as w:
        w.push(Messages(0, [1]))
    table = pq.read_table(path)
    desc = json.loads(table.schema.metadata[b"pytimely.capture"])
    desc.update(changes)
    for key, value in changes.items():
        if value is None:
            del desc[key]
    meta = {b"pytimely.capture": json.dumps(desc).encode()}
    pq.write_table(table.replace_schema_metadata(meta), path)


@pytest.mark.parametrize("version", [2, 0, 1.0, "1", True, None])
def test_parquet_unknown_metadata_version_is_an_error(tmp_path, version):
    from pytimely.capture import ParquetReader

    path = tmp_path / "v.parquet"
    _parquet_with_description(path, version=version)
    with pytest.raises(CaptureError, match="unsupported Parquet capture version"):
        ParquetReader(path).poll()


def test_parquet_writes_page_checksums(tmp_path):
    """A flipped byte inside a data page is caught by its checksum, not by luck."""
    import pyarrow.parquet as pq

    from pytimely.capture import ParquetReader, ParquetWriter

    path = tmp_path / "c.parquet"
    with ParquetWriter(path, compression="none", value_type="int64") as w:
        w.push(Messages(0, [0x5A5A5A5A5A5A5A5A]))
    data = bytearray(path.read_bytes())
    i = data.index((0x5A5A5A5A5A5A5A5A).to_bytes(8, "little"))
    data[i] ^= 0x01  # still a valid int64: only the checksum can tell
    path.write_bytes(bytes(data))
    with pytest.raises(CaptureError, match="row group 0"):
        ParquetReader(path).poll()
    assert pq.read_table(path, page_checksum_verification=False).num_rows == 1


# --------------------------------------------------------------------------------------------
# Inspector


def test_inspect_file(tmp_path, capsys):
    path = tmp_path / "c.cap"
    write_events(path, int_events())
    out = io.StringIO()
    s = inspect_file(path, out=out, progress=True)
    text = out.getvalue()
    assert s["error"] is None and s["closed_cleanly"] and s["records"] == 6
    assert s["frontier"] == [] and "stream complete" in text and "ended cleanly" in text
    assert s["times"][0]["records"] == 6 and s["times"][0]["messages"] == 2

    full = path.read_bytes()
    path.write_bytes(full[: len(full) - FRAME_HEADER_SIZE - 2])  # cut into the last frame
    out = io.StringIO()
    s = inspect_file(path, out=out, progress=False)
    assert "TRUNCATED" in out.getvalue() and s["events"] == len(int_events()) - 1

    pq_path = tmp_path / "c.parquet"
    _parquet_roundtrip(pq_path, product_events()[:2])
    out = io.StringIO()
    s = inspect_file(pq_path, out=out, progress=False)
    assert s["format"] == "parquet" and s["records"] == 3 and s["error"] is None
    assert s["frontier"] == [Product(0, 1)]

    (tmp_path / "junk").write_bytes(b"junk junk")
    with pytest.raises(CaptureError, match="magic"):
        inspect_file(tmp_path / "junk", out=io.StringIO(), progress=False)
