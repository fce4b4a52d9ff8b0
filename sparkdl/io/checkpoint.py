"""Training checkpoints: everything needed to resume a run bit-for-bit.

A checkpoint directory holds one sub-directory per saved iteration plus a pointer::

    <checkpoint_dir>/ckpt-<iteration>/checkpoint.json   counters, optimizer config, encoded state trees,
                                                        sha256 of state.npz, content checksum
                                    /state.npz          every numpy array of those trees (allow_pickle=False)
                                    /model/             a saved model (see sparkdl.io.model_io)
    <checkpoint_dir>/latest                             "ckpt-<iteration>\\n", replaced atomically

Saved: the model; the optimizer's ``get_config()`` and its state (any plain-data tree, e.g.
``{(lo, hi): {"m": array, "v": array, "step": int}}`` — tuple keys survive); the schedule's
``state_dict()``; a ``numpy.random.Generator``'s bit-generator state; ``epoch``, ``iteration``,
``samples_seen``; and user ``extras`` (plain data). Arrays round-trip bit-exactly.

Each ``ckpt-<iteration>`` appears atomically (temp dir, fsync, rename); ``latest`` is updated only after
that (temp file + replace), so a crash at any point leaves the previous complete checkpoint
loadable. ``keep_last=N`` prunes older checkpoints, never the one ``latest`` names. One writer per
checkpoint directory is assumed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import sparkdl
from sparkdl.io._format import (ModelFormatError, atomic_write_dir, decode_tree, dump_json, encode_tree, load_json,
                                load_npz, npz_bytes, sha256)
from sparkdl.io._fs import replace_file, resolve
from sparkdl.io.model_io import load_model, write_model_files
from sparkdl.nn.module import Module

__all__ = ["Checkpoint", "save_checkpoint", "load_checkpoint", "list_checkpoints"]

FORMAT, FORMAT_VERSION = "sparkdl.checkpoint", 1
DOC, STATE, MODEL_DIR, LATEST = "checkpoint.json", "state.npz", "model", "latest"
_NAME = re.compile(r"^ckpt-(\d+)$")
_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")


@dataclass
class Checkpoint:
    """A loaded checkpoint.

    ``optimizer_config`` is ``{"class", "config", "param_groups"}`` (feed it to
    ``sparkdl.optim.optimizer_from_config(cfg, model.parameter_layout())``); ``optimizer_state``,
    ``schedule_state`` and ``extras`` are the saved trees; ``rng`` is a fresh Generator in the saved state.
    """

    path: str
    model: Module
    iteration: int
    epoch: int = 0
    samples_seen: int = 0
    optimizer_config: dict | None = None
    optimizer_state: Any = None
    schedule_state: Any = None
    rng: np.random.Generator | None = None
    extras: dict = field(default_factory=dict)


def _count(name, v) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
        raise ValueError(f"save_checkpoint: {name} must be a non-negative int, got {v!r}")
    return int(v)


def _document(iteration, epoch, samples_seen, optimizer, optimizer_state, schedule, rng, extras, arrays):
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise TypeError(f"save_checkpoint: rng must be a numpy.random.Generator or None, got {type(rng).__name__}")
    if extras is not None and not isinstance(extras, dict):
        raise TypeError(f"save_checkpoint: extras must be a dict or None, got {type(extras).__name__}")
    opt = None
    if optimizer is not None:
        cfg = {"class": type(optimizer).__name__,
               "config": optimizer.get_config() if hasattr(optimizer, "get_config") else {},
               "param_groups": optimizer.param_groups_config() if hasattr(optimizer, "param_groups_config") else None}
        opt = encode_tree(cfg, arrays, "optimizer config")
    sched = None
    if schedule is not None:
        if not hasattr(schedule, "state_dict"):
            raise TypeError(f"save_checkpoint: schedule {type(schedule).__name__} has no state_dict()")
        sched = {"class": type(schedule).__name__, "state": encode_tree(schedule.state_dict(), arrays, "schedule")}
    rng_doc = None
    if rng is not None:
        rng_doc = {"bit_generator": type(rng.bit_generator).__name__,
                   "state": encode_tree(rng.bit_generator.state, arrays, "rng state")}
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "sparkdl_version": sparkdl.__version__,
            "iteration": iteration, "epoch": epoch, "samples_seen": samples_seen, "optimizer": opt,
            "optimizer_state": encode_tree(optimizer_state, arrays, "optimizer_state"), "schedule": sched,
            "rng": rng_doc, "extras": encode_tree(extras or {}, arrays, "extras")}


def save_checkpoint(checkpoint_dir, model: Module, *, iteration: int, epoch: int = 0, samples_seen: int = 0,
                    optimizer=None, optimizer_state=None, schedule=None, rng=None, extras: dict | None = None,
                    keep_last: int | None = None, filesystem=None) -> str:
    """Write ``<checkpoint_dir>/ckpt-<iteration>`` atomically, then point ``latest`` at it.

    Parameters
    ----------
    checkpoint_dir : str or os.PathLike
        Directory holding the checkpoints (created if needed).
    model : Module
    iteration, epoch, samples_seen : int
        Counters (non-negative); ``iteration`` names the checkpoint. Re-saving an iteration replaces it.
    optimizer : optional
        ``{"class", "config": get_config(), "param_groups"}`` is stored (the format of
        ``sparkdl.optim.optimizer_config``, so ``optimizer_from_config`` rebuilds it).
    optimizer_state : plain-data tree, optional
        E.g. ``{(lo, hi): shard_state}``.
    schedule : optional
        Its ``state_dict()`` is stored.
    rng : numpy.random.Generator, optional
        Its bit-generator state is stored.
    extras : dict, optional
        User data (plain-data tree).
    keep_last : int, optional
        Keep only the newest ``keep_last`` checkpoints (>= 1).
    filesystem : pyarrow.fs.FileSystem, optional
        Overrides the file system picked from ``checkpoint_dir`` (a local path, or a URI of the running Spark
        session's Hadoop file systems, see :mod:`sparkdl.io`).

    Returns
    -------
    str
        Path of the new checkpoint.

    Raises
    ------
    TypeError, ValueError
        On bad arguments or state that is not plain data.
    """
    iteration, epoch, samples_seen = (_count(n, v) for n, v in
                                      (("iteration", iteration), ("epoch", epoch), ("samples_seen", samples_seen)))
    if keep_last is not None and (isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1):
        raise ValueError(f"save_checkpoint: keep_last must be an int >= 1 or None, got {keep_last!r}")
    storage, root = resolve(checkpoint_dir, filesystem)
    arrays: dict[str, np.ndarray] = {}
    doc = _document(iteration, epoch, samples_seen, optimizer, optimizer_state, schedule, rng, extras, arrays)
    state = npz_bytes(arrays)
    doc["state_file"] = {"file": STATE, "bytes": len(state), "sha256": sha256(state)}
    body = dump_json(doc)

    def write(tmp):
        storage.makedirs(storage.join(tmp, MODEL_DIR))
        write_model_files(storage, storage.join(tmp, MODEL_DIR), model)
        storage.sync_dir(storage.join(tmp, MODEL_DIR))
        storage.write_bytes(storage.join(tmp, STATE), state)
        storage.write_bytes(storage.join(tmp, DOC), body)

    name = f"ckpt-{iteration}"
    path = storage.join(root, name)
    atomic_write_dir(storage, path, write, overwrite=True, marker=DOC)
    replace_file(storage, storage.join(root, LATEST), (name + "\n").encode())
    if keep_last is not None:
        for it in list_checkpoints(root, filesystem=storage)[:-keep_last]:
            if it != iteration:
                storage.rmtree(storage.join(root, f"ckpt-{it}"))
    return path


def list_checkpoints(checkpoint_dir, *, filesystem=None) -> list[int]:
    """Iterations of the complete checkpoints in ``checkpoint_dir``, ascending ([] if none)."""
    storage, root = resolve(checkpoint_dir, filesystem)
    if not storage.isdir(root):
        return []
    its = [int(m.group(1)) for m in map(_NAME.match, storage.listdir(root)) if m]
    return sorted(it for it in its if storage.exists(storage.join(root, f"ckpt-{it}", DOC)))


def _pick(storage, root, which) -> str:
    if which == "latest":
        ptr = storage.join(root, LATEST)
        if storage.exists(ptr):
            name = storage.read_bytes(ptr).decode("utf-8", "replace").strip()
            if _NAME.match(name) and storage.exists(storage.join(root, name, DOC)):
                return name
        its = list_checkpoints(root, filesystem=storage)  # no (valid) pointer: newest complete checkpoint
        if not its:
            raise FileNotFoundError(f"no checkpoint in {root}")
        return f"ckpt-{its[-1]}"
    if isinstance(which, (int, np.integer)) and not isinstance(which, bool):
        name = f"ckpt-{int(which)}"
    elif isinstance(which, str) and _NAME.match(which):
        name = which
    else:
        raise ValueError(f"load_checkpoint: which must be 'latest', an iteration or 'ckpt-<iteration>', got {which!r}")
    if not storage.exists(storage.join(root, name)):
        raise FileNotFoundError(f"no checkpoint {name} in {root} (have {list_checkpoints(root, filesystem=storage)})")
    return name


def _rng_from(doc, arrays, what):
    if doc is None:
        return None
    name = doc.get("bit_generator") if isinstance(doc, dict) else None
    if name not in _BIT_GENERATORS:
        raise ModelFormatError(f"{what}: unsupported bit generator {name!r} (supported: {_BIT_GENERATORS})")
    bitgen = getattr(np.random, name)()
    try:
        bitgen.state = decode_tree(doc.get("state"), arrays, what)
    except (TypeError, ValueError, KeyError) as e:
        raise ModelFormatError(f"{what}: bad rng state: {e}") from None
    return np.random.Generator(bitgen)


def load_checkpoint(checkpoint_dir, which="latest", *, filesystem=None) -> Checkpoint:
    """Load a checkpoint written by :func:`save_checkpoint`.

    Parameters
    ----------
    which : 'latest', int or str
        ``'latest'`` (what the ``latest`` pointer names, else the newest complete checkpoint), an
        iteration, or a ``'ckpt-<iteration>'`` name.

    Raises
    ------
    FileNotFoundError
        If there is no such checkpoint.
    ModelFormatError
        If any of its files is corrupted, truncated or inconsistent.
    """
    storage, root = resolve(checkpoint_dir, filesystem)
    path = storage.join(root, _pick(storage, root, which))
    dpath = storage.join(path, DOC)
    doc = load_json(storage.read_bytes(dpath), dpath)
    if doc.get("format") != FORMAT or not isinstance(doc.get("format_version"), int):
        raise ModelFormatError(f"{dpath}: not a sparkdl checkpoint")
    if doc["format_version"] > FORMAT_VERSION:
        raise ModelFormatError(f"{dpath}: written by a newer sparkdl ({doc.get('sparkdl_version')}); upgrade")
    sf = doc.get("state_file")
    if not isinstance(sf, dict) or not isinstance(sf.get("sha256"), str):
        raise ModelFormatError(f"{dpath}: malformed 'state_file' entry")
    spath = storage.join(path, STATE)
    if not storage.exists(spath):
        raise ModelFormatError(f"{path}: {STATE} is missing")
    arrays = load_npz(storage.read_bytes(spath), spath, sf["sha256"])
    model = load_model(storage.join(path, MODEL_DIR), filesystem=storage)
    opt = doc.get("optimizer")
    sched = doc.get("schedule")
    return Checkpoint(
        path=path, model=model, iteration=doc["iteration"], epoch=doc["epoch"], samples_seen=doc["samples_seen"],
        optimizer_config=decode_tree(opt, arrays, dpath),
        optimizer_state=decode_tree(doc.get("optimizer_state"), arrays, dpath),
        schedule_state=decode_tree(sched["state"], arrays, dpath) if sched else None,
        rng=_rng_from(doc.get("rng"), arrays, dpath), extras=decode_tree(doc.get("extras"), arrays, dpath))
