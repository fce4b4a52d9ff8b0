"""What a user sees on the console under spark-submit: no INFO lines from Spark (unless asked for), and no
Spark console progress bar competing with sparkdl's own bar during fit."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent("""
    import logging
    import numpy as np
    from sparkdl import nn
    from sparkdl.engine import DataBlocks, DistributedTrainer, MaxEpoch, get_or_create_session
    from sparkdl.optim import SGD
    logging.basicConfig(format="%(message)s")
    logging.getLogger("sparkdl").setLevel(logging.INFO)
    spark = get_or_create_session(app_name="logs", conf={"spark.ui.showConsoleProgress": "true",
                                                          "spark.ui.enabled": "false"})
    sc = spark.sparkContext
    x = np.arange(16, dtype=np.float32).reshape(8, 2)
    data = DataBlocks.from_numpy(sc, x, (np.arange(8) % 2).astype(np.int64), 1)
    model = nn.Sequential(nn.Linear(2, 2)).initialize(0)
    from sparkdl.engine.environment import check_executor_environment
    check_executor_environment(sc)  # its job runs before fit's bar exists; fit then reuses the result
    before = set(sc.statusTracker().getJobIdsForGroup())
    DistributedTrainer(model, nn.CrossEntropyLoss(), SGD(lr=0.1), batch_size=4, end_trigger=MaxEpoch(1),
                       progress=True).fit(data)
    jobs = set(sc.statusTracker().getJobIdsForGroup()) - before
    print("FIT_STAGES", sorted(s for j in jobs for s in sc.statusTracker().getJobInfo(j).stageIds))
    spark.stop()
""")


def _submit(tmp_path, *conf):
    submit = shutil.which("spark-submit", path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    if submit is None:
        pytest.skip("spark-submit is not installed")
    (tmp_path / "job.py").write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": ROOT, "PYSPARK_PYTHON": sys.executable}
    from sparkdl.jvm import jar_path  # the README's one line for spark-submit
    out = subprocess.run([submit, "--master", "local[1]", "--driver-memory", "1g", "--jars", jar_path(), *conf,
                          str(tmp_path / "job.py")],
                         capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


@pytest.mark.slow
def test_spark_submit_prints_no_info_lines_and_one_progress_bar(tmp_path):
    out = _submit(tmp_path)
    spark_info = [line.split(" INFO ")[1] for line in out.stderr.splitlines() if " INFO " in line]
    # Spark logs its first three lines before any setting can apply (it resets log4j while the context starts)
    assert [line.split(":")[0] for line in spark_info] == ["SparkContext"] * 3, spark_info
    assert spark_info[0].startswith("SparkContext: Running Spark version")
    python = out.stdout  # spark-submit merges the Python process's stderr into its stdout
    assert "stopped Spark's console progress bar" in python and "sparkdl fit: 100%" in python
    fit_stages = eval(python.split("FIT_STAGES")[1].splitlines()[0])
    assert len(fit_stages) >= 2  # two iterations (one stage each with the driver reduce)
    for stage in fit_stages:  # Spark's bar may show the data jobs before fit, none of fit's
        assert f"[Stage {stage}:" not in out.stderr


@pytest.mark.slow
def test_spark_submit_log_level_given_by_the_user_is_kept(tmp_path):
    out = _submit(tmp_path, "--conf", "spark.log.level=INFO")
    assert "INFO SparkContext: Submitted application: logs" in out.stderr
