"""``MLWritable``/``MLReadable`` for the sparkdl stages, so they save and load alone and inside
``Pipeline``/``PipelineModel`` (which call ``stage.write().save(path)`` and ``Class.load(path)``).

A saved stage is a directory::

    <path>/metadata/   PySpark's DefaultParamsWriter metadata (class, uid, paramMap, defaultParamMap) plus
                       "sparkdl": {"formatVersion", "loss", "optimizer", "modelData"} -- all JSON
    <path>/network/    Parquet, one row per file of a sparkdl.io model directory (metadata.json + weights.npz)

Everything goes through Spark's file system layer, so any path Spark can write (local, HDFS, S3) works, and
nothing is pickled: the network is the :mod:`sparkdl.io` format (JSON architecture + ``.npz`` weights, checked
by sha256 on load), the loss and the optimizer are their JSON configs. ``validationData`` is not saved.
"""
from __future__ import annotations

import logging
import os
import tempfile

from pyspark.ml.util import DefaultParamsReader, DefaultParamsWriter, MLReadable, MLReader, MLWritable, MLWriter

from sparkdl.ml.params import OBJECT_PARAMS

__all__ = ["DLWritable", "DLReadable", "DLWriter", "DLReader", "write_network", "read_network", "FORMAT_VERSION"]

log = logging.getLogger("sparkdl.ml")

FORMAT_VERSION = 1
_NETWORK_SCHEMA = "file string, content binary"


def write_network(spark, network, path: str) -> None:
    """Write ``network`` in the :mod:`sparkdl.io` format as a Parquet table at ``path``."""
    from sparkdl.io import save_model
    with tempfile.TemporaryDirectory() as tmp:
        d = save_model(network, os.path.join(tmp, "network"))
        files = []
        for name in sorted(os.listdir(d)):
            with open(os.path.join(d, name), "rb") as fh:
                files.append((name, fh.read()))
    spark.createDataFrame(files, _NETWORK_SCHEMA).coalesce(1).write.parquet(path)


def read_network(spark, path: str):
    """Read a network written by :func:`write_network` (verified by :func:`sparkdl.io.load_model`)."""
    from sparkdl.io import load_model
    rows = spark.read.parquet(path).collect()
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "network")
        os.mkdir(d)
        for row in rows:
            name = os.path.basename(row["file"])
            with open(os.path.join(d, name), "wb") as fh:
                fh.write(bytes(row["content"]))
        return load_model(d)


def _loss_config(loss) -> dict:
    return {"class": type(loss).__name__, "config": loss.get_config()}


def _loss_from_config(data: dict):
    from sparkdl.nn.loss import LOSS_REGISTRY
    cls = LOSS_REGISTRY.get(data.get("class"))
    if cls is None:
        raise ValueError(f"cannot load the loss: unknown loss class {data.get('class')!r}; import the module that "
                         f"defines it first (known: {sorted(LOSS_REGISTRY)})")
    return cls.from_config(data["config"])


class DLWriter(MLWriter):
    """Saves a sparkdl stage: JSON Params through :class:`DefaultParamsWriter`, the network as data."""

    def __init__(self, instance):
        super().__init__()
        self.instance = instance

    def saveImpl(self, path: str) -> None:
        inst = self.instance
        params = {p.name: v for p, v in inst._paramMap.items() if p.name not in OBJECT_PARAMS}
        extra = {"formatVersion": FORMAT_VERSION, "modelData": inst._model_data()}
        if inst.hasParam("loss") and inst.isSet("loss"):
            extra["loss"] = _loss_config(inst.getOrDefault("loss"))
        if inst.hasParam("optimizer") and inst.isSet("optimizer"):
            from sparkdl.optim import optimizer_config
            extra["optimizer"] = optimizer_config(inst.getOrDefault("optimizer"))
        if inst.hasParam("validationData") and inst.isSet("validationData"):
            log.warning("%s.save: the validationData Param is not saved (a DataFrame is not data of the stage)",
                        type(inst).__name__)
        DefaultParamsWriter.saveMetadata(inst, path, self.sparkSession, extraMetadata={"sparkdl": extra},
                                         paramMap=params)
        network = inst._saved_network()
        if network is not None:
            write_network(self.sparkSession, network, os.path.join(path, "network"))


class DLReader(MLReader):
    """Loads what :class:`DLWriter` saved, checking the class."""

    def __init__(self, cls):
        super().__init__()
        self.cls = cls

    def load(self, path: str):
        metadata = DefaultParamsReader.loadMetadata(path, self.sparkSession)
        expected = f"{self.cls.__module__}.{self.cls.__name__}"
        if metadata["class"] != expected:
            raise ValueError(f"{path} holds a {metadata['class']}, not a {expected}; load it with that class "
                             "(or with PipelineModel.load for a whole pipeline)")
        extra = metadata.get("sparkdl") or {}
        if extra.get("formatVersion", 0) > FORMAT_VERSION:
            raise ValueError(f"{path} was saved in sparkdl stage format {extra.get('formatVersion')}, newer than this "
                             f"sparkdl reads ({FORMAT_VERSION}); upgrade sparkdl")
        network = None
        if extra.get("modelData", {}).get("hasNetwork", False):
            network = read_network(self.sparkSession, os.path.join(path, "network"))
        instance = self.cls._from_saved(network, extra.get("modelData", {}))
        instance._resetUid(metadata["uid"])
        DefaultParamsReader.getAndSetParams(instance, metadata, skipParams=list(OBJECT_PARAMS))
        if "loss" in extra:
            instance._set(loss=_loss_from_config(extra["loss"]))
        if "optimizer" in extra:
            from sparkdl.optim import optimizer_from_config
            layout = network.parameter_layout() if network is not None else None
            instance._set(optimizer=optimizer_from_config(extra["optimizer"], layout))
        return instance


class DLWritable(MLWritable):
    """Mixin: ``write()`` returns a :class:`DLWriter`. Classes define ``_saved_network()`` and ``_model_data()``."""

    def write(self) -> DLWriter:
        """Returns an MLWriter instance for this ML instance."""
        return DLWriter(self)


class DLReadable(MLReadable):
    """Mixin: ``read()`` returns a :class:`DLReader`. Classes define ``_from_saved(network, model_data)``."""

    @classmethod
    def read(cls) -> DLReader:
        """Returns an MLReader instance for this class."""
        return DLReader(cls)
