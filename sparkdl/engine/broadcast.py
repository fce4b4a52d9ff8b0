"""Broadcast of Python objects that plain pickle cannot carry (classes defined in ``__main__`` or a
notebook, e.g. a user's custom layer): serialized with cloudpickle on the driver, deserialized once
per executor Python worker."""
from __future__ import annotations

import uuid

from pyspark import cloudpickle

__all__ = ["CloudBroadcast", "loaded"]

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
