"""Numba compilation options and thread control — the one place that configures both.

Every kernel in :mod:`sparkdl.kernels` is compiled with :data:`NJIT_OPTIONS` through :func:`njit`
(or :func:`njit_parallel` for kernels with a ``prange`` loop). Compiled machine code is cached on disk
(numba's ``cache=True``); numba picks the cache directory from ``NUMBA_CACHE_DIR`` when it is set before
numba is imported (the Spark engine sets it to a writable directory on executors), otherwise next to the
source files or in the user's cache directory.

Threads: :func:`set_num_threads` sets the numba thread pool *and* the BLAS thread pool (OpenBLAS, MKL,
...) together, so a Spark task that owns ``spark.task.cpus`` cores never oversubscribes the machine. There
are two BLAS libraries in a process: numpy's, and SciPy's, which numba calls for ``np.dot`` inside kernels
(the recurrent layers). ``threadpoolctl`` only limits libraries already loaded, so this module loads SciPy's
BLAS up front; unlimited, its idle threads spun and cost 12x the CPU time of the product itself.

Idle threads must sleep: numba's OpenMP threading layer and OpenBLAS both spin-wait by default, and when
a numba kernel and a BLAS call alternate (every layer does) the two pools fight for the cores — measured
here at 200x slower on a loaded 2-core machine. This module therefore sets ``OMP_WAIT_POLICY=PASSIVE``
(unless the environment already sets it) before numba's OpenMP runtime is loaded; with it the same loop
runs at full speed.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see the module docstring; read when libgomp loads

import numba  # noqa: E402
import scipy.linalg.cython_blas  # noqa: E402,F401  numba's np.dot BLAS, loaded so that its threads are limited
from threadpoolctl import threadpool_limits  # noqa: E402

__all__ = ["NJIT_OPTIONS", "njit", "njit_parallel", "set_num_threads", "get_num_threads"]

#: Options used for every compiled kernel. ``fastmath`` stays off so results match PyTorch to float tolerance.
NJIT_OPTIONS = {"cache": True, "nogil": True, "fastmath": False, "error_model": "numpy"}


def njit(fn=None, **extra):
    """``numba.njit`` with :data:`NJIT_OPTIONS` (serial kernel)."""
    opts = {**NJIT_OPTIONS, **extra}
    if fn is None:
        return lambda f: numba.njit(**opts)(f)
    return numba.njit(**opts)(fn)


def njit_parallel(fn=None, **extra):
    """``numba.njit(parallel=True)`` with :data:`NJIT_OPTIONS`, for kernels whose outer loop is ``prange``."""
    return njit(fn, parallel=True, **extra)


_blas_limits = None


def set_num_threads(n: int) -> int:
    """Set the number of threads used by numba kernels and by BLAS, together.

    Parameters
    ----------
    n : int
        Threads to use, ``1 <= n <= numba.config.NUMBA_NUM_THREADS`` (the pool size numba started with,
        by default the machine's core count).

    Returns
    -------
    int
        The previous numba thread count.

    Raises
    ------
    TypeError
        If ``n`` is not an integer.
    ValueError
        If ``n`` is outside ``[1, numba.config.NUMBA_NUM_THREADS]``.

    Notes
    -----
    numba's setting is per calling thread (each Python thread keeps its own count); the BLAS limit is
    process-wide (through ``threadpoolctl``). The Spark engine calls this once per task with
    ``spark.task.cpus``.
    """
    global _blas_limits
    if isinstance(n, bool) or not isinstance(n, (int,)) and not hasattr(n, "__index__"):
        raise TypeError(f"set_num_threads: n must be an int, got {type(n).__name__}")
    n = int(n)
    max_n = numba.config.NUMBA_NUM_THREADS
    if not 1 <= n <= max_n:
        raise ValueError(f"set_num_threads: n must be in [1, {max_n}] (numba's pool size), got {n}")
    previous = numba.get_num_threads()
    numba.set_num_threads(n)
    _blas_limits = threadpool_limits(limits=n, user_api="blas")
    return previous


def get_num_threads() -> int:
    """Number of threads numba kernels use in the calling thread."""
    return numba.get_num_threads()


def cpu_count() -> int:
    """Cores available to this process (respects CPU affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1
