"""Persistence as data: saved models and training checkpoints (JSON metadata + ``.npz`` arrays, no pickles).

- :func:`save_model` / :func:`load_model` / :func:`load_weights` — a model directory
  (``metadata.json`` + ``weights.npz``), see :mod:`sparkdl.io.model_io`.
- :func:`save_checkpoint` / :func:`load_checkpoint` / :func:`list_checkpoints` — resumable training state,
  see :mod:`sparkdl.io.checkpoint`.
- :func:`save_safetensors` / :func:`load_safetensors` — weights by PyTorch ``state_dict`` names in the
  safetensors format (needs ``sparkdl[onnx]``), see :mod:`sparkdl.io.safetensors_io`.
- :class:`ModelFormatError` — the one exception for corrupted, truncated or inconsistent files.

Paths are local paths (or ``file://`` URIs), or URIs of any file system the running Spark session's Hadoop
configuration serves (``hdfs://``, ``s3a://``, ``abfs://``, ``gs://``, ...; written through Hadoop's
``FileSystem`` API on the driver JVM with the same temp-name-then-rename discipline and SHA-256 checks; see
:mod:`sparkdl.io._fs`). Such a URI without a running classic session raises :class:`FileSystemUnavailableError`.
Every function also takes ``filesystem=`` (a ``pyarrow.fs.FileSystem``).
"""
from sparkdl.io._format import ModelFormatError
from sparkdl.io._fs import FileSystemUnavailableError
from sparkdl.io.checkpoint import Checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from sparkdl.io.model_io import build_model, get_architecture, load_model, load_weights, save_model
from sparkdl.io.safetensors_io import load_safetensors, save_safetensors

__all__ = ["ModelFormatError", "FileSystemUnavailableError", "save_model", "load_model", "load_weights", "get_architecture", "build_model",
           "Checkpoint", "save_checkpoint", "load_checkpoint", "list_checkpoints", "save_safetensors",
           "load_safetensors"]
