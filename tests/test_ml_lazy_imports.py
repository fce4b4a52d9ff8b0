"""sparkdl.ml imports its estimators on first use, so that the Python workers of fit and transform, which import
sparkdl.ml.data, do not import pyspark.ml's estimators (and pandas) as well."""
import subprocess
import sys

import pytest

import sparkdl.ml
from sparkdl.ml import classifier, estimator


def test_the_workers_modules_do_not_import_the_estimators():
    code = ("import sys, sparkdl.ml.data, sparkdl.ml.arrow; "
            "print(sorted(m for m in ('sparkdl.ml.classifier', 'pyspark.ml.classification', 'pandas') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["[]"]


def test_the_package_names_resolve_to_the_estimators():
    assert sparkdl.ml.DLClassifier is classifier.DLClassifier
    assert sparkdl.ml.DLClassificationModel is classifier.DLClassificationModel
    assert sparkdl.ml.DLEstimator is estimator.DLEstimator and sparkdl.ml.DLModel is estimator.DLModel
    assert set(sparkdl.ml.__all__) <= set(dir(sparkdl.ml))
    namespace = {}
    exec("from sparkdl.ml import *", namespace)
    assert {n for n in namespace if not n.startswith("__")} == set(sparkdl.ml.__all__)
    with pytest.raises(AttributeError, match="module 'sparkdl.ml' has no attribute 'DLRegressor'"):
        sparkdl.ml.DLRegressor  # noqa: B018
