"""Replay streams captured over TCP, on any number of workers (seed 002).

Port of timely's ``capture_recv``: ``capture_recv SOURCES [-w N]`` expects ``SOURCES`` sending
workers.  The receiving workers split the streams between them (stream ``i`` goes to worker
``i % N``), each listens on ``127.0.0.1:BASE+i`` for its streams, wraps every accepted socket in a
non-blocking :class:`StreamReader`, and replays them all into one dataflow.  With 5 senders
each sending ``0..9`` this prints 50 lines ``replayed: x``: five interleaved copies of ``0..9``.

    $ python examples/capture_recv.py 5 -w 3      # shell 1
    $ python examples/capture_send.py -w 5        # shell 2
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Sequence

import pytimely as pt
from pytimely.capture import StreamReader, replay_into
from pytimely.communication.launch import parse_args

BASE_PORT = 8000


def run(sources: int, argv: Sequence[str], base_port: int = BASE_PORT,
        accept_timeout: float = 60.0) -> list[list[int]]:
    def work(worker: pt.Worker) -> list[int]:
        mine = [i for i in range(sources) if i % worker.peers == worker.index]
        listeners = []
        for i in mine:
            listener = socket.create_server(("127.0.0.1", base_port + i))
            listener.settimeout(accept_timeout)
            listeners.append(listener)
        readers = []
        for listener in listeners:
            conn, _addr = listener.accept()
            listener.close()
            readers.append(StreamReader(conn))
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
    free = parse_args(argv, usage=__doc__).free
    sources = int(free[0]) if free else 1
    base = int(free[1]) if len(free) > 1 else BASE_PORT
    return run(sources, [a for a in argv if a not in free], base)


if __name__ == "__main__":
    main()
