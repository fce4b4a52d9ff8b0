"""An executor killed mid-training (local-cluster master, own process): training recovers and the final
weights are bit-identical to a failure-free run, and the JVM reduce to the Python reduce."""
import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "executor_kill.py")


@pytest.mark.slow
def test_executor_killed_mid_training_recovers_bit_identically(tmp_path):
    out = subprocess.run([sys.executable, SCRIPT, str(tmp_path / "killed")], capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["killed"], "the fault hook never ran: no executor was killed"
    assert result["identical"], result
    # JVM reduce tasks (serialized-only weights broadcast), their cached states lost with the killed executor
    assert result["executor_reduce_killed_identical"], result
    assert result["python_reduce_identical"], result  # JVM reduce == Python reduce across executor JVMs
