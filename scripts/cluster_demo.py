"""``make cluster-demo``: the main job on a Spark standalone cluster started on this machine.

Starts a master and two 1-core workers on 127.0.0.1 as separate JVMs (with authentication,
:class:`pytimely.spark.standalone.StandaloneCluster`), runs ``python -m pytimely.demo --master
spark://...`` for the keyed count (``--workload wordcount``) and the NEXMark main job, checks
that both succeeded with their two pytimely workers in different executors, and stops exactly
the processes it started.  Exit status 0 when everything passed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from pytimely.spark.standalone import StandaloneCluster


def run_job(cluster: StandaloneCluster, out: str, *options: str, timeout: float = 600) -> dict:
    """Run the demo with ``options`` on ``cluster`` writing to ``out``; its summary.json."""
    argv = cluster.demo_command("--out", out, *options)
    done = subprocess.run(argv, env=cluster.driver_environment(), timeout=timeout, check=False)
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    summary["exit_status"] = done.returncode
    return summary


def placement_ok(summary: dict) -> bool:
    """Both pytimely workers ran, in different executors (and processes)."""
    placed = summary.get("placement") or []
    return (len(placed) == 2 and len({p["executor"] for p in placed}) == 2
            and len({p["pid"] for p in placed}) == 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=os.path.join("out", "cluster-demo"))
    parser.add_argument("--events", type=int, default=50_000)
    args = parser.parse_args(argv)
    started = time.monotonic()
    ok = True
    with StandaloneCluster(workers=2, cores=1) as cluster:
        print(f"cluster: {cluster.master_url} (logs in {cluster.log_dir})", flush=True)
        jobs = {
            "wordcount": ["--workload", "wordcount", "--rows", "20000", "--epochs", "4"],
            "nexmark": ["--workload", "nexmark", "--events", str(args.events), "--epochs", "4",
                        "--latency-rates", "none"],
        }
        for name, options in jobs.items():
            summary = run_job(cluster, os.path.join(args.out, name), *options)
            passed = summary["ok"] and summary["exit_status"] == 0 and placement_ok(summary)
            print(f"{name}: {'OK' if passed else 'FAILED'} placement={summary.get('placement')}",
                  flush=True)
            ok = ok and passed
    print(f"cluster demo: {'OK' if ok else 'FAILED'} in {time.monotonic() - started:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
