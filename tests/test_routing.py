"""The routing rule: keys that compare equal meet on one worker, whatever their types, in lists,
numpy arrays and Arrow batches alike; keys and records that cannot travel fail loudly, on one
worker as on many."""

from __future__ import annotations

import collections
import os
import threading
from operator import itemgetter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pytimely as pt
from pytimely import _native
from pytimely.communication import Allocator
from pytimely.dataflow.exchange.routing import (
    UnroutableKey,
    canonical_key,
    route,
    route_array,
    route_arrow,
)
from pytimely.errors import OperatorError, SerializationError, WorkerFailure

#: Examples per routing property (the same knob as the progress property tests).
EXAMPLES = int(os.environ.get("PYTIMELY_PROPERTY_EXAMPLES", "200"))

pytestmark = pytest.mark.timeout(120)


# ============================================================================================
# The rule, per key


def _equal_variants(i: int) -> list:
    """Keys of many types that all compare equal to the integer ``i``."""
    out: list = [i]
    if i in (0, 1):
        out += [bool(i), np.bool_(i)]
    if -(1 << 63) <= i < (1 << 63):
        out += [np.int64(i)]
    if 0 <= i < (1 << 64):
        out += [np.uint64(i)]
    if -128 <= i < 128:
        out += [np.int8(i)]
    try:
        f = float(i)
    except OverflowError:
        f = None
    if f is not None and f == i:
        out += [f, np.float64(i)]
        if abs(f) < 1e38 and float(np.float32(f)) == f:
            out += [np.float32(f)]
        if f == 0:
            out += [-0.0]
    return out


_ints = st.one_of(
    st.integers(-1000, 1000),
    st.integers(-(1 << 70), 1 << 70),
    st.integers(0, 60).map(lambda e: 1 << e),
    st.sampled_from([int(1e300), -(1 << 63), (1 << 64) - 1, 1 << 64]),
)


@st.composite
def equal_keys(draw, depth: int = 2) -> list:
    """A list of at least one key, all comparing equal to each other, of mixed types."""
    choice = draw(
        st.sampled_from(["int", "float", "str", "bytes", "none", "tuple"][: 6 if depth else 5])
    )
    if choice == "int":
        return _equal_variants(draw(_ints))
    if choice == "float":
        x = draw(st.floats(allow_nan=False, allow_infinity=True))
        return [x, np.float64(x)]
    if choice == "str":
        s = draw(st.text(max_size=8))
        return [s, np.str_(s)]
    if choice == "bytes":
        b = draw(st.binary(max_size=8))
        return [b, np.bytes_(b), bytearray(b)] if not b.endswith(b"\0") else [b, bytearray(b)]
    if choice == "none":
        return [None]
    parts = draw(st.lists(equal_keys(depth - 1), min_size=0, max_size=3))
    n = max((len(p) for p in parts), default=1)
    return [tuple(p[j % len(p)] for p in parts) for j in range(n)]


@settings(max_examples=max(300, EXAMPLES), deadline=None)
@given(keys=equal_keys(), peers=st.integers(1, 5))
def test_equal_keys_of_any_type_route_to_one_worker(keys, peers):
    assert all(k == keys[0] for k in keys)  # the strategy's promise
    assert len({route(k, peers) for k in keys}) == 1, keys
    assert len({canonical_key(k) for k in keys}) == 1


def test_route_keeps_timelys_integer_placement_and_the_edge_floats():
    assert [route(k, 3) for k in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert route(-1, 4) == 3
    assert route(1e300, 7) == int(1e300) % 7
    assert route(-0.0, 5) == route(0, 5) == 0
    assert route(float("nan"), 5) in range(5)
    assert route(float("inf"), 5) in range(5)


@pytest.mark.parametrize("key", [[1], {"a": 1}, (1, [2]), np.timedelta64(1, "s"), object()])
def test_unroutable_keys_raise_type_error(key):
    with pytest.raises(UnroutableKey):
        route(key, 2)
    assert issubclass(UnroutableKey, TypeError)


# ============================================================================================
# Vectorized routes agree with the per-record rule


@settings(max_examples=max(100, EXAMPLES // 2), deadline=None)
@given(
    values=st.lists(st.integers(-(1 << 62), 1 << 62), max_size=30),
    dtype=st.sampled_from(["int64", "int8", "uint8", "uint64", "bool", "float64", "float32"]),
    peers=st.integers(1, 5),
)
def test_route_array_agrees_with_route(values, dtype, peers):
    with np.errstate(over="ignore"):
        arr = np.array(values).astype(dtype) if values else np.zeros(0, dtype)
    assert route_array(arr, peers).tolist() == [route(k, peers) for k in arr]


def test_route_array_of_odd_floats_strings_bytes_and_objects():
    floats = np.array([1.5, -2.0, 1e300, np.nan, np.inf, -np.inf, -0.0, 2.5e-300, 1e16 + 2])
    strings = np.array(["a", "bb", "a", "", "ü"])
    raw = np.array([b"a", b"bb", b"a"])
    objects = np.array([1, "a", (1, 2.0), None, 3.0], dtype=object)
    for arr in (floats, strings, raw, objects):
        for peers in range(1, 6):
            assert route_array(arr, peers).tolist() == [route(k, peers) for k in arr]
    with pytest.raises(UnroutableKey):
        route_array(np.zeros((2, 2)), 2)


def test_route_arrow_agrees_with_route():
    arrays = [
        pa.array([1, None, -7, 1 << 40]),
        pa.array([1.0, 2.5, None, float("nan")]),
        pa.array([True, None, False]),
        pa.array(["a", None, "b", "a"]),
        pa.array([b"x", b"", None], type=pa.large_binary()),
        pa.array(["p", "q", None, "p"]).dictionary_encode(),
        pa.chunked_array([[1, 2], [3, None]]),
    ]
    for arr in arrays:
        for peers in range(1, 6):
            assert route_arrow(arr, peers).tolist() == [route(k, peers) for k in arr.to_pylist()]


# ============================================================================================
# Exchange: every batch of every equal key to one worker, whatever was memoized first


class _RecordingAllocator(Allocator):
    """Worker ``index`` of ``peers`` whose sends are only recorded (no other worker runs)."""

    def __init__(self, index: int, peers: int) -> None:
        self.index, self.peers = index, peers
        self.sent: list[tuple[int, object]] = []

    def send(self, channel, target, payload):
        self.sent.append((target, payload))

    def broadcast(self, channel, payload):
        raise AssertionError("not used")

    def flush(self):
        pass

    def receive(self):
        return []

    def await_events(self, timeout):
        pass

    def wake(self):
        pass

    def close(self, error=None):
        pass


@pytest.mark.parametrize("key", [lambda r: r[1], itemgetter(1)], ids=["lambda", "itemgetter"])
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "pure"])
@settings(max_examples=max(100, EXAMPLES // 2), deadline=None)
@given(
    groups=st.lists(equal_keys(), min_size=1, max_size=6), peers=st.integers(2, 5), data=st.data()
)
def test_exchange_sends_every_batch_of_equal_keys_where_route_says(
    key, compiled, groups, peers, data
):
    # Both split paths (the compiled one reads field 1 itself for itemgetter(1)) share the
    # memo's rule: whichever of two equal keys was memoized first, both go where route says.
    allocator = _RecordingAllocator(0, peers)
    kept: list = []
    with pytest.MonkeyPatch.context() as patch:
        if not compiled:
            patch.setattr(_native, "speedups", None)
        worker = pt.Worker(allocator)
        push = pt.Exchange(key).connect(
            worker, lambda t, b: kept.extend((0, r) for r in b), "Keyed"
        )
        for _ in range(3):  # several batches: the memo fills in between
            batch = [(g, data.draw(st.sampled_from(keys))) for g, keys in enumerate(groups)]
            push(0, data.draw(st.permutations(batch)))
        worker.step()  # the parts held back for other workers leave
    arrivals = kept + [(w, r) for w, (_t, part) in allocator.sent for r in part]
    for g, keys in enumerate(groups):
        workers = {w for w, (group, _k) in arrivals if group == g}
        assert workers == {route(keys[0], peers)}, keys


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "pure"])
def test_exchange_holds_list_parts_back_and_sends_one_message_per_destination(compiled):
    # Parts for other workers leave when the worker transmits (here: a step), one message per
    # destination with the records of every batch in order; a part at another time, or one the
    # codec cannot carry, first sends what is held, so order per destination is kept.
    class Odd:  # pickled: the records codec does not carry it
        def __eq__(self, other):
            return type(other) is Odd

        def __hash__(self):
            return 0

    allocator = _RecordingAllocator(0, 2)
    kept: list = []
    with pytest.MonkeyPatch.context() as patch:
        if not compiled:
            patch.setattr(_native, "speedups", None)
        worker = pt.Worker(allocator)
        push = pt.Exchange(itemgetter(0)).connect(worker, lambda t, b: kept.append((t, b)), "K")
        push(0, [(1, "a"), (2, "b")])  # key 1 goes to worker 1, key 2 stays
        push(0, [(3, "c"), (4, "d")])
        if compiled:
            assert allocator.sent == []  # held until the worker transmits
        push(1, [(5, "e")])  # another time: time 0's parts leave first
        push(1, [(7, Odd())])  # not codec material: sent as it comes, after what is held
        push(1, [(9, "f")])
        worker.step()
    assert kept == [(0, [(2, "b")]), (0, [(4, "d")])]
    sent = [(target, t, list(part)) for target, (t, part) in allocator.sent]
    records = [(t, r) for _w, t, part in sent for r in part]
    assert records == [(0, (1, "a")), (0, (3, "c")), (1, (5, "e")), (1, (7, Odd())), (1, (9, "f"))]
    assert all(w == 1 for w, *_ in sent)
    if compiled:
        assert [(t, len(part)) for _w, t, part in sent] == [(0, 2), (1, 1), (1, 1), (1, 1)]


def test_a_watermark_marker_does_not_overtake_data_held_for_its_worker():
    # Markers go to the allocator directly on the edge's channel; the data sent before them,
    # held back by the exchange, must leave first (FIFO per channel and destination).
    from pytimely.dataflow.operators.watermarks import Markers, Watermark, WatermarkExchange

    allocator = _RecordingAllocator(0, 2)
    worker = pt.Worker(allocator)
    push = WatermarkExchange(itemgetter(0)).connect(worker, lambda t, b: None, "Windows")
    push(0, [(1, "a"), (3, "b")])  # keys 1 and 3 go to worker 1
    push(0, Markers((Watermark(10, 0, 1),)))
    push(0, [(5, "c")])
    worker.step()
    sent = [payload for _target, (_t, payload) in allocator.sent]
    assert [type(p) is Markers for p in sent] == [False, True, False]
    assert list(sent[0]) == [(1, "a"), (3, "b")] and list(sent[2]) == [(5, "c")]


# ============================================================================================
# Exchange on one worker: same errors as on many


def _exchange_on_one_worker(records, strict=False, **exchange):
    def work(worker):
        def build(scope):
            return (
                scope.to_stream(records)
                .unary(pt.Exchange(**exchange), "KeyedCount", _forward)
                .capture()
            )

        handle = worker.dataflow(build)
        worker.run()
        return handle.extract()

    return work(pt.Worker(strict=strict))


def _forward(cap, info):
    cap.drop()

    def logic(inp, out):
        for t, b in inp.drain_batches():
            out.forward(t, b)

    return logic


@pytest.mark.parametrize("exchange", [{}, {"key": lambda r: r}])
def test_unroutable_key_fails_on_one_worker_naming_operator_type_and_fix(exchange):
    with pytest.raises(OperatorError) as info:  # raised in the upstream operator's push
        _exchange_on_one_worker([[1, 2], [3]], **exchange)
    assert isinstance(info.value.__cause__, TypeError)
    message = str(info.value.__cause__)
    assert "'KeyedCount'" in message
    assert "list" in message
    assert "pass a key function returning int/str/bytes/tuple" in message.lower()


def test_tuple_key_holding_a_list_fails_on_one_worker():
    with pytest.raises(OperatorError, match="KeyedCount.*tuple.*list") as info:
        _exchange_on_one_worker([(1, [2])])
    assert isinstance(info.value.__cause__, TypeError)


def test_routable_keys_pass_unchanged_on_one_worker():
    records = [1, "a", (1, "b"), 2.5, None, np.int64(3)]
    assert _exchange_on_one_worker(records) == [(0, records)]


def test_unroutable_key_fails_on_two_workers_with_the_same_message():
    def work(worker):
        worker.dataflow(
            lambda scope: (
                scope.to_stream([[worker.index]])
                .unary(pt.Exchange(), "KeyedCount", _forward)
                .probe()
            )
        )
        worker.run()

    with pytest.raises(WorkerFailure, match="KeyedCount.*list.*key function"):
        pt.execute(work, workers=2, timeout=60)


# ============================================================================================
# Records that cannot be pickled


def test_unpicklable_record_crossing_workers_names_channel_operator_and_type():
    def work(worker):
        def build(scope):
            locks = scope.to_stream(range(4)).map(lambda i: (i, threading.Lock()))
            return locks.unary(pt.Exchange(lambda r: r[0]), "Keyed", _forward).probe()

        worker.dataflow(build)
        worker.run()

    with pytest.raises(WorkerFailure) as info:
        pt.execute(work, workers=2, timeout=60)
    message = str(info.value)
    assert "exchange channel" in message
    assert "'Keyed'" in message
    assert "record of type tuple" in message
    assert "cannot pickle" in message
    assert "PYTIMELY_STRICT" in message


def test_strict_worker_catches_an_unpicklable_record_on_one_worker():
    records = [(0, threading.Lock())]
    first = lambda r: r[0]  # noqa: E731
    # Not strict: nothing is pickled on one worker.
    assert len(_exchange_on_one_worker(records, key=first)[0][1]) == 1
    with pytest.raises(OperatorError, match="'KeyedCount'.*record of type tuple") as info:
        _exchange_on_one_worker(records, strict=True, key=first)
    assert isinstance(info.value.__cause__, SerializationError)


def test_strict_mode_defaults_from_the_environment(monkeypatch):
    monkeypatch.setenv("PYTIMELY_STRICT", "1")
    assert pt.Worker().strict
    monkeypatch.setenv("PYTIMELY_STRICT", "0")
    assert not pt.Worker().strict


# ============================================================================================
# Many processes: mixed-type keys give the plain-Python answer


N_KEYS = 60
TYPES = [int, np.int64, float, np.float64, np.int32]


def _typed(j: int):
    return TYPES[j % len(TYPES)](j % N_KEYS)


def _mixed_key_work(worker):
    me, peers = worker.index, worker.peers

    def build(scope):
        pairs = scope.to_stream([(_typed(j), 1) for j in range(me, 600, peers)])
        counts = pairs.aggregate(
            lambda k, v, acc: acc + v, lambda k, acc: (int(k), acc), name="KeyedCount"
        ).capture()
        left = scope.to_stream([(j, "L") for j in range(me, N_KEYS, peers)])
        right = scope.to_stream([(_typed(j + 1), "R") for j in range(me, 2 * N_KEYS, peers)])

        def join(cap, info):
            cap.drop()
            seen: tuple[dict, dict] = (collections.defaultdict(list), collections.defaultdict(list))

            def logic(in1, in2, out):
                for side, port in enumerate((in1, in2)):
                    for ref, batch in port:
                        matches = []
                        for k, v in batch:
                            seen[side][k].append(v)
                            for w in seen[1 - side].get(k, ()):
                                matches.append((int(k), v, w) if side == 0 else (int(k), w, v))
                        out.session(ref).give_batch(matches)

            return logic

        first = pt.Exchange(lambda r: r[0])
        joined = left.binary(right, first, pt.Exchange(lambda r: r[0]), "Join", join).capture()
        return counts, joined

    counts, joined = worker.dataflow(build)
    worker.run()
    return [r for _t, rs in counts.extract() for r in rs], [
        r for _t, rs in joined.extract() for r in rs
    ]


@pytest.mark.parametrize("workers", [2, 3])
def test_keyed_count_and_join_over_mixed_key_types_match_plain_python(workers):
    results = pt.execute(_mixed_key_work, workers=workers, timeout=90)

    counts = [dict(c) for c, _j in results]
    keys_per_worker = [set(c) for c in counts]
    assert sum(map(len, keys_per_worker)) == len(set().union(*keys_per_worker))  # disjoint
    merged = {k: v for c in counts for k, v in c.items()}
    assert merged == dict(collections.Counter(j % N_KEYS for j in range(600)))

    joined = sorted(r for _c, j in results for r in j)
    right_keys = [(j + 1) % N_KEYS for j in range(2 * N_KEYS)]
    expected = sorted((k, "L", "R") for k in range(N_KEYS) for rk in right_keys if rk == k)
    assert joined == expected


# ============================================================================================
# Columnar batches on many workers


def _columnar_work(worker):
    me, peers = worker.index, worker.peers
    ints = np.arange(me * 100, me * 100 + 100, dtype=np.int64)
    floats = ints.astype(np.float64) / 2  # half of them integral
    table = pa.RecordBatch.from_pydict(
        {"k": [f"w{i % 7}" for i in range(me, 50, peers)], "v": list(range(me, 50, peers))}
    )

    received: list[list] = [[], [], []]

    def build(scope):
        inputs = []
        for pact, got in zip([pt.Exchange(), pt.Exchange(), pt.Exchange(column="k")], received):
            handle, stream = scope.new_input()
            stream.sink(
                pact,
                "Exchanged",
                lambda port, got=got: got.extend(b for _t, b in port.drain_batches()),
            )
            inputs.append(handle)
        return inputs

    inputs = worker.dataflow(build)
    for handle, batch in zip(inputs, (ints, floats, table)):
        handle.send_batch(batch)
        handle.close()
    worker.run()
    return received


def test_numpy_and_arrow_batches_route_like_their_records_on_two_workers():
    results = pt.execute(_columnar_work, workers=2, timeout=60)
    for me, (ints, floats, tables) in enumerate(results):
        assert {type(b) for b in ints + floats} == {np.ndarray}
        assert {type(b) for b in tables} == {pa.RecordBatch}
        got_ints = np.concatenate(ints)
        assert len(got_ints) and all(route(int(k), 2) == me for k in got_ints)
        got_floats = np.concatenate(floats)
        assert all(route(float(k), 2) == me for k in got_floats)
        rows = [r for t in tables for r in t.to_pylist()]
        assert rows and all(route(r["k"], 2) == me for r in rows)
    total = sum(len(np.concatenate(r[0])) for r in results)
    assert total == 200


# ============================================================================================
# route_strs: the vectorized route of new words agrees with route, key for key


def test_route_strs_agrees_with_route_for_every_string():
    from pytimely.dataflow.exchange.hashing import stable_hash, stable_hash_strs
    from pytimely.dataflow.exchange.routing import route_strs

    words = ["", "a", "word", "é", "日本語", "\ud800lone surrogate", "x" * 1000, "a\x00b"]
    assert stable_hash_strs(words).tolist() == [stable_hash(w) for w in words]
    for peers in (1, 2, 3, 7):
        assert route_strs(words, peers) == [route(w, peers) for w in words]
    assert route_strs([], 2) == []


def test_an_unroutable_key_is_reported_by_the_exchange_before_the_sender():
    # The mistake is the key: the error leads with the exchange's message (channel, consuming
    # operator, key, what to do) and names the operator that sent the record after it.
    def build(scope):
        scope.to_stream([[1, 2], [3]]).exchange(lambda r: r).inspect(print)

    with pytest.raises(OperatorError) as info:
        pt.example(build)
    message = str(info.value)
    assert message.startswith("exchange channel") and "cannot route the key [1, 2]" in message
    assert message.endswith("(raised while operator 'ToStream' at (0, 1) sent it)")
    assert isinstance(info.value.__cause__, UnroutableKey)
