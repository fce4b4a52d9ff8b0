"""Training data ~3x the executors' storage memory (own process: its SparkContexts set spark.memory.fraction):
the cached partitions spill to disk, training runs, and the final weights are bitwise those of the same run
with ample memory — reading the executor-local copies (the default), the spilled cached partitions every
iteration (``local_data_copy=False``), or data cached ``DISK_ONLY``. Runs ``bench/beyond_memory.py --quick``,
which also reports each run's throughput (printed here; the lead measures it at full size)."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "bench", "beyond_memory.py")


def test_data_three_times_storage_memory_trains_bitwise_like_ample_memory():
    out = subprocess.run([sys.executable, SCRIPT, "--quick"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print("\n".join(out.stdout.strip().splitlines()[:-1]))  # throughput of each run (pytest -s shows it)
    runs = result["runs"]
    storage = result["tight_storage_memory_bytes"]
    assert 7 << 20 <= storage <= 9 << 20, storage  # spark.memory.fraction gave the 8 MB asked for
    assert result["data_bytes"] >= 2.9 * storage  # the training set is ~3x the storage memory
    ample, tight = runs["ample"], runs["tight"]
    assert ample["disk_bytes"] == 0 and ample["cached_partitions"] == ample["partitions"]
    # Every partition stays cached, most of them on disk: memory holds at most the storage memory.
    for name in ("tight", "tight_no_local_copy"):
        r = runs[name]
        assert r["cached_partitions"] == r["partitions"], (name, r)
        assert r["memory_bytes"] <= storage and r["disk_bytes"] >= result["data_bytes"] / 2, (name, r)
    assert runs["tight_disk_only"]["memory_bytes"] == 0
    assert runs["tight_disk_only"]["disk_bytes"] >= result["data_bytes"]
    # Same trajectory, bit for bit, whichever way the data are read.
    assert result["identical_to_ample"] == {"tight": True, "tight_no_local_copy": True, "tight_disk_only": True}
    assert tight["final_loss"] == ample["final_loss"]
    for r in runs.values():
        assert r["later_samples_per_s"] > 0 and r["first_iteration_s"] > 0


def test_a_partition_over_the_record_limit_is_refused_naming_the_partitions_needed(spark, monkeypatch):
    """A cached partition is one serialized record (one JVM array, < 2 GiB): from_numpy refuses before any job
    and names the number of partitions needed; executors refuse a partition built from samples or blocks."""
    import numpy as np
    import pytest

    from sparkdl.engine import DataBlocks, data
    monkeypatch.setattr(data, "MAX_PARTITION_BYTES", 1000)
    monkeypatch.setattr(type(spark.sparkContext), "parallelize",
                        lambda *a, **k: pytest.fail("a Spark job started before the check"))
    x, y = np.zeros((100, 6), np.float64), np.zeros(100, np.int64)  # 100 rows x (24 + 8) bytes as float32 + int64
    with pytest.raises(ValueError, match=r"num_partitions=2 a partition holds up to .* use num_partitions >= 4"):
        DataBlocks.from_numpy(spark.sparkContext, x, y, 2)
    problem = data._normalize_block(3, [(x[:20].astype(np.float32), y[:20]), (x[:20].astype(np.float32), y[:20])])
    assert problem.startswith("partition 3 holds") and "repartition" in problem
    assert isinstance(data._stack_samples(1, zip(x[:31], y[:31])), tuple)  # 31 x 32 = 992 bytes: fits
    assert data._stack_samples(1, zip(x[:32], y[:32])).startswith("partition 1 holds")
