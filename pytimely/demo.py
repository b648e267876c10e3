"""The main job (``make demo``): a small end-to-end run on an embedded default.

Until the Spark pipeline lands this runs a word count over rounds of input, a Collatz loop in an
iterative scope, and a capture to a file replayed into a fresh dataflow, and prints a summary.
"""

from __future__ import annotations

import os
import tempfile
import time

import pytimely as pt
from pytimely.capture import FileReader, FileWriter, replay_into

WORDS = "the quick brown fox jumps over the lazy dog the end".split()


def wordcount(path: str) -> dict:
    def work(worker):
        def build(scope):
            inp, lines = scope.new_input()
            counts = (
                lines.flat_map(str.split)
                .map(lambda w: (w, 1))
                .aggregate(lambda k, v, acc: acc + v, lambda k, acc: (k, acc))
            )
            counts.capture_into(FileWriter(path))
            return inp, counts.probe(), counts.capture()

        inp, probe, cap = worker.dataflow(build)
        for r in range(5):
            inp.send(" ".join(WORDS[r:] + WORDS[:r]))
            inp.advance_to(r + 1)
            worker.step_while(lambda: probe.less_than(inp.time))
        inp.close()
        return cap

    cap = pt.execute(work)[0]
    return {t: dict(recs) for t, recs in cap.extract()}


def collatz(limit: int) -> int:
    def build(scope):
        start = scope.to_stream(range(1, limit))

        def body(inner):
            handle, loop = inner.feedback(1)
            step = start.enter(inner).concat(loop).map(
                lambda x: x // 2 if x % 2 == 0 else 3 * x + 1
            )
            step.filter(lambda x: x != 1).connect_loop(handle)
            return step.filter(lambda x: x == 1).leave()

        return scope.iterative(body).count().capture()

    return pt.example(build).extract()[0][1][0]


def main() -> int:
    t0 = time.perf_counter()
    out = tempfile.mkdtemp(prefix="pytimely-demo-")
    path = os.path.join(out, "wordcount.ptc")
    counts = wordcount(path)
    replayed = pt.example(lambda scope: replay_into([FileReader(path)], scope).capture()).extract()
    ok = {t: dict(recs) for t, recs in replayed} == counts
    print("pytimely demo")
    print(f"  word counts per round: {len(counts)} rounds, round 0 = {sorted(counts[0].items())[:4]} ...")
    print(f"  capture file: {path} ({os.path.getsize(path)} bytes); replay identical: {ok}")
    print(f"  collatz: {collatz(1000)} of 999 starting values reached 1")
    print(f"  done in {time.perf_counter() - t0:.2f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
