"""Windowed join with ``window_join``: each user's ad clicks and purchases in the same window.

Clicks ``(user, ad)`` and purchases ``(user, item)`` come in on two inputs, timestamped by event
time.  ``window_join`` with ``pt.Tumbling(width)`` pairs every click with every purchase of the
same user in the same window ``[start, end)`` and reports ``(user, start, end, ad, item)`` at
timestamp ``end``, once both inputs have passed every earlier time: exactly once, never early,
on any number of workers (both inputs are exchanged by user).  A window's records are forgotten
as soon as it is reported.

    $ python examples/windowed_join.py                 # 200 events of 10 users, width 10
    $ python examples/windowed_join.py 1000 30 5       # events, users, width
    $ python examples/windowed_join.py 1000 30 5 -w 2  # on two workers
"""

from __future__ import annotations

import random
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import pytimely as pt
from pytimely.communication.launch import parse_args

Event = tuple[int, str, int, str]  # (time, "click" or "buy", user, ad or item)
Match = tuple[int, int, int, str, str]  # (user, start, end, ad, item)


def make_events(events: int, users: int, seed: int = 0) -> list[Event]:
    """Clicks (70 %) and purchases in time order."""
    rng = random.Random(seed)
    t, out = 0, []
    for _ in range(events):
        t += rng.choice((0, 1, 1, 2, 3))
        user = rng.randrange(users)
        if rng.random() < 0.7:
            out.append((t, "click", user, f"ad{rng.randrange(5)}"))
        else:
            out.append((t, "buy", user, f"item{rng.randrange(8)}"))
    return out


def plain_matches(events: Sequence[Event], width: int) -> list[Match]:
    """The matches computed directly (for the tests)."""
    bought = defaultdict(list)
    for t, kind, user, item in events:
        if kind == "buy":
            bought[user, t // width].append(item)
    return sorted(
        (user, t // width * width, (t // width + 1) * width, ad, item)
        for t, kind, user, ad in events if kind == "click"
        for item in bought[user, t // width]
    )


def run(
    events: int = 200,
    users: int = 10,
    width: int = 10,
    workers: int = 1,
    argv: Sequence[str] | None = None,
    out: Callable[[str], Any] | None = None,
    data: Sequence[Event] | None = None,
) -> list[list[tuple[int, Match]]]:
    """Worker ``w`` sends events ``w, w + W, ...`` of ``data`` (default :func:`make_events`)
    at their times.  Returns, per worker, the ``(time, match)`` records it emitted."""
    if data is None:
        data = make_events(events, users)

    def work(worker: pt.Worker) -> list[tuple[int, Match]]:
        seen: list[tuple[int, Match]] = []

        def show(t: int, m: Match) -> None:
            seen.append((t, m))
            if out is not None:
                out(f"user {m[0]}: [{m[1]}, {m[2]}) clicked {m[3]}, bought {m[4]}")

        def build(scope: pt.Scope) -> tuple[pt.InputHandle, pt.InputHandle]:
            clicks_in, clicks = scope.new_input()
            buys_in, buys = scope.new_input()
            clicks.window_join(buys, pt.Tumbling(width)).output.inspect_time(show)
            return clicks_in, buys_in

        clicks_in, buys_in = worker.dataflow(build)
        for t, kind, user, what in data[worker.index :: worker.peers]:
            if t > clicks_in.time:
                clicks_in.advance_to(t)
                buys_in.advance_to(t)
                worker.step()
            (clicks_in if kind == "click" else buys_in).send((user, what))
        clicks_in.close()
        buys_in.close()
        worker.run()
        return seen

    if argv is not None:
        return pt.execute_from_args(work, argv)
    return pt.execute(work, workers=workers)


def main(argv: Sequence[str] | None = None) -> list[list[tuple[int, Match]]]:
    argv = list(sys.argv[1:] if argv is None else argv)
    free = [int(word) for word in parse_args(argv, usage=__doc__).free]
    events, users, width = (free + [200, 10, 10][len(free):])[:3]
    return run(events, users, width, argv=argv, out=print)


if __name__ == "__main__":
    main()
