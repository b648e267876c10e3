"""pytimely.io.postgres against a real PostgreSQL 15 (a private cluster the session starts).

A job writes running totals per user into a table; killed in the middle and restarted on
another number of workers, the table still holds each user's totals exactly once.

A server that goes away mid-run: the connectors' connections terminated by the server
(``pg_terminate_backend``, on the session's cluster) and a server restarted (a cluster of the
test's own) are reconnected to and the table is exact; a server stopped for good (a cluster of
the test's own) fails the job with a WorkerFailure naming the connector and the address within
the connector's ``connect_timeout``.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import sys
import time

import pytest

import pytimely as pt
from pytimely import io
from pytimely.errors import OperatorError, TimelyError, WorkerFailure

sys.path.insert(0, os.path.dirname(__file__))
import io_job  # noqa: E402

# The [postgres] extra is part of [all], which `make test` installs: missing, the tests fail.
import psycopg  # noqa: E402
from brokers import meanwhile, wait_for_a_publish  # noqa: E402
from pgcluster import PostgresCluster  # noqa: E402

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
        TimelyError, match=r"PostgresSink 'pg:t' \(table t at 127\.0\.0\.1:1\): no working conn"
    ):
        sink.publish(writer.stage())
    assert time.monotonic() - started < 15


# -- change data capture -----------------------------------------------------------------------

SLOT_AT = "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s"


def _captured_clicks(pg, table: str, slot: str) -> tuple[collections.Counter, str]:
    """A table ``table`` of clicks and a slot ``slot`` created before 3,000 inserts into it in 30
    transactions (and some updates and deletes); the clicks per user and the slot's LSN."""
    clicks: collections.Counter = collections.Counter()
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"CREATE TABLE {table} (id serial PRIMARY KEY, user_id text)")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (slot,))
        start = conn.execute(SLOT_AT, (slot,)).fetchone()[0]
        for t in range(30):
            with conn.transaction():
                users = [f"u{(t * 100 + i) % 17}" for i in range(100)]
                clicks.update(users)
                with conn.cursor().copy(f"COPY {table} (user_id) FROM STDIN") as copy:
                    for u in users:
                        copy.write_row((u,))
            if t % 10 == 9:
                conn.execute(f"UPDATE {table} SET user_id = user_id WHERE id % 7 = 0")
                conn.execute(f"DELETE FROM {table} WHERE id % 50 = 0")
    return clicks, start


def _cdc_build(
    pg, slot: str, table: str, staging: str, fail_at_id: int | None = None, slow: float = 0.0,
    clicks: str = "cdc_clicks",
):  # fmt: skip
    from pytimely.io.postgres_cdc import PostgresCdcSource

    def click(change):
        row = change["row"]
        if fail_at_id is not None and row["id"] == fail_at_id:
            raise RuntimeError(f"injected failure at row {fail_at_id}")
        if slow:
            time.sleep(slow)
        return (row["user_id"], 1)

    def build(scope):
        changes = io.read(scope, PostgresCdcSource(pg.dsn, slot, tables=[f"public.{clicks}"],
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
    clicks, start = _captured_clicks(postgres, "cdc_clicks", "cdc_test")
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
        now = conn.execute(SLOT_AT, ("cdc_test",)).fetchone()[0]
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


# -- a server that goes away -------------------------------------------------------------------


def _terminate(pg, application_name: str) -> int:
    """``pg_terminate_backend`` of every connection called ``application_name``: how many."""
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        return len(
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (application_name,),
            ).fetchall()
        )


def _wait_for_a_connection(pg, application_name: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        with psycopg.connect(pg.dsn) as conn:
            if conn.execute(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = %s", (application_name,)
            ).fetchone():
                return
        time.sleep(0.05)
    raise AssertionError(f"no connection {application_name!r} within the time allowed")


def _terminating(pg, staging: str, names: list[str], seconds: float = 2.0):
    """After the first publish, terminate the connections called ``names`` every 0.1 s for
    ``seconds``; returns the action and the count of terminations per name."""
    killed: collections.Counter = collections.Counter()

    def action() -> None:
        wait_for_a_publish(staging, time.monotonic() + 60)
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            for name in names:
                killed[name] += _terminate(pg, name)
            time.sleep(0.1)

    return action, killed


def test_a_sink_whose_connections_the_server_terminates_carries_on_exactly_once(postgres, tmp_path):
    """Two workers write running totals (a slow map).  After the first publish the test locks
    the table, so that the next publish stops in the middle of its transaction (its marker row
    written, its rows not), and terminates that connection; then it terminates the sink's
    connections every 0.1 s for 2 s.  Each publish that lost its connection runs again whole
    over a new one, and the table holds every user's totals exactly once."""
    _table(postgres, "terminated")
    inp, ck, staging = str(tmp_path / "in"), str(tmp_path / "ck"), str(tmp_path / "staging")
    clicks = io_job.write_clicks(inp, 4, 500, 20)
    sink = PostgresSink(postgres.dsn, "terminated", ["user_id", "total"], staging)
    build = io_job.make_build(inp, "", slow=0.002, sink=sink)
    name = "pytimely pg:terminated"
    terminate_often, killed = _terminating(postgres, staging, [name])
    waiting = (
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s "
        "AND state = 'active' AND wait_event_type = 'Lock'"
    )

    def action() -> None:
        wait_for_a_publish(staging, time.monotonic() + 60)
        with (
            psycopg.connect(postgres.dsn) as lock,
            psycopg.connect(
                postgres.dsn,
                autocommit=True,  # pg_stat_activity is read once per transaction
            ) as look,
        ):
            lock.execute("LOCK TABLE terminated IN ACCESS EXCLUSIVE MODE")
            deadline = time.monotonic() + 30
            while not (pids := look.execute(waiting, (name,)).fetchall()):
                assert time.monotonic() < deadline, "no publish waited for the lock"
                time.sleep(0.02)
            ended = look.execute("SELECT pg_terminate_backend(%s)", pids[0]).fetchone()[0]
            killed["in the middle of a transaction"] += ended
            lock.rollback()
        terminate_often()

    with meanwhile(action):
        pt.execute(io.job(build, checkpoint=ck, **SMALL_EPOCHS), workers=2)
    assert killed["in the middle of a transaction"] == 1 and killed[name] >= 1, killed
    _exactly_once(_totals(postgres, "terminated"), clicks)


def test_changes_captured_while_the_server_terminates_the_connections_land_once(postgres, tmp_path):
    """3,000 inserts captured through a slot into running totals (a slow map; one worker, since
    a worker without a partition of the slot ends its reading at once and holds back every
    checkpoint but the last),
    while the server terminates the source's and the sink's connections every 0.1 s for 2 s:
    the source peeks the slot again over a new connection, the sink runs its transaction again,
    and the totals are exact."""
    _table(postgres, "cdc_terminated_totals")
    clicks, start = _captured_clicks(postgres, "cdc_terminated", "cdc_terminated")
    staging, ck = str(tmp_path / "staging"), str(tmp_path / "ck")
    build = _cdc_build(postgres, "cdc_terminated", "cdc_terminated_totals", staging,
                       slow=0.001, clicks="cdc_terminated")  # fmt: skip
    names = ["pytimely pg-cdc:cdc_terminated", "pytimely pg:cdc_terminated_totals"]
    action, killed = _terminating(postgres, staging, names)
    with meanwhile(action):
        pt.execute(io.job(build, checkpoint=ck, **SMALL_EPOCHS))
    assert all(killed[name] >= 1 for name in names), killed
    _exactly_once(_totals(postgres, "cdc_terminated_totals"), clicks)
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        now = conn.execute(SLOT_AT, ("cdc_terminated",)).fetchone()[0]
        conn.execute("SELECT pg_drop_replication_slot('cdc_terminated')")
    from pytimely.io.postgres_cdc import lsn_value

    assert lsn_value(now) > lsn_value(start)


def test_a_server_restarted_mid_run_is_reconnected_to_and_the_totals_are_exact(tmp_path):
    """On a cluster of the test's own, a job captures 3,000 inserts into running totals (a slow
    map, one worker); after the first publish the server is stopped, and started again 1 s
    later on its port: the source and the sink connect again and the totals are exact."""
    with PostgresCluster() as pg:
        _table(pg, "totals")
        clicks, _ = _captured_clicks(pg, "clicks", "slot")
        staging, ck = str(tmp_path / "staging"), str(tmp_path / "ck")
        build = _cdc_build(pg, "slot", "totals", staging, slow=0.001, clicks="clicks")
        before: list[int] = []

        def restart() -> None:
            wait_for_a_publish(staging, time.monotonic() + 60)
            before.append(sum(map(len, _totals(pg, "totals").values())))
            pg.halt()
            time.sleep(1)
            pg.start()

        with meanwhile(restart):
            pt.execute(io.job(build, checkpoint=ck, **SMALL_EPOCHS))
        assert before and 0 < before[0] < sum(clicks.values())  # stopped in the middle
        _exactly_once(_totals(pg, "totals"), clicks)


@pytest.mark.parametrize("side", ["PostgresSink", "PostgresCdcSource"])
def test_a_server_gone_for_good_fails_the_job_naming_the_connector(tmp_path, side):
    """On a cluster of the test's own, the server is stopped mid-run (after the sink's first
    publish; once the source is reading) and not started again: the job fails with a
    WorkerFailure naming the connector and the server's host:port (not the password of the
    connection string) within the connector's 3 s connect_timeout (and a few seconds to stop
    the workers)."""
    from pytimely.io.postgres_cdc import PostgresCdcSource

    inp, out = str(tmp_path / "in"), str(tmp_path / "out")
    ck, staging = str(tmp_path / "ck"), str(tmp_path / "staging")
    with PostgresCluster() as pg:
        dsn = pg.dsn + " password=hunter2"  # trust authentication: never asked for
        if side == "PostgresSink":
            _table(pg, "gone")
            io_job.write_clicks(inp, 2, 1000, 10)
            sink = PostgresSink(dsn, "gone", ["user_id", "total"], staging, connect_timeout=3)
            build = io_job.make_build(inp, "", slow=0.002, sink=sink)
            name = f"PostgresSink 'pg:gone' (table gone at 127.0.0.1:{pg.port})"
        else:
            _captured_clicks(pg, "clicks", "slot")
            source = PostgresCdcSource(dsn, "slot", connect_timeout=3)  # unbounded: reads on

            def build(scope):
                changes = io.read(scope, source).map(lambda c: (c["table"], 1))
                io.write(changes, io.JsonLinesSink(out))

            name = f"PostgresCdcSource 'pg-cdc:slot' (slot 'slot' at 127.0.0.1:{pg.port})"
        stopped: list[float] = []

        def stop() -> None:
            if side == "PostgresSink":
                wait_for_a_publish(staging, time.monotonic() + 60)
            else:  # the reading worker commits no checkpoint before the end: see above
                _wait_for_a_connection(pg, "pytimely pg-cdc:slot", time.monotonic() + 60)
                time.sleep(0.5)
            pg.halt()
            stopped.append(time.monotonic())

        with meanwhile(stop), pytest.raises(WorkerFailure, match=re.escape(name)) as failure:
            pt.execute(io.job(build, checkpoint=ck, **SMALL_EPOCHS), workers=2)
        failed = time.monotonic()
    assert stopped and failed - stopped[0] < 20
    text = str(failure.value)
    assert re.search(r"no working connection to the server for \d+\.\d s", text)
    assert "up to 3 s" in text and "last error:" in text and "hunter2" not in text
