"""Notebook 05: a coordinator crash and quorum.

* ``zookeeper_write`` / ``etcd_write`` with ``labkit.lessons.common.seconds_until``: how
  long until a write succeeds again after a crash.
* ``write_with_new_client`` / ``values_on_members``: a write attempted without a majority,
  and what each member holds afterwards.
* ``acquisitions_through_members``: locks taken through different ensemble members, with
  the zxid (ZooKeeper) or revision (etcd) of each acquisition.

What can fail: ``TimeoutError`` when a recovery does not come within its deadline, the
client libraries' errors when a server is unreachable.
"""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Callable

import grpc
from etcd3 import Etcd3Client, etcdrpc
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from labkit.locks.registry import RecipeHandle, make_lock
from labkit.record.events import EventSink
from labkit.record.history import History

if TYPE_CHECKING:
    from labkit.servers.etcd import EtcdNode
    from labkit.servers.lab import Lab
    from labkit.servers.zookeeper import ZooKeeperNode


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
    return lambda: put(etcdrpc.PutRequest(key=key.encode(), value=(value or str(time.time())).encode()), timeout)


def write_with_new_client(lab: Lab, service: str, key: str, value: str, timeout: float = 2.0) -> bool:
    """Connect a new client to ``service`` ("zookeeper": all members; "etcd": the first
    running member) and write ``value`` under ``key``. True if the write was acknowledged
    within ``timeout`` seconds, False if it timed out (no quorum to take it)."""
    if service == "zookeeper":
        client = KazooClient(hosts=lab.zookeeper.hosts, timeout=timeout)
        try:
            client.start(timeout=timeout)
            zookeeper_write(client, key, value, timeout)()
            return True
        except KazooTimeoutError:
            return False
        finally:
            client.stop()
            client.close()
    client = lab.etcd.client(timeout=timeout)
    try:
        etcd_write(client, key, value, timeout)()
        return True
    except grpc.RpcError as error:
        if error.code() not in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
            raise
        return False
    finally:
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
            client = KazooClient(hosts=node.endpoint, timeout=timeout)
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
                reply = client.kvstub.Range(etcdrpc.RangeRequest(key=key.encode()), timeout)
                values[node.name] = reply.kvs[0].value.decode() if reply.kvs else None
            finally:
                client.close()
    return values


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
