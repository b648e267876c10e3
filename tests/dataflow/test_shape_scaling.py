"""Wide operators and regions (timely-dataflow ``tests/shape_scaling.rs``), at 1,000."""

from __future__ import annotations

import pytimely as pt


def test_operator_with_1000_inputs_and_outputs():
    n = 1000

    def build(scope):
        source = scope.to_stream(range(3))
        builder = pt.OperatorBuilder("Wide", scope)
        for i in range(n):
            builder.new_input(
                source, pt.Pipeline, connection=[0 if j == i else None for j in range(n)]
            )
        for _ in range(n):
            builder.new_output()

        def ctor(caps, info):
            for c in caps:
                c.drop()

            def logic(*ports):
                inputs, outputs = ports[:n], ports[n:]
                for i, inp in enumerate(inputs):
                    for ref, batch in inp:
                        outputs[i].session(ref).give_batch([(i, x) for x in batch])

            return logic

        outs = builder.build(ctor)
        return (
            outs[0].capture(),
            outs[n - 1].capture(),
            outs[0].concatenate(outs[1:]).count().capture(),
        )

    first, last, total = pt.example(build)
    assert first.extract() == [(0, [(0, 0), (0, 1), (0, 2)])]
    assert last.extract() == [(0, [(n - 1, 0), (n - 1, 1), (n - 1, 2)])]
    assert total.extract() == [(0, [3 * n])]


def test_region_with_1000_entered_and_left_streams():
    n = 1000

    def work(worker):
        def build(scope):
            h, s = scope.new_input()
            streams = [s.map(lambda x, i=i: x + i) for i in range(n)]
            left = scope.region(lambda r: [x.enter(r).leave() for x in streams])
            merged = left[0].concatenate(left[1:])
            return h, merged.count().capture(), merged.probe()

        h, counts, probe = worker.dataflow(build)
        for r in range(2):
            h.send(r)
            h.advance_to(r + 1)
            worker.step_while(lambda: probe.less_than(h.time))
        return counts.extract()

    assert pt.execute(work)[0] == [(0, [n]), (1, [n])]
