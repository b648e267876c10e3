"""Capture a stream over TCP: every worker sends ``0..9`` to its own receiver.

Port of timely's ``capture_send``.  Worker ``i`` connects to ``127.0.0.1:BASE+i`` (retrying while
the receiver starts) with :func:`~pytimely.capture.connect_capture`, which authenticates both
ends with the shared secret ``$PYTIMELY_SECRET``, and captures
``to_stream(range(10))`` into the returned :class:`StreamWriter`: data and progress, in the
versioned capture format.  Start ``capture_recv`` first, with the same secret.

    $ export PYTIMELY_SECRET=...                  # the same in both shells
    $ python examples/capture_recv.py 5 -w 3      # shell 1: replay 5 streams on 3 workers
    $ python examples/capture_send.py -w 5        # shell 2: 5 workers, one stream each
    $ python examples/capture_send.py 9000 -w 5   # receivers listening at 9000, 9001, ...

``--insecure`` (on both sides) skips authentication, for a trusted network only.
"""

import pytimely as pt
from pytimely.capture import connect_capture


def send(worker: pt.Worker, base_port: int, insecure: bool) -> None:
    writer = connect_capture(("127.0.0.1", base_port + worker.index), insecure=insecure)
    worker.dataflow(lambda scope: scope.to_stream(range(10)).capture_into(writer))


if __name__ == "__main__":
    words = pt.args()
    insecure = "--insecure" in words
    ports = [int(word) for word in words if word.isdigit()]
    base_port = ports[0] if ports else 8000
    pt.execute_from_args(lambda worker: send(worker, base_port, insecure))
