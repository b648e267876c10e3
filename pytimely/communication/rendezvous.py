"""Rendezvous: how the workers of a mesh learn each other's addresses (and the shared secret).

Building a TCP mesh needs two things the mesh cannot find out by itself: where every worker
listens, and the secret they all share.  A *rendezvous* supplies both, and nothing else; the
mesh (:class:`.tcp.TcpAllocator`) does the connecting and authenticating.  This keeps each way
of placing workers small:

* :class:`StaticRendezvous` — addresses fixed in advance, e.g. by a host file (one ``host:port``
  per line; worker ``i`` listens on line ``i``).  Processes can be started by hand, in any
  order.
* :class:`PipeRendezvous` — used by :func:`.launch.run_processes`: each child binds port 0,
  reports the address it got to the parent over a pipe, and receives the full list back.
* :class:`GatherRendezvous` — through any *all-gather* function, such as a Spark barrier
  stage's ``BarrierTaskContext.allGather``: every worker contributes its ``host:port`` and gets
  everyone's back.

The protocol, for worker ``index``: the mesh calls ``bind_address(index)``, listens there, then
calls ``exchange(index, (host, port))`` with the address it actually got; ``exchange`` returns
every worker's address, in worker order, and must return only once every worker has called it
(or raise).  ``secret`` is read by the mesh before it connects.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection

from ..errors import CommunicationError

__all__ = [
    "Address",
    "GatherRendezvous",
    "PipeRendezvous",
    "Rendezvous",
    "StaticRendezvous",
    "parse_address",
    "read_hostfile",
]

Address = tuple[str, int]


class Rendezvous:
    """How the workers of one mesh find each other; see the module docstring."""

    #: The secret shared by every worker of the mesh (authenticates every connection).
    secret: bytes

    def __init__(self, secret: bytes) -> None:
        self.secret = secret

    def bind_address(self, index: int) -> Address:
        """Where worker ``index`` should listen.  Default: an ephemeral port on loopback."""
        return ("127.0.0.1", 0)

    def exchange(self, index: int, my_address: Address) -> list[Address]:
        """Publish ``my_address`` for worker ``index``; return all workers' addresses."""
        raise NotImplementedError


class StaticRendezvous(Rendezvous):
    """Addresses known in advance: worker ``i`` listens on, and is reached at, ``addresses[i]``."""

    def __init__(self, addresses: Sequence[Address], secret: bytes) -> None:
        super().__init__(secret)
        self.addresses = [(str(host), int(port)) for host, port in addresses]

    def bind_address(self, index: int) -> Address:
        """Worker ``index`` listens on its own listed address."""
        return self.addresses[index]

    def exchange(self, index: int, my_address: Address) -> list[Address]:
        """See :meth:`Rendezvous.exchange`: the listed addresses, known to every worker already."""
        return list(self.addresses)

    def __repr__(self) -> str:
        return f"StaticRendezvous({self.addresses!r})"


class PipeRendezvous(Rendezvous):
    """The child side of the local launcher's rendezvous: report our address to the parent over
    ``conn``, wait (at most ``timeout`` seconds) for the list of all addresses."""

    def __init__(self, conn: Connection, secret: bytes, timeout: float = 30.0) -> None:
        super().__init__(secret)
        self._conn = conn
        self._timeout = timeout

    def exchange(self, index: int, my_address: Address) -> list[Address]:
        """See :meth:`Rendezvous.exchange`: ask the launcher over the pipe.

        Raises :class:`CommunicationError` if the pipe breaks or no answer comes within ``timeout``
        seconds.
        """
        try:
            self._conn.send(("address", index, tuple(my_address)))
            if not self._conn.poll(self._timeout):
                raise CommunicationError(
                    f"worker {index}: the launcher did not send the peers' addresses within "
                    f"{self._timeout:g} s (did another worker fail to start?)"
                )
            message = self._conn.recv()
        except (OSError, EOFError) as exc:
            raise CommunicationError(
                f"worker {index}: lost the pipe to the launcher during rendezvous: {exc!r}"
            ) from exc
        if not (isinstance(message, tuple) and message[0] == "addresses"):
            raise CommunicationError(f"worker {index}: unexpected rendezvous message {message!r}")
        return [(str(host), int(port)) for host, port in message[1]]


class GatherRendezvous(Rendezvous):
    """Rendezvous through an all-gather: ``gather(message)`` is called once by every worker and
    returns every worker's message (in any order), e.g. Spark's ``BarrierTaskContext.allGather``.

    Workers listen on ``bind_host`` (an ephemeral port) and are reached at ``host`` (default: the
    address they bound, which must then not be a wildcard).  On a cluster, bind ``"0.0.0.0"``
    and pass the executor's reachable host name as ``host``::

        ctx = BarrierTaskContext.get()
        host = ctx.getTaskInfos()[ctx.partitionId()].address.rsplit(":", 1)[0]
        rendezvous = GatherRendezvous(ctx.allGather, secret, host=host, bind_host="0.0.0.0")
    """

    def __init__(
        self,
        gather: Callable[[str], list[str]],
        secret: bytes,
        host: str | None = None,
        bind_host: str = "127.0.0.1",
    ) -> None:
        super().__init__(secret)
        if host is None and bind_host in ("0.0.0.0", "::", ""):
            raise ValueError("binding a wildcard address needs the host name to advertise")
        self._gather = gather
        self._host = host
        self._bind_host = bind_host

    def bind_address(self, index: int) -> Address:
        """An ephemeral port on ``bind_host``."""
        return (self._bind_host, 0)

    def exchange(self, index: int, my_address: Address) -> list[Address]:
        """See :meth:`Rendezvous.exchange`: one all-gather of ``[index, host, port]``.

        Raises :class:`CommunicationError` unless the indices gathered are exactly ``0..n-1``, each
        once.
        """
        host = self._host if self._host is not None else my_address[0]
        messages = self._gather(json.dumps([index, host, my_address[1]]))
        found: dict[int, Address] = {}
        for message in messages:
            i, h, p = json.loads(message)
            if i in found:
                raise CommunicationError(f"two workers claim index {i} in the rendezvous")
            found[int(i)] = (str(h), int(p))
        if sorted(found) != list(range(len(found))) or index not in found:
            raise CommunicationError(f"rendezvous returned worker indices {sorted(found)}")
        return [found[i] for i in range(len(found))]


def parse_address(text: str) -> Address:
    """``"host:port"`` (or ``"[v6-address]:port"``) as ``(host, port)``."""
    text = text.strip()
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"not a host:port address: {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    number = int(port)
    if not 0 < number < 65536:
        raise ValueError(f"port out of range in {text!r}")
    return host, number


def read_hostfile(path: str, processes: int) -> list[Address]:
    """The first ``processes`` addresses of a host file.

    One ``host:port`` per line; blank lines and ``#`` comments are skipped.  As in timely, a line
    may hold several whitespace-separated words; the first one is the address.
    """
    addresses: list[Address] = []
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            try:
                addresses.append(parse_address(words[0]))
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: {exc}") from None
            if len(addresses) == processes:
                return addresses
    raise ValueError(
        f"host file {path} lists {len(addresses)} addresses, but {processes} processes need one "
        "each"
    )
