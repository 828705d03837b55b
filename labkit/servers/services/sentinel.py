"""Redis Sentinel: processes that watch the Redis primary and promote its replica when it dies.

What can go wrong, and what a lesson shows with it:

* Failover is not instant: a sentinel waits ``down-after-milliseconds`` before calling
  the primary down, a quorum of sentinels must agree, and a majority must elect one of
  them to run the failover. Until then the old address is still the answer.
* Replication is asynchronous, so the promoted replica lacks whatever the primary had
  acknowledged but not yet shipped: a lock granted just before the crash can be granted
  again (two holders). Sentinel chooses availability; it does not make Redis a quorum store.
* A sentinel that is cut off keeps naming the old primary; clients that ask it connect to
  a primary the others have replaced. ``primary_endpoint`` therefore counts a majority.

Each sentinel runs on 127.0.0.1 only (bind, protected mode, ``announce-ip``) with short
timers for fast lessons. It is ``redis-server --sentinel`` (``redis-sentinel`` is the same
binary under another name), so every place that has Redis has Sentinel.
"""
from __future__ import annotations

from collections import Counter

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from labkit.errors import InvalidClusterSize, LabError, NodeStartError
from labkit.servers.network.links import Network
from labkit.servers.ports import HOST
from labkit.servers.runners.discovery import find_redis
from labkit.servers.services.kind import ENSEMBLE_SIZES, ServiceKind
from labkit.servers.services.layout import Layout
from labkit.servers.services.node import Node, Service
from labkit.servers.services.redis import RedisNode, RedisService, redis_link, sentinel_myid
from labkit.servers.secret import LabSecret, write_private
from labkit.timing import wait_for_value, wait_until

PRIMARY_NAME = "labkit"        # the name the sentinels monitor the primary under
DOWN_AFTER_MS = 1000           # silence before a sentinel calls the primary down
FAILOVER_TIMEOUT_MS = 3000     # how long one failover attempt may take before a retry


class SentinelDisagree(LabError):
    """No primary address is named by a majority of the sentinels."""


class FailoverTimeout(LabError):
    """The sentinels did not promote a replica in time; carries each sentinel's last log lines."""

    def __init__(self, message: str, hint: str, logs: dict[str, str]):
        self.logs = logs
        for name, tail in logs.items():
            message += f"\n  last log lines of {name}:\n" + "\n".join("    " + line for line in tail.splitlines())
        super().__init__(message, hint)


def sentinel_config(port: int, data_dir: str, primary_port: int, quorum: int,
                    down_after_ms: int = DOWN_AFTER_MS, failover_timeout_ms: int = FAILOVER_TIMEOUT_MS,
                    myid: str | None = None, secret: LabSecret | None = None) -> str:
    """A sentinel's config file. Sentinel rewrites it as it learns (other sentinels, the
    replica, a new primary), so it must live in a writable folder of the lab. ``myid``
    (40 hex digits): the sentinel's run id, else it picks one at random. With a secret (a
    private lab) the sentinel asks clients for it, and logs in with it to the Redis
    servers it watches and to the other sentinels."""
    login = [] if secret is None else [
        "user default off",
        f"user {secret.user} on >{secret.password} ~* &* +@all",
        f"sentinel sentinel-user {secret.user}",
        f"sentinel sentinel-pass {secret.password}",
        f"sentinel auth-user {PRIMARY_NAME} {secret.user}",
        f"sentinel auth-pass {PRIMARY_NAME} {secret.password}",
    ]
    return "\n".join(([f"sentinel myid {myid}"] if myid else []) + [
        f"port {port}",
        f"bind {HOST}",
        "protected-mode yes",
        "daemonize no",
        'logfile ""',
        f"dir {data_dir}",
        # announce the loopback address: sentinels and clients must never be sent elsewhere
        f"sentinel announce-ip {HOST}",
        f"sentinel announce-port {port}",
        f"sentinel monitor {PRIMARY_NAME} {HOST} {primary_port} {quorum}",
        f"sentinel down-after-milliseconds {PRIMARY_NAME} {down_after_ms}",
        f"sentinel failover-timeout {PRIMARY_NAME} {failover_timeout_ms}",
        f"sentinel parallel-syncs {PRIMARY_NAME} 1",
        *login,
        "",
    ])


def sentinel_argv(redis_server: str, config_path: str) -> list[str]:
    return [redis_server, config_path, "--sentinel"]


class SentinelNode(Node):
    kind = "sentinel"
    start_timeout = 15.0
    start_hint = "check that `redis-server --version` runs and the port is free"

    def command(self, *words: str, timeout: float = 0.5):
        """One command to this sentinel, e.g. ``command("SENTINEL", "REPLICAS", PRIMARY_NAME)``.
        No retries: a probe must answer now or say it cannot."""
        client = redis.Redis(host=self.host, port=self.port, socket_timeout=timeout,
                             socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0), decode_responses=True,
                             **(self.secret.redis if self.secret else {}))
        try:
            return client.execute_command(*words)
        finally:
            client.close()

    def primary_endpoint(self) -> str | None:
        """The address this sentinel names as primary now (None if it cannot answer)."""
        try:
            host, port = self.command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", PRIMARY_NAME)
        except (redis.RedisError, OSError, TypeError, ValueError):
            return None
        return f"{host}:{port}"

    def is_ready(self) -> bool:
        return self.primary_endpoint() is not None

    def read_role(self) -> str:
        return "sentinel" if self.is_ready() else "unreachable"

    def quorum_reachable(self) -> bool:
        """``SENTINEL CKQUORUM``: enough sentinels are known and reachable to call the
        primary down and to authorize a failover. False until the sentinels found each other."""
        try:
            return str(self.command("SENTINEL", "CKQUORUM", PRIMARY_NAME)).startswith("OK")
        except (redis.RedisError, OSError):
            return False

    def known_sentinels(self) -> int:
        """How many other sentinels this one has found (they announce themselves through the
        primary every 2 s); 0 when it does not answer."""
        try:
            return len(self.command("SENTINEL", "SENTINELS", PRIMARY_NAME))
        except (redis.RedisError, OSError):
            return 0

    def knows_replica(self) -> bool:
        """True once this sentinel has seen a healthy replica: without one it has nothing to promote."""
        try:
            replicas = self.command("SENTINEL", "REPLICAS", PRIMARY_NAME)
        except (redis.RedisError, OSError):
            return False
        return any("s_down" not in r.get("flags", "") and "disconnected" not in r.get("flags", "")
                   for r in replicas)


class SentinelService(Service):
    """The sentinels of a lab (``lab.sentinel``): the primary a majority names now
    (``primary_endpoint``), and the failover they run (``wait_for_failover(lab.redis)``)."""

    name = "sentinel"
    nodes: list[SentinelNode]

    def __init__(self, nodes: list[SentinelNode], network: Network | None = None, secret: LabSecret | None = None,
                 aliases: dict[str, str] | None = None):
        super().__init__(nodes, network, secret)
        # with a network the sentinels reach a Redis server through a proxy and name that
        # address; aliases maps it back to the server's own, which the rest of labkit uses
        self.aliases = aliases or {}

    @property
    def majority(self) -> int:
        return len(self.nodes) // 2 + 1

    def named_primaries(self) -> dict[str, str | None]:
        """What each sentinel names as primary right now (None: it does not answer)."""
        named = {node.name: node.primary_endpoint() if node.state == "running" else None for node in self.nodes}
        return {name: self.aliases.get(endpoint, endpoint) for name, endpoint in named.items()}

    def primary_endpoint(self) -> str:
        named = self.named_primaries()
        counts = Counter(endpoint for endpoint in named.values() if endpoint)
        if counts:
            endpoint, votes = counts.most_common(1)[0]
            if votes >= self.majority:
                return endpoint
        raise SentinelDisagree(f"no primary is named by a majority ({self.majority}) of the sentinels: {named}",
                               "a failover may be in progress: wait_for_failover() waits for it to settle")

    def wait_until_watching(self, timeout: float = 30.0) -> float:
        """Wait until every sentinel names the primary, has found every other sentinel and
        knows the replica: only then can a failover happen. Returns the seconds it took."""
        def not_watching() -> NodeStartError:
            tails = "\n".join(f"[{node.name}] {line}"
                              for node in self.nodes for line in node.log_tail(6).splitlines())
            return NodeStartError(f"the sentinels did not all see each other and the replica within {timeout:.0f} s",
                                  "sentinels find each other through the primary every 2 s; "
                                  "check that the primary and the replica run", tails)

        # CKQUORUM passes once a majority is known; a lab is ready only when each knows them all
        return wait_until(lambda: all(node.quorum_reachable() and node.known_sentinels() == len(self.nodes) - 1
                                      and node.knows_replica() for node in self.nodes),
                          "every sentinel to watch", timeout, poll=0.1, error=not_watching)

    def wait_for_new_primary(self, old_endpoint: str, timeout: float = 30.0) -> str:
        """Wait until a majority names a primary other than ``old_endpoint`` and that
        server reports ``role:master``; returns its address."""
        def promoted() -> str | None:
            try:
                endpoint = self.primary_endpoint()
            except SentinelDisagree:
                return None
            if not endpoint or endpoint == old_endpoint:
                return None
            host, port = endpoint.rsplit(":", 1)
            client = redis.Redis(host=host, port=int(port), socket_timeout=0.5, socket_connect_timeout=0.5,
                                 retry=Retry(NoBackoff(), 0), **(self.secret.redis if self.secret else {}))
            try:
                role = client.execute_command("ROLE")[0]
            except (redis.RedisError, OSError):
                role = None
            finally:
                client.close()
            return endpoint if role in (b"master", "master") else None

        return wait_for_value(promoted, "a new primary", timeout, poll=0.05, error=lambda: FailoverTimeout(
            f"the sentinels did not promote a replica within {timeout:.0f} s "
            f"(they name {self.named_primaries()}; the old primary was {old_endpoint})",
            f"a failover needs the primary silent for {DOWN_AFTER_MS} ms, a quorum that agrees and a "
            "healthy replica; look for +sdown, +odown, +switch-master or -failover-abort below",
            {node.name: node.log_tail(10) for node in self.nodes}))

    def wait_for_failover(self, redis: RedisService, timeout: float = 30.0) -> RedisNode:
        """Wait until a majority names a primary other than ``redis.primary`` and that node
        says it is a master; it becomes ``redis.primary`` and is returned. Raises
        FailoverTimeout, with every sentinel's last log lines, after ``timeout`` s."""
        return redis.now_primary(self.wait_for_new_primary(redis.primary.endpoint, timeout))

    def describe(self) -> dict:
        return {"nodes": [n.describe() for n in self.nodes]}

    def is_ready(self) -> bool:
        return all(n.is_ready() for n in self.nodes)


def lay_out_sentinels(layout: Layout, count: int) -> None:
    """sentinel1..N watching redis1 (laid out before them: the table puts Redis first)."""
    primary = layout.of_kind("redis")[0]
    monitored = redis_link(layout, primary.name, primary.port, count)
    for i in range(count):
        name, port = f"sentinel{i + 1}", layout.ports.take()
        folder = layout.folder(name)
        config = folder / "sentinel.conf"
        write_private(config, sentinel_config(port, str(folder), monitored, count // 2 + 1,
                                              myid=sentinel_myid(layout, name), secret=layout.secret))
        layout.add(SentinelNode, name, {"client": port}, folder, sentinel_argv(layout.binaries["redis"], str(config)))
    aliases = layout.settings_of("sentinel").setdefault("aliases", {})
    for node in layout.of_kind("redis"):
        link = redis_link(layout, node.name, node.port, count)
        if link != node.port:
            aliases[f"127.0.0.1:{link}"] = f"127.0.0.1:{node.port}"


def check_sentinels(sizes) -> None:
    """Sentinel needs a replica to promote, and a majority of sentinels to elect its leader."""
    if sizes.sentinels and not sizes.replica:
        raise InvalidClusterSize(f"sentinels={sizes.sentinels} without a replica: Sentinel would have nothing "
                                 "to promote", "start the lab with redis=True, replica=True, sentinels=3")
    if sizes.sentinels not in ENSEMBLE_SIZES:
        raise InvalidClusterSize(f"sentinels={sizes.sentinels}: the sentinels elect a leader by majority, "
                                 "so labkit runs 1, 3 or 5 of them", "use sentinels=3")


SENTINEL = ServiceKind("sentinel", SentinelNode, SentinelService, lay_out_sentinels,
                       count=lambda sizes: sizes.sentinels, check=check_sentinels,
                       finders={"redis": find_redis}, in_image=("redis",))
