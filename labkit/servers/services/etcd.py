"""etcd members: their flags, the /health probe and the leader seen by each member.

Raft timing is scaled down (heartbeat 50 ms, election timeout 500 ms) so that a lesson
sees a new leader within a second of killing the old one.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types
import urllib.request

import etcd3
import etcd3.watch

from labkit.errors import NoLeader, ServerNotFound
from labkit.progress import showing_progress
from labkit.servers.network.links import Network, etcd_member_id
from labkit.servers.runners.discovery import find_etcd, find_etcdctl
from labkit.servers.ports import HOST
from labkit.servers.services.kind import ServiceKind, check_ensemble_size
from labkit.servers.services.layout import Layout
from labkit.servers.services.node import Node, Service
from labkit.servers.secret import LabSecret, etcd_token_flag
from labkit.timing import wait_for_value


def mend_python_etcd3() -> None:
    """python3-etcd3 0.13's watch module uses ``six`` without importing it: every watch
    thread of every client (a learner's own ``etcd3.client()`` too) dies with
    ``NameError: name 'six' is not defined`` when its watches are cancelled or its client
    closes. Give the module the one ``six`` function it calls. And with ``user=`` /
    ``password=`` (a private lab) it attaches its token both as call metadata and as gRPC
    call credentials, which gRPC refuses on a plain (non-TLS) channel, so every call fails:
    keep the metadata only. Idempotent; runs once when labkit is imported (this module is
    imported by ``labkit.servers``)."""
    if not hasattr(etcd3.watch, "six"):
        etcd3.watch.six = types.SimpleNamespace(itervalues=lambda mapping: iter(mapping.values()))
    create = etcd3.Etcd3Client.__init__
    if getattr(create, "token_as_metadata_only", False):
        return

    def __init__(client, *args, **kwargs):
        create(client, *args, **kwargs)
        client.call_credentials = None  # the token still travels in client.metadata
    __init__.token_as_metadata_only = True
    etcd3.Etcd3Client.__init__ = __init__


mend_python_etcd3()


def etcd_argv(etcd: str, name: str, data_dir: str, client_port: int, peer_port: int,
              initial_cluster: str, token: str, advertised_peer_port: int | None = None,
              auth_token: str | None = None, pre_vote: bool = False) -> list[str]:
    """auth_token: ``--auth-token`` for a private lab (``labkit.servers.secret.etcd_token_flag``).
    pre_vote: ``--pre-vote`` (etcd 3.4's default is off, 3.5's on): a member that lost its
    leader first asks the others whether they would vote for it, and bumps its term only if a
    majority would, so a member rejoining after a partition does not force an election."""
    # bcrypt cost 4, not 10: etcd hashes the password at every login (each new client, each
    # etcdctl run), and cost 10 took ~100 ms here. The lab's password is 160 random bits,
    # which no guessing reaches whatever the cost; the cost only protects weak passwords.
    auth = ["--auth-token", auth_token, "--bcrypt-cost", "4"] if auth_token else []
    return [etcd, *auth, "--name", name, "--data-dir", data_dir,
            "--listen-client-urls", f"http://{HOST}:{client_port}",
            "--advertise-client-urls", f"http://{HOST}:{client_port}",
            "--listen-peer-urls", f"http://{HOST}:{peer_port}",
            "--initial-advertise-peer-urls", f"http://{HOST}:{advertised_peer_port or peer_port}",
            "--initial-cluster", initial_cluster, "--initial-cluster-state", "new",
            "--initial-cluster-token", token,
            "--heartbeat-interval", "50", "--election-timeout", "500",
            "--pre-vote" if pre_vote else "--pre-vote=false",
            "--logger", "zap", "--log-level", "warn"]


# Not grpc.min_reconnect_backoff_ms: gRPC also takes it as the time a connection attempt may
# take (20 s if unset), and 0.1 s failed clients' first handshakes on a loaded machine.
RECONNECT_QUICKLY = [("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 1000)]


def etcd_client(host: str, port: int, timeout: float = 10.0, **kwargs):
    """An etcd3 (python3-etcd3) client that survives a server restart: after one failed
    call python3-etcd3 0.13 refuses every call to that endpoint for 300 s ("Trying to use
    a failed node"); a lab restarts servers on purpose, so it retries at once. (Its other
    flaw, the missing ``six``, is mended for every client by ``mend_python_etcd3``.) With
    ``user``/``password`` it logs in once and sends the token as call metadata:
    python3-etcd3 also attaches it as gRPC call credentials, which gRPC refuses on a plain
    (non-TLS) channel, so those are dropped.

    gRPC waits longer and longer between reconnects to a member that went away (1 s, then
    x1.6 each time, up to 2 min): after a member's restart a lab's clients would stay away
    for seconds (a torture run measured an 8 s gap with nobody holding, 4 s of it after the
    member was back). Here it tries again within 0.1 s and never waits more than 1 s, as
    the lab's kazoo clients do."""
    kwargs.setdefault("grpc_options", RECONNECT_QUICKLY)
    client = etcd3.client(host=host, port=port, timeout=timeout, **kwargs)
    client.call_credentials = None  # the token travels in client.metadata
    for endpoint in client.endpoints.values():
        endpoint.time_retry = 0
    return client


def _post_json(url: str, body: dict, timeout: float) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        return json.loads(reply.read())


class EtcdNode(Node):
    kind = "etcd"
    start_timeout = 30.0
    start_hint = "check the ports are free and `etcd --version` runs; `labkit doctor` helps"
    clock_problem = ("etcd is a Go program, and Go reads the clock through the kernel's vDSO, not through "
                     "libc, so labkit's preloaded clock shim cannot shift it; only root, setting the "
                     "machine's own clock, could, and the lab never touches that")

    @property
    def auth(self) -> dict:
        """``etcd_client(node.host, node.port, **node.auth)`` logs in to a private lab."""
        return self.secret.etcd if self.secret else {}

    def status(self, timeout: float = 1.0) -> dict:
        """The member's own view (gRPC gateway /v3/maintenance/status): member id, leader id,
        raft term and index."""
        return _post_json(f"http://{self.endpoint}/v3/maintenance/status", {}, timeout)

    def raft_status(self, timeout: float = 1.0) -> dict:
        """The member's raft state from /debug/vars: its current ``term`` (status()'s
        raftTerm is the term of the newest entry it applied, which a member cut off from the
        others never raises), ``raftState`` (StateLeader, StateFollower, StateCandidate,
        StatePreCandidate), ``lead``, ``vote``, ``commit`` and ``applied``."""
        with urllib.request.urlopen(f"http://{self.endpoint}/debug/vars", timeout=timeout) as reply:
            return json.loads(reply.read())["raft.status"]

    def read_role(self) -> str:
        status = self.status()
        leader = status.get("leader")
        if not leader or leader == "0":
            return "candidate"
        return "leader" if leader == status["header"]["member_id"] else "follower"

    def is_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=1.0) as reply:
                return json.loads(reply.read()).get("health") == "true"
        except (OSError, ValueError):
            return False

    @property
    def pre_vote(self) -> bool:
        """True when this member was started with ``--pre-vote`` (``labkit.up(etcd_pre_vote=True)``)."""
        return "--pre-vote" in self.runner.argv

    def metrics(self) -> str:
        """The Prometheus text of /metrics (etcd_server_*, etcd_debugging_* ...)."""
        with urllib.request.urlopen(f"http://{self.endpoint}/metrics", timeout=2.0) as reply:
            return reply.read().decode()


class EtcdService(Service):
    """The cluster as a whole: its endpoints, its leader, clients and etcdctl."""

    name = "etcd"
    nodes: list[EtcdNode]

    def __init__(self, nodes: list[EtcdNode], network: Network | None = None, secret: LabSecret | None = None,
                 etcdctl: str | None = None):
        super().__init__(nodes, network, secret)
        self.etcdctl_path = etcdctl

    @property
    def endpoints(self) -> list[str]:
        return [node.endpoint for node in self.nodes]

    @property
    def auth(self) -> dict:
        """What an etcd3 client of your own needs to log in: ``etcd_client(host, port,
        **lab.etcd.auth)`` (empty for a lab that is not private)."""
        return self.secret.etcd if self.secret else {}

    def enable_auth(self, secret: LabSecret) -> None:
        """Turn etcd's auth on, through the JSON gateway (no etcdctl needed, and no password
        on a command line that ``ps`` shows): a root user (etcd requires one before auth),
        a role that reads and writes every key, the lab's user with that role. Raises
        urllib's HTTPError if a step is refused (e.g. someone else created root first)."""
        everything = {"permType": "READWRITE", "key": "AA==", "range_end": "AA=="}  # from "\0" on: all keys
        steps = [("user/add", {"name": "root", "password": secret.password}),
                 ("user/grant", {"user": "root", "role": "root"}),
                 ("role/add", {"name": secret.user}),
                 ("role/grant", {"name": secret.user, "perm": everything}),
                 ("user/add", {"name": secret.user, "password": secret.password}),
                 ("user/grant", {"user": secret.user, "role": secret.user}),
                 ("enable", {})]
        endpoint = self.wait_for_leader().endpoint
        for path, body in steps:
            _post_json(f"http://{endpoint}/v3/auth/{path}", body, timeout=10.0)

    def leader(self) -> EtcdNode:
        for node in self.nodes:
            if node.role == "leader":
                return node
        raise NoLeader("the etcd cluster has no leader right now",
                       "a majority of members must be running; use wait_for_leader(timeout) after a crash")

    def wait_for_leader(self, timeout: float = 15.0) -> EtcdNode:
        roles: dict = {}

        def ready_leader() -> EtcdNode | None:
            roles.clear()
            roles.update({node.name: node.role for node in self.nodes})
            leaders = [n for n in self.nodes if roles[n.name] == "leader"]
            return leaders[0] if len(leaders) == 1 and leaders[0].is_ready() else None

        with showing_progress("waiting for the etcd cluster to elect a leader", after=1.0):   # shown only if it takes a while
            return wait_for_value(ready_leader, "an etcd leader", timeout, poll=0.05,
                                  error=lambda: NoLeader(f"no etcd leader within {timeout:.0f} s (roles now: {roles})",
                                                         "a majority of members must be running; restart stopped members"))

    def client(self, node: EtcdNode | None = None, via: str | None = None, **kwargs):
        """An etcd3 client on one member (the first running one unless named).
        ``via="client-1"`` (a lab with network=True): through a link of that client's own."""
        node = node or self.first_running()
        host, port = self.endpoint_for(node, via).rsplit(":", 1)
        return etcd_client(host, int(port), **{**self.auth, **kwargs})

    def etcdctl(self, *args: str, timeout: float = 30.0, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        """Run etcdctl (API v3) against this cluster's endpoints."""
        try:
            command = [self.etcdctl_path or find_etcdctl()]
        except ServerNotFound:
            if not self.nodes or self.nodes[0].runner.backend != "docker":
                raise
            command = [sys.executable, "-m", "labkit.servers.runners.docker_container", "etcdctl"]  # the image's etcdctl
        argv = [*command, "--endpoints", ",".join(self.endpoints), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=self.etcdctl_environment(),
                              check=check, **kwargs)

    def etcdctl_environment(self) -> dict[str, str]:
        """The environment an etcdctl of your own runs with (``subprocess.Popen(..., env=...)``):
        API v3, and a private lab's login in ETCDCTL_USER, where only this user can read it
        (a ``--user`` flag would show in ``ps``)."""
        env = dict(os.environ, ETCDCTL_API="3")
        if self.secret:
            env["ETCDCTL_USER"] = f"{self.secret.user}:{self.secret.password}"
        return env

    def describe(self) -> dict:
        return {"endpoints": self.endpoints, "nodes": [n.describe() for n in self.nodes]}

    def is_ready(self) -> bool:
        roles = [n.role for n in self.nodes]
        return roles.count("leader") == 1 and all(n.is_ready() for n in self.nodes)


def lay_out_etcd(layout: Layout, count: int) -> None:
    """etcd1..etcdN, one cluster; ``layout.options["etcd_pre_vote"]``: every member with --pre-vote."""
    pairs = [(f"etcd{i + 1}", layout.ports.take(), layout.ports.take()) for i in range(count)]
    advertised = etcd_peer_proxies(layout, pairs)
    initial_cluster = ",".join(f"{name}=http://127.0.0.1:{advertised[name]}" for name, _, _ in pairs)
    auth_token = etcd_token_flag(layout.run_dir) if layout.secret else None
    for name, client_port, peer_port in pairs:
        data_dir = layout.run_dir / name
        argv = etcd_argv(layout.binaries["etcd"], name, str(data_dir), client_port, peer_port, initial_cluster,
                         f"labkit-{layout.lab_id}", advertised[name], auth_token,
                         layout.options.get("etcd_pre_vote", False))
        layout.add(EtcdNode, name, {"client": client_port, "peer": peer_port}, data_dir, argv, cwd=layout.run_dir)
    layout.settings_of("etcd")["etcdctl"] = layout.binaries.get("etcdctl")


def etcd_peer_proxies(layout: Layout, pairs: list[tuple[str, int, int]]) -> dict[str, int]:
    """Peer URLs are cluster-wide, so each member gets one proxy in front of its peer port
    and the proxy learns the sender of each connection from rafthttp's X-Server-From
    header, whose ids it can compute: they hash the advertised URLs and the token."""
    network = layout.network
    if network is None:
        return {name: peer for name, _, peer in pairs}
    names = [name for name, _, _ in pairs]
    ports = {name: network.route("*", name, peer, "etcd-peer", peers=names) for name, _, peer in pairs}
    members = {etcd_member_id([f"http://127.0.0.1:{ports[name]}"], f"labkit-{layout.lab_id}"): name
               for name in names}
    for name, _, peer in pairs:
        network.route("*", name, peer, "etcd-peer", peers=names, members=members)
    return ports


ETCD = ServiceKind("etcd", EtcdNode, EtcdService, lay_out_etcd, count=lambda sizes: sizes.etcd,
                   check=lambda sizes: check_ensemble_size("etcd", sizes.etcd),
                   finders={"etcd": find_etcd, "etcdctl": find_etcdctl}, in_image=("etcd", "etcdctl"))
