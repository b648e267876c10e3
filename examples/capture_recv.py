"""Replay streams captured over TCP, on any number of workers.

Port of timely's ``capture_recv``: ``capture_recv SOURCES [-w N]`` expects ``SOURCES`` sending
workers.  The receiving workers split the streams between them (stream ``i`` goes to worker
``i % N``), each listens on ``127.0.0.1:BASE+i`` for its streams with
:func:`~pytimely.capture.listen_capture`, which only accepts senders that prove knowledge of the
shared secret ``$PYTIMELY_SECRET``, and replays the accepted streams (each a
non-blocking :class:`StreamReader`) into one dataflow.  With 5 senders each sending ``0..9``
this prints 50 lines ``replayed: x``: five interleaved copies of ``0..9``.

    $ export PYTIMELY_SECRET=...                  # the same in both shells
    $ python examples/capture_recv.py 5 -w 3      # shell 1
    $ python examples/capture_recv.py 5 9000 -w 3 # listening at 9000, 9001, ... instead
    $ python examples/capture_send.py -w 5        # shell 2

``--insecure`` (on both sides) skips authentication, for a trusted network only.
"""

import pytimely as pt
from pytimely.capture import listen_capture, replay_into


def receive(worker: pt.Worker, sources: int, base_port: int, insecure: bool) -> None:
    mine = [i for i in range(sources) if i % worker.peers == worker.index]
    listeners = [listen_capture("127.0.0.1", base_port + i, insecure=insecure) for i in mine]
    readers = []
    for listener in listeners:
        readers.append(listener.accept(timeout=60.0))
        listener.close()

    def build(scope: pt.Scope) -> None:
        replay_into(readers, scope).inspect(lambda x: print(f"replayed: {x}", flush=True))

    worker.dataflow(build)


if __name__ == "__main__":
    words = pt.args()
    insecure = "--insecure" in words
    numbers = [int(word) for word in words if word.isdigit()]
    sources, base_port = (numbers + [1, 8000][len(numbers) :])[:2]
    pt.execute_from_args(lambda worker: receive(worker, sources, base_port, insecure))
