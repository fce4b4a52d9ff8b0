"""Inference-time fusion: a ``Conv2d (-> BatchNorm2d) (-> ReLU | ReLU6 | Hardtanh | Hardswish)`` run computed
in one convolution pass, and in a Graph a residual join after it, ``Conv2d (-> BatchNorm2d) -> Add (-> activation)``,
as the convolution plus one in-place pass.

In evaluation mode a BatchNorm with running statistics is a per-channel affine map,
``y = x * scale + shift`` with ``scale = weight / sqrt(running_var + eps)`` and
``shift = bias - running_mean * scale``; folded into the convolution before it (``weight * scale``,
``bias * scale + shift``) it costs nothing, and a following activation becomes the convolution's epilogue
(:mod:`sparkdl.kernels.epilogue`: inside the depthwise kernel's output rows, with the 1x1 convolution's bias, else
one in-place pass). This saves the BatchNorm's pass and the activation's pass over the feature map (and their
output arrays). PyTorch's dynamo exporter folds BatchNorm into the convolution itself, so its files hold
``Conv -> Clip`` / ``Conv -> Relu`` / ``Conv -> HardSwish`` runs: those fuse too. The fused activation computes
the activation layer's own expression, so its output equals the unfused one bit for bit for the same
convolution output. A residual join (a two-input :class:`~sparkdl.nn.Add`, ResNet's ``conv -> add -> relu`` and
MobileNetV2's projection ``conv -> add``) adds its other input into the convolution's own output array and applies
the activation in the same pass (:func:`~sparkdl.kernels.epilogue.add_activation`): the same two-operand sums, so
the same bits, without the Add's and the activation's output arrays.

Fusion happens only in :meth:`~sparkdl.nn.Module.infer` (``model(x)`` in evaluation mode: the inference path
of :func:`sparkdl.trainer.predict` and the Spark stages), never in ``forward``: training, and evaluation-mode
``forward``/``backward``, run every layer as written. The folded weights are recomputed on every call from the
current parameters (one pass over the weights), so nothing is cached and nothing can go stale. Containers
find the runs: :class:`~sparkdl.nn.Sequential` among consecutive children, :class:`~sparkdl.nn.Graph` where each
inner value's only consumer is the next module of the run and no inner value is a graph output.
"""
from __future__ import annotations

import numpy as np

from sparkdl.kernels import epilogue as E
from sparkdl.nn.activation import ReLU
from sparkdl.nn.activation_hard import Hardswish, Hardtanh
from sparkdl.nn.conv import Conv2d
from sparkdl.nn.merge import Add
from sparkdl.nn.normalization import BatchNorm2d

__all__ = ["epilogue", "fusable_run", "run_fused", "graph_runs"]


def _foldable(conv, bn) -> bool:
    return (isinstance(conv, Conv2d) and type(bn) is BatchNorm2d and bn.track_running_stats
            and bn.num_features == conv.out_channels)


def epilogue(act):
    """The epilogue ``(kind, low, high)`` (:mod:`sparkdl.kernels.epilogue`) computing the activation module
    ``act``, or None if it has none."""
    if type(act) is ReLU:
        return E.RELU, 0.0, 0.0
    if isinstance(act, Hardtanh):  # ReLU6 too
        return E.HARDTANH, act.min_val, act.max_val
    if type(act) is Hardswish:
        return E.HARDSWISH, 0.0, 0.0
    return None


def fusable_run(modules, i: int) -> int:
    """Length of the fusable run starting at ``modules[i]`` (a list of modules applied in sequence): 3 for
    Conv2d, BatchNorm2d, activation; 2 for Conv2d, BatchNorm2d or Conv2d, activation; 0 if ``modules[i]``
    starts none."""
    if i + 1 >= len(modules) or not isinstance(modules[i], Conv2d):
        return 0
    if not _foldable(modules[i], modules[i + 1]):
        return 2 if epilogue(modules[i + 1]) is not None else 0
    return 3 if i + 2 < len(modules) and epilogue(modules[i + 2]) is not None else 2


def run_fused(run, x, residual=None):
    """Inference output of the run ``[conv(, bn)(, act)]`` (see :func:`fusable_run`) on ``x`` (N, C, H, W), or of a
    graph's ``[conv(, bn), add(, act)]`` with ``residual`` the Add's other input (see :func:`graph_runs`)."""
    conv, scale, shift = run[0], None, None
    rest = list(run[1:])
    if rest and type(rest[0]) is BatchNorm2d:
        bn = rest.pop(0)
        invstd = 1.0 / np.sqrt(bn.running_var.astype(np.float64) + bn.eps)
        gamma = bn.weight.astype(np.float64) if bn.affine else 1.0
        beta = bn.bias.astype(np.float64) if bn.affine else 0.0
        scale = gamma * invstd
        shift = beta - bn.running_mean.astype(np.float64) * scale
        scale = np.broadcast_to(scale, (conv.out_channels,))
        shift = np.broadcast_to(shift, (conv.out_channels,))
    join = rest.pop(0) if rest and type(rest[0]) is Add else None
    act = epilogue(rest[0]) if rest else None
    if join is None:
        return conv.forward_folded(x, scale, shift, act)
    y = conv.forward_folded(x, scale, shift, None)  # a new array: the join writes into it
    if residual.shape != y.shape or residual.dtype != y.dtype:  # the Add's own checks and error
        y = join.infer((y, residual))
        return rest[0].infer(y) if rest else y
    r = np.ascontiguousarray(residual)
    E.add_activation(y.reshape(y.shape[0], y.shape[1], -1), r.reshape(r.shape[0], r.shape[1], -1),
                     *(E.NO_EPILOGUE if act is None else act))
    return y


def _extends(run, module, n_inputs: int) -> bool:
    """Whether ``module`` (with ``n_inputs`` inputs, one of them the run's last value) can end-extend the graph run
    ``run`` (its modules): BatchNorm2d right after the convolution, an activation after the convolution, its
    BatchNorm or a join, and one two-input Add after the convolution or its BatchNorm."""
    last = run[-1]
    if type(module) is Add:
        return n_inputs == 2 and (isinstance(last, Conv2d) or type(last) is BatchNorm2d)
    if n_inputs != 1:
        return False
    if type(module) is BatchNorm2d:
        return isinstance(last, Conv2d) and _foldable(last, module)
    return epilogue(module) is not None and (isinstance(last, Conv2d) or type(last) in (BatchNorm2d, Add))


def graph_runs(graph) -> dict:
    """``{conv node: (conv node[, bn node][, add node][, act node])}`` (at least two nodes) of every fusable run of
    ``graph`` (an :class:`~sparkdl.nn.Graph`): each later node's input is the node before it (an Add's other input
    is a different value), which no other node or output uses; an Add joining two convolutions belongs to the
    first one's run. The graph computes a run where its last node is (every input of the run exists by then)."""
    uses = {}
    for name, args in graph.node_inputs.items():
        for a in args:
            uses.setdefault(a, []).append(name)
    for o in graph.output_names:
        uses.setdefault(o, []).append(None)
    modules = graph._modules
    runs, claimed = {}, set()
    for name, module in modules.items():
        if not isinstance(module, Conv2d):
            continue
        run = [name]
        while True:
            nxt = uses.get(run[-1], [])
            if len(nxt) != 1 or nxt[0] is None or nxt[0] in claimed:  # a join of two convolutions: the first's
                break
            args = graph.node_inputs[nxt[0]]
            if len(set(args)) != len(args) or not _extends([modules[n] for n in run], modules[nxt[0]], len(args)):
                break
            run.append(nxt[0])
        if len(run) >= 2:
            runs[name] = tuple(run)
            claimed.update(run)
    return runs
