"""Capture a stream over TCP: every worker sends ``0..9`` to its own receiver (seed 002).

Port of timely's ``capture_send``.  Worker ``i`` connects to ``127.0.0.1:BASE+i`` (retrying while
the receiver starts) and captures ``to_stream(range(10))`` into a :class:`StreamWriter` on that
socket: data and progress, in the versioned capture format.  Start ``capture_recv`` first.

    $ python examples/capture_recv.py 5 -w 3      # shell 1: replay 5 streams on 3 workers
    $ python examples/capture_send.py -w 5        # shell 2: 5 workers, one stream each
"""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Sequence

import pytimely as pt
from pytimely.capture import StreamWriter
from pytimely.communication.launch import parse_args

BASE_PORT = 8000


def connect(port: int, timeout: float = 30.0) -> socket.socket:
    """Connect to the receiver, retrying until it listens (or ``timeout`` seconds pass)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def run(argv: Sequence[str], base_port: int = BASE_PORT) -> list[int]:
    def work(worker: pt.Worker) -> int:
        sock = connect(base_port + worker.index)
        worker.dataflow(lambda scope: scope.to_stream(range(10)).capture_into(StreamWriter(sock)))
        worker.run()
        return worker.index

    return pt.execute_from_args(work, argv)


def main(argv: Sequence[str] | None = None) -> list[int]:
    argv = list(sys.argv[1:] if argv is None else argv)
    free = parse_args(argv, usage=__doc__).free
    base = int(free[0]) if free else BASE_PORT
    return run([a for a in argv if a not in free], base)


if __name__ == "__main__":
    main()
