"""Where checkpoints live: a local directory, or any filesystem ``pyarrow.fs`` knows.

:func:`storage_for` turns a checkpoint location into a :class:`Storage`: a local path (or a
``file://`` URI) gives :class:`LocalStorage`; another URI pyarrow understands
(``s3://bucket/jobs/clicks``, ``gs://...``, ``hdfs://...``, ``abfs://...``) or an explicit
``pyarrow.fs.FileSystem`` gives :class:`ArrowStorage`.  A checkpoint needs only whole files
written at once, listed, read back and removed, plus one *exclusive create* for the commit
marker:

* **Whole or nothing.**  :meth:`Storage.write` never leaves a partial file under the final
  name: locally a hidden temporary file is renamed; on an object store (S3, GCS, Azure) an
  object appears whole when its upload completes; on other pyarrow filesystems (HDFS) a hidden
  temporary file is moved.
* **Exclusive create.**  :meth:`Storage.create` writes a file only if it does not exist and
  says whether this call wrote it.  Locally that is atomic (a hard link fails if the name
  exists).  On pyarrow filesystems it is a check then a write: two workers that finish their
  parts of one checkpoint at the same instant may both commit it.  They write the same marker,
  and both publish the same staged output, which is why a sink's ``publish`` must be
  idempotent even when two calls overlap (the library's sinks are).

>>> import tempfile, pyarrow.fs
>>> root = tempfile.mkdtemp()
>>> local, base = storage_for(root)
>>> local.write(local.join(base, "a", "x.json"), b"{}")
>>> marker = local.join(base, "a", "m")
>>> local.create(marker, b"1"), local.create(marker, b"2"), local.read(marker)
(True, False, b'1')
>>> sorted(local.list(local.join(base, "a")))
['m', 'x.json']
>>> subtree = pyarrow.fs.SubTreeFileSystem(root, pyarrow.fs.LocalFileSystem())
>>> arrow, ck = storage_for("ck", filesystem=subtree)
>>> arrow.write(arrow.join(ck, "p"), b"data")
>>> arrow.read(arrow.join(ck, "p")), arrow.list(ck), arrow.list("nothing")
(b'data', ['p'], [])
"""

from __future__ import annotations

import abc
import os
import posixpath
import shutil
import uuid
from typing import Any

from ..errors import TimelyError

__all__ = ["ArrowStorage", "LocalStorage", "Storage", "storage_for"]

#: pyarrow filesystems whose files are objects: an upload appears whole when it completes,
#: and a "move" would be a copy.
OBJECT_STORES = frozenset({"s3", "gcs", "abfs"})


class Storage(abc.ABC):
    """Whole files under paths (module docstring); ``describe(path)`` names a path in errors."""

    @abc.abstractmethod
    def join(self, *parts: str) -> str:
        """A path made of ``parts``."""

    @abc.abstractmethod
    def list(self, folder: str) -> list[str]:
        """The names in ``folder`` (``[]`` if it does not exist)."""

    @abc.abstractmethod
    def exists(self, path: str) -> bool:
        """Whether a file is at ``path``."""

    @abc.abstractmethod
    def read(self, path: str) -> bytes:
        """The whole file (``OSError`` if it cannot be read)."""

    @abc.abstractmethod
    def write(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path``, whole or not at all (replacing a file there)."""

    @abc.abstractmethod
    def create(self, path: str, data: bytes) -> bool:
        """Write ``data`` to ``path`` unless a file is there; whether this call wrote it."""

    @abc.abstractmethod
    def remove_tree(self, folder: str) -> None:
        """Remove ``folder`` and everything in it (nothing if it is not there)."""

    def describe(self, path: str) -> str:
        """``path`` as errors name it."""
        return path


class LocalStorage(Storage):
    """Files of the local filesystem (module docstring)."""

    def join(self, *parts: str) -> str:
        """A path made of ``parts``."""
        return os.path.join(*parts)

    def list(self, folder: str) -> list[str]:
        """The names in ``folder`` (``[]`` if none)."""
        try:
            return os.listdir(folder)
        except FileNotFoundError:
            return []

    def exists(self, path: str) -> bool:
        """Whether a file is at ``path``."""
        return os.path.exists(path)

    def read(self, path: str) -> bytes:
        """The whole file."""
        with open(path, "rb") as f:
            return f.read()

    def write(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path``, whole or not at all."""
        temp = self._written_aside(path, data)
        os.replace(temp, path)

    def create(self, path: str, data: bytes) -> bool:
        """Write ``path`` unless it exists; whether this call wrote it."""
        temp = self._written_aside(path, data)
        try:
            os.link(temp, path)  # fails if the name exists: exclusive
        except FileExistsError:
            return False
        finally:
            os.remove(temp)
        return True

    def remove_tree(self, folder: str) -> None:
        """Remove ``folder`` and what it holds."""
        shutil.rmtree(folder, ignore_errors=True)

    @staticmethod
    def _written_aside(path: str, data: bytes) -> str:
        """``data`` in a hidden temporary file beside ``path`` (this process' own name, so two
        writers of the same file do not meet), flushed to disk; returns its path."""
        folder, name = os.path.split(path)
        os.makedirs(folder, exist_ok=True)
        temp = os.path.join(folder, f".{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        with open(temp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return temp


class ArrowStorage(Storage):
    """Files of a ``pyarrow.fs.FileSystem`` (module docstring); paths are the filesystem's
    own (``bucket/prefix/...`` for object stores).  ``whole_objects``: whether an upload
    appears whole when it completes, so that files are written in place (default: for the
    object stores S3, GCS and Azure); otherwise a hidden temporary file is moved."""

    def __init__(self, filesystem: Any, whole_objects: bool | None = None) -> None:
        import pyarrow.fs

        self._fs = filesystem
        self._pafs = pyarrow.fs
        if whole_objects is None:
            whole_objects = filesystem.type_name in OBJECT_STORES
        self._objects = whole_objects

    def join(self, *parts: str) -> str:
        """A path made of ``parts``."""
        return posixpath.join(*parts)

    def list(self, folder: str) -> list[str]:
        """The names in ``folder`` (``[]`` if none).  A folder that another worker creates
        while it is listed may fail the listing as not found even with ``allow_not_found``
        (pyarrow's local filesystem lists, fails, then finds the folder there): it was not
        there when listed, so that is ``[]`` too."""
        selector = self._pafs.FileSelector(folder, allow_not_found=True)
        try:
            infos = self._fs.get_file_info(selector)
        except FileNotFoundError:
            return []
        return [posixpath.basename(info.path) for info in infos]

    def exists(self, path: str) -> bool:
        """Whether a file is at ``path``."""
        return self._fs.get_file_info(path).type != self._pafs.FileType.NotFound

    def read(self, path: str) -> bytes:
        """The whole file."""
        with self._fs.open_input_stream(path) as f:
            return f.read()

    def write(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path``, whole or not at all."""
        folder, name = posixpath.split(path)
        self._fs.create_dir(folder, recursive=True)
        if self._objects:  # an object appears whole when its upload completes
            self._upload(path, data)
            return
        temp = posixpath.join(folder, f".{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        self._upload(temp, data)
        self._fs.move(temp, path)

    def create(self, path: str, data: bytes) -> bool:
        """Write ``path`` unless it exists; whether this call wrote it."""
        if self.exists(path):  # a check, then a write: see the module docstring
            return False
        self.write(path, data)
        return True

    def remove_tree(self, folder: str) -> None:
        """Remove ``folder`` and what it holds."""
        try:
            self._fs.delete_dir(folder)
        except FileNotFoundError:
            pass

    def describe(self, path: str) -> str:
        """``path`` as errors name it."""
        return f"{self._fs.type_name}:{path}"

    def _upload(self, path: str, data: bytes) -> None:
        with self._fs.open_output_stream(path) as f:
            f.write(data)


def storage_for(location: str | os.PathLike, filesystem: Any = None) -> tuple[Storage, str]:
    """The storage of a checkpoint ``location`` and the location's path in it (module
    docstring): ``filesystem`` if given (a ``pyarrow.fs.FileSystem``, or a :class:`Storage`),
    else from the URI."""
    text = os.fspath(location)
    if isinstance(filesystem, Storage):
        return filesystem, text
    if filesystem is not None:
        return ArrowStorage(filesystem), text
    if "://" not in text:
        return LocalStorage(), text
    if text.startswith("file://"):
        return LocalStorage(), text[len("file://") :]
    import pyarrow.fs

    try:
        fs, path = pyarrow.fs.FileSystem.from_uri(text)
    except (ValueError, OSError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise TimelyError(f"checkpoint location {text!r}: pyarrow cannot open it: {exc}") from exc
    return ArrowStorage(fs), path
