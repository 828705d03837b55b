"""Faults that end a lease of life on the server: expire a ZooKeeper session, revoke an
etcd lease, kill a cluster's leader.

``expire_session`` makes the ZooKeeper ensemble itself close a session (a server-side
``closeSession``, which the session's own client then observes as expired);
``revoke_lease`` makes etcd drop a lease and every key attached to it; ``kill_leader``
SIGKILLs the node the cluster currently follows. Nothing is simulated in the client.

What can fail: an unreachable server (the client library's timeout error), a cluster with
no leader (``labkit.errors.NoLeader``), a ZooKeeper session that had ended already or that
its client kept alive (``SessionNotExpired``).
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from kazoo.client import KazooClient

from labkit.errors import LabError
from labkit.faults.process import record_fault
from labkit.servers.secret import login_for

if TYPE_CHECKING:
    from etcd3 import Etcd3Client

    from labkit.record.history import History
    from labkit.servers.services.etcd import EtcdService
    from labkit.servers.services.node import Node
    from labkit.servers.services.zookeeper import ZooKeeperService


CLOSES = 10  # closeSession requests before expire_session gives up on a session its client keeps taking back
# the impostor's own kazoo warnings ("Session has expired" once the close took) are expected
_IMPOSTOR_LOG = logging.getLogger(f"{__name__}.impostor")
_IMPOSTOR_LOG.setLevel(logging.ERROR)


class SessionNotExpired(LabError):
    """expire_session could not end the session: it had ended already, or it is still alive."""


def expire_session(zookeeper_hosts: str, session_id: int, password: bytes, timeout: float = 10.0,
                   auth: dict | None = None) -> int:
    """Make the ZooKeeper ensemble expire a session for real, from outside its process.

    A second client connects with the same session id and password, then closes the
    session. The server deletes the session's ephemeral nodes at once and the original
    client learns on its next contact that its session is gone (SESSION_EXPIRED).

    A close can be lost: a server that sees a session connect again closes the session's
    older connection there. The impostor's connect drops the original client, and if that
    client reconnects to the same server before the impostor's close has been read, the
    server drops the impostor and its close with it: the session lives on, and the client
    goes on holding its lock. So the session is expired only once the ensemble itself says
    it is gone: connecting with its id again must be answered "expired". A live session gets
    another close, up to ``CLOSES``. Returns the number of closes it took (1 unless the
    client took its session back). Raises ``SessionNotExpired`` if the session had ended
    before the first close (a stale id: the client has a new session by now) or is still
    alive after ``CLOSES`` closes, and kazoo's timeout error when the ensemble does not
    answer within ``timeout``. A private lab refuses even this close before a login:
    ``auth`` is ``lab.zookeeper.auth``; None finds this user's lab at ``zookeeper_hosts``
    and logs in.
    """
    login = login_for(zookeeper_hosts, "zookeeper") if auth is None else auth
    deadline = time.monotonic() + timeout
    closes = 0
    while True:
        impostor = KazooClient(hosts=zookeeper_hosts, client_id=(session_id, password), timeout=timeout,
                               logger=_IMPOSTOR_LOG, **login)
        try:
            impostor.start(timeout=max(0.1, deadline - time.monotonic()))
            # an ended session is answered "expired", and kazoo then opens a new one by itself
            alive = (impostor.client_id or (None, b""))[0] == session_id
            if alive and closes < CLOSES:
                impostor.stop()   # closeSession, as the session itself
                closes += 1
        finally:
            impostor.stop()
            impostor.close()
        if not alive:
            if closes == 0:
                raise SessionNotExpired(f"ZooKeeper session {session_id:#x} had ended before this close",
                                        "its client has a new session by now: expire that one (client.session)")
            return closes
        if closes >= CLOSES:
            raise SessionNotExpired(f"ZooKeeper session {session_id:#x} is still alive after {closes} closes",
                                    "its client reconnected to the same server before each close was read")


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
