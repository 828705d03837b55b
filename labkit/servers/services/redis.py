"""Redis: a primary and, optionally, an asynchronous replica; or N independent primaries
for Redlock.

No persistence by default (`--save ''`, no AOF), so a crash loses everything since the
last explicit SAVE — which is exactly what the lessons on vanishing and resurrected
locks need. Failover is manual (`promote`), so a lesson decides when it happens, unless
the lab runs Sentinel (``lab.sentinel``, labkit/servers/services/sentinel.py), which promotes the
replica by itself.
"""
from __future__ import annotations

import hashlib
import socket
from pathlib import Path

import redis

from labkit.errors import InvalidClusterSize, NodeStartError, UnknownNode
from labkit.servers.ports import HOST
from labkit.servers.runners.discovery import find_redis
from labkit.servers.services.kind import ServiceKind
from labkit.servers.services.layout import Layout
from labkit.servers.services.node import Node, Service
from labkit.servers.secret import LabSecret, redis_acl, write_private
from labkit.timing import wait_until


def redis_argv(redis_server: str, port: int, data_dir: str, replica_of: int | None = None,
               announce_port: int | None = None, config_file: str | None = None) -> list[str]:
    """``announce_port``: the port this server gives as its own when it replicates (the
    port Sentinel then dials): with a network, its proxy's. ``config_file``: read first (a
    private lab's ACL, ``labkit.servers.secret.redis_acl``)."""
    argv = [redis_server, *([config_file] if config_file else []), "--port", str(port), "--bind", HOST,
            "--protected-mode", "yes",
            "--save", "", "--appendonly", "no", "--dir", data_dir, "--daemonize", "no",
            "--loglevel", "notice",
            # diskless full sync starts after 5 s by default; a lab wants its replica now
            "--repl-diskless-sync-delay", "0"]
    if replica_of is not None:
        argv += ["--replicaof", HOST, str(replica_of)]
    if announce_port is not None:
        argv += ["--replica-announce-port", str(announce_port)]
    return argv


def _encode(words: tuple[str, ...]) -> bytes:
    return f"*{len(words)}\r\n".encode() + b"".join(
        f"${len(w.encode())}\r\n".encode() + w.encode() + b"\r\n" for w in words)


def _read_reply(conn: socket.socket) -> bytes:
    reply = b""
    while not reply.endswith(b"\r\n") or (reply.startswith(b"$") and reply.count(b"\r\n") < 2):
        chunk = conn.recv(65536)
        if not chunk:
            break
        reply += chunk
    return reply


def _command(host: str, port: int, *words: str, timeout: float = 1.0, secret: LabSecret | None = None) -> bytes:
    """One RESP command on a fresh connection; enough for probes without a client library.
    With a secret it logs in first (AUTH) and returns the refusal if the login fails."""
    with socket.create_connection((host, port), timeout=timeout) as conn:
        if secret is not None:
            conn.sendall(_encode(("AUTH", secret.user, secret.password)))
            login = _read_reply(conn)
            if not login.startswith(b"+OK"):
                return login
        conn.sendall(_encode(words))
        return _read_reply(conn)


class RedisNode(Node):
    kind = "redis"
    start_timeout = 15.0
    start_hint = "check that `redis-server --version` runs and the port is free"

    def read_role(self) -> str:
        info = _command(self.host, self.port, "INFO", "replication", secret=self.secret).decode(errors="replace")
        for line in info.splitlines():
            if line.startswith("role:"):
                return "primary" if line.split(":", 1)[1].strip() == "master" else "replica"
        return "unreachable"

    def is_ready(self) -> bool:
        try:
            return _command(self.host, self.port, "PING", timeout=0.5, secret=self.secret).startswith(b"+PONG")
        except OSError:
            return False

    def client(self, **kwargs) -> redis.Redis:
        kwargs.setdefault("socket_timeout", 5.0)
        return redis.Redis(host=self.host, port=self.port, **{**self.auth, **kwargs})

    @property
    def auth(self) -> dict:
        """What a redis.Redis of your own needs to log in: ``redis.Redis(host, port,
        **node.auth)`` (empty for a lab that is not private)."""
        return self.secret.redis if self.secret else {}


class RedisService(Service):
    """The primary and its replica, if any; ``promote`` fails over by hand."""

    name = "redis"
    nodes: list[RedisNode]

    @property
    def auth(self) -> dict:
        """``redis.Redis(host, port, **lab.redis.auth)`` logs in to a private lab."""
        return self.secret.redis if self.secret else {}

    @property
    def primary(self) -> RedisNode:
        """The node that was started (or last promoted) as primary."""
        return self.nodes[self._primary_index]

    _primary_index = 0

    @property
    def replica(self) -> RedisNode | None:
        others = [n for i, n in enumerate(self.nodes) if i != self._primary_index]
        return others[0] if others else None

    @property
    def host(self) -> str:
        return self.primary.host

    @property
    def port(self) -> int:
        return self.primary.port

    def client(self, node: RedisNode | None = None, via: str | None = None, **kwargs) -> redis.Redis:
        """A redis-py client on the primary (or the given node). ``via="client-1"`` (a lab
        with network=True): through a link of that client's own."""
        node = node or self.primary
        if via is None:
            return node.client(**kwargs)
        host, port = self.endpoint_for(node, via).rsplit(":", 1)
        kwargs.setdefault("socket_timeout", 5.0)
        return redis.Redis(host=host, port=int(port), **{**self.auth, **kwargs})

    def promote(self, node: RedisNode | None = None) -> RedisNode:
        """Manual failover: REPLICAOF NO ONE on the replica, which becomes the primary.
        Whatever the old primary had not shipped yet is not there: replication is asynchronous."""
        node = node or self.replica
        if node is None or node not in self.nodes:
            raise UnknownNode("there is no replica to promote", "start the lab with redis replica=True")
        node.client().execute_command("REPLICAOF", "NO", "ONE")
        self._primary_index = self.nodes.index(node)
        return node

    def wait_replica_in_sync(self, timeout: float = 15.0) -> None:
        """Wait until the replica acknowledges a write made on the primary.

        "master_link_status:up" on the replica is not enough: Redis 7 streams writes to a
        replica only after its first acknowledgement, so a lesson that freezes the replica
        right after start could lose a write it expects to be replicated. A probe write
        followed by WAIT 1 proves the stream flows."""
        replica = self.replica
        if replica is None:
            return
        primary = self.primary

        def acknowledged() -> bool:  # a probe write, then WAIT 1 for up to 200 ms
            try:
                _command(primary.host, primary.port, "SET", "labkit:replication-probe", "1", secret=primary.secret)
                acked = _command(primary.host, primary.port, "WAIT", "1", "200", timeout=2.0, secret=primary.secret)
                if acked.startswith(b":") and int(acked[1:].strip() or 0) >= 1:
                    _command(primary.host, primary.port, "DEL", "labkit:replication-probe", secret=primary.secret)
                    return True
            except OSError:
                pass
            return False

        wait_until(acknowledged, f"redis replica {replica.name} to acknowledge", timeout, poll=0.05,
                   error=lambda: NodeStartError(f"redis replica {replica.name} did not acknowledge the primary's "
                                                f"writes within {timeout:.0f} s", "look at both nodes' logs",
                                                replica.log_tail()))

    def now_primary(self, endpoint: str) -> RedisNode:
        """Take the node at ``endpoint`` ("127.0.0.1:port") as the primary from now on (Sentinel
        promoted it: ``lab.sentinel.wait_for_failover(lab.redis)``); returns it."""
        for index, node in enumerate(self.nodes):
            if node.endpoint == endpoint:
                self._primary_index = index
                return node
        raise UnknownNode(f"the sentinels name {endpoint} as primary, which is not a node of this lab",
                          "look at `SENTINEL masters` on a sentinel: was it reconfigured by hand?")


class RedlockNode(RedisNode):
    """One of Redlock's independent primaries (r1..rN): no replica, no persistence."""

    kind = "redlock"


class RedlockService(Service):
    """N independent Redis primaries for Redlock: no replication between them, nothing
    shared, and none of them writes to disk (``--appendonly no --save ''``), so a crash
    restart comes back empty: the "restart without fsync" case of Redlock's analysis."""

    name = "redlock"
    nodes: list[RedlockNode]

    @property
    def auth(self) -> dict:
        """``Redlock.connect(lab.redlock.endpoints, name, auth=lab.redlock.auth)`` logs in."""
        return self.secret.redis if self.secret else {}

    @property
    def endpoints(self) -> list[str]:
        """"127.0.0.1:port" of every instance, r1 first (what a Redlock is built from)."""
        return [node.endpoint for node in self.nodes]

    def node(self, which: "RedlockNode | str") -> RedlockNode:
        for node in self.nodes:
            if node is which or node.name == which:
                return node
        known = ", ".join(node.name for node in self.nodes)
        raise UnknownNode(f"no Redlock instance {which!r} (this lab has {known})", "use one of those names")

    def crash_restart(self, which: "RedlockNode | str", timeout: float | None = None) -> RedlockNode:
        """SIGKILL one instance and start it again at once, on the same port, with no data:
        every key it held (every lock vote it gave) is forgotten. Nothing was fsynced, and
        anything a manual SAVE left in its folder is removed too, so the result never
        depends on an earlier lesson. Returns once it answers PING."""
        node = self.node(which)
        node.kill()
        folder = Path(node.data_dir)
        for leftover in ("dump.rdb", "appendonly.aof"):
            (folder / leftover).unlink(missing_ok=True)
        for aof_piece in (folder / "appendonlydir").glob("*"):
            aof_piece.unlink()
        node.start()
        node.wait_ready(timeout)
        return node

    def describe(self) -> dict:
        return {"endpoints": self.endpoints, "nodes": [n.describe() for n in self.nodes]}


def lay_out_redis(layout: Layout, count: int) -> None:
    """redis1 is the primary; the others replicate it."""
    sentinels = layout.sizes.sentinels
    ports_of = [(f"redis{i + 1}", layout.ports.take()) for i in range(count)]
    primary_port = ports_of[0][1]
    for name, port in ports_of:
        replica_of = announce = None
        if sentinels and layout.network is not None:
            announce = redis_link(layout, name, port, sentinels)
        if name != "redis1":
            replica_of = (redis_link(layout, "redis1", primary_port, sentinels) if sentinels
                          else layout.via(name, "redis1", primary_port))
        folder = layout.folder(name)
        argv = redis_argv(layout.binaries["redis"], port, str(folder), replica_of=replica_of,
                          announce_port=announce, config_file=redis_acl_file(layout))
        layout.add(RedisNode, name, {"client": port}, folder, argv)


def lay_out_redlock(layout: Layout, count: int) -> None:
    for i in range(count):
        name, port = f"r{i + 1}", layout.ports.take()
        folder = layout.folder(name)
        argv = redis_argv(layout.binaries["redis"], port, str(folder), config_file=redis_acl_file(layout))
        layout.add(RedlockNode, name, {"client": port}, folder, argv)


def redis_acl_file(layout: Layout) -> str | None:
    """The ACL every Redis server of a private lab reads first (one file for all of them)."""
    if layout.secret is None:
        return None
    return str(write_private(layout.run_dir / "redis-acl.conf", redis_acl(layout.secret)))


def sentinel_myid(layout: Layout, name: str) -> str:
    """A sentinel's run id, fixed by labkit so that the network can tell its connections apart."""
    return hashlib.sha1(f"{layout.lab_id}/{name}".encode()).hexdigest()


def redis_link(layout: Layout, name: str, port: int, sentinels: int) -> int:
    """With Sentinel, the port the sentinels and the other Redis server dial to reach
    ``name``. With a network, one proxy shared by all of them (Sentinel rewrites a replica
    whose primary address differs from its own, so they must all dial the same address; the
    server announces it as its own with replica-announce-port); the proxy tells a sentinel's
    connection by its client name, anything else on it is the other Redis server."""
    if layout.network is None:
        return port
    names = [f"sentinel{i + 1}" for i in range(sentinels)]
    other = "redis2" if name == "redis1" else "redis1"
    members = {sentinel_myid(layout, sentinel)[:8]: sentinel for sentinel in names}
    members[""] = other
    return layout.network.route("*", name, port, "redis-shared", peers=names + [other], members=members)


def check_replica(sizes) -> None:
    if sizes.replica and not sizes.redis:
        raise InvalidClusterSize("replica=True needs redis=True", "a replica replicates a primary")


def check_redlock(sizes) -> None:
    """Redlock needs several independent primaries."""
    if sizes.redlock and not 3 <= sizes.redlock <= 9:
        raise InvalidClusterSize(
            f"redlock={sizes.redlock}: Redlock takes a majority of N independent Redis primaries, "
            f"and with fewer than 3 one crash already blocks every lock",
            "use redlock=5 (the algorithm's own example; an odd N wastes no instance), or 3 for a quick lab")


REDIS = ServiceKind("redis", RedisNode, RedisService, lay_out_redis,
                    count=lambda sizes: (1 + int(sizes.replica)) * int(bool(sizes.redis)), check=check_replica,
                    finders={"redis": find_redis}, in_image=("redis",))
REDLOCK = ServiceKind("redlock", RedlockNode, RedlockService, lay_out_redlock, count=lambda sizes: sizes.redlock,
                      check=check_redlock, finders={"redis": find_redis}, in_image=("redis",))
