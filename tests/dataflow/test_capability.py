"""Capability misuse and operator failures: each mistake is an error naming the operator, and
a forgotten capability does not stall the dataflow."""

from __future__ import annotations

import pytest

import pytimely as pt
from pytimely.errors import CapabilityError, OperatorError


def _misuse(name, logic_factory, feed=((1,), (2,))):
    """Run an operator named ``name`` over two rounds; return the raised OperatorError."""

    def work(worker):
        def build(scope):
            h, s = scope.new_input()
            s.unary(pt.Pipeline, name, logic_factory)
            return h

        h = worker.dataflow(build)
        for r, records in enumerate(feed):
            for x in records:
                h.send(x)
            h.advance_to(r + 1)
            for _ in range(3):
                worker.step()

    with pytest.raises(OperatorError) as info:
        pt.execute(work)
    error = info.value
    assert error.operator == name
    assert name in str(error)
    assert isinstance(error.__cause__, CapabilityError)
    assert name in str(error.__cause__)
    return error


def test_sending_without_a_token():
    def ctor(cap, info):
        cap.drop()

        def logic(inp, out):
            for _ref, batch in inp:
                out.session(None).give_batch(batch)

        return logic

    error = _misuse("NoToken", ctor)
    assert "requires a Capability" in str(error.__cause__)


def test_sending_with_a_token_of_another_output():
    def build(scope):
        builder = pt.OperatorBuilder("WrongOutput", scope)
        builder.new_input(scope.to_stream([1]), pt.Pipeline)
        builder.new_output()
        builder.new_output()

        def ctor(caps, info):
            first, second = caps
            second.drop()

            def logic(inp, out0, out1):
                for _ in inp:
                    pass
                out1.session(first).give("oops")

            return logic

        builder.build(ctor)

    with pytest.raises(OperatorError) as info:
        pt.example(build)
    assert info.value.operator == "WrongOutput"
    assert isinstance(info.value.__cause__, CapabilityError)
    assert "output 0 cannot send on output 1" in str(info.value.__cause__)


def test_sending_with_a_token_of_another_operator():
    stolen = []

    def thief(cap, info):
        stolen.append(cap)

        def logic(inp, out):
            for _ in inp:
                pass

        return logic

    def user(cap, info):
        cap.drop()

        def logic(inp, out):
            for _ in inp:
                pass
            if stolen:
                out.session(stolen[0]).give(1)

        return logic

    def build(scope):
        s = scope.to_stream([1])
        s.unary(pt.Pipeline, "Thief", thief)
        s.unary(pt.Pipeline, "User", user)

    with pytest.raises(OperatorError) as info:
        pt.example(build)
    assert info.value.operator == "User"
    assert "Thief" in str(info.value.__cause__)


def test_message_token_on_an_unconnected_output():
    def build(scope):
        builder = pt.OperatorBuilder("Disconnected", scope)
        builder.new_input(scope.to_stream([1]), pt.Pipeline, connection=[0, None])
        builder.new_output()
        builder.new_output()

        def ctor(caps, info):
            for c in caps:
                c.drop()

            def logic(inp, out0, out1):
                for ref, _batch in inp:
                    ref.retain(output=1)

            return logic

        builder.build(ctor)

    with pytest.raises(OperatorError) as info:
        pt.example(build)
    assert info.value.operator == "Disconnected"
    assert "not connected" in str(info.value.__cause__)


def test_downgrading_backwards():
    def ctor(cap, info):
        cap.drop()

        def logic(inp, out):
            for ref, _batch in inp:
                c = ref.retain()
                c.downgrade(ref.time + 5)
                c.downgrade(ref.time + 1)

        return logic

    error = _misuse("Backwards", ctor)
    assert "downgrad" in str(error.__cause__)


def test_delayed_backwards():
    def ctor(cap, info):
        cap.drop()

        def logic(inp, out):
            for ref, _batch in inp:
                c = ref.retain()
                c.delayed(ref.time - 1)

        return logic

    _misuse("DelayedBack", ctor, feed=((), (1,)))


def test_sending_before_the_capability_time():
    def ctor(cap, info):
        cap.drop()

        def logic(inp, out):
            for ref, batch in inp:
                out.session(ref, ref.time - 1).give_batch(batch)

        return logic

    error = _misuse("Early", ctor, feed=((), (1,)))
    assert "cannot send at 0" in str(error.__cause__)


def test_using_a_dropped_token():
    def ctor(cap, info):
        cap.drop()

        def logic(inp, out):
            for _ref, batch in inp:
                out.session(cap).give_batch(batch)

        return logic

    error = _misuse("Dropped", ctor)
    assert "after drop()" in str(error.__cause__)


def test_dropping_twice():
    def ctor(cap, info):
        cap.drop()

        def logic(inp, out):
            for _ in inp:
                pass
            cap.drop()

        return logic

    _misuse("DropTwice", ctor)


def test_using_a_capability_ref_after_the_call():
    kept = []

    def ctor(cap, info):
        cap.drop()

        def logic(inp, out):
            for ref, _batch in inp:
                kept.append(ref)
            if len(kept) > 1:
                out.session(kept[0]).give("stale")

        return logic

    error = _misuse("StaleRef", ctor)
    assert "only valid during the call" in str(error.__cause__)

    kept.clear()

    def ctor2(cap, info):
        cap.drop()

        def logic(inp, out):
            for ref, _batch in inp:
                kept.append(ref)
            if len(kept) > 1:
                kept[0].retain()

        return logic

    _misuse("StaleRetain", ctor2)


def test_capability_errors_outside_operators_are_raised_directly():
    worker = pt.Worker()
    (handle, cap), _stream = worker.dataflow(lambda s: s.new_unordered_input())
    later = cap.delayed(3)
    with pytest.raises(CapabilityError, match="UnorderedInput"):
        later.downgrade(1)
    with pytest.raises(CapabilityError):
        later.delayed(2)
    cap.drop()
    with pytest.raises(CapabilityError, match="after drop"):
        cap.time  # noqa: B018
    with pytest.raises(CapabilityError):
        handle.session(cap)
    later.drop()
    worker.run()


def test_operator_exception_propagates_out_of_step():
    def ctor(cap, info):
        cap.drop()

        def logic(inp, out):
            for _ref, batch in inp:
                if 13 in batch:
                    raise ValueError("unlucky record")
                out.session(_ref).give_batch(batch)

        return logic

    worker = pt.Worker()

    def build(scope):
        h, s = scope.new_input()
        scope.region(lambda r: s.enter(r).unary(pt.Pipeline, "Fragile", ctor).leave()).probe()
        return h

    h = worker.dataflow(build)
    h.send(1)
    h.advance_to(1)
    for _ in range(3):
        worker.step()
    h.send(13)
    h.flush()  # inputs buffer records until flushed, advanced or full
    with pytest.raises(OperatorError) as info:
        for _ in range(3):
            worker.step()
    error = info.value
    assert error.operator == "Fragile"
    assert "Fragile" in str(error) and "ValueError" in str(error)
    assert isinstance(error.__cause__, ValueError)
    assert len(error.address) == 3  # (dataflow, region, operator): inside the region
    assert str(error.address) in str(error)


def test_operator_exception_in_execute():
    def work(worker):
        worker.dataflow(lambda s: s.to_stream([1]).map(lambda x: 1 / 0, name="Divide"))

    with pytest.raises(OperatorError, match="Divide") as info:
        pt.execute(work)
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_a_forgotten_capability_is_released_and_the_dataflow_completes():
    """A token that becomes unreachable without drop() is released (and its operator woken to
    report it), so it cannot stall the dataflow forever."""
    held = {}

    def ctor(cap, info):
        cap.drop()

        def logic(inp, out):
            for ref, batch in inp:
                held[ref.time] = ref.retain()  # kept for a while, then forgotten below
                out.session(ref).give_batch(batch)
            if inp.frontier.is_empty() or len(held) > 1:
                held.clear()  # no drop(): the collector must release them

        return logic

    def build(scope):
        inp, stream = scope.new_input()
        out = stream.unary_frontier(pt.Pipeline, "Forgetful", ctor)
        return inp, out.probe(), out.capture()

    def work(worker):
        inp, probe, cap = worker.dataflow(build)
        for r in range(3):
            inp.send(r)
            inp.advance_to(r + 1)
            worker.step()
        inp.close()
        worker.run()  # would raise StuckError if a forgotten token kept the frontier back
        assert probe.done()
        return cap.extract()

    assert pt.execute(work)[0] == [(0, [0]), (1, [1]), (2, [2])]


def _one_token_relay(give):
    """An operator that takes every queued message with one ref (``take_all``), holds one
    token at the least time it saw, and sends everything at its own time with ``give``
    (``give(out, token, pairs)``) once its input is complete."""

    def ctor(cap, info):
        cap.drop()
        held: dict = {"token": None, "pairs": []}

        def logic(inp, out):
            ref, messages = inp.take_all()
            if ref is not None:
                assert ref.time == min(t for t, _b in messages)
                if held["token"] is None:
                    held["token"] = ref.retain()
                held["pairs"].extend(messages)
            if held["token"] is not None and inp.frontier.is_empty():
                give(out, held["token"], sorted(held["pairs"], key=lambda p: p[0]))
                held["token"].drop()
                held["token"] = None

        return logic

    return ctor


def test_give_timed_sends_many_times_with_one_token_and_checks_the_least():
    def build(scope):
        inp, stream = scope.new_input()
        relayed = stream.unary_frontier(
            pt.Pipeline,
            "Relay",
            _one_token_relay(lambda out, tok, pairs: out.give_timed(tok, pairs)),
        )
        out = relayed.capture()
        inp.send_batch(["c", "a", "b", "a2"], times=[30, 10, 20, 10])
        return out

    assert pt.example(build).extract() == [(10, ["a", "a2"]), (20, ["b"]), (30, ["c"])]

    def early(out, token, pairs):
        out.give_timed(token, [(token.time - 1, ["x"]), *pairs])

    def bad(scope):
        inp, stream = scope.new_input()
        stream.unary_frontier(pt.Pipeline, "Early", _one_token_relay(early))
        inp.send_batch(["a"], times=[5])

    with pytest.raises(OperatorError, match="Early") as info:
        pt.example(bad)
    assert isinstance(info.value.__cause__, CapabilityError)


def test_a_bundle_of_times_is_handed_out_at_each_time_and_counted_once():
    # give_timed into a pipeline sends one message (a Bundle at the least time); the next
    # operator still sees every part at its own time, by iteration or by next(), and may
    # hold a capability at a part's time.
    from pytimely.dataflow.ports import Bundle

    seen: dict = {"iter": [], "next": [], "kinds": set()}

    def peek(cap, info):
        cap.drop()
        held: dict = {}

        def logic(inp, out):
            seen["kinds"].update(type(b).__name__ for _t, b in inp.queue)
            for ref, batch in inp:
                seen["iter"].append((ref.time, list(batch)))
                if ref.time == 20:
                    held["cap"] = ref.retain()  # a token at a part's time, not the least
            if "cap" in held and inp.frontier.is_empty():
                out.session(held.pop("cap")).give("late")

        return logic

    def one_by_one(cap, info):
        cap.drop()

        def logic(inp, out):
            while (message := inp.next()) is not None:
                ref, batch = message
                seen["next"].append((ref.time, list(batch)))
                out.session(ref).give_batch(list(batch))

        return logic

    def build(scope):
        inp, stream = scope.new_input()

        def relay(name):  # one consumer each: a bundle goes to a single pipeline
            give = _one_token_relay(lambda out, tok, pairs: out.give_timed(tok, pairs))
            return stream.unary_frontier(pt.Pipeline, name, give)

        peeked = relay("Relay1").unary_frontier(pt.Pipeline, "Peek", peek)
        after = relay("Relay2").unary(pt.Pipeline, "OneByOne", one_by_one).capture()
        inp.send_batch(["c", "a", "b"], times=[30, 10, 20])
        return peeked.capture(), after

    peeked, after = pt.example(build)
    assert "Bundle" in seen["kinds"] and Bundle.__name__ == "Bundle"
    assert seen["iter"] == [(10, ["a"]), (20, ["b"]), (30, ["c"])]
    assert seen["next"] == seen["iter"]
    assert after.extract() == [(10, ["a"]), (20, ["b"]), (30, ["c"])]
    assert peeked.extract() == [(20, ["late"])]
