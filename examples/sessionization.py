"""Sessionization with ``keyed_process``: per-user sessions closed by an event-time gap timer.

A user's clicks less than ``gap`` time units apart form one session ``[first, last + gap)``; a
click ``gap`` or more after the previous one starts a new session.  Each session is reported as
``(user, start, end, clicks)`` at timestamp ``end``, once the input frontier has passed ``end``:
exactly once, never early, on any number of workers (clicks are exchanged by user).

Per user the operator keeps ``[start, last, clicks]`` and one timer at ``last + gap``; a click
that extends the session moves the timer, the timer closes the session and forgets the user, so
memory is bounded by the users active within the last ``gap``.

    $ python examples/sessionization.py                 # 1000 clicks of 20 users, gap 10
    $ python examples/sessionization.py 5000 50 8       # clicks, users, gap
    $ python examples/sessionization.py 5000 50 8 -w 2  # on two workers
"""

import random
from typing import Any

import pytimely as pt

Session = tuple[Any, int, int, int]  # (user, start, end, clicks)


def sessionize(clicks: pt.Stream, gap: int) -> pt.Stream:
    """``(user, anything)`` records in, timestamped by click time; ``(user, start, end,
    clicks)`` out, at ``end``."""

    def close(ctx: pt.KeyedContext, user: Any) -> None:
        start, last, count = ctx.state
        ctx.emit((user, start, last + gap, count))
        ctx.cancel_timer(last + gap)
        ctx.clear()

    def on_click(ctx: pt.KeyedContext, user: Any, _click: Any) -> None:
        session = ctx.state  # [start, last, clicks], or None
        if session is not None and ctx.time - session[1] >= gap:
            # A click exactly at the session's end: that end's timer has not fired yet (a
            # timer fires after every record of its time), so close the session here.
            close(ctx, user)
            session = None
        if session is None:
            ctx.state = [ctx.time, ctx.time, 1]
        else:
            ctx.cancel_timer(session[1] + gap)
            session[1] = ctx.time
            session[2] += 1
        ctx.set_timer(ctx.time + gap)

    def on_gap(ctx: pt.KeyedContext, user: Any, _t: int) -> None:
        close(ctx, user)

    return clicks.keyed_process(on_click, on_gap, name="Sessions")


def make_clicks(events: int, users: int, seed: int = 0) -> list[tuple[int, int]]:
    """``(time, user)`` clicks in time order: bursts with pauses, so users have many sessions."""
    rng = random.Random(seed)
    t, clicks = 0, []
    for _ in range(events):
        t += rng.choice((0, 0, 1, 1, 2, 15))
        clicks.append((t, rng.randrange(users)))
    return clicks


def work(worker: pt.Worker, clicks: list[tuple[int, int]], gap: int) -> None:
    def show(t: int, session: Session) -> None:
        user, start, end, count = session
        print(f"user {user}: [{start}, {end}) {count} clicks, at {t}")

    def build(scope: pt.Scope) -> pt.InputHandle:
        handle, stream = scope.new_input()
        sessionize(stream, gap).inspect_time(show)
        return handle

    handle = worker.dataflow(build)
    for t, user in clicks[worker.index :: worker.peers]:
        if t > handle.time:
            handle.advance_to(t)
            worker.step()
        handle.send((user, t))


if __name__ == "__main__":
    words = [int(word) for word in pt.args()]
    events, users, gap = (words + [1000, 20, 10][len(words) :])[:3]
    clicks = make_clicks(events, users)
    pt.execute_from_args(lambda worker: work(worker, clicks, gap))
