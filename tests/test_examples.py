"""The examples in ``examples/`` print what plain Python says they should.

Each script is run the way a user runs it, and its printed answer is checked against a direct
computation at small sizes: on one worker in this process (:func:`printed_by`, with ``runpy``),
and, where the example is data-parallel, as a program on two and three worker processes
(:func:`printed_by_program`, ``-w N``).  A script's own functions -- its data generator, its
worker body -- are loaded without running it (:func:`definitions`) when a test needs them.
"""

from __future__ import annotations

import ast
import contextlib
import io
import os
import re
import runpy
import subprocess
import sys
from collections import Counter, deque
from pathlib import Path
from unittest import mock

import pytest

import pytimely as pt

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def printed_by(name: str, *words: str) -> list[str]:
    """Run ``examples/<name>.py`` with command-line ``words`` in this process (as ``__main__``);
    the lines it printed."""
    path = str(EXAMPLES / f"{name}.py")
    out = io.StringIO()
    with mock.patch.object(sys, "argv", [path, *words]), contextlib.redirect_stdout(out):
        runpy.run_path(path, run_name="__main__")
    return out.getvalue().splitlines()


#: Runs a script with line-buffered stdout: the worker processes it forks share the pipe, and
#: each line must reach it in one write to arrive whole (a pipe is otherwise block-buffered, and
#: unbuffered -- ``PYTHONUNBUFFERED`` -- writes a line and its newline separately).
LINE_BUFFERED = (
    "import runpy, sys; sys.stdout.reconfigure(line_buffering=True, write_through=False); "
    "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def printed_by_program(name: str, *words: str, timeout: float = 120) -> list[str]:
    """Run ``examples/<name>.py`` as a program with command-line ``words``; its stdout lines."""
    env = dict(os.environ, PYTHONPATH=str(EXAMPLES.parent))
    done = subprocess.run(
        [sys.executable, "-c", LINE_BUFFERED, str(EXAMPLES / f"{name}.py"), *words],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def printed(name: str, *words: str, workers: int = 1) -> list[str]:
    """What ``python examples/<name>.py WORDS -w WORKERS`` prints (in this process for one
    worker)."""
    if workers == 1:
        return printed_by(name, *words)
    return printed_by_program(name, *words, "-w", str(workers))


def definitions(name: str) -> dict:
    """The functions and constants of ``examples/<name>.py``, without running its program."""
    return runpy.run_path(str(EXAMPLES / f"{name}.py"))


def stdout_of(fn) -> list[str]:
    """The lines ``fn()`` printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        fn()
    return out.getvalue().splitlines()


def by_worker(lines: list[str]) -> dict[int, list[str]]:
    """``worker I:<tab>rest`` lines grouped by ``I``, in order."""
    grouped: dict[int, list[str]] = {}
    for line in lines:
        head, rest = line.split(":\t", 1)
        grouped.setdefault(int(head.removeprefix("worker ")), []).append(rest)
    return grouped


# --------------------------------------------------------------------------------------------
# simple, hello


def test_simple():
    assert printed("simple") == [f"seen: {i}" for i in range(10)]


def test_simple_prints():
    assert printed("simple", "3") == ["seen: 0", "seen: 1", "seen: 2"]


def test_simple_runs_as_a_script():
    assert printed_by_program("simple") == [f"seen: {i}" for i in range(10)]


def test_hello_one_worker():
    assert printed("hello") == [f"worker 0:\thello {r}" for r in range(10)]


@pytest.mark.parametrize("workers", [2, 3])
def test_hello_on_several_workers(workers):
    seen = by_worker(printed("hello", "10", workers=workers))
    # Integer keys route to worker key % peers (as in timely): round r prints on r % W.
    for index in range(workers):
        assert seen.get(index, []) == [f"hello {r}" for r in range(10) if r % workers == index]


# --------------------------------------------------------------------------------------------
# distinct, wordcount


def distinct_values(lines):
    """``{worker: {time: sorted values}}`` from distinct.py's lines."""
    got: dict[int, dict[int, list[int]]] = {}
    for index, rests in by_worker(lines).items():
        for rest in rests:
            value, time = re.fullmatch(r"value (\d+) at time (\d+)", rest).groups()
            got.setdefault(index, {}).setdefault(int(time), []).append(int(value))
    return {i: {t: sorted(v) for t, v in times.items()} for i, times in got.items()}


def test_distinct_one_worker():
    assert printed("distinct") == [f"worker 0:\tvalue {x} at time 0" for x in range(5)]
    assert distinct_values(printed("distinct", "3")) == {0: {t: [0, 1, 2, 3, 4] for t in range(3)}}


def test_distinct_two_workers():
    # As in timely: worker 0 gets {0, 2, 4}, worker 1 gets {1, 3, 5, 7}, at every time.
    assert distinct_values(printed("distinct", "2", workers=2)) == {
        0: {0: [0, 2, 4], 1: [0, 2, 4]},
        1: {0: [1, 3, 5, 7], 1: [1, 3, 5, 7]},
    }


def test_distinct_three_workers():
    per_worker = distinct_values(printed("distinct", "2", workers=3))
    for t in range(2):
        values = sorted(v for got in per_worker.values() for v in got.get(t, []))
        assert values == [0, 1, 2, 3, 4, 5, 7]  # the union of both inputs, once each
        for index, got in per_worker.items():
            assert all(v % 3 == index for v in got.get(t, []))


def plain_wordcount(rounds, lines, workers=1):
    counts: Counter = Counter()
    out = []
    for r in range(rounds):
        for _ in range(workers):
            for word in lines[r % len(lines)].split():
                counts[word] += 1
                out.append((r, word, counts[word]))
    return out


def word_counts(lines):
    """``(time, word, count)`` from wordcount.py's ``seen: (word, count) at time`` lines."""
    got = []
    for line in lines:
        pair, time = re.fullmatch(r"seen: (.*) at (\d+)", line).groups()
        word, count = ast.literal_eval(pair)
        got.append((int(time), word, count))
    return got


def test_wordcount_rounds():
    assert printed("wordcount") == [f"seen: ('round', {r + 1}) at {r}" for r in range(10)]


def test_wordcount_text():
    lines = ["the quick brown fox", "jumps over the lazy dog", "the end", "fox fox fox"]
    assert word_counts(printed("wordcount", "7", *lines)) == plain_wordcount(7, lines)


def test_wordcount_two_workers():
    # Every worker sends ("round", 1) each round: counts r*W+1 .. (r+1)*W at time r.
    got = sorted(word_counts(printed("wordcount", "5", workers=2)))
    assert got == [(r, "round", 2 * r + k) for r in range(5) for k in (1, 2)]
    lines = ["a b c d e f", "b c d", "a a"]
    got = sorted(word_counts(printed("wordcount", "4", *lines, workers=2)))
    assert got == sorted(plain_wordcount(4, lines, workers=2))


def test_wordcount_three_workers():
    lines = ["a b c d e f", "b c d", "a a"]
    got = sorted(word_counts(printed("wordcount", "4", *lines, workers=3)))
    assert got == sorted(plain_wordcount(4, lines, workers=3))


# --------------------------------------------------------------------------------------------
# loops: loopdemo, bfs, pagerank, barrier


def collatz(n):
    steps = 0
    while n > 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_loopdemo(workers):
    numbers: Counter = Counter()
    longest: Counter = Counter()
    for rests in by_worker(printed("loopdemo", "4", "25", workers=workers)).values():
        for rest in rests:
            r, n, s = map(
                int, re.fullmatch(r"round (\d+): (\d+) numbers, longest (\d+) steps", rest).groups()
            )
            numbers[r] += n
            longest[r] = max(longest[r], s)
    assert numbers == {r: 25 for r in range(4)}
    assert longest == {r: max(collatz(n) for n in range(25 * r + 1, 25 * r + 26)) for r in range(4)}


def test_loopdemo_prints():
    assert "worker 0:\tround 0: 30 numbers, longest 111 steps" in printed("loopdemo", "2", "30")


def plain_bfs(edges, root):
    adjacency = {}
    for a, b in edges:
        adjacency.setdefault(a, []).append(b)
    depth = {root: 0}
    queue = deque([root])
    while queue:
        v = queue.popleft()
        for w in adjacency.get(v, ()):
            if w not in depth:
                depth[w] = depth[v] + 1
                queue.append(w)
    return depth


def bfs_report(nodes, edges):
    graph = definitions("bfs")["random_edges"](nodes, edges).tolist()
    depths = Counter(plain_bfs(graph, 0).values())
    return [f"depth {d}:\t{depths[d]} nodes" for d in sorted(depths)] + [
        f"reached {depths.total()} of {nodes} nodes"
    ]


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_bfs(workers):
    for nodes, edges in [(300, 600), (50, 40)]:
        assert printed("bfs", str(nodes), str(edges), workers=workers) == bfs_report(nodes, edges)


def test_bfs_deep_chain():
    assert printed("bfs", "1", "0") == ["depth 0:\t1 nodes", "reached 1 of 1 nodes"]


def test_bfs_prints():
    out = printed("bfs", "200", "400")
    assert out == bfs_report(200, 400) and len(out) > 3


def plain_pagerank(nodes, edges, iterations):
    adjacency = {}
    for a, b in edges:
        adjacency.setdefault(a, []).append(b)
    ranks = {v: 1.0 for v in range(nodes)}
    for _ in range(iterations):
        sums = {}
        for v, targets in adjacency.items():
            for w in targets:
                sums[w] = sums.get(w, 0.0) + ranks[v] / len(targets)
        ranks = {v: 0.15 + 0.85 * sums.get(v, 0.0) for v in range(nodes)}
    return ranks


def check_pagerank(lines, nodes, edges, iterations):
    graph = definitions("pagerank")["random_edges"](nodes, edges).tolist()
    expected = plain_pagerank(nodes, graph, iterations)
    assert lines[0] == (
        f"{nodes} nodes after {iterations} iterations; total rank {sum(expected.values()):.3f}"
    )
    top = sorted(expected.items(), key=lambda pair: (-pair[1], pair[0]))[:5]
    got = [re.fullmatch(r"node (\d+):\t([\d.]+)", line).groups() for line in lines[1:]]
    assert [int(node) for node, _rank in got] == [node for node, _rank in top]
    assert [float(rank) for _node, rank in got] == pytest.approx([r for _n, r in top], abs=1e-4)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_pagerank(workers):
    check_pagerank(printed("pagerank", "150", "600", "8", workers=workers), 150, 600, 8)


def test_pagerank_zero_iterations():
    lines = printed("pagerank", "10", "20", "0")
    check_pagerank(lines, 10, 20, 0)
    assert lines[1:] == [f"node {v}:\t1.0000" for v in range(5)]


def barrier_reports(lines):
    return [
        re.match(r"worker (\d+): (\d+) notifications, at most (\d+) per call", line).groups()
        for line in lines
    ]


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_barrier(workers):
    # Notifications are serialized by progress: at most one per invocation.
    reports = barrier_reports(printed("barrier", "50", workers=workers))
    assert sorted(reports) == [(str(i), "50", "1") for i in range(workers)]


def test_barrier_tiny():
    assert barrier_reports(printed("barrier", "1")) == [("0", "1", "1")]
    assert barrier_reports(printed("barrier", "0")) == [("0", "0", "0")]


# --------------------------------------------------------------------------------------------
# unionfind, hashjoin


def plain_components(nodes, edges):
    parent = list(range(nodes))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return len({find(v) for v in range(nodes)})


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_unionfind(workers):
    nodes, edges = 400, 500
    count = plain_components(nodes, definitions("unionfind")["random_edges"](nodes, edges))
    # A spanning forest: exactly one edge fewer than nodes per component.
    assert printed("unionfind", str(nodes), str(edges), workers=workers) == [
        f"{nodes - count} spanning edges; {count} components among {nodes} nodes"
    ]


def test_unionfind_components_of_a_forest():
    components = definitions("unionfind")["components"]
    assert components([(3, 1), (1, 4), (2, 0)], 6) == [0, 1, 0, 1, 1, 5]


def plain_join(left, right):
    by_key = {}
    for k, v in right:
        by_key.setdefault(k, []).append(v)
    return sorted((k, v, w) for k, v in left for w in by_key.get(k, ()))


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_hashjoin(workers):
    expected = plain_join(*definitions("hashjoin")["generate"](50, 600, 0))
    lines = printed("hashjoin", "50", "600", "100", workers=workers)
    assert lines[-1] == f"{len(expected)} join results"


def test_hashjoin_prints():
    out = printed("hashjoin", "10", "100", "30")
    expected = plain_join(*definitions("hashjoin")["generate"](10, 100, 0))
    assert out[-1] == f"{len(expected)} join results"
    assert any("worker 0 batch 4 complete" in line for line in out)


# --------------------------------------------------------------------------------------------
# unordered_input, event_driven


def test_unordered_input():
    assert printed("unordered_input") == [f"{i} -> [{i}]" for i in range(10)]
    assert printed("unordered_input", "3") == ["0 -> [0]", "1 -> [1]", "2 -> [2]"]


def most_steps(lines):
    return int(re.fullmatch(r"every round completed in at most (\d+) steps", lines[-1]).group(1))


def test_event_driven_rounds_complete_in_few_steps():
    assert most_steps(printed("event_driven", "20", "20", "60")) <= 2
    assert most_steps(printed("event_driven", "20", "20", "30", "norecord")) <= 2


def test_event_driven_prints():
    out = "\n".join(printed("event_driven", "5", "5", "100"))
    assert "dataflows built (5 x 5)" in out
    assert "round 99 complete in" in out


# --------------------------------------------------------------------------------------------
# --help: every example answers it (note: -h is timely's host file flag, not help)


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES.glob("*.py")))
def test_every_example_answers_help(name):
    path = str(EXAMPLES / f"{name}.py")
    out = io.StringIO()
    with mock.patch.object(sys, "argv", [path, "--help"]), contextlib.redirect_stdout(out):
        with pytest.raises(SystemExit) as exit_info:
            runpy.run_path(path, run_name="__main__")
    assert exit_info.value.code in (0, None)
    doc = definitions(name)["__doc__"]
    assert f"$ python examples/{name}.py" in out.getvalue()  # the usage lines of its docstring
    assert doc.strip().splitlines()[0] in out.getvalue()


def test_help_from_the_command_line_lists_timely_flags():
    env = dict(os.environ, PYTHONPATH=str(EXAMPLES.parent))
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "hello.py"), "--help"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "$ python examples/hello.py" in done.stdout
    assert "-h, --hostfile FILE" in done.stdout and "-w, --workers N" in done.stdout
    assert done.stderr == ""


def test_args_are_the_words_that_are_not_timely_flags():
    words = ["5", "-w", "2", "--secret", "s", "-n", "1", "-p", "0", "--insecure", "x.txt"]
    assert pt.args(words) == ["5", "--insecure", "x.txt"]
    with mock.patch.object(sys, "argv", ["prog", "7", "--workers", "3"]):
        assert pt.args() == ["7"]


# --------------------------------------------------------------------------------------------
# sessionization


def plain_sessions(clicks, gap):
    """``(user, start, end, clicks)`` of every session, computed directly."""
    open_: dict = {}
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


def sessions(lines):
    """``(time, (user, start, end, clicks))`` from sessionization.py's lines."""
    got = []
    for line in lines:
        user, start, end, count, t = re.fullmatch(
            r"user (\w+): \[(\d+), (\d+)\) (\d+) clicks, at (\d+)", line
        ).groups()
        user = int(user) if user.isdigit() else user
        got.append((int(t), (user, int(start), int(end), int(count))))
    return got


def test_sessionization_small_known_answer():
    got = sessions(printed("sessionization", "12", "2", "3"))
    expected = plain_sessions(definitions("sessionization")["make_clicks"](12, 2), 3)
    assert sorted(s for _t, s in got) == expected
    assert all(t == end for t, (_u, _s, end, _n) in got)  # reported at the end
    assert sum(n for _u, _s, _e, n in expected) == 12


def test_sessionization_a_click_at_the_gap_starts_a_new_session():
    work = definitions("sessionization")["work"]
    clicks = [(0, "u"), (2, "u"), (2, "v"), (5, "u"), (9, "u")]
    got = sessions(stdout_of(lambda: pt.execute(lambda worker: work(worker, clicks, 3))))
    # 5 - 2 == gap: a new session; each reported at its end.
    assert sorted(got) == [
        (5, ("u", 0, 5, 2)),
        (5, ("v", 2, 5, 1)),
        (8, ("u", 5, 8, 1)),
        (12, ("u", 9, 12, 1)),
    ]
    assert plain_sessions(clicks, 3) == sorted(s for _t, s in got)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_sessionization_matches_plain_python(workers):
    got = sessions(printed("sessionization", "600", "15", "10", workers=workers))
    clicks = definitions("sessionization")["make_clicks"](600, 15)
    assert sorted(s for _t, s in got) == plain_sessions(clicks, 10)
    assert all(t == s[2] for t, s in got)


# --------------------------------------------------------------------------------------------
# windowed_join


def plain_matches(events, width):
    """``(user, start, end, ad, item)`` for every click and purchase of a user in one window."""
    bought: dict = {}
    for t, kind, user, item in events:
        if kind == "buy":
            bought.setdefault((user, t // width), []).append(item)
    return sorted(
        (user, t // width * width, (t // width + 1) * width, ad, item)
        for t, kind, user, ad in events
        if kind == "click"
        for item in bought.get((user, t // width), ())
    )


def matches(lines):
    """``(time, (user, start, end, ad, item))`` from windowed_join.py's lines."""
    got = []
    for line in lines:
        user, start, end, ad, item, t = re.fullmatch(
            r"user (\d+): \[(\d+), (\d+)\) clicked (\w+), bought (\w+), at (\d+)", line
        ).groups()
        got.append((int(t), (int(user), int(start), int(end), ad, item)))
    return got


def test_windowed_join_known_answer():
    work = definitions("windowed_join")["work"]
    data = [
        (1, "click", 1, "ad1"),
        (4, "buy", 1, "book"),
        (9, "buy", 2, "pen"),
        (10, "buy", 1, "lamp"),
        (12, "click", 1, "ad2"),
        (15, "click", 2, "ad3"),
    ]
    got = matches(stdout_of(lambda: pt.execute(lambda worker: work(worker, data, 10))))
    # The lamp bought at 10 is in [10, 20), with the second click; user 2 clicked a window late.
    assert sorted(got) == [(10, (1, 0, 10, "ad1", "book")), (20, (1, 10, 20, "ad2", "lamp"))]
    assert plain_matches(data, 10) == sorted(m for _t, m in got)


@pytest.mark.parametrize("workers", [1, 2])
def test_windowed_join_matches_plain_python(workers):
    got = matches(printed("windowed_join", "300", "6", "12", workers=workers))
    expected = plain_matches(definitions("windowed_join")["make_events"](300, 6), 12)
    assert sorted(m for _t, m in got) == expected and len(expected) >= 50
    assert all(t == m[2] for t, m in got)  # at the window's end


def test_windowed_join_prints_its_matches():
    assert matches(printed("windowed_join", "40", "3", "5"))


# components: label propagation, the example of docs/graphs.md


def traversed_components(nodes, edges):
    """Components by a plain traversal: how many, and each node's smallest member."""
    adjacency = {}
    for a, b in edges:
        adjacency.setdefault(a, []).append(b)
        adjacency.setdefault(b, []).append(a)
    label = {}
    for start in range(nodes):
        if start in label:
            continue
        group, stack = [start], [start]
        label[start] = start
        while stack:
            for w in adjacency.get(stack.pop(), ()):
                if w not in label:
                    label[w] = start
                    group.append(w)
                    stack.append(w)
    return len(set(label.values())), {v: r for v, r in label.items() if r != v}


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_components_by_label_propagation(workers):
    defs = definitions("components")
    nodes, edges = 3000, 3500
    batches = defs["edge_batches"](nodes, edges, 0, 1, 1_000)
    pairs = [p for b in batches for p in zip(b["src"].tolist(), b["dst"].tolist())]
    count, smallest = traversed_components(nodes, pairs)
    assert defs["union_find_labels"](batches) == smallest  # the example's own reference
    (line,) = printed("components", str(nodes), str(edges), workers=workers)
    assert line.startswith(f"{nodes:,} nodes, {edges:,} edges: {count:,} components in ")
