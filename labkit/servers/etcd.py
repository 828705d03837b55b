"""etcd members: their flags, the /health probe and the leader seen by each member.

Raft timing is scaled down (heartbeat 50 ms, election timeout 500 ms) so that a lesson
sees a new leader within a second of killing the old one.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import types
import urllib.request

import etcd3
import etcd3.watch

from labkit.errors import NoLeader, ServerNotFound
from labkit.servers.discovery import find_etcdctl
from labkit.servers.node import HOST, Node, Service


def mend_python_etcd3() -> None:
    """python3-etcd3 0.13's watch module uses ``six`` without importing it: every watch
    thread of every client (a learner's own ``etcd3.client()`` too) dies with
    ``NameError: name 'six' is not defined`` when its watches are cancelled or its client
    closes. Give the module the one ``six`` function it calls. Idempotent; runs once when
    labkit is imported (this module is imported by ``labkit.servers``)."""
    if not hasattr(etcd3.watch, "six"):
        etcd3.watch.six = types.SimpleNamespace(itervalues=lambda mapping: iter(mapping.values()))


mend_python_etcd3()


def etcd_argv(etcd: str, name: str, data_dir: str, client_port: int, peer_port: int,
              initial_cluster: str, token: str, advertised_peer_port: int | None = None) -> list[str]:
    return [etcd, "--name", name, "--data-dir", data_dir,
            "--listen-client-urls", f"http://{HOST}:{client_port}",
            "--advertise-client-urls", f"http://{HOST}:{client_port}",
            "--listen-peer-urls", f"http://{HOST}:{peer_port}",
            "--initial-advertise-peer-urls", f"http://{HOST}:{advertised_peer_port or peer_port}",
            "--initial-cluster", initial_cluster, "--initial-cluster-state", "new",
            "--initial-cluster-token", token,
            "--heartbeat-interval", "50", "--election-timeout", "500",
            "--logger", "zap", "--log-level", "warn"]


def etcd_client(host: str, port: int, timeout: float = 10.0, **kwargs):
    """An etcd3 (python3-etcd3) client that survives a server restart: after one failed
    call python3-etcd3 0.13 refuses every call to that endpoint for 300 s ("Trying to use
    a failed node"); a lab restarts servers on purpose, so it retries at once. (Its other
    flaw, the missing ``six``, is mended for every client by ``mend_python_etcd3``.)"""
    client = etcd3.client(host=host, port=port, timeout=timeout, **kwargs)
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

    def status(self, timeout: float = 1.0) -> dict:
        """The member's own view (gRPC gateway /v3/maintenance/status): member id, leader id,
        raft term and index."""
        return _post_json(f"http://{self.endpoint}/v3/maintenance/status", {}, timeout)

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

    def metrics(self) -> str:
        """The Prometheus text of /metrics (etcd_server_*, etcd_debugging_* ...)."""
        with urllib.request.urlopen(f"http://{self.endpoint}/metrics", timeout=2.0) as reply:
            return reply.read().decode()


class EtcdService(Service):
    """The cluster as a whole: its endpoints, its leader, clients and etcdctl."""

    name = "etcd"
    nodes: list[EtcdNode]

    def __init__(self, nodes: list[EtcdNode], etcdctl: str | None = None):
        super().__init__(nodes)
        self.etcdctl_path = etcdctl

    @property
    def endpoints(self) -> list[str]:
        return [node.endpoint for node in self.nodes]

    def leader(self) -> EtcdNode:
        for node in self.nodes:
            if node.role == "leader":
                return node
        raise NoLeader("the etcd cluster has no leader right now",
                       "a majority of members must be running; use wait_for_leader(timeout) after a crash")

    def wait_for_leader(self, timeout: float = 15.0) -> EtcdNode:
        deadline = time.monotonic() + timeout
        while True:
            roles = {node.name: node.role for node in self.nodes}
            leaders = [n for n in self.nodes if roles[n.name] == "leader"]
            if len(leaders) == 1 and leaders[0].is_ready():
                return leaders[0]
            if time.monotonic() > deadline:
                raise NoLeader(f"no etcd leader within {timeout:.0f} s (roles now: {roles})",
                               "a majority of members must be running; restart stopped members")
            time.sleep(0.05)

    def client(self, node: EtcdNode | None = None, via: str | None = None, **kwargs):
        """An etcd3 client on one member (the first running one unless named).
        ``via="client-1"`` (a lab with network=True): through a link of that client's own."""
        node = node or self.first_running()
        host, port = self.endpoint_for(node, via).rsplit(":", 1)
        return etcd_client(host, int(port), **kwargs)

    def etcdctl(self, *args: str, timeout: float = 30.0, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        """Run etcdctl (API v3) against this cluster's endpoints."""
        try:
            command = [self.etcdctl_path or find_etcdctl()]
        except ServerNotFound:
            if not self.nodes or self.nodes[0].runner.backend != "docker":
                raise
            command = [sys.executable, "-m", "labkit.servers.docker_backend", "etcdctl"]  # the image's etcdctl
        argv = [*command, "--endpoints", ",".join(self.endpoints), *args]
        env = dict(os.environ, ETCDCTL_API="3")
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env,
                              check=check, **kwargs)

    def describe(self) -> dict:
        return {"endpoints": self.endpoints, "nodes": [n.describe() for n in self.nodes]}

    def is_ready(self) -> bool:
        roles = [n.role for n in self.nodes]
        return roles.count("leader") == 1 and all(n.is_ready() for n in self.nodes)
