"""Faults that end a lease of life on the server: expire a ZooKeeper session, revoke an
etcd lease, kill a cluster's leader.

``expire_session`` makes the ZooKeeper ensemble itself close a session (a server-side
``closeSession``, which the session's own client then observes as expired);
``revoke_lease`` makes etcd drop a lease and every key attached to it; ``kill_leader``
SIGKILLs the node the cluster currently follows. Nothing is simulated in the client.

What can fail: an unreachable server (the client library's timeout error), a cluster with
no leader (``labkit.errors.NoLeader``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from kazoo.client import KazooClient

from labkit.faults.process import record_fault
from labkit.servers.secret import login_for

if TYPE_CHECKING:
    from etcd3 import Etcd3Client

    from labkit.record.history import History
    from labkit.servers.etcd import EtcdService
    from labkit.servers.node import Node
    from labkit.servers.zookeeper import ZooKeeperService


def expire_session(zookeeper_hosts: str, session_id: int, password: bytes, timeout: float = 10.0,
                   auth: dict | None = None) -> None:
    """Make the ZooKeeper ensemble expire a session for real, from outside its process.

    A second client connects with the same session id and password, then closes the
    session. The server deletes the session's ephemeral nodes at once and the original
    client learns on its next contact that its session is gone (SESSION_EXPIRED).
    Raises kazoo's timeout error when the ensemble does not answer within ``timeout``,
    and ``kazoo.exceptions.SessionExpiredError``-like failures when the session has
    already expired. A private lab refuses even this close before a login: ``auth`` is
    ``lab.zookeeper.auth``; None finds this user's lab at ``zookeeper_hosts`` and logs in.
    """
    login = login_for(zookeeper_hosts, "zookeeper") if auth is None else auth
    impostor = KazooClient(hosts=zookeeper_hosts, client_id=(session_id, password), timeout=timeout, **login)
    try:
        impostor.start(timeout=timeout)
        impostor.stop()
    finally:
        impostor.close()


def revoke_lease(etcd_client: Etcd3Client, lease_id: int) -> None:
    """Revoke an etcd lease: every key attached to it is deleted in the same revision,
    as if the lease had expired. The holder learns it when its keep-alive fails."""
    etcd_client.revoke_lease(lease_id)


def kill_leader(service: ZooKeeperService | EtcdService, history: History | None = None) -> Node:
    """Kill the current leader of a cluster (``lab.zookeeper`` or ``lab.etcd``) with
    SIGKILL and return the node that was killed. Raises ``labkit.errors.NoLeader`` when
    the cluster has no leader to kill."""
    node = service.leader()
    node.kill()
    record_fault(history, node, "kill_leader", role="leader")
    return node
