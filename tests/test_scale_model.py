"""The iteration-time cost model of bench/scale_model.py: hand-worked predictions, the structure of each reduce
strategy (what grows with partitions, executors, parameters), and its reduce rule against what the engine runs."""
import os
import sys

import numpy as np
import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
sys.path.insert(0, BENCH)

import scale_cost  # noqa: E402
import scale_model  # noqa: E402
from scale_cost import Calibration, Cluster, Strategy, efficiency, predict, reduce_strategy  # noqa: E402

CAL = Calibration(job_s=0.01, one_jvm_launch_s=0.003, task_driver_s=0.001, task_python_s=0.002, stage_s=0.05,
                  row_param_s=1e-9, partition_param_s=1e-8, python_io_bps=1e8, weights_in_bps=2e8, gather_bps=1e7,
                  shuffle_bps=1e8, driver_sum_fps=1e9, update_param_s=1e-8, inline_bps=1e8, broadcast_bps=1e7,
                  fetch_bps=5e6)
SMALL = Cluster(executors=2, cores=1, partitions=4, parameters=1000, batch_size=8)


def test_driver_reduce_prediction_worked_by_hand():
    p = predict(CAL, SMALL, Strategy("driver", 1))
    record = 80 + 4 * 1000  # two 40-byte headers (gradient, buffers) + the float32 gradient
    assert p["launch"] == pytest.approx(0.01 + 2 * 0.001 + 1 * 0.002)  # job, 2 tasks, 1 wave
    assert p["weights"] == pytest.approx(4000 / 1e8 + 4000 / 2e8)  # 4 KB ride inside each task, then one read
    # 4 rows and 2 partitions per task; each task pre-sums its aligned partitions into one record.
    assert p["compute"] == pytest.approx(1000 * (4 * 1e-9 + 2 * 1e-8) + 1 * record / 1e8)
    assert p["shuffle"] == 0.0  # 2 records <= 2 per executor: no combine stage
    assert p["gather"] == pytest.approx(2 * record / 1e7)
    assert p["reduce"] == pytest.approx(2 * 1000 / 1e9 + 1000 * 1e-8)
    assert p["driver_bytes"] == 2 * record
    assert p["total"] == pytest.approx(0.014 + 6e-5 + 6.48e-5 + 8.16e-4 + 1.2e-5)
    # In the driver's JVM (local[k]) the weights need no shipping; the engine's own record count overrides.
    one = predict(CAL, Cluster(**{**SMALL.__dict__, "one_jvm": True, "sent_records": 3}), Strategy("driver", 1))
    assert one["weights"] == pytest.approx(4000 / 2e8) and one["driver_bytes"] == 3 * record
    assert one["launch"] == 0.003  # measured in one JVM, not the cluster's job and per-task parts


def test_scattered_partitions_go_through_the_combine_stage_worked_by_hand():
    """40 partitions whose ids are interleaved over 2 executors: 40 records, more than 2 per executor, so a
    combine stage of 2 JVM tasks sums 20 each (half of them remote) and the driver receives 2."""
    cl = Cluster(**{**SMALL.__dict__, "partitions": 40, "scattered": True})
    record = 4080
    p = predict(CAL, cl, Strategy("driver", 1))
    write, read, summed = 20 * record / 1e8, 20 * record / 1e8, 20 * 1000 / 1e9
    assert p["shuffle"] == pytest.approx(0.05 + 2 * 0.001 + write + read + summed)
    assert p["compute"] == pytest.approx(1000 * (4e-9 + 20 * 1e-8) + 20 * record / 1e8)
    assert p["gather"] == pytest.approx(2 * record / 1e7) and p["driver_bytes"] == 2 * record
    assert p["reduce"] == pytest.approx(2 * 1000 / 1e9 + 1e-5)
    # 4 scattered partitions are 2 per executor: the driver takes all 4 directly.
    four = predict(CAL, Cluster(**{**SMALL.__dict__, "scattered": True}), Strategy("driver", 1))
    assert four["shuffle"] == 0.0 and four["driver_bytes"] == 4 * record


def test_shuffle_prediction_worked_by_hand():
    sh = predict(CAL, SMALL, Strategy("shuffle", 2))
    total = 2 * (2 * 80 + 4 * 1000)  # 2 pre-summed records, each cut into 2 block records
    write = total / 2 / 1e8  # each of the 2 tasks writes its half
    read = (total / 2) / 1e8  # half local, half remote; network infinite: both at shuffle_bps
    assert sh["shuffle"] == pytest.approx(0.05 + 2 * 0.001 + write + read)
    assert sh["reduce"] == pytest.approx(2 * 1000 / 2 / 1e9 + 1e-5 / 2)
    assert sh["weights"] == pytest.approx(4000 / 5e6 + 4000 / 2e8)  # fetched from the executors, then read
    # 2 executors sharing 1 core fetch the weights one after the other; the compute shares it too.
    one_core = predict(CAL, Cluster(**{**SMALL.__dict__, "host_cores": 1}), Strategy("shuffle", 2))
    assert one_core["weights"] == pytest.approx(2 * 4000 / 5e6 + 2 * 4000 / 2e8)
    # the driver receives the 2 reduce tasks' results, not the weights
    assert sh["driver_bytes"] == 2 * scale_cost.REDUCE_RESULT_BYTES
    assert sh["gather"] == pytest.approx(2 * scale_cost.REDUCE_RESULT_BYTES / 1e7)


def test_what_each_strategy_grows_with():
    def driver_bytes(name, **kw):
        cl = Cluster(**{**SMALL.__dict__, **kw})
        return predict(CAL, cl, Strategy(name, 2 if name == "shuffle" else 1))["driver_bytes"]
    record = 4080
    # The driver's bytes never depend on the partitions, aligned or scattered: at most 2 records per executor.
    assert driver_bytes("driver", partitions=40) == driver_bytes("driver", partitions=4) == 2 * record
    assert driver_bytes("driver", partitions=400, scattered=True) == 2 * record
    assert driver_bytes("driver", partitions=40, executors=20) == 20 * record
    for n in (4, 40, 400):
        for e in (1, 2, 20):
            assert driver_bytes("driver", partitions=n, executors=e, scattered=True) <= 2 * e * record
    assert driver_bytes("shuffle", partitions=40, executors=20) == driver_bytes("shuffle")
    # Two slots on one core: compute takes twice as long; a network slower than the calibration caps the gather.
    one_core = predict(CAL, Cluster(**{**SMALL.__dict__, "host_cores": 1}), Strategy("driver", 1))
    assert one_core["compute"] == pytest.approx(2 * predict(CAL, SMALL, Strategy("driver", 1))["compute"])
    slow = predict(CAL, Cluster(**{**SMALL.__dict__, "network_bps": 1e6}), Strategy("driver", 1))
    assert slow["gather"] == pytest.approx(2 * record / 1e6)
    with pytest.raises(ValueError, match="strategy.name"):
        predict(CAL, SMALL, Strategy("driver-presum", 1))


def test_weak_scaling_efficiency_falls_with_the_driver_fan_in():
    base = Cluster(1, 4, 8, 1_000_000, 128, network_bps=1.25e9)
    effs = []
    for e in (16, 64, 256):
        cl = Cluster(e, 4, 8 * e, 1_000_000, 128 * e, network_bps=1.25e9)
        effs.append(efficiency(CAL, cl, Strategy("driver", 1), base, Strategy("driver", 1)))
    assert 0 < effs[2] < effs[1] < effs[0] <= 1
    same = efficiency(CAL, base, Strategy("driver", 1), base, Strategy("driver", 1))
    assert same == pytest.approx(1.0)


@pytest.mark.parametrize("parameters, partitions, expected", [
    (100_000, 4, Strategy("driver", 1)), ((1 << 20), 4, Strategy("driver", 1)),
    ((1 << 20) + 1, 4, Strategy("shuffle", 2)), (10_000_000, 4, Strategy("shuffle", 4)),
    (10_000_000, 100, Strategy("shuffle", 10)), (10_000_000, 1, Strategy("shuffle", 3)),
    (4 << 20, 1, Strategy("driver", 1))])
def test_reduce_rule(parameters, partitions, expected):
    assert reduce_strategy(parameters, partitions, 8, 4, 1 << 20) == expected
    assert reduce_strategy(100, 4, 8, 4, 1 << 20, driver_reduce=False) == Strategy("shuffle", 1)


def test_calibration_json_and_masters():
    d = CAL.to_dict()
    assert Calibration.from_dict(d) == CAL
    del d["shuffle_bps"]
    with pytest.raises(ValueError, match="shuffle_bps"):
        Calibration.from_dict(d)
    assert scale_model.parse_master("local[2]") == (1, 2)
    assert scale_model.parse_master("local-cluster[4,1,1024]") == (4, 1)
    with pytest.raises(ValueError, match="local-cluster"):
        scale_model.parse_master("yarn")


def test_prediction_table_driver_bytes_stay_within_the_fan_in_bound():
    for scattered in (False, True):
        rows = scale_model.prediction_table(CAL, [16, 256], [1_000_000, 100_000_000], cores=4,
                                            partitions_per_core=2, rows_per_core=32, value_bytes=4,
                                            network_bps=1.25e9, scattered=scattered)
        by = {(r["parameters"], r["executors"]): r for r in rows}
        for e in (16, 256):  # 8 records per executor reach the combine stage; the driver receives E of 4 MB
            assert by[(1_000_000, e)]["rule"] == "driver"
            assert by[(1_000_000, e)]["driver_bytes"] == e * (80 + 4_000_000)
            assert not by[(1_000_000, e)]["over_max_result_size"]
        assert by[(100_000_000, 16)]["rule"] == "shuffle" and by[(100_000_000, 16)]["blocks"] == 96


def test_the_rule_is_what_the_engine_runs(spark, monkeypatch):
    """With 64-parameter blocks of at most 256 bytes, models of 37, 86 and 282 parameters on 3 partitions: the
    engine reduces on the driver, in 2 JVM reduce tasks, and in 5 (the byte cap beats one block per partition), as
    :func:`scale_model.engine_rule` says."""
    from sparkdl import nn
    from sparkdl.engine import DataBlocks, DistributedTrainer, MaxIteration, loop
    from sparkdl.optim import SGD
    monkeypatch.setattr(loop, "BLOCK_PARAMETERS", 64)
    monkeypatch.setattr(loop, "MAX_BLOCK_BYTES", 256)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((60, 4)).astype(np.float32), rng.integers(0, 2, 60)
    data = DataBlocks.from_numpy(spark.sparkContext, x, y, 3)
    seen = []
    for hidden in (5, 12, 40):
        model = nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, 2)).initialize(0)
        trainer = DistributedTrainer(model, nn.CrossEntropyLoss(), SGD(lr=0.1), batch_size=12,
                                     end_trigger=MaxIteration(1), progress=False)
        step = trainer._step

        def recorded(*a, trainer=trainer, step=step):
            seen.append(("driver" if trainer._jvm.driver_reduce else "shuffle", len(trainer._jvm.bounds) - 1))
            step(*a)
        trainer._step = recorded
        trainer.fit(data)
        rule = scale_model.engine_rule(model.num_parameters(), 3, 1, 2)
        assert seen[-1] == (rule.name, rule.blocks), (model.num_parameters(), seen[-1], rule)
    data.unpersist()
    assert seen == [("driver", 1), ("shuffle", 2), ("shuffle", 5)]
    assert scale_cost.RECORD_HEADER_BYTES == 80


def test_transfer_fit_recovers_the_transfers_of_runs_the_model_priced():
    """Engine runs priced by the model with known transfers (one JVM, two and four executors, every weights path
    and the shuffle reduce): the joint fit, given every other part, returns those transfers; a part no run prices
    stays free."""
    from scale_calibrate import TRANSFER_PARTS, transfer_fit
    truth = {"stage_s": 0.02, "weights_in_bps": 3e8, "inline_bps": 6e7, "broadcast_bps": 4e8, "fetch_bps": 2e8,
             "shuffle_bps": 9e8}
    cal = Calibration(**{**CAL.to_dict(), **truth})
    runs = []
    for executors, one_jvm in ((1, True), (2, False), (4, False)):
        for p in (120_000, 300_000, 600_000, 2_000_000, 4_000_000):
            cl = Cluster(executors, 2 if one_jvm else 1, 4, p, 64, host_cores=2, one_jvm=one_jvm)
            rule = reduce_strategy(p, 4, executors, cl.cores, 1 << 20)
            runs.append((cl, rule, predict(cal, cl, rule)["total"]))
    blank = Calibration(**{**CAL.to_dict(), "stage_s": 0.0, **{f: np.inf for f in TRANSFER_PARTS}})
    fitted = transfer_fit(blank, runs)
    assert fitted == pytest.approx(truth, rel=1e-6)
    only_local = transfer_fit(blank, [r for r in runs if r[0].one_jvm])  # no weights shipped, no inline/broadcast
    assert only_local["inline_bps"] == np.inf and only_local["broadcast_bps"] == np.inf
    assert only_local["weights_in_bps"] == pytest.approx(3e8, rel=1e-6)
