"""The Spark engine: cached columnar data, block AllReduce over shuffle, sharded optimizer updates,
broadcast weights, triggers, validation, checkpoints and distributed inference; on Spark Connect the same through
DataFrame queries (docs/connect.md)."""
from sparkdl.engine.connect_data import ConnectBlocks
from sparkdl.engine.data import DataBlocks
from sparkdl.engine.inference import evaluate, predict
from sparkdl.engine.session import DAEMON_CONF, LOCAL_TRAINING_CONF, RECOMMENDED_CONF, get_or_create_session
from sparkdl.engine.summary import TrainSummary
from sparkdl.engine.trainer import DistributedTrainer, TrainerOptions, TrainingDivergedError
from sparkdl.engine.triggers import (EveryEpoch, MaxEpoch, MaxIteration, MaxScore, MinLoss, SeveralIteration,
                                     TrainingState, Trigger)

__all__ = ["DataBlocks", "ConnectBlocks", "DistributedTrainer", "TrainerOptions", "TrainingDivergedError",
           "TrainSummary", "predict",
           "evaluate", "get_or_create_session", "RECOMMENDED_CONF", "LOCAL_TRAINING_CONF", "DAEMON_CONF", "Trigger",
           "TrainingState", "MaxEpoch", "MaxIteration", "MinLoss", "MaxScore", "EveryEpoch", "SeveralIteration"]
