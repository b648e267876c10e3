"""Replay streams captured over TCP, on any number of workers.

Port of timely's ``capture_recv``: ``capture_recv SOURCES [-w N]`` expects ``SOURCES`` sending
workers.  The receiving workers split the streams between them (stream ``i`` goes to worker
``i % N``), each listens on ``127.0.0.1:BASE+i`` for its streams with
:func:`~pytimely.capture.listen_capture`, which only accepts senders that prove knowledge of the
shared secret (``--secret`` or ``PYTIMELY_SECRET``), and replays the accepted streams (each a
non-blocking :class:`StreamReader`) into one dataflow.  With 5 senders each sending ``0..9``
this prints 50 lines ``replayed: x``: five interleaved copies of ``0..9``.

    $ export PYTIMELY_SECRET=...                  # the same in both shells
    $ python examples/capture_recv.py 5 -w 3      # shell 1
    $ python examples/capture_send.py -w 5        # shell 2

``--insecure`` (on both sides) skips authentication, for a trusted network only.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import pytimely as pt
from pytimely.capture import listen_capture, replay_into
from pytimely.communication.launch import parse_args

BASE_PORT = 8000


def run(
    sources: int,
    argv: Sequence[str],
    base_port: int = BASE_PORT,
    accept_timeout: float = 60.0,
    secret: bytes | None = None,
    insecure: bool = False,
) -> list[list[int]]:
    def work(worker: pt.Worker) -> list[int]:
        mine = [i for i in range(sources) if i % worker.peers == worker.index]
        listeners = [
            listen_capture("127.0.0.1", base_port + i, secret=secret, insecure=insecure)
            for i in mine
        ]
        readers = []
        for listener in listeners:
            readers.append(listener.accept(timeout=accept_timeout))
            listener.close()
        seen: list[int] = []

        def show(x: int) -> None:
            seen.append(x)
            print(f"replayed: {x}", flush=True)

        worker.dataflow(lambda scope: replay_into(readers, scope).inspect(show))
        worker.run()
        return seen

    return pt.execute_from_args(work, argv)


def main(argv: Sequence[str] | None = None) -> list[list[int]]:
    argv = list(sys.argv[1:] if argv is None else argv)
    insecure = "--insecure" in argv
    argv = [a for a in argv if a != "--insecure"]
    config = parse_args(argv, usage=__doc__)
    sources = int(config.free[0]) if config.free else 1
    base = int(config.free[1]) if len(config.free) > 1 else BASE_PORT
    secret = None if insecure else config.secret
    return run(sources, [a for a in argv if a not in config.free], base, secret=secret,
               insecure=insecure)


if __name__ == "__main__":
    main()
