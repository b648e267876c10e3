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

import random

import pytimely as pt

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


def work(worker: pt.Worker, events: list[Event], width: int) -> None:
    def show(t: int, m: Match) -> None:
        print(f"user {m[0]}: [{m[1]}, {m[2]}) clicked {m[3]}, bought {m[4]}, at {t}")

    def build(scope: pt.Scope) -> tuple[pt.InputHandle, pt.InputHandle]:
        clicks_in, clicks = scope.new_input()
        buys_in, buys = scope.new_input()
        clicks.window_join(buys, pt.Tumbling(width)).output.inspect_time(show)
        return clicks_in, buys_in

    clicks_in, buys_in = worker.dataflow(build)
    for t, kind, user, what in events[worker.index :: worker.peers]:
        if t > clicks_in.time:
            clicks_in.advance_to(t)
            buys_in.advance_to(t)
            worker.step()
        (clicks_in if kind == "click" else buys_in).send((user, what))


if __name__ == "__main__":
    words = [int(word) for word in pt.args()]
    count, users, width = (words + [200, 10, 10][len(words) :])[:3]
    events = make_events(count, users)
    pt.execute_from_args(lambda worker: work(worker, events, width))
