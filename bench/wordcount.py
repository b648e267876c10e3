"""Word count throughput: words exchanged by word and counted, on 1 worker and 2 processes.

10 million words drawn (seeded) from a fixed 10,000-word vocabulary, in batches of 1,000 words
per timestamp.  Each worker generates its share of the batches, the words are exchanged by word
(``pt.Exchange``) and counted per word by an operator that keeps running totals and reports
them when the input completes; the counts are verified against ``collections.Counter``.

Two variants:

* ``records`` (default): batches are Python lists of ``str``; counting uses ``Counter.update``.
* ``--columnar``: batches are numpy arrays of word ids; routing and counting are vectorized.

Prints JSON with records/s per configuration and the 2-process/1-worker ratio.
Targets (issue 4): >= 3 M records/s on one worker, 2 processes >= 1.7x one worker.

    python bench/wordcount.py [--words N] [--batch B] [--columnar] [--workers 1,2]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time

import numpy as np

import pytimely as pt
from pytimely.synchronization import barrier

VOCAB = 10_000


def vocabulary() -> list[str]:
    rng = np.random.default_rng(7)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = set()
    while len(words) < VOCAB:
        n = int(rng.integers(3, 10))
        words.add("".join(rng.choice(letters, n)))
    return sorted(words)


def batches_for(worker_index: int, peers: int, words: int, batch: int):
    """The (seeded) word-id batches this worker generates: batch k goes to worker k % peers."""
    n_batches = words // batch
    for k in range(worker_index, n_batches, peers):
        yield k, np.random.default_rng(k).integers(0, VOCAB, batch)


def run(words: int, batch: int, columnar: bool, workers: int) -> dict:
    vocab = vocabulary()

    def work(worker):
        result = [None]

        def build(scope):
            inp, stream = scope.new_input()
            totals = np.zeros(VOCAB, dtype=np.int64) if columnar else collections.Counter()

            def count(inp_port):
                for _t, b in inp_port.drain_batches():
                    if columnar:
                        totals[:] += np.bincount(b, minlength=VOCAB)
                    else:
                        totals.update(b)
                if inp_port.frontier.is_empty():
                    result[0] = totals

            if columnar:
                routed = stream.unary(pt.Exchange(), "Exchange", _forward)  # vectorized on numpy
            else:
                routed = stream.exchange()
            routed.sink(pt.Pipeline, "Count", count, interest=pt.FrontierInterest.ALWAYS)
            return inp

        inp = worker.dataflow(build)
        local = list(batches_for(worker.index, worker.peers, words, batch))
        if not columnar:
            local = [(k, [vocab[i] for i in b.tolist()]) for k, b in local]
        barrier(worker)  # start the clock together (processes start at different moments)
        t0 = time.perf_counter()
        for step, (_k, b) in enumerate(local):
            inp.send_batch(b)
            inp.advance_to(step + 1)
            if step % 16 == 15:
                worker.step()
        inp.close()
        worker.run()
        elapsed = time.perf_counter() - t0
        totals = result[0]
        if columnar:
            counts = {vocab[i]: int(c) for i, c in enumerate(totals) if c}
        else:
            counts = dict(totals)
        return elapsed, counts

    t0 = time.perf_counter()
    results = pt.execute(work, workers=workers)
    wall = time.perf_counter() - t0
    merged: dict[str, int] = {}
    disjoint = True
    for _e, counts in results:
        for w, c in counts.items():
            disjoint = disjoint and w not in merged
            merged[w] = c
    exp = np.zeros(VOCAB, dtype=np.int64)
    for _k, b in batches_for(0, 1, words, batch):
        exp += np.bincount(b, minlength=VOCAB)
    ok = disjoint and all(merged.get(vocab[i], 0) == int(exp[i]) for i in range(VOCAB))
    compute = max(e for e, _c in results)
    return {
        "variant": "columnar" if columnar else "records",
        "workers": workers,
        "words": words,
        "batch": batch,
        "seconds": round(compute, 3),
        "wall_with_startup_s": round(wall, 3),
        "records_per_s": round(words / compute),
        "verified": ok,
    }


def _forward(cap, info):
    cap.drop()

    def logic(inp, out):
        for t, b in inp.drain_batches():
            out.forward(t, b)

    return logic


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--words", type=int, default=10_000_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--columnar", action="store_true")
    ap.add_argument("--workers", default="1,2")
    args = ap.parse_args(argv)
    results = [run(args.words, args.batch, args.columnar, int(w)) for w in args.workers.split(",")]
    out = {"benchmark": "wordcount", "python": sys.version.split()[0], "results": results}
    if len(results) >= 2:
        out["speedup_2_over_1"] = round(
            results[1]["records_per_s"] / results[0]["records_per_s"], 2
        )
    out["targets"] = {"records_per_s_1_worker": 3_000_000, "speedup_2_over_1": 1.7}
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
