"""Containers: :class:`Sequential` (a chain), :class:`Residual` (``x + f(x)``) and :class:`Concat`
(branches joined along an axis). Together they express ResNet/Inception-style blocks."""
from __future__ import annotations

import numpy as np

from sparkdl.nn.fusion import fusable_run, run_fused
from sparkdl.nn.module import Module

__all__ = ["Sequential", "Residual", "Concat"]


def _check_modules(owner: str, modules):
    for i, m in enumerate(modules):
        if not isinstance(m, Module):
            raise TypeError(f"{owner}: argument {i} must be a sparkdl.nn.Module, got {type(m).__name__}")


class Sequential(Module):
    """Apply modules in order; children are named ``"0"``, ``"1"``, ... as in ``torch.nn.Sequential``.

    Shapes: whatever the first child takes to whatever the last child returns.
    """

    def __init__(self, *modules: Module):
        super().__init__()
        _check_modules("Sequential", modules)
        self._add_modules([(str(i), m) for i, m in enumerate(modules)])

    @classmethod
    def from_config(cls, config, children=None):
        return cls(*(children or {}).values())

    def __len__(self):
        return len(self._modules)

    def __getitem__(self, i: int) -> Module:
        return list(self._modules.values())[i]

    def forward(self, x, *, training=False, rng=None):
        caches = []
        for m in self._modules.values():
            x, c = m.forward(x, training=training, rng=rng)
            caches.append(c)
        return x, caches

    def infer(self, x):
        """Children in order; each Conv2d -> BatchNorm2d (-> ReLU/ReLU6) run as one folded convolution
        (:mod:`sparkdl.nn.fusion`)."""
        mods = list(self._modules.values())
        i = 0
        while i < len(mods):
            k = fusable_run(mods, i)
            if k:
                x = run_fused(mods[i:i + k], x)
                i += k
            else:
                x = mods[i].infer(x)
                i += 1
        return x

    def backward(self, cache, grad_y, grad_params):
        g = grad_y
        for (name, m), c in zip(reversed(self._modules.items()), reversed(cache)):
            g = m.backward(c, g, self.child_grad(grad_params, name))
        return g

    def backward_parameters(self, cache, grad_y, grad_params):
        """Leading children without parameters get no backward pass at all, the first child with parameters
        no input gradient (:meth:`Module.backward_parameters`)."""
        items = list(self._modules.items())
        first = next((i for i, (_, m) in enumerate(items) if m.num_parameters()), len(items))
        g = grad_y
        for i in range(len(items) - 1, first, -1):
            name, m = items[i]
            g = m.backward(cache[i], g, self.child_grad(grad_params, name))
        if first < len(items):
            name, m = items[first]
            m.backward_parameters(cache[first], g, self.child_grad(grad_params, name))


class Residual(Module):
    """``y = f(x) + shortcut(x)``; ``shortcut`` defaults to the identity.

    Parameters
    ----------
    body : Module
        The residual branch f.
    shortcut : Module, optional
        Projection for the skip path (e.g. a 1×1 ``Conv2d`` + ``BatchNorm2d`` when shapes change).

    Raises
    ------
    ValueError
        If the two branches return different shapes.
    """

    def __init__(self, body: Module, shortcut: Module | None = None):
        super().__init__()
        _check_modules("Residual", [body] + ([shortcut] if shortcut is not None else []))
        self.add_module("body", body)
        if shortcut is not None:
            self.add_module("shortcut", shortcut)

    @classmethod
    def from_config(cls, config, children=None):
        return cls(**(children or {}))

    def forward(self, x, *, training=False, rng=None):
        y, cb = self.body.forward(x, training=training, rng=rng)
        if "shortcut" in self._modules:
            s, cs = self.shortcut.forward(x, training=training, rng=rng)
        else:
            s, cs = x, None
        if y.shape != s.shape:
            raise ValueError(f"Residual: body output shape {y.shape} != shortcut output shape {s.shape}; "
                             "pass a shortcut projection that matches the body")
        return y + s, (cb, cs)

    def infer(self, x):
        y = self.body.infer(x)
        s = self.shortcut.infer(x) if "shortcut" in self._modules else x
        if y.shape != s.shape:
            raise ValueError(f"Residual: body output shape {y.shape} != shortcut output shape {s.shape}; "
                             "pass a shortcut projection that matches the body")
        return y + s

    def backward(self, cache, grad_y, grad_params):
        cb, cs = cache
        gx = self.body.backward(cb, grad_y, self.child_grad(grad_params, "body"))
        if "shortcut" in self._modules:
            gx = gx + self.shortcut.backward(cs, grad_y, self.child_grad(grad_params, "shortcut"))
        else:
            gx = gx + grad_y
        return gx


class Concat(Module):
    """Run every branch on the same input and concatenate outputs along ``dim`` (default 1, channels).

    Raises
    ------
    ValueError
        If branch outputs disagree on any axis other than ``dim``.
    """

    def __init__(self, *branches: Module, dim: int = 1):
        super().__init__()
        if not branches:
            raise ValueError("Concat: needs at least one branch")
        _check_modules("Concat", branches)
        self.dim = int(dim)
        for i, m in enumerate(branches):
            self.add_module(str(i), m)

    def forward(self, x, *, training=False, rng=None):
        outs, caches = [], []
        for m in self._modules.values():
            y, c = m.forward(x, training=training, rng=rng)
            outs.append(y)
            caches.append(c)
        try:
            y = np.concatenate(outs, axis=self.dim)
        except ValueError as e:
            raise ValueError(f"Concat: branch output shapes {[o.shape for o in outs]} cannot be joined "
                             f"along dim {self.dim}") from e
        sizes = [o.shape[self.dim] for o in outs]
        return y, (caches, sizes)

    def infer(self, x):
        outs = [m.infer(x) for m in self._modules.values()]
        try:
            return np.concatenate(outs, axis=self.dim)
        except ValueError as e:
            raise ValueError(f"Concat: branch output shapes {[o.shape for o in outs]} cannot be joined "
                             f"along dim {self.dim}") from e

    def backward(self, cache, grad_y, grad_params):
        caches, sizes = cache
        parts = np.split(grad_y, np.cumsum(sizes)[:-1], axis=self.dim)
        gx = None
        for (name, m), c, g in zip(self._modules.items(), caches, parts):
            gi = m.backward(c, np.ascontiguousarray(g), self.child_grad(grad_params, name))
            gx = gi if gx is None else gx + gi
        return gx

    def get_config(self):
        return {"dim": self.dim}

    @classmethod
    def from_config(cls, config, children=None):
        return cls(*(children or {}).values(), **config)
