"""Byte-level building blocks shared by model files and checkpoints.

* self-checksummed JSON documents (any corruption of a ``.json`` file is detected, not just syntax errors),
* ``.npz`` archives written to bytes with their sha256, read back with ``allow_pickle=False`` only,
* an encoder of "plain data" trees (dicts, lists, tuples, numbers, strings, numpy arrays and scalars)
  into JSON plus named arrays, exact to the bit,
* atomic directory writes: build in a temp directory next to the target, fsync, rename.

Every reading error surfaces as :class:`ModelFormatError`.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import uuid
import zipfile

import numpy as np

__all__ = ["ModelFormatError", "dump_json", "load_json", "npz_bytes", "load_npz", "encode_tree", "decode_tree",
           "atomic_write_dir", "sha256"]

_HASH_KEY = "content_sha256"


class ModelFormatError(ValueError):
    """A saved model or checkpoint is truncated, corrupted, inconsistent, or from an unknown format.

    Raised instead of any lower-level parsing error (JSON, zip, npy) so callers catch one exception.
    """


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _canonical(doc: dict) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def dump_json(doc: dict) -> bytes:
    """Pretty JSON of ``doc`` plus ``content_sha256``, the sha256 of the canonical form of ``doc``."""
    body = dict(doc)
    body[_HASH_KEY] = sha256(_canonical(doc))
    return (json.dumps(body, indent=1, ensure_ascii=True, allow_nan=False) + "\n").encode()


def load_json(data: bytes, what: str) -> dict:
    """Parse and verify a document written by :func:`dump_json`.

    Raises
    ------
    ModelFormatError
        If the bytes are not UTF-8 JSON of an object, or the embedded checksum does not match.
    """
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ModelFormatError(f"{what}: not valid JSON (truncated or corrupted file): {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get(_HASH_KEY), str):
        raise ModelFormatError(f"{what}: not a sparkdl document (no {_HASH_KEY!r} field)")
    expected = doc.pop(_HASH_KEY)
    try:
        actual = sha256(_canonical(doc))
    except ValueError as e:  # e.g. NaN smuggled in by corruption
        raise ModelFormatError(f"{what}: corrupted content: {e}") from None
    if actual != expected:
        raise ModelFormatError(f"{what}: checksum mismatch (file corrupted or edited): expected {expected}, "
                               f"content hashes to {actual}")
    return doc


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """An uncompressed ``.npz`` archive of ``arrays`` as bytes."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def load_npz(data: bytes, what: str, expected_sha256: str | None = None) -> dict[str, np.ndarray]:
    """Read an ``.npz`` archive from bytes (never unpickling), after checking its sha256 if given.

    Raises
    ------
    ModelFormatError
        On a checksum mismatch or any archive/array parsing error, or object arrays.
    """
    if expected_sha256 is not None and sha256(data) != expected_sha256:
        raise ModelFormatError(f"{what}: checksum mismatch (file truncated or corrupted): expected "
                               f"{expected_sha256}, got {sha256(data)}")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile, zipfile.LargeZipFile,
            NotImplementedError, RuntimeError, MemoryError) as e:
        raise ModelFormatError(f"{what}: unreadable archive: {type(e).__name__}: {e}") from None


# ---------------------------------------------------------------------------------------------- plain-data trees
def encode_tree(obj, arrays: dict[str, np.ndarray], where: str = "value"):
    """Encode a plain-data tree as JSON-able data; numpy arrays/scalars go into ``arrays`` by generated key.

    Supported: None, bool, int, float (incl. nan/inf), str, list, tuple, dict (any encodable keys),
    numpy arrays and numpy scalars. Tuples stay tuples and dict keys keep their types.

    Raises
    ------
    TypeError
        On anything else (names the offending location).
    """
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, np.ndarray) or isinstance(obj, np.generic):
        if np.asarray(obj).dtype.hasobject:
            raise TypeError(f"{where}: object arrays cannot be saved")
        key = f"a{len(arrays)}"
        arrays[key] = np.asarray(obj)
        return {"__ndarray__" if isinstance(obj, np.ndarray) else "__npscalar__": key}
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else {"__float__": repr(obj)}
    if isinstance(obj, list):
        return [encode_tree(v, arrays, f"{where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, tuple):
        return {"__tuple__": [encode_tree(v, arrays, f"{where}[{i}]") for i, v in enumerate(obj)]}
    if isinstance(obj, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in obj):
            return {k: encode_tree(v, arrays, f"{where}[{k!r}]") for k, v in obj.items()}
        return {"__dict__": [[encode_tree(k, arrays, f"{where} key"), encode_tree(v, arrays, f"{where}[{k!r}]")]
                             for k, v in obj.items()]}
    raise TypeError(f"{where}: cannot save a {type(obj).__name__}; use numbers, strings, lists, tuples, "
                    "dicts and numpy arrays")


def decode_tree(obj, arrays: dict[str, np.ndarray], what: str):
    """Inverse of :func:`encode_tree`. Raises :class:`ModelFormatError` on malformed input."""
    if isinstance(obj, list):
        return [decode_tree(v, arrays, what) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if len(obj) == 1:
        (tag, val), = obj.items()
        if tag in ("__ndarray__", "__npscalar__"):
            if not isinstance(val, str) or val not in arrays:
                raise ModelFormatError(f"{what}: reference to missing array {val!r}")
            arr = arrays[val]
            return arr[()] if tag == "__npscalar__" else arr
        if tag == "__float__":
            if val not in ("nan", "inf", "-inf"):
                raise ModelFormatError(f"{what}: bad float literal {val!r}")
            return float(val)
        if tag == "__tuple__" and isinstance(val, list):
            return tuple(decode_tree(v, arrays, what) for v in val)
        if tag == "__dict__" and isinstance(val, list):
            if not all(isinstance(kv, list) and len(kv) == 2 for kv in val):
                raise ModelFormatError(f"{what}: malformed dict encoding")
            out = {}
            for k, v in val:
                k = decode_tree(k, arrays, what)
                try:
                    out[k] = decode_tree(v, arrays, what)
                except TypeError:  # unhashable key
                    raise ModelFormatError(f"{what}: malformed dict key {k!r}") from None
            return out
    return {k: decode_tree(v, arrays, what) for k, v in obj.items()}


# ---------------------------------------------------------------------------------------------- atomic directories
def atomic_write_dir(storage, path: str, write_files, *, overwrite: bool, marker: str) -> None:
    """Create directory ``path`` atomically: ``write_files(tmp_dir)`` fills a temp sibling, then rename.

    With ``overwrite=True`` an existing ``path`` is replaced only if it contains ``marker`` (i.e. it is a
    sparkdl artefact, never an unrelated directory). Readers never see a half-written ``path``; during a
    replace there is a short window in which ``path`` is absent (the old one is renamed aside, then the new
    one into place, then the old one deleted).

    Raises
    ------
    FileExistsError
        If ``path`` exists and ``overwrite`` is False, or it exists but is not a sparkdl artefact.
    """
    parent, base = storage.parent(path), storage.name(path)
    if not base:
        raise ValueError(f"invalid target path {path!r}")

    def check_target():
        if storage.exists(path):
            if not overwrite:
                raise FileExistsError(f"{path} already exists; pass overwrite=True to replace it")
            if not storage.isdir(path) or not storage.exists(storage.join(path, marker)):
                raise FileExistsError(f"{path} exists and is not a sparkdl artefact (no {marker}); refusing to "
                                      "replace it — choose another path or remove it yourself")
            return True
        return False

    check_target()
    storage.makedirs(parent)
    token = uuid.uuid4().hex[:12]
    tmp = storage.join(parent, f".{base}.tmp-{token}")
    old = storage.join(parent, f".{base}.old-{token}")
    storage.makedirs(tmp)
    try:
        write_files(tmp)
        storage.sync_dir(tmp)
        if check_target():
            storage.rename(path, old)
            try:
                storage.rename(tmp, path)
            except BaseException:
                storage.rename(old, path)
                raise
            storage.sync_dir(parent)
            storage.rmtree(old)
        else:
            storage.rename(tmp, path)
        storage.sync_dir(parent)
    except BaseException:
        if storage.exists(tmp):
            storage.rmtree(tmp)
        raise
