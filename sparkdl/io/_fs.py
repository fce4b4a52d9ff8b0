"""The file-system seam of :mod:`sparkdl.io`: every byte persistence reads or writes goes through a *storage*.

Two storages implement the same small interface (paths are plain strings):

* :class:`LocalStorage` — the local disk through ``os``, with durable writes (``fsync`` of files and of
  the directories whose entries changed), so an atomic rename really is crash-safe;
* :class:`ArrowStorage` — any ``pyarrow.fs.FileSystem`` (HDFS, S3, ...). Durability is whatever the
  remote store gives on close; ``sync_dir`` is a no-op. Only ``pyarrow.fs.LocalFileSystem`` is tested.

:func:`resolve` picks one from a path (``"hdfs://..."`` URIs go through ``pyarrow.fs.FileSystem.from_uri``)
or from an explicit ``filesystem`` argument.
"""
from __future__ import annotations

import os
import posixpath
import shutil

__all__ = ["LocalStorage", "ArrowStorage", "resolve"]


class LocalStorage:
    """Local files through ``os`` with fsync'd writes."""

    join = staticmethod(os.path.join)
    parent = staticmethod(os.path.dirname)
    name = staticmethod(os.path.basename)
    exists = staticmethod(os.path.exists)
    isdir = staticmethod(os.path.isdir)

    @staticmethod
    def listdir(path: str) -> list[str]:
        return sorted(os.listdir(path))

    @staticmethod
    def makedirs(path: str) -> None:
        os.makedirs(path, exist_ok=True)

    @staticmethod
    def read_bytes(path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    @staticmethod
    def write_bytes(path: str, data: bytes) -> None:
        """Create/replace ``path`` with ``data`` and fsync it (not atomic by itself; see ``replace``)."""
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    @staticmethod
    def rename(src: str, dst: str) -> None:
        """Rename a file or directory; ``dst`` must not exist (raises ``FileExistsError``)."""
        if os.path.lexists(dst):
            raise FileExistsError(f"{dst} already exists")
        os.rename(src, dst)

    @staticmethod
    def replace(src: str, dst: str) -> None:
        """Atomically replace the file ``dst`` with ``src``."""
        os.replace(src, dst)

    @staticmethod
    def rmtree(path: str) -> None:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.remove(path)

    @staticmethod
    def sync_dir(path: str) -> None:
        """fsync a directory so renames/creations inside it survive a crash."""
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class ArrowStorage:
    """Any ``pyarrow.fs.FileSystem`` behind the same interface as :class:`LocalStorage`."""

    join = staticmethod(posixpath.join)
    parent = staticmethod(posixpath.dirname)
    name = staticmethod(posixpath.basename)

    def __init__(self, filesystem):
        self.fs = filesystem

    def _info(self, path):
        return self.fs.get_file_info(path)

    def exists(self, path: str) -> bool:
        from pyarrow.fs import FileType
        return self._info(path).type != FileType.NotFound

    def isdir(self, path: str) -> bool:
        from pyarrow.fs import FileType
        return self._info(path).type == FileType.Directory

    def listdir(self, path: str) -> list[str]:
        from pyarrow.fs import FileSelector
        return sorted(posixpath.basename(i.path) for i in self.fs.get_file_info(FileSelector(path)))

    def makedirs(self, path: str) -> None:
        self.fs.create_dir(path, recursive=True)

    def read_bytes(self, path: str) -> bytes:
        with self.fs.open_input_stream(path) as f:
            return f.read()

    def write_bytes(self, path: str, data: bytes) -> None:
        with self.fs.open_output_stream(path) as f:
            f.write(data)

    def rename(self, src: str, dst: str) -> None:
        if self.exists(dst):
            raise FileExistsError(f"{dst} already exists")
        self.fs.move(src, dst)

    def replace(self, src: str, dst: str) -> None:
        self.fs.move(src, dst)

    def rmtree(self, path: str) -> None:
        if self.isdir(path):
            self.fs.delete_dir(path)
        elif self.exists(path):
            self.fs.delete_file(path)

    def sync_dir(self, path: str) -> None:
        """No portable directory sync on remote stores; renames are as durable as the store makes them."""


def resolve(path, filesystem=None):
    """Return ``(storage, path_string)`` for a local path, a URI, or an explicit ``filesystem``.

    Parameters
    ----------
    path : str or os.PathLike
        A local path, or a URI such as ``file:///tmp/m`` or ``hdfs://host/models/m``.
    filesystem : pyarrow.fs.FileSystem, storage object or None
        Overrides the file system picked from ``path``.

    Raises
    ------
    TypeError
        If ``path`` is not a string/PathLike or ``filesystem`` is not a known kind.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    path = os.fspath(path)
    if filesystem is None:
        if "://" not in path:
            return LocalStorage(), os.path.abspath(path)
        from pyarrow.fs import FileSystem, LocalFileSystem
        fs, inner = FileSystem.from_uri(path)
        if isinstance(fs, LocalFileSystem):
            return LocalStorage(), os.path.abspath(inner)
        return ArrowStorage(fs), inner
    if isinstance(filesystem, (LocalStorage, ArrowStorage)):
        return filesystem, path
    try:
        from pyarrow.fs import FileSystem
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        FileSystem = ()
    if isinstance(filesystem, FileSystem):
        return ArrowStorage(filesystem), path
    raise TypeError(f"filesystem must be a pyarrow.fs.FileSystem or None, got {type(filesystem).__name__}")
