"""The job the recovery tests run: JSON-lines clicks -> running total per user -> JSON lines.

Run as a script to be killed from outside::

    python tests/io_job.py INPUT OUTPUT CHECKPOINT WORKERS [SLOW_S_PER_RECORD]

or, with ``IO_JOB_CRASH_AFTER=PHASE:N`` in the environment, to die at a chosen phase of a
checkpoint (:func:`crash_after`).

Exactly-once is checkable from the output alone: user ``u``'s totals must be exactly
``1, 2, ..., n_u`` (a lost record leaves a gap or a short count, a doubled one a repeat, lost
state restarts the count).
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time

import pytimely as pt
from pytimely import io


def write_clicks(folder: str, files: int, per_file: int, users: int) -> collections.Counter:
    """``files`` files of ``per_file`` clicks each; returns the clicks per user."""
    os.makedirs(folder, exist_ok=True)
    counts: collections.Counter = collections.Counter()
    for f in range(files):
        lines = []
        for i in range(per_file):
            user = f"u{(f * 7919 + i * 104729) % users}"
            counts[user] += 1
            lines.append(json.dumps({"user": user, "file": f, "i": i}))
        with open(os.path.join(folder, f"clicks-{f:02d}.jsonl"), "w") as out:
            out.write("\n".join(lines) + "\n")
    return counts


def clicker(slow: float = 0.0, fail_at: str | None = None):
    """``click -> (user, 1)``, sleeping ``slow`` s per click; raises at click ``fail_at``
    (``"<file>:<i>"``)."""

    def click(record):
        if slow:
            time.sleep(slow)
        if fail_at is not None and f"{record['file']}:{record['i']}" == fail_at:
            raise RuntimeError(f"injected failure at click {fail_at}")
        return (record["user"], 1)

    return click


def make_build(
    inp: str,
    out: str,
    slow: float = 0.0,
    fail_at: str | None = None,
    sink=None,
    source=None,
    event_time: bool = False,
):
    """The job's build function: clicks of ``source`` (default: the JSON-lines files of
    ``inp``) -> running totals -> ``sink`` (default: JSON-lines files in ``out``); with
    ``event_time``, a click's place in its file is its event time."""

    def build(scope):
        source_ = source if source is not None else io.JsonLinesSource(inp)
        at = (lambda r: r["i"]) if event_time else None
        clicks = io.read(scope, source_, event_time=at)
        totals = clicks.map(clicker(slow, fail_at)).stateful_map(
            int, lambda n, one: (n + one, n + one), name="Totals"
        )
        io.write(totals, sink if sink is not None else io.JsonLinesSink(out))

    build.__qualname__ = "clicks_totals"
    return build


def totals_by_user(out: str) -> dict[str, list[int]]:
    """Every published total, by user, sorted."""
    found: dict[str, list[int]] = collections.defaultdict(list)
    for name in io.JsonLinesSink(out).published():
        with open(os.path.join(out, name)) as f:
            for line in f:
                user, total = json.loads(line)
                found[user].append(total)
    return {u: sorted(ts) for u, ts in found.items()}


CRASH_PHASES = ("stage", "write_part", "commit", "publish")


def crash_after(phase: str, n: int) -> None:
    """Make this process (and the worker processes it forks) die with ``os._exit`` -- no
    clean-up, as a SIGKILL leaves it -- right after the ``n``-th call of one phase of a
    checkpoint: ``stage`` (a sink writer staged its output), ``write_part`` (a worker wrote
    its part), ``commit`` (a worker committed the checkpoint, before it publishes) or
    ``publish`` (one staged description was published, maybe of several)."""
    from pytimely.io.checkpoint import CheckpointStore

    calls = [0]

    def dying(original, committed_only=False):
        def call(*args, **kwargs):
            result = original(*args, **kwargs)
            if not committed_only or result:
                calls[0] += 1
                if calls[0] == n:
                    os._exit(9)
            return result

        return call

    if phase == "stage":
        writer = io.files.JsonLinesSink.writer

        def writer_that_dies(self, *args):
            w = writer(self, *args)
            w.stage = dying(w.stage)
            return w

        io.files.JsonLinesSink.writer = writer_that_dies
    elif phase == "write_part":
        CheckpointStore.write_part = dying(CheckpointStore.write_part)
    elif phase == "commit":
        CheckpointStore.try_commit = dying(CheckpointStore.try_commit, committed_only=True)
    elif phase == "publish":
        io.files.JsonLinesSink.publish = dying(io.files.JsonLinesSink.publish)
    else:
        raise ValueError(f"no phase {phase!r}; one of {CRASH_PHASES}")


def main(argv: list[str]) -> int:
    """``INPUT OUTPUT CHECKPOINT WORKERS [SLOW [STAGING]]``; an OUTPUT ``pg:TABLE`` writes to
    the PostgreSQL table at ``$PYTIMELY_PG_DSN`` through staged files in STAGING."""
    inp, out, checkpoint, workers = argv[0], argv[1], argv[2], int(argv[3])
    if os.environ.get("IO_JOB_CRASH_AFTER"):  # PHASE:N (see crash_after)
        phase, n = os.environ["IO_JOB_CRASH_AFTER"].split(":")
        crash_after(phase, int(n))
    slow = float(argv[4]) if len(argv) > 4 else 0.0
    sink = None
    if out.startswith("pg:"):
        from pytimely.io.postgres import PostgresSink

        dsn = os.environ["PYTIMELY_PG_DSN"]
        sink = PostgresSink(dsn, out[3:], ["user_id", "total"], argv[5])
    job = io.job(
        make_build(inp, out, slow, sink=sink),
        checkpoint=checkpoint,
        snapshot_every=2,
        epoch_seconds=0.05,
        epoch_records=200,
        read_batch=50,
        timeout=60,
    )
    reports = pt.execute(job, workers=workers)
    print(json.dumps([r.__dict__ for r in reports]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
