"""Broadcast of Python objects that plain pickle cannot carry (classes defined in ``__main__`` or a
notebook, e.g. a user's custom layer): serialized with cloudpickle on the driver, deserialized once
per executor Python worker."""
from __future__ import annotations

import uuid

import numpy as np
from pyspark import cloudpickle

__all__ = ["CloudBroadcast", "WithoutParameters", "loaded"]

_LOADED: dict = {}


def loaded(key: str, load):
    """The object shipped under ``key``, from ``load()`` (cloudpickle bytes) on first use in this process; the few
    most recent objects stay loaded (a fit and its validation)."""
    obj = _LOADED.get(key)
    if obj is None:
        while len(_LOADED) >= 4:
            _LOADED.pop(next(iter(_LOADED)))
        obj = _LOADED[key] = cloudpickle.loads(load())
    return obj


class CloudBroadcast:
    """Wraps a Spark broadcast of cloudpickled bytes; ``.value`` is the object (cached per worker)."""

    def __init__(self, sc, obj):
        self._bc = sc.broadcast(cloudpickle.dumps(obj))
        self.id = uuid.uuid4().hex

    @property
    def value(self):
        return loaded(self.id, lambda: self._bc.value)

    def destroy(self):
        self._bc.destroy()


class _Zeros:
    """Pickles as ``np.zeros(shape, dtype)``."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype

    def __reduce__(self):
        return np.zeros, (self.shape, self.dtype)


class WithoutParameters:
    """Pickles ``model`` (a :class:`~sparkdl.nn.Module`) without the values of its parameters: it unpickles as the
    model itself, not this wrapper, with zeros in their place (buffers keep their values).

    For what a fit ships once: every gradient task sets the parameters from its iteration's weights anyway, and
    a 100M-parameter model's copy was 400 MB of broadcast pieces that the driver JVM held for the whole fit
    (sparkdl sessions do not compress broadcasts). ``model`` is not changed.
    """

    def __init__(self, model):
        self.model = model

    def __reduce__(self):
        saved = []
        for _, m in self.model.named_modules():
            params = m._tensors["parameters"]
            saved.append((params, dict(params)))
            for name, a in params.items():
                params[name] = _Zeros(a.shape, a.dtype)
        try:
            data = cloudpickle.dumps(self.model)
        finally:
            for params, values in saved:
                params.update(values)
        return cloudpickle.loads, (data,)
