"""Notebook 05: a coordinator crash and quorum.

* ``zookeeper_write`` / ``etcd_write`` with ``labkit.timing.seconds_until``: how
  long until a write succeeds again after a crash.
* ``write_with_new_client`` / ``values_on_members`` / ``lose_majority``: a write attempted
  without a majority, and what each member holds afterwards.
* ``acquisitions_through_members``: locks taken through different ensemble members, with
  the zxid (ZooKeeper) or revision (etcd) of each acquisition.
* ``crash_then_fail_over``: a holder dies, then the leader: the new leader starts the dead
  holder's session (lease) timer again, so its lock is freed about one election plus one
  timeout after the leader's crash, later than one timeout after its own.

What can fail: ``TimeoutError`` when a recovery does not come within its deadline, the
client libraries' errors when a server is unreachable.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import grpc
from etcd3 import Etcd3Client, etcdrpc
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from labkit.clients import spawn_clients
from labkit.faults.sessions import kill_leader
from labkit.harness.queue import queue_behind
from labkit.locks.registry import RecipeHandle, make_lock
from labkit.progress import shows_progress
from labkit.record.events import EventSink
from labkit.record.history import History
from labkit.servers.services.etcd import etcd_argv
from labkit.timing import seconds_until, wait_until
from labkit.vocabulary import ACCEPTED_COLOUR, FAULT_COLOUR, GUIDE_COLOUR, STATE_COLOURS

if TYPE_CHECKING:
    from labkit.servers.services.etcd import EtcdNode
    from labkit.servers.lab import Lab
    from labkit.servers.services.zookeeper import ZooKeeperNode


def zookeeper_write(client: KazooClient, path: str = "/lab/probe", value: str | None = None,
                    timeout: float = 1.0) -> Callable[[], Any]:
    """An operation for ``seconds_until``: one ZooKeeper write that gives up after ``timeout``."""
    client.ensure_path(path)
    return lambda: client.set_async(path, (value or str(time.time())).encode()).get(timeout=timeout)


def etcd_write(client: Etcd3Client, key: str = "/lab/probe", value: str | None = None,
               timeout: float = 1.0) -> Callable[[], Any]:
    """An operation for ``seconds_until``: one etcd put that gives up after ``timeout``
    (the gRPC call itself, so that the timeout is this one's, not the client's)."""
    put = client.kvstub.Put
    # metadata: a private lab's login token rides on every call
    return lambda: put(etcdrpc.PutRequest(key=key.encode(), value=(value or str(time.time())).encode()), timeout,
                       metadata=client.metadata)


def write_with_new_client(lab: Lab, service: str, key: str, value: str, timeout: float = 2.0) -> bool:
    """Connect a new client to ``service`` ("zookeeper": all members; "etcd": the first
    running member) and write ``value`` under ``key``. True if the write was acknowledged
    within ``timeout`` seconds, False if it timed out (no quorum to take it)."""
    if service == "zookeeper":
        client = KazooClient(hosts=lab.zookeeper.hosts, timeout=timeout, **lab.zookeeper.auth)
        try:
            client.start(timeout=timeout)
            zookeeper_write(client, key, value, timeout)()
            return True
        except KazooTimeoutError:
            return False
        finally:
            client.stop()
            client.close()
    client = None
    try:
        # In a private lab the login itself is a raft proposal (etcd issues the token through
        # the log), so without a quorum a new client cannot even log in: the same "no".
        client = lab.etcd.client(timeout=timeout)
        etcd_write(client, key, value, timeout)()
        return True
    except grpc.RpcError as error:
        timed_out = error.code() in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE) or (
            error.code() == grpc.StatusCode.UNKNOWN and "deadline exceeded" in (error.details() or ""))
        if not timed_out:
            raise
        return False
    finally:
        if client is not None:
            client.close()


def values_on_members(lab: Lab, service: str, key: str, timeout: float = 5.0) -> dict[str, str | None]:
    """What each running member of ``service`` holds under ``key`` (None: no such key),
    read through a client connected to that member only, after catching up with the
    leader (ZooKeeper ``sync``; etcd's default linearizable read)."""
    values: dict[str, str | None] = {}
    for node in getattr(lab, service).nodes:
        if node.state != "running":
            continue
        if service == "zookeeper":
            client = KazooClient(hosts=node.endpoint, timeout=timeout, **node.auth)
            client.start(timeout=timeout)
            try:
                client.sync(key)
                stat = client.exists(key)
                values[node.name] = client.get(key)[0].decode() if stat else None
            finally:
                client.stop()
                client.close()
        else:
            client = lab.etcd.client(node=node, timeout=timeout)
            try:
                reply = client.kvstub.Range(etcdrpc.RangeRequest(key=key.encode()), timeout, metadata=client.metadata)
                values[node.name] = reply.kvs[0].value.decode() if reply.kvs else None
            finally:
                client.close()
    return values


def etcd_queue(client: Etcd3Client, prefix: str) -> list[tuple[str, int, int]]:
    """(key, create revision, lease id) of every contender under ``prefix``, oldest first."""
    keys = client.get_prefix(prefix.rstrip("/") + "/", sort_target="create")
    return [(meta.key.decode(), meta.create_revision, meta.lease_id) for _, meta in keys]


@shows_progress("a cluster losing its majority, then getting it back")
def lose_majority(lab: Lab, service: str, key: str = "/lab/value") -> dict[str, Any]:
    """Write "before" under ``key``; kill the leader and one follower of ``service``; try to
    write "during" through a new client (2 s); restart both and time the first write after
    the restart. Returns what happened, with the value each member holds afterwards.
    Raises AssertionError if the first write fails (a broken lab), TimeoutError if writes
    never resume."""
    cluster = getattr(lab, service)
    assert write_with_new_client(lab, service, key, "before"), f"{service}: the first write should succeed"
    leader = cluster.leader()
    follower = next(node for node in cluster.nodes if node is not leader)
    killed_at = time.monotonic()
    leader.kill()
    follower.kill()
    during = write_with_new_client(lab, service, key, "during", timeout=2.0)
    restarted_at = time.monotonic()
    leader.start()
    follower.start()
    cluster.wait_for_leader(timeout=60)
    resumed = seconds_until(lambda: write_with_new_client(lab, service, "/lab/after", "after"), since=restarted_at)
    return {"write during the outage": during, "members down (s)": round(restarted_at - killed_at, 2),
            "writes again after restart (s)": round(resumed, 2), "values": values_on_members(lab, service, key)}


def ordering_plot(zookeeper_rows: list[dict[str, Any]], etcd_rows: list[dict[str, Any]]) -> Any:
    """Side by side: the czxid (low 32 bits) and the etcd header revision of each acquisition
    of ``acquisitions_through_members``, in acquisition order, coloured by member."""
    import matplotlib.pyplot as plt

    figure, (zookeeper_axes, etcd_axes) = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
    for axes, rows, number, label in ((zookeeper_axes, zookeeper_rows, "czxid", "czxid (low 32 bits: counter in the epoch)"),
                                      (etcd_axes, etcd_rows, "header_revision", "etcd revision at acquisition")):
        for member in sorted({row["member"] for row in rows}):
            points = [(index + 1, row[number] & 0xFFFFFFFF) for index, row in enumerate(rows) if row["member"] == member]
            axes.plot(*zip(*points), linestyle="none", marker="o", markersize=9, label=f"through {member}")
        axes.plot(range(1, len(rows) + 1), [row[number] & 0xFFFFFFFF for row in rows], color=GUIDE_COLOUR, linewidth=1, zorder=0)
        axes.set_xlabel("acquisition number (order the lock was taken)")
        axes.set_ylabel(label)
        axes.legend(fontsize=8)
    zookeeper_axes.set_title(f"ZooKeeper (epoch {zookeeper_rows[0]['epoch']})")
    etcd_axes.set_title("etcd")
    return figure


def recovery_plot(leader_crash: dict[str, float], majority_back: dict[str, float]) -> Any:
    """Bars per service: seconds from a leader's kill to the first write, and from the
    restart of a lost majority to the first write."""
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(8, 3.5), layout="constrained")
    labels = list(leader_crash)
    positions = range(len(labels))
    ax.bar([p - 0.2 for p in positions], [leader_crash[label] for label in labels], width=0.4,
           label="leader killed: kill → first write")
    ax.bar([p + 0.2 for p in positions], [majority_back[label] for label in labels], width=0.4,
           label="majority lost: restart → first write")
    ax.set_xticks(list(positions), labels)
    ax.set_ylabel("time until a write succeeds (s)")
    ax.set_title("How long until the cluster accepted writes again")
    ax.legend(fontsize=8)
    return figure


# ---- acquisitions through different members: the leader's log orders them ----------------------
def acquisitions_through_members(lab: Lab, service: str, rounds: int = 2, name: str | None = None,
                                 history: History | None = None, timeout: float = 30.0) -> list[dict[str, Any]]:
    """One lock client per member of ``service`` ("zookeeper" or "etcd"), each connected to
    that member only; they contend for one lock ``rounds`` times each, at the same time.

    Returns one row per acquisition, in acquisition order: member, token, and for
    ZooKeeper the lock node's czxid and mzxid, for etcd the key's create revision and the
    header revision of the acquisition. Raises TimeoutError if a thread does not finish.
    """
    name = name or f"/locks/members-{service}-{time.time_ns()}"
    history = history if history is not None else History()
    rows: list[dict[str, Any]] = []
    errors: list[BaseException] = []
    cluster = getattr(lab, service)
    locks, closers = [], []
    for node in cluster.nodes:
        handle = _member_lock(service, node, name, history.sink(node.name))
        locks.append((node.name, handle.lock))
        closers.append(handle.close)

    def contend(member: str, lock: Any) -> None:
        try:
            for _ in range(rounds):
                lock.acquire(timeout=timeout)
                try:
                    rows.append(dict(member=member, token=lock.token, **_acquisition_facts(service, lock)))
                finally:
                    lock.release()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=contend, args=pair, daemon=True) for pair in locks]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout)
        if any(thread.is_alive() for thread in threads):
            raise TimeoutError(f"contenders through {service} members did not finish within {timeout:.0f} s")
        if errors:
            raise errors[0]
    finally:
        for close in closers:
            close()
    return rows


def _member_lock(service: str, node: ZooKeeperNode | EtcdNode, name: str, on_event: EventSink) -> RecipeHandle:
    """A lock whose connection goes to ``node`` only (the registry's factory, on that member)."""
    if service == "zookeeper":
        return make_lock("zookeeper", {"zookeeper": node.endpoint}, name, node.name, on_event, session_timeout=6.0)
    return make_lock("etcd", {"etcd": node.endpoint}, name, node.name, on_event, ttl=5)


def _acquisition_facts(service: str, lock: Any) -> dict[str, int]:
    if service == "zookeeper":
        stat = lock.client.exists(f"{lock.path}/{lock.node}")
        return {"czxid": stat.czxid, "mzxid": stat.mzxid, "epoch": stat.czxid >> 32}
    return {"create_revision": lock.token, "header_revision": lock.header_revision}


# ---- a failover restarts the timers: a dead holder's lock outlives its timeout -----------------
# The lab's etcd election timeout (the new leader extends every lease by it on promotion), read
# from the flags labkit starts members with; and how often etcd's lessor looks for expired
# leases (a constant of etcd's code, 500 ms), the granularity of a lease's end.
_ETCD_FLAGS = etcd_argv("etcd", "name", "data", 0, 0, "cluster", "token")
ETCD_ELECTION_TIMEOUT = int(_ETCD_FLAGS[_ETCD_FLAGS.index("--election-timeout") + 1]) / 1000
LEASE_EXPIRY_CHECK = 0.5
# crash_then_fail_over's waiter: its timer runs through the holder's 3 s and the election
FAILOVER_WAITER_TIMEOUT = 15.0

@dataclass(frozen=True)
class FailoverTimers:
    """What ``crash_then_fail_over`` measured, in seconds from the holder's SIGKILL.

    ``timeout`` is the session timeout (ZooKeeper) or lease TTL (etcd) of the holder;
    ``leader_killed_at``: when the leader was killed; ``elected_at``: when a new leader
    answered a probe; ``freed_at``: when the waiter held the lock (its event), which is as
    soon as the server deleted the dead holder's node or key."""

    service: str
    timeout: float
    leader_killed_at: float
    elected_at: float
    freed_at: float
    killed_leader: Any
    history: History

    @property
    def election(self) -> float:
        """Leader killed → a new leader answers."""
        return self.elected_at - self.leader_killed_at

    @property
    def freed_after_leader_kill(self) -> float:
        return self.freed_at - self.leader_killed_at

    def restart_killed_leader(self, cluster: Any, timeout: float = 60.0) -> None:
        """Start the killed leader again and wait until every member of ``cluster`` (the
        lab's service) leads or follows. Raises TimeoutError if they do not within ``timeout``."""
        self.killed_leader.start()
        _wait_for_full_cluster(cluster, timeout)

    def row(self) -> dict[str, Any]:
        return {"service": self.service, "timeout (s)": self.timeout,
                "leader killed (s)": round(self.leader_killed_at, 2), "election (s)": round(self.election, 2),
                "lock freed (s)": round(self.freed_at, 2),
                "freed after leader kill (s)": round(self.freed_after_leader_kill, 2)}


@shows_progress("a leader crash, then the failover")
def crash_then_fail_over(lab: Lab, service: str, timeout: float, leader_kill_delay: float | None = None,
                         name: str | None = None, waiter_timeout: float = FAILOVER_WAITER_TIMEOUT) -> FailoverTimers:
    """A holder process and a waiter process on one lock of ``service`` ("zookeeper" or
    "etcd"): the holder's session timeout / lease TTL is ``timeout``, the waiter's
    ``waiter_timeout``. The holder is SIGKILLed; ``leader_kill_delay`` seconds later
    (default: half the timeout, so its session or lease is still alive) the cluster's
    leader is SIGKILLed too. Waits until the waiter holds the lock. etcd clients talk to a
    follower, which survives (python-etcd3 does not fail over).

    The waiter's own timer runs through the election as well: nobody answers its keep-alives
    until there is a new leader, and a waiter with the holder's timeout could give up first
    on a busy machine (its client-side deadline, the safe thing to do). Hence a longer one:
    what is measured is the holder's timer.

    The killed leader stays down: restart it with ``outcome.restart_killed_leader(cluster)``.
    If this raises after the kill, it has restarted the killed leader already, so the cells
    after it find the whole cluster. Raises ValueError if the delay is not shorter than the
    timeout or the waiter's timeout is not longer, TimeoutError / ``ClientError`` if no leader
    is elected or the waiter never gets the lock.
    """
    delay = timeout / 2 if leader_kill_delay is None else leader_kill_delay
    if not 0 <= delay < timeout:
        raise ValueError(f"the leader must die before the holder's {timeout} s timeout runs out, not after {delay} s")
    if waiter_timeout <= timeout:
        raise ValueError(f"waiter_timeout={waiter_timeout!r} must be longer than the holder's {timeout} s: the "
                         f"waiter's timer runs through the same election and must outlive it")
    cluster = getattr(lab, service)
    _wait_for_full_cluster(cluster, timeout=60)
    connections = None
    if service == "etcd":
        follower = next(node for node in cluster.nodes if node.role == "follower")
        connections = {"etcd": follower.endpoint}
    history = History()
    name = name or f"/locks/failover-timers-{service}-{time.time_ns()}"
    killed = None
    try:
        with spawn_clients(lab, service, n=2, name=name, history=history, session_timeout=timeout, ttl=timeout,
                           timeouts={"client-2": waiter_timeout}, connections=connections) as clients:
            pending = queue_behind(clients)
            holder, waiter = clients
            holder.kill()
            crashed_at = time.time()
            time.sleep(max(0.0, crashed_at + delay - time.time()))   # the schedule of the lesson
            killed = kill_leader(cluster, history=history)
            leader_killed_at = time.time()
            cluster.wait_for_leader(timeout=30)
            elected_at = time.time()
            waiter.wait_reply(pending[waiter.name], timeout=elected_at - crashed_at + 3 * timeout + 30)
            freed_at = history.events(client=waiter.name, kind="acquired")[-1].time
            waiter.release()
    except BaseException:
        if killed is not None:
            _start_again(killed, cluster)
        raise
    return FailoverTimers(service, timeout, leader_killed_at - crashed_at, elected_at - crashed_at,
                          freed_at - crashed_at, killed, history)


def _start_again(killed: Any, cluster: Any, timeout: float = 60.0) -> None:
    # On the way out of a failed experiment: the error being raised is the news, so a
    # restart that fails too is left for the next cell's _wait_for_full_cluster to report.
    try:
        killed.start()
        _wait_for_full_cluster(cluster, timeout)
    except Exception:
        pass


def _wait_for_full_cluster(cluster: Any, timeout: float) -> None:
    roles = lambda: sorted(node.role for node in cluster.nodes)
    wait_until(lambda: roles() == ["follower"] * (len(cluster.nodes) - 1) + ["leader"],
               f"every member of {[node.name for node in cluster.nodes]} to lead or follow", timeout)


def failover_timers_plot(outcomes: list[FailoverTimers], ax: Any = None) -> Any:
    """One row per outcome, seconds after the holder's crash: the crash, the leader's kill,
    the new leader, the lock freed; a dotted mark where one timeout after the crash would
    have freed it without a failover."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(9, 1.2 + 0.9 * len(outcomes)), layout="constrained")
    for row, outcome in enumerate(outcomes):
        ax.broken_barh([(0, outcome.freed_at)], (row - 0.15, 0.3), color=STATE_COLOURS["waiting"])
        ax.broken_barh([(outcome.leader_killed_at, outcome.election)], (row - 0.15, 0.3), color=FAULT_COLOUR)
        ax.plot([outcome.timeout] * 2, [row - 0.35, row + 0.35], linestyle=":", color=GUIDE_COLOUR)
        ax.plot(outcome.freed_at, row, marker="o", color=ACCEPTED_COLOUR, markersize=9)
        ax.annotate(f"freed {outcome.freed_at:.1f} s", (outcome.freed_at, row), xytext=(6, 6),
                    textcoords="offset points", fontsize=8)
        ax.annotate(f"timeout {outcome.timeout:g} s", (outcome.timeout, row - 0.35), xytext=(3, -10),
                    textcoords="offset points", fontsize=8, color=GUIDE_COLOUR)
    ax.set_yticks(range(len(outcomes)), [outcome.service for outcome in outcomes])
    ax.set_ylim(-0.7, len(outcomes) - 0.3)
    ax.set_xlabel("seconds after the holder was killed (purple: leader killed → new leader)")
    ax.set_title("A dead holder's lock across a leader failover")
    return ax
