"""Scaffolding shared by the dataflow tests that drive an input by hand (what users need is in
:mod:`pytimely.testing`)."""

from __future__ import annotations

import pytimely as pt


def input_with(scope, *then):
    """A new input of ``scope``: ``(handle, f(stream) for f in then)``."""
    handle, stream = scope.new_input()
    results = [f(stream) for f in then]
    return (handle, *results)


def probed_input(scope):
    """A new input and a probe on its stream: ``(handle, probe)``."""
    return input_with(scope, lambda s: s.probe())


def rounds(build, feeds, steps_between=True):
    """Run ``build(scope) -> (input, result)`` on one worker; round ``r`` sends ``feeds[r]``
    at time ``r`` and completes the round with a probe on the input stream's consumers.
    Returns ``result`` (typically capture handles) after the dataflow has finished."""

    def work(worker):
        handle, result = worker.dataflow(build)
        for r, records in enumerate(feeds):
            for x in records:
                handle.send(x)
            handle.advance_to(r + 1)
            if steps_between:
                for _ in range(3):
                    worker.step()
        return result

    return pt.execute(work)[0]
