"""Change data capture from one PostgreSQL table into running totals in another, exactly once.

The job reads the committed inserts into ``orders(id, customer, amount)`` through a logical
replication slot, keeps a running total per customer (``stateful_map``), and writes every new
total into ``customer_totals(customer, orders, total)``.  Checkpoints go to ``--checkpoint``;
run it again after a crash (on any number of workers) and it carries on where the last
committed checkpoint left off: each order is counted once, each total written once.

    $ python examples/postgres_cdc_to_postgres.py --dsn "host=127.0.0.1 dbname=shop" \\
          --checkpoint ck/ --staging staging/ [--workers 2] [--orders 1000] [--follow]

``--orders N`` first inserts N synthetic orders (in transactions of 100), so that the example
runs against an empty database; it creates both tables and the slot if they do not exist.
Without ``--follow`` the job stops at the changes committed when it started (a bounded run);
with it, it keeps reading new orders until interrupted.
"""

from __future__ import annotations

import argparse
import random

import pytimely as pt
from pytimely import io
from pytimely.io.postgres import PostgresSink
from pytimely.io.postgres_cdc import PostgresCdcSource


def prepare(dsn: str, orders: int, seed: int = 1) -> None:
    """Create the tables; insert ``orders`` synthetic orders."""
    import psycopg

    rng = random.Random(seed)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS orders (id serial PRIMARY KEY, customer text, amount int)"
        )
        conn.execute(
            "CREATE TABLE IF NOT EXISTS customer_totals (customer text, orders int, total int)"
        )
        PostgresCdcSource(dsn, "orders_slot").partitions()  # creates the slot if missing
        for start in range(0, orders, 100):
            with (
                conn.transaction(),
                conn.cursor().copy("COPY orders (customer, amount) FROM STDIN") as copy,
            ):
                for _ in range(start, min(orders, start + 100)):
                    copy.write_row((f"c{rng.randrange(20)}", rng.randrange(1, 100)))


def build_for(dsn: str, staging: str, follow: bool):
    """The job's build function."""

    def add(totals, amount):
        orders, total = totals
        totals = (orders + 1, total + amount)
        return totals, totals

    def build(scope):
        changes = io.read(scope, PostgresCdcSource(dsn, "orders_slot", tables=["public.orders"],
                                                   stop_at_end=not follow))  # fmt: skip
        orders = changes.filter(lambda c: c["op"] == "insert").map(
            lambda c: (c["row"]["customer"], c["row"]["amount"])
        )
        totals = orders.stateful_map(lambda: (0, 0), add, name="CustomerTotals")
        rows = totals.map(lambda kv: (kv[0], kv[1][0], kv[1][1]))
        io.write(rows, PostgresSink(dsn, "customer_totals", ["customer", "orders", "total"],
                                    staging))  # fmt: skip

    build.__qualname__ = "customer_totals"
    return build


def main(argv: list[str] | None = None) -> None:
    """Parse the command line, prepare the database, run the job."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--dsn", required=True, help="libpq connection string")
    ap.add_argument("--checkpoint", required=True, help="checkpoint directory")
    ap.add_argument("--staging", required=True, help="staging directory of the sink")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--orders", type=int, default=0, help="synthetic orders to insert first")
    ap.add_argument("--follow", action="store_true", help="keep reading new orders")
    args = ap.parse_args(argv)
    prepare(args.dsn, args.orders)
    job = io.job(build_for(args.dsn, args.staging, args.follow), checkpoint=args.checkpoint)
    reports = pt.execute(job, workers=args.workers)
    print(f"read {sum(r.records for r in reports)} changes on {args.workers} worker(s)")


if __name__ == "__main__":
    main()
