"""A folder of files as a source: JSON lines, CSV or Parquet, one partition per file.

:class:`DirectorySource` reads every file of ``folder`` whose name ends in the format's suffix
(``.jsonl``, ``.csv``, ``.parquet``; ``suffix=`` to change) and does not start with ``.`` or
``_`` (hidden files and folders such as a sink's ``_staging/``).  Each file is a partition;
its offset says where the records returned so far end, so a restart reopens each file at its
checkpointed offset and reads each record once:

* ``format="jsonl"``: a record per line (``decode=``, default ``json.loads``; blank lines are
  skipped); the offset is the byte after the last line returned.
* ``format="csv"``: the first row is the header, each later row a dict of strings keyed by it
  (convert types in the dataflow); the offset is the byte after the last complete record.
  Quoted fields may hold newlines and delimiters: the rows are parsed by :mod:`csv` (RFC 4180,
  ``delimiter=``) from whole lines, and a record ends where the parser says it does.  A row
  with another number of fields than the header, or a file that ends inside a quoted field,
  is an error naming the source, the file and the record's byte.
* ``format="parquet"``: a record per row, as a dict (``columns=`` reads only those); the
  offset is the number of rows returned, and reopening skips whole row groups by their
  metadata before it reads any data.

Without ``follow`` the source is bounded: the files present when the job starts, each read
to its end.  With ``follow=True`` it is a *growing* source (:mod:`pytimely.io.api`): the
folder is listed again every ``poll_seconds`` (1.0) and new files are read as they appear;
JSON-lines and CSV files may still grow (a last line without its newline, a record with an
open quote, waits for the rest), while a Parquet file must be complete when it appears.
Writers should therefore write a file under a hidden name (``.clicks-7.csv.tmp``) and rename
it when it is complete.  A file that has given nothing for ``poll_seconds`` is closed and its
size looked at every ``poll_seconds``, so a folder of many finished files costs a ``stat``
each per poll, not an open file each.  Such a job runs until it is stopped, or with
``stop_when_idle=S`` until the folder has been quiet for ``S`` seconds: no new file and no
record read by this worker for that long (keep ``S`` well above ``poll_seconds``).  The job
then ends with its final checkpoint; what arrives later is read by the next run on that
checkpoint.  A file's name is its partition: do not reuse the name of a file that was read.

>>> import tempfile, os
>>> folder = tempfile.mkdtemp()
>>> with open(os.path.join(folder, "users.csv"), "w") as f:
...     _ = f.write('user,note\\na,"two\\nlines"\\nb,"x, y"\\n')
>>> source = DirectorySource(folder, "csv")
>>> source.partitions()
['users.csv']
>>> reader = source.open("users.csv", None)
>>> reader.read(1), reader.offset()
([{'user': 'a', 'note': 'two\\nlines'}], 24)
>>> source.open("users.csv", 24).read(10)
[{'user': 'b', 'note': 'x, y'}]
>>> import pyarrow as pa, pyarrow.parquet as pq
>>> pq.write_table(pa.table({"x": list(range(10))}), os.path.join(folder, "x.parquet"),
...                row_group_size=4)
>>> rows = DirectorySource(folder, "parquet").open("x.parquet", 6)
>>> rows.read(3), rows.offset(), rows.exhausted()
([{'x': 6}, {'x': 7}, {'x': 8}], 9, False)
"""

from __future__ import annotations

import csv
import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

from ..errors import TimelyError
from .api import PartitionReader, Source

__all__ = ["FORMATS", "DirectorySource"]

#: The formats :class:`DirectorySource` reads, with their default suffixes.
FORMATS = {"jsonl": ".jsonl", "csv": ".csv", "parquet": ".parquet"}

#: Rows a Parquet reader decodes at a time.
_PARQUET_BATCH = 8_192


class DirectorySource(Source):
    """The files of ``folder`` in ``format`` (module docstring): ``"jsonl"`` (``decode``
    turns a line into a record), ``"csv"`` (``delimiter``) or ``"parquet"`` (``columns``);
    ``follow``: pick up new files and appended records; ``poll_seconds``: how often;
    ``stop_when_idle``: seconds of quiet after which a followed folder ends the job."""

    def __init__(
        self,
        folder: str | os.PathLike,
        format: str = "jsonl",
        *,
        name: str = "files",
        follow: bool = False,
        poll_seconds: float = 1.0,
        stop_when_idle: float | None = None,
        suffix: str | None = None,
        decode: Callable[[str], Any] = json.loads,
        delimiter: str = ",",
        columns: Sequence[str] | None = None,
    ) -> None:
        if format not in FORMATS:
            raise ValueError(
                f"source {name!r}: format must be one of {', '.join(FORMATS)}, not {format!r}"
            )
        if not poll_seconds > 0:
            raise ValueError(f"source {name!r}: poll_seconds must be positive")
        if stop_when_idle is not None and (not follow or not stop_when_idle > 0):
            raise ValueError(
                f"source {name!r}: stop_when_idle is a positive number of seconds, and only for "
                "a followed folder (follow=True; without it the job ends with the files)"
            )
        self.folder = os.fspath(folder)
        self.format = format
        self.name = name
        self.follow = follow
        self.poll_seconds = poll_seconds
        self.stop_when_idle = stop_when_idle
        self.suffix = FORMATS[format] if suffix is None else suffix
        self.decode = decode
        self.delimiter = delimiter
        self.columns = None if columns is None else list(columns)
        self.relist_seconds = poll_seconds if follow else None
        self._known: set[str] = set()
        self._active_at: float | None = None  # when a file last appeared or gave records

    def partitions(self) -> list[str]:
        """The files, by name, sorted."""
        try:
            with os.scandir(self.folder) as entries:
                names = sorted(
                    e.name
                    for e in entries
                    if e.name.endswith(self.suffix)
                    and not e.name.startswith((".", "_"))
                    and e.is_file()
                )
        except (FileNotFoundError, NotADirectoryError):
            raise TimelyError(f"source {self.name!r}: no directory {self.folder}") from None
        if self._active_at is None or not self._known.issuperset(names):
            self._known.update(names)
            self._touch()
        return names

    def open(self, partition: str, offset: Any) -> PartitionReader:
        """A reader of file ``partition`` from ``offset`` (module docstring)."""
        path = os.path.join(self.folder, partition)
        if self.format == "parquet":
            return _ParquetReader(self, path, int(offset or 0))
        if self.format == "csv":
            return _CsvReader(self, path, int(offset or 0))
        return _JsonLinesReader(self, path, int(offset or 0))

    def exhausted(self) -> bool:
        """Whether the set of files will not grow: always without ``follow``; with it, once
        the folder has been quiet for ``stop_when_idle`` seconds."""
        return not self.follow or self._idle()

    def _touch(self, now: float | None = None) -> None:
        self._active_at = time.monotonic() if now is None else now

    def _idle(self) -> bool:
        """Quiet for ``stop_when_idle`` seconds (never without it)."""
        return (
            self.stop_when_idle is not None
            and self._active_at is not None
            and time.monotonic() - self._active_at >= self.stop_when_idle
        )


class _Lines:
    """The complete lines of a file from byte ``pos`` on, decoded, one per ``next`` (the way
    :func:`csv.reader` pulls them, so a record's lines are exactly those consumed for it):
    ``pos`` is the byte after the last line given, ``ran_out`` whether the file ended, and
    then ``end`` how far it was seen.  With ``follow`` a last line without its newline is not
    given: it is still being written."""

    __slots__ = ("file", "pos", "follow", "what", "ran_out", "end")

    def __init__(self, file: BinaryIO, pos: int, follow: bool, what: str) -> None:
        self.file, self.pos, self.follow, self.what = file, pos, follow, what
        self.ran_out = False
        self.end = pos

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        line = self.file.readline()
        if not line or (self.follow and line[-1:] != b"\n"):
            self.ran_out = True
            self.end = self.pos + len(line)
            raise StopIteration
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TimelyError(
                f"{self.what}: the line at byte {self.pos} is not UTF-8: {exc}"
            ) from None
        self.pos += len(line)
        return text


class _TextReader(PartitionReader):
    """A JSON-lines or CSV file read from a byte offset.  ``_take`` reads records from the
    open file at ``_at``, advances ``_at`` past them, and says whether it reached the end of
    what the file holds (``_eof``, seen up to ``_end``)."""

    def __init__(self, source: DirectorySource, path: str, offset: int) -> None:
        self._source = source
        self._follow = source.follow
        self._poll = source.poll_seconds
        self._path = path
        self._what = f"source {source.name!r}: {path}"
        self._at = offset
        self._file: BinaryIO | None = None
        self._eof = False
        self._end = offset
        self._gave_at = time.monotonic()  # when it last returned records (or was opened)
        self._check_at = 0.0  # a closed followed file: when to look at its size again

    def _take(self, file: BinaryIO, limit: int) -> list[Any]:
        raise NotImplementedError

    def _size(self) -> int:
        try:
            return os.stat(self._path).st_size
        except OSError:
            return self._end

    def _opened(self) -> BinaryIO | None:
        """The file, open at ``_at``; ``None`` when there is nothing to read now."""
        if self._file is not None:
            return self._file
        if self._eof:  # closed at its end: a bounded file is done, a followed one may grow
            if not self._follow:
                return None
            now = time.monotonic()
            if now < self._check_at:
                return None
            if self._size() == self._end:
                self._check_at = now + self._poll
                return None
        try:
            file = open(self._path, "rb")  # noqa: SIM115 -- closed by _close()
            file.seek(self._at)
        except OSError as exc:
            raise TimelyError(f"{self._what}: cannot be read: {exc}") from exc
        self._file = file
        return file

    def read(self, limit: int) -> list[Any]:
        file = self._opened()
        if file is None:
            return []
        records = self._take(file, limit)
        now = time.monotonic()
        if records:
            self._gave_at = now
            self._source._touch(now)
        if self._eof:
            file.seek(self._at)  # back before a line or a record still being written
            if not self._follow:
                self._close()
            elif now - self._gave_at >= self._poll:  # quiet: close it, look at its size
                self._check_at = now + self._poll
                self._close()
        return records

    def offset(self) -> int:
        return self._at

    def exhausted(self) -> bool:
        if not self._eof:
            return False
        if not self._follow:
            return True
        if not self._source._idle():
            return False
        if self._size() != self._end:  # grew since: read it before ending
            self._check_at = 0.0
            return False
        return True

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def close(self) -> None:
        self._close()


class _JsonLinesReader(_TextReader):
    def _take(self, file: BinaryIO, limit: int) -> list[Any]:
        out: list[Any] = []
        decode = self._source.decode
        lines = _Lines(file, self._at, self._follow, self._what)
        while len(out) < limit:
            start = lines.pos
            line = next(lines, None)
            if line is None:
                break
            text = line.strip()
            if text:
                try:
                    out.append(decode(text))
                except ValueError as exc:
                    raise TimelyError(
                        f"{self._what}: the line at byte {start} is not valid: {exc}"
                    ) from exc
            self._at = lines.pos
        self._eof, self._end = lines.ran_out, lines.end
        return out


class _CsvReader(_TextReader):
    def __init__(self, source: DirectorySource, path: str, offset: int) -> None:
        super().__init__(source, path, offset)
        self._header: list[str] | None = None

    def _rows(self, lines: _Lines) -> Any:
        return csv.reader(lines, delimiter=self._source.delimiter)

    def _read_header(self, file: BinaryIO) -> bool:
        """Read the header (the first row that is not blank); ``False``: not there yet."""
        file.seek(0)
        lines = _Lines(file, 0, self._follow, self._what)
        header, partial = None, False
        try:
            for row in self._rows(lines):
                if lines.ran_out:
                    partial = True
                    break
                if row:
                    header = row
                    break
        except csv.Error as exc:
            raise TimelyError(f"{self._what}: the header is not valid CSV: {exc}") from exc
        if header is None:
            if partial and not self._follow:
                raise TimelyError(
                    f"{self._what}: the file ends inside a quoted field of its header"
                )
            self._eof, self._end = True, lines.end
            return False
        header[0] = header[0].removeprefix("\ufeff")  # a byte order mark
        if len(set(header)) != len(header):
            raise TimelyError(f"{self._what}: the header names a column twice: {header}")
        self._header = header
        self._at = max(self._at, lines.pos)
        file.seek(self._at)
        return True

    def _take(self, file: BinaryIO, limit: int) -> list[Any]:
        if self._header is None and not self._read_header(file):
            return []
        header = self._header
        assert header is not None
        width = len(header)
        out: list[Any] = []
        lines = _Lines(file, self._at, self._follow, self._what)
        rows = self._rows(lines)
        start = self._at
        try:
            while len(out) < limit:
                start = lines.pos
                row = next(rows, None)
                if row is None:
                    break
                if lines.ran_out:  # the file ended inside a quoted field
                    if self._follow:
                        break  # the rest is still being written
                    raise TimelyError(
                        f"{self._what}: the file ends inside a quoted field of the record at "
                        f"byte {start}"
                    )
                if row:
                    if len(row) != width:
                        raise TimelyError(
                            f"{self._what}: the record at byte {start} has {len(row)} fields, "
                            f"the header {width}"
                        )
                    out.append(dict(zip(header, row)))
                self._at = lines.pos
        except csv.Error as exc:
            raise TimelyError(
                f"{self._what}: the record at byte {start} is not valid CSV: {exc}"
            ) from exc
        self._eof, self._end = lines.ran_out, lines.end
        return out


class _ParquetReader(PartitionReader):
    """A Parquet file from a row offset, skipping whole row groups to reach it."""

    def __init__(self, source: DirectorySource, path: str, rows: int) -> None:
        self._what = f"source {source.name!r}: {path}"
        self._path = path
        self._columns = source.columns
        self._rows = rows
        self._file: Any = None
        self._batches: Any = None
        self._batch: Any = None
        self._i = 0
        self._skip = 0
        self._done = False

    def _start(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            self._file = pq.ParquetFile(self._path)
            meta = self._file.metadata
            first, skip = 0, self._rows
            while first < meta.num_row_groups and skip >= meta.row_group(first).num_rows:
                skip -= meta.row_group(first).num_rows
                first += 1
            if first == meta.num_row_groups:
                if skip:
                    raise TimelyError(
                        f"{self._what}: has {meta.num_rows} rows, fewer than the offset "
                        f"{self._rows}"
                    )
                self._batches = iter(())
            else:
                self._batches = self._file.iter_batches(
                    batch_size=_PARQUET_BATCH,
                    row_groups=range(first, meta.num_row_groups),
                    columns=self._columns,
                )
            self._skip = skip
        except (OSError, pa.ArrowException) as exc:
            raise TimelyError(f"{self._what}: cannot be read as Parquet: {exc}") from exc

    def read(self, limit: int) -> list[Any]:
        if self._done:
            return []
        if self._batches is None:
            self._start()
        out: list[Any] = []
        while len(out) < limit:
            batch = self._batch
            if batch is None or self._i >= batch.num_rows:
                try:
                    batch = self._batch = next(self._batches, None)
                except (OSError, ValueError) as exc:  # pyarrow's ArrowIOError, ArrowInvalid
                    raise TimelyError(f"{self._what}: cannot be read: {exc}") from exc
                if batch is None:
                    self._done = True
                    self.close()
                    break
                self._i = min(self._skip, batch.num_rows)  # the offset within a row group
                self._skip -= self._i
                continue
            n = min(limit - len(out), batch.num_rows - self._i)
            out.extend(batch.slice(self._i, n).to_pylist())
            self._i += n
            self._rows += n
        return out

    def offset(self) -> int:
        return self._rows

    def exhausted(self) -> bool:
        return self._done

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._batches = self._batch = None
