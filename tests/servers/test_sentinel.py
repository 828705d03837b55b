"""Real Redis Sentinel: three sentinels on 127.0.0.1 agree on the primary, promote the
replica when the primary dies, and stop (or are reaped) with their lab."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from labkit.servers import run_folder, state as lab_state
from labkit.servers.lab import attach
from labkit.servers.runners.process import process_state
from labkit.servers.services.sentinel import PRIMARY_NAME, FailoverTimeout

pytestmark = pytest.mark.backend  # sentinels fail over and are reaped as processes or as containers

LOCAL = os.environ.get("LABKIT_BACKEND", "local") == "local"


@pytest.fixture(scope="module")
def sentinel_lab(lab_of):
    """A Redis primary, its replica and three sentinels watching them."""
    return lab_of(zookeeper=0, etcd=0, redis=True, replica=True, sentinels=3)


def listening_addresses(port: int) -> set[str]:
    """Local addresses with a listening TCP socket on ``port``, from the kernel's tables."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, port_hex = local.rsplit(":", 1)
            if state == "0A" and int(port_hex, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


def sentinel_view(sentinel) -> str:
    """What one sentinel holds about the primary's replicas (after a failover: the old primary),
    for a failure message: whether it is in TILT (it then acts on nothing for 30 s after its
    timer ran 2 s late), and each replica's record (flags, the role it last reported and how long
    ago, its last INFO and PING answers), which say which of Sentinel's conditions for a
    demotion is not met."""
    try:
        tilt = {key: value for key, value in sentinel.command("INFO", "sentinel").items() if "tilt" in key}
        records = sentinel.command("SENTINEL", "REPLICAS", PRIMARY_NAME)
    except Exception as error:  # noqa: BLE001 - a failure message must not fail
        return f"(did not answer: {error!r})"
    keys = ("ip", "port", "flags", "role-reported", "role-reported-time", "info-refresh", "last-ok-ping-reply",
            "master-link-down-time", "s-down-time", "master-host", "master-port")
    return f"{tilt} " + "; ".join(str({k: r[k] for k in keys if k in r}) for r in records)


def test_three_sentinels_agree_on_the_primary_on_loopback_only(sentinel_lab):
    primary = sentinel_lab.redis.primary
    assert sentinel_lab.sentinel.primary_endpoint() == primary.endpoint
    assert set(sentinel_lab.sentinel.named_primaries().values()) == {primary.endpoint}
    for sentinel in sentinel_lab.sentinel.nodes:
        assert sentinel.role == "sentinel" and sentinel.quorum_reachable() and sentinel.knows_replica()
        others = sentinel.command("SENTINEL", "SENTINELS", PRIMARY_NAME)
        assert len(others) == 2 and {other["ip"] for other in others} == {"127.0.0.1"}
        assert sentinel.command("SENTINEL", "CONFIG", "GET", "announce-ip") == {"announce-ip": "127.0.0.1"}
        if LOCAL:
            assert listening_addresses(sentinel.port) == {"0100007F"}  # 127.0.0.1, nothing else
    recorded = json.loads((sentinel_lab.run_dir / "lab.json").read_text())["nodes"]
    assert [n["name"] for n in recorded if n["kind"] == "sentinel"] == ["sentinel1", "sentinel2", "sentinel3"]
    assert all(n["runner"].get("pid") or n["runner"].get("container_id") for n in recorded)
    attached = attach(sentinel_lab.id)
    assert attached.plan == sentinel_lab.plan   # read back from lab.json: the same nodes, runners, aliases
    assert [n.name for n in attached.sentinel.nodes] == [n.name for n in sentinel_lab.sentinel.nodes]
    assert attached.sentinel.primary_endpoint() == primary.endpoint


def test_waiting_for_a_failover_that_does_not_come_says_what_the_sentinels_saw(sentinel_lab):
    with pytest.raises(FailoverTimeout) as raised:
        sentinel_lab.sentinel.wait_for_failover(sentinel_lab.redis, timeout=0.5)
    message = str(raised.value)
    assert "did not promote a replica within" in message and sentinel_lab.redis.primary.endpoint in message
    assert set(raised.value.logs) == {"sentinel1", "sentinel2", "sentinel3"}
    assert "last log lines of sentinel1" in message and "+monitor master" in message


@pytest.mark.slow
def test_killing_the_primary_makes_the_sentinels_promote_the_replica(sentinel_lab):
    old, replica = sentinel_lab.redis.primary, sentinel_lab.redis.replica
    client = sentinel_lab.redis.client()
    client.set("before-the-crash", "1")
    assert client.execute_command("WAIT", 1, 2000) == 1  # on the replica too
    client.close()

    old.kill()
    began = time.monotonic()
    new = sentinel_lab.sentinel.wait_for_failover(sentinel_lab.redis, timeout=30)
    failover_seconds = time.monotonic() - began
    print(f"\nsentinel failover: {failover_seconds:.2f} s after SIGKILL of {old.name}")
    assert new is replica and sentinel_lab.redis.primary is replica and new.role == "primary"
    assert sentinel_lab.sentinel.primary_endpoint() == replica.endpoint != old.endpoint
    promoted = new.client()
    assert promoted.get("before-the-crash") == b"1" and promoted.set("after", "1")
    promoted.close()
    assert failover_seconds < 30

    # The old primary comes back as a primary, with nothing telling it otherwise; the sentinels
    # demote it once they have seen it report that role for 8 s, and seen it up for 8 s, on INFO
    # they send a replica every 10 s (Sentinel's own fixed timers): up to ~26 s on an idle machine,
    # and a run under two CPU hogs took over 30. The claim is that they do it, not how fast.
    old.start()
    old.wait_ready()
    began = time.monotonic()
    while old.role != "replica":
        assert time.monotonic() < began + 90, (
            "the sentinels did not turn the old primary into a replica within 90 s; what each saw of it, "
            "and their last log lines:\n"
            + "\n".join(f"{node.name}: {sentinel_view(node)}\n{node.log_tail(10)}"
                        for node in sentinel_lab.sentinel.nodes)
            + f"\n{old.name}:\n{old.log_tail(10)}")
        time.sleep(0.1)
    print(f"sentinel demoted the restarted {old.name} to a replica {time.monotonic() - began:.1f} s after it answered")


def test_labkit_down_and_the_reaper_stop_sentinels_and_redlock_instances():
    script = textwrap.dedent("""
        import os, signal, labkit
        lab = labkit.up(zookeeper=0, etcd=0, redis=True, replica=True, sentinels=1, redlock=3, quiet=True)
        print(" ".join(str(n.pid) for n in lab.nodes), lab.id, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)   # the owner dies without cleaning up
    """)
    owner = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=90,
                           env=os.environ)
    assert owner.returncode == -signal.SIGKILL, owner.stderr
    *pids, lab_id = owner.stdout.split()
    assert len(pids) == 6  # primary, replica, r1..r3, one sentinel
    if LOCAL:
        assert all(process_state(int(pid)) == "running" for pid in pids)
    assert lab_id in lab_state.reap_orphans(log=None)
    if LOCAL:
        assert all(process_state(int(pid)) == "stopped" for pid in pids)
    assert not (run_folder.labs_dir() / lab_id).exists()
