"""The AllReduce on the JVM: Python computes gradients, the bridge sums them and updates the shards.

One iteration is one call of :meth:`JvmAllReduce.step`, i.e. one py4j round trip and one Spark job (see
``jvm_bridge/src/main/java/org/sparkdl/bridge/TrainingLoop.java``):

* stage 1, Python (:func:`gradient_records`): each task reads a header record and the weights (raw float32,
  no pickling), computes the gradient of its data partition(s) with the same function as the Python path
  (:func:`sparkdl.engine.tasks.partition_gradient`) and writes raw records ``header | float32 block`` per
  AllReduce block (layout in ``Frames.java``). Over executor-local data copies, one task computes a whole
  group of co-located partitions (one task per core, whatever the number of partitions) and sends, per block,
  one record per aligned node of the summation tree its group makes (:mod:`sparkdl.step.tree_sum`): the
  node's pre-summed value.
* stage 2, JVM: block k's records are summed in the tree's order, divided by the global normalizer
  and the optimizer update is applied to shard k with its cached state — the numba kernels' float32
  arithmetic, operation for operation, so results are bitwise those of the Python path
  (``tests/test_jvm_reduce.py``). With one block (models under ~1M parameters) there is no stage 2: the
  driver JVM collects the records and does the same sum and update itself (:data:`DRIVER_REDUCE`); when there
  are more than two records per executor, a JVM combine stage sums them by tree node first (one task per
  executor at most), so the driver receives at most 2 x executors x model bytes of gradients.

With several blocks each reduce task keeps its block's new weights in its executor's block manager, where the
next iteration's tasks fetch them (``ResidentWeights.java``): the driver receives no weights; with one block the
driver JVM keeps them. Python reads the weights (and the shard states) only for validation, snapshots,
checkpoints and at the end, and writes them into the JVM through a file the JVM creates. Supported: :class:`~sparkdl.optim.SGD` (momentum, dampening,
Nesterov, weight decay), :class:`~sparkdl.optim.Adam` and :class:`~sparkdl.optim.AdamW` (AMSGrad), with
``clip_value`` or ``clip_norm`` (the latter with one AllReduce block), parameter groups, frozen tensors and
``compress='fp16'`` (float16 records, widened exactly and summed in float32 as the Python path does); other
optimizers use the Python reduce (:mod:`sparkdl.engine.iteration`).
"""
from __future__ import annotations

import logging
import struct
from functools import partial

import numpy as np

from sparkdl.jvm.training_loop import TrainingLoop
from sparkdl.engine import local_cache
from sparkdl.engine.task_link import link_path, run_linked
from sparkdl.engine.tasks import MISS, FitContext, partition_gradient
from sparkdl.engine.worker import freeze_worker_heap, task_scope
from sparkdl.kernels.half import from_half, to_half
from sparkdl.optim import SGD, Adam, AdamW
from sparkdl.step.tree_sum import TreeSum, maximal_nodes, node_end

__all__ = ["JvmAllReduce", "DRIVER_REDUCE", "supports", "encode_program", "pack_states", "unpack_states", "gradient_records"]

log = logging.getLogger("sparkdl.engine")

_RECORD = struct.Struct("<iiiiddq")  # kind, block, node lo (partition), node level, loss, normalizer, count
_GRAD, _MISS, _BUFFERS, _GRAD16 = 1, 2, 3, 4
_HEADER = struct.Struct("<7i")  # magic, epoch, iteration, global iteration, full, weight chunks, partitions
_MAGIC = 0x53444C31
_STEP = struct.Struct("<iiddq")  # status, ran_full, loss_sum, normalizer_sum, samples
_OK, _NONFINITE_LOSS = 0, 1


def supports(optimizer, compress, num_blocks: int | None = None) -> str | None:
    """``None`` if the JVM reduce can run this configuration, else the reason it cannot. ``clip_norm`` needs
    the whole gradient in one place, i.e. one AllReduce block (``num_blocks`` None: not known yet)."""
    if type(optimizer) not in (SGD, Adam, AdamW):
        return f"optimizer {type(optimizer).__name__} has no JVM update (SGD, Adam and AdamW have)"
    if optimizer.clip_norm is not None and num_blocks is not None and num_blocks != 1:
        return f"clip_norm needs the global gradient norm, which the JVM reduce computes only with one " \
               f"AllReduce block (got {num_blocks})"
    if compress not in (None, "fp16"):
        return f"compress={compress!r} (None and 'fp16' are supported)"
    return None


# ---------------------------------------------------------------------------------------------- encoding
def encode_program(optimizer, bounds: np.ndarray, lr: float, step: int) -> bytes:
    """The update of every shard for optimizer step ``step`` (1-based) at learning rate ``lr``, with every
    scalar computed and rounded to float32 exactly as ``optimizer._apply`` passes it to its kernel
    (layout in ``UpdateProgram.java``)."""
    f32 = np.float32
    gclip = f32(np.inf if optimizer.clip_value is None else optimizer.clip_value)
    if isinstance(optimizer, Adam):
        beta1, beta2 = optimizer.betas
        bc1 = 1 - beta1 ** step
        head = (2, 4 * optimizer.amsgrad + 8 * optimizer._decoupled,
                f32(1.0), gclip, f32(0), f32(0), f32(1 - beta1), f32(1) - f32(1 - beta1), f32(beta2),
                f32(1 - beta2), f32((1 - beta2 ** step) ** 0.5), f32(optimizer.eps))
    else:
        bc1 = None
        head = (1, optimizer.nesterov + 2 * (step == 1), f32(1.0), gclip, f32(optimizer.momentum),
                f32(1.0 - optimizer.dampening), f32(0), f32(0), f32(0), f32(0), f32(0), f32(0))
    clip_norm = 0.0 if optimizer.clip_norm is None else float(optimizer.clip_norm)
    parts = [struct.pack("<ii10fdi", *head, clip_norm, len(bounds) - 1)]
    seg_dtype = np.dtype([("lo", "<i4"), ("hi", "<i4"), ("a", "<f4"), ("wd", "<f4"), ("decay", "<f4")])
    for k in range(len(bounds) - 1):
        seg = optimizer.segments(int(bounds[k]), int(bounds[k + 1]), lr)
        rec = np.zeros(len(seg.lo), seg_dtype)
        rec["lo"], rec["hi"] = seg.lo, seg.hi
        if bc1 is None:
            rec["a"], rec["wd"] = (-seg.lr).astype(f32), seg.weight_decay.astype(f32)
        else:
            rec["a"] = (-(seg.lr / bc1)).astype(f32)
            if optimizer._decoupled:
                rec["decay"] = (1 - seg.lr * seg.weight_decay).astype(f32)
            else:
                rec["wd"], rec["decay"] = seg.weight_decay.astype(f32), 1
        parts.append(struct.pack("<i", len(rec)) + rec.tobytes())
    return b"".join(parts)


def pack_states(optimizer, states: list, bounds: np.ndarray) -> bytes:
    """Shard states (dicts of :meth:`Optimizer.init_state`) as ``StateCodec`` bytes for the bridge."""
    parts = [struct.pack("<i", len(states))]
    for k, state in enumerate(states):
        length = int(bounds[k + 1] - bounds[k])
        arrays = [np.ascontiguousarray(state[name], "<f4") for name in optimizer.state_names]
        if any(a.shape != (length,) for a in arrays):
            raise ValueError(f"shard {k}: optimizer state arrays must have {length} elements")
        parts.append(struct.pack("<iqii", k, int(state["step"]), len(arrays), length))
        parts.extend(a.tobytes() for a in arrays)
    return b"".join(parts)


def unpack_states(optimizer, packed: bytes) -> list:
    """Inverse of :func:`pack_states`."""
    (k,), pos, out = struct.unpack_from("<i", packed), 4, []
    for _ in range(k):
        block, step, n_arrays, length = struct.unpack_from("<iqii", packed, pos)
        pos += 20
        state = {"step": int(step)}
        for name in optimizer.state_names[:n_arrays]:
            state[name] = np.frombuffer(packed, "<f4", length, pos).astype(np.float32)
            pos += 4 * length
        out.append(state)
    return out


# ---------------------------------------------------------------------------------------------- executors
class _Iteration:
    """What :func:`sparkdl.engine.tasks.partition_gradient` reads of an iteration."""

    __slots__ = ("epoch", "iteration", "global_iteration")

    def __init__(self, epoch, iteration, global_iteration):
        self.epoch, self.iteration, self.global_iteration = epoch, iteration, global_iteration


def _deserialize(deserializer, frames) -> list:
    from pyspark.serializers import BatchedSerializer
    items = []
    for frame in frames:
        if isinstance(deserializer, BatchedSerializer):
            items.extend(deserializer.serializer.loads(frame))
        else:
            items.append(deserializer.loads(frame))
    return items


def _add_gradients(a, b):
    """Tree addition of two pre-summed gradient values ``[float32 sum or None, float16 leaf or None, loss,
    normalizer]`` (a compressed leaf is widened, exactly, only when it is added: a leaf sent alone goes as it is)."""
    x = from_half(a[1]) if a[0] is None else a[0]
    y = from_half(b[1]) if b[0] is None else b[0]
    return [np.add(x, y, out=x), None, a[2] + b[2], a[3] + b[3]]


def _add_buffers(a, b):
    """Tree addition of ``(buffer sum weighted by rows or None, rows)``."""
    return (None if a[0] is None or b[0] is None else np.add(a[0], b[0], out=a[0]), a[1] + b[1])


def _node_records(bounds, grads: list, buffers: list):
    """The raw records of pre-summed tree nodes (``Frames.java``): one per AllReduce block of each gradient node
    (float16 when it is one compressed leaf, else float32), one ``BUFFERS`` record per buffer node."""
    for lo, level, (grad, half, loss_sum, norm) in grads:
        kind, values = (_GRAD, grad) if half is None else (_GRAD16, half)
        for k in range(len(bounds) - 1):
            yield _record(values[bounds[k]:bounds[k + 1]], kind, k, lo, level, loss_sum if k == 0 else 0.0, norm, 0)
    for lo, level, (buffer_sum, count) in buffers:
        yield _record(buffer_sum, _BUFFERS, 0, lo, level, 0.0, 0.0, count)


def _record(payload, *header) -> bytearray:
    """One raw record: the header ``_RECORD`` then ``payload``'s bytes (a contiguous array, or None), written
    once into the record (``header + payload.tobytes()`` copied a 40 MB block twice)."""
    size = 0 if payload is None else payload.nbytes
    out = bytearray(_RECORD.size + size)
    _RECORD.pack_into(out, 0, *header)
    if size:
        out[_RECORD.size:] = memoryview(payload).cast("B")
    return out


def _load_weights(chunks: list, parameters: np.ndarray) -> np.ndarray:
    """Copy the float32 weights in ``chunks`` (``sparkdl.chunking``; the driver cuts them at the AllReduce blocks)
    into ``parameters`` (the model's flat parameters) piece by piece, so a large model is never concatenated;
    returns the buffers that follow the parameters (a view of one chunk, or a copy when they span several)."""
    n, pos, tail = parameters.size, 0, []
    for c in chunks:
        values = np.frombuffer(c, np.float32)
        take = min(max(n - pos, 0), values.size)
        parameters[pos:pos + take] = values[:take]
        if take < values.size:
            tail.append(values[take:])
        pos += values.size
    if pos < n:
        raise RuntimeError(f"sparkdl: the iteration's weights hold {pos} values, the model has {n} parameters")
    return tail[0] if len(tail) == 1 else np.concatenate(tail) if tail else np.empty(0, np.float32)


def gradient_records(fit_broadcast, data_deserializer, split: int, frames):
    """Stage 1 of a JVM-reduce iteration (runs in a Python worker).

    ``frames``: a header record, the raw float32 weights then buffers (in chunks), and — in "full" mode — the
    partition's cached data records. Yields raw records (``Frames.java``) for every data partition the
    header names; nothing for partitions without rows in this batch.

    In a multi-iteration job (the header names a ``TaskLink`` socket) the task instead sends each iteration's
    records through that socket and receives the next iteration's counters and weights, until told to stop
    (:meth:`JvmAllReduce.run`); it yields nothing."""
    frames = iter(frames)
    header = next(frames)
    magic, epoch, iteration, global_iteration, full, chunks, n = _HEADER.unpack_from(header)
    if magic != _MAGIC:
        raise RuntimeError(f"sparkdl: task {split} received a malformed iteration header")
    partitions = np.frombuffer(header, "<i4", n, _HEADER.size)
    link = link_path(header, _HEADER.size + 4 * n)
    weights = [next(frames) for _ in range(chunks)]
    items = _deserialize(data_deserializer, frames) if full else None
    for _ in frames:  # drain the input (nothing is left in local mode): keeps the Python worker reusable
        pass
    fit: FitContext = fit_broadcast.value
    ctx = _Iteration(epoch, iteration, global_iteration)
    if items is not None and fit.data_key is not None and fit.offsets[split + 1] > fit.offsets[split]:
        local_cache.store(fit.data_key, split, *items[0])  # even without rows in this batch: no miss later
    own = sorted(int(q) for q in partitions)
    with task_scope(fit.threads):  # once per task, not per partition
        if link is None:
            yield from _iteration_records(fit, ctx, own, items, weights)
        else:
            run_linked(link, ctx, weights, lambda c, w: list(_iteration_records(fit, c, own, None, w)), _Iteration)
    freeze_worker_heap()


def _iteration_records(fit, ctx, own: list, items, weights: list):
    """The raw records of one iteration of the data partitions ``own`` (one group task, or one full-data task
    whose cached records ``items`` came with it), with ``weights`` (chunks) loaded into the model first."""
    nodes = maximal_nodes(own, lambda q: fit.offsets[q + 1] == fit.offsets[q], len(fit.offsets) - 1)
    # once per task, not per partition: a copy of the model per partition was 3.5 GB of copying per
    # iteration at 1000 partitions of 0.9M parameters
    split_weights = (None, _load_weights(weights, fit.model.flat_parameters))
    del weights
    members = iter(own)
    p = next(members, None)
    for lo, level in nodes:
        grads, buffers = TreeSum(_add_gradients), TreeSum(_add_buffers)
        while p is not None and p < node_end(lo, level):
            def source(p=p):
                if items is not None:
                    return items[0]
                return local_cache.load(fit.data_key, p) if fit.data_key is not None else None
            out = partition_gradient(fit, ctx, p, source, split_weights)
            if out is MISS:
                yield from (_RECORD.pack(_MISS, k, p, 0, 0.0, 0.0, 0) for k in range(len(fit.bounds) - 1))
            elif out is not None:
                grad, loss_sum, norm, (buffer_sum, count) = out
                half = to_half(grad) if fit.compress == "fp16" else None  # numpy's rounding, vectorised
                grads.push(p, 0, [grad if half is None else None, half, loss_sum, norm])
                buffers.push(p, 0, (None if buffer_sum is None else buffer_sum.astype(np.float32), count))
            p = next(members, None)
        yield from _node_records(fit.bounds, grads.nodes(), buffers.nodes())


# ---------------------------------------------------------------------------------------------- driver
#: Reduce on the driver JVM when there is one AllReduce block (saves the second stage of every iteration:
#: measured in bench/engine.py). Off: always reduce in JVM tasks (tests and benchmarks compare the two).
DRIVER_REDUCE = True


class JvmAllReduce:
    """Driver side: owns the bridge's ``TrainingLoop`` for one fit.

    Parameters
    ----------
    data : DataBlocks
    fit_broadcast : CloudBroadcast of FitContext
    optimizer : SGD, Adam or AdamW (see :func:`supports`), configured on the model's layout
    bounds : ndarray
        AllReduce block boundaries.
    groups : int
        Gradient tasks per iteration over executor-local copies (task slots).

    Attributes
    ----------
    driver_reduce : bool
        With one block (:data:`DRIVER_REDUCE` on), an iteration is a one-stage job: the gradient records are
        collected to the driver JVM, which sums them and applies the update (the optimizer state lives there);
        with several blocks, JVM reduce tasks do it next to their cached shard states. Same arithmetic, so
        the same bits either way.
    """

    def __init__(self, data, fit_broadcast, optimizer, bounds: np.ndarray, groups: int):
        self.optimizer, self.bounds = optimizer, np.asarray(bounds, np.int64)
        self.driver_reduce = DRIVER_REDUCE and len(self.bounds) == 2
        self.loop = TrainingLoop(data.rdd, self.bounds, np.asarray(data.sizes, np.int64), groups,
                                     self.driver_reduce)
        task = partial(gradient_records, fit_broadcast, data.rdd._jrdd_deserializer)
        self.loop.set_gradients(task)
        self.step_count = 0
        #: Whether :meth:`run` may still run several iterations per job (off after one such job failed to start).
        self.several_per_job = self.driver_reduce
        #: Whether the last :meth:`run` was refused for now (a task slot short for a group task, fan-in bounds).
        self.refused = False

    def set_weights(self, parameters: np.ndarray, buffers: np.ndarray) -> None:
        self.loop.set_weights(np.concatenate([parameters, buffers], dtype="<f4"), parameters.size)

    def weights(self, num_parameters: int) -> tuple[np.ndarray, np.ndarray]:
        flat = np.frombuffer(self.loop.weights(), "<f4").astype(np.float32)
        return flat[:num_parameters], flat[num_parameters:]

    def set_states(self, states: list) -> None:
        steps = {int(s["step"]) for s in states}
        if len(steps) != 1:
            raise ValueError(f"shard states disagree on the optimizer step: {sorted(steps)}")
        self.step_count = steps.pop()
        self.loop.set_states(pack_states(self.optimizer, states, self.bounds))

    def states(self) -> list:
        return unpack_states(self.optimizer, self.loop.states())

    def step(self, epoch: int, iteration: int, global_iteration: int, lr: float):
        """Run one iteration. Returns ``(ok, ran_full, loss_sum, normalizer_sum, samples)``; ``ok`` is False
        when the loss or the new weights are not finite (then nothing was committed)."""
        program = encode_program(self.optimizer, self.bounds, lr, self.step_count + 1)
        status, ran_full, loss_sum, norm_sum, samples = _STEP.unpack(
            self.loop.step(epoch, iteration, global_iteration, program))
        if status == _OK:
            self.step_count += 1
        return status == _OK, ran_full, loss_sum, norm_sum, samples

    def run(self, plan: list) -> tuple[list, bool]:
        """Run the iterations ``plan`` — ``(epoch, iteration in epoch, global iteration, lr)`` each — in one Spark
        job (driver reduce over executor-local copies only; ``TrainingLoop.run``), bitwise as :meth:`step` would
        one by one.

        Returns ``(results, missed)``: ``(ok, loss_sum, normalizer_sum, samples)`` of each iteration that ran, in
        order — all of them, or fewer when one was not finite (the last, ``ok`` False, not committed) or lacked a
        local copy (not run; ``missed`` is True and :meth:`step` reruns it on the full data), or none when the loop
        cannot run several iterations now (use :meth:`step`). If the job fails nothing of it is kept and the
        exception propagates."""
        if not self.driver_reduce:
            return [], False
        parts = [struct.pack("<i", len(plan))]
        for j, (epoch, iteration, global_iteration, lr) in enumerate(plan):
            program = encode_program(self.optimizer, self.bounds, lr, self.step_count + 1 + j)
            parts.append(struct.pack("<iiii", epoch, iteration, global_iteration, len(program)) + program)
        out = self.loop.run(b"".join(parts))
        ran, flags = struct.unpack_from("<ii", out)
        missed, self.refused = bool(flags & 1), bool(flags & 4)
        if flags & 2 and self.several_per_job:
            self.several_per_job = False
            log.warning("sparkdl: a job of several iterations could not start on this cluster (see the Spark log); "
                        "from now on every iteration is a job of its own")
        results = []
        for j in range(ran):
            status, _, loss_sum, norm_sum, samples = _STEP.unpack_from(out, 8 + _STEP.size * j)
            self.step_count += status == _OK
            results.append((status == _OK, loss_sum, norm_sum, samples))
        return results, missed

    def invalidate_local_copies(self) -> None:
        self.loop.invalidate_local_copies()

    def close(self) -> None:
        self.loop.close()
