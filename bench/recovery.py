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
  checkpoint lies 10x further into a longer input, to show it does not grow with the stream.

Prints JSON.

    python bench/recovery.py [--clicks 2000000] [--kills 20] [--repeat 3] [--workers 2]
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


def build_for(inp: str, out: str):
    """The job's build function."""

    def build(scope):
        clicks = io.read(scope, io.JsonLinesSource(inp))
        totals = clicks.map(lambda c: (c["user"], 1)).stateful_map(
            int, lambda n, one: (n + one, n + one), name="Totals"
        )
        io.write(totals, io.JsonLinesSink(out))

    build.__qualname__ = "recovery_bench"
    return build


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
job = io.job(recovery.build_for({inp!r}, {out!r}), checkpoint={ck!r}, snapshot_every=10,
             **recovery.EPOCHS)
print(json.dumps([r.__dict__ for r in pt.execute(job, workers={workers})]), flush=True)
"""


def _child(inp: str, out: str, ck: str, workers: int) -> subprocess.Popen:
    code = _CHILD.format(bench=os.path.dirname(os.path.abspath(__file__)), inp=inp, out=out,
                         ck=ck, workers=workers)  # fmt: skip
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
    """Start time of a restart after a kill late in a short and in a 10x longer input."""
    found = {}
    for scale in (1, 10):
        inp = os.path.join(work, f"in-{scale}")
        shutil.rmtree(inp, ignore_errors=True)
        write_clicks(inp, args.files, args.restart_clicks * scale, args.users)
        out, ck = os.path.join(work, f"out-{scale}"), os.path.join(work, f"ck-{scale}")
        for d in (out, ck):
            shutil.rmtree(d, ignore_errors=True)
        proc = _child(inp, out, ck, 2)
        deadline = time.monotonic() + 600
        behind = 0
        while time.monotonic() < deadline and proc.poll() is None:  # kill at 80% read
            time.sleep(0.02)
            store = io.CheckpointStore(ck, "recovery_bench")
            try:  # the job retires older checkpoints as it goes: this one may just vanish
                meta = store.latest() if os.path.isdir(ck) else None
                offsets = store.load(meta).offsets if meta is not None else None
            except io.CheckpointError:
                continue
            if offsets is not None:
                behind = sum(offsets.get("files", {}).values())
                total = sum(os.path.getsize(os.path.join(inp, n)) for n in os.listdir(inp))
                if behind > 0.8 * total:
                    break
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
        again = _child(inp, out, ck, 2)
        stdout, stderr = again.communicate(timeout=600)
        reports = json.loads(stdout.splitlines()[-1])
        found[f"input_x{scale}"] = {
            "input_bytes_before_checkpoint": behind,
            "start_s": round(max(r["start_seconds"] for r in reports), 3),
        }
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clicks", type=int, default=2_000_000)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--users", type=int, default=5_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--kill-after", type=float, nargs=2, default=(1.0, 4.0))
    ap.add_argument("--restart-clicks", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="pytimely-recovery-")
    try:
        inp = os.path.join(work, "in")
        counts = write_clicks(inp, args.files, args.clicks, args.users)
        load = os.getloadavg()
        result = {
            "benchmark": "recovery",
            "clicks": sum(counts.values()),
            "workers": args.workers,
            "overhead": overhead(work, inp, counts, args),
            "kills": kills(work, inp, counts, args),
            "restart": restart_cost(work, args),
            "loadavg_before": [round(x, 2) for x in load],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        }
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
