"""Numba compilation options, kernel cache, threading layer and thread control — the one place for all of them.

Every kernel in :mod:`sparkdl.kernels` is compiled with :data:`NJIT_OPTIONS` through :func:`njit`
(or :func:`njit_parallel` for kernels with a ``prange`` loop).

Cache. Compiled machine code is cached on disk in the first writable place of: ``NUMBA_CACHE_DIR`` (when
set before numba is imported; the Spark engine sets it on remote executors), ``__pycache__`` next to the
source files, the user's cache directory (``~/.cache/numba``), then — where numba alone would fail with
"no locator available", e.g. an executor whose package directory and HOME are read-only —
``sparkdl-numba-<uid>`` in the first Spark local directory (``SPARK_LOCAL_DIRS``) or the temporary
directory. With none writable, kernels are compiled without a cache and one warning says so. A cache entry
that cannot be read back (truncated or corrupt file) counts as a miss: the kernel is recompiled and the
entry rewritten.

Threading layer. numba's ``workqueue`` layer aborts the process when two threads run parallel kernels at
once, and its GNU ``omp`` layer terminates a process forked after parallel kernels ran (as Spark's Python
daemon forks its workers). Unless ``NUMBA_THREADING_LAYER`` is set, this module therefore selects ``tbb``
(thread- and fork-safe, numba's own first choice; used when TBB >= 2021.6 is installed, e.g. ``pip install
tbb``) and otherwise ``workqueue`` (fork-safe) with entry into parallel kernels serialized by a process-wide
lock. The choice is made on ``numba.config``, not in the environment, so child processes choose for themselves.
:func:`threading_layer` and :func:`serializes_parallel_kernels` report the choice. No result depends on it.

Threads: :func:`set_num_threads` sets the numba thread pool *and* the BLAS thread pool (OpenBLAS, MKL,
...) together, process-wide, as an explicit opt-in (like ``torch.set_num_threads``). sparkdl's own Spark tasks
use :func:`kernel_threads` instead, which sets both for the duration of the task and restores them after it.
There are two BLAS libraries in a process: numpy's, and SciPy's, which numba calls for ``np.dot`` inside
kernels (the recurrent layers). ``threadpoolctl`` only limits libraries already loaded, so this module loads
SciPy's BLAS up front; unlimited, its idle threads spun and cost 12x the CPU time of the product itself.

Importing sparkdl changes no process-wide setting another library reads: no environment variable (earlier
releases set ``OMP_WAIT_POLICY=PASSIVE``, which slowed PyTorch's OpenMP pool in the same process by ~40%), no
thread pool size, no allocator option. With numba's ``omp`` layer chosen by hand, set ``OMP_WAIT_POLICY=PASSIVE``
yourself: OpenMP's idle threads spin-wait by default and fight numba's and BLAS's threads for the cores.
"""
from __future__ import annotations

import ctypes
import logging
import os
import sys
import tempfile
import threading
from contextlib import contextmanager

#: numba threading layers safe for concurrent callers without a lock (numba's threading-layer docs).
_THREAD_SAFE_LAYERS = ("tbb", "omp", "safe", "threadsafe")


def _tbb_usable() -> bool:
    """Whether TBB >= 2021.6 (interface 12060, numba's minimum) can be loaded. A pip-installed TBB lives in
    ``<sys.prefix>/lib``, outside the loader's search path: it is loaded from there first."""
    try:
        return ctypes.CDLL("libtbb.so.12").TBB_runtime_interface_version() >= 12060
    except (OSError, AttributeError):
        pass
    try:
        lib = ctypes.CDLL(os.path.join(sys.prefix, "lib", "libtbb.so.12"), mode=ctypes.RTLD_GLOBAL)
        return lib.TBB_runtime_interface_version() >= 12060
    except (OSError, AttributeError):
        return False


def _layer_choice() -> str | None:
    """The threading layer to put in ``numba.config``: None keeps the user's ``NUMBA_THREADING_LAYER``."""
    chosen = os.environ.get("NUMBA_THREADING_LAYER")
    if chosen is None:
        return "tbb" if sys.platform == "linux" and _tbb_usable() else "workqueue"
    if chosen == "tbb" and not _tbb_usable():  # chosen but not loadable here: a working layer instead
        return "workqueue"
    return None


_LAYER = _layer_choice()

import numba  # noqa: E402
import scipy.linalg.cython_blas  # noqa: E402,F401  numba's np.dot BLAS, loaded so that its threads are limited
from numba.core import caching  # noqa: E402
from numba.core.registry import CPUDispatcher  # noqa: E402
from threadpoolctl import ThreadpoolController, threadpool_limits  # noqa: E402

__all__ = ["NJIT_OPTIONS", "njit", "njit_parallel", "set_num_threads", "get_num_threads", "kernel_threads",
           "threading_layer", "serializes_parallel_kernels", "thread_pool_size", "set_thread_local_threads",
           "load_compiler"]

log = logging.getLogger("sparkdl")

#: Options used for every compiled kernel. ``fastmath`` stays off so results match PyTorch to float tolerance.
NJIT_OPTIONS = {"cache": True, "nogil": True, "fastmath": False, "error_model": "numpy"}

if _LAYER is not None:
    numba.config.THREADING_LAYER = _LAYER


def threading_layer() -> str:
    """The numba threading layer in use (``numba.threading_layer()`` once a parallel kernel has run), else
    the one that will be used (``NUMBA_THREADING_LAYER`` or this module's choice)."""
    try:
        return numba.threading_layer()
    except ValueError:  # no parallel kernel has run yet
        return str(numba.config.THREADING_LAYER)


def serializes_parallel_kernels() -> bool:
    """Whether calls into parallel kernels take a process-wide lock (a layer that is not thread-safe)."""
    return str(numba.config.THREADING_LAYER).lower() not in _THREAD_SAFE_LAYERS


# ---------------------------------------------------------------------------------------------- cache
def _scratch_cache_root() -> str | None:
    """``sparkdl-numba-<uid>`` in the first writable Spark local directory or temporary directory."""
    roots = [d for d in os.environ.get("SPARK_LOCAL_DIRS", "").split(",") if d]
    try:
        roots.append(tempfile.gettempdir())
    except FileNotFoundError:  # no usable temporary directory at all
        pass
    for root in roots:
        path = os.path.join(root, f"sparkdl-numba-{os.getuid()}")
        try:
            os.makedirs(path, exist_ok=True)
            tempfile.TemporaryFile(dir=path).close()
            return path
        except OSError:
            continue
    return None


class _ScratchCacheLocator(caching.UserProvidedCacheLocator):
    """The last resort of the cache search: :func:`_scratch_cache_root`."""

    def __init__(self, py_func, py_file, root):
        super().__init__(py_func, py_file)
        self._cache_path = os.path.join(root, self.get_suitable_cache_subpath(py_file))

    @classmethod
    def from_function(cls, py_func, py_file):
        root = _scratch_cache_root()
        if root is None or not os.path.exists(py_file):
            return None
        self = cls(py_func, py_file, root)
        try:
            self.ensure_cache_path()
        except OSError:
            return None
        return self


class _CacheImpl(caching.CompileResultCacheImpl):
    _locator_classes = [*caching.CompileResultCacheImpl._locator_classes, _ScratchCacheLocator]


class _KernelCache(caching.FunctionCache):
    """numba's function cache, for which an unreadable entry is a miss and is rewritten on save."""

    _impl_class = _CacheImpl

    def load_overload(self, sig, target_context):
        try:
            return super().load_overload(sig, target_context)
        except Exception as e:  # truncated/corrupt index or data file (UnpicklingError, EOFError, ...)
            log.debug("sparkdl: unreadable numba cache entry in %s (%s: %s); recompiling", self.cache_path,
                      type(e).__name__, e)
            self._discard_index()
            return None

    def save_overload(self, sig, data):
        try:
            try:
                super().save_overload(sig, data)
            except OSError:
                raise
            except Exception:  # the index is corrupt (it is read before writing): start it afresh
                self._discard_index()
                super().save_overload(sig, data)
        except OSError as e:  # e.g. a full disk: the kernel is compiled, only not cached
            log.debug("sparkdl: could not write the numba cache in %s: %s", self.cache_path, e)

    def _discard_index(self):
        try:
            os.unlink(self._cache_file._index_path)
        except OSError:
            pass


_uncached_warning_given = False


class _KernelDispatcher(CPUDispatcher):
    """numba's CPU dispatcher with :class:`_KernelCache` (caching off, with one warning, where no directory
    is writable)."""

    def enable_caching(self):
        global _uncached_warning_given
        try:
            self._cache = _KernelCache(self.py_func)
        except RuntimeError as e:  # "no locator available": nothing writable
            if not _uncached_warning_given:
                _uncached_warning_given = True
                log.warning("sparkdl: numba kernels are not cached (no writable cache directory: %s); they are "
                            "compiled in every new process. Set NUMBA_CACHE_DIR to a writable directory", e)


_PARALLEL_LOCK = threading.RLock()


def _reset_lock_in_child():  # a fork may happen while another thread holds the lock
    global _PARALLEL_LOCK
    _PARALLEL_LOCK = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_lock_in_child)


class _SerializedKernelDispatcher(_KernelDispatcher):
    """A parallel kernel whose calls from Python take :data:`_PARALLEL_LOCK` (layers that are not thread-safe;
    calls from other compiled kernels are direct, inside the caller's lock)."""

    def __call__(self, *args, **kwargs):
        with _PARALLEL_LOCK:
            return super().__call__(*args, **kwargs)


def njit(fn=None, **extra):
    """``numba.njit`` with :data:`NJIT_OPTIONS` (serial kernel), compiled through sparkdl's dispatcher."""
    opts = {**NJIT_OPTIONS, **extra}
    cache = opts.pop("cache")
    parallel = opts.get("parallel", False)
    cls = _SerializedKernelDispatcher if parallel and serializes_parallel_kernels() else _KernelDispatcher

    def decorate(f):
        if numba.config.DISABLE_JIT:
            return f
        disp = cls(py_func=f, locals={}, targetoptions={"nopython": True, "boundscheck": None, **opts})
        if cache:
            disp.enable_caching()
        return disp
    return decorate if fn is None else decorate(fn)


def njit_parallel(fn=None, **extra):
    """``numba.njit(parallel=True)`` with :data:`NJIT_OPTIONS`, for kernels whose outer loop is ``prange``."""
    return njit(fn, parallel=True, **extra)


_blas_limits = None


def set_num_threads(n: int, blas_threads: int | None = 1) -> int:
    """Set the number of threads used by numba kernels and by BLAS, together.

    Parameters
    ----------
    n : int
        Threads to use, ``1 <= n <= numba.config.NUMBA_NUM_THREADS`` (the pool size numba started with,
        by default the machine's core count).
    blas_threads : int or None, default 1
        Threads of the BLAS pool (GEMMs in Linear/Conv2d). Default 1: OpenBLAS's own pool spin-waits and
        collapses (measured 20x slower per GEMM) when the machine's other cores are busy, as they are under
        Spark; numba's parallel kernels split the work across ``n`` threads instead, so ``n`` threads are
        never slower than one. ``None``: ``n`` (BLAS threads too).

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
    _check_pool_threads("set_num_threads", n)
    previous = numba.get_num_threads()
    numba.set_num_threads(n)
    _blas_limits = threadpool_limits(limits=n if blas_threads is None else max(1, int(blas_threads)), user_api="blas")
    return previous


def _check_pool_threads(fn: str, n: int) -> None:
    max_n = numba.config.NUMBA_NUM_THREADS
    if not 1 <= n <= max_n:
        raise ValueError(f"{fn}: n must be in [1, {max_n}] (numba's pool size), got {n}")


_controller = None


def _blas_controller() -> ThreadpoolController:
    """One ``ThreadpoolController`` per process (its scan of loaded libraries costs ~4 ms; limiting and
    restoring through it ~15 µs). Made after this module loaded both BLAS libraries."""
    global _controller
    if _controller is None:
        _controller = ThreadpoolController()
    return _controller


def _forget_controller_in_child():
    global _controller
    _controller = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_controller_in_child)


@contextmanager
def kernel_threads(n: int, blas_threads: int = 1):
    """Within the block, numba kernels of the calling thread use ``n`` threads and BLAS ``blas_threads``;
    both are restored on exit (as they were on entry), so code that runs after it in the same process -- another
    library, another user's Spark UDF in a reused Python worker -- sees its own settings.

    Parameters
    ----------
    n : int
        numba threads, ``1 <= n <= numba.config.NUMBA_NUM_THREADS``.
    blas_threads : int, default 1
        BLAS threads (see :func:`set_num_threads` for why one).

    Raises
    ------
    ValueError
        If ``n`` is outside ``[1, numba.config.NUMBA_NUM_THREADS]`` or ``blas_threads < 1``.
    """
    _check_pool_threads("kernel_threads", int(n))
    if int(blas_threads) < 1:
        raise ValueError(f"kernel_threads: blas_threads must be >= 1, got {blas_threads}")
    previous = numba.get_num_threads()
    limiter = _blas_controller().limit(limits=int(blas_threads), user_api="blas")
    numba.set_num_threads(int(n))
    try:
        yield
    finally:
        numba.set_num_threads(previous)
        limiter.restore_original_limits()


def get_num_threads() -> int:
    """Number of threads numba kernels use in the calling thread."""
    return numba.get_num_threads()


def cpu_count() -> int:
    """Cores available to this process (respects CPU affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def thread_pool_size() -> int:
    """The size of numba's thread pool (``numba.config.NUMBA_NUM_THREADS``): the most threads
    :func:`set_num_threads` accepts."""
    return numba.config.NUMBA_NUM_THREADS


def set_thread_local_threads(n: int) -> int:
    """Set the number of threads numba kernels use in the calling Python thread only; BLAS is left as it is.

    For a thread that runs part of a step on its own (:mod:`sparkdl.step.threads` runs each row part with
    ``n = 1``); :func:`set_num_threads` is the process-level setting. Returns the calling thread's previous
    count. numba raises ``ValueError`` if ``n`` is outside ``[1, thread_pool_size()]``.
    """
    previous = numba.get_num_threads()
    numba.set_num_threads(n)
    return previous


def load_compiler() -> None:
    """Set up numba's CPU compiler now (its target and typing contexts, which numba otherwise loads lazily on a
    process's first compilation or cache load), so that processes forked afterwards inherit it
    (:func:`sparkdl.daemon.preload`). Starts no thread."""
    cpu_target = numba.core.registry.cpu_target  # the module is imported above (CPUDispatcher)
    cpu_target.target_context.refresh()
    cpu_target.typing_context.refresh()
