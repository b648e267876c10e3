"""Throughput of the progress tracker (``pytimely.progress.Tracker``).

Workloads (each a loop of "submit a few pointstamp updates, ``propagate_all``, drain
``pushed``"), each run for a fixed wall-clock budget:

* ``chain``: 1,000 identity operators in a line; a capability at the head moves from ``t`` to
  ``t + 1`` every round, so every location's frontier changes (2 pushed changes per location).
* ``chain_noop``: the same chain; every round adds a capability *beyond* the frontier,
  propagates, removes it and propagates again; nothing may move (the O(1) fast path).  Only
  the second ``propagate_all`` of each round is in ``us_per_propagate``.
* ``loop_inner``: ``Product(int, int)`` times; an input, a loop head, ``L`` body operators and a
  feedback operator with summary ``ProductSummary(0, 1)`` back to the head, and an exit; a
  capability at the loop head moves ``(0, i) -> (0, i + 1)`` (one iteration per round).
* ``loop_outer``: the same loop; the input's capability moves ``(e, 0) -> (e + 1, 0)`` (one
  epoch per round, the loop otherwise empty).
* ``nested_loop``: ``Product(Product(int, int), int)`` times: a loop inside a loop, each with
  ``L`` body operators; a capability inside the inner loop advances the inner counter, and every
  tenth round the middle counter.

Prints one JSON object: configuration and, per workload, rounds, pointstamp updates submitted
per second, implication changes pushed per second and microseconds per ``propagate_all``.

Usage: ``python3 bench/progress.py [--seconds S]`` (default 4 s per workload).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from itertools import pairwise

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pytimely.order import Product, ProductDomain, ProductSummary
from pytimely.progress import Builder, Tracker

P = Product
PS = ProductSummary


def chain(n: int) -> Tracker:
    b = Builder(int)
    b.add_node(0, 0, 0, [], "scope")
    for i in range(1, n + 1):
        b.add_node(i, 1, 1, [[[0]]], f"op{i}")
    b.add_node(n + 1, 0, 1, [], "input")
    b.add_edge((n + 1, 0), (1, 0))
    for i in range(1, n):
        b.add_edge((i, 0), (i + 1, 0))
    return b.build()


def loop(body: int) -> tuple[Tracker, int, int]:
    """input(1) -> head(2) -> body(3..) -> exit; last body -> feedback -> head input 1."""
    d = ProductDomain(int, int)
    ident = d.identity()
    b = Builder(d)
    b.add_node(0, 0, 0, [], "scope")
    b.add_node(1, 0, 1, [], "input")
    b.add_node(2, 2, 1, [[[ident]], [[ident]]], "head")
    first = 3
    for k in range(body):
        b.add_node(first + k, 1, 1, [[[ident]]], f"body{k}")
    fb = first + body
    exit_ = fb + 1
    b.add_node(fb, 1, 1, [[[PS(0, 1)]]], "feedback")
    b.add_node(exit_, 1, 0, [[]], "exit")
    b.add_edge((1, 0), (2, 0))
    b.add_edge((2, 0), (first, 0))
    for k in range(body - 1):
        b.add_edge((first + k, 0), (first + k + 1, 0))
    b.add_edge((first + body - 1, 0), (fb, 0))
    b.add_edge((fb, 0), (2, 1))
    b.add_edge((first + body - 1, 0), (exit_, 0))
    return b.build(), 1, 2


def nested_loop(body: int) -> tuple[Tracker, int]:
    """An outer loop (feedback PS(PS(0,1),0)) containing an inner loop (PS(PS(0,0),1))."""
    d = ProductDomain(ProductDomain(int, int), int)
    ident = d.identity()
    b = Builder(d)
    b.add_node(0, 0, 0, [], "scope")
    b.add_node(1, 0, 1, [], "input")
    b.add_node(2, 2, 1, [[[ident]], [[ident]]], "outer head")
    b.add_node(3, 2, 1, [[[ident]], [[ident]]], "inner head")
    n = 4
    inner = list(range(n, n + body))
    n += body
    outer = list(range(n, n + body))
    n += body
    inner_fb, outer_fb, exit_ = n, n + 1, n + 2
    for k in inner + outer:
        b.add_node(k, 1, 1, [[[ident]]], f"op{k}")
    b.add_node(inner_fb, 1, 1, [[[PS(PS(0, 0), 1)]]], "inner feedback")
    b.add_node(outer_fb, 1, 1, [[[PS(PS(0, 1), 0)]]], "outer feedback")
    b.add_node(exit_, 1, 0, [[]], "exit")
    b.add_edge((1, 0), (2, 0))
    b.add_edge((2, 0), (3, 0))
    b.add_edge((3, 0), (inner[0], 0))
    for a, c in pairwise(inner):
        b.add_edge((a, 0), (c, 0))
    b.add_edge((inner[-1], 0), (inner_fb, 0))
    b.add_edge((inner_fb, 0), (3, 1))
    b.add_edge((inner[-1], 0), (outer[0], 0))
    for a, c in pairwise(outer):
        b.add_edge((a, 0), (c, 0))
    b.add_edge((outer[-1], 0), (outer_fb, 0))
    b.add_edge((outer_fb, 0), (2, 1))
    b.add_edge((outer[-1], 0), (exit_, 0))
    return b.build(), inner[body // 2]


def run(tracker: Tracker, step: Callable[[int], int], seconds: float) -> dict:
    """Call ``step(round)`` (which submits updates and returns how many) then
    ``propagate_all`` until ``seconds`` have passed; count pushed changes."""
    rounds = updates = changes = 0
    prop_time = 0.0
    clock = time.perf_counter
    start = clock()
    deadline = start + seconds
    while True:
        updates += step(rounds)
        t0 = clock()
        tracker.propagate_all()
        prop_time += clock() - t0
        changes += len(tracker.drain_pushed())
        for batch in tracker.output_changes:
            batch.clear()
        rounds += 1
        if rounds % 8 == 0 and clock() >= deadline:
            break
    elapsed = clock() - start
    return {
        "rounds": rounds,
        "seconds": round(elapsed, 3),
        "updates": updates,
        "pushed_changes": changes,
        "changes_per_round": round(changes / rounds, 1),
        "updates_per_s": round(updates / elapsed),
        "changes_per_s": round(changes / elapsed),
        "changes_per_s_in_propagate": round(changes / prop_time) if prop_time else None,
        "us_per_propagate": round(1e6 * prop_time / rounds, 2),
    }


def bench_chain(n: int, seconds: float) -> dict:
    tr = chain(n)
    head = n + 1
    tr.update_source(head, 0, 0, 1)
    tr.propagate_all()
    tr.drain_pushed()

    def step(r: int) -> int:
        tr.update_source(head, 0, r, -1)
        tr.update_source(head, 0, r + 1, 1)
        return 2

    res = run(tr, step, seconds)
    assert list(tr.target_frontier(n, 0)) == [res["rounds"]]
    return res


def bench_chain_noop(n: int, seconds: float) -> dict:
    tr = chain(n)
    head = n + 1
    tr.update_source(head, 0, 0, 1)
    tr.propagate_all()
    tr.drain_pushed()

    def step(r: int) -> int:
        tr.update_source(head, 0, 5 + r, 1)
        tr.propagate_all()
        tr.update_source(head, 0, 5 + r, -1)
        return 2

    res = run(tr, step, seconds)
    assert res["pushed_changes"] == 0
    return res


def bench_loop_inner(body: int, seconds: float) -> dict:
    tr, _inp, head = loop(body)
    tr.update_source(head, 0, P(0, 0), 1)
    tr.propagate_all()
    tr.drain_pushed()

    def step(r: int) -> int:
        tr.update_source(head, 0, P(0, r), -1)
        tr.update_source(head, 0, P(0, r + 1), 1)
        return 2

    res = run(tr, step, seconds)
    r = res["rounds"]
    assert list(tr.target_frontier(head, 1)) == [P(0, r + 1)]
    return res


def bench_loop_outer(body: int, seconds: float) -> dict:
    tr, inp, head = loop(body)
    tr.update_source(inp, 0, P(0, 0), 1)
    tr.propagate_all()
    tr.drain_pushed()

    def step(r: int) -> int:
        tr.update_source(inp, 0, P(r, 0), -1)
        tr.update_source(inp, 0, P(r + 1, 0), 1)
        return 2

    res = run(tr, step, seconds)
    r = res["rounds"]
    assert list(tr.target_frontier(head, 1)) == [P(r, 1)]
    return res


def bench_nested(body: int, seconds: float) -> dict:
    tr, holder = nested_loop(body)
    state = {"t": P(P(0, 0), 0)}
    tr.update_source(holder, 0, state["t"], 1)
    tr.propagate_all()
    tr.drain_pushed()

    def step(r: int) -> int:
        old = state["t"]
        if r % 10 == 9:
            new = P(P(old[0][0], old[0][1] + 1), 0)
        else:
            new = P(old[0], old[1] + 1)
        state["t"] = new
        tr.update_source(holder, 0, old, -1)
        tr.update_source(holder, 0, new, 1)
        return 2

    return run(tr, step, seconds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0, help="wall-clock budget per workload")
    ap.add_argument("--chain", type=int, default=1000, help="operators in the chain")
    ap.add_argument("--body", type=int, default=10, help="operators in each loop body")
    args = ap.parse_args()
    results = {
        "chain": bench_chain(args.chain, args.seconds),
        "chain_noop": bench_chain_noop(args.chain, args.seconds),
        "loop_inner": bench_loop_inner(args.body, args.seconds),
        "loop_outer": bench_loop_outer(args.body, args.seconds),
        "nested_loop": bench_nested(args.body, args.seconds),
    }
    out = {
        "benchmark": "progress",
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "config": {
            "seconds_per_workload": args.seconds,
            "chain_operators": args.chain,
            "loop_body_operators": args.body,
            "chain": "1-in/1-out identity operators in a line; head capability t -> t+1",
            "chain_noop": "same chain; +1/-1 beyond the frontier (nothing may move)",
            "loop_inner": "Product(int,int) loop, feedback PS(0,1); head capability "
            "(0,i) -> (0,i+1)",
            "loop_outer": "same loop; input capability (e,0) -> (e+1,0)",
            "nested_loop": "Product(Product(int,int),int) loop in a loop; capability in the "
            "inner body advances the inner counter, every 10th round the middle one",
        },
        "results": results,
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
