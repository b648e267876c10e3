"""Many workers: answers independent of the number of processes, progress safety under
concurrency, failures that name the worker, clusters started by hand."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import pytimely as pt
from pytimely.errors import WorkerFailure

pytestmark = pytest.mark.timeout(120)


def test_to_stream_on_three_workers_gives_each_value_three_times():
    def work(worker):
        cap = worker.dataflow(lambda scope: scope.to_stream(range(10)).capture())
        worker.run()
        return cap.extract()

    results = pt.execute(work, workers=3)
    merged = sorted(x for res in results for _t, recs in res for x in recs)
    assert merged == sorted(list(range(10)) * 3)


def test_distinct_split_matches_timely():
    inputs = ([0, 1, 2, 2, 2, 3, 3, 4], [0, 0, 3, 4, 4, 5, 7, 7])

    def work(worker):
        def build(scope):
            in1, s1 = scope.new_input()
            in2, s2 = scope.new_input()

            def distinct(cap, info):
                cap.drop()
                seen = {}

                def logic(inp, out):
                    for ref, batch in inp:
                        known = seen.setdefault(ref.time, set())
                        fresh = []
                        for x in batch:
                            if x not in known:
                                known.add(x)
                                fresh.append(x)
                        out.session(ref).give_batch(fresh)

                return logic

            d1 = s1.unary(pt.Exchange(lambda x: x), "Distinct", distinct).capture()
            d2 = s2.unary(pt.Exchange(lambda x: x), "Distinct", distinct).capture()
            return in1, in2, d1, d2

        in1, in2, d1, d2 = worker.dataflow(build)
        if worker.index == 0:
            for x in inputs[0]:
                in1.send(x)
            for x in inputs[1]:
                in2.send(x)
        in1.close()
        in2.close()
        worker.run()
        values = lambda cap: sorted(x for _t, recs in cap.extract() for x in recs)  # noqa: E731
        return values(d1), values(d2)

    (w0a, w0b), (w1a, w1b) = pt.execute(work, workers=2)
    assert sorted(set(w0a) | set(w0b)) == [0, 2, 4]
    assert sorted(set(w1a) | set(w1b)) == [1, 3, 5, 7]
    assert sorted(w0a + w1a) == [0, 1, 2, 3, 4]
    assert sorted(w0b + w1b) == [0, 3, 4, 5, 7]


def _random_dataflow_work(seed: int, rounds: int):
    """A random DAG of operators that retain, downgrade and drop tokens at random, checking on
    every message that its time was still allowed by the input frontier."""

    def work(worker):
        shape = random.Random(seed)  # same graph on every worker
        acts = random.Random(seed * 1000 + worker.index)  # different actions per worker
        violations = []

        def make_op(name):
            def ctor(cap, info):
                cap.drop()
                pending = {}  # time -> [Capability, records]
                last_seen = [None]

                def logic(inp, out):
                    frontier = list(inp.frontier)
                    for ref, batch in inp:
                        t = ref.time
                        if not inp.frontier.less_equal(t):
                            violations.append((name, "current", t, frontier))
                        if last_seen[0] is not None and not any(f <= t for f in last_seen[0]):
                            violations.append((name, "earlier", t, last_seen[0]))
                        choice = acts.random()
                        if choice < 0.4:
                            out.session(ref).give_batch(list(batch))
                        else:
                            later = t + acts.randrange(0, 3)
                            entry = pending.get(later)
                            if entry is None:
                                entry = pending[later] = [ref.delayed(later), []]
                            entry[1].extend(batch)
                    for t in sorted(pending):
                        if not inp.frontier.less_equal(t):
                            held, records = pending.pop(t)
                            if acts.random() < 0.3:
                                held.downgrade(t + 1)
                            out.session(held).give_batch(records)
                            held.drop()
                    last_seen[0] = frontier

                return logic

            return ctor

        def build(scope):
            inp, source = scope.new_input()
            streams = [source]
            for k in range(shape.randrange(3, 7)):
                a = streams[shape.randrange(len(streams))]
                pact = pt.Exchange(lambda x: x) if shape.random() < 0.6 else pt.Pipeline
                interest = shape.choice(list(pt.FrontierInterest)[1:])
                if shape.random() < 0.3 and len(streams) > 1:
                    b = streams[shape.randrange(len(streams))]
                    a = a.concat(b)
                streams.append(
                    a.unary_frontier(pact, f"op{k}", make_op(f"op{k}"), interest=interest)
                )
            return inp, streams[-1].capture(), streams[-1].probe()

        inp, cap, probe = worker.dataflow(build)
        sent = 0
        for r in range(rounds):
            for _ in range(acts.randrange(0, 5)):
                inp.send(acts.randrange(1000))
                sent += 1
            inp.advance_to(r + 1)
            if acts.random() < 0.5:
                worker.step_while(lambda: probe.less_than(inp.time), timeout=30)
            else:
                worker.step()
        inp.close()
        worker.run()
        return violations, sent, cap.extract()

    return work


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_progress_safety_under_concurrency(seed):
    results = pt.execute(_random_dataflow_work(seed, rounds=15), workers=3)
    for violations, _sent, _out in results:
        assert violations == []
    # Every record comes out at least once per path (and nothing is lost: the run completed).
    assert sum(len(recs) for _v, _s, out in results for _t, recs in out) >= sum(
        s for _v, s, _o in results
    ) or all(s == 0 for _v, s, _o in results)


def test_a_killed_worker_is_named_within_seconds():
    def work(worker):
        def build(scope):
            inp, s = scope.new_input()
            return inp, s.exchange(lambda x: x).probe()

        inp, probe = worker.dataflow(build)
        for r in range(10_000):
            inp.send(r)
            inp.advance_to(r + 1)
            worker.step_while(lambda: probe.less_than(inp.time))
            if worker.index == 2 and r == 20:
                os.kill(os.getpid(), signal.SIGKILL)
        return r

    start = time.monotonic()
    with pytest.raises(WorkerFailure) as info:
        pt.execute(work, workers=3)
    assert time.monotonic() - start < 30
    assert info.value.worker == 2
    assert "2" in str(info.value)


def test_operator_error_on_one_worker_stops_all():
    def work(worker):
        def build(scope):
            def boom(x):
                if worker.index == 1 and x == 5:
                    raise ValueError("bad record 5")
                return x

            return scope.to_stream(range(10)).map(boom).probe()

        worker.dataflow(build)
        worker.run()

    with pytest.raises(WorkerFailure) as info:
        pt.execute(work, workers=2)
    assert info.value.worker == 1
    assert "bad record 5" in str(info.value)


def test_execute_from_args_with_a_hostfile(tmp_path):
    import socket

    ports = []
    for _ in range(2):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        ports.append(s.getsockname()[1])
        s.close()
    hostfile = tmp_path / "hosts"
    hostfile.write_text("".join(f"127.0.0.1:{p}\n" for p in ports))
    script = tmp_path / "job.py"
    script.write_text(
        textwrap.dedent(
            """
        import sys
        import pytimely as pt

        def work(worker):
            cap = worker.dataflow(lambda s: s.to_stream(range(6)).exchange(lambda x: x).capture())
            worker.run()
            return cap.extract()

        print(pt.execute_from_args(work, sys.argv[1:]))
        """
        )
    )
    env = dict(
        os.environ,
        PYTIMELY_SECRET="test-secret",
        PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), "-n", "2", "-p", str(i), "-h", str(hostfile)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in (1, 0)
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    by_process = {1: outs[0][0], 0: outs[1][0]}
    # Each of the two processes emits range(6); integer keys route to key % 2.
    assert by_process[0].strip() == "[[(0, [0, 0, 2, 2, 4, 4])]]"
    assert by_process[1].strip() == "[[(0, [1, 1, 3, 3, 5, 5])]]"


# --- a run that cannot finish says why, on every worker ----------------------------------------


def _forgotten_input_on_worker_1(worker):
    """Worker 1 never advances or closes its input and waits on the probe: nobody can finish."""

    def build(scope):
        inp, stream = scope.new_input()
        return inp, stream.exchange(lambda x: x).probe()

    inp, probe = worker.dataflow(build, name="Forgotten")
    inp.send(worker.index)
    if worker.index == 1:
        worker.step_while(lambda: probe.less_than(1))
    return worker.index


@pytest.mark.parametrize("workers", [2, 3])
def test_a_stuck_run_raises_stuck_error_naming_who_holds_the_frontier(workers):
    start = time.monotonic()
    with pytest.raises(pt.StuckError) as info:
        pt.execute(_forgotten_input_on_worker_1, workers=workers, timeout=60)
    elapsed = time.monotonic() - start
    # Default stuck_after is 2 s; the rest is starting processes, slow under a full suite's
    # load (15 s was once exceeded with three workers).  Well before execute's 60 s timeout.
    assert elapsed < 30
    message = str(info.value)
    held = message.split("worker 1 holds:")[1].split("worker 2 holds:")[0].split("pointstamps")[0]
    assert "Input capability" in held and "address (0, 1)" in held and "time 0" in held
    assert "worker 0 holds:\n  nothing" in message
    assert "forget to advance or close an input" in message
    assert info.value.outcomes == {w: "raised StuckError" for w in range(workers)}


def test_a_capability_leaked_on_one_worker_is_named_on_every_worker():
    def work(worker):
        leaked = []

        def hoarder(cap, info):
            if worker.index == 1:
                leaked.append(cap)  # never dropped, on worker 1 only
            else:
                cap.drop()

            def logic(inp, out):
                for _ref, batch in inp:
                    out.session(_ref).give_batch(batch)

            return logic

        worker.dataflow(
            lambda s: s.to_stream(range(4)).unary(pt.Pipeline, "Hoarder", hoarder).probe()
        )
        worker.run()

    with pytest.raises(pt.StuckError) as info:
        pt.execute(work, workers=2, timeout=60, stuck_after=1.0)
    message = str(info.value)
    assert "Hoarder capability" in message.split("worker 1 holds:")[1].split("pointstamps")[0]
    assert "worker 0 holds:\n  nothing" in message


def test_slow_but_live_runs_are_not_declared_stuck():
    """A worker sleeping in its function between inputs, and an operator waiting on a timer,
    each for longer than stuck_after: both are live, and the run completes."""

    def delayed(cap, info):
        act = info.activator()
        state = {"fired": False}

        def logic(out):
            if not state["fired"]:
                state["fired"] = True
                act.activate_after(1.5)  # nothing else to do meanwhile, anywhere
            elif cap.valid:
                out.session(cap).give("late")
                cap.drop()

        return logic

    def work(worker):
        def build(scope):
            inp, stream = scope.new_input()
            if worker.index == 0:
                late = scope.source("Late", delayed)
            else:
                late = scope.source("Late", lambda cap, info: (cap.drop(), lambda out: None)[1])
            exchanged = stream.exchange(lambda x: x)
            return inp, exchanged.concat(late).capture(), exchanged.probe(), late.probe()

        inp, cap, probe, late = worker.dataflow(build)
        # Worker 1 parks here while worker 0 waits on its timer.
        worker.step_while(lambda: not late.done(), timeout=30)
        for r in range(2):
            if worker.index == 0:
                time.sleep(1.5)  # user code: not idle, whatever its peers do meanwhile
            inp.send(r)
            inp.advance_to(r + 1)
            # Worker 1 parks here while worker 0 sleeps.
            worker.step_while(lambda: probe.less_than(inp.time), timeout=30)
        inp.close()
        worker.run()
        return [x for _t, recs in cap.extract() for x in recs]

    results = pt.execute(work, workers=2, timeout=60, stuck_after=0.5)
    assert sorted(map(str, results[0] + results[1])) == ["0", "0", "1", "1", "late"]


def test_a_worker_that_builds_fewer_dataflows_is_a_graph_error():
    def work(worker):
        worker.dataflow(lambda s: s.to_stream(range(3)).probe(), name="Both")
        if worker.index == 0:
            worker.dataflow(lambda s: s.to_stream(range(3)).probe(), name="Only on worker 0")
        worker.run()

    start = time.monotonic()
    with pytest.raises(WorkerFailure) as info:
        pt.execute(work, workers=2, timeout=60)
    assert time.monotonic() - start < 15
    message = str(info.value)
    assert "GraphError" in message
    assert "worker 1 finished after building 1 dataflow," in message
    assert "dataflow 1 ('Only on worker 0')" in message
    assert info.value.worker == 0


# --- liveness: a worker that stops responding is named by its peers ------------------------------


def test_a_stopped_worker_is_named_by_its_peers_within_the_heartbeat_timeout():
    def work(worker):
        def build(scope):
            inp, s = scope.new_input()
            return inp, s.exchange(lambda x: x).probe()

        inp, probe = worker.dataflow(build)
        for r in range(10_000):
            inp.send(r)
            inp.advance_to(r + 1)
            if worker.index == 2 and r == 5:
                os.kill(os.getpid(), signal.SIGSTOP)  # alive, silent, holding its input open
            worker.step_while(lambda: probe.less_than(inp.time))
        return r

    start = time.monotonic()
    with pytest.raises(WorkerFailure) as info:
        pt.execute(work, workers=3, timeout=60, heartbeat_timeout=2.0)
    elapsed = time.monotonic() - start
    # The peers name it after ~2 s of silence; the launcher then kills the stopped process at
    # once, without a grace period (SIGKILL works on a stopped process: nothing leaks).
    assert elapsed < 12
    assert info.value.worker == 2
    assert "worker 2 sent nothing for" in str(info.value)
    assert "SIGSTOP" in str(info.value)
    outcomes = info.value.outcomes
    assert outcomes[2].startswith("terminated")
    assert all("worker 2 sent nothing" in outcomes[w] for w in (0, 1))


def test_a_worker_busy_in_a_long_user_function_is_not_declared_dead():
    def slow(x):
        if x == 1:
            end = time.monotonic() + 2.5
            while time.monotonic() < end:  # holds the interpreter, never returns to step
                pass
        return x

    def work(worker):
        cap = worker.dataflow(
            lambda s: s.to_stream([worker.index]).map(slow).exchange(lambda x: 0).capture()
        )
        worker.run()
        return sorted(x for _t, recs in cap.extract() for x in recs)

    start = time.monotonic()
    results = pt.execute(work, workers=2, timeout=60, heartbeat_timeout=1.0)
    assert results == [[0, 1], []]
    assert time.monotonic() - start >= 2.5


# --- timeouts say what every unfinished worker was doing ------------------------------------------


def _sleepy(x):
    time.sleep(60)  # the line the diagnosis must point at
    return x


def test_an_execute_timeout_shows_what_each_unfinished_worker_was_doing():
    def work(worker):
        records = [1] if worker.index == 1 else []
        worker.dataflow(lambda s: s.to_stream(records).map(_sleepy, name="Sleepy").probe())
        worker.run()

    start = time.monotonic()
    with pytest.raises(WorkerFailure) as info:
        pt.execute(work, workers=2, timeout=2.0)
    assert time.monotonic() - start < 15
    message = str(info.value)
    assert "workers [0, 1] did not finish within the 2 s timeout" in message
    worker_1 = message.split("\nworker 1 ")[1]
    assert "running operator 'Sleepy' at (0, 2)" in worker_1
    assert "in _sleepy" in worker_1 and "time.sleep(60)" in worker_1
    worker_0 = message.split("\nworker 0 ")[1].split("\nworker 1 ")[0]
    assert "waiting in Worker.run" in worker_0 and "in await_events" in worker_0
    assert "multiprocessing" not in message  # the launcher's own frames are cut off
    assert "running operator 'Sleepy'" in info.value.outcomes[1]


def test_a_step_while_timeout_on_several_workers_says_what_it_waits_for():
    def work(worker):
        def build(scope):
            inp, s = scope.new_input()
            return inp, s.exchange(lambda x: x).probe()

        inp, probe = worker.dataflow(build, name="Waiting")
        message = None
        if worker.index == 0:
            inp.advance_to(1)
            try:
                worker.step_while(lambda: probe.less_than(1), timeout=0.5)
            except TimeoutError as exc:
                message = str(exc)
        else:
            time.sleep(2)  # user code, holding its input at time 0
        inp.close()
        worker.run()
        return message

    message = pt.execute(work, workers=2, timeout=60)[0]
    assert message.startswith("step_while: condition still true after 0.5 s on worker 0 of 2")
    assert "worker 0 holds:\n  dataflow 0 (Waiting):\n    Input capability" in message
    assert "time 0 x1 (0 held by worker 0, 1 by other workers)" in message


def _hog(x):
    re.match(r"(a+)+$", "a" * 64 + "b")  # backtracks in C for ages, holding the interpreter
    return x


def test_an_execute_timeout_describes_a_worker_that_holds_the_interpreter_lock():
    def work(worker):
        records = [1] if worker.index == 1 else []
        worker.dataflow(lambda s: s.to_stream(records).map(_hog, name="Hog").probe())
        worker.run()

    with pytest.raises(WorkerFailure) as info:
        pt.execute(work, workers=2, timeout=2.0)
    worker_1 = str(info.value).split("\nworker 1 ")[1]
    assert "holding the interpreter lock, unable to answer" in worker_1
    assert "in _hog" in worker_1 and "in _run_children" in worker_1
    assert "holding the interpreter lock" in info.value.outcomes[1]


def test_a_peer_is_notified_while_this_worker_works_at_the_same_time():
    """The progress that reports a time's last message consumed leaves at once, not after the
    work this worker does at that time in the same step: otherwise a loop's rounds run one
    worker after the other.  Worker 1 sends worker 0 the only record; worker 0 then works
    ``BUSY`` seconds at its notification; worker 1's notification must not wait for that."""
    busy = 3.0

    def work(worker):
        notified = []

        def build(scope):
            inp, stream = scope.new_input()

            def logic(inp_port, out, notificator):
                for _ref, _batch in inp_port:
                    pass
                for cap in notificator:
                    notified.append(time.monotonic())
                    if worker.index == 0:
                        time.sleep(busy)  # a long round of this worker's own work
                    cap.drop()

            stream.unary_notify(pt.Exchange(lambda x: 0), "Round", [0], logic)
            return inp

        inp = worker.dataflow(build)
        worker.step()
        if worker.index == 1:
            time.sleep(0.3)  # worker 0 is parked, waiting for this worker's progress
            inp.send("the only record")
        sent = time.monotonic()
        inp.close()
        worker.run()
        return notified[0] - sent

    waited = pt.execute(work, workers=2, timeout=60)[1]
    assert waited < busy / 2, f"worker 1 was notified {waited:.2f} s after sending"


def test_worker_processes_print_whole_lines_even_unbuffered(tmp_path):
    # Under ``python -u`` / PYTHONUNBUFFERED, print writes its text and its newline in two
    # system calls: three worker processes printing at once into one pipe would run their
    # lines into each other ("hello 2hello 1").
    import subprocess
    import sys

    script = tmp_path / "chatty.py"
    script.write_text(
        "import pytimely as pt\n"
        "def work(worker):\n"
        "    for i in range(3000):\n"
        "        print(f'line {worker.index} {i}')\n"
        "pt.execute(work, workers=3, timeout=60)\n"
    )
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 9000
    assert all(len(line.split()) == 3 for line in lines), [
        line for line in lines if len(line.split()) != 3
    ][:3]
