"""The class hub's settings, without a hub: cheap checks that run everywhere.

docker/hub/z2jh-values.yaml is the one place of the students' image and limits: the
Kubernetes hub (untested here) reads it through Helm, the one-host hub (tested for real by
tests/hub/test_hub.py) through docker/hub/jupyterhub_config.py. These tests check that the
config really takes its settings from there, and that the numbers fit the measured budget.
"""
import re
import sys
import types
from pathlib import Path

import pytest
import yaml
from helpers import bytes_of
from traitlets.config import Config

from labkit.servers.ports import ephemeral_port_range, free_ports

pytestmark = pytest.mark.no_servers  # the Python-versions leg runs these

HUB = Path(__file__).resolve().parents[2] / "docker" / "hub"
VALUES = yaml.safe_load((HUB / "z2jh-values.yaml").read_text())
SINGLEUSER = VALUES["singleuser"]
# a learner's kernel, a full lab and ten lock client processes (README, "Teaching a class")
MEASURED_PEAK = 992 * 10**6


@pytest.fixture
def hub_config(monkeypatch):
    """docker/hub/jupyterhub_config.py loaded as JupyterHub loads it (dockerspawner stood in
    for where it is not installed: only the hub's own venv has it)."""
    try:
        import dockerspawner  # noqa: F401
    except ImportError:
        monkeypatch.setitem(sys.modules, "dockerspawner", types.SimpleNamespace(DockerSpawner=object))
    config = Config()
    path = HUB / "jupyterhub_config.py"
    namespace = {"get_config": lambda: config, "__file__": str(path)}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return config, namespace


def test_the_memory_limit_leaves_room_over_the_measured_peak():
    limit, guarantee = bytes_of(SINGLEUSER["memory"]["limit"]), bytes_of(SINGLEUSER["memory"]["guarantee"])
    assert limit >= 1.3 * MEASURED_PEAK, f"{SINGLEUSER['memory']['limit']} leaves under 30 % over {MEASURED_PEAK} bytes"
    assert guarantee <= limit
    assert 0 < SINGLEUSER["cpu"]["guarantee"] <= SINGLEUSER["cpu"]["limit"]


def test_the_docker_hub_takes_image_limits_and_culling_from_the_z2jh_values(hub_config):
    config, _ = hub_config
    spawner = config.DockerSpawner
    assert spawner.image == f"{SINGLEUSER['image']['name']}:{SINGLEUSER['image']['tag']}"
    assert bytes_of(spawner.mem_limit) == bytes_of(SINGLEUSER["memory"]["limit"])
    assert spawner.cpu_limit == SINGLEUSER["cpu"]["limit"]
    assert spawner.cmd == [SINGLEUSER["cmd"]]
    assert spawner.notebook_dir == SINGLEUSER["storage"]["homeMountPath"]
    assert list(spawner.volumes.values()) == [SINGLEUSER["storage"]["homeMountPath"]]
    assert spawner.network_name == "host" and spawner.ip == "127.0.0.1" and spawner.remove is True
    [culler] = config.JupyterHub.services
    assert f"--timeout={VALUES['cull']['timeout']}" in culler["command"]
    assert f"--cull-every={VALUES['cull']['every']}" in culler["command"]
    assert config.JupyterHub.ip == "127.0.0.1" and config.JupyterHub.hub_ip == "127.0.0.1"


def test_the_image_is_the_one_hub_sh_builds_with_the_values_user_and_folder():
    dockerfile = (HUB / "Dockerfile").read_text()
    assert f"IMAGE={SINGLEUSER['image']['name']}:{SINGLEUSER['image']['tag']}" in (HUB / "hub.sh").read_text()
    assert re.search(rf"useradd --uid {SINGLEUSER['uid']}\b", dockerfile)
    assert SINGLEUSER["storage"]["homeMountPath"] in dockerfile
    assert "/opt/labkit/notebooks" in dockerfile  # the postStart hook of the values copies from there


def test_a_class_of_thirty_gets_port_ranges_below_the_ephemeral_ones(hub_config):
    _, namespace = hub_config
    first, last, size = namespace["FIRST_PORT"], namespace["LAST_PORT"], namespace["PORTS_PER_STUDENT"]
    assert (last + 1 - first) // size >= 30
    assert last < ephemeral_port_range()[0]


def test_labkit_picks_ports_inside_LABKIT_PORTS(monkeypatch):
    monkeypatch.setenv("LABKIT_PORTS", "20000-20099")
    ports = free_ports(8)
    assert len(set(ports)) == 8 and all(20000 <= port <= 20099 for port in ports), ports
    monkeypatch.setenv("LABKIT_PORTS", "20000")
    with pytest.raises(ValueError, match="FIRST-LAST"):
        free_ports(1)
