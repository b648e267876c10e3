"""The compiled exchange paths (``pytimely._speedups``) and their pure-Python twins.

The extension must be built here (a silently failed build would leave every other test running
the pure-Python paths only); every compiled function must give what its pure-Python equivalent
gives; the records codec must round-trip exactly what it accepts and hand everything else to
pickle; and two workers must agree whichever paths each of them runs.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from collections import OrderedDict, defaultdict, namedtuple
from operator import itemgetter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pytimely as pt
from pytimely import _native
from pytimely.communication import codec
from pytimely.communication.wire import deserialize, serialize
from pytimely.dataflow.exchange.pusher import Router
from pytimely.dataflow.exchange.routing import route

EXAMPLES = int(os.environ.get("PYTIMELY_PROPERTY_EXAMPLES", "200"))

pytestmark = pytest.mark.timeout(120)

compiled_only = pytest.mark.skipif(
    _native.speedups is None, reason="runs the compiled path against the pure one"
)


@pytest.fixture(params=["compiled", "pure"])
def exchange_path(request, monkeypatch):
    """Run the test on the compiled paths, then on the pure-Python ones (forked workers
    inherit the switch)."""
    if request.param == "pure":
        monkeypatch.setattr(_native, "speedups", None)
    elif _native.speedups is None:
        pytest.skip("the compiled extension is switched off")
    return request.param


# ============================================================================================
# The build


@pytest.mark.skipif(
    os.environ.get(_native.PURE_PYTHON_ENV, "") not in ("", "0"),
    reason="the pure-Python paths were asked for",
)
def test_the_compiled_extension_is_built_and_loaded():
    assert _native.speedups is not None, _native.implementation()
    assert _native.implementation().startswith("compiled")
    out = subprocess.run(
        [sys.executable, "-m", "pytimely", "--version"], capture_output=True, text=True
    )
    assert "exchange: compiled" in out.stdout, out


def test_an_extension_built_from_another_source_is_not_loaded(monkeypatch):
    """A stale build (an editable install not rebuilt after a pull that added functions) runs
    the pure-Python paths, with a warning that says why, instead of failing mid-run."""
    import types

    import pytimely

    if _native.speedups is not None:
        assert _native.speedups.API == _native.API  # this build matches this source
    stale = types.ModuleType("pytimely._speedups")
    stale.API = _native.API - 1  # type: ignore[attr-defined]
    monkeypatch.setattr(pytimely, "_speedups", stale, raising=False)
    monkeypatch.delenv(_native.PURE_PYTHON_ENV, raising=False)
    with pytest.warns(RuntimeWarning, match="rebuild it with `pip install -e .`"):
        module, why = _native._load()
    assert module is None and why.startswith("pure Python (the compiled extension was built")


def test_the_environment_switch_selects_the_pure_python_paths():
    env = dict(os.environ, **{_native.PURE_PYTHON_ENV: "1"})
    code = "import pytimely._native as n; print(n.speedups is None, n.implementation())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.startswith("True pure Python (PYTIMELY_PURE_PYTHON is set)"), out
    version = subprocess.run(
        [sys.executable, "-m", "pytimely", "--version"], capture_output=True, text=True, env=env
    )
    assert "exchange: pure Python" in version.stdout, version


# ============================================================================================
# Splitting: the compiled split gives the pure split's parts


_keys = st.one_of(
    st.integers(-3, 40),
    st.integers(-(1 << 70), 1 << 70),
    st.sampled_from([True, False, 1.0, 2.5, -0.0, np.int64(3), np.str_("a"), None]),
    st.text(max_size=4),
    st.binary(max_size=3),
    st.tuples(st.integers(0, 5), st.text(max_size=2)),
)


@compiled_only
@settings(max_examples=EXAMPLES, deadline=None)
@given(
    keys=st.lists(st.lists(_keys, max_size=30), min_size=1, max_size=4),
    peers=st.integers(2, 5),
    form=st.sampled_from(["record", "itemgetter", "lambda"]),
)
def test_compiled_split_equals_pure_split(keys, peers, form):
    if form == "record":
        key, batches = None, keys
    else:
        key = itemgetter(0) if form == "itemgetter" else (lambda r: r[0])
        batches = [[(k, i) for i, k in enumerate(b)] for b in keys]
    compiled = Router(key, None, peers, "c")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_native, "speedups", None)
        pure = [Router(key, None, peers, "c").split(b) for b in batches]
    for batch, want in zip(batches, pure):
        assert compiled.split(batch) == want
        for w, part in enumerate(want):  # and the rule itself
            assert all(route(r if key is None else r[0], peers) == w for r in part)


@compiled_only
def test_compiled_split_computes_str_and_int_routes_as_the_routing_rule():
    # Exact ASCII strs and 64-bit ints are routed by the extension itself (a CRC-32 of the
    # text, a modulo), without the memo: every length through the 8- and 4-byte steps of its
    # CRC, ints at the edges of 64 bits and beyond, any number of peers, on any worker.
    words = ["".join(chr(33 + (7 * i + n) % 94) for i in range(n)) for n in range(70)]
    words += ["\x00", "a\x00", "\u00e9t\u00e9", "\U0001f600", "\x7f" * 9]
    ints = [0, 1, -1, 7, -7, (1 << 63) - 1, -(1 << 63), 1 << 63, -(1 << 63) - 1, 1 << 90]
    for peers in range(1, 10):
        for me in (-1, 0, peers - 1):
            router = Router(itemgetter(0), None, peers, "c", me)
            for keys in (words, ints):
                parts = router.split([(k, 1) for k in keys])
                assert sorted(k for part in parts for k, _ in part) == sorted(keys)
                for w, part in enumerate(parts):
                    assert all(route(k, peers) == w for k, _ in part)


@compiled_only
def test_compiled_split_stays_right_while_its_cache_grows_backs_off_and_resumes():
    # Recurring key objects (the cache hits), then new objects every record (it grows, then
    # stops inserting and backs off), then recurring ones again: 300,000 lookups, every
    # window boundary of the cache crossed, each part as the pure path gives it.
    vocabulary = [f"w{i}" for i in range(3000)]
    fresh = ["".join(["w", str(i % 3000)]) for i in range(150_000)]  # new objects
    stream = [vocabulary[i % 3000 :] + vocabulary[: i % 3000] for i in range(0, 60_000, 997)]
    stream += [fresh[i : i + 1000] for i in range(0, len(fresh), 1000)]
    stream += stream[:30]
    compiled = Router(None, None, 3, "c")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_native, "speedups", None)
        pure = Router(None, None, 3, "c")
        want = [pure.split(b) for b in stream]
    assert [compiled.split(b) for b in stream] == want


def test_compiled_split_leaves_records_it_cannot_read_to_the_python_path():
    # itemgetter(0) of a dict record, and an unhashable key: the Python path decides (and
    # reports the unroutable key naming the channel).
    router = Router(itemgetter(0), None, 2, "exchange channel 3 into operator 'Count'")
    records = [{0: "a"}, {0: 7}]
    assert router.split(records) == _split_pure(router, records)
    with pytest.raises(TypeError, match="exchange channel 3 into operator 'Count'.*list"):
        router.split([(["unhashable"], 1)])


def _split_pure(router, batch):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_native, "speedups", None)
        return router.split(batch)


# ============================================================================================
# The records codec


_atoms = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(1 << 63), (1 << 63) - 1),
    st.integers(0, 300),
    st.floats(allow_nan=False),
    st.text(max_size=40),
    st.text(alphabet="abc", min_size=250, max_size=300),
    st.binary(max_size=300),
)
_dict_keys = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(1 << 63), (1 << 63) - 1),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.binary(max_size=5),
    st.tuples(st.integers(0, 5), st.text(max_size=3)),
)
_values = st.recursive(
    _atoms,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.tuples(inner, inner)
        | st.dictionaries(_dict_keys, inner, max_size=4)
    ),
    max_leaves=30,
)


def _shape(x):
    """``x`` with every value's exact type beside it (``1 == 1.0 == True`` hides changes), and a
    dict's entries in their order."""
    if isinstance(x, (list, tuple)):
        return (type(x), [_shape(v) for v in x])
    if isinstance(x, dict):
        return (type(x), [(_shape(k), _shape(v)) for k, v in x.items()])
    return (type(x), x)


@compiled_only
@settings(max_examples=EXAMPLES, deadline=None)
@given(value=st.lists(_values, max_size=20) | st.tuples(_atoms, st.lists(_values)))
def test_codec_round_trips_exactly_and_both_decoders_agree(value):
    data = codec.encode(value)
    assert data is not None and data[0] == codec.MAGIC
    assert _shape(codec.decode(data)) == _shape(value)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_native, "speedups", None)
        assert _shape(codec.decode(data)) == _shape(value)  # a peer without the extension


Pair = namedtuple("Pair", "k v")


def _nested(depth):
    x: list = []
    for _ in range(depth):
        x = [x]
    return x


@compiled_only
@pytest.mark.parametrize(
    "value",
    [
        [np.str_("a")],
        [Pair("a", 1)],
        [1 << 64],
        ["\ud800"],
        [OrderedDict(a=1)],
        [defaultdict(int, a=1)],
        [{"a": Pair("a", 1)}],
        [1.0, np.float64(2.0)],
        [_nested(40)],
    ],
    ids=[
        "np.str_",
        "namedtuple",
        "bigint",
        "surrogate",
        "OrderedDict",
        "defaultdict",
        "dict of a namedtuple",
        "np.float64",
        "deep",
    ],
)
def test_codec_leaves_other_types_to_pickle_which_keeps_them(value):
    assert codec.encode(value) is None
    data, buffers = serialize((0, value))
    assert data[:2] == b"\x80\x05"  # a pickle
    back = deserialize(data, [bytearray(b) for b in buffers])
    assert back == (0, value)
    assert [type(x) for x in back[1]] == [type(x) for x in value]


@compiled_only
def test_codec_payloads_go_through_the_wire_and_strings_repeat_as_one_object():
    part = [("word", 1), ("wörd", 2**40), ("word", -1)]
    data, buffers = serialize((7, part))
    assert data[0] == codec.MAGIC and not buffers
    assert deserialize(data, []) == (7, part)
    first, second = deserialize(data, [])[1], deserialize(data, [])[1]
    assert first[0][0] is second[2][0]  # the decoder's string cache


@compiled_only
def test_a_dict_is_written_entry_by_entry_and_both_decoders_keep_its_order_and_types():
    # Parsed JSON events are dicts: they cross workers in the codec, not pickled, each entry
    # its key then its value, in the dict's order; the key strings repeat as one object.
    event = {"user": "ann", "ms": 1_700_000, 1: [True, None], (2, "b"): {"n": -0.5, b"k": b""}}
    data = codec.encode([event, {}])
    assert data[:7] == bytes([codec.MAGIC]) + b"l\x02\x00\x00\x00d"
    assert data[7:11] == (4).to_bytes(4, "little") and data[11:17] == b"s\x04user"
    for speedups in (_native.speedups, None):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(_native, "speedups", speedups)
            back = codec.decode(data)
            assert _shape(back) == _shape([event, {}])
            assert list(back[0]) == list(event)
            for cut in range(7, len(data)):
                with pytest.raises(ValueError, match="malformed"):
                    codec.decode(data[:cut])
    first, second = codec.decode(data)[0], codec.decode(data)[0]
    assert next(iter(first)) is next(iter(second))  # the decoder's string cache
    wide = {f"field{i}": i * i for i in range(12)}  # more entries than a new dict holds
    wide.update({"field3": "again", 0: None})
    assert list(codec.decode(codec.encode(wide)).items()) == list(wide.items())
    sent, buffers = serialize((3, [event]))
    assert sent[0] == codec.MAGIC and not buffers and deserialize(sent, []) == (3, [event])


def test_a_dict_key_that_cannot_be_hashed_is_a_malformed_payload_on_both_decoders():
    # Only a damaged or forged payload has one: an encoded dict's keys were a dict's keys.
    payload = bytes([codec.MAGIC]) + b"d\x01\x00\x00\x00" + b"l\x00\x00\x00\x00" + b"N"
    for speedups in {_native.speedups, None}:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(_native, "speedups", speedups)
            with pytest.raises(ValueError, match="malformed records-codec payload.*hashed"):
                codec.decode(payload)


@pytest.mark.parametrize("cut", [1, 2, 5, 9, 12])
def test_malformed_codec_payloads_raise_value_error_on_both_decoders(cut):
    payload = bytes([codec.MAGIC]) + b"l\x02\x00\x00\x00s\x04wordi" + (5).to_bytes(8, "little")
    for speedups in {_native.speedups, None}:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(_native, "speedups", speedups)
            assert codec.decode(payload) == ["word", 5]
            with pytest.raises(ValueError, match="malformed records-codec payload"):
                codec.decode(payload[:cut])
            with pytest.raises(ValueError, match="malformed records-codec payload"):
                codec.decode(payload + b"N")


@compiled_only
def test_a_record_tuple_is_written_with_a_one_byte_count_and_both_decoders_read_it():
    data = codec.encode([("word", 1), None])
    assert data == (
        bytes([codec.MAGIC]) + b"l\x02\x00\x00\x00" + b"r\x02" + b"s\x04word" + b"j\x01" + b"N"
    )
    assert codec.encode([(0,) * 300])[6:7] == b"t"  # 256 items or more: the 4-byte count
    for speedups in (_native.speedups, None):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(_native, "speedups", speedups)
            assert codec.decode(data) == [("word", 1), None]


@compiled_only
def test_a_list_of_word_records_is_written_without_tags_and_both_decoders_read_it():
    # Every item a (str of < 256 ASCII bytes, int in [0, 256)) tuple: the 'W' form, 2 bytes
    # per record besides the text; one other item anywhere and the list takes the general form.
    words = [("word", 1), ("", 0), ("x" * 255, 255), ("x" * 40, 7), ("w", 1)]
    data = codec.encode(words)
    assert data[:6] == bytes([codec.MAGIC]) + b"W\x05\x00\x00\x00"
    assert data[6:12] == b"\x04word\x01" and len(data) == 6 + sum(len(w) + 2 for w, _ in words)
    for other in [("w", 256), ("w", -1), ("w", True), ("\u00e9", 1), ("x" * 256, 1), ("w",)]:
        for at in (0, 2, 5):
            mixed = words[:at] + [other] + words[at:]
            assert codec.encode(mixed)[1:2] == b"l"
            assert _shape(codec.decode(codec.encode(mixed))) == _shape(mixed)
    nested = (1, [words, (2, words)])
    nested_data = codec.encode(nested)
    for speedups in (_native.speedups, None):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(_native, "speedups", speedups)
            assert _shape(codec.decode(data)) == _shape(words)
            assert codec.decode(nested_data) == nested
            for cut in range(6, len(data)):
                with pytest.raises(ValueError, match="malformed"):
                    codec.decode(data[:cut])
    # Splices of word lists are word lists; lists of two forms are not spliced.
    pair = codec.encode_pair_of_lists(codec.encode(3), [data, codec.encode([("z", 9)])])
    assert pair == codec.encode((3, words + [("z", 9)]))
    with pytest.raises(ValueError):
        codec.encode_pair_of_lists(codec.encode(3), [data, codec.encode([1])])


def test_malformed_record_payloads_raise_value_error_on_both_decoders():
    payload = bytes([codec.MAGIC]) + b"l\x01\x00\x00\x00r\x02s\x04wordj\x05"
    for speedups in {_native.speedups, None}:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(_native, "speedups", speedups)
            assert codec.decode(payload) == [("word", 5)]
            for cut in range(1, len(payload)):
                with pytest.raises(ValueError, match="malformed records-codec payload"):
                    codec.decode(payload[:cut])


@compiled_only
def test_decoded_words_of_a_large_vocabulary_come_back_as_the_same_objects():
    # The decoder's string cache keeps (nearly) every word of a 10,000-word vocabulary, so
    # decoding the words again gives the very objects of the first time (a consumer's dict
    # then matches them by identity); a direct-mapped cache lost a quarter of them.
    words = [f"k{i}" for i in range(10_000)]
    data = codec.encode(words)
    first, second = codec.decode(data), codec.decode(data)
    assert first == second == words
    assert sum(a is b for a, b in zip(first, second)) >= 0.9 * len(words)


@compiled_only
def test_a_word_is_the_same_object_wherever_it_sits_in_the_payload():
    # Up to 16 bytes a word is hashed from two 8-byte loads where 16 bytes can be read, and
    # from a zero-padded copy at the end of a payload: both must find the same cache entry.
    # Words that differ only by trailing NULs or by length stay apart.
    for n in range(33):
        word = "".join(chr(97 + (3 * i + n) % 26) for i in range(n))
        at_end = codec.decode(codec.encode([1, word]))[1]
        in_middle = codec.decode(codec.encode([word, "x" * 20]))[0]
        assert at_end == in_middle == word and at_end is in_middle
    assert codec.decode(codec.encode(["ab", "ab\x00", "ab\x00\x00", "a"])) == [
        "ab",
        "ab\x00",
        "ab\x00\x00",
        "a",
    ]


@compiled_only
def test_records_of_words_and_atoms_decode_exactly_wherever_the_payload_ends():
    # The decoder reads ahead into the next (str, atom) record; every atom kind after a word,
    # other record shapes in between, and every suffix so that each record ends a payload once.
    atoms = [None, True, False, 7, 300, -5, 1 << 40, 2.5, "x", b"y", (1,), [2]]
    words = ["", "a", "abcdefgh", "abcdefghi", "x" * 16, "y" * 17, "\u00fcn\u00ef"]
    records = (
        [(w, a) for a in atoms for w in words] + [(w,) for w in words] + [(w, 1, 2) for w in words]
    )
    for start in range(len(records)):
        part = records[start:] + records[:start]
        assert _shape(codec.decode(codec.encode(part))) == _shape(part)
        assert _shape(codec.decode(codec.encode(part[:start]))) == _shape(part[:start])


@compiled_only
def test_word_and_count_records_in_a_list_are_written_as_anywhere_else():
    # A list's (word, count) records take a shortcut in the encoder; the bytes must be those
    # the general path writes for the same record inside a tuple (of 256 items, so that its
    # header is as long as the list's).
    records = [
        ("", 0),
        ("a", 255),
        ("a" * 255, 1),
        ("a" * 256, 1),
        ("w", 256),
        ("w", -1),
        ("w", True),
        ("\u00e9", 1),
        ("w", 1 << 70),
        ("w", 1.0),
        ("w", 1, 2),
        ("w",),
    ]
    for record in records:  # in a list of another form ('W' takes lists of word records only)
        in_list = _native.speedups.encode([record, None])
        in_tuple = _native.speedups.encode((record,) + (None,) * 255)
        if in_list is None or in_tuple is None:
            assert in_list is in_tuple is None
            continue
        assert in_list[:2] == b"\xc5l" and in_tuple[:2] == b"\xc5t"
        assert in_list[6:] == in_tuple[6 : len(in_list)] and in_tuple[len(in_list) :] == b"N" * 254
        assert codec.decode(in_list) == [record, None]


@compiled_only
def test_records_decode_exactly_while_decoding_them_evicts_what_was_read_ahead():
    # The decoder looks up the records of a run before decoding them; decoding one may put a
    # new str in the table and evict what the lookahead found for a later record of the run.
    # 60,000 distinct words (more than the table holds) in runs of repeats and new words, with
    # atoms that change, must still decode to exactly the records sent.
    records = [(f"e{(i * 7919) % 60_000}", (i // 3) % 4) for i in range(240_000)]
    records[::97] = [(f"e{i}", None) for i in range(len(records[::97]))]
    assert codec.decode(codec.encode(records)) == records
    assert codec.decode(codec.encode(records[::-1])) == records[::-1]


# ============================================================================================
# Many workers, either path, and one of each


def _keyed_count(worker, pure_on=()):
    if worker.index in pure_on:
        _native.speedups = None  # this process only (forked)
    words = [f"w{i % 97}" for i in range(worker.index, 6000, worker.peers)]
    totals: collections.Counter = collections.Counter()
    batches: collections.Counter = collections.Counter()

    def build(scope):
        inp, stream = scope.new_input()
        stream.map(lambda w: (w, 1)).aggregate(
            lambda _k, v, acc: acc + v, lambda k, acc: (k, acc)
        ).for_each(lambda _t, b: totals.update(dict(b)))
        stream.exchange().for_each(lambda _t, b: batches.update(b))
        return inp

    inp = worker.dataflow(build)
    for i in range(0, len(words), 500):
        inp.send_batch(words[i : i + 500])
    inp.close()
    worker.run()
    return dict(totals), dict(batches)


def _check_counts(results, peers):
    want = collections.Counter(f"w{i % 97}" for i in range(6000))
    for which in (0, 1):
        parts = [r[which] for r in results]
        assert sum(map(len, parts)) == len(want)  # every key on exactly one worker
        assert {k: v for p in parts for k, v in p.items()} == want
        for w, part in enumerate(parts):
            assert all(route(k, peers) == w for k in part)


@pytest.mark.parametrize("workers", [2, 3])
def test_keyed_and_batch_counts_on_many_workers(exchange_path, workers):
    _check_counts(pt.execute(_keyed_count, workers=workers, timeout=60), workers)


def test_a_pure_python_worker_and_a_compiled_one_understand_each_other():
    if _native.speedups is None:
        pytest.skip("needs the compiled extension on one side")
    results = pt.execute(lambda w: _keyed_count(w, pure_on=(1,)), workers=2, timeout=60)
    _check_counts(results, 2)


@compiled_only
def test_a_large_codec_frame_read_into_its_own_buffer_decodes():
    import io

    from pytimely.communication.wire import FrameReader, encode_data

    part = [(f"word{i % 5000}", i) for i in range(20_000)]  # over the reader's direct-read size
    data, buffers = serialize((3, part))
    assert data[0] == codec.MAGIC and len(data) > 1 << 16
    stream = io.BytesIO(b"".join(bytes(c) for c in encode_data(9, 1, data, buffers)))
    kind, source, channel, payload, bufs = FrameReader(stream.readinto).read_frame()
    assert (source, channel) == (1, 9) and isinstance(payload, bytearray)
    assert deserialize(payload, bufs) == (3, part)


@compiled_only
def test_equal_word_and_small_atom_records_decode_as_one_tuple_and_stay_right():
    # A record (short str, one-byte atom) decoded again is the tuple decoded last for the same
    # str and atom (tuples are immutable); any other second item, or a different atom, is a
    # tuple of its own with the right value, also after the word's cache entry was evicted.
    batch = [("w", 1), ("w", 1), ("w", 2), ("w", None), ("w", True), ("w", 1), ("w", 300)]
    first = codec.decode(codec.encode(batch))
    assert first == batch
    assert [type(b) for _a, b in first] == [int, int, int, type(None), bool, int, int]
    assert first[0] is first[1] and first[1] is not first[2] and first[2] is not first[5]
    assert codec.decode(codec.encode([("w", 1)]))[0] is first[5]
    # Flood the string cache (and with it the records it holds), then decode again.
    codec.decode(codec.encode([(f"flood{i}", 1) for i in range(200_000)]))
    again = codec.decode(codec.encode(batch))
    assert again == batch and again[0] is again[1]
    # A record at the very end of a payload (its atom the last byte) decodes right too.
    for tail in (("end", None), ("end", 7)):
        assert codec.decode(codec.encode([tail]))[0] == tail


@compiled_only
def test_the_compiled_pause_of_the_collector_nests_and_leaves_a_long_steps_end_to_the_caller():
    """``pause_collector``/``resume_collector`` count pauses as ``pytimely.worker``'s Python
    pair does: the collector is off from the first pause to the last resume; the last resume
    of a long step keeps the pause for the caller (who freezes, then resumes with False)."""
    import gc

    native = _native.speedups
    assert gc.isenabled() and not native.collector_paused()
    assert native.pause_collector() is True and not gc.isenabled()
    assert native.pause_collector() is True  # a second worker thread's step
    assert native.resume_collector(True) is False and not gc.isenabled()  # not the last
    assert native.resume_collector(True) is True  # the last, of a long step: left to us
    assert not gc.isenabled() and native.collector_paused()
    assert native.resume_collector(False) is False
    assert gc.isenabled() and not native.collector_paused()
    with pytest.raises(RuntimeError, match="not paused"):
        native.resume_collector(False)
    gc.disable()  # a program that manages the collector itself: nothing to pause
    try:
        assert native.pause_collector() is False and not native.collector_paused()
    finally:
        gc.enable()
