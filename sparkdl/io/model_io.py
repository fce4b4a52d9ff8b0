"""Save and load models as data: a directory with ``metadata.json`` and ``weights.npz``. No pickles.

Directory format (``format_version`` 1)::

    <path>/metadata.json   {"format": "sparkdl.model", "format_version": 1, "sparkdl_version": "...",
                            "class": "Sequential", "dtype": "float32",
                            "architecture": {"class": name, "config": get_config(),
                                             "children": [[child_name, <architecture>], ...]},
                            "parameters": [[name, shape], ...], "buffers": [[name, shape], ...],
                            "weights": {"file": "weights.npz", "bytes": n, "sha256": hex},
                            "content_sha256": hex}          # sha256 of the canonical JSON of the rest
    <path>/weights.npz     np.savez archive keyed by the flat names of Module.state_dict()

Loading resolves class names only through :data:`sparkdl.nn.module.MODULE_REGISTRY` (every imported
``Module`` subclass; import your own layer classes before loading), rebuilds each module with
``cls.from_config(config, children)``, and reads arrays with ``allow_pickle=False``. Both files carry
checksums, so truncation or any flipped byte raises :class:`ModelFormatError` (a ``ValueError``) rather
than loading wrong weights. Writes are atomic (temp directory + fsync + rename).

References: Keras ``saving/saving_lib.py`` (config + weights archive); PySpark ``ml/util.py`` metadata.
"""
from __future__ import annotations

import json

import numpy as np

import sparkdl
import sparkdl.nn  # noqa: F401  (registers every built-in layer class)
from sparkdl.io._format import ModelFormatError, atomic_write_dir, dump_json, load_json, load_npz, npz_bytes, sha256
from sparkdl.io._fs import resolve
from sparkdl.nn.module import MODULE_REGISTRY, Module

__all__ = ["save_model", "load_model", "load_weights", "get_architecture", "build_model", "FORMAT_VERSION"]

FORMAT = "sparkdl.model"
FORMAT_VERSION = 1
METADATA, WEIGHTS = "metadata.json", "weights.npz"


def _json_default(v):
    if isinstance(v, np.generic):
        return v.item()
    raise TypeError(f"{type(v).__name__} is not JSON-serialisable")


def get_architecture(model: Module, where: str = "model") -> dict:
    """The architecture of ``model`` as JSON-able data: ``{"class", "config", "children"}``, recursively.

    Raises
    ------
    TypeError
        If a module's class is not the one registered under its name, or its ``get_config()`` is not JSON.
    """
    if not isinstance(model, Module):
        raise TypeError(f"{where} must be a sparkdl.nn.Module, got {type(model).__name__}")
    name = type(model).__name__
    if MODULE_REGISTRY.get(name) is not type(model):
        raise TypeError(f"{where}: class {type(model).__module__}.{name} is not the class registered as {name!r} "
                        "in MODULE_REGISTRY (two Module classes share this name?); rename one of them")
    try:
        config = json.loads(json.dumps(model.get_config(), default=_json_default, allow_nan=False))
    except (TypeError, ValueError) as e:
        raise TypeError(f"{where} ({name}): get_config() must return JSON-serialisable values: {e}") from None
    children = [[cname, get_architecture(child, f"{where}.{cname}")] for cname, child in model._modules.items()]
    return {"class": name, "config": config, "children": children}


def build_model(spec, where: str = "model") -> Module:
    """Rebuild a module tree from :func:`get_architecture` output (parameters freshly initialised).

    Raises
    ------
    ModelFormatError
        If the spec is malformed, names a class missing from ``MODULE_REGISTRY``, or a constructor rejects
        its config.
    """
    if not (isinstance(spec, dict) and set(spec) == {"class", "config", "children"}
            and isinstance(spec["class"], str) and isinstance(spec["config"], dict)
            and isinstance(spec["children"], list)
            and all(isinstance(c, list) and len(c) == 2 and isinstance(c[0], str) for c in spec["children"])):
        raise ModelFormatError(f"{where}: malformed architecture entry")
    cls = MODULE_REGISTRY.get(spec["class"])
    if cls is None:
        raise ModelFormatError(f"{where}: unknown module class {spec['class']!r}; import the module that defines "
                               f"it before loading (registered: {sorted(MODULE_REGISTRY)})")
    children = {}
    for cname, cspec in spec["children"]:
        children[cname] = build_model(cspec, f"{where}.{cname}")
    try:
        module = cls.from_config(dict(spec["config"]), children)
    except Exception as e:  # any constructor complaint means the saved config does not fit this class
        raise ModelFormatError(f"{where}: {spec['class']}.from_config failed: {type(e).__name__}: {e}") from None
    if type(module) is not cls or list(module._modules) != list(children):
        raise ModelFormatError(f"{where}: {spec['class']}.from_config rebuilt children {list(module._modules)}, "
                               f"saved children were {list(children)}")
    return module


def _layout_list(named) -> list:
    return [[n, list(a.shape)] for n, a in named]


def _metadata(model: Module, weights: bytes) -> dict:
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "sparkdl_version": sparkdl.__version__,
            "class": type(model).__name__, "dtype": str(model.dtype), "architecture": get_architecture(model),
            "parameters": _layout_list(model.named_parameters()), "buffers": _layout_list(model.named_buffers()),
            "weights": {"file": WEIGHTS, "bytes": len(weights), "sha256": sha256(weights)}}


def write_model_files(storage, dirpath: str, model: Module) -> None:
    """Write ``weights.npz`` then ``metadata.json`` into the existing directory ``dirpath`` (not atomic)."""
    weights = npz_bytes(model.state_dict())
    meta = dump_json(_metadata(model, weights))
    storage.write_bytes(storage.join(dirpath, WEIGHTS), weights)
    storage.write_bytes(storage.join(dirpath, METADATA), meta)


def read_model_files(storage, dirpath: str) -> tuple[dict, dict[str, np.ndarray]]:
    """Read and verify a model directory: returns ``(metadata, arrays)``.

    Raises
    ------
    FileNotFoundError
        If ``dirpath`` does not exist.
    ModelFormatError
        If it is not a sparkdl model directory, or any file is corrupted, truncated or inconsistent.
    """
    if not storage.isdir(dirpath):
        raise FileNotFoundError(f"no saved model at {dirpath}")
    mpath = storage.join(dirpath, METADATA)
    if not storage.exists(mpath):
        raise ModelFormatError(f"{dirpath} is not a sparkdl model directory (no {METADATA})")
    meta = load_json(storage.read_bytes(mpath), mpath)
    if meta.get("format") != FORMAT or not isinstance(meta.get("format_version"), int):
        raise ModelFormatError(f"{mpath}: not a sparkdl model (format {meta.get('format')!r})")
    if meta["format_version"] > FORMAT_VERSION:
        raise ModelFormatError(f"{mpath}: format_version {meta['format_version']} was written by a newer sparkdl "
                               f"({meta.get('sparkdl_version')}); this is {sparkdl.__version__} (reads <= "
                               f"{FORMAT_VERSION}); upgrade sparkdl")
    w = meta.get("weights")
    if not (isinstance(w, dict) and w.get("file") == WEIGHTS and isinstance(w.get("sha256"), str)):
        raise ModelFormatError(f"{mpath}: malformed 'weights' entry")
    wpath = storage.join(dirpath, WEIGHTS)
    if not storage.exists(wpath):
        raise ModelFormatError(f"{dirpath}: {WEIGHTS} is missing")
    arrays = load_npz(storage.read_bytes(wpath), wpath, w["sha256"])
    return meta, arrays


def _mismatches(model: Module, arrays: dict[str, np.ndarray], check_dtype: bool) -> list[str]:
    own = model.state_dict()
    missing = [k for k in own if k not in arrays]
    extra = sorted(k for k in arrays if k not in own)
    shapes = [f"{k}: model {own[k].shape}, saved {arrays[k].shape}" for k in own
              if k in arrays and arrays[k].shape != own[k].shape]
    problems = []
    if missing:
        problems.append(f"missing keys {missing}")
    if extra:
        problems.append(f"unexpected keys {extra}")
    if shapes:
        problems.append("shape mismatches [" + "; ".join(shapes) + "]")
    kinds = [f"{k}: {a.dtype}" for k, a in arrays.items() if a.dtype.kind != "f"
             or (check_dtype and a.dtype != model.dtype)]
    if kinds:
        problems.append(f"arrays must be {model.dtype if check_dtype else 'floating'}, got [" + "; ".join(kinds) + "]")
    return problems


def _assign(model: Module, arrays) -> None:
    for name, arr in list(model.named_parameters()) + list(model.named_buffers()):
        arr[...] = arrays[name]


def save_model(model: Module, path, overwrite: bool = False, *, filesystem=None) -> str:
    """Save ``model`` (architecture, parameters, buffers) to the directory ``path``, atomically.

    Parameters
    ----------
    model : Module
    path : str or os.PathLike
        Target directory (created; its parent is created too): a local path, or a URI that the running Spark
        session's Hadoop configuration serves (``hdfs://``, ``s3a://``, ...; see :mod:`sparkdl.io`).
    overwrite : bool, default False
        Replace an existing saved model at ``path``.
    filesystem : pyarrow.fs.FileSystem, optional

    Returns
    -------
    str
        The resolved path.

    Raises
    ------
    FileExistsError
        If ``path`` exists and ``overwrite`` is False, or exists but is not a saved sparkdl model.
    TypeError
        If the model's configuration is not JSON-serialisable or a class is not registered.
    FileSystemUnavailableError
        For a URI other than ``file://`` without a running classic Spark session with sparkdl's JVM bridge.
    """
    storage, path = resolve(path, filesystem)
    get_architecture(model)  # fail early, before touching the disk
    atomic_write_dir(storage, path, lambda tmp: write_model_files(storage, tmp, model),
                     overwrite=overwrite, marker=METADATA)
    return path


def load_model(path, *, filesystem=None) -> Module:
    """Load a model saved by :func:`save_model`.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ModelFormatError
        If the files are corrupted, truncated, from a newer format, name an unregistered class, or the
        weights do not match the architecture (the message lists every missing key, unexpected key and
        shape mismatch).
    """
    storage, path = resolve(path, filesystem)
    meta, arrays = read_model_files(storage, path)
    model = build_model(meta.get("architecture"))
    dtype = meta.get("dtype")
    if dtype not in ("float32", "float64"):
        raise ModelFormatError(f"{path}: unsupported dtype {dtype!r}")
    if dtype != "float32":
        model.astype(dtype)
    saved = (meta.get("parameters"), meta.get("buffers"))
    rebuilt = (_layout_list(model.named_parameters()), _layout_list(model.named_buffers()))
    if saved != rebuilt:
        raise ModelFormatError(f"{path}: the architecture rebuilds tensors {rebuilt} but the model was saved with "
                               f"{saved} (saved by sparkdl {meta.get('sparkdl_version')})")
    problems = _mismatches(model, arrays, check_dtype=True)
    if problems:
        raise ModelFormatError(f"{path}: weights do not match the architecture: " + "; ".join(problems))
    _assign(model, arrays)
    return model


def load_weights(model: Module, path, *, filesystem=None) -> Module:
    """Copy the parameters and buffers saved at ``path`` into an existing ``model`` (strict); returns it.

    Saved arrays are cast to ``model.dtype``. The architecture in the file is not used, only names/shapes.

    Raises
    ------
    FileNotFoundError, ModelFormatError
        As :func:`load_model`, for unreadable files.
    ValueError
        If names or shapes differ; the message lists every missing key, unexpected key and shape mismatch.
    """
    storage, path = resolve(path, filesystem)
    _, arrays = read_model_files(storage, path)
    problems = _mismatches(model, arrays, check_dtype=False)
    if problems:
        raise ValueError(f"load_weights: {path} does not fit {type(model).__name__}: " + "; ".join(problems))
    _assign(model, arrays)
    return model
