"""Event-time windows on timestamp tokens: ``window_fold``, ``window_count``,
``window_collect`` and ``window_join`` over the windowers of :mod:`pytimely.windows`.

Records are ``(key, value)`` pairs unless ``key=`` gives a key function (then the whole record
is the value).  They are exchanged by key (:class:`~pytimely.Exchange`: an int key to worker
``key % peers``, any other through ``stable_hash``), so every (key, window) lives on one worker.

**Event time and lateness.**  With ``event_time=None`` a record's timestamp *is* its event time
and nothing can be late.  With ``event_time=f``, ``f(record)`` (an int) is its event time and
the timestamp acts as the watermark:

* tumbling and sliding windows: a record is on time for its window ``[s, e)`` iff its
  timestamp is ``< e + lateness``.  A sliding record is added to every window it is on time
  for, and is sent (once, unchanged) to ``.late`` if it missed at least one of them — nothing
  leaves a window silently.
* sessions: a session ``[first, last + gap)`` may still grow by any record of event time up to
  ``last + gap - 1``, so a record of event time ``x`` is on time iff its timestamp is
  ``< x + 1 + lateness`` (``<= x + lateness``) — the tumbling rule for the unit window
  ``[x, x + 1)``.  This is what lets a closed session stay closed: no on-time record can reach
  it afterwards.

**Emission.**  The result of window ``[s, e)`` (a session's ``e`` is ``last + gap``) is
emitted at timestamp ``E = e + lateness``, exactly once, when the input frontier has *passed*
every time before ``E``: no frontier element is ``<= E - 1`` (``not frontier.less_than(E)``).
Every on-time record of the window has a timestamp ``<= E - 1``, so at that point all of them
have arrived — on every worker, since the frontier counts records in flight.  (Releasing when
the frontier merely *reaches* ``E - 1`` would be wrong: records at ``E - 1`` may still come.)

**Tokens.** The operator drops its initial capability and holds at most **one**: a
:class:`~pytimely.dataflow.operators.tokens.LeastToken` at the least pending emission time
``E`` (minted from a received message with ``delayed(E)``). Every ready window or session is
sent at its own ``E`` with it, in ``E`` order; then, once per invocation, the token moves to
the least ``E`` still pending, or is dropped when nothing is. So fine-grained event times
(milliseconds, nanoseconds) cost no capability, pointstamp or progress update per distinct
``E`` (the timestamp-tokens paper, section 6.2): the operator talks to progress tracking once
per invocation, however many windows it closes. Interest is ``IF_CAPABILITY``, so an idle
windowing operator holds nothing and is never woken. State of an emitted window or session is
deleted when it is emitted: memory is bounded by the live (key, window) pairs (see
:meth:`Windowed.state_size`). ``window_count(pt.Session(gap))`` with timestamps as event times
counts in timestamp order (see :func:`.sessions.session_count_logic`): batches that wait for an
earlier time share one more token, at the least waiting time. ``window_count(pt.Session(gap),
event_time=f)`` keeps its sessions in dicts and its one token at the least pending heap entry
(:class:`~.event_sessions.EventTimeSessions`): event times as fine as the source's clock cost a
few dictionary operations per record.

**Grouping.**  With ``event_time=f``, a batch is assigned to windows as a whole where it can
be: one ``map`` of ``f``, then the whole batch into its window when its earliest and latest
event times share one (the common case), one C-level mask per window when it spans a few,
and a sort by window otherwise; records reach each window in arrival order either way, and
lateness is decided per window (see :func:`.fixed.fixed_logic`).

**Columnar path.**  When ``key`` is a column *name* (a ``str``), batches are numpy structured
arrays or Arrow record batches and ``window_count`` / ``window_fold`` aggregate vectorized:
the event-time column (``event_time=`` also a name, or ``None`` for the timestamp) is mapped to
windows with array arithmetic, keys are grouped with ``bincount`` (small non-negative int keys)
or a sort, and ``window_fold`` takes a numpy ufunc (``np.add``, ``np.maximum``, ...) over the
``value=`` column.  Results equal the record path with the same ufunc as ``fold``; late rows go
to ``.late`` as a batch of the input's type.

**The rooms of this package.**  :mod:`.api`: the four operators and the handles they return
(:class:`Windowed`, :class:`WindowJoined`); :mod:`.checks`: argument, time and user-function
checks; :mod:`.kinds`: count, fold or collect; :mod:`.fixed`: tumbling and sliding windows over
records; :mod:`.sessions`: session windows over records, any kind; :mod:`.session_counts`:
the numpy store of session counts at timestamp event times; :mod:`.event_sessions`: the store
of session counts at event times carried in the records; :mod:`.columnar`: numpy and Arrow
batches; :mod:`.tumbling_average`: the timestamp-tokens paper's running example, a stand-alone
operator (``Stream.tumbling_average``).  The windowers themselves are public, in
:mod:`pytimely.windows`.
"""

from __future__ import annotations

from .api import Windowed, WindowJoined, window_collect, window_count, window_fold, window_join

__all__ = [
    "Windowed",
    "WindowJoined",
    "window_fold",
    "window_count",
    "window_collect",
    "window_join",
]
