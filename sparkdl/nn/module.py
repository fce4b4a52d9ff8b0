"""The layer contract: :class:`Module`.

Three kinds of state, named as such
-----------------------------------
* **parameters** — learned tensors (``weight``, ``bias``), views into one flat vector,
* **buffers** — persistent non-learned tensors (BatchNorm ``running_mean``), views into a second flat vector,
* **caches** — transient values that ``backward`` needs, returned by ``forward`` and never stored on the module.

One contract, no hidden mode
----------------------------
``y, cache = m.forward(x, training=False, rng=None)`` and
``grad_x = m.backward(cache, grad_y, grad_params)``.
``training`` selects train/eval behaviour (Dropout, BatchNorm); ``rng`` (a ``numpy.random.Generator``)
is the only source of randomness in a forward pass. ``grad_params`` is a 1-D array laid out like
:attr:`Module.flat_parameters`; ``backward`` **overwrites** it with the gradient of the loss with respect
to this module's parameters. Because parameters are only read and caches are returned rather than
stored, one module can run forward/backward from several threads at once, each with its own
``grad_params``. The one exception is BatchNorm in training mode, which updates its running-statistics
buffers in place (as in PyTorch).
"""
from __future__ import annotations

import zlib
from typing import Any, Iterator

import numpy as np

from sparkdl.nn.layout import Layout

__all__ = ["Module", "MODULE_REGISTRY"]

_KINDS = ("parameters", "buffers")

#: Every Module subclass by class name; persistence resolves architecture class names only here.
MODULE_REGISTRY: dict[str, type] = {}


class Module:
    """Base class of every layer, container and loss-free network in sparkdl.

    Subclasses register tensors with :meth:`add_parameter`/:meth:`add_buffer` and children with
    :meth:`add_module` in ``__init__``, implement :meth:`forward`/:meth:`backward`, and
    :meth:`reset_parameters` (their default initialization, matching PyTorch's).
    ``get_config()`` returns the constructor arguments, so an architecture is data (see
    :mod:`sparkdl.io`).
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if not cls.__name__.startswith("_"):  # private bases are not architectures
            MODULE_REGISTRY[cls.__name__] = cls

    def __init__(self):
        self._tensors: dict[str, dict[str, np.ndarray]] = {"parameters": {}, "buffers": {}}
        self._modules: dict[str, Module] = {}
        self._flat: dict[str, np.ndarray] = {k: np.zeros(0, np.float32) for k in _KINDS}
        self._child_ranges: dict[str, dict[str, tuple[int, int]]] = {k: {} for k in _KINDS}
        self._dtype = np.dtype(np.float32)

    # ------------------------------------------------------------------ registration
    def add_parameter(self, name: str, shape: tuple) -> np.ndarray:
        """Register a learned tensor of ``shape`` (zero-filled; call :meth:`reset_parameters` after)."""
        return self._add_tensor("parameters", name, np.zeros(shape, self._dtype))

    def add_buffer(self, name: str, value: np.ndarray) -> np.ndarray:
        """Register a persistent, non-learned tensor initialised to ``value``."""
        return self._add_tensor("buffers", name, np.array(value, dtype=self._dtype))

    def add_module(self, name: str, module: "Module") -> "Module":
        """Register a child module; its tensors become part of this module's flat vectors."""
        self._add_modules([(name, module)])
        return module

    def _add_modules(self, named) -> None:
        """Register several (name, child) pairs and re-pack the flat vectors once (containers with many children:
        one re-pack per child would copy the parameters so far once per child)."""
        for name, module in named:
            if not isinstance(module, Module):
                raise TypeError(f"{type(self).__name__}.add_module: {name!r} must be a Module, got "
                                f"{type(module).__name__}")
            if name in self._modules or name in self._tensors["parameters"] or name in self._tensors["buffers"]:
                raise ValueError(f"{type(self).__name__}: name {name!r} is already registered")
            self._modules[name] = module
            module._set_dtype_tree(self._dtype) if module._dtype != self._dtype else None
        self._flatten()

    def _add_tensor(self, kind: str, name: str, value: np.ndarray) -> np.ndarray:
        if name in self._modules or name in self._tensors["parameters"] or name in self._tensors["buffers"]:
            raise ValueError(f"{type(self).__name__}: name {name!r} is already registered")
        self._tensors[kind][name] = value
        self._flatten()
        return self._tensors[kind][name]

    def __setattr__(self, name: str, value) -> None:
        d = self.__dict__
        if "_modules" in d and (name in d["_tensors"]["parameters"] or name in d["_tensors"]["buffers"]
                                or name in d["_modules"]):
            raise AttributeError(f"{type(self).__name__}.{name} is a registered tensor or child and views the "
                                 f"model's flat vector; assign in place instead: {name}[...] = value")
        object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails: expose tensors and children as attributes.
        d = self.__dict__
        if "_tensors" in d:
            for kind in _KINDS:
                if name in d["_tensors"][kind]:
                    return d["_tensors"][kind][name]
            if name in d["_modules"]:
                return d["_modules"][name]
        raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")

    # ------------------------------------------------------------------ flat storage
    def _named(self, kind: str, prefix: str = "") -> Iterator[tuple[str, "Module", str, np.ndarray]]:
        for local, arr in self._tensors[kind].items():
            yield prefix + local, self, local, arr
        for cname, child in self._modules.items():
            yield from child._named(kind, prefix + cname + ".")

    def _flatten(self) -> None:
        """Re-pack this subtree's tensors into fresh flat vectors and re-point every module at views."""
        for kind in _KINDS:
            items = list(self._named(kind))
            layout = Layout((name, arr.shape) for name, _, _, arr in items)
            flat = np.empty(layout.size, dtype=self._dtype)
            for (name, owner, local, arr), entry in zip(items, layout):
                flat[entry.offset:entry.stop] = arr.reshape(-1)
                owner._tensors[kind][local] = flat[entry.offset:entry.stop].reshape(entry.shape)
            self._assign_flat(kind, flat)

    def _assign_flat(self, kind: str, flat: np.ndarray) -> None:
        self._flat[kind] = flat
        offset = sum(a.size for a in self._tensors[kind].values())
        ranges = {}
        for cname, child in self._modules.items():
            n = child._count(kind)
            ranges[cname] = (offset, offset + n)
            child._assign_flat(kind, flat[offset:offset + n])
            offset += n
        self._child_ranges[kind] = ranges

    def _count(self, kind: str) -> int:
        return sum(a.size for _, _, _, a in self._named(kind))

    @property
    def flat_parameters(self) -> np.ndarray:
        """All learned parameters of this module and its children as one contiguous 1-D view."""
        return self._flat["parameters"]

    @property
    def flat_buffers(self) -> np.ndarray:
        """All persistent buffers of this module and its children as one contiguous 1-D view."""
        return self._flat["buffers"]

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    def parameter_layout(self) -> Layout:
        """Name → (offset, shape) of :attr:`flat_parameters`."""
        return Layout((n, a.shape) for n, _, _, a in self._named("parameters"))

    def buffer_layout(self) -> Layout:
        """Name → (offset, shape) of :attr:`flat_buffers`."""
        return Layout((n, a.shape) for n, _, _, a in self._named("buffers"))

    def num_parameters(self) -> int:
        return self.flat_parameters.size

    def named_parameters(self) -> Iterator[tuple[str, np.ndarray]]:
        for name, _, _, arr in self._named("parameters"):
            yield name, arr

    def named_buffers(self) -> Iterator[tuple[str, np.ndarray]]:
        for name, _, _, arr in self._named("buffers"):
            yield name, arr

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, "Module"]]:
        yield prefix.rstrip("."), self
        for cname, child in self._modules.items():
            yield from child.named_modules(prefix + cname + ".")

    def children(self) -> list["Module"]:
        return list(self._modules.values())

    def zeros_like_parameters(self) -> np.ndarray:
        """A zeroed flat gradient buffer for :meth:`backward`."""
        return np.zeros_like(self.flat_parameters)

    def grad_views(self, grad_params: np.ndarray) -> dict[str, np.ndarray]:
        """Views of this module's *own* parameter gradients inside ``grad_params`` (its flat layout)."""
        out, offset = {}, 0
        for name, arr in self._tensors["parameters"].items():
            out[name] = grad_params[offset:offset + arr.size].reshape(arr.shape)
            offset += arr.size
        return out

    def child_grad(self, grad_params: np.ndarray, child: str) -> np.ndarray:
        """The slice of ``grad_params`` that belongs to child ``child``."""
        lo, hi = self._child_ranges["parameters"][child]
        return grad_params[lo:hi]

    # ------------------------------------------------------------------ copying / pickling
    def __getstate__(self):
        state = self.__dict__.copy()
        state["_flat"] = None  # views do not survive pickling; rebuilt in __setstate__
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._flat = {k: np.zeros(0, self._dtype) for k in _KINDS}
        self._flatten()

    def copy(self) -> "Module":
        """A deep copy with its own flat vectors (same structure, same values)."""
        import copy
        return copy.deepcopy(self)

    # ------------------------------------------------------------------ dtype
    def astype(self, dtype) -> "Module":
        """Convert every parameter and buffer to ``dtype`` (float32 or float64), in place; returns self.

        Use on the root model: sub-modules then view the root's new flat vectors.
        """
        dtype = np.dtype(dtype)
        if dtype not in (np.float32, np.float64):
            raise TypeError(f"{type(self).__name__}.astype: dtype must be float32 or float64, got {dtype}")
        self._set_dtype_tree(dtype)
        return self

    def _set_dtype_tree(self, dtype) -> None:
        for _, m in self.named_modules():
            m._dtype = np.dtype(dtype)
        self._flatten()

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, np.ndarray]:
        """Copies of all parameters and buffers keyed by dotted name (PyTorch's key names)."""
        out = {n: a.copy() for n, a in self.named_parameters()}
        out.update({n: a.copy() for n, a in self.named_buffers()})
        return out

    def load_state_dict(self, state: dict[str, np.ndarray], strict: bool = True) -> None:
        """Copy tensors from ``state`` into this module.

        Raises
        ------
        KeyError
            If ``strict`` and keys are missing or unexpected (all of them are listed).
        ValueError
            If a tensor's shape differs (all mismatches are listed).
        """
        own = dict(self.named_parameters())
        own.update(self.named_buffers())
        missing = sorted(set(own) - set(state))
        extra = sorted(set(state) - set(own))
        bad = [f"{k}: expected {own[k].shape}, got {np.shape(state[k])}" for k in own
               if k in state and tuple(np.shape(state[k])) != own[k].shape]
        problems = []
        if strict and missing:
            problems.append(f"missing keys {missing}")
        if strict and extra:
            problems.append(f"unexpected keys {extra}")
        if problems:
            raise KeyError(f"{type(self).__name__}.load_state_dict: " + "; ".join(problems))
        if bad:
            raise ValueError(f"{type(self).__name__}.load_state_dict: shape mismatch: " + "; ".join(bad))
        for k, arr in own.items():
            if k in state:
                arr[...] = state[k]

    # ------------------------------------------------------------------ init
    def reset_parameters(self, rng: np.random.Generator) -> None:
        """Initialise this module's *own* parameters (not children's). Default: nothing to do."""

    def initialize(self, seed: int) -> "Module":
        """(Re)initialise every parameter in the tree deterministically from ``seed``.

        Each module draws from ``numpy.random.default_rng([seed, crc32(module path)])``, so the result
        depends only on the seed and the module's position, not on evaluation order. Returns self.
        """
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"{type(self).__name__}.initialize: seed must be a non-negative int, got {seed!r}")
        for path, m in self.named_modules():
            m.reset_parameters(np.random.default_rng([int(seed), zlib.crc32(path.encode())]))
        return self

    # ------------------------------------------------------------------ compute
    def forward(self, x: np.ndarray, *, training: bool = False, rng: np.random.Generator | None = None):
        """Return ``(y, cache)``. Subclasses implement this."""
        raise NotImplementedError

    def backward(self, cache, grad_y: np.ndarray, grad_params: np.ndarray) -> np.ndarray:
        """Write parameter gradients into ``grad_params`` and return ``grad_x``. Subclasses implement this."""
        raise NotImplementedError

    def backward_parameters(self, cache, grad_y: np.ndarray, grad_params: np.ndarray) -> None:
        """Write parameter gradients into ``grad_params`` without computing ``grad_x``.

        For a module whose input is data, not the output of a layer being trained (the first layer of a
        network, as PyTorch skips the gradient of an input without ``requires_grad``). The gradients written
        are bitwise those of :meth:`backward`. This default calls :meth:`backward` and drops ``grad_x``;
        Linear, Conv2d, Conv1d and Sequential skip the input gradient's work.
        """
        self.backward(cache, grad_y, grad_params)

    def infer(self, x):
        """Evaluation-mode output for inference, with no cache (no backward can follow).

        The default is ``forward(x, training=False)[0]``; containers override it to run a Conv2d -> BatchNorm2d
        (-> ReLU/ReLU6/Hardswish) chain as one folded convolution (:mod:`sparkdl.nn.fusion`), equal to the unfused
        output to float rounding.
        """
        return self.forward(x, training=False)[0]

    def __call__(self, x: np.ndarray, *, training: bool = False, rng: np.random.Generator | None = None) -> np.ndarray:
        """Output only: :meth:`infer` in evaluation mode, else ``forward(x, training=True, rng=rng)[0]``."""
        if not training:
            return self.infer(x)
        return self.forward(x, training=training, rng=rng)[0]

    # ------------------------------------------------------------------ description
    def get_config(self) -> dict:
        """Constructor keyword arguments that rebuild this module (JSON-serialisable)."""
        return {}

    @classmethod
    def from_config(cls, config: dict, children: dict[str, "Module"] | None = None) -> "Module":
        """Rebuild a module from :meth:`get_config` output and its rebuilt children (in order).

        Leaves: ``cls(**config)``. Containers override this to take their children.
        """
        if children:
            raise ValueError(f"{cls.__name__}.from_config: a leaf module takes no children, got {list(children)}")
        return cls(**config)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())

    def __repr__(self) -> str:
        if not self._modules:
            return f"{type(self).__name__}({self.extra_repr()})"
        lines = [f"  ({name}): " + repr(m).replace("\n", "\n  ") for name, m in self._modules.items()]
        return f"{type(self).__name__}(\n" + "\n".join(lines) + "\n)"
