"""The three coordination idioms of the "Timestamp tokens" paper (SoCC 2022), built for the
microbenchmarks.

* **tokens** — plain timestamp tokens: operators react to data and never ask the system about
  time; completion is observed through the system's frontier.
* **notifications** — Naiad style: an operator asks for a notification at every time it saw
  data (``unary_notify``) and produces its output when notified; the system orders every
  distinct time.
* **watermarks** — Flink style: watermarks travel in-band and every operator must be invoked to
  forward them (``pytimely.dataflow.operators.watermarks``); with an exchange on every edge the
  markers are broadcast to every worker ("watermarks-X"), without one they stay local
  ("watermarks-P").

Each builder has the harness signature ``build(scope, stream) -> output stream``; the input
records are integer word ids.
"""

from __future__ import annotations

from typing import Any

import pytimely as pt
from pytimely.dataflow.operators import watermarks as wm

IDIOMS = ("tokens", "notifications", "watermarks")


# ---------------------------------------------------------------------------------------------
# Rolling count of distinct words (section 7.2): each received word updates the count of unique
# words seen so far, and the updated value is sent out at the word's time.


def rolling_count(idiom: str, exchange: bool = True):
    key = (lambda w: w) if exchange else None

    if idiom == "tokens":

        def build(scope: Any, stream: Any) -> Any:
            def ctor(cap, info):
                cap.drop()
                seen: set[int] = set()

                def logic(inp, out):
                    for ref, batch in inp:
                        counts = []
                        for w in batch:
                            seen.add(w)
                            counts.append(len(seen))
                        out.session(ref).give_batch(counts)

                return logic

            pact = pt.Exchange(key) if exchange else pt.Pipeline
            return stream.unary(pact, "RollingCount", ctor)

        return build

    if idiom == "notifications":

        def build(scope: Any, stream: Any) -> Any:
            seen: set[int] = set()
            stash: dict[int, list[int]] = {}

            def logic(inp, out, notificator):
                for ref, batch in inp:
                    words = stash.get(ref.time)
                    if words is None:
                        stash[ref.time] = words = []
                        notificator.notify_at(ref.retain())
                    words.extend(batch)
                for cap in notificator:
                    counts = []
                    for w in stash.pop(cap.time, ()):
                        seen.add(w)
                        counts.append(len(seen))
                    out.session(cap).give_batch(counts)
                    cap.drop()

            pact = pt.Exchange(key) if exchange else pt.Pipeline
            return stream.unary_notify(pact, "RollingCount", [], logic)

        return build

    if idiom == "watermarks":

        def build(scope: Any, stream: Any) -> Any:
            seen: set[int] = set()

            def on_data(batch):
                counts = []
                for w in batch:
                    seen.add(w)
                    counts.append(len(seen))
                return counts

            ws = wm.assign_watermarks(stream)
            return ws.process(on_data, None, key=key, name="RollingCount").data()

        return build

    raise ValueError(f"unknown idiom {idiom!r}")


# ---------------------------------------------------------------------------------------------
# Chains of no-op operators (section 7.3).


def noop_chain(idiom: str, length: int):
    """``length`` no-op operators in sequence, each edge exchanging (the X variants) or not."""

    if idiom == "tokens":

        def build(scope: Any, stream: Any) -> Any:
            for _ in range(length):
                stream = stream.exchange(lambda x: x)
            return stream

        return build

    if idiom == "notifications":

        def build(scope: Any, stream: Any) -> Any:
            for _ in range(length):
                stream = stream.unary_notify(
                    pt.Exchange(lambda x: x), "NoopNotify", [], _notify_noop
                )
            return stream

        return build

    if idiom in ("watermarks-X", "watermarks-P"):
        exchange = idiom == "watermarks-X"

        def build(scope: Any, stream: Any) -> Any:
            ws = wm.assign_watermarks(stream)
            for _ in range(length):
                ws = ws.noop(key=(lambda x: x) if exchange else None)
            return ws.data()

        return build

    raise ValueError(f"unknown idiom {idiom!r}")


def _notify_noop(inp, out, notificator):
    """Forward data at once; ask for a notification per time seen (and do nothing with it)."""
    for ref, batch in inp:
        out.session(ref).give_batch(batch)
        notificator.notify_at(ref.retain())
    for cap in notificator:
        cap.drop()
