"""The executor environment check (sparkdl.engine.environment): one small job per application reports every
executor's versions; a mismatch that breaks pickles is an error with a driver-vs-executor table, raised by
DistributedTrainer.fit, DLClassifier.fit and DLModel.transform before any training or inference job.

Executors with other versions are simulated through the module's documented seam, ``collect_reports``."""
import dataclasses
import logging
import subprocess
import sys

import cloudpickle
import numpy as np
import pytest
from pyspark.ml.linalg import Vectors

import sparkdl
from sparkdl import models, nn
from sparkdl.engine import DataBlocks, DistributedTrainer, MaxEpoch, environment
from sparkdl.engine.environment import ExecutorEnvironmentError
from sparkdl.ml import DLClassificationModel, DLClassifier
from sparkdl.optim import SGD


@pytest.fixture()
def fresh(monkeypatch):
    """An empty per-application cache for this test only (the session's real result is kept for others)."""
    monkeypatch.setattr(environment, "_RESULTS", {})


def _executor(**changes):
    return dataclasses.replace(environment.driver_report(), **{"host": "worker-7", **changes})


def _fake(monkeypatch, *reports):
    calls = []

    def collect(sc, session=None):
        calls.append(sc.applicationId if session is None else ("sql", sc.applicationId))
        return list(reports)
    monkeypatch.setattr(environment, "collect_reports", collect)
    return calls


@pytest.mark.parametrize("through", ["rdd", "sql"])
def test_real_executors_report_the_driver_versions(spark, fresh, through):
    """Through an RDD job (training) or a SQL Python UDF (transform: the workers of DataFrame stages)."""
    reports = environment.collect_reports(spark.sparkContext, spark if through == "sql" else None)
    import numba
    import pyarrow
    assert reports
    for r in reports:
        assert (r.python, r.numpy, r.numba, r.pyarrow, r.sparkdl) == (
            sys.version.split()[0], np.__version__, numba.__version__, pyarrow.__version__, sparkdl.__version__)
        assert r.threading_layer in ("tbb", "workqueue", "omp")
    assert all(isinstance(v, str) for r in reports for v in dataclasses.astuple(r))
    environment.check_executor_environment(spark.sparkContext, spark if through == "sql" else None)  # no error


def test_runs_once_per_application(spark, fresh, monkeypatch):
    calls = _fake(monkeypatch, _executor())
    for _ in range(3):
        environment.check_executor_environment(spark.sparkContext)
    assert calls == [spark.sparkContext.applicationId]


def test_reporter_runs_where_sparkdl_is_not_installed():
    code = ("import pickle, sys\nsys.modules['sparkdl'] = None\n"
            "f = pickle.loads(sys.stdin.buffer.read())\nprint(repr(f()))")
    out = subprocess.run([sys.executable, "-c", code], input=cloudpickle.dumps(environment._reporter()),
                         capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    report = environment.EnvironmentReport(*eval(out.stdout.decode()))
    assert report.sparkdl is None and report.threading_layer is None and report.numpy == np.__version__


def _error(driver, executor):
    error, warning = environment.compare_environments(driver, [executor])
    return error, warning


def test_compare_flags_what_breaks_pickles():
    d = environment.driver_report()
    d = dataclasses.replace(d, python="3.11.7", numpy="2.4.6", sparkdl="0.1.0", numba="0.68.1", pyarrow="26.0.1")
    same_minor = dataclasses.replace(d, host="w", python="3.11.9", numpy="2.1.0", threading_layer="other")
    assert _error(d, same_minor) == (None, None)
    for change, flag in [({"sparkdl": "0.0.9"}, "must be the same version"),
                         ({"sparkdl": None}, "None: not installed"),
                         ({"python": "3.10.12"}, "must be the same major.minor version"),
                         ({"numpy": "1.26.4"}, "must be the same major version")]:
        error, _ = _error(d, dataclasses.replace(d, host="w", **change))
        assert error is not None and flag in error, (change, error)
    error, warning = _error(d, dataclasses.replace(d, host="w", numba="0.61.0", pyarrow="19.0.0"))
    assert error is None
    assert "0.61.0" in warning and "19.0.0" in warning and "results are not affected" in warning


def test_error_table_has_driver_and_executor_columns(spark, fresh, monkeypatch):
    _fake(monkeypatch, _executor(sparkdl="0.0.9"), _executor(host="worker-8"))
    with pytest.raises(ExecutorEnvironmentError) as info:
        environment.check_executor_environment(spark.sparkContext)
    lines = str(info.value).splitlines()
    header = lines[1]
    assert header.split() == ["driver", "executor", "worker-7", "executor", "worker-8"]
    row = next(line for line in lines if line.startswith("sparkdl"))
    assert row.split()[:4] == ["sparkdl", sparkdl.__version__, "0.0.9", sparkdl.__version__]
    assert "must be the same version" in row
    assert "spark.archives" in str(info.value)  # the fix
    with pytest.raises(ExecutorEnvironmentError):  # the remembered outcome is raised again
        environment.check_executor_environment(spark.sparkContext)


def test_warning_for_versions_that_do_not_matter(spark, fresh, monkeypatch, caplog):
    _fake(monkeypatch, _executor(pyarrow="1.0.0"))
    with caplog.at_level(logging.WARNING, logger="sparkdl.engine"):
        environment.check_executor_environment(spark.sparkContext)
    assert "1.0.0" in caplog.text and "pyarrow" in caplog.text


def test_distributed_trainer_fit_refuses_before_training(spark, fresh, monkeypatch):
    _fake(monkeypatch, _executor(numpy="1.26.4"))
    model = nn.Sequential(nn.Linear(3, 2)).initialize(0)
    before = model.flat_parameters.copy()
    x = np.zeros((8, 3), np.float32)
    data = DataBlocks.from_numpy(spark.sparkContext, x, np.zeros(8, np.int64), 2)
    try:
        trainer = DistributedTrainer(model, nn.CrossEntropyLoss(), SGD(lr=0.1), batch_size=4,
                                     end_trigger=MaxEpoch(1), progress=False)
        with pytest.raises(ExecutorEnvironmentError, match="numpy"):
            trainer.fit(data)
    finally:
        data.unpersist()
    np.testing.assert_array_equal(model.flat_parameters, before)


def test_ml_fit_and_transform_refuse(spark, fresh, monkeypatch):
    calls = _fake(monkeypatch, _executor(sparkdl="0.0.9"))
    df = spark.createDataFrame([(Vectors.dense([0.0, 1.0]), float(i % 2)) for i in range(8)], ["features", "label"])
    net = models.mlp(in_features=2, hidden=(4,), num_classes=2)
    with pytest.raises(ExecutorEnvironmentError, match="0.0.9"):
        DLClassifier(network=net, maxEpoch=1, batchSize=4).fit(df)
    model = DLClassificationModel(net.initialize(0)).setFeatureShape([2])
    with pytest.raises(ExecutorEnvironmentError, match="0.0.9"):
        model.transform(df)
    # fit checked through an RDD job (it trains through RDDs); transform raised the remembered result: no new job
    assert calls == [spark.sparkContext.applicationId]


def test_transform_checks_through_the_workers_of_sql_jobs(spark, fresh, monkeypatch):
    calls = _fake(monkeypatch, _executor(sparkdl="0.0.9"))
    df = spark.createDataFrame([(Vectors.dense([0.0, 1.0]),)], ["features"])
    model = DLClassificationModel(models.mlp(in_features=2, hidden=(4,), num_classes=2).initialize(0))
    with pytest.raises(ExecutorEnvironmentError, match="0.0.9"):
        model.setFeatureShape([2]).transform(df)
    assert calls == [("sql", spark.sparkContext.applicationId)]



def test_a_different_blas_kernel_is_a_warning_naming_it():
    d = environment.driver_report()
    assert d.blas is not None and d.blas.split()[0] in ("openblas", "mkl", "blis", "flexiblas")
    other = dataclasses.replace(d, host="w", blas="openblas 0.3.30 Haswell" if "Haswell" not in d.blas
                                else "openblas 0.3.30 SkylakeX")
    error, warning = environment.compare_environments(d, [other])
    assert error is None
    assert "blas" in warning and "<- differs (GEMMs may round differently" in warning and other.blas in warning
    assert environment.compare_environments(d, [dataclasses.replace(d, host="w")]) == (None, None)
