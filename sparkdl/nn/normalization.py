"""Batch normalization layers: :class:`BatchNorm1d` (N, C) / (N, C, L) and :class:`BatchNorm2d` (N, C, H, W)."""
from __future__ import annotations

import numbers

import numpy as np

from sparkdl.kernels import batchnorm as K
from sparkdl.nn._checks import check_input, check_positive_int
from sparkdl.nn.module import Module
from sparkdl.nn.row_parts import current_part

__all__ = ["BatchNorm1d", "BatchNorm2d"]


class _BatchNorm(Module):
    r"""Per-channel normalization, :math:`y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}}
    \gamma + \beta`, statistics over every axis except the channel axis 1.

    Subclasses set ``_ndims``, the allowed input ranks.
    """

    _ndims: tuple = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True):
        super().__init__()
        name = type(self).__name__
        self.num_features = check_positive_int(name, "num_features", num_features)
        for arg, v in (("eps", eps), ("momentum", momentum)):
            if (v is not None or arg == "eps") and (isinstance(v, bool) or not isinstance(v, numbers.Real)):
                raise TypeError(f"{name}: {arg} must be a real number, got {type(v).__name__}")
        if not eps >= 0:
            raise ValueError(f"{name}: eps must be >= 0, got {eps!r}")
        if momentum is not None and not 0 <= momentum <= 1:
            raise ValueError(f"{name}: momentum must be a number in [0, 1] or None (cumulative average), "
                             f"got {momentum!r}")
        self.eps = float(eps)
        self.momentum = None if momentum is None else float(momentum)
        self.affine = bool(affine)
        self.track_running_stats = bool(track_running_stats)
        c = self.num_features
        if self.affine:
            self.add_parameter("weight", (c,))
            self.add_parameter("bias", (c,))
        if self.track_running_stats:
            self.add_buffer("running_mean", np.zeros(c))
            self.add_buffer("running_var", np.ones(c))
            self.add_buffer("num_batches_tracked", np.zeros(()))
        self.reset_parameters(np.random.default_rng())

    def reset_running_stats(self) -> None:
        """Running mean 0, running variance 1, batch counter 0 (in place)."""
        if self.track_running_stats:
            self.running_mean[...] = 0
            self.running_var[...] = 1
            self.num_batches_tracked[...] = 0

    def reset_parameters(self, rng):
        """Weight 1, bias 0, and running statistics reset (as ``torch.nn.BatchNorm*.reset_parameters``)."""
        self.reset_running_stats()
        if self.affine:
            self.weight[...] = 1
            self.bias[...] = 0

    def _update_running_stats(self, mean, var, count):
        self.num_batches_tracked[...] += 1
        f = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        unbiased = var * (count / (count - 1))
        self.running_mean[...] = (1.0 - f) * self.running_mean + f * mean
        self.running_var[...] = (1.0 - f) * self.running_var + f * unbiased

    def forward(self, x, *, training=False, rng=None):
        check_input(self, x, self._ndims, axis=1, size=self.num_features)
        n, c = x.shape[:2]
        x3 = np.ascontiguousarray(x).reshape(n, c, int(np.prod(x.shape[2:])))
        count = x3.shape[0] * x3.shape[2]
        batch_stats = training or not self.track_running_stats
        if training and count == 1 and self.track_running_stats:
            # One value per channel (a one-row share of a data-parallel batch): normalise with the running
            # statistics, which count the batch as one whose statistics equal them (see the class Notes).
            batch_stats = False
            self.num_batches_tracked[...] += 1
        part = current_part() if batch_stats else None
        if batch_stats:
            if count == 0:  # an empty batch: nothing to normalise, running statistics unchanged
                return x.copy(), None
            mean, var = K.batch_norm_stats(x3)
            if part is not None:  # this batch is one row part of a batch split across threads: its statistics
                mean, var, count = _whole_batch_stats(part, mean, var, count)
            if training and self.track_running_stats and (part is None or part[1] == 0):
                self._update_running_stats(mean, var, count)
        else:
            mean, var = self.running_mean.astype(np.float64), self.running_var
        invstd = 1.0 / np.sqrt(np.asarray(var, np.float64) + self.eps)
        w, b = self._affine(c, x.dtype)
        y = K.batch_norm_apply(x3, mean, invstd, w, b)
        return y.reshape(x.shape), (x3, mean, invstd, batch_stats, part, count)

    def _affine(self, c, dtype):
        if self.affine:
            return self.weight, self.bias
        return np.ones(c, dtype), np.zeros(c, dtype)

    def backward(self, cache, grad_y, grad_params):
        if cache is None:  # empty batch
            grad_params[...] = 0
            return np.zeros_like(grad_y)
        x3, mean, invstd, batch_stats, part, count = cache
        w, _ = self._affine(x3.shape[1], x3.dtype)
        g3 = np.ascontiguousarray(grad_y).reshape(x3.shape)
        if part is None:
            grad_x, gw, gb = K.batch_norm_backward(x3, g3, mean, invstd, w, batch_stats)
        else:  # the whole batch's two sums; its parameter gradients are given by part 0, the other parts add 0
            parts, index = part
            gb, gw = parts.sum(index, K.batch_norm_grad_sums(x3, g3, mean, invstd))
            grad_x = K.batch_norm_grad_input(x3, g3, mean, invstd, w, gb, gw, count)
            if index:
                gb, gw = np.zeros_like(gb), np.zeros_like(gw)
        if self.affine:
            g = self.grad_views(grad_params)
            g["weight"][...] = gw
            g["bias"][...] = gb
        return grad_x.reshape(grad_y.shape)

    def get_config(self):
        return {"num_features": self.num_features, "eps": self.eps, "momentum": self.momentum,
                "affine": self.affine, "track_running_stats": self.track_running_stats}


def _whole_batch_stats(part, mean, var, count):
    """The whole batch's per-channel mean and biased variance (float64 (C,)), and its number of values per
    channel, from every row part's: Chan, Golub & LeVeque's pairwise combination of counts ``n_i``, means and
    ``M2_i = n_i var_i``, ``M2 = sum(M2_i + n_i (mean_i - mean)^2)``, in part order (the same bits in every part)."""
    parts, index = part
    shares = parts.gather(index, (count, mean, var))
    n = sum(c for c, _, _ in shares)
    whole = shares[0][0] * shares[0][1]
    for c, m, _ in shares[1:]:
        whole = whole + c * m
    whole = whole / n
    m2 = np.zeros_like(whole)
    for c, m, v in shares:
        m2 += c * v + c * (m - whole) ** 2
    return whole, m2 / n, n


_DOC = r"""Batch normalization over {what} (Ioffe & Szegedy, 2015).

    :math:`y = \frac{{x - \mathrm{{E}}[x]}}{{\sqrt{{\mathrm{{Var}}[x] + \epsilon}}}} \gamma + \beta`, per channel C,
    with the mean and variance taken over {over}.

    Parameters
    ----------
    num_features : int
        Number of channels C.
    eps : float, default 1e-5
        Added to the variance for numerical stability.
    momentum : float or None, default 0.1
        Running-statistics update ``running = (1 - momentum) * running + momentum * batch_stat``;
        ``None`` uses the cumulative average (``momentum = 1 / num_batches_tracked``).
    affine : bool, default True
        Learn ``weight`` (:math:`\gamma`) and ``bias`` (:math:`\beta`).
    track_running_stats : bool, default True
        Keep running statistics (buffers) and use them when ``training=False``. If False, batch statistics
        are used in both modes and there are no buffers.

    Shapes
    ------
    - input: {shapes}; output: same shape
    - ``weight``: (C,), init 1; ``bias``: (C,), init 0
    - buffers ``running_mean`` (C,) init 0, ``running_var`` (C,) init 1, ``num_batches_tracked`` () init 0
      (stored as a float in the flat buffer vector)

    Notes
    -----
    ``training=True``: normalises with this batch's statistics (biased variance) and updates the running
    statistics **in place** with the unbiased variance, as PyTorch does; ``training=False``: normalises with
    the running statistics. Backward is exact in both modes. ``reset_parameters`` also resets the running
    statistics.

    A training batch with a single value per channel (one row of (N, C) input — what a Spark partition's share
    of a global batch can be) does not raise, unlike PyTorch: it is normalised and differentiated with the
    running statistics, exactly as in evaluation, and counted as a batch whose statistics equal them
    (``num_batches_tracked`` + 1, running mean and variance unchanged). Without running statistics its
    output is ``bias`` (its own mean, zero variance) and its input gradient 0.

    Under data parallelism (:class:`sparkdl.engine.DistributedTrainer`) statistics are those of each
    partition's share of the global batch, as with PyTorch DDP without SyncBatchNorm; the running statistics
    of the shares are averaged weighted by their row counts. The single-process
    :func:`sparkdl.trainer.train_step` reproduces this with its ``groups`` argument.

    Raises
    ------
    TypeError, ValueError
        Bad constructor arguments; an input of the wrong dtype, rank or channel count.

    References
    ----------
    Ioffe & Szegedy, 2015, "Batch Normalization: Accelerating Deep Network Training by Reducing Internal
    Covariate Shift"; ``torch.nn.{name}``.
    """


class BatchNorm1d(_BatchNorm):
    __doc__ = _DOC.format(what="(N, C) or (N, C, L) inputs", over="N (and L)", shapes="(N, C) or (N, C, L)",
                          name="BatchNorm1d")
    _ndims = (2, 3)


class BatchNorm2d(_BatchNorm):
    __doc__ = _DOC.format(what="(N, C, H, W) inputs", over="N, H and W", shapes="(N, C, H, W)",
                          name="BatchNorm2d")
    _ndims = (4,)
