"""A local folder that behaves as an object store does, as a ``pyarrow.fs`` filesystem.

On S3, GCS or Azure an object is invisible until its upload completes, and then it appears
whole: :class:`pytimely.io.storage.ArrowStorage` relies on that to write checkpoint files in
place there.  A plain local folder written through ``open_output_stream`` shows a file from
its first byte, so a test that uploads "in place" to it would test another filesystem than the
one the code is for.  :func:`object_store` wraps a folder so that each upload is written aside
and renamed into place when its stream closes: whole or not at all, like an object.
"""

from __future__ import annotations

import io
import os
import tempfile
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs


class _WholeOnClose(io.RawIOBase):
    """A file written aside (in ``spare``) and renamed to ``path`` when closed."""

    def __init__(self, path: str, spare: str) -> None:
        super().__init__()
        self._path = path
        fd, self._temp = tempfile.mkstemp(dir=spare)
        self._file = os.fdopen(fd, "wb")

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return self._file.write(data)

    def close(self) -> None:
        if not self.closed:
            self._file.close()
            os.replace(self._temp, self._path)
        super().close()


class _ObjectStoreHandler(pafs.FileSystemHandler):
    def __init__(self, root: str, spare: str) -> None:
        self.root = root
        self.spare = spare
        self.fs = pafs.SubTreeFileSystem(root, pafs.LocalFileSystem())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _ObjectStoreHandler) and other.root == self.root

    def __ne__(self, other: object) -> bool:
        return not self == other

    def get_type_name(self) -> str:
        return "object-store-in-a-folder"

    def normalize_path(self, path: str) -> str:
        return path

    def get_file_info(self, paths: list[str]) -> list[Any]:
        return self.fs.get_file_info(paths)

    def get_file_info_selector(self, selector: Any) -> list[Any]:
        return self.fs.get_file_info(selector)

    def create_dir(self, path: str, recursive: bool) -> None:
        self.fs.create_dir(path, recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self.fs.delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self.fs.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        self.fs.delete_dir_contents("", accept_root_dir=True)

    def delete_file(self, path: str) -> None:
        self.fs.delete_file(path)

    def move(self, src: str, dest: str) -> None:
        self.fs.move(src, dest)

    def copy_file(self, src: str, dest: str) -> None:
        self.fs.copy_file(src, dest)

    def open_input_stream(self, path: str) -> Any:
        return self.fs.open_input_stream(path)

    def open_input_file(self, path: str) -> Any:
        return self.fs.open_input_file(path)

    def open_output_stream(self, path: str, metadata: Any) -> Any:
        return pa.PythonFile(_WholeOnClose(os.path.join(self.root, path), self.spare), mode="w")

    def open_append_stream(self, path: str, metadata: Any) -> Any:
        raise NotImplementedError("objects cannot be appended to")


def object_store(root: str, spare: str) -> pafs.PyFileSystem:
    """The folder ``root`` as an object store: uploads are staged in ``spare`` (another folder
    on the same disk) and appear whole when complete.

    >>> import tempfile
    >>> root, spare = tempfile.mkdtemp(), tempfile.mkdtemp()
    >>> fs = object_store(root, spare)
    >>> stream = fs.open_output_stream("a.bin")
    >>> _ = stream.write(b"half")
    >>> [i.path for i in fs.get_file_info(pafs.FileSelector(""))]
    []
    >>> stream.close()
    >>> fs.open_input_stream("a.bin").read()
    b'half'
    """
    return pafs.PyFileSystem(_ObjectStoreHandler(root, spare))
