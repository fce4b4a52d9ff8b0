"""Run by tests/test_bridge.py in its own process (a Spark master of its own), printing one JSON line:

* ``cluster``: a session from ``get_or_create_session`` on ``local-cluster[2,1,1024]`` (two executor JVMs): the
  bridge version seen by the driver and by tasks on the executors, and the JVMs the tasks ran in;
* ``missing``: a plain ``SparkSession`` without the jar, whose driver thread's class loader takes no jars at run time
  (the JVM's application class loader): the error ``sparkdl.jvm.bridge`` raises;
* ``extra-jars``: ``get_or_create_session`` given another ``spark.jars`` entry: the resulting ``spark.jars``."""
import json
import sys

from pyspark.sql import SparkSession

from sparkdl import jvm
from sparkdl.engine import get_or_create_session

CONF = {"spark.ui.enabled": "false", "spark.driver.memory": "1g"}

if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "cluster":
        spark = get_or_create_session("local-cluster[2,1,1024]", conf=CONF)
        sc = spark.sparkContext
        b = jvm.bridge(sc)
        tasks = [t.split(" ") for t in b.taskVersions(sc._jsc, 8)]
        print(json.dumps({"driver_version": b.version(), "driver_jvm": b.jvmName(),
                          "task_versions": sorted({v for _, v in tasks}), "task_jvms": sorted({j for j, _ in tasks})}))
    elif mode == "missing":
        spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
        sc = spark.sparkContext
        sc._jvm.java.lang.Thread.currentThread().setContextClassLoader(
            sc._jvm.java.lang.ClassLoader.getSystemClassLoader())
        try:
            jvm.bridge(spark.sparkContext)
            print(json.dumps({"error": None}))
        except jvm.BridgeMissingError as e:
            print(json.dumps({"error": str(e), "type": type(e).__name__,
                              "is_runtime_error": isinstance(e, RuntimeError)}))
    elif mode == "extra-jars":
        other = sys.argv[2]
        spark = get_or_create_session("local[1]", conf={**CONF, "spark.jars": other})
        sc = spark.sparkContext
        print(json.dumps({"spark.jars": sc.getConf().get("spark.jars"), "version": jvm.bridge(sc).version()}))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    spark.stop()
