"""External tensor data, read only when the caller names the directory that holds it.

PyTorch's default (dynamo) exporter writes the weights of a model saved to a path into a second file beside
the ``.onnx`` file (``torch.onnx.export(..., external_data=True)``, its default). A model file is untrusted
input, so sparkdl never follows such a reference on its own: :func:`sparkdl.onnx.load` refuses it unless the
caller passes ``external_data_dir``, the one directory the caller trusts to hold the data. Then every
reference must name a regular file inside that directory (a relative path without ``..``; symbolic links
resolved and still inside), its ``offset``/``length`` must lie within the file, and all bytes read count
against ``max_file_bytes`` together with the model file. The data are copied into the tensors (``raw_data``)
before ``onnx.checker`` or anything else reads the model, so the rest of the import sees a self-contained file.

Reference: ONNX external data, https://onnx.ai/onnx/repo-docs/ExternalData.html
"""
from __future__ import annotations

import os

__all__ = ["inline_external_data"]


def _entries(tensor, where: str, error) -> dict:
    entries = {e.key: e.value for e in tensor.external_data}
    unknown = sorted(set(entries) - {"location", "offset", "length", "checksum", "basepath"})
    if unknown or "location" not in entries:
        raise error(f"{where}: external data entries {sorted(entries)}; expected 'location' and optionally "
                    "'offset', 'length'")
    for key in ("offset", "length"):
        if key in entries and not entries[key].isdigit():
            raise error(f"{where}: external data {key} must be a non-negative integer, got {entries[key]!r}")
    return entries


def _resolve(directory: str, location: str, where: str, error) -> str:
    """The real path of ``location`` inside ``directory``, or an error naming both."""
    parts = location.replace("\\", "/").split("/")
    if os.path.isabs(location) or location.startswith(("/", "\\")) or ".." in parts or not location:
        raise error(f"{where}: external data location {location!r} is not a plain relative path; only files "
                    f"inside external_data_dir ({directory}) are read")
    root = os.path.realpath(directory)
    path = os.path.realpath(os.path.join(root, *parts))
    if os.path.commonpath([root, path]) != root:
        raise error(f"{where}: external data location {location!r} leads outside external_data_dir ({directory})")
    if not os.path.isfile(path):
        raise error(f"{where}: external data file {location!r} not found in external_data_dir ({directory})")
    return path


def inline_external_data(tensors, directory, budget: int, what: str, error) -> int:
    """Copy every external tensor's bytes into the tensor, reading only files inside ``directory``.

    Parameters
    ----------
    tensors : iterable of (TensorProto, str)
        Each tensor of the model with where it sits (for messages); only external ones are touched.
    directory : str or os.PathLike
        The directory the caller trusts (``external_data_dir``).
    budget : int
        Bytes that may still be read (``max_file_bytes`` minus the model file's size).
    what : str
        The model's name in messages.
    error : type
        The exception raised (:class:`~sparkdl.onnx.OnnxImportError`).

    Returns
    -------
    int
        Bytes read.

    Raises
    ------
    error
        For a location outside ``directory``, a missing file, an offset/length outside the file, or more bytes
        than ``budget``; before any byte of that tensor is read.
    """
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise error(f"{what}: external_data_dir {directory!r} is not a directory")
    total = 0
    for tensor, where in tensors:
        if tensor.data_location != 1 and not tensor.external_data:
            continue
        where = f"{what}: {where}"
        entries = _entries(tensor, where, error)
        path = _resolve(directory, entries["location"], where, error)
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            offset = int(entries.get("offset", 0))
            length = int(entries.get("length", size - offset))
            if offset + length > size:
                raise error(f"{where}: external data asks for bytes {offset}..{offset + length} of "
                            f"{entries['location']!r}, which has {size}")
            if total + length > budget:
                raise error(f"{where}: external data would bring the bytes read to {total + length:,}, over the "
                            f"limit of {budget:,} left of max_file_bytes; raise it with sparkdl.onnx.load(..., "
                            "max_file_bytes=N) if you trust the files")
            f.seek(offset)
            data = f.read(length)
        total += length
        del tensor.external_data[:]
        tensor.data_location = 0  # DEFAULT: the data now sit in the tensor itself
        tensor.raw_data = data
    return total
