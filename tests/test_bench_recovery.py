"""``bench/recovery.py``'s end-to-end section, small: Kafka clicks in event time -> windows and
a keyed running count -> PostgreSQL, SIGKILLed and restarted on other worker counts, every
table compared row for row with plain Python.

The benchmark starts its own Tansu broker and PostgreSQL cluster (``tests/brokers.py``,
``tests/pgcluster.py``).  Its timings are the benchmark's business; this checks the kills
landed and that no row was lost or doubled.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "recovery.py"


def test_kafka_to_windows_to_postgres_survives_kills_with_no_row_lost_or_doubled() -> None:
    done = subprocess.run(
        [
            sys.executable, str(SCRIPT), "--only", "pipeline",
            "--pipeline-clicks", "40000", "--pipeline-kills", "3",
            "--kill-after", "0.5", "1.5", "--pipeline-snapshot-ms", "40000",
        ],
        capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)["pipeline"]
    assert report["kills"] == 3
    assert report["rounds_checked"], "no round ran to its end"
    for check in [report["clean_run"]["tables"], *report["rounds_checked"]]:
        assert check["windows"]["rows"] > 0 and check["totals"]["rows"] > 0
        for table in check.values():
            assert table["lost"] == 0 and table["doubled_or_wrong"] == 0, check
    assert report["no_row_lost_none_doubled"]
