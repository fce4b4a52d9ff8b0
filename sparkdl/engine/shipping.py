"""Can an object be sent to the executors? Checked on the driver before any Spark job, naming the culprit.

The model, the loss and the optimizer travel to the executors pickled with cloudpickle (see
:mod:`sparkdl.engine.broadcast`). A custom layer that keeps a lock, an open file, a socket or the SparkContext
in an attribute cannot be pickled; left alone that fails inside the first job with a message about the
broadcast. :func:`check_shippable` fails at once instead, naming the attribute path (``model.3.resource``:
child ``3`` of the model, its attribute ``resource``).
"""
from __future__ import annotations

from pyspark import cloudpickle

__all__ = ["check_shippable"]

_MAX_DEPTH = 12


def _dumps_error(obj) -> Exception | None:
    try:
        cloudpickle.dumps(obj)
    except Exception as e:  # TypeError for locks and files, RuntimeError for a SparkContext, ...
        return e
    return None


def _children(obj):
    """(suffix, value) of what ``obj`` holds: a Module's children by name and its other attributes, the items
    of containers, the attributes of plain objects."""
    from sparkdl.nn.module import Module
    if isinstance(obj, Module):
        for name, child in obj._modules.items():
            yield f".{name}", child
        for name, value in vars(obj).items():
            if name not in ("_modules", "_tensors", "_flat", "_child_ranges", "_dtype"):
                yield f".{name}", value
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield f"[{key!r}]", value
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for i, value in enumerate(obj):
            yield f"[{i}]", value
    elif hasattr(obj, "__dict__") and not isinstance(obj, type) and _pickled_by_dict(type(obj)):
        for name, value in vars(obj).items():
            yield f".{name}", value


def _pickled_by_dict(cls) -> bool:
    """Plain objects are pickled through their ``__dict__``; a class with its own pickling hooks (a SparkContext
    refuses in ``__getnewargs__``) is reported as a whole."""
    hooks = ("__reduce__", "__reduce_ex__", "__getstate__", "__getnewargs__", "__getnewargs_ex__")
    return all(getattr(cls, h, None) is getattr(object, h, None) for h in hooks)


def _culprit(obj, path: str, error: Exception, depth: int = 0):
    """The deepest ``(path, value, error)`` under ``obj`` that fails to pickle."""
    if depth < _MAX_DEPTH:
        for suffix, value in _children(obj):
            e = _dumps_error(value)
            if e is not None:
                return _culprit(value, path + suffix, e, depth + 1)
    return path, obj, error


def check_shippable(obj, name: str, where: str) -> None:
    """Raise if ``obj`` cannot be pickled for the executors.

    Parameters
    ----------
    obj : object
        The model, loss or optimizer.
    name : str
        How the message calls ``obj`` (the root of the attribute path), e.g. ``"model"``.
    where : str
        The caller, e.g. ``"DistributedTrainer.fit"``.

    Raises
    ------
    TypeError
        Naming the attribute path of the value that cannot be pickled, its type and the fix.
    """
    error = _dumps_error(obj)
    if error is None:
        return
    path, value, cause = _culprit(obj, name, error)
    kind = type(value)
    raise TypeError(f"{where}: {path} holds a {kind.__module__}.{kind.__qualname__}, which cannot be sent to the "
                    f"executors ({type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''}). "
                    "Create such resources when they are first used on the executor (e.g. lazily in forward, "
                    "dropping them in __getstate__) instead of keeping them on the layer, or remove them before fit"
                    ) from None
