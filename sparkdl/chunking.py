"""The one limit on the size of a single byte array that sparkdl builds for weights, gradients and states.

Java arrays hold at most 2^31 - 1 elements, and Spark's serializers, py4j and protobuf have similar limits, so a
model's weights (400 MB at 100M float32 parameters, 2 GiB at 537M) never travel or rest as one byte array: the JVM
bridge keeps and sends the weights as chunks of at most :data:`MAX_CHUNK_BYTES` and reads uploaded states into
arrays of at most one block, and each gradient record (one AllReduce block) is at most that size. Tests set it low
(a few hundred bytes) to prove that chunked and unchunked runs agree bitwise.
"""
from __future__ import annotations

import math

__all__ = ["MAX_CHUNK_BYTES", "min_blocks"]

#: Largest byte array (a multiple of 4: float32 values never straddle two chunks). 1 GiB, half of Java's limit.
MAX_CHUNK_BYTES = 1 << 30


def min_blocks(num_parameters: int, itemsize: int = 4) -> int:
    """AllReduce blocks needed so that no block of ``num_parameters`` values exceeds :data:`MAX_CHUNK_BYTES`."""
    return max(1, math.ceil(num_parameters * itemsize / MAX_CHUNK_BYTES))
