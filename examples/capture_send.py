"""Capture a stream over TCP: every worker sends ``0..9`` to its own receiver.

Port of timely's ``capture_send``.  Worker ``i`` connects to ``127.0.0.1:BASE+i`` (retrying while
the receiver starts) with :func:`~pytimely.capture.connect_capture`, which authenticates both
ends with the shared secret (``--secret`` or ``PYTIMELY_SECRET``), and captures
``to_stream(range(10))`` into the returned :class:`StreamWriter`: data and progress, in the
versioned capture format.  Start ``capture_recv`` first, with the same secret.

    $ export PYTIMELY_SECRET=...                  # the same in both shells
    $ python examples/capture_recv.py 5 -w 3      # shell 1: replay 5 streams on 3 workers
    $ python examples/capture_send.py -w 5        # shell 2: 5 workers, one stream each

``--insecure`` (on both sides) skips authentication, for a trusted network only.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import pytimely as pt
from pytimely.capture import connect_capture
from pytimely.communication.launch import parse_args

BASE_PORT = 8000


def run(
    argv: Sequence[str],
    base_port: int = BASE_PORT,
    secret: bytes | None = None,
    insecure: bool = False,
) -> list[int]:
    def work(worker: pt.Worker) -> int:
        writer = connect_capture(
            ("127.0.0.1", base_port + worker.index), secret=secret, insecure=insecure
        )
        worker.dataflow(lambda scope: scope.to_stream(range(10)).capture_into(writer))
        worker.run()
        return worker.index

    return pt.execute_from_args(work, argv)


def main(argv: Sequence[str] | None = None) -> list[int]:
    argv = list(sys.argv[1:] if argv is None else argv)
    insecure = "--insecure" in argv
    argv = [a for a in argv if a != "--insecure"]
    config = parse_args(argv, usage=__doc__)
    base = int(config.free[0]) if config.free else BASE_PORT
    secret = None if insecure else config.secret
    return run([a for a in argv if a not in config.free], base, secret, insecure)


if __name__ == "__main__":
    main()
