"""Which nodes a lab has: the sizes labkit accepts, the binaries each kind needs, and for
every node its ports, data folder, config file and runner (a process or a container),
with its peers reached through the lab's network proxies when it has one.

Nothing here starts anything: ``labkit.servers.lab.up`` builds the nodes with these
functions, checks their ports, then starts them. What can fail: ``InvalidClusterSize``
for a size labkit refuses (even ensembles, Sentinel without a replica),
``ServerNotFound`` for a missing binary.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

from labkit.errors import InvalidClusterSize
from labkit.servers.runners import discovery
from labkit.servers.runners.clock import prepare_clock
from labkit.servers.runners.docker_container import DockerContainer, image_binaries
from labkit.servers.services.etcd import EtcdNode, EtcdService, etcd_argv
from labkit.servers.network.links import etcd_member_id
from labkit.servers.services.node import Node
from labkit.servers.services.postgres import PostgresNode, PostgresService, build_postgres
from labkit.servers.runners.process import LocalProcess
from labkit.servers.services.redis import RedisNode, RedisService, RedlockNode, RedlockService, redis_argv
from labkit.servers.secret import etcd_token_flag, redis_acl, write_private, zookeeper_jaas
from labkit.servers.services.sentinel import SentinelNode, SentinelService, sentinel_argv, sentinel_config
from labkit.servers.services.zookeeper import ZooKeeperNode, ZooKeeperService, zookeeper_argv, zookeeper_config

if TYPE_CHECKING:
    from labkit.servers.network.links import Network
    from labkit.servers.secret import LabSecret


class LabBeingBuilt(Protocol):
    """The lab being built, as far as the layout reads and fills it: labkit.servers.lab.Lab
    is the one lab (it imports this module, so this module names what it needs instead)."""

    id: str
    run_dir: Path
    backend: str
    clocks: bool
    network: Network | None
    secret: LabSecret | None
    zookeeper: ZooKeeperService | None
    etcd: EtcdService | None
    redis: RedisService | None
    redlock: RedlockService | None
    sentinel: SentinelService | None
    postgres: PostgresService | None

    @property
    def private(self) -> bool: ...

NODE_CLASSES = {"zookeeper": ZooKeeperNode, "etcd": EtcdNode, "redis": RedisNode,
                "redlock": RedlockNode, "sentinel": SentinelNode, "postgres": PostgresNode}
ENSEMBLE_SIZES = (0, 1, 3, 5)


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


def make_runner(lab: LabBeingBuilt, node_class: type[Node], name: str, argv: list[str], cwd: str):
    """The process or container that runs one node; with the lab's clocks on, it preloads
    the clock shim (unless that kind of server cannot be stepped: etcd)."""
    log_path = str(lab.run_dir / f"{name}.log")
    env = prepare_clock(lab.run_dir, name) if lab.clocks and node_class.clock_problem is None else {}
    if lab.backend == "docker":
        return DockerContainer(argv, log_path, cwd, lab_id=lab.id, name=name, env=env)
    return LocalProcess(argv, log_path, cwd, env)


def find_binaries(zookeeper: int, etcd: int, redis: bool, backend: str, postgres: bool = False) -> dict:
    if backend == "docker":
        return image_binaries()
    found = {"postgres": discovery.find_postgres()} if postgres else {}
    if zookeeper:
        found["java"] = discovery.find_java()
        found["zookeeper"] = discovery.find_zookeeper()
    if etcd:
        found["etcd"] = discovery.find_etcd()
        found["etcdctl"] = discovery.find_etcdctl()
    if redis:
        found["redis"] = discovery.find_redis()
    return found


def port_via_network(lab: LabBeingBuilt, src: str, dst: str, port: int, kind: str = "tcp", **extra) -> int:
    """The port ``src`` dials to reach ``dst``'s ``port``: the proxy of link src->dst when
    the lab has a network, else the port itself."""
    return port if lab.network is None else lab.network.route(src, dst, port, kind, **extra)


def build_nodes(lab: LabBeingBuilt, binaries: dict, ports: list[int], zookeeper: int, etcd: int, redis_count: int,
                sentinels: int = 0, etcd_pre_vote: bool = False) -> None:
    take = iter(ports)
    if zookeeper:
        triples = [(i + 1, next(take), next(take), next(take)) for i in range(zookeeper)]
        peers = [(myid, quorum, election) for myid, _, quorum, election in triples]
        nodes = []
        for myid, client_port, quorum, election in triples:
            name = f"zk{myid}"
            data_dir = lab.run_dir / name
            data_dir.mkdir()
            (data_dir / "myid").write_text(f"{myid}\n")
            config = data_dir / "zoo.cfg"
            # each server dials peer j through its own proxy of the link to j
            seen = [(j, q, e) if j == myid else
                    (j, port_via_network(lab, name, f"zk{j}", q),
                     port_via_network(lab, name, f"zk{j}", e, "zk-election"))
                    for j, q, e in peers]
            config.write_text(zookeeper_config(str(data_dir), client_port, seen, private=lab.private))
            jaas = str(write_private(lab.run_dir / "zookeeper.jaas", zookeeper_jaas(lab.secret))) if lab.secret else None
            argv = zookeeper_argv(binaries["java"], binaries["zookeeper"], str(config), jaas)
            runner = make_runner(lab, ZooKeeperNode, name, argv, str(data_dir))
            nodes.append(ZooKeeperNode(name, client_port, runner, str(data_dir),
                                       {"client": client_port, "quorum": quorum, "election": election}))
        lab.zookeeper = ZooKeeperService(nodes)
    if etcd:
        pairs = [(f"etcd{i + 1}", next(take), next(take)) for i in range(etcd)]
        advertised = etcd_peer_proxies(lab, pairs)
        initial_cluster = ",".join(f"{name}=http://127.0.0.1:{advertised[name]}" for name, _, _ in pairs)
        auth_token = etcd_token_flag(lab.run_dir) if lab.secret else None
        nodes = []
        for name, client_port, peer_port in pairs:
            data_dir = lab.run_dir / name
            argv = etcd_argv(binaries["etcd"], name, str(data_dir), client_port, peer_port,
                             initial_cluster, f"labkit-{lab.id}", advertised[name], auth_token, etcd_pre_vote)
            runner = make_runner(lab, EtcdNode, name, argv, str(lab.run_dir))
            nodes.append(EtcdNode(name, client_port, runner, str(data_dir),
                                  {"client": client_port, "peer": peer_port}))
        lab.etcd = EtcdService(nodes, binaries.get("etcdctl"))
    if redis_count:
        ports_of = [(f"redis{i + 1}", next(take)) for i in range(redis_count)]
        primary_port = ports_of[0][1]

        def redis(name: str, port: int, folder: str) -> list[str]:   # redis1 is the primary; the others replicate it
            replica_of = announce = None
            if sentinels and lab.network is not None:
                announce = redis_link(lab, name, port, sentinels)
            if name != "redis1":
                replica_of = (redis_link(lab, "redis1", primary_port, sentinels) if sentinels
                              else port_via_network(lab, name, "redis1", primary_port))
            return redis_argv(binaries["redis"], port, folder, replica_of=replica_of, announce_port=announce,
                              config_file=redis_acl_file(lab))
        lab.redis = RedisService([one_port_node(lab, RedisNode, name, port, redis) for name, port in ports_of])


def redis_acl_file(lab: LabBeingBuilt) -> str | None:
    """The ACL every Redis server of a private lab reads first (one file for all of them)."""
    if lab.secret is None:
        return None
    return str(write_private(lab.run_dir / "redis-acl.conf", redis_acl(lab.secret)))


def etcd_peer_proxies(lab: LabBeingBuilt, pairs: list[tuple[str, int, int]]) -> dict[str, int]:
    """Peer URLs are cluster-wide, so each member gets one proxy in front of its peer port
    and the proxy learns the sender of each connection from rafthttp's X-Server-From
    header, whose ids it can compute: they hash the advertised URLs and the token."""
    if lab.network is None:
        return {name: peer for name, _, peer in pairs}
    names = [name for name, _, _ in pairs]
    ports = {name: lab.network.route("*", name, peer, "etcd-peer", peers=names) for name, _, peer in pairs}
    members = {etcd_member_id([f"http://127.0.0.1:{ports[name]}"], f"labkit-{lab.id}"): name for name in names}
    for name, _, peer in pairs:
        lab.network.route("*", name, peer, "etcd-peer", peers=names, members=members)
    return ports


def build_redlock_and_sentinels(lab: LabBeingBuilt, binaries: dict, ports: list[int], redlock: int, sentinels: int) -> None:
    take = iter(ports)
    if redlock:
        lab.redlock = RedlockService([one_port_node(lab, RedlockNode, f"r{i + 1}", next(take), lambda _, port, folder:
                                                    redis_argv(binaries["redis"], port, folder,
                                                               config_file=redis_acl_file(lab)))
                                      for i in range(redlock)])
    if sentinels:
        def sentinel(name: str, port: int, folder: str) -> list[str]:
            config = Path(folder) / "sentinel.conf"
            monitored = redis_link(lab, "redis1", lab.redis.primary.port, sentinels)
            write_private(config, sentinel_config(port, folder, monitored, sentinels // 2 + 1,
                                                  myid=sentinel_myid(lab, name), secret=lab.secret))
            return sentinel_argv(binaries["redis"], str(config))
        lab.sentinel = SentinelService([one_port_node(lab, SentinelNode, f"sentinel{i + 1}", next(take), sentinel)
                                        for i in range(sentinels)])
        lab.redis.sentinels = lab.sentinel
        lab.sentinel.aliases = sentinel_aliases(lab)


def sentinel_myid(lab: LabBeingBuilt, name: str) -> str:
    """A sentinel's run id, fixed by labkit so that the network can tell its connections apart."""
    return hashlib.sha1(f"{lab.id}/{name}".encode()).hexdigest()


def redis_link(lab: LabBeingBuilt, name: str, port: int, sentinels: int) -> int:
    """With Sentinel, the port the sentinels and the other Redis server dial to reach
    ``name``. With a network, one proxy shared by all of them (Sentinel rewrites a replica
    whose primary address differs from its own, so they must all dial the same address; the
    server announces it as its own with replica-announce-port); the proxy tells a sentinel's
    connection by its client name, anything else on it is the other Redis server."""
    if lab.network is None:
        return port
    names = [f"sentinel{i + 1}" for i in range(sentinels)]
    other = "redis2" if name == "redis1" else "redis1"
    members = {sentinel_myid(lab, sentinel)[:8]: sentinel for sentinel in names}
    members[""] = other
    return lab.network.route("*", name, port, "redis-shared", peers=names + [other], members=members)


def sentinel_aliases(lab: LabBeingBuilt) -> dict[str, str]:
    """Each Redis server's proxy address (what the sentinels name) -> its own address."""
    aliases = {}
    for node in lab.redis.nodes:
        link = redis_link(lab, node.name, node.port, len(lab.sentinel.nodes))
        if link != node.port:
            aliases[f"{node.host}:{link}"] = node.endpoint
    return aliases


def one_port_node(lab: LabBeingBuilt, node_class: type[Node], name: str, port: int,
                  argv: Callable[[str, int, str], list[str]]) -> Node:
    """A node with one port and a data folder of its own (Redis, Redlock's instances, a
    sentinel): ``argv(name, port, folder)`` is its command line (it may write a config there)."""
    folder = lab.run_dir / name
    folder.mkdir()
    runner = make_runner(lab, node_class, name, argv(name, port, str(folder)), str(folder))
    return node_class(name, port, runner, str(folder))


def add_postgres(lab: LabBeingBuilt, binaries: dict, port: int) -> None:
    """pg1, a PostgreSQL server (labkit/servers/services/postgres.py), its data copied from a template at start."""
    lab.postgres = build_postgres(lab, binaries.get("postgres", ""), port, make_runner)
