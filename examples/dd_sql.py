"""An incremental SQL query with differential dataflow: a join and a group-by kept up to date.

    SELECT city, COUNT(*), SUM(amount)
    FROM orders JOIN customers USING (customer)
    GROUP BY city

Orders arrive and are cancelled, customers move between cities; every change carries its own
timestamp (one per change, all different, sent out of order within a round), yet operators
hold a token only at their least pending time and handle a whole round at once.  The query
is ``join_map`` then ``reduce`` (``pytimely.differential``); after every round its answer at
each timestamp the round completed is checked against the query run from scratch.

    $ python examples/dd_sql.py                           # 2000 orders, 200 customers, 10 rounds
    $ python examples/dd_sql.py 20000 1000 --rounds 20 -w 2
"""

from __future__ import annotations

import argparse
import random
import time
from collections import Counter
from typing import Any

import pytimely as pt
import pytimely.differential as dd

CITIES = ["Oslo", "Paris", "Rome", "Lima", "Kyiv", "Pune"]
TICKS = 1000  # timestamps per round: a round's changes are at times [r * TICKS, (r+1) * TICKS)


def query(orders: dd.Collection, customers: dd.Collection) -> dd.Collection:
    """``(city, (count, total))`` from ``(order, customer, amount)`` and ``(customer, city)``."""
    by_customer = orders.map(lambda o: (o[1], o[2]))
    amounts_by_city = by_customer.join_map(customers, lambda _c, amount, city: (city, amount))

    def totals(city: str, amounts: list[tuple[int, int]]) -> list[tuple[Any, int]]:
        return [((sum(n for _a, n in amounts), sum(a * n for a, n in amounts)), 1)]

    return amounts_by_city.reduce(totals)


def plan(orders: int, customers: int, rounds: int, seed: int = 0) -> list:
    """Each round's changes: ``(table, row, time, diff)`` with distinct times, shuffled."""
    rng = random.Random(seed)
    live: list[tuple[int, int, int]] = []
    home = {c: rng.choice(CITIES) for c in range(customers)}
    out = []
    next_order = 0
    for r in range(rounds + 1):
        changes: list[tuple[str, Any, int]] = []
        if r == 0:
            changes += [("customers", (c, city), 1) for c, city in home.items()]
        for _ in range(orders if r == 0 else max(1, orders // 20)):
            row = (next_order, rng.randrange(customers), rng.randint(1, 100))
            next_order += 1
            live.append(row)
            changes.append(("orders", row, 1))
        if r:
            for row in rng.sample(live, min(len(live), max(1, orders // 40))):
                live.remove(row)
                changes.append(("orders", row, -1))
            for c in rng.sample(range(customers), max(1, customers // 20)):
                changes.append(("customers", (c, home[c]), -1))
                home[c] = rng.choice(CITIES)
                changes.append(("customers", (c, home[c]), 1))
        times = rng.sample(range(r * TICKS, (r + 1) * TICKS), min(TICKS, len(changes)))
        times += [r * TICKS + TICKS - 1] * (len(changes) - len(times))
        stamped = [(table, row, t, diff) for (table, row, diff), t in zip(changes, times)]
        rng.shuffle(stamped)
        out.append(stamped)
    return out


def from_scratch(changes: list, t: int) -> list[tuple[Any, int]]:
    """The query on the tables as they are at time ``t``."""
    tables: dict[str, Counter] = {"orders": Counter(), "customers": Counter()}
    for table, row, u, diff in changes:
        if u <= t:
            tables[table][row] += diff
    orders_of: dict[int, list[tuple[int, int]]] = {}
    for (_o, c, amount), n in tables["orders"].items():
        if n:
            orders_of.setdefault(c, []).append((amount, n))
    amounts: dict[str, Counter] = {}  # city -> amount -> count, as the join has them
    for (c, ci), m in tables["customers"].items():
        for amount, n in orders_of.get(c, ()) if m else ():
            amounts.setdefault(ci, Counter())[amount] += n * m
    out = []
    for ci, by_amount in amounts.items():
        present = {a: n for a, n in by_amount.items() if n}
        if present:
            total = (sum(present.values()), sum(a * n for a, n in present.items()))
            out.append(((ci, total), 1))
    return sorted(out)


def work(worker: pt.Worker, rounds: list) -> tuple[list, list]:
    """Feed one round per epoch of ``TICKS`` times (from worker 0) and wait for it."""

    def build(scope: pt.Scope) -> Any:
        orders_in, orders = dd.new_input(scope)
        customers_in, customers = dd.new_input(scope)
        result = query(orders, customers)
        return orders_in, customers_in, result.capture(), result.probe()

    orders_in, customers_in, captured, probe = worker.dataflow(build)
    sessions = {"orders": orders_in, "customers": customers_in}
    marks = []
    for r, changes in enumerate(rounds):
        if worker.index == 0:
            for table, row, t, diff in changes:
                sessions[table].update_at(row, t, diff)
        end = (r + 1) * TICKS
        orders_in.advance_to(end)
        customers_in.advance_to(end)
        worker.step_while(lambda: probe.less_than(end))
        marks.append(len(captured.raw))
    orders_in.close()
    customers_in.close()
    return captured.raw, marks


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("orders", type=int, nargs="?", default=2000)
    parser.add_argument("customers", type=int, nargs="?", default=200)
    parser.add_argument("--rounds", type=int, default=10)
    options = parser.parse_args(pt.args())
    rounds = plan(options.orders, options.customers, options.rounds)
    started = time.perf_counter()
    results = pt.execute_from_args(lambda worker: work(worker, rounds))
    elapsed = time.perf_counter() - started
    seen: list = []
    for r, changes in enumerate(rounds):
        seen += changes
        output = [u for raw, marks in results for u in raw[: marks[r]]]
        times = sorted({t for _table, _row, t, _d in changes})
        for t in times[:: max(1, len(times) // 20)] + [(r + 1) * TICKS - 1]:
            assert dd.as_of(output, t) == from_scratch(seen, t), f"round {r}, time {t}"
        answer = ", ".join(f"{c} {n}/{s}" for (c, (n, s)), _ in from_scratch(seen, t))
        print(f"round {r}: {len(changes)} changes at {len(times)} times; {answer} (checked)")
    print(f"done in {elapsed:.2f} s")


if __name__ == "__main__":
    main()
