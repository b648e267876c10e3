"""The contract between a job and its sources and sinks: partitions with offsets, epochs, commits.

**Sources.**  A :class:`Source` is a set of named *partitions* (files, Kafka partitions,
...).  Each worker owns some of them (:func:`owned`: the sorted names dealt round-robin, so a
restart on another number of workers re-deals them) and reads each through a
:class:`PartitionReader` opened *at an offset*: a JSON-able position (a byte offset, a Kafka
offset) such that opening the partition again at the offset a reader reports reads exactly the
records after those it has returned.  That is all replay needs.

**Growing sources.**  A source whose set of partitions grows while the job runs (new files in
a folder) sets :attr:`Source.relist_seconds`: the job lists its partitions again that often
and opens the new ones this worker owns, at their checkpointed offset.  Names may appear,
never change or disappear while a job runs.  Such a source is dealt by :func:`owner` (a hash of
the name, not its rank among the others), so that a name appearing later never moves an
existing partition to another worker; a restart on another number of workers re-deals them
all.  The job ends only once such a source says it will not grow any more
(:meth:`Source.exhausted`) and its readers are exhausted.

**Time.**  The job's timestamps are *ingestion epochs* (0, 1, 2, ...): what a worker reads in
an epoch enters the dataflow at that epoch.  Event time travels in the records (the windows'
``event_time=``), so epochs only pace progress; see :mod:`pytimely.io.driver`.

**Sinks.**  A :class:`Sink` gets, per worker, a :class:`SinkWriter` that receives batches of
records and *stages* them; :meth:`SinkWriter.stage` closes what was written since the last
call and returns a JSON-able description of it (file names, a transaction id), and
:meth:`Sink.publish` makes a staged description visible to readers.  The job stages at
every checkpoint and publishes only once the checkpoint is committed, so readers of a sink
with an idempotent :meth:`~Sink.publish` (a rename, an insert keyed by epoch) see every
record exactly once, whatever failed and however many workers the restart had.
:meth:`Sink.discard` removes whatever a failed attempt staged and nobody committed.

A source and a sink of lines in memory, as the smallest examples of the contract:

>>> class Lines(Source):
...     def __init__(self, parts): self.parts = parts
...     def partitions(self): return sorted(self.parts)
...     def open(self, partition, offset): return ListReader(self.parts[partition], offset)
>>> class ListReader(PartitionReader):
...     def __init__(self, items, offset): self.items, self.at = items, offset or 0
...     def read(self, limit):
...         batch = self.items[self.at:self.at + limit]
...         self.at += len(batch)
...         return batch
...     def offset(self): return self.at
...     def exhausted(self): return self.at >= len(self.items)
>>> reader = Lines({"a": ["x", "y", "z"]}).open("a", 1)
>>> reader.read(10), reader.offset(), reader.exhausted()
(['y', 'z'], 3, True)
>>> owned(["p0", "p1", "p2"], 1, 2)
['p1']
>>> owned(["a.csv", "b.csv", "c.csv"], 2, 3, stable=True), owner("c.csv", 3)
(['c.csv'], 2)
"""

from __future__ import annotations

import abc
import zlib
from collections.abc import Sequence
from typing import Any

__all__ = ["PartitionReader", "Sink", "SinkWriter", "Source", "owned", "owner"]


def owned(partitions: Sequence[str], index: int, peers: int, *, stable: bool = False) -> list[str]:
    """The partitions worker ``index`` of ``peers`` reads, sorted: the sorted names dealt
    round-robin, or with ``stable=True`` (a growing source) those whose :func:`owner` it is."""
    if stable:
        return sorted(p for p in partitions if owner(p, peers) == index)
    return sorted(partitions)[index::peers]


def owner(partition: str, peers: int) -> int:
    """The worker of ``peers`` that reads ``partition`` of a growing source: the CRC-32 of
    the name modulo ``peers``, fixed by the name alone, so a partition that appears later
    moves no other (module docstring)."""
    return zlib.crc32(partition.encode("utf-8")) % peers


class PartitionReader(abc.ABC):
    """Reads one partition from an offset (module docstring)."""

    @abc.abstractmethod
    def read(self, limit: int) -> list[Any]:
        """Up to ``limit`` records, the next ones after those returned so far (``[]``: none
        now).  Must not block for long: the worker reads between steps."""

    @abc.abstractmethod
    def offset(self) -> Any:
        """A JSON-able offset: reopening the partition there reads what follows the records
        returned so far."""

    def exhausted(self) -> bool:
        """Whether the partition has no more records, ever (a bounded source at its end).
        Unbounded sources keep the default, ``False``."""
        return False

    def release(self, offset: Any) -> None:  # noqa: B027 -- optional hook
        """A committed checkpoint holds ``offset``: nothing before it will be read again
        (a replication slot may advance, a broker may forget).  Called by the worker that
        reads the partition, once it knows the checkpoint committed."""

    def close(self) -> None:  # noqa: B027 -- optional hook, nothing to do by default
        """Release what the reader holds (files, connections)."""


class Source(abc.ABC):
    """A set of partitions with replayable offsets (module docstring)."""

    #: A name for errors and the checkpoint (offsets are kept per source name and partition).
    name: str = "source"

    #: Seconds between two listings of :meth:`partitions` while the job runs, for a source
    #: whose partitions grow (module docstring); ``None`` (the default): a fixed set, listed
    #: once when the job starts and dealt round-robin.
    relist_seconds: float | None = None

    @abc.abstractmethod
    def partitions(self) -> list[str]:
        """The partition names (stable across runs: offsets are keyed by them)."""

    @abc.abstractmethod
    def open(self, partition: str, offset: Any) -> PartitionReader:
        """A reader of ``partition`` from ``offset`` (``None``: from the beginning)."""

    def exhausted(self) -> bool:
        """Whether no partition will be added any more: always for a fixed set; a growing
        source says so when it knows (a folder that stayed idle long enough).  The job then
        lists the partitions once more and ends when every reader is exhausted too."""
        return self.relist_seconds is None


class SinkWriter(abc.ABC):
    """One worker's side of a :class:`Sink` (module docstring)."""

    @abc.abstractmethod
    def write(self, records: list[Any]) -> None:
        """Take records (all at epochs the checkpoint being prepared covers)."""

    @abc.abstractmethod
    def stage(self) -> Any:
        """Close what was written since the last call; a JSON-able description of it for
        :meth:`Sink.publish` (``None`` if nothing was written)."""

    def close(self) -> None:  # noqa: B027 -- optional hook, nothing to do by default
        """Release what the writer holds (files, connections); nothing staged is lost."""


class Sink(abc.ABC):
    """Where a job's results go, exactly once (module docstring)."""

    #: A name for errors.
    name: str = "sink"

    @abc.abstractmethod
    def writer(self, index: int, peers: int, attempt: str) -> SinkWriter:
        """Worker ``index`` of ``peers``'s writer; ``attempt`` is unique to this run (name
        staged things after it, so that :meth:`discard` can tell attempts apart)."""

    @abc.abstractmethod
    def publish(self, staged: Any) -> None:
        """Make what :meth:`SinkWriter.stage` described visible.  Idempotent: a checkpoint's
        staged descriptions may be published again after a failure."""

    @abc.abstractmethod
    def discard(self, keep: Sequence[Any]) -> None:
        """Remove whatever was staged and is not in ``keep`` (the committed, still
        unpublished descriptions): what failed attempts left behind."""
