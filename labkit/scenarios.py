"""Experiments of the pauses/fencing and crash/quorum lessons, as short calls a notebook reads.

Each helper runs one experiment on real servers and returns what it saw, so that the
notebook can plot it and assert on it:

* ``TcpLink``: a TCP relay on 127.0.0.1 between a client and a server that can be cut
  (bytes silently dropped both ways, as in a network partition) and restored.
* ``pause_past_timeout``: a holder frozen (SIGSTOP) longer than its session timeout or
  lease TTL, a second holder meanwhile, and the first one's late write to a store.
* ``queue_behind`` / ``release_in_turn``: one holder and a queue of waiters in a known
  order, then the hand-offs, to see whether a crash in between changed the order.
* ``seconds_until`` with ``zookeeper_write`` / ``etcd_write``: how long until a write
  succeeds again after a crash.
* ``write_with_new_client`` / ``values_on_members``: a write attempted without a majority,
  and what each member holds afterwards.
* ``acquisitions_through_members``: locks taken through different ensemble members, with
  the zxid (ZooKeeper) or revision (etcd) of each acquisition.
* ``wait_until`` and ``table``: a polled condition with a deadline; rows as a text table.

What can fail: ``labkit.clients.ClientError`` / ``ClientTimeout`` when a client process
does not start or answer, ``TimeoutError`` when an expected event or a recovery does not
come within its deadline (the message says which), the client libraries' errors when a
server is unreachable.
"""
from __future__ import annotations

import selectors
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from labkit.checker import Verdict, check_mutual_exclusion
from labkit.clients import LockClient, LockClients, spawn_clients
from labkit.fencing import FencedStore, StoreWrite
from labkit.history import History

HOST = "127.0.0.1"


class TcpLink:
    """A relay from ``address`` (a free port on 127.0.0.1) to ``target`` ("127.0.0.1:PORT").

    ``cut()`` keeps every connection open but drops the bytes both ways, like a cable
    pulled out: neither side is told, each notices only by its own timeouts. ``restore()``
    lets bytes through again (a client usually reconnects on a new connection, because
    its old stream lost bytes). ``close()`` ends the relay and its connections.
    """

    def __init__(self, target: str):
        host, port = target.rsplit(":", 1)
        if host != HOST:
            raise ValueError(f"TcpLink relays to {HOST} only (got {target!r}); the lab binds loopback")
        self.target = (host, int(port))
        self._listener = socket.create_server((HOST, 0))
        self.address = f"{HOST}:{self._listener.getsockname()[1]}"
        self._is_cut = threading.Event()
        self._closed = threading.Event()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._relay, name=f"tcp-link-{self.address}", daemon=True)
        self._thread.start()

    @property
    def is_cut(self) -> bool:
        return self._is_cut.is_set()

    def cut(self) -> None:
        self._is_cut.set()

    def restore(self) -> None:
        self._is_cut.clear()

    def _relay(self) -> None:
        # one thread and a selector: each socket's data goes to its peer, or nowhere when cut
        while not self._closed.is_set():
            for key, _ in self._selector.select(timeout=0.1):
                if key.data is None:
                    self._accept()
                    continue
                source, peer = key.fileobj, key.data
                try:
                    data = source.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    self._drop(source, peer)
                elif not self.is_cut:
                    try:
                        peer.sendall(data)
                    except OSError:
                        self._drop(source, peer)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()
        self._selector.close()

    def _accept(self) -> None:
        client, _ = self._listener.accept()
        try:
            server = socket.create_connection(self.target, timeout=2.0)
        except OSError:
            client.close()  # the server is down: the client sees a refused connection
            return
        server.settimeout(None)
        self._selector.register(client, selectors.EVENT_READ, server)
        self._selector.register(server, selectors.EVENT_READ, client)

    def _drop(self, *sockets: socket.socket) -> None:
        for sock in sockets:
            try:
                self._selector.unregister(sock)
            except (KeyError, ValueError):
                pass
            sock.close()

    def close(self) -> None:
        self._closed.set()
        self._thread.join(5)

    def __enter__(self) -> "TcpLink":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<TcpLink {self.address} -> {self.target[0]}:{self.target[1]}{' CUT' if self.is_cut else ''}>"


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> float:
    """Poll ``condition()`` until it is true; return the seconds it took. Raises
    TimeoutError naming ``what`` was awaited if it stays false for ``timeout`` seconds."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}; it did not happen")
        time.sleep(0.02)
    return time.monotonic() - started


def table(rows: list[dict[str, Any]]) -> str:
    """Rows of equal keys as an aligned text table (print it)."""
    if not rows:
        return "(no rows)"
    columns = list(rows[0])
    cells = [[str(column) for column in columns]] + [[str(row.get(column, "")) for column in columns] for row in rows]
    widths = [max(len(line[index]) for line in cells) for index in range(len(columns))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in cells)


# ---- a pause longer than the session timeout ----------------------------------------------
@dataclass
class PauseOutcome:
    """What ``pause_past_timeout`` saw. Tokens are ZooKeeper sequence numbers or etcd
    create revisions; ``writes`` is the store's own record, in the order it ran them."""

    recipe: str
    fenced: bool
    history: History
    writes: list[StoreWrite]
    old_token: int
    new_token: int
    late_write_accepted: bool
    new_holder_acquired_at: float   # time.time() of the second client's "acquired"
    old_holder_told_at: float       # time.time() of the paused client's "lost"

    @property
    def verdict(self) -> Verdict:
        return check_mutual_exclusion(self.writes)

    def rows(self) -> list[dict[str, Any]]:
        """The store's record as table rows, time in seconds since its first write."""
        origin = self.writes[0].time
        return [{"t (s)": round(write.time - origin, 3), "client": write.client, "token": write.token,
                 "value": write.value, "accepted": write.accepted, "reason": write.reason}
                for write in self.writes]


def pause_past_timeout(lab: Any, recipe: str = "zookeeper", fenced: bool = True, timeout: float = 1.0,
                       pause: float = 3.0, name: str | None = None) -> PauseOutcome:
    """Two client processes of ``recipe`` share a lock and a FencedStore (``fenced`` or not).

    client-1 acquires and writes; it is frozen with SIGSTOP for ``pause`` seconds, longer
    than its session timeout / lease TTL (``timeout`` seconds); client-2 acquires as soon
    as the server lets it, and writes; client-1 resumes and, still believing it holds the
    lock, writes with its old token. Raises ValueError if ``pause`` is not longer than
    ``timeout``, ClientTimeout if client-2 never gets the lock.
    """
    if pause <= timeout:
        raise ValueError(f"pause ({pause} s) must be longer than the timeout ({timeout} s), or nothing is lost")
    name = name or f"/locks/pause-{recipe}-{'fenced' if fenced else 'unfenced'}-{time.time_ns()}"
    store = FencedStore(lab.redis.client(), f"store:{name}", fenced=fenced)
    store.reset()
    history = History()
    with spawn_clients(lab, recipe, n=2, name=name, history=history, store=store,
                       session_timeout=timeout, ttl=timeout) as clients:
        paused, other = clients
        old_token = paused.acquire(timeout=10)
        paused.write("written by the first holder")
        paused.pause(pause)
        new_token = other.acquire(timeout=pause + 10)
        other.write("written by the new holder")
        # sent while client-1 is frozen: it runs the moment the process resumes
        late_write_accepted = paused.wait_reply(paused.send("write", value="late write by the old holder"),
                                                timeout=pause + 10)
        told = history.wait_for("lost", client=paused.name, timeout=timeout + 10)[0]
        other.release()  # so that its hold ends as a release, not with the closing session
    acquired = history.events(client=other.name, kind="acquired")[0]
    writes = store.writes()
    store.reset()
    return PauseOutcome(recipe, fenced, history, writes, old_token, new_token, late_write_accepted,
                        acquired.time, told.time)


# ---- a queue, a crash, and the time to recover ----------------------------------------------
def queue_behind(clients: LockClients, timeout: float = 30.0) -> dict[str, int]:
    """The first client acquires; the others queue behind it one at a time, each only after
    the previous one's entry exists on the server, so the queue order is the client order.
    Returns {waiter name: id of its pending acquire command} (collect with ``wait_reply``)."""
    holder, *waiters = list(clients)
    holder.acquire(timeout=timeout)
    pending = {}
    for waiter in waiters:
        pending[waiter.name] = waiter.send("acquire", timeout=None)
        clients.history.wait_for("watch", client=waiter.name, timeout=timeout)
    return pending


def release_in_turn(clients: LockClients, pending: dict[str, int], timeout: float = 30.0) -> list[str]:
    """The holder releases; each waiter, once it holds, releases too. Returns the order in
    which the waiters got the lock. Raises TimeoutError if no waiter holds the lock within
    ``timeout`` seconds of the previous release, ClientError if a waiter's acquire failed."""
    holder, *waiters = list(clients)
    holder.release()
    served = []
    for _ in waiters:
        deadline = time.monotonic() + timeout
        while not (holding := [w for w in waiters if w.name not in served and w.state == "holding"]):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no waiter got the lock within {timeout:.0f} s: {clients.states()}")
            time.sleep(0.01)
        winner: LockClient = holding[0]
        winner.wait_reply(pending[winner.name], timeout)
        served.append(winner.name)
        winner.release()
    return served


def seconds_until(operation: Callable[[], Any], since: float, timeout: float = 30.0,
                  attempt_timeout: float = 1.0) -> float:
    """Retry ``operation()`` (which must give up by itself, e.g. within ``attempt_timeout``)
    until it neither raises nor returns False; return the seconds from ``since`` (a
    ``time.monotonic()`` value, e.g. the moment of a crash) to that success.
    Raises TimeoutError with the last failure if it never succeeds within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            failure: Any = "it returned False" if operation() is False else None
        except Exception as error:  # every failure means "not yet": that is what is measured
            failure = error
        if failure is None:
            return time.monotonic() - since
        if time.monotonic() > deadline:
            raise TimeoutError(f"still failing after {timeout:.0f} s: {failure!r}")
        time.sleep(min(0.05, attempt_timeout))


def zookeeper_write(client: Any, path: str = "/lab/probe", value: str | None = None,
                    timeout: float = 1.0) -> Callable[[], Any]:
    """An operation for ``seconds_until``: one ZooKeeper write that gives up after ``timeout``."""
    client.ensure_path(path)
    return lambda: client.set_async(path, (value or str(time.time())).encode()).get(timeout=timeout)


def etcd_write(client: Any, key: str = "/lab/probe", value: str | None = None,
               timeout: float = 1.0) -> Callable[[], Any]:
    """An operation for ``seconds_until``: one etcd put that gives up after ``timeout``
    (the gRPC call itself, so that the timeout is this one's, not the client's)."""
    from etcd3 import etcdrpc
    put = client.kvstub.Put
    return lambda: put(etcdrpc.PutRequest(key=key.encode(), value=(value or str(time.time())).encode()), timeout)


def write_with_new_client(lab: Any, service: str, key: str, value: str, timeout: float = 2.0) -> bool:
    """Connect a new client to ``service`` ("zookeeper": all members; "etcd": the first
    running member) and write ``value`` under ``key``. True if the write was acknowledged
    within ``timeout`` seconds, False if it timed out (no quorum to take it)."""
    if service == "zookeeper":
        from kazoo.client import KazooClient
        from kazoo.handlers.threading import KazooTimeoutError
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
    import grpc
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


def values_on_members(lab: Any, service: str, key: str, timeout: float = 5.0) -> dict[str, str | None]:
    """What each running member of ``service`` holds under ``key`` (None: no such key),
    read through a client connected to that member only, after catching up with the
    leader (ZooKeeper ``sync``; etcd's default linearizable read)."""
    values: dict[str, str | None] = {}
    for node in getattr(lab, service).nodes:
        if node.state != "running":
            continue
        if service == "zookeeper":
            from kazoo.client import KazooClient
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
            from etcd3 import etcdrpc
            client = lab.etcd.client(node=node, timeout=timeout)
            try:
                reply = client.kvstub.Range(etcdrpc.RangeRequest(key=key.encode()), timeout)
                values[node.name] = reply.kvs[0].value.decode() if reply.kvs else None
            finally:
                client.close()
    return values


# ---- acquisitions through different members: the leader's log orders them ----------------------
def acquisitions_through_members(lab: Any, service: str, rounds: int = 2, name: str | None = None,
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
        lock, close = _member_lock(service, node, name, history.sink(node.name))
        locks.append((node.name, lock))
        closers.append(close)

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


def _member_lock(service: str, node: Any, name: str, on_event: Any) -> tuple[Any, Callable[[], None]]:
    if service == "zookeeper":
        from kazoo.client import KazooClient
        from labkit.locks.zookeeper import ZooKeeperLock
        client = KazooClient(hosts=node.endpoint, timeout=6.0)
        client.start(timeout=30)
        return ZooKeeperLock(client, name, identifier=node.name, on_event=on_event), \
            lambda: (client.stop(), client.close())
    from labkit.locks.etcd_mutex import EtcdMutex
    from labkit.locks.etcd_session import EtcdSession
    from labkit.servers.etcd import etcd_client
    client = etcd_client(node.host, node.port, timeout=10)
    session = EtcdSession(client, ttl=5)
    return EtcdMutex(session, name, identifier=node.name, on_event=on_event), \
        lambda: (session.close(), client.close())


def _acquisition_facts(service: str, lock: Any) -> dict[str, int]:
    if service == "zookeeper":
        stat = lock.client.exists(f"{lock.path}/{lock.node}")
        return {"czxid": stat.czxid, "mzxid": stat.mzxid, "epoch": stat.czxid >> 32}
    return {"create_revision": lock.token, "header_revision": lock.header_revision}
