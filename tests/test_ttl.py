"""State that expires: ``stateful_map(ttl=..., on_expire=...)`` in event time against plain
Python on random out-of-order input on 1, 2 and 3 workers; memory bounded on an endless stream
of new keys; ``ttl_seconds`` woken by the worker's clock with no input arriving."""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict

import pytest
from test_keyed import WORKERS, by_sender, flatten, send_out_of_order

import pytimely as pt

pytestmark = pytest.mark.timeout(120)

TTL = 4


def reference(records) -> Counter:
    """Per key, a running count that starts afresh after ``TTL`` time units without a record
    (a record at ``last + TTL`` still continues it), emitted at every record's time, and each
    run's final count at ``last + TTL``."""
    out = Counter()
    by_key = defaultdict(list)
    for t, k, _v in records:
        by_key[k].append(t)
    for k, times in by_key.items():
        times.sort()
        n, last = 0, None
        for t in times:
            if last is not None and t > last + TTL:
                out[(last + TTL, (k, ("expired", n)))] += 1
                n = 0
            n += 1
            last = t
            out[(t, (k, n))] += 1
        out[(last + TTL, (k, ("expired", n)))] += 1
    return out


@pytest.mark.parametrize("workers", WORKERS)
def test_expiring_running_counts_equal_plain_python(workers):
    gen = random.Random(workers)
    records = [(gen.randrange(60), gen.choice("abcdefg"), f"r{i}") for i in range(300)]

    def work(worker):
        def build(scope):
            (h, cap), stream = scope.new_unordered_input()
            counts = stream.map(lambda r: (r[1], 1)).stateful_map(
                int,
                lambda n, one: (n + one, n + one),
                ttl=TTL,
                on_expire=lambda k, n: ("expired", n),
            )
            return h, cap, counts.capture()

        h, cap, captured = worker.dataflow(build)
        mine = [(r[0], r) for r in by_sender(records, worker, lambda r: int(r[2][1:]))]
        send_out_of_order(worker, [(h, cap, mine)], random.Random(worker.index))
        worker.run()
        return captured.extract()

    assert flatten(pt.execute(work, workers=workers, timeout=60)) == reference(records)


@pytest.mark.parametrize("workers", WORKERS)
def test_keyed_process_with_a_ttl_equals_plain_python(workers):
    gen = random.Random(workers + 100)
    records = [(gen.randrange(60), gen.choice("abcdefg"), f"r{i}") for i in range(300)]

    def count(ctx, key, _one):
        ctx.state = (ctx.state or 0) + 1
        ctx.emit((key, ctx.state))

    def expired(ctx, key):
        ctx.emit((key, ("expired", ctx.state)))

    def work(worker):
        def build(scope):
            (h, cap), stream = scope.new_unordered_input()
            pairs = stream.map(lambda r: (r[1], 1))
            return h, cap, pairs.keyed_process(count, ttl=TTL, on_expire=expired).capture()

        h, cap, captured = worker.dataflow(build)
        mine = [(r[0], r) for r in by_sender(records, worker, lambda r: int(r[2][1:]))]
        send_out_of_order(worker, [(h, cap, mine)], random.Random(worker.index))
        worker.run()
        return captured.extract()

    assert flatten(pt.execute(work, workers=workers, timeout=60)) == reference(records)


def test_memory_stays_bounded_on_an_endless_stream_of_new_keys():
    stats = pt.StateStats()

    def build(scope):
        inp, stream = scope.new_input()
        stream.stateful_map(int, lambda n, v: (n + v, n + v), ttl=10, stats=stats).probe()
        return inp

    worker = pt.Worker()
    inp = worker.dataflow(build)
    for t in range(2_000):  # 20 new keys per time unit, never seen again: 40,000 keys in all
        inp.advance_to(t)
        inp.send_batch([(f"k{t}-{j}", 1) for j in range(20)])
        worker.step()
    inp.close()
    worker.run()
    assert stats.keys == 0
    assert stats.peak_keys <= 20 * 13, stats  # the keys of the last ttl (+ a step's slack)


def test_ttl_in_seconds_forgets_idle_keys_without_any_input_arriving():
    stats = pt.StateStats()

    def build(scope):
        inp, stream = scope.new_input()
        stream.stateful_map(int, lambda n, v: (n + v, n + v), ttl_seconds=0.2, stats=stats).probe()
        return inp

    worker = pt.Worker()
    inp = worker.dataflow(build)
    inp.send_batch([("a", 1), ("b", 1)])
    worker.step()
    assert stats.keys == 2
    deadline = time.monotonic() + 10
    while stats.keys and time.monotonic() < deadline:
        worker.step_or_park(0.5)  # parks until the expiry timer wakes the operator
    assert stats.keys == 0, "the keys did not expire"
    parks = worker.parks
    inp.send_batch([("a", 1)])
    worker.step()
    assert stats.keys == 1 and worker.parks == parks
    inp.close()
    worker.run()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(on_expire=lambda k, s: s), "on_expire needs ttl="),
        (dict(ttl=3, ttl_seconds=1.0), "not both"),
        (dict(ttl=-1), "non-negative"),
        (dict(ttl_seconds=0), "positive"),
    ],
)
def test_wrong_ttl_arguments_are_named(kwargs, message):
    def build(scope):
        scope.to_stream([("a", 1)]).stateful_map(int, lambda n, v: (n, n), **kwargs)

    with pytest.raises(ValueError, match=message):
        pt.example(build)
