"""The foundation: real clusters start, answer, fail on purpose and stop without a trace."""
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import labkit
from labkit.errors import InvalidClusterSize, NodeStartError, PortBusy, ServerNotFound, UnknownNode
from labkit.servers import state as lab_state
from labkit.servers.ports import PortPool, check_port_free
from labkit.servers.runners.process import process_state

from helpers import run_in_kernel, wait_until

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


pytestmark = pytest.mark.backend

# Host binaries found through the environment (a fake java, a missing redis-server) mean
# nothing to the Docker backend, whose servers come from its image (test_docker_backend.py
# covers the Docker side).
local_backend = pytest.mark.local_backend


def port_answers(endpoint: str) -> bool:
    host, port = endpoint.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
        return True
    except OSError:
        return False


def lab_processes(lab) -> list[int]:
    return [n.pid for n in lab.nodes if n.pid]


def gone(pid: int) -> bool:
    """The process is gone, or only a zombie waiting for its parent to read its exit code."""
    return process_state(pid) == "stopped"


def test_single_node_lab_roles_and_status(lab):
    status = lab.status()
    assert status["backend"] == os.environ["LABKIT_BACKEND"]
    zk = status["services"]["zookeeper"]
    assert [n["role"] for n in zk["nodes"]] == ["standalone"]
    assert zk["connect"] == lab.zookeeper.hosts == zk["nodes"][0]["endpoint"]
    assert [n["role"] for n in status["services"]["etcd"]["nodes"]] == ["leader"]
    assert [n["role"] for n in status["services"]["redis"]["nodes"]] == ["primary"]
    for node in lab.nodes:
        assert node.endpoint.startswith("127.0.0.1:")
        assert node.state == "running"
        assert port_answers(node.endpoint)


def test_clients_work_on_every_service(lab, zk):
    zk.create("/hello", b"world", makepath=True)
    assert zk.get("/hello")[0] == b"world"
    zk.delete("/hello")
    etcd = lab.etcd.client()
    etcd.put("hello", "world")
    assert etcd.get("hello")[0] == b"world"
    etcd.close()
    assert lab.redis.client().ping()
    assert lab.zookeeper.four_letter("ruok") == "imok"


def test_unknown_node_names_the_real_ones(lab):
    with pytest.raises(UnknownNode, match="zk1"):
        lab.node("zk9")


def test_attach_builds_the_lab_from_the_plan_up_recorded(lab):
    """One plan, one way from it to a lab: attach reads the plan back from the state file
    and gets the same nodes, ports, folders, runners and services that up laid out."""
    attached = labkit.attach(lab.id)
    assert attached.plan == lab.plan
    assert [(type(n), n.name, n.ports, n.runner.argv) for n in attached.nodes] == \
        [(type(n), n.name, n.ports, n.runner.argv) for n in lab.nodes]
    assert attached.sizes() == lab.sizes() == "zookeeper=1, etcd=1, redis=1, redlock=3"
    assert attached.secret == lab.secret is not None and attached.network is lab.network is None
    assert attached.etcd.etcdctl_path == lab.etcd.etcdctl_path


@pytest.mark.no_servers
def test_a_port_pool_hands_out_each_port_once_without_counting_ahead():
    pool = PortPool(base=20_000)
    nodes = [pool.take() for _ in range(5)]
    links = [pool.take_free() for _ in range(20)]
    assert nodes == list(range(20_000, 20_005))
    assert len(set(nodes + links)) == 25 and not any(20_000 <= port < 20_100 for port in links)
    free = PortPool()
    assert len({free.take() for _ in range(30)}) == 30


@pytest.mark.parametrize("size", [2, 4])
def test_even_ensemble_is_refused_with_the_reason(size):
    with pytest.raises(InvalidClusterSize, match="majority") as info:
        labkit.up(zookeeper=size, etcd=0, redis=False, quiet=True)
    assert f"use {size - 1} or {size + 1}" in str(info.value)


def test_busy_port_is_reported_before_anything_starts():
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    port = blocker.getsockname()[1]
    before = set(os.listdir(lab_state.labs_dir()))
    try:
        with pytest.raises(PortBusy, match=f"port {port}.*already in use"):
            labkit.up(zookeeper=0, etcd=0, redis=True, base_port=port, quiet=True)
    finally:
        blocker.close()
    assert set(os.listdir(lab_state.labs_dir())) == before  # the failed start left no folder


@local_backend
def test_missing_server_binary_says_how_to_install(monkeypatch):
    monkeypatch.setenv("LABKIT_REDIS_SERVER", "/nonexistent/redis-server")
    with pytest.raises(ServerNotFound) as info:
        labkit.up(zookeeper=0, etcd=0, redis=True, quiet=True)
    text = str(info.value)
    assert "'redis-server' was not found" in text
    assert "apt-get install -y redis-server" in text and "brew install redis" in text


@local_backend
def test_missing_java_says_zookeeper_needs_it(monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("LABKIT_JAVA", "/nonexistent/java")
    with pytest.raises(ServerNotFound, match="ZooKeeper is a Java program") as info:
        labkit.up(zookeeper=1, etcd=0, redis=False, quiet=True)
    assert "default-jre-headless" in str(info.value)


@local_backend
def test_node_that_dies_at_start_reports_its_log_and_leaves_nothing(tmp_path, monkeypatch):
    fake_java = tmp_path / "java"
    fake_java.write_text("#!/bin/sh\necho 'Error: could not reserve enough space for the heap' >&2\nexit 1\n")
    fake_java.chmod(0o755)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("LABKIT_JAVA", str(fake_java))
    before = set(os.listdir(lab_state.labs_dir()))
    with pytest.raises(NodeStartError) as info:
        labkit.up(zookeeper=1, etcd=0, redis=True, quiet=True)
    message = str(info.value)
    assert "zk1 exited while starting" in message
    assert "could not reserve enough space" in message  # the node's own last log line
    assert "hint:" in message
    assert set(os.listdir(lab_state.labs_dir())) == before


def test_down_stops_every_process_and_frees_every_port():
    lab = labkit.up(zookeeper=1, etcd=1, redis=True, replica=True, quiet=True)
    pids = lab_processes(lab)
    ports = [port for node in lab.nodes for port in node.ports.values()]
    assert len(pids) == 4 or os.environ["LABKIT_BACKEND"] == "docker"
    lab.down()
    for port in ports:
        check_port_free(port, "the test")  # raises PortBusy if still bound
    assert all(gone(pid) for pid in pids)
    assert not lab.run_dir.exists()


@pytest.mark.slow
def test_restart_keeps_data_written_before_it():
    with labkit.up(zookeeper=1, etcd=1, redis=True, quiet=True) as lab:
        zk = lab.zookeeper.client()
        zk.create("/kept", b"yes")
        zk.stop()
        etcd = lab.etcd.client()
        etcd.put("kept", "yes")
        etcd.close()
        redis = lab.redis.client()
        redis.set("kept", "yes")
        redis.save()  # Redis runs without persistence; SAVE writes the one snapshot it will reload
        redis.set("lost", "not saved")
        for node in lab.nodes:
            node.restart()
        zk = lab.zookeeper.client()
        assert zk.get("/kept")[0] == b"yes"
        zk.stop()
        etcd = lab.etcd.client()
        assert etcd.get("kept")[0] == b"yes"
        etcd.close()
        redis = lab.redis.client()
        assert redis.get("kept") == b"yes"
        assert redis.get("lost") is None


@pytest.mark.slow
def test_three_node_ensembles_elect_again_after_the_leader_is_killed():
    with labkit.up(zookeeper=3, etcd=3, redis=False, quiet=True) as lab:
        for service in (lab.zookeeper, lab.etcd):
            roles = sorted(n.role for n in service.nodes)
            assert roles == ["follower", "follower", "leader"], (service.name, roles)
            old = service.leader()
            old.kill()
            assert old.state == "stopped" and old.role == "stopped"
            new = service.wait_for_leader(timeout=30)
            assert new is not old and new.role == "leader"
            old.restart()
            assert old.role == "follower"


@pytest.mark.slow
def test_pause_freezes_a_node_and_resume_brings_it_back():
    from kazoo.exceptions import ConnectionLoss
    from kazoo.handlers.threading import KazooTimeoutError

    with labkit.up(zookeeper=1, etcd=1, redis=False, quiet=True) as lab:
        zk_node, etcd_node = lab.node("zk1"), lab.node("etcd1")
        client = lab.zookeeper.client(timeout=2.0)
        client.create("/before", b"x")
        zk_node.pause()
        etcd_node.pause()
        assert zk_node.state == "paused" and zk_node.role == "paused"
        assert not etcd_node.is_ready()
        with pytest.raises((KazooTimeoutError, ConnectionLoss)):  # no answer: the client gives up
            client.create_async("/during").get(timeout=1.0)
        zk_node.resume()
        etcd_node.resume()
        assert zk_node.role == "standalone"
        etcd_node.wait_ready(10)
        deadline = time.monotonic() + 10
        while client.state != "CONNECTED" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.get("/before")[0] == b"x"
        client.stop()


@pytest.mark.slow
def test_redis_replica_follows_and_can_be_promoted():
    with labkit.up(zookeeper=0, etcd=0, redis=True, replica=True, quiet=True) as lab:
        assert lab.redis.primary.role == "primary" and lab.redis.replica.role == "replica"
        lab.redis.client().set("k", "v")
        lab.redis.client().execute_command("WAIT", 1, 2000)
        assert lab.redis.client(lab.redis.replica).get("k") == b"v"
        old_primary = lab.redis.primary
        old_primary.kill()
        promoted = lab.redis.promote()
        assert promoted.role == "primary" and lab.redis.primary is promoted


@pytest.mark.slow
def test_a_lab_whose_owner_was_killed_is_reaped_on_the_next_start(tmp_path):
    script = textwrap.dedent("""
        import os, signal, labkit
        lab = labkit.up(zookeeper=0, etcd=1, redis=True, quiet=True)
        print(" ".join(str(n.pid) for n in lab.nodes), lab.id, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)   # the owner dies without cleaning up
    """)
    owner = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                           env=os.environ)
    assert owner.returncode == -signal.SIGKILL, owner.stderr
    *pids, lab_id = owner.stdout.split()
    if os.environ["LABKIT_BACKEND"] == "local":
        assert not any(gone(int(pid)) for pid in pids)  # the orphans are still running
    reaped = lab_state.reap_orphans(log=None)
    assert lab_id in reaped
    if os.environ["LABKIT_BACKEND"] == "local":
        assert all(gone(int(pid)) for pid in pids)
    assert not (lab_state.labs_dir() / lab_id).exists()


@pytest.mark.slow
def test_cli_round_trip_up_status_down():
    labkit_cli = [sys.executable, "-m", "labkit.cli"]
    started = subprocess.run(labkit_cli + ["up", "--zookeeper", "3", "--etcd", "3", "--redis", "--replica"],
                             capture_output=True, text=True, timeout=120, env=os.environ)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert "started in" in started.stdout
        status = json.loads(subprocess.run(labkit_cli + ["status", "--json"], capture_output=True,
                                           text=True, timeout=60, env=os.environ).stdout)
        assert status["backend"] == os.environ["LABKIT_BACKEND"]
        services = status["services"]
        assert sorted(n["role"] for n in services["zookeeper"]["nodes"]) == ["follower", "follower", "leader"]
        assert sorted(n["role"] for n in services["etcd"]["nodes"]) == ["follower", "follower", "leader"]
        assert [n["role"] for n in services["redis"]["nodes"]] == ["primary", "replica"]
        endpoints = [n["endpoint"] for s in services.values() for n in s["nodes"]]
        assert len(endpoints) == 8 and all(e.startswith("127.0.0.1:") for e in endpoints)
        assert all(port_answers(e) for e in endpoints)
        assert services["zookeeper"]["connect"] == ",".join(n["endpoint"] for n in services["zookeeper"]["nodes"])
    finally:
        stopped = subprocess.run(labkit_cli + ["down"], capture_output=True, text=True, timeout=60, env=os.environ)
    assert stopped.returncode == 0
    assert not any(port_answers(e) for e in endpoints)
    after = subprocess.run(labkit_cli + ["status", "--json"], capture_output=True, text=True, timeout=60,
                           env=os.environ)
    assert after.returncode == 1 and json.loads(after.stdout)["services"] == {}


# ---- re-running a cell: one lab per kernel unless asked for more --------------------------
def code_cells_up_to_the_lab(notebook: str) -> list[str]:
    """The notebook's code cells, from the first one to the one that starts its lab (through its
    lesson handle, ``lesson.lab()``, or ``labkit.up(``)."""
    cells = []
    for cell in json.loads((NOTEBOOKS / notebook).read_text())["cells"]:
        if cell["cell_type"] == "code":
            cells.append("".join(cell["source"]))
            if "lesson.lab(" in cells[-1] or "labkit.up(" in cells[-1]:
                return cells
    raise AssertionError(f"{notebook} has no cell that calls lesson.lab( or labkit.up(")


def labs_on_disk(home: Path) -> dict[str, list[int]]:
    """Every lab with a state file under that LABKIT_HOME: its id and its servers' pids."""
    labs = {}
    for run_dir in (home / "labs").iterdir():
        data = lab_state.read_state(run_dir)
        if data is not None:
            labs[data["id"]] = [node["runner"]["pid"] for node in data["nodes"]]
    return labs


@pytest.mark.slow
@local_backend  # its kernel runs LABKIT_BACKEND=local on every leg
def test_rerunning_the_first_cells_of_notebook_00_three_times_leaves_one_lab(tmp_path, monkeypatch):
    from jupyter_client.manager import start_new_kernel

    home = tmp_path / "labkit"
    environment = dict(os.environ, LABKIT_HOME=str(home), LABKIT_BACKEND="local")
    manager, kernel = start_new_kernel(kernel_name="python3", env=environment, cwd=str(NOTEBOOKS))

    def run(code: str) -> str:
        return run_in_kernel(kernel, code)

    cells = code_cells_up_to_the_lab("00_start_here.ipynb")
    started = []  # each run's lab: (id, its servers' pids)
    try:
        for run_number in range(3):
            printed = "".join(run(cell) for cell in cells)
            lab_id, *pids = run("print(lab.id, *[node.pid for node in lab.nodes])").split()
            started.append((lab_id, [int(pid) for pid in pids]))
            said = [line for line in printed.splitlines() if line.startswith("stopped the lab")]
            if run_number == 0:
                assert said == [], printed
            else:
                assert len(said) == 1 and said[0].startswith("stopped the lab this kernel started at "), printed
                assert "(zookeeper=1, etcd=1, redis=1)" in said[0] and "keep_previous=True" in said[0], said
        last_id, last_pids = started[-1]
        assert len({lab_id for lab_id, _ in started}) == 3
        assert list(labs_on_disk(home)) == [last_id], "exactly one lab should be left running"
        assert len(last_pids) == 3 and all(process_state(pid) == "running" for pid in last_pids)
        earlier = [pid for _, pids in started[:-1] for pid in pids]
        assert len(earlier) == 6 and all(gone(pid) for pid in earlier), [process_state(pid) for pid in earlier]

        printed = run("extra = labkit.up(zookeeper=0, etcd=0, redis=True, quiet=True, keep_previous=True)\n"
                      "print('EXTRA', extra.id, lab.stopped)")
        extra_id, lab_stopped = printed.split("EXTRA", 1)[1].split()
        assert "stopped the lab" not in printed and lab_stopped == "False"
        assert sorted(labs_on_disk(home)) == sorted([last_id, extra_id]), "keep_previous=True keeps both"
        assert all(process_state(pid) == "running" for pid in last_pids + labs_on_disk(home)[extra_id])
    finally:
        kernel.stop_channels()
        manager.shutdown_kernel(now=True)
        monkeypatch.setenv("LABKIT_HOME", str(home))
        wait_until(lambda: lab_state.reap_orphans(log=None) is not None and not labs_on_disk(home),
                   "the dead kernel's labs to be reaped")


def test_a_lab_inside_its_with_block_is_kept_and_a_bare_one_replaced(lab, capsys):
    """The session's ``lab`` is inside its with block: a test's own labs never stop it."""
    first = labkit.up(zookeeper=0, etcd=0, redis=True, quiet=True)
    first_pids = lab_processes(first)
    try:
        with labkit.up(zookeeper=0, etcd=0, redis=True, quiet=True) as nested:
            assert first.stopped and not lab.stopped and not nested.stopped
            said = capsys.readouterr().out
            assert said.count("stopped the lab this process started at") == 1, said
            assert all(gone(pid) for pid in first_pids)
            inner = labkit.up(zookeeper=0, etcd=0, redis=True, quiet=True)
            assert not nested.stopped, "a lab inside its with block is never replaced"
            assert "stopped" not in capsys.readouterr().out
            inner.down()
        assert all(node.state == "running" for node in lab.nodes)
    finally:
        first.down()
