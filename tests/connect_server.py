"""A Spark Connect server for tests and benchmarks, started from the installed pyspark (its bundled spark-connect
jar): ``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer`` bound to 127.0.0.1 on a
free port, executors running this interpreter. The caller stops it by its process (``terminate``)."""
import os
import socket
import subprocess
import sys
import time

__all__ = ["start_server", "CONNECT_MODE"]

#: pyspark's marker of a Connect client process (``pyspark.sql.functions`` then build Connect columns).
CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(log_path: str, master: str = "local[2]"):
    """``(process, port)`` of a Connect server on 127.0.0.1 (``master``), once its gRPC port accepts connections."""
    import pyspark
    home = os.path.dirname(pyspark.__file__)
    port = _free_port()
    env = dict(os.environ, SPARK_HOME=home, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.pop(CONNECT_MODE, None)
    cmd = [os.path.join(home, "bin", "spark-submit"),
           "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
           "--master", master, "--conf", f"spark.connect.grpc.binding.port={port}",
           "--conf", "spark.connect.grpc.binding.address=127.0.0.1", "--conf", "spark.driver.host=127.0.0.1",
           "--conf", "spark.driver.bindAddress=127.0.0.1", "--conf", "spark.ui.enabled=false",
           "--conf", "spark.python.worker.reuse=true", "--conf", "spark.sql.shuffle.partitions=2",
           "--conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC", "spark-internal"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            with open(log_path, errors="replace") as f:
                raise RuntimeError(f"the Spark Connect server exited ({proc.returncode}):\n{f.read()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, port
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"the Spark Connect server did not listen on port {port} within 180 s (log: {log_path})")
