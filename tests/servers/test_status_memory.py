"""`labkit status` shows each node's resident memory (from /proc, or Docker's count)."""
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.backend  # /proc locally, Docker's own count in containers


def test_every_running_node_reports_its_memory(lab):
    status = lab.status(memory=True)
    rows = [node for service in status["services"].values() for node in service["nodes"]]
    assert rows and all(node["memory_mb"] > 1 for node in rows), rows
    assert "memory_mb" not in lab.status()["services"]["redis"]["nodes"][0]  # only when asked: it costs a read per node


@pytest.mark.slow
def test_labkit_status_prints_memory_per_node_and_in_total(tmp_path):
    environment = dict(os.environ, LABKIT_HOME=str(tmp_path))
    labkit = [sys.executable, "-m", "labkit.cli"]
    subprocess.run([*labkit, "up", "--zookeeper", "0", "--etcd", "0", "--redis"], env=environment, check=True,
                   capture_output=True, timeout=120)
    try:
        status = subprocess.run([*labkit, "status"], env=environment, capture_output=True, text=True, timeout=60)
        assert status.returncode == 0, f"labkit status failed:\n{status.stdout}\n{status.stderr}"
        shown = status.stdout
    finally:
        subprocess.run([*labkit, "down"], env=environment, capture_output=True, timeout=60)
    assert "private" in shown.splitlines()[0]
    node_line = next(line for line in shown.splitlines() if line.strip().startswith("redis1"))
    assert node_line.rstrip().endswith("MB"), shown
    assert "memory of the servers (resident):" in shown
