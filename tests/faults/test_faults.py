"""Faults on real processes and real servers: kill, pause, session expiry, lease revocation."""
import subprocess
import sys
import threading
import time

import pytest
from kazoo.client import KazooClient

import labkit
from labkit import faults
from labkit.faults import sessions
from labkit.record.checker import check_mutual_exclusion
from labkit.clients import spawn_clients
from labkit.record.fencing import FencedStore
from labkit.record.history import History

from helpers import wait_until

pytestmark = pytest.mark.backend  # kill, pause and restart go through the process or the container runner


def process_state(pid: int) -> str:
    """The kernel's one-letter state: T = stopped (SIGSTOP), S = sleeping, R = running."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


@pytest.fixture
def sleeper():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait(10)


def test_pause_stops_a_process_and_the_timer_lets_it_run_again(sleeper):
    history = History()
    faults.pause(sleeper.pid, 0.5, history=history)
    assert process_state(sleeper.pid) == "T"
    wait_until(lambda: process_state(sleeper.pid) != "T", "SIGCONT from the resume timer", timeout=5)
    assert [(e.kind, e.detail["what"], e.detail["target"]) for e in history.events()] == \
        [("fault", "pause", f"pid {sleeper.pid}")]


def test_kill_ends_a_process(sleeper):
    faults.kill(sleeper.pid)
    assert sleeper.wait(5) == -9


def test_a_lock_client_carries_out_its_own_faults_and_a_node_is_not_taken_for_one(lab, unique_name):
    history = History()
    with spawn_clients(lab, "zookeeper", n=1, name=unique_name, history=history) as clients:
        client = clients[0]
        assert isinstance(client, faults.ClientProcess)
        assert not isinstance(lab.node("zk1"), faults.ClientProcess)  # pauses and resumes too
        timer = faults.pause(client, 30.0)
        assert not timer.finished.is_set() and process_state(client.pid) == "T"
        faults.resume(client)
        wait_until(lambda: process_state(client.pid) != "T", "SIGCONT from resume()", timeout=5)
        assert timer.finished.is_set()  # the client cancelled its own resume timer
    assert [(e.detail["what"], e.detail["target"]) for e in history.events(kind="fault")] == \
        [("pause", "client-1"), ("resume", "client-1")]


# Recipe, the option that bounds how long a dead holder keeps the lock, and when the
# next client must hold, in seconds after the kill. The clock of a session starts at the
# last message the server heard: ZooKeeper clients ping every third of the timeout and
# etcd keep-alives go every third of the TTL, so the lock can be freed up to a third
# early. ZooKeeper expires sessions on tick boundaries (200 ms here), etcd checks leases
# every 500 ms; a Redis key expires its TTL after the acquire, a moment before the kill.
KILLED_HOLDER_CASES = [
    ("zookeeper", {"session_timeout": 1.5}, 0.9, 4.0),
    ("etcd", {"ttl": 3}, 1.8, 6.0),
    ("redis", {"ttl": 1.5}, 0.9, 3.5),
]


@pytest.mark.parametrize("recipe, options, earliest, latest", KILLED_HOLDER_CASES)
def test_a_killed_holders_lock_is_freed_after_its_timeout(lab, unique_name, recipe, options, earliest, latest):
    with spawn_clients(lab, recipe, n=2, name=unique_name, **options) as clients:
        holder, waiter = clients
        holder.acquire(timeout=5)
        waiting = waiter.send("acquire", timeout=None)
        waiter.wait_for_state("waiting", timeout=5)
        killed_at = time.monotonic()
        holder.kill()
        waiter.wait_reply(waiting, timeout=latest + 5)
        freed_after = time.monotonic() - killed_at
        assert earliest <= freed_after <= latest, f"{recipe}: lock freed {freed_after:.2f} s after the kill"
        assert holder.state == "dead" and waiter.state == "holding"


@pytest.mark.parametrize("fenced", [True, False])
def test_a_paused_holder_loses_the_lock_and_fencing_rejects_its_late_write(lab, unique_name, fenced):
    history = History()
    store = FencedStore(lab.redis.client(), "store" + unique_name, fenced=fenced)
    store.reset()
    with spawn_clients(lab, "zookeeper", n=2, name=unique_name, history=history, store=store,
                       session_timeout=1.0) as clients:
        paused, other = clients
        old_token = paused.acquire(timeout=5)
        assert paused.write("before the pause")
        paused.pause(3.0)  # three session timeouts: a long GC pause
        new_token = other.acquire(timeout=10)
        assert new_token > old_token and other.write("new holder")
        late = paused.send("write", value="after the pause")  # runs the moment it resumes
        assert paused.wait_reply(late, timeout=10) is (not fenced)
        history.wait_for("lost", client="client-1", timeout=10)
    assert [(w.client, w.token, w.accepted) for w in store.writes()] == [
        ("client-1", old_token, True), ("client-2", new_token, True), ("client-1", old_token, not fenced)]
    assert check_mutual_exclusion(store.writes()).ok is fenced
    assert [e.detail["what"] for e in history.events(kind="fault")] == ["pause", "resume"]
    store.reset()


def test_expire_session_hands_the_lock_to_the_next_client(lab, unique_name):
    with spawn_clients(lab, "zookeeper", n=2, name=unique_name, session_timeout=10.0) as clients:
        holder, waiter = clients
        holder.acquire(timeout=5)
        old_session = holder.session["session_id"]
        waiting = waiter.send("acquire", timeout=None)
        waiter.wait_for_state("waiting", timeout=5)
        started = time.monotonic()
        holder.expire_session()
        waiter.wait_reply(waiting, timeout=5)
        # ten times faster than the session timeout: the server expired it on request
        assert time.monotonic() - started < 5
        clients.history.wait_for("lost", client="client-1", timeout=10)
        wait_until(lambda: holder.session.get("session_id") not in (None, old_session),
                   "kazoo to open a new session after the expiry", timeout=10)
        assert holder.state == "lost" and waiter.state == "holding"


@pytest.mark.parametrize("fault, ttl", [("revoke_lease", 5), ("stop_keepalive", 2)])
def test_etcd_lease_faults_hand_the_lock_to_the_next_client(lab, unique_name, fault, ttl):
    with spawn_clients(lab, "etcd", n=2, name=unique_name, ttl=ttl) as clients:
        holder, waiter = clients
        holder.acquire(timeout=5)
        waiting = waiter.send("acquire", timeout=None)
        waiter.wait_for_state("waiting", timeout=5)
        started = time.monotonic()
        getattr(holder, fault)()
        waiter.wait_reply(waiting, timeout=10)
        handed_over_after = time.monotonic() - started
        if fault == "revoke_lease":
            assert handed_over_after < 2.5  # at once, not after the 5 s TTL
        else:
            assert 1.0 <= handed_over_after <= 5.5  # once the un-refreshed 2 s lease runs out
        clients.history.wait_for("lost", client="client-1", timeout=10)
        assert [e.detail["what"] for e in clients.history.events(kind="fault")] == [fault]
        # a lease is lost for good: the client's next acquire opens a new session
        old_lease = holder.session["lease_id"]
        waiter.release()
        holder.acquire(timeout=5)
        assert holder.session["lease_id"] != old_lease and holder.state == "holding"


def test_expire_session_of_a_plain_kazoo_client_deletes_its_ephemeral_node(lab, zk, unique_name):
    victim = lab.zookeeper.client()
    states_seen = []
    victim.add_listener(states_seen.append)
    try:
        victim.create(unique_name, ephemeral=True)
        session_id, password = victim.client_id
        faults.expire_session(lab.zookeeper.hosts, session_id, password)
        assert zk.exists(unique_name) is None
        wait_until(lambda: "LOST" in states_seen, "the victim to learn that its session expired", timeout=10)
    finally:
        victim.stop()
        victim.close()


def test_expire_session_closes_again_when_the_client_takes_its_session_back(lab, zk, unique_name, monkeypatch):
    # A server drops the older connection of a session that connects again: the impostor's
    # connect drops the victim, and a victim that reconnects to the same server before the
    # close is read drops the impostor, close and all. Forced here: the first impostor
    # does not reconnect, and it sends its close only once the victim is back.
    victim = lab.zookeeper.client()
    states_seen = []
    back = threading.Event()

    def listen(state):
        states_seen.append(state)
        if state == "CONNECTED" and "SUSPENDED" in states_seen:
            back.set()
    victim.add_listener(listen)
    impostors = []

    class LateImpostor(KazooClient):
        def __init__(self, **options):
            if not impostors:
                options["connection_retry"] = {"max_tries": 0}  # dropped once, it stays down
            super().__init__(**options)
            impostors.append(self)

        def stop(self):
            if self is impostors[0] and not self._stopped.is_set():
                assert back.wait(10), f"the victim never reconnected: {states_seen}"
            super().stop()
    monkeypatch.setattr(sessions, "KazooClient", LateImpostor)
    try:
        victim.create(unique_name, ephemeral=True)
        session_id, password = victim.client_id
        closes = faults.expire_session(lab.zookeeper.hosts, session_id, password)
        assert closes >= 2 and len(impostors) >= 3, (closes, len(impostors))  # lost, closed again, confirmed
        assert zk.exists(unique_name) is None
        wait_until(lambda: "LOST" in states_seen, "the victim to learn that its session expired", timeout=10)
        with pytest.raises(sessions.SessionNotExpired, match="had ended before this close"):
            faults.expire_session(lab.zookeeper.hosts, session_id, password)
    finally:
        victim.stop()
        victim.close()


def test_kill_leader_kills_the_leader_and_a_new_one_is_elected():
    history = History()
    with labkit.up(zookeeper=3, etcd=0, redis=False, quiet=True) as lab:
        lab.zookeeper.wait_for_leader(timeout=30)
        killed = faults.kill_leader(lab.zookeeper, history=history)
        assert killed.state != "running"
        new_leader = lab.zookeeper.wait_for_leader(timeout=30)
        assert new_leader.name != killed.name
    assert [(e.detail["what"], e.detail["target"]) for e in history.events(kind="fault")] == \
        [("kill_leader", killed.name)]
