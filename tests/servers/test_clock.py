"""Stepping a running server's wall clock (labkit/servers/runners/clock.py), on real servers.

Redis keeps absolute wall-clock expiry times, so a step forward expires keys early and a
step back makes them live longer. ZooKeeper (Java) sees the step in its wall clock (the
ctime of a new znode) but times sessions on the monotonic clock, so a session survives.
etcd (Go) reads the clock without libc: it cannot be stepped, and says so.
"""
import math
import os
import time
import urllib.request
from email.utils import parsedate_to_datetime
from pathlib import Path

import pytest
from helpers import wait_until

import labkit
from labkit.errors import ClockUnavailable, InvalidClockChange, ServerNotFound
from labkit.record.history import History
from labkit.servers import lab as lab_module, state as lab_state
from labkit.servers.ports import free_ports
from labkit.servers.runners import discovery
from labkit.servers.runners.clock import FILE_SIZE, LAYOUT, MAGIC, prepare_clock
from labkit.servers.services.etcd import etcd_argv
from labkit.servers.runners.process import LocalProcess
from labkit.widgets.narration import describe_event

pytestmark = pytest.mark.backend  # the clock shim: LD_PRELOAD in a process, or through a container's mount


@pytest.fixture(scope="module")
def clocked():
    with labkit.up(zookeeper=1, etcd=1, redis=True, clocks=True, quiet=True) as lab:
        yield lab


@pytest.fixture(autouse=True)
def clocks_back(request):
    """Every test starts and ends with unshifted clocks."""
    yield
    if "clocked" in request.fixturenames:
        lab = request.getfixturevalue("clocked")
        for node in (lab.node("redis1"), lab.node("zk1")):
            node.clock.reset()


def server_minus_real(redis_client, samples: int = 5) -> float:
    """How far Redis's wall clock (TIME) is from this machine's, in seconds: of ``samples``
    readings, the one with the shortest round trip, whose error is at most half of it (on a
    loaded machine one round trip can take 100 ms and more; the shortest of five rarely does)."""
    readings = []
    for _ in range(samples):
        before = time.time()
        seconds, micros = redis_client.time()
        after = time.time()
        readings.append((after - before, seconds + micros / 1e6 - (before + after) / 2))
    return min(readings)[1]


def test_a_forward_step_expires_a_redis_key_early(clocked):
    redis1, client = clocked.node("redis1"), clocked.redis.client()
    client.set("clock:ttl", "v", ex=10)
    assert client.exists("clock:ttl") == 1
    assert abs(server_minus_real(client)) < 1.0

    redis1.clock.step(30)

    assert client.exists("clock:ttl") == 0  # 30 s later by its clock: past the 10 s TTL
    assert 29.0 < server_minus_real(client) < 31.0
    assert 29.9 < redis1.clock.offset < 30.1


def test_a_step_back_makes_redis_ttls_longer(clocked):
    redis1, client = clocked.node("redis1"), clocked.redis.client()
    client.set("clock:back", "v", ex=10)
    redis1.clock.step(-30)
    assert 35_000 < client.pttl("clock:back") <= 40_000
    assert -31.0 < server_minus_real(client) < -29.0


def test_a_rate_makes_the_redis_clock_run_fast_and_a_step_keeps_it(clocked):
    redis1, client = clocked.node("redis1"), clocked.redis.client()
    redis1.clock.rate(2.0)
    first, began = server_minus_real(client), time.monotonic()
    time.sleep(1.0)
    gained = server_minus_real(client) - first
    assert 0.7 < gained / (time.monotonic() - began) < 1.3  # one extra second per real second
    redis1.clock.step(10)
    assert redis1.clock.status()["rate"] == 2.0
    redis1.clock.rate(1)
    offset = server_minus_real(client)
    time.sleep(0.3)
    assert abs(server_minus_real(client) - offset) < 0.1  # normal rate again: the offset stays


def test_a_zookeeper_session_survives_a_wall_clock_step(clocked):
    zk1 = clocked.node("zk1")
    client = clocked.zookeeper.client(timeout=2.0)
    try:
        client.create("/clock-holder", b"", ephemeral=True)
        session = client.client_id
        zk1.clock.step(30)
        client.create("/clock-probe", b"", ephemeral=True)
        # the JVM reads the stepped clock: a new znode's ctime is 30 s ahead of ours
        assert 29.0 < client.exists("/clock-probe").created - time.time() < 31.0
        # sessions are timed on the monotonic clock: a few session timeouts later, still alive
        until = time.monotonic() + 3.0
        while time.monotonic() < until:
            assert client.exists("/clock-holder") is not None
            time.sleep(0.2)
        assert client.client_id == session and client.connected
    finally:
        client.stop()
        client.close()


def test_etcd_cannot_be_stepped_and_says_why(clocked):
    etcd1 = clocked.node("etcd1")
    assert not etcd1.clock.enabled and "LD_PRELOAD" not in etcd1.runner.env
    with pytest.raises(ClockUnavailable, match="Go.*vDSO"):
        etcd1.clock.step(30)


def test_go_reads_the_clock_past_the_shim(clocked, tmp_path):
    """The evidence behind etcd's refusal: etcd with the shim preloaded and stepped an hour
    ahead still stamps its HTTP replies with the machine's time (a C program does not)."""
    try:
        etcd = discovery.find_etcd()
    except ServerNotFound:
        pytest.skip("no local etcd binary (the Docker leg runs the servers in containers)")
    client_port, peer_port = free_ports(2)
    env = prepare_clock(tmp_path, "etcd-probe")
    an_hour_ahead = LAYOUT.pack(MAGIC, 0, 0, 3600 * 10**9, 1.0).ljust(FILE_SIZE, b"\0")
    Path(env["LABKIT_CLOCK_FILE"]).write_bytes(an_hour_ahead)
    argv = etcd_argv(etcd, "probe", str(tmp_path / "data"), client_port, peer_port,
                     f"probe=http://127.0.0.1:{peer_port}", "clock-probe")
    process = LocalProcess(argv, str(tmp_path / "etcd.log"), str(tmp_path), env)
    process.start()
    try:
        replies = []

        def answers():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{client_port}/version", timeout=1) as reply:
                    replies.append(parsedate_to_datetime(reply.headers["Date"]).timestamp())
                return True
            except OSError:
                return False

        wait_until(answers, "the probe etcd answers")
        assert "clock_shim" in open(f"/proc/{process.pid}/maps").read()  # it was loaded...
        assert abs(replies[-1] - time.time()) < 60  # ...and Go's clock ignored it
    finally:
        process.kill()
    date = LocalProcess(["date", "+%s"], str(tmp_path / "date.log"), str(tmp_path), env)
    date.start()
    wait_until(lambda: date.state() == "stopped", "date exits")
    assert 3500 < int(open(tmp_path / "date.log").read().split()[-1]) - time.time() < 3700


def test_a_step_is_a_fault_on_the_history(clocked):
    history = History()
    clocked.node("redis1").clock.step(5, history=history)
    clocked.node("redis1").clock.rate(1.5, history=history)
    faults = history.events(kind="fault")
    assert [(e.detail["what"], e.detail["target"]) for e in faults] == [("clock_step", "redis1"),
                                                                       ("clock_rate", "redis1")]
    assert faults[0].detail["seconds"] == 5 and faults[1].detail["rate"] == 1.5
    assert describe_event(faults[0]) == "you stepped redis1's wall clock by 5.0 s (its monotonic clock did not move)"


def test_an_attached_lab_steps_the_same_clock_and_a_restart_keeps_it(clocked):
    attached = lab_module.attach(clocked.id)
    attached.node("redis1").clock.step(100)
    client = clocked.redis.client()
    assert 99 < server_minus_real(client) < 101
    clocked.node("redis1").restart()
    client = clocked.redis.client()
    assert 99 < server_minus_real(client) < 101  # the machine's clock is still off


@pytest.mark.parametrize("change", [lambda c: c.step(math.nan), lambda c: c.step("30"), lambda c: c.step(True),
                                    lambda c: c.rate(0), lambda c: c.rate(-1), lambda c: c.rate(math.inf)])
def test_a_nonsense_change_is_refused(clocked, change):
    with pytest.raises(InvalidClockChange):
        change(clocked.node("redis1").clock)
    assert abs(clocked.node("redis1").clock.offset) < 0.01


def test_a_node_started_without_clocks_names_the_option():
    with labkit.up(zookeeper=0, etcd=0, redis=True, quiet=True) as plain:
        redis1 = plain.node("redis1")
        assert "LD_PRELOAD" not in redis1.runner.env
        with pytest.raises(ClockUnavailable, match=r"clocks=True"):
            redis1.clock.step(30)


def test_a_container_gets_the_shim_through_the_mounted_run_folder(tmp_path, monkeypatch):
    """The Docker backend passes the clock environment; its files are in the run folder,
    which the container mounts at the same path. (The engine itself runs in the Docker leg.)"""
    from labkit.servers.runners import docker_container

    created = {}

    class Containers:
        def create(self, image, **options):
            created.update(options)
            return type("Container", (), {"id": "c0"})()

    monkeypatch.setattr(docker_container, "docker_client", lambda: type("Client", (), {"containers": Containers()})())
    env = prepare_clock(tmp_path, "redis1")
    container = docker_container.DockerContainer(["redis-server"], str(tmp_path / "redis1.log"), str(tmp_path),
                                               lab_id="x", name="redis1", image="labkit-servers:test", env=env)
    container._create()
    assert created["environment"]["LD_PRELOAD"] == str(tmp_path / "clock_shim.so")
    assert os.path.dirname(created["environment"]["LABKIT_CLOCK_FILE"]) in created["volumes"]
    assert docker_container.DockerContainer.from_state(container.to_state()).env == env


def test_without_a_c_compiler_up_says_how_to_install_one(tmp_path, monkeypatch):
    from labkit.servers.runners import clock

    monkeypatch.setenv("LABKIT_HOME", str(tmp_path))  # no shim built here yet
    monkeypatch.setattr(clock, "find_compiler", lambda: None)
    with pytest.raises(ClockUnavailable, match="gcc libc6-dev"):
        labkit.up(zookeeper=0, etcd=0, redis=True, clocks=True, quiet=True)
    assert not (tmp_path / "labs").exists() or not any((tmp_path / "labs").iterdir())  # nothing started
