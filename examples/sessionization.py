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

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Sequence
from typing import Any

import pytimely as pt
from pytimely.communication.launch import parse_args

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


def plain_sessions(clicks: Sequence[tuple[int, int]], gap: int) -> list[Session]:
    """The sessions computed directly (for the tests)."""
    open_: dict[int, list[int]] = {}
    done = []
    for t, user in sorted(clicks, key=lambda c: c[0]):
        s = open_.get(user)
        if s is not None and t - s[1] >= gap:
            done.append((user, s[0], s[1] + gap, s[2]))
            s = None
        if s is None:
            open_[user] = [t, t, 1]
        else:
            s[1], s[2] = t, s[2] + 1
    done.extend((user, s[0], s[1] + gap, s[2]) for user, s in open_.items())
    return sorted(done)


def run(
    events: int = 1000,
    users: int = 20,
    gap: int = 10,
    workers: int = 1,
    argv: Sequence[str] | None = None,
    out: Callable[[str], Any] | None = None,
    clicks: Sequence[tuple[int, Any]] | None = None,
) -> list[list[tuple[int, Session]]]:
    """Worker ``w`` sends clicks ``w, w + W, ...`` of ``clicks`` (default
    :func:`make_clicks`), ``(time, user)`` in time order, at their times.  Returns, per worker,
    the ``(time, session)`` records it emitted."""
    if clicks is None:
        clicks = make_clicks(events, users)

    def work(worker: pt.Worker) -> list[tuple[int, Session]]:
        seen: list[tuple[int, Session]] = []

        def show(t: int, session: Session) -> None:
            seen.append((t, session))
            if out is not None:
                out(f"user {session[0]}: [{session[1]}, {session[2]}) {session[3]} clicks")

        def build(scope: pt.Scope) -> tuple[pt.InputHandle, pt.ProbeHandle]:
            handle, clicks = scope.new_input()
            probe = sessionize(clicks, gap).inspect_time(show).probe()
            return handle, probe

        handle, probe = worker.dataflow(build)
        mine = clicks[worker.index :: worker.peers]
        for t, user in mine:
            if t > handle.time:
                handle.advance_to(t)
                worker.step()
            handle.send((user, t))
        handle.close()
        worker.run()
        return seen

    if argv is not None:
        return pt.execute_from_args(work, argv)
    return pt.execute(work, workers=workers)


def main(argv: Sequence[str] | None = None) -> list[list[tuple[int, Session]]]:
    argv = list(sys.argv[1:] if argv is None else argv)
    free = [int(word) for word in parse_args(argv, usage=__doc__).free]
    events, users, gap = (free + [1000, 20, 10][len(free):])[:3]
    return run(events, users, gap, argv=argv, out=print)


if __name__ == "__main__":
    main()
