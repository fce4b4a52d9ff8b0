"""Python handle of the bridge's ``org.sparkdl.bridge.HadoopFiles``: files on the file systems a session's Hadoop
configuration serves (:mod:`sparkdl.io._fs`)."""
from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import weakref

from sparkdl.jvm import bridge

__all__ = ["HadoopFiles", "active_context", "hadoop_counters"]


def active_context():
    """The SparkContext running in this process, or ``None`` (pyspark not imported, no context running, or a Spark
    Connect session, which has none)."""
    pyspark = sys.modules.get("pyspark")
    return None if pyspark is None else pyspark.SparkContext._active_spark_context


_hadoop_files = weakref.WeakKeyDictionary()
_HADOOP_ERRORS = {"java.io.FileNotFoundException": FileNotFoundError,
                  "org.apache.hadoop.fs.FileAlreadyExistsException": FileExistsError}


class HadoopFiles:
    """Python handle of the bridge's ``org.sparkdl.bridge.HadoopFiles``: files on the file systems the Hadoop
    configuration of ``sc`` serves, named by full URIs. Bytes move through local temporary files (py4j carries only
    their names); Java's ``FileNotFoundException``/``FileAlreadyExistsException`` raise ``FileNotFoundError``/
    ``FileExistsError``, any other failure ``OSError`` with Java's message. One handle per SparkContext
    (:meth:`of`)."""

    def __init__(self, sc):
        self._files = bridge(sc).hadoopFiles(sc._jsc)

    @classmethod
    def of(cls, sc) -> "HadoopFiles":
        if sc not in _hadoop_files:
            _hadoop_files[sc] = cls(sc)
        return _hadoop_files[sc]

    def _call(self, method: str, uri: str, *args):
        from py4j.protocol import Py4JJavaError
        try:
            return getattr(self._files, method)(uri, *args)
        except Py4JJavaError as e:
            name = e.java_exception.getClass().getName()
            message = e.java_exception.getMessage() or name
            if name.endswith("UnsupportedFileSystemException"):
                message = (f"{uri}: {message} in this Spark session's Hadoop configuration: add the file system's "
                           "connector jar to the session (e.g. hadoop-aws for s3a://) or set spark.hadoop.fs.<scheme>"
                           ".impl")
            raise _HADOOP_ERRORS.get(name, OSError)(message) from None

    def kind(self, uri: str) -> str:
        """``'missing'``, ``'file'`` or ``'dir'``."""
        return self._call("kind", uri)

    def list(self, uri: str) -> list[str]:
        return list(self._call("list", uri))

    def mkdirs(self, uri: str) -> None:
        self._call("mkdirs", uri)

    def delete(self, uri: str) -> None:
        self._call("delete", uri)

    def rename(self, src: str, dst: str, replace: bool = False) -> None:
        self._call("replace" if replace else "rename", src, dst)

    def upload(self, uri: str, local_path: str, sha256: str, overwrite: bool) -> None:
        """Stream a local file to ``uri`` (temp name, checked against ``sha256``, renamed into place)."""
        self._call("upload", uri, local_path, sha256, bool(overwrite))

    def write(self, uri: str, data: bytes, overwrite: bool = True) -> None:
        fd, local = tempfile.mkstemp(prefix="sparkdl-hadoop-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            self.upload(uri, local, hashlib.sha256(data).hexdigest(), overwrite)
        finally:
            os.unlink(local)

    def read(self, uri: str) -> bytes:
        local = self._call("download", uri)
        try:
            with open(local, "rb") as f:
                return f.read()
        finally:
            os.unlink(local)


def hadoop_counters(sc) -> dict:
    """Files and bytes written and read through :class:`HadoopFiles` by this driver JVM, and its replaces done by an
    atomic rename with overwrite (``FileContext``; tests)."""
    counts = [int(v) for v in bridge(sc).hadoopCounters()]
    return dict(zip(("files_written", "bytes_written", "files_read", "bytes_read", "atomic_replaces"), counts))
