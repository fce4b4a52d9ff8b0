"""Weights by PyTorch ``state_dict`` names in the safetensors format (the no-pickle standard for tensors).

:func:`save_safetensors` writes ``model.state_dict()`` (parameters and buffers, keyed by the dotted names that
PyTorch uses for the same architecture); :func:`load_safetensors` reads such a file -- e.g. one written by
``safetensors.torch.save_file(torch_model.state_dict(), path)`` -- into a sparkdl model, strictly by default.
Files go through the ``safetensors`` package's numpy API. A ``torch.save`` file (``.pt``/``.pth``: a pickle,
which runs code when loaded) is recognised by its first bytes and refused, never unpickled.

Needs ``pip install 'sparkdl[onnx]'``.

References: safetensors format, https://huggingface.co/docs/safetensors.
"""
from __future__ import annotations

import numpy as np

import sparkdl
from sparkdl.io._format import ModelFormatError
from sparkdl.io._fs import resolve
from sparkdl.nn.module import Module
from sparkdl._extras import require_safetensors

__all__ = ["save_safetensors", "load_safetensors", "refuse_pickle"]


def refuse_pickle(data: bytes, what: str, error=ModelFormatError) -> None:
    """Raise ``error`` if ``data`` is a Python pickle or a ``torch.save`` zip archive (never unpickle it).

    Pickles (protocol 2..5) start with ``0x80 <protocol>``, ``torch.save`` archives with the zip magic
    ``PK\\x03\\x04``; a safetensors file, whose 8-byte header length may start alike, has ``{`` at byte 8.
    """
    is_pickle = data[:1] == b"\x80" and data[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05") and data[8:9] != b"{"
    if is_pickle or data[:4] == b"PK\x03\x04":
        raise error(
            f"{what} looks like a PyTorch .pt/.pth file (a pickle, which can run arbitrary code when loaded); "
            "sparkdl never unpickles. Export the weights with safetensors (safetensors.torch.save_file("
            "model.state_dict(), 'weights.safetensors'), then sparkdl.io.load_safetensors) or the whole network "
            "with torch.onnx.export(..., dynamo=False), then sparkdl.onnx.load")


def save_safetensors(model: Module, path, *, filesystem=None) -> str:
    """Write ``model.state_dict()`` (float32; keys are PyTorch ``state_dict`` names) to a safetensors file.

    Parameters
    ----------
    model : sparkdl.nn.Module
    path : str or os.PathLike
        Target file (a local path or a Hadoop URI, as :func:`sparkdl.io.save_model`). Replaced if it exists.
    filesystem : pyarrow.fs.FileSystem, optional

    Returns
    -------
    str
        The resolved path.

    Raises
    ------
    TypeError
        If ``model`` is not a Module.
    ImportError
        If ``safetensors`` is missing (``pip install 'sparkdl[onnx]'``).
    """
    st = require_safetensors()
    if not isinstance(model, Module):
        raise TypeError(f"save_safetensors: model must be a sparkdl.nn.Module, got {type(model).__name__}")
    storage, path = resolve(path, filesystem)
    tensors = {k: np.ascontiguousarray(v, np.float32) for k, v in model.state_dict().items()}
    data = st.save(tensors, metadata={"format": "pt", "producer": f"sparkdl {sparkdl.__version__}"})
    storage.makedirs(storage.parent(path))
    storage.write_bytes(path, data)
    return path


def _problems(model: Module, arrays: dict, strict: bool) -> list[str]:
    own = model.state_dict()
    missing = [k for k in own if k not in arrays]
    extra = sorted(k for k in arrays if k not in own)
    shapes = [f"{k}: model {own[k].shape}, file {arrays[k].shape}" for k in own
              if k in arrays and arrays[k].shape != own[k].shape]
    kinds = [f"{k}: {a.dtype}" for k, a in arrays.items() if k in own and a.dtype.kind not in "fiub"]
    problems = []
    if strict and missing:
        problems.append(f"missing keys {missing}")
    if strict and extra:
        problems.append(f"unexpected keys {extra}")
    if shapes:
        problems.append("shape mismatches [" + "; ".join(shapes) + "]")
    if kinds:
        problems.append("non-numeric tensors [" + "; ".join(kinds) + "]")
    return problems


def load_safetensors(model: Module, path, *, strict: bool = True, filesystem=None) -> Module:
    """Copy the tensors of a safetensors file into ``model`` by ``state_dict`` name; returns ``model``.

    Values are cast to ``model.dtype`` (e.g. PyTorch's int64 ``num_batches_tracked``, or float16 weights).

    Parameters
    ----------
    model : sparkdl.nn.Module
        Receives the tensors in place.
    path : str or os.PathLike
        A ``.safetensors`` file (a local path or a Hadoop URI, as :func:`sparkdl.io.load_model`).
    strict : bool, default True
        Every model tensor must be in the file and every file tensor in the model. With ``strict=False``
        missing and unexpected keys are ignored (shapes must still match).
    filesystem : pyarrow.fs.FileSystem, optional

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ModelFormatError
        If the file is a pickle (``.pt``/``.pth``: refused, never loaded) or not a readable safetensors file.
    ValueError
        If keys or shapes do not fit (the message lists every missing key, unexpected key and shape mismatch);
        nothing is copied then.
    ImportError
        If ``safetensors`` is missing (``pip install 'sparkdl[onnx]'``).
    """
    st = require_safetensors()
    if not isinstance(model, Module):
        raise TypeError(f"load_safetensors: model must be a sparkdl.nn.Module, got {type(model).__name__}")
    storage, path = resolve(path, filesystem)
    if not storage.exists(path):
        raise FileNotFoundError(f"load_safetensors: no file at {path}")
    data = storage.read_bytes(path)
    refuse_pickle(data, path)
    try:
        arrays = st.load(data)
    except Exception as e:  # SafetensorError, or a header that is not JSON
        raise ModelFormatError(f"{path}: not a readable safetensors file (truncated or corrupted?): "
                               f"{type(e).__name__}: {e}") from None
    problems = _problems(model, arrays, strict)
    if problems:
        raise ValueError(f"load_safetensors: {path} does not fit {type(model).__name__}: " + "; ".join(problems))
    for name, arr in list(model.named_parameters()) + list(model.named_buffers()):
        if name in arrays:
            arr[...] = arrays[name]
    return model
