"""Communication: how workers reach each other.

* :mod:`.allocator` — the :class:`Allocator` interface every worker talks through, and the
  single-worker :class:`ThreadAllocator`;
* :mod:`.tcp` — :class:`TcpAllocator`, one worker per process over an authenticated TCP mesh;
* :mod:`.mesh` — building that mesh: listen, rendezvous, connect and accept every peer;
* :mod:`.wire` — frames and payload serialization (pickle 5 with out-of-band buffers);
* :mod:`.codec` — the compact tagged encoding of records that cross workers;
* :mod:`.flow` — flow control: the bound on a worker's data in flight to each peer;
* :mod:`.handshake` — mutual HMAC authentication of every connection;
* :mod:`.acceptor` — authenticating many callers at once, so strangers cannot block a listener;
* :mod:`.rendezvous` — how peers learn each other's addresses (static, local launcher, Spark);
* :mod:`.launch` — :func:`run_processes`, timely's command-line flags, hand-started clusters;
* :mod:`.diagnosis` — asking a worker process what it is doing (when a run times out).

Which worker a record goes to is not decided here: the routing rule and its hash belong to the
exchange (:mod:`pytimely.dataflow.exchange`).
"""

from .allocator import Allocator, ThreadAllocator
from .launch import Config, ConfigError, connect_from_config, parse_args, run_processes
from .rendezvous import (
    GatherRendezvous,
    PipeRendezvous,
    Rendezvous,
    StaticRendezvous,
    read_hostfile,
)
from .tcp import TcpAllocator

__all__ = [
    "Allocator",
    "Config",
    "ConfigError",
    "GatherRendezvous",
    "PipeRendezvous",
    "Rendezvous",
    "StaticRendezvous",
    "TcpAllocator",
    "ThreadAllocator",
    "connect_from_config",
    "parse_args",
    "read_hostfile",
    "run_processes",
]
