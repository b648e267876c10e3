"""Recovery of a ``pytimely.io`` job: what checkpoints cost, how long a restart takes, and
exactly-once through many SIGKILLs.

The job: ``--files`` JSON-lines files of clicks (``--clicks`` in all, ``--users`` users) ->
``map(click -> (user, 1))`` -> ``stateful_map`` running total per user -> JSON-lines files,
``epoch_seconds=0.1``.  Three measurements, in one run:

* **overhead**: the job without a checkpoint and with one every 10 epochs (about one per
  second), alternating ``--repeat`` times on ``--workers`` workers; records/s by wall time and
  CPU time summed over the worker processes (``time.process_time``), and the ratio.
* **kills**: the checkpointed job as a child process (``pt.execute``, 1 to 3 workers, chosen
  at random each time), SIGKILLed (the whole process group) at a random moment
  (``--kill-after`` seconds, uniform) ``--kills`` times, restarted each time on the same
  checkpoint, then run to the end.  Checked: every user's published totals are exactly
  1..n (nothing lost, nothing doubled).  Reported: the kills, how many landed before the first
  checkpoint committed, and the restarts' start time (reading the checkpoint, restoring state
  and meeting the other workers: ``JobReport.start_seconds``).
* **restart cost vs input behind the checkpoint**: the start time of a restart whose last
  checkpoint lies behind ``--behind-mb`` megabytes of input (10 and 1,000 by default), to show
  that it does not grow with the stream.
* **pipeline**: the issue's end-to-end job, against servers the benchmark starts itself
  (``tests/brokers.py``: Tansu; ``tests/pgcluster.py``: PostgreSQL 15): ``--pipeline-clicks``
  clicks with event times in a 4-partition Kafka topic -> ``read(event_time=..., delay=100)``
  -> per-user tumbling one-second windows (``window_count``) and a running click count per
  user (``stateful_map``, every 50th total kept) -> two ``PostgresSink`` tables.  The job runs
  as a child process on 1 to 3 workers (chosen at random each start) and is SIGKILLed --
  either one worker process or all of them -- at a random moment ``--pipeline-kills`` times,
  restarted each time on the same checkpoint.  Each round's tables are compared, as multisets
  of rows, with what plain Python computes from the clicks: a lost row or a doubled one
  fails the round.

Prints JSON.

    python bench/recovery.py [--clicks 2000000] [--kills 20] [--repeat 3] [--workers 2]
                             [--behind-mb 10 1000] [--pipeline-clicks 300000] [--pipeline-users 200]
                             [--pipeline-kills 20] [--only overhead,kills,restart,pipeline]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import pytimely as pt
from pytimely import io

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

EPOCHS = dict(epoch_seconds=0.1, epoch_records=100_000, read_batch=1_000)


def write_clicks(folder: str, files: int, clicks: int, users: int) -> collections.Counter:
    """The input files; returns the clicks per user."""
    os.makedirs(folder, exist_ok=True)
    counts: collections.Counter = collections.Counter()
    rng = random.Random(7)
    per_file = clicks // files
    for f in range(files):
        users_of = [f"u{rng.randrange(users)}" for _ in range(per_file)]
        counts.update(users_of)
        with open(os.path.join(folder, f"clicks-{f:03d}.jsonl"), "w") as out:
            out.write(
                "".join(json.dumps({"user": u, "n": i}) + "\n" for i, u in enumerate(users_of))
            )
    return counts


def build_for(inp: str, out: str, keep_every: int = 1):
    """The job's build function (``keep_every``: publish every that many-th total only)."""

    def build(scope):
        clicks = io.read(scope, io.JsonLinesSource(inp))
        totals = clicks.map(lambda c: (c["user"], 1)).stateful_map(
            int, lambda n, one: (n + one, n + one), name="Totals"
        )
        if keep_every > 1:
            totals = totals.filter(lambda kv: kv[1] % keep_every == 0)
        io.write(totals, io.JsonLinesSink(out))

    build.__qualname__ = "recovery_bench"
    return build


def write_megabytes(folder: str, files: int, megabytes: float, users: int) -> int:
    """Clicks filling ``files`` files up to ``megabytes`` in all; returns the bytes written."""
    os.makedirs(folder, exist_ok=True)
    per_file = int(megabytes * 1e6 / files)
    total = 0
    for f in range(files):
        with open(os.path.join(folder, f"clicks-{f:03d}.jsonl"), "w") as out:
            written, i = 0, 0
            while written < per_file:
                chunk = "".join(
                    f'{{"user": "u{(i + k) * 7919 % users}", "n": {i + k}}}\n'
                    for k in range(10_000)
                )
                out.write(chunk)
                written += len(chunk)
                i += 10_000
        total += written
    return total


def exactly_once(out: str, counts: collections.Counter) -> bool:
    """Whether every user's published totals are exactly 1..n."""
    found: dict[str, list[int]] = collections.defaultdict(list)
    for name in io.JsonLinesSink(out).published():
        with open(os.path.join(out, name)) as f:
            for line in f:
                user, total = json.loads(line)
                found[user].append(total)
    return set(found) == set(counts) and all(
        sorted(found[u]) == list(range(1, n + 1)) for u, n in counts.items()
    )


def _timed_job(inp: str, out: str, checkpoint: str | None, workers: int) -> dict:
    build = build_for(inp, out)

    def work(worker):
        c0 = time.process_time()
        report = io.job(build, checkpoint=checkpoint, snapshot_every=10, **EPOCHS)(worker)
        return report, time.process_time() - c0

    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    results = pt.execute(work, workers=workers)
    wall = time.perf_counter() - t0
    records = sum(r.records for r, _ in results)
    cpu = sum(c for _, c in results)
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "records": records,
        "records_per_s": round(records / wall),
        "records_per_cpu_s": round(records / cpu),
    }


def overhead(work: str, inp: str, counts, args) -> dict:
    runs: dict[str, list[dict]] = {"none": [], "every 10 epochs": []}
    for _ in range(args.repeat):
        for name in runs:
            ck = os.path.join(work, "ck-overhead")
            shutil.rmtree(ck, ignore_errors=True)
            out = os.path.join(work, "out-overhead")
            run = _timed_job(inp, out, ck if name != "none" else None, args.workers)
            run["exactly_once"] = exactly_once(out, counts)
            runs[name].append(run)
    keys = ("wall_s", "cpu_s", "records_per_s", "records_per_cpu_s")
    med = {
        name: {k: statistics.median(r[k] for r in rs) for k in keys} for name, rs in runs.items()
    }
    return {
        "runs": runs,
        "medians": med,
        "checkpointed_over_none_wall": round(
            med["every 10 epochs"]["records_per_s"] / med["none"]["records_per_s"], 3
        ),
        "checkpointed_over_none_cpu": round(
            med["every 10 epochs"]["records_per_cpu_s"] / med["none"]["records_per_cpu_s"], 3
        ),
    }


_CHILD = """
import json, sys
sys.path.insert(0, {bench!r})
import pytimely as pt
from pytimely import io
import recovery
job = io.job(recovery.build_for({inp!r}, {out!r}, {keep_every}), checkpoint={ck!r},
             snapshot_every=10, **recovery.EPOCHS)
print(json.dumps([r.__dict__ for r in pt.execute(job, workers={workers})]), flush=True)
"""


def _child(inp: str, out: str, ck: str, workers: int, keep_every: int = 1) -> subprocess.Popen:
    code = _CHILD.format(bench=os.path.dirname(os.path.abspath(__file__)), inp=inp, out=out,
                         ck=ck, workers=workers, keep_every=keep_every)  # fmt: skip
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip


def kills(work: str, inp: str, counts, args) -> dict:
    """SIGKILL the job ``--kills`` times; a job that completes before its kill is checked and
    started again from nothing (a new round), so that every kill lands in a running job."""
    rng = random.Random(args.seed)
    killed, before_first_commit, starts, rounds, exact = 0, 0, [], 0, []
    out, ck = "", ""
    restarted = False
    while killed < args.kills:
        if not out:
            rounds += 1
            out = os.path.join(work, f"out-kills-{rounds}")
            ck = os.path.join(work, f"ck-kills-{rounds}")
            restarted = False
        proc = _child(inp, out, ck, rng.choice([1, 2, 3]))
        time.sleep(rng.uniform(*args.kill_after))
        if proc.poll() is None:
            committed = os.path.isdir(ck) and any(
                os.path.exists(os.path.join(ck, d, "_committed.json")) for d in os.listdir(ck)
            )
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=60)
            killed += 1
            before_first_commit += not committed
            restarted = True
            continue
        stdout, stderr = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise SystemExit(f"the job failed: {stderr[-3000:]}")
        if restarted:
            reports = json.loads(stdout.splitlines()[-1])
            starts.append(max(r["start_seconds"] for r in reports))
        exact.append(exactly_once(out, counts))
        out = ""
    if out:  # finish the last round
        proc = _child(inp, out, ck, 2)
        stdout, stderr = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise SystemExit(f"the job failed: {stderr[-3000:]}")
        reports = json.loads(stdout.splitlines()[-1])
        starts.append(max(r["start_seconds"] for r in reports))
        exact.append(exactly_once(out, counts))
    return {
        "kills": killed,
        "kills_before_the_first_commit": before_first_commit,
        "rounds": rounds,
        "exactly_once_every_round": all(exact),
        "restart_start_s_median": round(statistics.median(starts), 3) if starts else None,
    }


def restart_cost(work: str, args) -> dict:
    """Start time of a restart after a kill once ``--behind-mb`` megabytes of input lie
    behind the last committed checkpoint (80% of an input of 1.25x that size)."""
    found = {}
    for megabytes in args.behind_mb:
        inp = os.path.join(work, f"in-{megabytes}mb")
        shutil.rmtree(inp, ignore_errors=True)
        total = write_megabytes(inp, args.files, megabytes * 1.25, args.users)
        out, ck = os.path.join(work, f"out-{megabytes}mb"), os.path.join(work, f"ck-{megabytes}mb")
        for d in (out, ck):
            shutil.rmtree(d, ignore_errors=True)
        proc = _child(inp, out, ck, 2, keep_every=1000)
        deadline = time.monotonic() + 1800
        behind = 0
        while time.monotonic() < deadline and proc.poll() is None:  # kill at 80% read
            time.sleep(0.05)
            store = io.CheckpointStore(ck, "recovery_bench")
            try:  # the job retires older checkpoints as it goes: this one may just vanish
                meta = store.latest() if os.path.isdir(ck) else None
                offsets = store.load(meta).offsets if meta is not None else None
            except io.CheckpointError:
                continue
            if offsets is not None:
                behind = sum(offsets.get("files", {}).values())
                if behind > 0.8 * total:
                    break
        if proc.poll() is not None:
            raise SystemExit(f"the job ended before its kill: {proc.communicate()[1][-2000:]}")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
        checkpoint_bytes = sum(
            os.path.getsize(os.path.join(folder, name))
            for folder, _dirs, names in os.walk(ck)
            for name in names
        )
        again = _child(inp, out, ck, 2, keep_every=1000)
        stdout, stderr = again.communicate(timeout=1800)
        if again.returncode != 0:
            raise SystemExit(f"the restart failed: {stderr[-3000:]}")
        reports = json.loads(stdout.splitlines()[-1])
        found[f"{megabytes:g}_mb"] = {
            "input_bytes_behind_checkpoint": behind,
            "checkpoint_bytes": checkpoint_bytes,
            "start_s": round(max(r["start_seconds"] for r in reports), 3),
        }
        shutil.rmtree(inp, ignore_errors=True)
    sizes = [f"{m:g}_mb" for m in args.behind_mb]
    found["start_ratio_largest_over_smallest"] = round(
        found[sizes[-1]]["start_s"] / found[sizes[0]]["start_s"], 2
    )
    return found


# -- the end-to-end pipeline: Kafka -> event-time windows and keyed state -> PostgreSQL -------

PIPELINE_START = 1_700_000_000_000  # ms: the job's event-time start, before every click
WINDOW_MS, DELAY_MS, TOTALS_EVERY = 1_000, 100, 50
PIPELINE_TABLES = {
    "windows": "user_id text, start_ms bigint, end_ms bigint, clicks bigint",
    "totals": "user_id text, total bigint",
}


def produce_clicks(bootstrap: str, topic: str, clicks: int, users: int, seed: int) -> list:
    """``clicks`` clicks ``{"user", "ts"}`` into a new 4-partition topic, each partition in
    time order but for up to 50 ms of jitter; returns them as ``(user, ts)``."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=4)]).values():
        future.result(timeout=30)
    rng = random.Random(seed)
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    times = [PIPELINE_START + 1_000] * 4
    made = []
    for i in range(clicks):
        p = i % 4
        times[p] += rng.randrange(1, 40)
        user, ts = f"u{rng.randrange(users)}", times[p] - rng.randrange(0, 50)
        made.append((user, ts))
        value = json.dumps({"user": user, "ts": ts})
        while True:
            try:
                producer.produce(topic, value=value, partition=p)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(120) != 0:
        raise SystemExit("the broker did not take every click")
    return made


def pipeline_expected(clicks: list) -> dict[str, collections.Counter]:
    """The tables' rows, by plain Python."""
    windows = collections.Counter((u, ts // WINDOW_MS * WINDOW_MS) for u, ts in clicks)
    per_user = collections.Counter(u for u, _ts in clicks)
    return {
        "windows": collections.Counter(
            {(u, start, start + WINDOW_MS, n): 1 for (u, start), n in windows.items()}
        ),
        "totals": collections.Counter(
            {
                (u, k): 1
                for u, n in per_user.items()
                for k in range(TOTALS_EVERY, n + 1, TOTALS_EVERY)
            }
        ),
    }


def pipeline_build(bootstrap: str, topic: str, dsn: str, staging: str):
    """The pipeline job's build function (module docstring)."""
    from pytimely.io.kafka import KafkaSource
    from pytimely.io.postgres import PostgresSink

    def build(scope):
        source = KafkaSource(bootstrap, topic, stop_at_end=True)
        clicks = io.read(scope, source, event_time=lambda c: c["ts"], delay=DELAY_MS)
        pairs = clicks.map(lambda c: (c["user"], c["ts"]))
        windows = pairs.window_count(pt.Tumbling(WINDOW_MS), event_time=lambda r: r[1])
        columns = ["user_id", "start_ms", "end_ms", "clicks"]
        io.write(
            windows.output,
            PostgresSink(dsn, "windows", columns, os.path.join(staging, "w"), name="windows"),
        )
        totals = pairs.map(lambda p: (p[0], 1)).stateful_map(
            int, lambda n, one: (n + one, n + one), name="Totals"
        )
        io.write(
            totals.filter(lambda kv: kv[1] % TOTALS_EVERY == 0),
            PostgresSink(
                dsn, "totals", ["user_id", "total"], os.path.join(staging, "t"), name="totals"
            ),  # fmt: skip
        )

    build.__qualname__ = "recovery_pipeline"
    return build


_PIPELINE_CHILD = """
import json, sys, time
sys.path.insert(0, {bench!r})
import pytimely as pt
from pytimely import io
import recovery
job = io.job(recovery.pipeline_build({bootstrap!r}, {topic!r}, {dsn!r}, {staging!r}),
             checkpoint={ck!r}, snapshot_every={every}, start=recovery.PIPELINE_START,
             timeout=120)
def work(worker):
    c0 = time.process_time()
    report = job(worker)
    report.cpu_s = time.process_time() - c0
    return report
t0 = time.perf_counter()
reports = pt.execute(work, workers={workers})
wall = time.perf_counter() - t0
print(json.dumps({{"wall_s": wall, "reports": [r.__dict__ for r in reports]}}), flush=True)
"""


def _pipeline_child(bootstrap, topic, dsn, staging, ck, workers, every) -> subprocess.Popen:
    code = _PIPELINE_CHILD.format(
        bench=os.path.dirname(os.path.abspath(__file__)), bootstrap=bootstrap, topic=topic,
        dsn=dsn, staging=staging, ck=ck, workers=workers, every=every,
    )  # fmt: skip
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip


def _worker_pids(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def _reset_tables(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for table, columns in PIPELINE_TABLES.items():
            conn.execute(f"DROP TABLE IF EXISTS {table}")
            conn.execute(f"CREATE TABLE {table} ({columns})")
        conn.execute("DROP TABLE IF EXISTS pytimely_published")


def _tables(dsn: str) -> dict[str, collections.Counter]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return {
            table: collections.Counter(map(tuple, conn.execute(f"SELECT * FROM {table}")))
            for table in PIPELINE_TABLES
        }


def _compare(found: dict, expected: dict) -> dict:
    return {
        table: {
            "rows": sum(found[table].values()),
            "lost": sum((expected[table] - found[table]).values()),
            "doubled_or_wrong": sum((found[table] - expected[table]).values()),
        }
        for table in PIPELINE_TABLES
    }


def pipeline(work: str, args) -> dict:
    """The end-to-end job with kills (module docstring)."""
    from brokers import TansuBroker
    from pgcluster import PostgresCluster

    rng = random.Random(args.seed)
    every = args.pipeline_snapshot_ms
    with TansuBroker() as broker, PostgresCluster() as pg:
        topic = "clicks"
        clicks = produce_clicks(broker.bootstrap, topic, args.pipeline_clicks,
                                args.pipeline_users, args.seed)  # fmt: skip
        expected = pipeline_expected(clicks)

        def start(round_: int, workers: int) -> subprocess.Popen:
            staging = os.path.join(work, f"pipeline-staging-{round_}")
            ck = os.path.join(work, f"pipeline-ck-{round_}")
            return _pipeline_child(broker.bootstrap, topic, pg.dsn, staging, ck, workers, every)

        # A clean run first: the throughput without kills, and the same check.
        _reset_tables(pg.dsn)
        proc = start(0, 2)
        stdout, stderr = proc.communicate(timeout=1800)
        if proc.returncode != 0:
            raise SystemExit(f"the pipeline failed: {stderr[-3000:]}")
        clean = json.loads(stdout.splitlines()[-1])
        clean_check = _compare(_tables(pg.dsn), expected)

        killed, one_worker_kills, rounds, checks, starts = 0, 0, 0, [], []
        running = False
        while killed < args.pipeline_kills or running:
            if not running:
                rounds += 1
                _reset_tables(pg.dsn)
                running = True
            workers = rng.choice([1, 2, 3])
            proc = start(rounds, workers)
            if killed < args.pipeline_kills:
                time.sleep(rng.uniform(*args.kill_after))
            if killed < args.pipeline_kills and proc.poll() is None:
                pids = _worker_pids(proc.pid) if workers > 1 else []
                if pids and rng.random() < 0.5:
                    os.kill(rng.choice(pids), signal.SIGKILL)  # the others fail, named
                    one_worker_kills += 1
                else:
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate(timeout=120)
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                killed += 1
                continue
            stdout, stderr = proc.communicate(timeout=1800)
            if proc.returncode != 0:
                raise SystemExit(f"the pipeline failed: {stderr[-3000:]}")
            reports = json.loads(stdout.splitlines()[-1])["reports"]
            if reports[0]["restored"] is not None:
                starts.append(max(r["start_seconds"] for r in reports))
            checks.append(_compare(_tables(pg.dsn), expected))
            running = False
    exact = all(
        c[t]["lost"] == 0 and c[t]["doubled_or_wrong"] == 0
        for c in [clean_check, *checks]
        for t in PIPELINE_TABLES
    )
    records = sum(r["records"] for r in clean["reports"])
    cpu = sum(r["cpu_s"] for r in clean["reports"])
    return {
        "clicks": len(clicks),
        "snapshot_every_event_ms": every,
        "clean_run": {
            "workers": 2,
            "wall_s": round(clean["wall_s"], 3),
            "cpu_s": round(cpu, 3),
            "records_per_s": round(records / clean["wall_s"]),
            "records_per_cpu_s": round(records / cpu),
            "checkpoints_per_worker": clean["reports"][0]["checkpoints"],
            "tables": clean_check,
        },
        "kills": killed,
        "kills_of_one_worker": one_worker_kills,
        "rounds": rounds,
        "rounds_checked": checks,
        "no_row_lost_none_doubled": exact,
        "restart_start_s_median": round(statistics.median(starts), 3) if starts else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--clicks", type=int, default=2_000_000)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--users", type=int, default=5_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--kill-after", type=float, nargs=2, default=(1.0, 4.0))
    ap.add_argument("--behind-mb", type=float, nargs="+", default=[10, 1000])
    ap.add_argument("--pipeline-clicks", type=int, default=300_000)
    ap.add_argument("--pipeline-kills", type=int, default=20)
    ap.add_argument("--pipeline-users", type=int, default=200)
    ap.add_argument("--pipeline-snapshot-ms", type=int, default=200_000,
                    help="event-time ms between the pipeline's checkpoints")  # fmt: skip
    ap.add_argument("--only", default="overhead,kills,restart,pipeline",
                    help="comma-separated sections to run")  # fmt: skip
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    sections = set(args.only.split(","))
    work = tempfile.mkdtemp(prefix="pytimely-recovery-")
    try:
        load = os.getloadavg()
        result: dict = {"benchmark": "recovery", "workers": args.workers}
        if sections & {"overhead", "kills"}:
            inp = os.path.join(work, "in")
            counts = write_clicks(inp, args.files, args.clicks, args.users)
            result["clicks"] = sum(counts.values())
            if "overhead" in sections:
                result["overhead"] = overhead(work, inp, counts, args)
            if "kills" in sections:
                result["kills"] = kills(work, inp, counts, args)
        if "restart" in sections:
            result["restart"] = restart_cost(work, args)
        if "pipeline" in sections:
            result["pipeline"] = pipeline(work, args)
        result["loadavg_before"] = [round(x, 2) for x in load]
        result["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
