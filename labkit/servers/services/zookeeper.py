"""ZooKeeper nodes: the config each one gets, the four-letter words that probe it, and the
ensemble's leader.

Timing is scaled down for lessons: tickTime 200 ms, so sessions can time out in under a
second (minSessionTimeout = 2 ticks) and an ensemble elects a leader in a few seconds.
"""
from __future__ import annotations

import os
import socket

from kazoo.client import KazooClient

from labkit.errors import NoLeader
from labkit.progress import showing_progress
from labkit.servers.runners.discovery import ZooKeeperInstall, find_java, find_zookeeper
from labkit.servers.network.links import not_enabled
from labkit.servers.ports import HOST
from labkit.servers.services.kind import ServiceKind, check_ensemble_size
from labkit.servers.services.layout import Layout
from labkit.servers.services.node import Node, Service
from labkit.servers.secret import ZOOKEEPER_AUTH_CONFIG, write_private, zookeeper_jaas
from labkit.servers.services.zookeeper_conf import lag_of_servers
from labkit.timing import wait_for_value

TICK_MS = 200
# How often the server looks for empty container nodes (Curator's lock parents) to delete.
# ZooKeeper's default is a minute; half a second lets a lesson watch a parent vanish and
# come back (its sequence numbers restart at 0). A JVM system property, not a zoo.cfg key.
CONTAINER_CHECK_MS = 500
# A member looking for a leader resends its vote when nothing arrives for a while, and
# doubles that wait each time, up to a minute by default. A cut-off peer that never
# answers makes it double: elections after a partition took 5-18 s. Capped at a few
# ticks, a new leader is elected about a second after the followers miss the old one.
MAX_NOTIFICATION_INTERVAL_MS = 4 * TICK_MS
# A follower that hears nothing from its leader for syncLimit ticks drops its clients and
# looks for a new leader; until then it keeps answering its clients' pings by itself, while
# the leader (which alone expires sessions) hears of them only in its own ping exchange with
# the follower, every half tick. So a follower's answer can be up to SERVER_LAG older than what
# the leader knows of the session: ZooKeeperLock subtracts it from its client-side deadline,
# learned from each ensemble's own conf (zookeeper_conf.py); this is what the lab's
# zoo.cfg implies, for the lab's own checks (zookeeper_settings= can change it).
# 5 ticks (1 s) rather than 10: the smaller the lag, the shorter a session that can be held
# safely (a 2 s session keeps 0.4 s of slack, see ZooKeeperLock).
SYNC_LIMIT = 5
SERVER_LAG = (SYNC_LIMIT * TICK_MS + TICK_MS / 2) / 1000.0
RECONNECT_AT_MOST = 1.0   # s: the longest a lab client waits between two tries to reconnect (client())


def four_letter(host: str, port: int, word: str, timeout: float = 2.0) -> str:
    """Send a four-letter word (srvr, mntr, wchc, ruok, ...) and return the reply text."""
    with socket.create_connection((host, port), timeout=timeout) as conn:
        conn.sendall(word.encode())
        chunks = []
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def zookeeper_config(data_dir: str, client_port: int, peers: list[tuple[int, int, int]], private: bool = False,
                     settings: dict | None = None) -> str:
    """peers: (myid, quorum port, election port) for every member; one member → standalone.
    private: every session must log in with SASL (labkit/servers/secret.py). settings: zoo.cfg
    keys to set instead of the lab's, e.g. {"tickTime": 2000, "syncLimit": 5} (ZooKeeper's
    sample config) or {"4lw.commands.whitelist": "srvr,mntr"}; the shortest session stays
    2 ticks unless ``minSessionTimeout`` is given too."""
    settings = dict(settings or {})
    tick = int(settings.get("tickTime", TICK_MS))
    values = {
        "tickTime": TICK_MS,
        # a new leader waits initLimit ticks for a quorum of followers; after a partition one
        # may first try the cut-off old leader (a stale vote) and come back only later: with
        # 25 ticks that wait cost 5 s per such election; a lab's data syncs in milliseconds
        "initLimit": 10,
        "syncLimit": SYNC_LIMIT,
        "dataDir": data_dir,
        "clientPort": client_port,
        "clientPortAddress": HOST,
        "admin.enableServer": "false",
        "4lw.commands.whitelist": "*",
        "minSessionTimeout": 2 * tick,
        "maxSessionTimeout": 60000,
        "maxClientCnxns": 0,  # every lesson client comes from 127.0.0.1: no per-address cap
        "preAllocSize": 4096,  # KB: 64 MB preallocated logs per node would be silly here
        "reconfigEnabled": "false",
        "standaloneEnabled": "true",
    }
    values.update(settings)
    lines = [f"{key}={value}" for key, value in values.items()]
    if private:
        lines += ZOOKEEPER_AUTH_CONFIG
    if len(peers) > 1:
        lines += [f"server.{myid}={HOST}:{quorum}:{election}" for myid, quorum, election in peers]
    return "\n".join(lines) + "\n"


def zookeeper_argv(java: str, install: ZooKeeperInstall, config_path: str, jaas_path: str | None = None) -> list[str]:
    """jaas_path: the users a private lab's server accepts (``zookeeper_jaas``)."""
    classpath = install.classpath
    # Debian's jar logs through SLF4J with no binding; slf4j-simple makes it log to stderr,
    # which is what a learner needs when a node does not start.
    simple = "/usr/share/java/slf4j-simple.jar"
    if os.path.exists(simple) and "slf4j-simple" not in classpath and "logback" not in classpath:
        classpath += ":" + simple
    login = [f"-Djava.security.auth.login.config={jaas_path}"] if jaas_path else []
    return [java, "-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-Djava.awt.headless=true", *login,
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.server.quorum=info",
            "-Dzookeeper.root.logger=INFO,CONSOLE", "-Dzookeeper.jmx.log4j.disable=true",
            f"-Dznode.container.checkIntervalMs={CONTAINER_CHECK_MS}",
            f"-Dzookeeper.fastleader.maxNotificationInterval={MAX_NOTIFICATION_INTERVAL_MS}",
            "-cp", classpath, "org.apache.zookeeper.server.quorum.QuorumPeerMain", config_path]


def parse_mntr(text: str) -> dict[str, int | float | str]:
    """``mntr`` reply → {"zk_ephemerals_count": 3, "zk_avg_latency": 0.5, "zk_server_state": "leader", ...}."""
    numbers: dict[str, int | float | str] = {}
    for line in text.splitlines():
        key, _, value = line.partition("\t")
        if not key.startswith("zk_") or not value:
            continue
        try:
            numbers[key] = int(value)
        except ValueError:
            try:
                numbers[key] = float(value)
            except ValueError:
                numbers[key] = value.strip()
    return numbers


def parse_mode(srvr_reply: str) -> str | None:
    for line in srvr_reply.splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


class ZooKeeperNode(Node):
    kind = "zookeeper"
    start_timeout = 40.0
    start_hint = ("check that Java works (`java -version`) and that the ports are free; "
                  "`labkit doctor` lists what is installed")

    def four_letter(self, word: str, timeout: float = 2.0) -> str:
        return four_letter(self.host, self.port, word, timeout)

    def watch_count(self) -> int:
        """Data and child watches this server holds now (``mntr``: zk_watch_count; ``wchs``
        counts only data watches). Raises ValueError if ``mntr`` does not say (a node that
        is not serving, or 4lw.commands.whitelist without mntr)."""
        count = parse_mntr(self.four_letter("mntr")).get("zk_watch_count")
        if not isinstance(count, int):
            raise ValueError(f"{self.name} answered mntr without zk_watch_count: is it serving, "
                             "and is 4lw.commands.whitelist=* set?")
        return count
    @property
    def auth(self) -> dict:
        """``KazooClient(hosts=node.endpoint, **node.auth)`` logs in to a private lab."""
        return self.secret.zookeeper if self.secret else {}

    def read_role(self) -> str:
        mode = parse_mode(self.four_letter("srvr"))
        return mode or "unreachable"  # "This ZooKeeper instance is not currently serving requests"

    def is_ready(self) -> bool:
        try:
            return parse_mode(self.four_letter("srvr", timeout=1.0)) is not None
        except OSError:
            return False


class ZooKeeperService(Service):
    """The ensemble as a whole: its connection string, its leader, its four-letter words."""

    name = "zookeeper"
    nodes: list[ZooKeeperNode]

    @property
    def auth(self) -> dict:
        """What a KazooClient of your own needs to log in: ``KazooClient(hosts=...,
        **lab.zookeeper.auth)`` (empty for a lab that is not private)."""
        return self.secret.zookeeper if self.secret else {}

    @property
    def hosts(self) -> str:
        """The kazoo / zkCli connection string."""
        return ",".join(node.endpoint for node in self.nodes)

    def hosts_for(self, via: str | None = None, nodes: list | None = None) -> str:
        """The connection string for a client named ``via`` (its own proxied links)."""
        nodes = nodes or self.nodes
        if via is None:
            return ",".join(node.endpoint for node in nodes)
        if self.network is None:
            raise not_enabled()
        return ",".join(self.network.endpoint(via, node) for node in nodes)

    def leader(self) -> ZooKeeperNode:
        for node in self.nodes:
            if node.role in ("leader", "standalone"):
                return node
        raise NoLeader("the ZooKeeper ensemble has no leader right now",
                       "a majority of nodes must be running and able to talk; "
                       "use wait_for_leader(timeout) after a crash")

    def wait_for_leader(self, timeout: float = 15.0) -> ZooKeeperNode:
        """Poll `srvr` on every node until one says leader (or standalone) and every other
        running node is serving as a follower."""
        roles: dict = {}

        def settled_leader() -> ZooKeeperNode | None:
            roles.clear()
            roles.update({node.name: node.role for node in self.nodes})
            leaders = [n for n in self.nodes if roles[n.name] in ("leader", "standalone")]
            settled = all(r in ("leader", "follower", "standalone", "stopped", "paused") for r in roles.values())
            return leaders[0] if len(leaders) == 1 and settled else None

        with showing_progress("waiting for the ZooKeeper ensemble to elect a leader", after=1.0):   # shown only if it takes a while
            return wait_for_value(settled_leader, "a ZooKeeper leader", timeout, poll=0.05,
                                  error=lambda: NoLeader(f"no ZooKeeper leader within {timeout:.0f} s (roles now: {roles})",
                                                         "a majority of the ensemble must be running; restart stopped nodes"))

    def watch_count(self) -> int:
        """Watches the running servers hold now, summed (each watch lives on the server its
        client is connected to). See ``ZooKeeperNode.watch_count``."""
        return sum(node.watch_count() for node in self.running())

    def four_letter(self, word: str, node: ZooKeeperNode | None = None) -> str:
        node = node or self.first_running()
        return node.four_letter(word)

    @property
    def server_lag(self) -> float:
        """Seconds by which the leader's view of a session can trail what the client's own
        server answered (syncLimit x tickTime + half a tick, 0 when standalone), asked of
        every member with ``conf`` as ``ZooKeeperLock`` does (``zookeeper_conf.py``)."""
        return lag_of_servers([(node.host, node.port) for node in self.nodes])

    def client(self, timeout: float = 4.0, via: str | None = None, nodes: list | None = None, **kwargs) -> KazooClient:
        """A started KazooClient on the whole ensemble (or on ``nodes``); the caller stops it.
        ``timeout`` is the session timeout in seconds the client asks for. ``via="client-1"``
        (a lab with network=True): reach each server through links of that client's own,
        so that ``lab.isolate("client-1")`` cuts this client and no other.

        It reconnects at least every ``RECONNECT_AT_MOST`` seconds (a third of a shorter session
        timeout): kazoo's own backoff doubles up to an hour, so after a few refused tries
        during an election it slept past a new leader's whole session timeout and lost a session
        that one more try would have kept (a race's waiter, at load 12). Pass
        ``connection_retry=`` for another policy."""
        hosts = self.hosts_for(via, nodes)
        kwargs.setdefault("connection_retry", {"max_tries": -1, "delay": 0.1, "backoff": 2, "max_jitter": 0.1,
                                               "max_delay": min(RECONNECT_AT_MOST, timeout / 3)})
        client = KazooClient(hosts=hosts, timeout=timeout, **{**self.auth, **kwargs})
        client.start(timeout=15)
        return client

    def describe(self) -> dict:
        return {"connect": self.hosts, "nodes": [n.describe() for n in self.nodes]}

    def is_ready(self) -> bool:
        roles = [n.role for n in self.nodes]
        return roles.count("leader") + roles.count("standalone") == 1 and all(
            r in ("leader", "follower", "standalone") for r in roles)


def lay_out_zookeeper(layout: Layout, count: int) -> None:
    """zk1..zkN, each dialing its peers through its own proxies (a lab with a network);
    ``layout.options["zookeeper_settings"]``: zoo.cfg keys instead of the lab's."""
    triples = [(i + 1, layout.ports.take(), layout.ports.take(), layout.ports.take()) for i in range(count)]
    peers = [(myid, quorum, election) for myid, _, quorum, election in triples]
    secret, run_dir = layout.secret, layout.run_dir
    jaas = str(write_private(run_dir / "zookeeper.jaas", zookeeper_jaas(secret))) if secret else None
    for myid, client_port, quorum, election in triples:
        name = f"zk{myid}"
        data_dir = run_dir / name
        data_dir.mkdir()
        (data_dir / "myid").write_text(f"{myid}\n")
        config = data_dir / "zoo.cfg"
        # each server dials peer j through its own proxy of the link to j
        seen = [(j, q, e) if j == myid else
                (j, layout.via(name, f"zk{j}", q), layout.via(name, f"zk{j}", e, "zk-election"))
                for j, q, e in peers]
        config.write_text(zookeeper_config(str(data_dir), client_port, seen, private=secret is not None,
                                            settings=layout.options.get("zookeeper_settings")))
        argv = zookeeper_argv(layout.binaries["java"], layout.binaries["zookeeper"], str(config), jaas)
        layout.add(ZooKeeperNode, name, {"client": client_port, "quorum": quorum, "election": election},
                   data_dir, argv)


ZOOKEEPER = ServiceKind("zookeeper", ZooKeeperNode, ZooKeeperService, lay_out_zookeeper,
                        count=lambda sizes: sizes.zookeeper,
                        check=lambda sizes: check_ensemble_size("zookeeper", sizes.zookeeper),
                        finders={"java": find_java, "zookeeper": find_zookeeper}, in_image=("java", "zookeeper"))
