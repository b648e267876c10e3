"""``pytimely replay FILE --inspect``: summarize a capture file (binary capture or Parquet).

:func:`inspect_file` prints the header metadata, one line per time (messages events, records,
net progress delta and a few sample records), the totals and the final frontier implied by the
progress events (starting from the implicit ``(minimum, +1)``), then whether the capture ended
cleanly, was truncated, or is corrupt.  A truncated or corrupt capture is summarized up to the
problem and the problem is reported (not raised).  A progress bar goes to stderr (tqdm when
installed, a plain status line otherwise).
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO

from ..dataflow.operators.event import Messages, Progress, batch_len, batch_records
from ..errors import CaptureError, TruncatedCapture
from ..order import Product, less_equal
from .fileformat import FileReader
from .frames import MAGIC

__all__ = ["inspect_file", "progress_bar"]


class _Bar:
    """A progress bar on stderr, shown only when stderr is a terminal (not in logs or pipes)."""

    def __init__(self, total: int, enabled: bool, desc: str) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.total = max(total, 1)
        self.n = 0
        self._tqdm = None
        self._last = -1
        if not self.enabled:
            return
        try:
            from tqdm import tqdm

            self._tqdm = tqdm(
                total=total, unit="B", unit_scale=True, desc=desc, file=sys.stderr, leave=False
            )
        except ImportError:
            self._desc = desc

    def update_to(self, n: int) -> None:
        if not self.enabled:
            return
        if self._tqdm is not None:
            self._tqdm.update(n - self.n)
        else:
            pct = int(100 * n / self.total)
            if pct != self._last:
                sys.stderr.write(f"\r{self._desc}: {pct:3d}%")
                sys.stderr.flush()
                self._last = pct
        self.n = n

    def close(self) -> None:
        if not self.enabled:
            return
        if self._tqdm is not None:
            self._tqdm.close()
        else:
            sys.stderr.write("\r" + " " * 40 + "\r")
            sys.stderr.flush()


def progress_bar(total: int, enabled: bool, desc: str) -> _Bar:
    """A bar of ``total`` bytes on stderr (``update_to(n)``, ``close()``), shown only when
    ``enabled`` and stderr is a terminal: ``pytimely replay`` and ``inspect_file`` use it."""
    return _Bar(total, enabled, desc)


def _minimum_like(t: Any) -> Any:
    if type(t) is Product:
        return Product(_minimum_like(t[0]), _minimum_like(t[1]))
    if type(t) is int:
        return 0
    minimum = getattr(type(t), "minimum", None)
    return minimum() if callable(minimum) else None


def _frontier(counts: dict) -> list:
    live = [t for t, c in counts.items() if c > 0]
    try:
        live.sort()
    except TypeError:
        pass
    out: list = []
    for t in live:
        try:
            if not any(less_equal(f, t) for f in out):
                out.append(t)
        except Exception:  # noqa: BLE001 - a user time type that cannot compare
            out.append(t)
    return out


def _head(batch: Any, k: int) -> Any:
    if hasattr(batch, "num_rows"):
        return batch.slice(0, k)
    return batch[:k]


def _sort_key_times(times: list) -> list:
    try:
        return sorted(times)
    except TypeError:
        return times


def inspect_file(
    path: str | os.PathLike,
    out: TextIO | None = None,
    progress: bool = True,
    *,
    show_records: int = 3,
    allow_pickle: bool = False,
) -> dict:
    """Print a per-time summary of the capture at ``path`` to ``out``; return it as a dict.

    The dict has ``format``, ``metadata``, ``events``, ``progress_events``, ``messages_events``,
    ``records``, ``times`` (``{time: {"messages", "records", "delta", "sample"}}``),
    ``frontier``, ``closed_cleanly`` and ``error`` (a message, or None when the capture is
    intact).
    """
    if out is None:
        out = sys.stdout
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            head = f.read(8)
        size = os.path.getsize(name)
    except OSError as e:
        raise CaptureError(f"{name}: cannot open: {e}") from e
    if head[:4] == b"PAR1":
        fmt = "parquet"
    elif head == MAGIC[: len(head)]:
        fmt = "pytimely-capture"
    else:
        raise CaptureError(
            f"{name}: neither a pytimely capture nor a Parquet file (bad magic) at byte offset 0"
        )

    summary: dict = {
        "path": name,
        "format": fmt,
        "metadata": None,
        "events": 0,
        "progress_events": 0,
        "messages_events": 0,
        "records": 0,
        "times": {},
        "frontier": None,
        "closed_cleanly": None,
        "error": None,
    }
    per_time: dict = summary["times"]
    counts: dict = {}
    first_time: list = []

    def account(ev: Any) -> None:
        summary["events"] += 1
        if type(ev) is Progress:
            summary["progress_events"] += 1
            for t, d in ev.changes:
                if not first_time:
                    first_time.append(t)
                e = per_time.setdefault(t, {"messages": 0, "records": 0, "delta": 0, "sample": []})
                e["delta"] += d
                counts[t] = counts.get(t, 0) + d
        elif type(ev) is Messages:
            summary["messages_events"] += 1
            if not first_time:
                first_time.append(ev.time)
            n = batch_len(ev.batch)
            summary["records"] += n
            e = per_time.setdefault(
                ev.time, {"messages": 0, "records": 0, "delta": 0, "sample": []}
            )
            e["messages"] += 1
            e["records"] += n
            need = show_records - len(e["sample"])
            if need > 0 and n:
                e["sample"].extend(batch_records(_head(ev.batch, need)))

    bar = _Bar(size, progress, f"inspecting {os.path.basename(name)}")
    try:
        if fmt == "parquet":
            from .parquet_reader import ParquetReader

            pr = ParquetReader(name)
            try:
                evs = pr.poll()
            except CaptureError as e:
                summary["error"] = str(e)
                evs = []
            summary["metadata"] = pr.metadata
            for ev in evs:
                account(ev)
            summary["closed_cleanly"] = summary["error"] is None
            bar.update_to(size)
        else:
            reader = FileReader(name, allow_pickle=allow_pickle)
            try:
                while not reader.done:
                    for ev in reader.poll(max_events=20000):
                        account(ev)
                    summary["metadata"] = reader.metadata
                    bar.update_to(reader.offset)
            except CaptureError as e:
                summary["error"] = str(e)
                summary["truncated"] = isinstance(e, TruncatedCapture)
            summary["metadata"] = reader.metadata
            summary["closed_cleanly"] = reader.closed_cleanly and summary["error"] is None
            reader.close()
    finally:
        bar.close()

    if first_time:
        m = _minimum_like(first_time[0])
        if m is not None:
            counts[m] = counts.get(m, 0) + 1
        summary["frontier"] = _frontier(counts)

    w = out.write
    w(f"capture: {name} ({fmt}, {size} bytes)\n")
    meta = summary["metadata"] or {}
    for key in (
        "version",
        "creator",
        "created",
        "time_type",
        "batch_codec",
        "time",
        "mode",
        "value",
    ):
        if key in meta:
            w(f"  {key}: {meta[key]}\n")
    if meta.get("user"):
        w(f"  user: {meta['user']}\n")
    w(
        f"events: {summary['events']} ({summary['progress_events']} progress, "
        f"{summary['messages_events']} messages), records: {summary['records']}\n"
    )
    if per_time:
        w(f"{'time':>20}  {'messages':>8}  {'records':>10}  {'progress':>8}  sample\n")
        for t in _sort_key_times(list(per_time)):
            e = per_time[t]
            sample = ", ".join(repr(r) for r in e["sample"])
            if e["records"] > len(e["sample"]) and e["sample"]:
                sample += ", ..."
            w(f"{t!r:>20}  {e['messages']:>8}  {e['records']:>10}  {e['delta']:>+8}  {sample}\n")
    if summary["frontier"] is not None:
        fr = summary["frontier"]
        w(f"final frontier: {fr!r}" + ("  (stream complete)" if not fr else "") + "\n")
    if summary["error"]:
        w(("TRUNCATED: " if summary.get("truncated") else "ERROR: ") + summary["error"] + "\n")
    elif fmt == "pytimely-capture":
        w("ended cleanly (END frame)\n")  # a file without END is reported as truncated above
    return summary
