"""ZooKeeperLock's server_lag is the ensemble's own: learned from every server of the client's
connection string with the ``conf`` four-letter word (syncLimit x tickTime + tickTime / 2,
the largest), 0 for a standalone server, and refused with a clear error when a server will not
say or none answers (one that is down is asked when the client connects to it). Never the lab's constant: an ensemble with other settings gets its own lag (on main it got
the lab's 1.1 s whatever the ensemble said)."""
from __future__ import annotations

import gc
import socket
import threading
from pathlib import Path

import pytest

import labkit
from labkit.locks.zookeeper import ZooKeeperLock
from kazoo.client import KazooClient

from labkit.servers.services import zookeeper_conf
from labkit.servers.services.zookeeper_conf import (LearnedLag, ServerLagUnknown, ServerUnreachable, lag_of,
                                                     lag_of_servers, parse_conf)
from labkit.servers.services.zookeeper import SERVER_LAG

# Not the lab's tick nor its syncLimit: 8 x 0.3 s + 0.15 s = 2.55 s, far from the lab's 1.1 s.
OTHER = {"tickTime": 300, "syncLimit": 8}
NO_CONF = {"4lw.commands.whitelist": "srvr,mntr,ruok"}   # what labkit itself asks, and not conf


def lag_in_zoo_cfg(node) -> float:
    """What the node's own zoo.cfg implies, read from the file the lab wrote."""
    settings = parse_conf((Path(node.data_dir) / "zoo.cfg").read_text())
    tick = int(settings["tickTime"]) / 1000
    return int(settings["syncLimit"]) * tick + tick / 2


@pytest.fixture(scope="module")
def lab_ensemble():
    with labkit.up(zookeeper=3, etcd=0, redis=False, quiet=True) as lab:
        yield lab


@pytest.fixture(scope="module")
def other_ensemble():
    with labkit.up(zookeeper=3, etcd=0, redis=False, quiet=True, zookeeper_settings=OTHER) as lab:
        yield lab


def lock_on(lab, name: str, timeout: float = 6.0, **kwargs):
    client = lab.zookeeper.client(timeout=timeout)
    return client, ZooKeeperLock(client, name, **kwargs)


def stopped(client) -> None:
    client.stop()
    client.close()


def test_the_lab_ensembles_lag_is_what_its_zoo_cfg_implies(lab_ensemble, unique_name):
    client, lock = lock_on(lab_ensemble, unique_name)
    try:
        implied = {lag_in_zoo_cfg(node) for node in lab_ensemble.zookeeper.nodes}
        assert implied == {SERVER_LAG}, implied
        assert lock.server_lag == pytest.approx(SERVER_LAG) == lab_ensemble.zookeeper.server_lag
        lock.acquire(timeout=10)
        assert lock.is_held
        lock.release()
    finally:
        stopped(client)


def test_an_ensemble_with_other_settings_gets_its_own_lag(other_ensemble, unique_name):
    # On main this read 1.1 s (the lab's SERVER_LAG) for any ensemble: a deadline 1.45 s late here.
    client, lock = lock_on(other_ensemble, unique_name)
    try:
        expected = 8 * 0.3 + 0.3 / 2
        assert [lag_in_zoo_cfg(node) for node in other_ensemble.zookeeper.nodes] == pytest.approx([expected] * 3)
        assert lock.server_lag == pytest.approx(expected), (lock.server_lag, SERVER_LAG)
        assert lock.server_lag != pytest.approx(SERVER_LAG)
        assert other_ensemble.zookeeper.server_lag == pytest.approx(expected)
        lock.acquire(timeout=10)
        assert lock.time_left() <= 6.0 * 0.8 - expected
        lock.release()
    finally:
        stopped(client)


def test_the_largest_lag_of_the_servers_counts_and_a_standalone_server_has_none(lab, other_ensemble, unique_name):
    standalone = lab.zookeeper.nodes[0]
    client, lock = lock_on(lab, unique_name)
    try:
        assert lock.server_lag == 0                # it expires the sessions it answers for
    finally:
        stopped(client)
    members = [(node.host, node.port) for node in other_ensemble.zookeeper.nodes]
    assert lag_of_servers([(standalone.host, standalone.port)] + members) == pytest.approx(8 * 0.3 + 0.15)


def test_locks_made_one_after_another_on_one_client_ask_conf_once(lab_ensemble, unique_name, monkeypatch):
    # kazoo's own habit, client.Lock(path) per use: a lock per acquire. Before, the learned lag
    # lived only as long as some lock did, and each new lock asked every server's conf again.
    asked = []
    real = zookeeper_conf.ask_conf
    monkeypatch.setattr(zookeeper_conf, "ask_conf", lambda *args, **kwargs: asked.append(args) or real(*args, **kwargs))
    client = lab_ensemble.zookeeper.client(timeout=6.0)
    try:
        for round_ in range(3):
            lock = ZooKeeperLock(client, unique_name)
            lock.acquire(timeout=10)
            lock.release()
            del lock
            # forced: the hold's watch thread is gone and the lock collected before the next one
            for thread in threading.enumerate():
                if thread.name.startswith("zookeeper-deadline-"):
                    thread.join(timeout=30)
            gc.collect()
            if round_ == 0:
                first = len(asked)                # every server once, or none: another client of these hosts lives
                assert first in (0, len(lab_ensemble.zookeeper.nodes)), asked
        assert len(asked) == first, f"asked conf again for a later lock on the same client: {asked}"
    finally:
        stopped(client)


def free_port() -> int:
    with socket.socket() as probe:               # a port with nobody behind it
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_member_that_is_down_is_skipped_until_the_client_is_on_it(other_ensemble, unique_name):
    dead = ("127.0.0.1", free_port())
    members = [(node.host, node.port) for node in other_ensemble.zookeeper.nodes]
    client = KazooClient(hosts=",".join(f"{h}:{p}" for h, p in members + [dead]), timeout=6.0,
                         **other_ensemble.zookeeper.auth)
    client.start(timeout=15)
    try:
        lock = ZooKeeperLock(client, unique_name)
        assert lock.server_lag == pytest.approx(8 * 0.3 + 0.15)   # from the three that answered
        lock.acquire(timeout=10)
        assert lock.is_held
        lock.release()
    finally:
        stopped(client)
    learned = LearnedLag(members + [dead], timeout=1.0)
    assert learned.lag() == pytest.approx(2.55)
    with pytest.raises(ServerUnreachable, match=rf"ZooKeeper server 127.0.0.1:{dead[1]}"):
        learned.lag(connected=dead)            # its answers would prove nothing: the holder gives up


@pytest.mark.no_servers
def test_a_server_nobody_answers_at_is_refused():
    port = free_port()
    with pytest.raises(ServerLagUnknown, match=rf"(?s)could not ask the ZooKeeper server 127.0.0.1:{port}.*pass server_lag="):
        lag_of_servers([("127.0.0.1", port)], timeout=1.0)


@pytest.mark.no_servers
def test_a_conf_reply_without_its_numbers_is_refused():
    with pytest.raises(ServerLagUnknown, match=r"(?s)without a tickTime and syncLimit.*pass server_lag="):
        lag_of(parse_conf("clientPort=2181\npeerType=0\ntickTime=2000\n"), "a test server")
    assert lag_of(parse_conf("tickTime=2000\ninitLimit=10\nsyncLimit=5\npeerType=0\n"), "x") == 11.0   # zoo_sample.cfg
    assert lag_of(parse_conf("tickTime=2000\nserverId=0\n"), "x") == 0.0


@pytest.fixture(scope="module")
def no_conf_lab():
    with labkit.up(zookeeper=1, etcd=0, redis=False, quiet=True, zookeeper_settings=NO_CONF) as lab:
        yield lab


def test_a_server_that_will_not_say_conf_makes_the_lock_refuse(no_conf_lab, unique_name):
    assert "not in the whitelist" in no_conf_lab.zookeeper.nodes[0].four_letter("conf")
    client, lock = lock_on(no_conf_lab, unique_name)
    try:
        with pytest.raises(ServerLagUnknown) as refused:
            lock.acquire(timeout=5)
        text = str(refused.value)
        assert "refused the conf four-letter word" in text and "4lw.commands.whitelist" in text, text
        assert "pass server_lag=" in text and "syncLimit x tickTime + tickTime / 2" in text, text
        assert lock.node is None and client.exists(unique_name) is None      # it never queued
        # Told the lag (this one is standalone: 0), the same lock works.
        told = ZooKeeperLock(client, unique_name, server_lag=0)
        told.acquire(timeout=5)
        assert told.is_held
        told.release()
    finally:
        stopped(client)
