"""pytimely.io.postgres against a real PostgreSQL 15 (a private cluster the session starts).

A job writes running totals per user into a table; killed in the middle and restarted on
another number of workers, the table still holds each user's totals exactly once.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time

import pytest

import pytimely as pt
from pytimely import io
from pytimely.errors import OperatorError, TimelyError

sys.path.insert(0, os.path.dirname(__file__))
import io_job  # noqa: E402

# The [postgres] extra is part of [all], which `make test` installs: missing, the tests fail.
import psycopg  # noqa: E402

from pytimely.io.postgres import PostgresSink  # noqa: E402

pytestmark = pytest.mark.timeout(180)

SMALL_EPOCHS = dict(snapshot_every=2, epoch_seconds=0.05, epoch_records=200, read_batch=50)


def _table(pg, name: str) -> None:
    with psycopg.connect(pg.dsn) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {name}")
        conn.execute(f"CREATE TABLE {name} (user_id text, total int)")


def _totals(pg, table: str) -> dict[str, list[int]]:
    with psycopg.connect(pg.dsn) as conn:
        rows = conn.execute(f"SELECT user_id, total FROM {table} ORDER BY user_id, total")
        found: dict[str, list[int]] = {}
        for user, total in rows:
            found.setdefault(user, []).append(total)
    return found


def _build(pg, inp: str, table: str, staging: str):
    sink = PostgresSink(pg.dsn, table, ["user_id", "total"], staging)
    return io_job.make_build(inp, "", sink=sink)


def _exactly_once(found, clicks) -> None:
    wrong = {
        u: found.get(u, [])[:5] for u, n in clicks.items() if found.get(u) != list(range(1, n + 1))
    }
    assert not wrong, f"users whose totals are not 1..n (first five shown): {wrong}"


@pytest.mark.parametrize("workers", [1, 2])
def test_totals_land_in_a_table_once(postgres, tmp_path, workers):
    table = f"totals_{workers}"
    _table(postgres, table)
    inp = str(tmp_path / "in")
    clicks = io_job.write_clicks(inp, 3, 500, 20)
    build = _build(postgres, inp, table, str(tmp_path / "staging"))
    pt.execute(io.job(build, checkpoint=str(tmp_path / "ck"), **SMALL_EPOCHS), workers=workers)
    _exactly_once(_totals(postgres, table), clicks)


def test_a_staged_file_published_twice_lands_once(postgres, tmp_path):
    _table(postgres, "twice")
    sink = PostgresSink(postgres.dsn, "twice", ["user_id", "total"], str(tmp_path))
    writer = sink.writer(0, 1, "run")
    writer.write([("a", 1), ("b", 1)])
    staged = writer.stage()
    sink.publish(staged)
    os.replace(
        os.path.join(tmp_path, staged["file"] + ".sent"), os.path.join(tmp_path, staged["file"])
    )
    sink.publish(staged)  # as after a crash between the commit and the mark: skipped
    assert _totals(postgres, "twice") == {"a": [1], "b": [1]}


def test_a_killed_job_restarts_on_another_worker_count_and_the_table_is_exact(postgres, tmp_path):
    _table(postgres, "killed")
    inp, ck, staging = str(tmp_path / "in"), str(tmp_path / "ck"), str(tmp_path / "staging")
    clicks = io_job.write_clicks(inp, 4, 1500, 30)
    env = dict(os.environ, PYTIMELY_PG_DSN=postgres.dsn)
    script = [sys.executable, io_job.__file__, inp, "pg:killed", ck]
    proc = subprocess.Popen(
        [*script, "2", "0.0005", staging], env=env, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not _totals(postgres, "killed"):
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "nothing was published within 60 s"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    before = sum(map(len, _totals(postgres, "killed").values()))
    assert 0 < before < sum(clicks.values())
    done = subprocess.run([*script, "3", "0", staging], env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    _exactly_once(_totals(postgres, "killed"), clicks)


def test_a_server_that_is_not_there_is_named(tmp_path):
    sink = PostgresSink(
        "host=127.0.0.1 port=1 user=x", "t", ["a"], str(tmp_path), connect_timeout=1
    )
    writer = sink.writer(0, 1, "run")
    writer.write([(1,)])
    started = time.monotonic()
    with pytest.raises(
        TimelyError, match=r"PostgreSQL sink 'pg:t' \(table t at host=127\.0\.0\.1 port=1"
    ):
        sink.publish(writer.stage())
    assert time.monotonic() - started < 15


# -- change data capture -----------------------------------------------------------------------

SLOT_AT = "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'cdc_test'"


def _cdc_build(pg, slot: str, table: str, staging: str, fail_at_id: int | None = None):
    from pytimely.io.postgres_cdc import PostgresCdcSource

    def click(change):
        row = change["row"]
        if fail_at_id is not None and row["id"] == fail_at_id:
            raise RuntimeError(f"injected failure at row {fail_at_id}")
        return (row["user_id"], 1)

    def build(scope):
        changes = io.read(scope, PostgresCdcSource(pg.dsn, slot, tables=["public.cdc_clicks"],
                                                   stop_at_end=True))  # fmt: skip
        inserts = changes.filter(lambda c: c["op"] == "insert")
        totals = inserts.map(click).stateful_map(
            int, lambda n, one: (n + one, n + one), name="Totals"
        )
        io.write(totals, PostgresSink(pg.dsn, table, ["user_id", "total"], staging))

    build.__qualname__ = "cdc_totals"
    return build


def test_changes_captured_from_a_table_land_in_another_exactly_once(postgres, tmp_path):
    """Rows inserted in 30 transactions (and some updates and deletes, which the job ignores)
    are read from a replication slot into running totals in another table; a failure in the
    middle and a restart on two workers leave each user's totals there exactly once, and the
    slot has advanced past what the committed checkpoints cover."""
    _table(postgres, "cdc_totals")
    clicks = collections.Counter()
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS cdc_clicks")
        conn.execute("CREATE TABLE cdc_clicks (id serial PRIMARY KEY, user_id text)")
        conn.execute("SELECT pg_create_logical_replication_slot('cdc_test', 'test_decoding')")
        start = conn.execute(SLOT_AT).fetchone()[0]
        for t in range(30):
            with conn.transaction():
                users = [f"u{(t * 100 + i) % 17}" for i in range(100)]
                clicks.update(users)
                with conn.cursor().copy("COPY cdc_clicks (user_id) FROM STDIN") as copy:
                    for u in users:
                        copy.write_row((u,))
            if t % 10 == 9:
                conn.execute("UPDATE cdc_clicks SET user_id = user_id WHERE id % 7 = 0")
                conn.execute("DELETE FROM cdc_clicks WHERE id % 50 = 0")
    staging, ck = str(tmp_path / "staging"), str(tmp_path / "ck")
    failing = io.job(_cdc_build(postgres, "cdc_test", "cdc_totals", staging, fail_at_id=2500),
                     checkpoint=ck, **SMALL_EPOCHS)  # fmt: skip
    with pytest.raises(OperatorError, match="injected failure at row 2500"):
        pt.execute(failing)
    assert io.CheckpointStore(ck, "cdc_totals").latest() is not None
    reports = pt.execute(
        io.job(_cdc_build(postgres, "cdc_test", "cdc_totals", staging), checkpoint=ck,
               **SMALL_EPOCHS), workers=2)  # fmt: skip
    assert reports[0].restored is not None
    _exactly_once(_totals(postgres, "cdc_totals"), clicks)
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        now = conn.execute(SLOT_AT).fetchone()[0]
        conn.execute("SELECT pg_drop_replication_slot('cdc_test')")
    from pytimely.io.postgres_cdc import lsn_value

    assert lsn_value(now) > lsn_value(start)


def test_the_cdc_example_writes_each_customers_totals_once(postgres, tmp_path):
    """examples/postgres_cdc_to_postgres.py on two workers, run twice (the second run adds
    orders and carries on from the checkpoint): the last total per customer equals a plain
    SQL sum over the orders, and each customer's order counts are 1..n."""
    example = os.path.join(
        os.path.dirname(__file__), "..", "examples", "postgres_cdc_to_postgres.py"
    )
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        for table in ("orders", "customer_totals"):
            conn.execute(f"DROP TABLE IF EXISTS {table}")
    words = ["--dsn", postgres.dsn, "--checkpoint", str(tmp_path / "ck"),
             "--staging", str(tmp_path / "staging"), "--workers", "2"]  # fmt: skip
    for orders in ("700", "300"):
        done = subprocess.run([sys.executable, example, *words, "--orders", orders],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        assert "changes on 2 worker(s)" in done.stdout
    with psycopg.connect(postgres.dsn) as conn:
        sums = "SELECT customer, sum(amount)::int FROM orders GROUP BY customer"
        expected = dict(conn.execute(sums).fetchall())
        counts = dict(conn.execute("SELECT customer, count(*) FROM orders GROUP BY customer"))
        rows = conn.execute("SELECT customer, orders, total FROM customer_totals").fetchall()
        conn.execute("SELECT pg_drop_replication_slot('orders_slot')")
    seen: dict[str, list[int]] = collections.defaultdict(list)
    last: dict[str, int] = {}
    for customer, n, total in rows:
        seen[customer].append(n)
        if n == counts[customer]:
            last[customer] = total
    assert {c: sorted(ns) for c, ns in seen.items()} == {
        c: list(range(1, n + 1)) for c, n in counts.items()
    }
    assert last == expected
