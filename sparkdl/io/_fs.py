"""The file-system seam of :mod:`sparkdl.io`: every byte persistence reads or writes goes through a *storage*.

Three storages implement the same small interface (paths are plain strings):

* :class:`LocalStorage` — the local disk through ``os``, with durable writes (``fsync`` of files and of
  the directories whose entries changed), so an atomic rename really is crash-safe;
* :class:`HadoopStorage` — any URI the active Spark session's Hadoop configuration serves (``hdfs://``,
  ``s3a://``, ``abfs://``, ``gs://``, ...), through Hadoop's ``FileSystem`` API on the driver JVM
  (:class:`sparkdl.jvm.hadoop.HadoopFiles`): each file is streamed to a temporary name beside its target, its SHA-256
  checked, then renamed into place; renames are atomic where the file system's are (HDFS: yes; object stores
  copy); ``sync_dir`` is a no-op (the stream is ``hsync``'d where it can be);
* :class:`ArrowStorage` — a ``pyarrow.fs.FileSystem`` passed explicitly as ``filesystem=``.

:func:`resolve` picks one from a path: local paths and ``file://`` URIs are local, any other URI is Hadoop's
(which needs a running classic Spark session with sparkdl's JVM bridge, else :class:`FileSystemUnavailableError`),
or from an explicit ``filesystem`` argument.
"""
from __future__ import annotations

import os
import posixpath
import shutil
import uuid
from urllib.parse import unquote, urlsplit

from sparkdl import jvm
from sparkdl.jvm import hadoop

__all__ = ["LocalStorage", "HadoopStorage", "ArrowStorage", "FileSystemUnavailableError", "resolve", "is_local",
           "replace_file"]


class FileSystemUnavailableError(OSError):
    """A URI names a file system that this process cannot reach: no classic Spark session is running (or it
    lacks sparkdl's JVM bridge) to serve it through Hadoop's ``FileSystem`` API."""


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


class HadoopStorage:
    """A Hadoop file system of the running Spark session (paths are full URIs), through
    :class:`sparkdl.jvm.hadoop.HadoopFiles`; same interface as :class:`LocalStorage`."""

    def __init__(self, files):
        self.files = files

    @staticmethod
    def _split(uri: str) -> tuple[str, str]:
        head, sep, rest = uri.partition("://")
        i = rest.find("/")
        return (head + sep + rest[:i], rest[i:]) if i >= 0 else (uri, "/")

    def join(self, path: str, *names: str) -> str:
        root, p = self._split(path)
        return root + posixpath.join(p, *names)

    def parent(self, path: str) -> str:
        root, p = self._split(path)
        return root + posixpath.dirname(p)

    def name(self, path: str) -> str:
        return posixpath.basename(self._split(path)[1])

    def exists(self, path: str) -> bool:
        return self.files.kind(path) != "missing"

    def isdir(self, path: str) -> bool:
        return self.files.kind(path) == "dir"

    def listdir(self, path: str) -> list[str]:
        return sorted(self.files.list(path))

    def makedirs(self, path: str) -> None:
        self.files.mkdirs(path)

    def read_bytes(self, path: str) -> bytes:
        return self.files.read(path)

    def write_bytes(self, path: str, data: bytes) -> None:
        """Create/replace ``path`` with ``data`` (temp name, SHA-256 checked, renamed into place)."""
        self.files.write(path, data, overwrite=True)

    def rename(self, src: str, dst: str) -> None:
        """Rename a file or directory; ``dst`` must not exist (raises ``FileExistsError``)."""
        self.files.rename(src, dst)

    def replace(self, src: str, dst: str) -> None:
        """Replace the file ``dst`` with ``src`` (atomic where the file system's rename-with-overwrite is)."""
        self.files.rename(src, dst, replace=True)

    def rmtree(self, path: str) -> None:
        self.files.delete(path)

    def sync_dir(self, path: str) -> None:
        """Nothing: what is renamed is as durable as the file system makes it."""

    @classmethod
    def for_uri(cls, uri: str) -> "HadoopStorage":
        """The storage of the running SparkContext.

        Raises
        ------
        FileSystemUnavailableError
            Naming ``uri``, if no classic Spark session runs in this process or it lacks sparkdl's JVM bridge.
        """
        need = (f"{uri}: a URI other than file:// is read and written through the Hadoop FileSystem of the running "
                "Spark session (its Hadoop configuration decides which schemes work)")
        sc = hadoop.active_context()
        if sc is None:
            raise FileSystemUnavailableError(
                f"{need}, and no classic Spark session runs in this process (Spark Connect has none). Start one first "
                "(e.g. sparkdl.engine.get_or_create_session()), use a local path, or pass filesystem= (a "
                "pyarrow.fs.FileSystem)")
        try:
            return cls(hadoop.HadoopFiles.of(sc))
        except jvm.BridgeMissingError as e:
            raise FileSystemUnavailableError(f"{need}, which needs sparkdl's JVM bridge: {e}") from None


def is_local(path) -> bool:
    """Whether ``path`` is a local path or a ``file://`` URI (no Spark session needed)."""
    path = os.fspath(path)
    return "://" not in path or path.split("://", 1)[0].lower() == "file"


def _normalized_uri(uri: str) -> str:
    parts = urlsplit(uri)
    if parts.query or parts.fragment:
        raise ValueError(f"path {uri!r}: a URI with a query (?) or fragment (#) does not name a file")
    path = posixpath.normpath(parts.path or "/")
    return f"{parts.scheme}://{parts.netloc}/{path.lstrip('/')}"


def _local_path(uri: str) -> str:
    parts = urlsplit(uri)
    if parts.netloc not in ("", "localhost") or parts.query or parts.fragment:
        raise ValueError(f"path {uri!r}: a file:// URI must name a local file (file:///dir/name)")
    return os.path.abspath(unquote(parts.path))


def replace_file(storage, path: str, data: bytes) -> None:
    """Write the file ``path`` atomically: ``data`` into a temporary sibling, then renamed over ``path``."""
    parent = storage.parent(path)
    tmp = storage.join(parent, f".{storage.name(path)}.tmp-{uuid.uuid4().hex[:12]}")
    storage.write_bytes(tmp, data)
    storage.replace(tmp, path)
    storage.sync_dir(parent)


class ArrowStorage:
    """A ``pyarrow.fs.FileSystem`` given as ``filesystem=``, behind the same interface as :class:`LocalStorage`."""

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
        A local path or ``file:///...`` URI (the local disk), or any other URI such as ``hdfs://host/models/m`` or
        ``s3a://bucket/m`` (the running Spark session's Hadoop file systems).
    filesystem : pyarrow.fs.FileSystem, storage object or None
        Overrides the file system picked from ``path``.

    Raises
    ------
    TypeError
        If ``path`` is not a string/PathLike or ``filesystem`` is not a known kind.
    ValueError
        If a URI has a query or fragment, or a ``file://`` URI names another host.
    FileSystemUnavailableError
        For a non-local URI without a running classic Spark session with sparkdl's JVM bridge.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    path = os.fspath(path)
    if filesystem is None:
        if "://" not in path:
            return LocalStorage(), os.path.abspath(path)
        if is_local(path):
            return LocalStorage(), _local_path(path)
        path = _normalized_uri(path)
        return HadoopStorage.for_uri(path), path
    if isinstance(filesystem, (LocalStorage, HadoopStorage, ArrowStorage)):
        return filesystem, path
    try:
        from pyarrow.fs import FileSystem
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        FileSystem = ()
    if isinstance(filesystem, FileSystem):
        return ArrowStorage(filesystem), path
    raise TypeError(f"filesystem must be a pyarrow.fs.FileSystem or None, got {type(filesystem).__name__}")
