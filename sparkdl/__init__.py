"""sparkdl: deep learning on Apache Spark.

Subpackages
-----------
kernels   numba kernels (private; forward and backward side by side)
nn        layers, containers, losses, initializers over one flat parameter vector
optim     optimizers and learning-rate schedules over flat shards
"""
__version__ = "0.1.0.dev0"

from sparkdl.config import get_num_threads, set_num_threads  # noqa: E402

__all__ = ["__version__", "set_num_threads", "get_num_threads"]
