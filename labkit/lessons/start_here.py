"""Experiments of the first notebook (00) that take more than a few lines.

* ``exit_without_closing``: a separate Python program creates an ephemeral ZooKeeper node
  and an etcd key on a lease, then simply ends (no ``stop()``, no ``revoke()``), so that a
  lesson can show that a normal exit closes nothing: kazoo, the Java client and
  python-etcd3 register no exit hook, and the servers only see a socket close.
* ``DeletionWatch``: an observer's watch on a ZooKeeper node and on an etcd key, with the
  moment each deletion was seen.
* ``contender_factory`` / ``serve_in_queue_order``: contenders that queue one after
  another on ZooKeeper or etcd, each with its own session, and take the lock in turn.
* ``lock_numbers``: every number the course uses, read live from a held ZooKeeper lock and
  a held etcd Mutex (for the glossary).

What can fail: ``TimeoutError`` (naming what was awaited) when a deletion, a queue entry or
a hand-off does not come in time; ``subprocess.CalledProcessError`` (with the program's
stderr) when the program that exits cannot reach the servers.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from etcd3.events import DeleteEvent

from labkit.locks.etcd_mutex import EtcdMutex
from labkit.locks.registry import connections_of, make_lock
from labkit.locks.zookeeper import ZooKeeperLock, sequence_of
from labkit.progress import shows_progress
from labkit.record.history import History
from labkit.timing import wait_until

if TYPE_CHECKING:
    from labkit.servers.lab import Lab

# The program that forgets to close: it creates, reports, and returns from the script.
_FORGETFUL_PROGRAM = """
import json, sys, time
import labkit                                   # its import fixes python-etcd3's missing six
from kazoo.client import KazooClient
from labkit.servers.services.etcd import etcd_client
from labkit.servers.secret import login_for     # the lab is private: log in as its owner

hosts, timeout, path, etcd_host, etcd_port, ttl, key = sys.argv[1:]
zookeeper = KazooClient(hosts=hosts, timeout=float(timeout), **login_for(hosts, "zookeeper"))
zookeeper.start(timeout=15)
began_at = time.monotonic()                     # before either server hears of the node or the key
node = zookeeper.create(path, b"a program that exits", ephemeral=True, makepath=True)
etcd = etcd_client(etcd_host, int(etcd_port), **login_for(f"{etcd_host}:{etcd_port}", "etcd"))
lease = etcd.lease(int(ttl))
etcd.put(key, "a program that exits", lease=lease)
print(json.dumps({"node": node, "session_id": zookeeper.client_id[0], "key": key, "lease_id": lease.id,
                  "began_at": began_at}), flush=True)
# and here the program ends, normally: no zookeeper.stop(), no lease.revoke()
"""


@dataclass(frozen=True)
class ExitedProgram:
    """What the program that exited without closing left behind. ``began_at`` and
    ``exited_at`` are ``time.monotonic()`` values (one clock for every process on Linux):
    just before it sent its create (no server had heard of the node or the key yet: a stamp
    taken after them came up to 0.4 s late on a busy machine, when the program waited for a
    CPU), and when the parent saw the process end."""

    exit_code: int
    node: str
    session_id: int
    key: str
    lease_id: int
    began_at: float
    exited_at: float


@shows_progress("a program that exits without closing its session")
def exit_without_closing(lab: "Lab", path: str, key: str, session_timeout: float = 2.0,
                         ttl: int = 2) -> ExitedProgram:
    """Run the forgetful program (see the module docstring) against the lab's first
    ZooKeeper node and etcd member; return once it has exited. Raises CalledProcessError
    (with its stderr) if it failed."""
    etcd_node = lab.etcd.nodes[0]
    finished = subprocess.run(
        [sys.executable, "-c", _FORGETFUL_PROGRAM, lab.zookeeper.hosts, str(session_timeout), path,
         etcd_node.host, str(etcd_node.port), str(ttl), key],
        capture_output=True, text=True, timeout=60)
    exited_at = time.monotonic()
    if finished.returncode != 0:
        raise subprocess.CalledProcessError(finished.returncode, "the program that exits", finished.stdout,
                                            finished.stderr)
    report = json.loads(finished.stdout.strip().splitlines()[-1])
    return ExitedProgram(finished.returncode, report["node"], report["session_id"], report["key"],
                         report["lease_id"], report["began_at"], exited_at)


class DeletionWatch:
    """An observer's watches on one ZooKeeper node and one etcd key. ``deleted_at``:
    {"ZooKeeper": t, "etcd": t}, ``time.monotonic()`` when each deletion was heard.
    Raises AssertionError at creation if the node does not exist yet."""

    def __init__(self, zookeeper_client: Any, etcd_client: Any, node: str, key: str):
        self.deleted_at: dict[str, float] = {}
        self._seen = {"ZooKeeper": threading.Event(), "etcd": threading.Event()}
        self._etcd = etcd_client
        if not zookeeper_client.exists(node, watch=self._on_node_change):
            raise AssertionError(f"{node} should exist before it is watched")
        self._watch_id = etcd_client.add_watch_callback(key, self._on_key_change)

    def _heard(self, system: str) -> None:
        self.deleted_at.setdefault(system, time.monotonic())
        self._seen[system].set()

    def _on_node_change(self, event: Any) -> None:
        if event.type == "DELETED":
            self._heard("ZooKeeper")

    def _on_key_change(self, response: Any) -> None:
        if any(isinstance(event, DeleteEvent) for event in getattr(response, "events", [])):
            self._heard("etcd")

    def wait(self, timeout: float) -> dict[str, float]:
        """Block until both deletions were heard; return ``deleted_at``. Raises TimeoutError."""
        for system, seen in self._seen.items():
            if not seen.wait(timeout):
                raise TimeoutError(f"the observer never saw the {system} lock disappear within {timeout:.0f} s")
        self._etcd.cancel_watch(self._watch_id)
        return self.deleted_at


def contender_factory(lab: "Lab", system: str, path: str, history: History,
                      session_timeout: float = 4.0, ttl: int = 10) -> tuple[Callable[[str], Any], ExitStack]:
    """``make(name)``: a new lock on ``path`` with its own session (``system`` is
    "ZooKeeper" or "etcd"), reporting to ``history`` as "<system> <name>"; and the
    ExitStack that closes every session it made."""
    opened = ExitStack()

    def make(name: str) -> Any:
        handle = make_lock(system.lower(), connections_of(lab), path, name, history.sink(f"{system} {name}"),
                           session_timeout=session_timeout, ttl=ttl)
        opened.callback(handle.close)
        return handle.lock
    if system not in ("ZooKeeper", "etcd"):
        raise ValueError(f"system must be 'ZooKeeper' or 'etcd', not {system!r}")
    return make, opened


def serve_in_queue_order(make_lock: Callable[[str], Any], first: str, queue: list[str], history: History,
                         system: str, timeout: float = 20.0) -> None:
    """``first`` takes the lock; the ``queue`` clients line up one after another, each only
    once the previous one's node or key exists (its "created" event); then ``first``
    releases and each waiter, once it holds the lock, releases it at once.
    Raises TimeoutError if a waiter does not queue, or the queue is not served, in time."""
    holder = make_lock(first)
    holder.acquire(timeout=timeout)
    threads = []
    for name in queue:
        lock = make_lock(name)
        thread = threading.Thread(target=lambda lock=lock: (lock.acquire(timeout=timeout), lock.release()),
                                  daemon=True)
        thread.start()
        history.wait_for("created", client=f"{system} {name}", timeout=timeout)
        threads.append(thread)
    holder.release()
    for thread in threads:
        thread.join(timeout)
        if thread.is_alive():
            raise TimeoutError(f"a waiter on {system} did not get and release the lock within {timeout:.0f} s")


def lock_numbers(zookeeper: Any, zookeeper_lock: ZooKeeperLock, etcd: Any, etcd_mutex: EtcdMutex) -> dict[str, int]:
    """The numbers of the glossary, as the servers report them for two held locks: the node's
    sequence and czxid, its parent's pzxid and cversion, the last zxid the client saw and
    its session id (ZooKeeper); the key's lease id, create and mod revision, and the header
    revision of the read that returned them (etcd). Raises ValueError if the etcd key is gone
    (the lock is no longer held)."""
    node = f"{zookeeper_lock.path}/{zookeeper_lock.node}"
    _, node_stat = zookeeper.get(node)
    parent_stat = zookeeper.exists(zookeeper_lock.path)
    response = etcd.get_response(etcd_mutex.key)      # the raw answer: its header carries the store's revision
    if len(response.kvs) != 1:
        raise ValueError(f"{etcd_mutex.key} is not in etcd: the Mutex no longer holds the lock")
    [key_value] = response.kvs
    return {"sequence": sequence_of(zookeeper_lock.node), "czxid": node_stat.czxid,
            "pzxid": parent_stat.pzxid, "cversion": parent_stat.cversion,
            "zxid": zookeeper.last_zxid, "session id": zookeeper.client_id[0],
            "lease id": key_value.lease, "create revision": key_value.create_revision,
            "mod revision": key_value.mod_revision, "header revision": response.header.revision}
