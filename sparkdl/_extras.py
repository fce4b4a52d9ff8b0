"""The optional dependencies of model exchange, imported on first use with an error naming the extra."""
from __future__ import annotations

import importlib

__all__ = ["require_onnx", "require_safetensors"]


def _require(module: str, what: str):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{what} needs the '{module.split('.')[0]}' package, which is not installed: "
                          f"pip install 'sparkdl[onnx]' (installs onnx and safetensors)") from e


def require_onnx():
    """The ``onnx`` module (protobufs, checker, shape inference), or ImportError naming ``sparkdl[onnx]``."""
    return _require("onnx", "ONNX import/export (sparkdl.onnx)")


def require_safetensors():
    """The ``safetensors.numpy`` module, or ImportError naming ``sparkdl[onnx]``."""
    return _require("safetensors.numpy", "safetensors weights (sparkdl.io.load_safetensors/save_safetensors)")
