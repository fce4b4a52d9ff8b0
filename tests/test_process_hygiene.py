"""Importing sparkdl changes nothing another library reads, and sparkdl's Spark tasks leave their Python workers
as they found them: a plain UDF run later in the same (reused) worker sees its own thread settings and
environment."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python(code):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "OMP_"))}
    env["PYTHONPATH"] = ROOT
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                         timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_import_sets_no_environment_variable_and_no_thread_pool():
    out = _python("""
        import json, os
        from threadpoolctl import threadpool_info
        import numpy, scipy.linalg.cython_blas
        env, pools = dict(os.environ), [(p["internal_api"], p["num_threads"]) for p in threadpool_info()]
        import sparkdl, sparkdl.nn, sparkdl.optim, sparkdl.engine, sparkdl.ml, sparkdl.onnx  # noqa: F401
        after = [(p["internal_api"], p["num_threads"]) for p in threadpool_info()]
        changed = sorted(k for k in set(env) | set(os.environ) if env.get(k) != os.environ.get(k))
        print(json.dumps({"changed": changed, "pools": pools, "after": after}))
    """)
    import json
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["changed"] == []
    assert seen["after"] == seen["pools"]


def test_pytorch_threading_is_the_same_with_and_without_sparkdl():
    pytest.importorskip("torch")
    probe = "import torch; print(torch.get_num_threads()); print(torch.__config__.parallel_info())"
    clean = _python(probe)
    with_sparkdl = _python("import sparkdl, sparkdl.nn, sparkdl.engine  # noqa\n" + probe)
    assert with_sparkdl == clean
    assert "OMP_WAIT_POLICY" not in with_sparkdl


def _mark_worker(_):
    """A plain (non-sparkdl) UDF: puts its own settings in the worker, returns them with the worker's pid."""
    import numba
    from threadpoolctl import threadpool_limits
    os.environ["USER_UDF_MARK"] = "42"
    threadpool_limits(limits=3, user_api="blas")  # process-wide, as a user's library might
    numba.set_num_threads(2 if numba.config.NUMBA_NUM_THREADS >= 2 else 1)
    return _worker_state()


def _worker_state():
    import numba
    from threadpoolctl import threadpool_info
    blas = sorted(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas")
    return os.getpid(), (dict(os.environ), tuple(blas), numba.get_num_threads())


def _by_pid(rows):
    return dict(rows)


def _assert_unchanged(before, after):
    common = set(before) & set(after)
    assert common, "no Python worker was reused between the probes; the test checks nothing"
    for pid in common:
        env_b, blas_b, numba_b = before[pid]
        env_a, blas_a, numba_a = after[pid]
        assert env_a.get("USER_UDF_MARK") == "42"
        assert {k: v for k, v in env_a.items() if env_b.get(k) != v} == {}
        assert set(env_b) - set(env_a) == set()
        assert blas_a == blas_b and set(blas_b) == {3}
        assert numba_a == numba_b


@pytest.mark.slow
def test_rdd_udf_after_sparkdl_training_sees_its_own_settings(spark):
    from sparkdl import nn
    from sparkdl.engine import DataBlocks, DistributedTrainer, MaxIteration, evaluate
    from sparkdl.metrics import Top1Accuracy
    from sparkdl.optim import SGD
    sc = spark.sparkContext
    before = _by_pid(sc.parallelize(range(8), 8).map(_mark_worker).collect())
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    data = DataBlocks.from_numpy(sc, x, y, 2)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).initialize(0)
    DistributedTrainer(model, nn.CrossEntropyLoss(), SGD(lr=0.1), batch_size=64, end_trigger=MaxIteration(4),
                       progress=False).fit(data)
    evaluate(model, data, [Top1Accuracy()])
    after = _by_pid(sc.parallelize(range(8), 8).map(lambda _: _worker_state()).collect())
    data.unpersist()
    _assert_unchanged(before, after)


@pytest.mark.slow
def test_sql_udf_after_sparkdl_transform_sees_its_own_settings(spark):
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    from sparkdl import models
    from sparkdl.ml import DLClassificationModel
    import pickle

    def mark(i):
        return pickle.dumps(_mark_worker(i))

    def state(i):
        return pickle.dumps(_worker_state())
    probe_df = spark.range(0, 8, 1, 8)  # Arrow UDFs, as transform's: Spark keeps those workers apart
    before = _by_pid(pickle.loads(r[0]) for r in probe_df.select(F.udf(mark, BinaryType(), useArrow=True)("id"))
                     .collect())
    rng = np.random.default_rng(1)
    df = spark.createDataFrame([(x.tolist(),) for x in rng.standard_normal((400, 4)).astype(np.float32)],
                               "features array<float>").repartition(4)
    net = models.mlp(in_features=4, hidden=(8,), num_classes=3).initialize(1)
    assert len(DLClassificationModel(net).setFeatureShape([4]).transform(df).select("prediction").collect()) == 400
    after = _by_pid(pickle.loads(r[0]) for r in probe_df.select(F.udf(state, BinaryType(), useArrow=True)("id"))
                    .collect())
    _assert_unchanged(before, after)
