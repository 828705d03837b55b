"""The Docker backend: every node a real, labelled container on the host network.

The tests marked ``backend`` run a second time with the servers in containers (the Docker
leg of ./lab.sh test, ``--leg docker``, on a machine with Docker); the tests here check what only the Docker backend
promises — labels, the engine's kill and freezer, cleanup of what a failed start or a
dead owner left — and what both must keep: nothing listens beyond 127.0.0.1.
"""
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest
from helpers import socket_inodes

import labkit
from labkit.errors import NodeStartError
from labkit.servers import state as lab_state
from labkit.servers.runners import docker_image

pytestmark = pytest.mark.backend

LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F"}  # 127.0.0.1 in /proc/net/tcp and tcp6


def listening_addresses(pid: int) -> set[str]:
    """Hex local addresses of the TCP sockets this process listens on (Linux /proc)."""
    inodes = socket_inodes(pid)
    addresses = set()
    for table in (f"/proc/{pid}/net/tcp", f"/proc/{pid}/net/tcp6"):
        with open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A = LISTEN
                    addresses.add(fields[1].rsplit(":", 1)[0])
    return addresses


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_every_server_listens_on_loopback_only(lab):
    for node in lab.nodes:
        addresses = listening_addresses(node.pid)
        assert addresses, f"{node.name} (pid {node.pid}) listens on nothing"
        assert addresses <= LOOPBACK, (node.name, addresses)


def test_the_image_tag_follows_the_dockerfile(tmp_path, monkeypatch):
    monkeypatch.delenv("LABKIT_SERVER_IMAGE", raising=False)
    monkeypatch.setattr(docker_image, "DOCKER_DIR", tmp_path)
    (tmp_path / "Dockerfile").write_text("FROM debian\n")
    first = docker_image.server_image_tag()
    (tmp_path / "Dockerfile").write_text("FROM debian\nRUN true\n")
    assert first.startswith("labkit-servers:") and docker_image.server_image_tag() != first


@pytest.mark.docker
def test_every_node_is_a_labelled_container_on_the_host_network(lab):
    from labkit.servers.runners.docker_container import lab_containers

    containers = {c.labels["labkit.node"]: c for c in lab_containers(lab.id)}
    assert sorted(containers) == sorted(node.name for node in lab.nodes)
    for node in lab.nodes:
        attrs = containers[node.name].attrs
        assert attrs["HostConfig"]["NetworkMode"] == "host"
        assert attrs["Config"]["Labels"]["labkit.owner_pid"] == str(os.getpid())
        assert attrs["Config"]["User"] == f"{os.getuid()}:{os.getgid()}"
        assert attrs["Config"]["Cmd"][-len(node.runner.argv):] == node.runner.argv  # the local command line
        mounts = {(m["Source"], m["Destination"]) for m in attrs["Mounts"]}
        assert (str(lab.run_dir), str(lab.run_dir)) in mounts  # same paths inside and out


@pytest.mark.docker
@pytest.mark.slow
def test_kill_and_pause_are_the_engines_own():
    from labkit.servers.runners.docker_container import lab_containers

    with labkit.up(zookeeper=0, etcd=0, redis=True, quiet=True) as lab:
        node = lab.node("redis1")
        container_id = node.runner.container_id
        node.pause()
        assert node.runner._container().status == "paused" and not node.is_ready()
        node.resume()
        node.wait_ready(10)
        node.kill()  # on a running server: SIGKILL, exit code 128 + 9
        assert node.runner._container().attrs["State"]["ExitCode"] == 128 + signal.SIGKILL
        node.pause()  # pausing a stopped node is a no-op, as for a process
        node.restart()
        assert node.runner.container_id == container_id and node.role == "primary"
    assert lab_containers(lab.id) == []


@pytest.mark.docker
def test_node_that_dies_at_start_reports_its_log_and_leaves_no_container(monkeypatch):
    from labkit.servers.runners import docker_container

    def containers_of_this_home() -> set[str]:
        # the engine is shared: other test workers (other LABKIT_HOMEs) start containers meanwhile
        home = str(lab_state.labs_dir()) + os.sep
        return {c.id for c in docker_container.lab_containers()
                if c.labels.get(docker_container.RUN_DIR_LABEL, "").startswith(home)}

    monkeypatch.setitem(docker_container.IMAGE_BINARIES, "redis", "/usr/bin/no-such-redis-server")
    before = set(os.listdir(lab_state.labs_dir()))
    containers_before = containers_of_this_home()
    with pytest.raises(NodeStartError) as info:
        labkit.up(zookeeper=0, etcd=0, redis=True, quiet=True)
    message = str(info.value)
    assert "redis1 exited while starting" in message
    assert "no-such-redis-server" in message and "not found" in message  # the container's own words
    assert set(os.listdir(lab_state.labs_dir())) == before
    assert containers_of_this_home() == containers_before  # none left by the failed start


@pytest.mark.docker
def test_a_missing_image_is_reported_before_anything_starts(monkeypatch):
    from labkit.servers.runners.docker_image import ImageBuildError

    monkeypatch.setenv("LABKIT_SERVER_IMAGE", "labkit-servers:no-such-tag")
    before = set(os.listdir(lab_state.labs_dir()))
    with pytest.raises(ImageBuildError, match="no such image"):
        labkit.up(zookeeper=0, etcd=0, redis=True, quiet=True)
    assert set(os.listdir(lab_state.labs_dir())) == before


@pytest.mark.docker
@pytest.mark.slow
def test_containers_of_a_dead_owner_are_reaped_even_without_their_folder():
    from labkit.servers.runners.docker_container import lab_containers

    script = textwrap.dedent("""
        import os, shutil, signal, labkit
        lab = labkit.up(zookeeper=0, etcd=0, redis=True, quiet=True)
        print(lab.id, flush=True)
        shutil.rmtree(lab.run_dir)             # the state file is gone too
        os.kill(os.getpid(), signal.SIGKILL)   # and the owner dies without cleaning up
    """)
    owner = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                           env=os.environ)
    assert owner.returncode == -signal.SIGKILL, owner.stderr
    lab_id = owner.stdout.split()[0]
    assert [c.status for c in lab_containers(lab_id)] == ["running"]  # an orphan, still running
    assert lab_id in lab_state.reap_orphans(log=None)
    assert lab_containers(lab_id) == []


@pytest.mark.docker
def test_etcdctl_comes_from_the_image_when_the_host_has_none(lab, monkeypatch, unique_name):
    monkeypatch.setattr(lab.etcd, "etcdctl_path", None)
    monkeypatch.setenv("LABKIT_ETCDCTL", "/nonexistent/etcdctl")
    assert shutil.which("/nonexistent/etcdctl") is None
    lab.etcd.etcdctl("put", unique_name, "from the image")
    assert lab.etcd.client().get(unique_name)[0] == b"from the image"


@pytest.mark.docker
def test_listing_the_containers_survives_one_removed_between_the_list_and_its_inspect(monkeypatch):
    """docker-py lists ids, then inspects each: another lab stopping in between removed one.
    Side by side (pytest -n) this made `labkit down`, `labkit status` and attach fail with
    "No such container" in three tests of one fresh-clone run."""
    from labkit.servers.runners import docker_container
    from labkit.servers.runners.docker_engine import docker_client

    lab = labkit.up(zookeeper=0, etcd=0, redis=True, quiet=True)
    try:
        api = docker_client().api
        list_ids = api.containers

        def list_then_another_process_removes(*args, **kwargs):
            found = list_ids(*args, **kwargs)
            for container in found:
                api.remove_container(container["Id"], force=True)
            return found

        monkeypatch.setattr(api, "containers", list_then_another_process_removes)
        assert docker_container.lab_containers(lab.id) == []
        monkeypatch.undo()
    finally:
        lab.down()
    assert docker_container.lab_containers(lab.id) == []
