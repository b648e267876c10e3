"""Inputs: ``InputHandle`` and ``new_unordered_input``, and the times they accept."""

from __future__ import annotations

import pytest

import pytimely as pt
from pytimely.errors import CapabilityError, TimelyError
from pytimely.order import ProductDomain
from pytimely.testing import assert_frontier

from .helpers import input_with


def test_input_handle_send_batch_and_close():
    def work(worker):
        def build(scope):
            h, s = scope.new_input()
            return h, s.capture()

        h, captured = worker.dataflow(build)
        assert h.time == 0
        h.send_batch([1, 2, 3])
        h.send_batch([])
        h.advance_to(2)
        assert h.time == 2
        h.send(4)
        with pytest.raises(CapabilityError):
            h.advance_to(1)
        h.close()
        h.close()  # idempotent
        with pytest.raises(TimelyError):
            h.send(5)
        return captured

    assert pt.execute(work)[0].extract() == [(0, [1, 2, 3]), (2, [4])]


def test_input_handle_large_batches():
    def work(worker):
        h, captured = worker.dataflow(lambda s: input_with(s, lambda x: x.count().capture()))
        for x in range(10_000):
            h.send(x)
        return captured

    assert pt.execute(work)[0].extract() == [(0, [10_000])]


def test_unordered_input():
    # Doctest: extract()[i] == (i, [i]).
    def work(worker):
        def build(scope):
            (handle, cap), stream = scope.new_unordered_input()
            return handle, cap, stream.capture()

        handle, cap, captured = worker.dataflow(build)
        for i in range(10):
            handle.session(cap).give(i)
            later = cap.delayed(i + 1)
            cap.drop()
            cap = later
            worker.step()
        cap.drop()
        return captured

    extracted = pt.execute(work)[0].extract()
    for i in range(10):
        assert extracted[i] == (i, [i])


def test_unordered_input_out_of_order_times():
    def work(worker):
        def build(scope):
            (handle, cap), stream = scope.new_unordered_input()
            return handle, cap, stream.capture(), stream.probe()

        handle, cap, captured, probe = worker.dataflow(build)
        c5 = cap.delayed(5)
        c2 = cap.delayed(2)
        cap.drop()
        handle.session(c5).give("five")
        handle.session(c2).give("two")
        handle.session(c2, 3).give("three")
        worker.step_while(lambda: probe.less_than(2))
        assert_frontier(probe, [2])
        c2.drop()
        worker.step_while(lambda: probe.less_than(5))
        with pytest.raises(CapabilityError):
            c5.downgrade(4)
        c5.drop()
        return captured

    assert pt.execute(work)[0].extract() == [(2, ["two"]), (3, ["three"]), (5, ["five"])]


def test_data_sent_while_building_reaches_consumers_attached_later():
    def build(scope):
        inp, stream = scope.new_input()
        inp.send_batch([1, 2])
        inp.send(3)
        inp.flush()
        return stream.map(lambda x: x * 10).capture()

    assert pt.example(build).extract() == [(0, [10, 20, 30])]


@pytest.mark.parametrize("bad", [2.5, True, "3", None, pt.Product(1, 2)])
def test_input_advance_to_a_time_of_the_wrong_type_fails_at_the_call(bad):
    """advance_to(2.5) on int times used to be accepted and break later, far from the mistake."""
    worker = pt.Worker()
    h, captured = worker.dataflow(lambda s: input_with(s, lambda x: x.capture()))
    h.send(1)
    with pytest.raises(TypeError, match=r"advance_to\(.*is not a time of this scope.*int"):
        h.advance_to(bad)
    assert h.time == 0
    h.advance_to(1)  # the handle is still usable
    h.close()
    worker.run()
    assert captured.extract() == [(0, [1])]


def test_input_advance_to_backwards_names_both_times():
    worker = pt.Worker()
    h, _ = worker.dataflow(lambda s: input_with(s, lambda x: x.capture()))
    h.advance_to(5)
    with pytest.raises(CapabilityError, match=r"advance_to\(3\) after advance_to\(5\)"):
        h.advance_to(3)
    assert h.time == 5


def test_input_in_product_time_checks_both_coordinates():
    worker = pt.Worker()
    h, _ = worker.dataflow(
        lambda s: input_with(s, lambda x: x.capture()), timestamp=ProductDomain(int, int)
    )
    with pytest.raises(TypeError, match="Product"):
        h.advance_to(pt.Product(1, 2.5))
    with pytest.raises(TypeError, match="Product"):
        h.advance_to(3)
    h.advance_to(pt.Product(1, 2))
    assert h.time == pt.Product(1, 2)


def test_unordered_input_rejects_wrong_and_earlier_times_at_the_call():
    worker = pt.Worker()
    (handle, cap), _ = worker.dataflow(lambda s: s.new_unordered_input())
    with pytest.raises(TypeError, match=r"delayed\(2\.5\).*not a time"):
        cap.delayed(2.5)
    with pytest.raises(TypeError, match=r"downgrade\(2\.5\).*not a time"):
        cap.downgrade(2.5)
    with pytest.raises(TypeError, match=r"session\(time=2\.5\).*not a time"):
        handle.session(cap, 2.5)
    later = cap.delayed(3)
    with pytest.raises(CapabilityError):
        later.delayed(2)
    with pytest.raises(CapabilityError):
        handle.session(later, 1)
    later.drop()
    cap.drop()
    worker.run()
