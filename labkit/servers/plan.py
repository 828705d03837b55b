"""What a lab is made of, decided before anything starts: its plan.

A ``LabPlan`` says which services a lab runs and, for every node, its ports, data folder
and runner (the command line a local process or a container runs, with its config file
written beside it), with its peers reached through the lab's network proxies when it has
one. ``make_plan`` lays one out from the sizes asked for; ``services_of`` builds the
cluster handles from a plan. Both ways into a lab go through the same plan:
``labkit.servers.lab.up`` makes it, builds the lab from it and records it in the lab's
state file (``LabPlan.to_state``); ``attach`` reads it back (``LabPlan.from_state``) and
builds the lab the same way. There is no second mapping to keep in step.

Nothing here starts anything. What can fail: ``InvalidClusterSize`` for a size labkit
refuses (even ensembles, Sentinel without a replica), ``ServerNotFound`` for a missing binary,
``NodeStartError`` when PostgreSQL's template cannot be made (initdb runs here, once).
"""
from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from labkit.errors import InvalidClusterSize
from labkit.servers.network.links import Network, etcd_member_id
from labkit.servers.ports import PortPool
from labkit.servers.runners import discovery
from labkit.servers.runners.clock import prepare_clock
from labkit.servers.runners.docker_container import DockerContainer, image_binaries
from labkit.servers.runners.process import LocalProcess
from labkit.servers.secret import LabSecret, etcd_token_flag, redis_acl, write_private, zookeeper_jaas
from labkit.servers.services.etcd import EtcdNode, EtcdService, etcd_argv
from labkit.servers.services.node import Node, Service
from labkit.servers.services.postgres import PostgresNode, PostgresService, container_mounts, data_folder, postgres_argv
from labkit.servers.services.postgres_template import template
from labkit.servers.services.redis import RedisNode, RedisService, RedlockNode, RedlockService, redis_argv
from labkit.servers.services.sentinel import SentinelNode, SentinelService, sentinel_argv, sentinel_config
from labkit.servers.services.zookeeper import ZooKeeperNode, ZooKeeperService, zookeeper_argv, zookeeper_config

NODE_CLASSES = {"zookeeper": ZooKeeperNode, "etcd": EtcdNode, "redis": RedisNode,
                "redlock": RedlockNode, "sentinel": SentinelNode, "postgres": PostgresNode}
ENSEMBLE_SIZES = (0, 1, 3, 5)


@dataclass(frozen=True)
class Sizes:
    """The services asked for: ensemble sizes (0, 1, 3 or 5), a Redis primary and its
    replica, Redlock's independent primaries (3 to 9), sentinels (1, 3 or 5), a PostgreSQL server."""

    zookeeper: int = 1
    etcd: int = 1
    redis: bool = True
    replica: bool = False
    redlock: int = 0
    sentinels: int = 0
    postgres: bool = False

    def check(self) -> None:
        """Raise InvalidClusterSize for a size labkit refuses, before anything starts."""
        check_ensemble_size("zookeeper", self.zookeeper)
        check_ensemble_size("etcd", self.etcd)
        if self.replica and not self.redis:
            raise InvalidClusterSize("replica=True needs redis=True", "a replica replicates a primary")
        check_redis_extras(self.redlock, self.sentinels, self.replica)


@dataclass
class NodePlan:
    """One node: the fields of its entry in the state file (``Node.to_state``)."""

    name: str
    kind: str
    port: int                 # the port clients dial
    ports: dict[str, int]     # every port it listens on, by use ("client", "quorum", "peer"...)
    data_dir: str
    runner: dict              # LocalProcess / DockerContainer ``to_state()``: argv, log, env (+ pid once started)
    settings: dict = field(default_factory=dict)   # what its kind needs beyond those (PostgreSQL: its template)

    def node(self) -> Node:
        runner_class = DockerContainer if self.runner["backend"] == "docker" else LocalProcess
        return NODE_CLASSES[self.kind](self.name, self.port, runner_class.from_state(self.runner),
                                       self.data_dir, self.ports, self.settings)


@dataclass
class LabPlan:
    """A whole lab. Its state file is ``to_state()`` plus who owns the lab."""

    id: str
    run_dir: Path
    backend: str
    clocks: bool = False      # ZooKeeper and Redis nodes preload the clock shim
    detached: bool = False    # started by `labkit up`: outlives its command
    nodes: list[NodePlan] = field(default_factory=list)
    etcdctl: str | None = None
    sentinel_aliases: dict[str, str] = field(default_factory=dict)  # a Redis proxy address -> its own
    network: dict | None = None   # ``Network.to_state()`` for a lab with network=True

    def of_kind(self, kind: str) -> list[NodePlan]:
        return [node for node in self.nodes if node.kind == kind]

    def holds(self, sizes: Sizes) -> bool:
        """At least the nodes ``sizes`` asks for, of every kind."""
        have = {kind: len(self.of_kind(kind)) for kind in NODE_CLASSES}
        return (have["zookeeper"] >= sizes.zookeeper and have["etcd"] >= sizes.etcd
                and have["redis"] >= (1 + int(sizes.replica)) * int(bool(sizes.redis))
                and have["redlock"] >= sizes.redlock and have["sentinel"] >= sizes.sentinels
                and have["postgres"] >= int(sizes.postgres))

    def to_state(self) -> dict:
        state = dataclasses.asdict(self)
        state["run_dir"] = str(self.run_dir)
        return state

    @classmethod
    def from_state(cls, data: dict, run_dir: Path) -> "LabPlan":
        """The plan a state file records (older files lack etcdctl, the aliases and settings)."""
        return cls(data["id"], Path(run_dir), data["backend"], data.get("clocks", False), data.get("detached", False),
                   [NodePlan(**{key.name: node.get(key.name) for key in dataclasses.fields(NodePlan)
                                if key.name in node}) for node in data["nodes"]],
                   data.get("etcdctl"), data.get("sentinel_aliases") or {}, data.get("network"))


def services_of(plan: LabPlan) -> dict[str, Service]:
    """The cluster handles of a plan, by kind; a kind the plan has no node of is left out."""
    services: dict[str, Service] = {}
    if plan.of_kind("zookeeper"):
        services["zookeeper"] = ZooKeeperService([node.node() for node in plan.of_kind("zookeeper")])
    if plan.of_kind("etcd"):
        services["etcd"] = EtcdService([node.node() for node in plan.of_kind("etcd")], plan.etcdctl)
    if plan.of_kind("redis"):
        services["redis"] = RedisService([node.node() for node in plan.of_kind("redis")])
    if plan.of_kind("redlock"):
        services["redlock"] = RedlockService([node.node() for node in plan.of_kind("redlock")])
    if plan.of_kind("sentinel"):
        services["sentinel"] = SentinelService([node.node() for node in plan.of_kind("sentinel")],
                                               plan.sentinel_aliases)
    if plan.of_kind("postgres"):
        services["postgres"] = PostgresService([node.node() for node in plan.of_kind("postgres")])
    return services


def check_ensemble_size(service: str, size: int) -> None:
    if size in ENSEMBLE_SIZES:
        return
    if size > 0 and size % 2 == 0:
        raise InvalidClusterSize(
            f"{service}={size}: an even ensemble is refused. A quorum is a majority, so {size} nodes "
            f"tolerate no more failures than {size - 1} do, while giving one more node to wait for",
            f"use {size - 1} or {size + 1}")
    raise InvalidClusterSize(f"{service}={size}: labkit runs ensembles of 1, 3 or 5 nodes (or 0 for none)",
                             "use 1 for a quick lab, 3 to see a leader fail over")


def check_redis_extras(redlock: int, sentinels: int, replica: bool) -> None:
    """Redlock needs several independent primaries; Sentinel needs a replica to promote."""
    if redlock and not 3 <= redlock <= 9:
        raise InvalidClusterSize(
            f"redlock={redlock}: Redlock takes a majority of N independent Redis primaries, "
            f"and with fewer than 3 one crash already blocks every lock",
            "use redlock=5 (the algorithm's own example; an odd N wastes no instance), or 3 for a quick lab")
    if sentinels and not replica:
        raise InvalidClusterSize(f"sentinels={sentinels} without a replica: Sentinel would have nothing to promote",
                                 "start the lab with redis=True, replica=True, sentinels=3")
    if sentinels not in ENSEMBLE_SIZES:
        raise InvalidClusterSize(f"sentinels={sentinels}: the sentinels elect a leader by majority, "
                                 "so labkit runs 1, 3 or 5 of them", "use sentinels=3")


def find_binaries(sizes: Sizes, backend: str) -> dict:
    if backend == "docker":
        return image_binaries()
    found = {"postgres": discovery.find_postgres()} if sizes.postgres else {}
    if sizes.zookeeper:
        found["java"] = discovery.find_java()
        found["zookeeper"] = discovery.find_zookeeper()
    if sizes.etcd:
        found["etcd"] = discovery.find_etcd()
        found["etcdctl"] = discovery.find_etcdctl()
    if sizes.redis or sizes.redlock:
        found["redis"] = discovery.find_redis()
    return found


def make_plan(plan: LabPlan, sizes: Sizes, binaries: dict, ports: PortPool, secret: LabSecret | None = None,
              network: Network | None = None, etcd_pre_vote: bool = False,
              zookeeper_settings: dict | None = None) -> LabPlan:
    """Fill ``plan`` (its id, folder, backend and clocks set) with the nodes of ``sizes``:
    each takes its ports from ``ports`` as it is laid out, gets its folder and config file
    in the run folder, and its links through ``network`` when the lab has one."""
    layout = Layout(plan, binaries, ports, secret, network)
    if sizes.zookeeper:
        layout.zookeeper(sizes.zookeeper, zookeeper_settings)
    if sizes.etcd:
        layout.etcd(sizes.etcd, etcd_pre_vote)
        plan.etcdctl = binaries.get("etcdctl")
    if sizes.redis:
        layout.redis(1 + int(sizes.replica), sizes.sentinels)
    if sizes.redlock:
        layout.redlock(sizes.redlock)
    if sizes.sentinels:
        layout.sentinels(sizes.sentinels)
    if sizes.postgres:
        layout.postgres()
    return plan


class Layout:
    """Lays out the nodes of one plan, service by service."""

    def __init__(self, plan: LabPlan, binaries: dict, ports: PortPool, secret: LabSecret | None,
                 network: Network | None):
        self.plan, self.binaries, self.ports = plan, binaries, ports
        self.secret, self.network = secret, network
        self.run_dir = plan.run_dir

    def add(self, node_class: type[Node], name: str, ports: dict[str, int], folder: Path, argv: list[str],
            cwd: Path | None = None, settings: dict | None = None, mounts: dict | None = None) -> None:
        """A node whose server runs ``argv``: a process or a container (which also mounts
        ``mounts``, {host path: path inside}); with the lab's clocks on, it preloads the clock
        shim (unless that kind of server cannot be stepped: etcd)."""
        log_path, cwd = str(self.run_dir / f"{name}.log"), str(cwd or folder)
        env = prepare_clock(self.run_dir, name) if self.plan.clocks and node_class.clock_problem is None else {}
        if self.plan.backend == "docker":
            runner = DockerContainer(argv, log_path, cwd, lab_id=self.plan.id, name=name, env=env, mounts=mounts)
        else:
            runner = LocalProcess(argv, log_path, cwd, env)
        self.plan.nodes.append(NodePlan(name, node_class.kind, ports["client"], ports, str(folder), runner.to_state(),
                                        dict(settings or {})))

    def via(self, src: str, dst: str, port: int, kind: str = "tcp", **extra) -> int:
        """The port ``src`` dials to reach ``dst``'s ``port``: the proxy of link src->dst when
        the lab has a network, else the port itself."""
        return port if self.network is None else self.network.route(src, dst, port, kind, **extra)

    def zookeeper(self, count: int, settings: dict | None = None) -> None:
        triples = [(i + 1, self.ports.take(), self.ports.take(), self.ports.take()) for i in range(count)]
        peers = [(myid, quorum, election) for myid, _, quorum, election in triples]
        jaas = str(write_private(self.run_dir / "zookeeper.jaas", zookeeper_jaas(self.secret))) if self.secret else None
        for myid, client_port, quorum, election in triples:
            name = f"zk{myid}"
            data_dir = self.run_dir / name
            data_dir.mkdir()
            (data_dir / "myid").write_text(f"{myid}\n")
            config = data_dir / "zoo.cfg"
            # each server dials peer j through its own proxy of the link to j
            seen = [(j, q, e) if j == myid else
                    (j, self.via(name, f"zk{j}", q), self.via(name, f"zk{j}", e, "zk-election"))
                    for j, q, e in peers]
            config.write_text(zookeeper_config(str(data_dir), client_port, seen, private=self.secret is not None,
                                                settings=settings))
            argv = zookeeper_argv(self.binaries["java"], self.binaries["zookeeper"], str(config), jaas)
            self.add(ZooKeeperNode, name, {"client": client_port, "quorum": quorum, "election": election},
                     data_dir, argv)

    def etcd(self, count: int, pre_vote: bool) -> None:
        pairs = [(f"etcd{i + 1}", self.ports.take(), self.ports.take()) for i in range(count)]
        advertised = self.etcd_peer_proxies(pairs)
        initial_cluster = ",".join(f"{name}=http://127.0.0.1:{advertised[name]}" for name, _, _ in pairs)
        auth_token = etcd_token_flag(self.run_dir) if self.secret else None
        for name, client_port, peer_port in pairs:
            data_dir = self.run_dir / name
            argv = etcd_argv(self.binaries["etcd"], name, str(data_dir), client_port, peer_port, initial_cluster,
                             f"labkit-{self.plan.id}", advertised[name], auth_token, pre_vote)
            self.add(EtcdNode, name, {"client": client_port, "peer": peer_port}, data_dir, argv, cwd=self.run_dir)

    def etcd_peer_proxies(self, pairs: list[tuple[str, int, int]]) -> dict[str, int]:
        """Peer URLs are cluster-wide, so each member gets one proxy in front of its peer port
        and the proxy learns the sender of each connection from rafthttp's X-Server-From
        header, whose ids it can compute: they hash the advertised URLs and the token."""
        if self.network is None:
            return {name: peer for name, _, peer in pairs}
        names = [name for name, _, _ in pairs]
        ports = {name: self.network.route("*", name, peer, "etcd-peer", peers=names) for name, _, peer in pairs}
        members = {etcd_member_id([f"http://127.0.0.1:{ports[name]}"], f"labkit-{self.plan.id}"): name
                   for name in names}
        for name, _, peer in pairs:
            self.network.route("*", name, peer, "etcd-peer", peers=names, members=members)
        return ports

    def redis_acl_file(self) -> str | None:
        """The ACL every Redis server of a private lab reads first (one file for all of them)."""
        if self.secret is None:
            return None
        return str(write_private(self.run_dir / "redis-acl.conf", redis_acl(self.secret)))

    def folder(self, name: str) -> Path:
        folder = self.run_dir / name
        folder.mkdir()
        return folder

    def redis(self, count: int, sentinels: int) -> None:
        """redis1 is the primary; the others replicate it."""
        ports_of = [(f"redis{i + 1}", self.ports.take()) for i in range(count)]
        primary_port = ports_of[0][1]
        for name, port in ports_of:
            replica_of = announce = None
            if sentinels and self.network is not None:
                announce = self.redis_link(name, port, sentinels)
            if name != "redis1":
                replica_of = (self.redis_link("redis1", primary_port, sentinels) if sentinels
                              else self.via(name, "redis1", primary_port))
            folder = self.folder(name)
            argv = redis_argv(self.binaries["redis"], port, str(folder), replica_of=replica_of,
                              announce_port=announce, config_file=self.redis_acl_file())
            self.add(RedisNode, name, {"client": port}, folder, argv)

    def redlock(self, count: int) -> None:
        for i in range(count):
            name, port = f"r{i + 1}", self.ports.take()
            folder = self.folder(name)
            argv = redis_argv(self.binaries["redis"], port, str(folder), config_file=self.redis_acl_file())
            self.add(RedlockNode, name, {"client": port}, folder, argv)

    def sentinels(self, count: int) -> None:
        primary = self.plan.of_kind("redis")[0]
        monitored = self.redis_link(primary.name, primary.port, count)
        for i in range(count):
            name, port = f"sentinel{i + 1}", self.ports.take()
            folder = self.folder(name)
            config = folder / "sentinel.conf"
            write_private(config, sentinel_config(port, str(folder), monitored, count // 2 + 1,
                                                  myid=self.sentinel_myid(name), secret=self.secret))
            self.add(SentinelNode, name, {"client": port}, folder, sentinel_argv(self.binaries["redis"], str(config)))
        for node in self.plan.of_kind("redis"):
            link = self.redis_link(node.name, node.port, count)
            if link != node.port:
                self.plan.sentinel_aliases[f"127.0.0.1:{link}"] = f"127.0.0.1:{node.port}"

    def sentinel_myid(self, name: str) -> str:
        """A sentinel's run id, fixed by labkit so that the network can tell its connections apart."""
        return hashlib.sha1(f"{self.plan.id}/{name}".encode()).hexdigest()

    def redis_link(self, name: str, port: int, sentinels: int) -> int:
        """With Sentinel, the port the sentinels and the other Redis server dial to reach
        ``name``. With a network, one proxy shared by all of them (Sentinel rewrites a replica
        whose primary address differs from its own, so they must all dial the same address; the
        server announces it as its own with replica-announce-port); the proxy tells a sentinel's
        connection by its client name, anything else on it is the other Redis server."""
        if self.network is None:
            return port
        names = [f"sentinel{i + 1}" for i in range(sentinels)]
        other = "redis2" if name == "redis1" else "redis1"
        members = {self.sentinel_myid(sentinel)[:8]: sentinel for sentinel in names}
        members[""] = other
        return self.network.route("*", name, port, "redis-shared", peers=names + [other], members=members)

    def postgres(self) -> None:
        """pg1, a PostgreSQL server (labkit/servers/services/postgres.py): its data is copied
        from a template at its first start."""
        bin_dir, backend = self.binaries.get("postgres", ""), self.plan.backend
        made_from = template(bin_dir, backend)
        port, data = self.ports.take(), data_folder(self.run_dir, "pg1", backend)
        self.add(PostgresNode, "pg1", {"client": port}, data, postgres_argv(bin_dir, str(data), port, backend),
                 cwd=data.parent, settings={"template_dir": str(made_from), "trusts_everyone": self.secret is None},
                 mounts=container_mounts(data, backend))
