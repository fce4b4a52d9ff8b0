"""Broadcast of Python objects that plain pickle cannot carry (classes defined in ``__main__`` or a
notebook, e.g. a user's custom layer): serialized with cloudpickle on the driver, deserialized once
per executor Python worker."""
from __future__ import annotations

import uuid

from pyspark import cloudpickle

__all__ = ["CloudBroadcast"]

_LOADED: dict = {}


class CloudBroadcast:
    """Wraps a Spark broadcast of cloudpickled bytes; ``.value`` is the object (cached per worker)."""

    def __init__(self, sc, obj):
        self._bc = sc.broadcast(cloudpickle.dumps(obj))
        self.id = uuid.uuid4().hex

    @property
    def value(self):
        obj = _LOADED.get(self.id)
        if obj is None:
            while len(_LOADED) >= 4:  # keep the few most recent (a fit and its validation)
                _LOADED.pop(next(iter(_LOADED)))
            obj = _LOADED[self.id] = cloudpickle.loads(self._bc.value)
        return obj

    def destroy(self):
        self._bc.destroy()
