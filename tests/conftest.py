import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pytest


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for the whole run: 2 cores, tasks may be retried (``local[2,3]``).

    The test JVM runs many short jobs on small data: only the C1 JIT and the serial collector (measured on a
    40-iteration fit: 40% less JVM CPU time and 20-45% less wall time than the C2 JIT's compile threads)."""
    from sparkdl.engine import get_or_create_session
    session = get_or_create_session("local[2,3]", app_name="sparkdl-tests",
                                    conf={"spark.ui.enabled": "false", "spark.driver.memory": "2g",
                                          "spark.sql.shuffle.partitions": "4",
                                          "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"})
    yield session
    session.stop()
