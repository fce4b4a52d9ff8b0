"""sparkdl: deep learning on Apache Spark.

Subpackages
-----------
kernels   numba kernels (private; forward and backward side by side)
nn        layers, containers, losses, initializers over one flat parameter vector
optim     optimizers, clipping and learning-rate schedules over flat shards
step      the training step (a batch's gradient, its split across threads, the update): trainer and engine share it
metrics   mergeable validation metrics
trainer   the single-process trainer (the reference the engine is tested against)
engine    the Spark engine: cached data blocks, block AllReduce over shuffle, driver loop, inference
ml        Spark ML Estimator/Model stages
io        model files and checkpoints (data, never pickle), safetensors weights
onnx      ONNX import and export (optional extra sparkdl[onnx])
datasets  MNIST, Fashion-MNIST, Census-Income loaders
jvm       the one module that talks to Spark's JVM (py4j)
"""
__version__ = "0.1.0.dev0"

from sparkdl.config import get_num_threads, set_num_threads  # noqa: E402

__all__ = ["__version__", "set_num_threads", "get_num_threads"]
