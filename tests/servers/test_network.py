"""Network faults on real servers: partitions, cut clients, slow links, and no proxy left behind."""
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import etcd3.exceptions
import pytest
from helpers import wait_until
from kazoo.exceptions import KazooException
from kazoo.protocol.states import KazooState

import labkit
from labkit.clients import spawn_clients
from labkit.errors import UnknownNode
from labkit.record.history import History
from labkit.locks.etcd_mutex import EtcdMutex
from labkit.locks.errors import LockError
from labkit.locks.etcd_session import EtcdSession
from labkit.locks.zookeeper import ZooKeeperLock
from labkit.servers import state as lab_state
from labkit.servers.network.faults import NetworkFaults
from labkit.servers.network.links import NetworkFaultError, NetworkNotEnabled
from labkit.servers.runners.process import process_state

pytestmark = pytest.mark.backend  # the partition proxies sit between local processes or containers


@pytest.fixture(scope="module")
def netlab():
    with labkit.up(zookeeper=3, etcd=3, redis=True, replica=True, network=True, quiet=True) as lab:
        yield lab


@pytest.fixture
def healed(netlab):
    """The shared lab, healed and settled again after the test whatever it broke."""
    yield netlab
    netlab.heal()
    netlab.zookeeper.wait_for_leader(30)
    netlab.etcd.wait_for_leader(30)


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def roles(service) -> dict:
    return {node.name: node.role for node in service.nodes}


def _try(action):
    try:
        return action()
    except Exception as error:  # the test inspects which error it was
        return error


@pytest.mark.slow
def test_zookeeper_isolated_leader_loses_its_clients_and_rejoins_as_follower(healed):
    lab = healed
    old = lab.zookeeper.leader()
    rest = [node for node in lab.zookeeper.nodes if node is not old]
    # keeps trying to reconnect (kazoo's default gives up), so that it learns its fate on heal
    stranded = lab.zookeeper.client(timeout=2, via="client-1", nodes=[old],
                                    connection_retry={"max_tries": -1, "max_delay": 0.5})
    states = []
    stranded.add_listener(states.append)
    majority = lab.zookeeper.client(timeout=10, via="client-2", nodes=rest)  # outlives the election
    history = History()
    try:
        lab.partition([old.name, "client-1"], [n.name for n in rest] + ["client-2"], history=history)
        wait_until(lambda: sorted(roles(lab.zookeeper)[n.name] for n in rest) == ["follower", "leader"],
                   "the majority elects a new leader", timeout=40)
        assert ZooKeeperLock(majority, "/net/zk-partition").acquire(timeout=15) is not None
        wait_until(lambda: KazooState.SUSPENDED in states, "the client of the old leader is SUSPENDED")
        outcome = []
        attempt = threading.Thread(target=lambda: outcome.append(_try(
            lambda: ZooKeeperLock(stranded, "/net/zk-partition").acquire(timeout=2))), daemon=True)
        attempt.start()
        attempt.join(3.0)   # kazoo queues the create until it reaches a serving server: none
        assert not any(isinstance(result, int) for result in outcome), outcome
        lab.heal(history=history)
        wait_until(lambda: old.role == "follower", "the old leader rejoins as a follower", timeout=40)
        attempt.join(20)
        assert outcome and isinstance(outcome[0], (KazooException, LockError)), outcome
    finally:
        for client in (stranded, majority):
            client.stop()
            client.close()
    phases = [(e.detail["what"], e.detail["phase"]) for e in history.events(kind="fault")]
    assert phases == [("partition", "start"), ("partition", "end")]


def test_etcd_isolated_leader_steps_down_and_a_cut_client_cannot_lock(healed):
    lab = healed
    old = lab.etcd.leader()
    cut_off = lab.etcd.client(node=[n for n in lab.etcd.nodes if n is not old][0], via="client-3", timeout=1)
    try:
        cut_off.put("net/etcd", "reachable before the cut")
        lab.isolate(old.name)
        wait_until(lambda: old.role != "leader", "the isolated leader steps down (check quorum)")
        wait_until(lambda: [roles(lab.etcd)[n.name] for n in lab.etcd.nodes if n is not old].count("leader") == 1,
                   "the other two elect a leader")
        lab.isolate("client-3")
        with pytest.raises(etcd3.exceptions.Etcd3Exception):
            EtcdMutex(EtcdSession(cut_off, ttl=2), "/net/etcd").lock(timeout=2)
        lab.heal()
        wait_until(lambda: sorted(roles(lab.etcd).values()) == ["follower", "follower", "leader"],
                   "the cluster is whole again")
    finally:
        cut_off.close()


def test_a_one_way_cut_between_etcd_members_hits_only_that_direction(healed):
    """The proxy in front of a member's peer port tells senders apart by X-Server-From:
    cutting leader -> f starves f of heartbeats, while g (same proxy, other sender) follows."""
    lab = healed
    leader = lab.etcd.leader()
    follower = [n for n in lab.etcd.nodes if n is not leader][0]
    lab.cut(leader.name, follower.name, both_ways=False)
    assert list(lab.network_status()["rules"]) == [f"{leader.name}>{follower.name}"]
    wait_until(lambda: follower.role != "follower" or leader.role != "leader",
               f"{follower.name} stops hearing its leader")


def test_a_cut_off_kazoo_holder_loses_its_lock_while_its_process_runs_and_believes_it_holds(healed):
    """kazoo's own Lock has no client-side deadline: cut off, it stays SUSPENDED and still
    believes it holds while the server expires its session and grants the lock to another."""
    lab = healed
    with spawn_clients(lab, "kazoo", n=2, name="/net/kazoo-holder", session_timeout=1, proxied=True) as clients:
        holder, waiter = clients["client-1"], clients["client-2"]
        holder.acquire(timeout=10)
        lab.isolate("client-1")
        began = time.monotonic()
        waiter.acquire(timeout=20)          # the server expired the holder's session
        waited = time.monotonic() - began
        assert holder.pid and process_state(holder.pid) == "running"
        assert holder.state == "holding"    # it does not know: it heard nothing since the cut
        assert 0.3 < waited < 15, waited


def test_a_cut_off_zookeeper_holder_gives_up_before_the_server_grants_the_lock_to_another(healed):
    """labkit's ZooKeeperLock counts a client-side deadline from the send time of the newest
    request its server answered, less the servers' lag (an ensemble: 2 s is about the
    shortest session that allows it), so the cut-off holder reports the lock lost before
    the waiter can have it."""
    lab = healed
    with spawn_clients(lab, "zookeeper", n=2, name="/net/holder", session_timeout=2, proxied=True) as clients:
        holder, waiter = clients["client-1"], clients["client-2"]
        holder.acquire(timeout=10)
        lab.isolate("client-1")
        waiter.acquire(timeout=20)          # the server expired the holder's session
        assert holder.pid and process_state(holder.pid) == "running"
        [lost] = clients.history.events(client="client-1", kind="lost")
        [granted] = clients.history.events(client="client-2", kind="acquired")
        assert "client-side deadline" in lost.detail["reason"], lost.detail
        assert lost.time < granted.time, (lost.time, granted.time)


def test_a_release_cut_off_by_a_blip_goes_through_once_the_link_is_back(healed):
    """A release whose delete is in flight when the holder's link is cut fails (ConnectionLoss,
    the session alive: lesson 04's failed unlock, where release() raises ClientError);
    release_through_blips() sends it again, and it goes through once the link is back."""
    lab = healed
    with spawn_clients(lab, "zookeeper", n=2, name="/net/blip", session_timeout=10, proxied=True) as clients:
        holder, waiter = clients["client-1"], clients["client-2"]
        holder.acquire(timeout=10)
        lab.isolate("client-1")
        with ThreadPoolExecutor(1) as pool:
            releasing = pool.submit(holder.release_through_blips, 60)
            # the precondition: its first release failed as release() would have (and raised)
            [failed] = clients.history.wait_for("error", client="client-1", timeout=30)
            assert "ConnectionLoss" in failed.detail["message"], failed.detail
            lab.heal()
            releasing.result(timeout=60)
        waiter.acquire(timeout=5)                 # the holder's node is gone, its session lives on
        assert holder.state != "holding"


def test_a_cut_off_etcd_holder_loses_its_lock_when_its_lease_runs_out(healed):
    lab = healed
    with spawn_clients(lab, "etcd", n=2, name="/net/etcd-holder", ttl=2, proxied=True) as clients:
        holder, waiter = clients["client-1"], clients["client-2"]
        holder.acquire(timeout=10)
        lab.isolate("client-1")              # its keep-alives stall in the proxy
        began = time.monotonic()
        waiter.acquire(timeout=20)
        waited = time.monotonic() - began
        assert holder.pid and process_state(holder.pid) == "running"
        assert 1.0 < waited < 15, waited     # about the lease TTL, never at once


def test_a_cut_replication_link_keeps_writes_on_the_primary(healed):
    lab = healed
    primary, replica = lab.redis.primary.client(), lab.redis.replica.client()
    try:
        lab.cut("redis2", "redis1")
        primary.set("net:cut", "written during the cut")
        # the precondition, forced rather than slept for: the primary asks its replica to
        # acknowledge the write (WAIT 1 replica, up to 2 s; over a healthy link the answer comes
        # within milliseconds) and none does, so the write has not reached it
        assert primary.execute_command("WAIT", 1, 2000) == 0
        assert primary.get("net:cut") == b"written during the cut"
        assert replica.get("net:cut") is None
        lab.heal()
        wait_until(lambda: replica.get("net:cut") == b"written during the cut", "the replica catches up")
        assert primary.execute_command("WAIT", 1, 10000) == 1   # the control: healed, it acknowledges
    finally:
        primary.close()
        replica.close()


NETWORK_FAULTS = [lambda lab: lab.partition(["zk1"], ["etcd1"]), lambda lab: lab.isolate("zk1"),
                  lambda lab: lab.cut("zk1", "etcd1"), lambda lab: lab.delay(5), lambda lab: lab.loss(0.1),
                  lambda lab: lab.heal(), lambda lab: lab.network_status()]
assert len(NETWORK_FAULTS) == len([name for name in vars(NetworkFaults) if not name.startswith("_")])


def _times_ms(operation, count: int = 7) -> list[float]:
    times = []
    for _ in range(count):
        began = time.perf_counter()
        operation()
        times.append((time.perf_counter() - began) * 1000)
    return times


def test_a_delay_per_link_adds_a_round_trip_per_request(healed):
    """20 ms each way on the client's own links: one request and its reply pay 40 ms, once.
    The bound below is exact (no request can beat the delay). The one above tells one round
    trip of delay from two (a delay applied per chunk, or on both proxies of a path): the
    fastest delayed request is under 80 ms over the fastest usual one. It is on the fastest of
    seven, not the median: a loaded machine stalls some requests (a median of 146 ms against
    a bound of 123 at load 20), seldom all seven."""
    lab = healed
    redis_client = lab.redis.client(via="client-d")
    zookeeper = lab.zookeeper.client(via="client-d", nodes=[lab.zookeeper.nodes[0]])
    etcd = lab.etcd.client(node=lab.etcd.nodes[0], via="client-d")
    operations = {"redis GET": lambda: redis_client.get("net:delay"),
                  "zookeeper exists": lambda: zookeeper.exists("/"),
                  "etcd get": lambda: etcd.get("net/delay")}
    try:
        before = {name: _times_ms(op) for name, op in operations.items()}
        lab.delay(20, links=[("client-d", node.name) for node in lab.nodes])
        after = {name: _times_ms(op) for name, op in operations.items()}
    finally:
        redis_client.close()
        zookeeper.stop()
        zookeeper.close()
        etcd.close()
    for name in operations:
        usual, delayed = statistics.median(before[name]), statistics.median(after[name])
        assert min(after[name]) >= 40, f"{name}: {after[name]}"
        assert min(after[name]) < min(before[name]) + 80, f"{name}: p50 {usual:.1f} -> {delayed:.1f} ms, {after[name]}"


def test_loss_shows_up_as_retransmission_stalls(healed):
    """A chunk in five "lost": every request still succeeds, some after a 200 ms
    retransmission timeout, most at once."""
    lab = healed
    redis_client = lab.redis.client(via="client-l")
    try:
        redis_client.ping()
        lab.loss(0.2, links=["client-l->redis1"])
        times = []
        for _ in range(40):
            began = time.perf_counter()
            assert redis_client.ping()
            times.append((time.perf_counter() - began) * 1000)
    finally:
        redis_client.close()
    assert any(ms >= 190 for ms in times), times
    assert statistics.median(times) < 100, times


def test_bad_network_requests_each_say_what_is_wrong(healed, lab):
    with pytest.raises(UnknownNode, match="zk9"):
        healed.isolate("zk9")
    with pytest.raises(NetworkFaultError, match="zk1 named twice"):
        healed.partition(["zk1", "zk2"], ["zk1", "zk3"])
    with pytest.raises(NetworkFaultError, match="negative"):
        healed.delay(-5)
    with pytest.raises(NetworkFaultError, match="between 0 and 1"):
        healed.loss(1.5)
    for fault in NETWORK_FAULTS:   # every fault of labkit.servers.network.faults, the same refusal
        with pytest.raises(NetworkNotEnabled, match="network=True"):
            fault(lab)
    with pytest.raises(NetworkNotEnabled, match="network=True"):
        lab.zookeeper.client(via="client-1")
    assert healed.network_status()["rules"] == {}   # nothing was half applied


def test_heal_restores_every_link(healed):
    healed.cut("zk1", "zk2", both_ways=False)
    healed.delay(5, jitter=2)
    healed.loss(0.1, links=["etcd1->etcd2"])
    assert healed.network_status()["rules"]
    healed.heal()
    assert healed.network_status()["rules"] == {}


def proxy_ports(run_dir) -> list[int]:
    return [route["port"] for route in labkit.attach(run_dir.name).network.request(op="status")["routes"]]


@pytest.mark.slow
def test_cli_net_commands_and_down_leave_no_proxy():
    cli = [sys.executable, "-m", "labkit.cli"]
    run = lambda *args: subprocess.run(cli + list(args), capture_output=True, text=True, timeout=120,  # noqa: E731
                                       env=os.environ)
    started = run("up", "--zookeeper", "0", "--etcd", "0", "--replica", "--network")
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        lab = labkit.attach()
        pid, ports = lab.network.runner.pid, proxy_ports(lab.run_dir)
        cut = run("net", "partition", "redis1", "/", "redis2")
        assert cut.returncode == 0 and "redis1 -> redis2" in cut.stdout, cut.stdout + cut.stderr
        assert "redis2 -> redis1" in run("net", "status").stdout
        assert "every link is healthy" in run("net", "heal").stdout
        assert run("net", "delay", "-3ms").returncode == 2
    finally:
        stopped = run("down")
    assert stopped.returncode == 0
    wait_until(lambda: process_state(pid) == "stopped", "the proxy process is gone", timeout=10)
    assert ports and not any(listening(port) for port in ports)


def test_a_killed_owners_proxy_is_reaped_with_its_lab():
    script = textwrap.dedent("""
        import json, os, signal, labkit
        lab = labkit.up(zookeeper=0, etcd=0, redis=True, replica=True, network=True, quiet=True)
        routes = lab.network.request(op="status")["routes"]
        print(json.dumps({"pid": lab.network.runner.pid, "id": lab.id, "ports": [r["port"] for r in routes]}),
              flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    owner = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=os.environ)
    assert owner.returncode == -signal.SIGKILL, owner.stderr
    orphan = json.loads(owner.stdout)
    assert process_state(orphan["pid"]) == "running" and all(listening(p) for p in orphan["ports"])
    assert orphan["id"] in lab_state.reap_orphans(log=None)
    assert process_state(orphan["pid"]) == "stopped"
    assert not any(listening(port) for port in orphan["ports"])
