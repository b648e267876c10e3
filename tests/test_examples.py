"""The examples in ``examples/`` compute what plain Python says they should.

Every example exposes ``run(...)`` returning its answer; here each answer is checked against a
direct computation, at small sizes, on one worker and (where the example is data-parallel) on two
worker processes.  ``main(argv)`` is exercised too, so the scripts stay runnable.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections import Counter, deque
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load(name: str):
    spec = importlib.util.spec_from_file_location(
        f"pytimely_example_{name}", EXAMPLES / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------------------------
# simple, hello


def test_simple():
    simple = load("simple")
    assert simple.run(10) == list(range(10))


def test_simple_prints(capsys):
    load("simple").main(["3"])
    assert capsys.readouterr().out.splitlines() == ["seen: 0", "seen: 1", "seen: 2"]


def test_simple_runs_as_a_script():
    env = dict(os.environ, PYTHONPATH=str(EXAMPLES.parent))
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "simple.py")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"seen: {i}" for i in range(10)]


def test_hello_one_worker(capsys):
    hello = load("hello")
    assert hello.main([]) == [[(r, r) for r in range(10)]]
    assert capsys.readouterr().out.splitlines() == [f"worker 0:\thello {r}" for r in range(10)]


def test_hello_two_workers():
    hello = load("hello")
    seen = hello.run(10, workers=2)
    for index, pairs in enumerate(seen):
        # Integer keys route to worker key % peers (as in timely): round r prints on r % 2.
        assert pairs == [(r, r) for r in range(10) if r % 2 == index]


# --------------------------------------------------------------------------------------------
# distinct, wordcount


def test_distinct_one_worker(capsys):
    distinct = load("distinct")
    assert distinct.main([]) == [{0: [0, 1, 2, 3, 4]}]
    assert "worker 0:\tvalue 4 at time 0" in capsys.readouterr().out
    assert distinct.run(3) == [{t: [0, 1, 2, 3, 4] for t in range(3)}]


def test_distinct_two_workers():
    distinct = load("distinct")
    per_worker = distinct.run(2, workers=2)
    # As in timely: worker 0 gets {0, 2, 4}, worker 1 gets {1, 3, 5, 7}, at every time.
    assert per_worker == [{0: [0, 2, 4], 1: [0, 2, 4]}, {0: [1, 3, 5, 7], 1: [1, 3, 5, 7]}]


def plain_wordcount(rounds, lines, workers=1):
    counts: Counter = Counter()
    out = []
    for r in range(rounds):
        for _ in range(workers):
            for word in lines[r % len(lines)].split():
                counts[word] += 1
                out.append((r, word, counts[word]))
    return out


def test_wordcount_rounds(capsys):
    wordcount = load("wordcount")
    assert wordcount.main([]) == [[(r, "round", r + 1) for r in range(10)]]
    assert capsys.readouterr().out.splitlines() == [
        f"seen: ('round', {r + 1})" for r in range(10)
    ]


def test_wordcount_text():
    wordcount = load("wordcount")
    lines = ["the quick brown fox", "jumps over the lazy dog", "the end", "fox fox fox"]
    assert wordcount.run(7, lines) == [plain_wordcount(7, lines)]


def test_wordcount_two_workers():
    wordcount = load("wordcount")
    per_worker = wordcount.run(5, workers=2)
    merged = sorted(x for got in per_worker for x in got)
    # Every worker sends ("round", 1) each round: counts r*W+1 .. (r+1)*W at time r.
    assert merged == [(r, "round", 2 * r + k) for r in range(5) for k in (1, 2)]
    assert sum(1 for got in per_worker if got) == 1  # one word: one worker does the counting

    lines = ["a b c d e f", "b c d", "a a"]
    per_worker = wordcount.run(4, lines, workers=2)
    merged = sorted(x for got in per_worker for x in got)
    assert merged == sorted(plain_wordcount(4, lines, workers=2))


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
    loopdemo = load("loopdemo")
    per_worker = loopdemo.run(4, 25, workers=workers)
    merged = sorted(x for got in per_worker for x in got)
    assert merged == [(n // 25 if n % 25 else n // 25 - 1, n, collatz(n)) for n in range(1, 101)]


def test_loopdemo_prints(capsys):
    load("loopdemo").main(["2", "30"])
    out = capsys.readouterr().out
    assert "round 0: 30 numbers, longest 111 steps" in out  # 27 takes 111 steps


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


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_bfs(workers):
    bfs = load("bfs")
    for nodes, edges, seed in [(300, 600, 0), (50, 40, 1)]:
        expected = plain_bfs(bfs.random_edges(nodes, edges, seed), 0)
        assert bfs.run(nodes, edges, seed=seed, workers=workers) == expected
    assert max(expected.values()) >= 0


def test_bfs_deep_chain():
    bfs = load("bfs")
    got = bfs.run(1, 0, workers=1)  # one node, no edges: only the root
    assert got == {0: 0}


def test_bfs_prints(capsys):
    bfs = load("bfs")
    depths = bfs.main(["200", "400"])
    out = capsys.readouterr().out
    assert f"reached {len(depths)} of 200 nodes" in out
    assert "depth 0:\t1 nodes" in out


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


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_pagerank(workers):
    pagerank = load("pagerank")
    nodes, edges, iterations = 150, 600, 8
    got = pagerank.run(nodes, edges, iterations, workers=workers)
    expected = plain_pagerank(nodes, pagerank.random_edges(nodes, edges), iterations)
    assert got.keys() == expected.keys()
    assert got == pytest.approx(expected, rel=1e-9)


def test_pagerank_zero_iterations():
    pagerank = load("pagerank")
    assert pagerank.run(10, 20, 0) == {v: 1.0 for v in range(10)}


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_barrier(workers):
    barrier = load("barrier")
    for stats in barrier.run(50, workers=workers):
        assert stats["notified"] == list(range(50))
        # Notifications are serialized by progress: at most one per invocation.
        assert stats["most_per_call"] == 1


def test_barrier_tiny():
    barrier = load("barrier")
    assert barrier.run(1)[0]["notified"] == [0]
    assert barrier.run(0)[0]["notified"] == []


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
    groups = {}
    for v in range(nodes):
        groups.setdefault(find(v), []).append(v)
    label = [0] * nodes
    for members in groups.values():
        for v in members:
            label[v] = min(members)
    return label


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_unionfind(workers):
    unionfind = load("unionfind")
    nodes, edges = 400, 500
    forest = unionfind.run(nodes, edges, workers=workers)
    expected = plain_components(nodes, unionfind.random_edges(nodes, edges))
    assert unionfind.components(forest, nodes) == expected
    # A spanning forest: exactly one edge fewer than nodes per component.
    assert len(forest) == nodes - len(set(expected))
    assert set(forest) <= set(unionfind.random_edges(nodes, edges))


def test_unionfind_prints(capsys):
    load("unionfind").main(["100", "80"])
    assert "spanning edges" in capsys.readouterr().out


def plain_join(left, right):
    by_key = {}
    for k, v in right:
        by_key.setdefault(k, []).append(v)
    return sorted((k, v, w) for k, v in left for w in by_key.get(k, ()))


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_hashjoin(workers):
    hashjoin = load("hashjoin")
    keys, vals, batch = 50, 600, 100
    got = hashjoin.run(keys, vals, batch, workers=workers)
    assert sorted(got) == plain_join(*hashjoin.generate(keys, vals, 0))


def test_hashjoin_prints(capsys):
    results = load("hashjoin").main(["10", "100", "30"])
    out = capsys.readouterr().out
    assert f"{len(results)} join results" in out
    assert "worker 0 batch 4 complete" in out


# --------------------------------------------------------------------------------------------
# unordered_input, event_driven


def test_unordered_input(capsys):
    unordered = load("unordered_input")
    extracted = unordered.main([])
    assert extracted == [(i, [i]) for i in range(10)]
    for i, entry in enumerate(extracted):
        assert entry == (i, [i])
    assert capsys.readouterr().out.splitlines() == [f"{i} -> [{i}]" for i in range(10)]


def test_event_driven_rounds_complete_in_few_steps():
    event_driven = load("event_driven")
    steps = event_driven.run(dataflows=20, length=20, rounds=60)
    assert len(steps) == 60
    assert max(steps) <= 2
    steps = event_driven.run(dataflows=20, length=20, rounds=30, record=False)
    assert max(steps) <= 2


def test_event_driven_prints(capsys):
    load("event_driven").main(["5", "5", "100"])
    out = capsys.readouterr().out
    assert "dataflows built (5 x 5)" in out
    assert "round 99 complete in" in out


# --------------------------------------------------------------------------------------------
# Three worker processes give the same answers as one.


def test_hello_three_workers():
    seen = load("hello").run(10, workers=3)
    for index, pairs in enumerate(seen):
        assert pairs == [(r, r) for r in range(10) if r % 3 == index]


def test_distinct_three_workers():
    per_worker = load("distinct").run(2, workers=3)
    for t in range(2):
        values = sorted(v for got in per_worker for v in got.get(t, []))
        assert values == [0, 1, 2, 3, 4, 5, 7]  # the union of both inputs, once each
        for index, got in enumerate(per_worker):
            assert all(v % 3 == index for v in got.get(t, []))


def test_wordcount_three_workers():
    lines = ["a b c d e f", "b c d", "a a"]
    per_worker = load("wordcount").run(4, lines, workers=3)
    merged = sorted(x for got in per_worker for x in got)
    assert merged == sorted(plain_wordcount(4, lines, workers=3))


# --------------------------------------------------------------------------------------------
# --help: every example answers it (note: -h is timely's host file flag, not help)


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES.glob("*.py")))
def test_every_example_answers_help(name, capsys):
    module = load(name)
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--help"])
    assert exit_info.value.code in (0, None)
    out = capsys.readouterr().out
    assert f"$ python examples/{name}.py" in out  # the usage lines of its docstring
    assert module.__doc__.strip().splitlines()[0] in out


def test_help_from_the_command_line_lists_timely_flags():
    env = dict(os.environ, PYTHONPATH=str(EXAMPLES.parent))
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "hello.py"), "--help"], capture_output=True, text=True,
        env=env, check=False, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "$ python examples/hello.py" in done.stdout
    assert "-h, --hostfile FILE" in done.stdout and "-w, --workers N" in done.stdout
    assert done.stderr == ""


# --------------------------------------------------------------------------------------------
# sessionization


def test_sessionization_small_known_answer(capsys):
    sessionization = load("sessionization")
    per_worker = sessionization.main(["12", "2", "3"])
    clicks = sessionization.make_clicks(12, 2)
    expected = sessionization.plain_sessions(clicks, 3)
    assert sorted(s for _t, s in per_worker[0]) == expected
    assert all(t == end for t, (_u, _s, end, _n) in per_worker[0])  # reported at the end
    assert sum(n for _u, _s, _e, n in expected) == 12
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == len(expected) and printed[0].startswith("user ")


def test_sessionization_a_click_at_the_gap_starts_a_new_session():
    sessionization = load("sessionization")
    clicks = [(0, "u"), (2, "u"), (2, "v"), (5, "u"), (9, "u")]
    (got,) = sessionization.run(gap=3, clicks=clicks)
    # 5 - 2 == gap: a new session; each reported at its end.
    assert sorted(got) == [
        (5, ("u", 0, 5, 2)), (5, ("v", 2, 5, 1)), (8, ("u", 5, 8, 1)), (12, ("u", 9, 12, 1)),
    ]
    assert sessionization.plain_sessions(clicks, 3) == sorted(s for _t, s in got)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_sessionization_matches_plain_python(workers):
    sessionization = load("sessionization")
    per_worker = sessionization.run(600, 15, 10, workers=workers)
    got = sorted(s for sessions in per_worker for _t, s in sessions)
    assert got == sessionization.plain_sessions(sessionization.make_clicks(600, 15), 10)
    assert all(t == s[2] for sessions in per_worker for t, s in sessions)


# --------------------------------------------------------------------------------------------
# windowed_join


def test_windowed_join_known_answer():
    windowed_join = load("windowed_join")
    data = [(1, "click", 1, "ad1"), (4, "buy", 1, "book"), (9, "buy", 2, "pen"),
            (10, "buy", 1, "lamp"), (12, "click", 1, "ad2"), (15, "click", 2, "ad3")]
    (got,) = windowed_join.run(width=10, data=data)
    # The lamp bought at 10 is in [10, 20), with the second click; user 2 clicked a window late.
    assert sorted(got) == [(10, (1, 0, 10, "ad1", "book")), (20, (1, 10, 20, "ad2", "lamp"))]
    assert windowed_join.plain_matches(data, 10) == sorted(m for _t, m in got)


@pytest.mark.parametrize("workers", [1, 2])
def test_windowed_join_matches_plain_python(workers):
    windowed_join = load("windowed_join")
    per_worker = windowed_join.run(300, 6, 12, workers=workers)
    got = sorted(m for matches in per_worker for _t, m in matches)
    expected = windowed_join.plain_matches(windowed_join.make_events(300, 6), 12)
    assert got == expected and len(expected) >= 50
    assert all(t == m[2] for matches in per_worker for t, m in matches)  # at the window's end


def test_windowed_join_prints_its_matches(capsys):
    windowed_join = load("windowed_join")
    per_worker = windowed_join.main(["40", "3", "5"])
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == len(per_worker[0]) > 0 and printed[0].startswith("user ")
