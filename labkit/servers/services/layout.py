"""Laying a lab's nodes out before anything starts: what the layout of every service shares.

Each service's module lays out its own nodes (``lay_out_zookeeper`` in zookeeper.py, and so on:
the ``lay_out`` of its ``ServiceKind``, kind.py) on one ``Layout`` per lab: the lab's folder,
backend, binaries, port pool, secret and network, with ``add`` (a node and its runner), ``via``
(the port one node dials to reach another: a proxy of the network, when the lab has one) and
``folder``. What they lay out is the plan's (``labkit.servers.plan.make_plan`` hands its lists
in): its ``nodes``, and ``settings``, what each service's handle is built with beyond its nodes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.servers.network.links import Network
from labkit.servers.ports import PortPool
from labkit.servers.runners.clock import prepare_clock
from labkit.servers.runners.docker_container import DockerContainer
from labkit.servers.runners.process import LocalProcess
from labkit.servers.secret import LabSecret
from labkit.servers.services.node import Node


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


@dataclass
class Layout:
    """Lays out the nodes of one lab, service by service (each service's ``lay_out``)."""

    lab_id: str
    run_dir: Path
    backend: str
    clocks: bool                # ZooKeeper and Redis nodes preload the clock shim
    binaries: dict              # the servers' paths (labkit.servers.plan.find_binaries)
    ports: PortPool
    secret: LabSecret | None
    network: Network | None
    sizes: Any                  # the labkit.servers.plan.Sizes asked for
    options: dict               # what a service reads beyond its size: "zookeeper_settings", "etcd_pre_vote"
    nodes: list[NodePlan]       # the plan's: every node laid out so far, in lab order
    settings: dict[str, dict]   # the plan's: what each service's handle is built with, by service

    def add(self, node_class: type[Node], name: str, ports: dict[str, int], folder: Path, argv: list[str],
            cwd: Path | None = None, settings: dict | None = None, mounts: dict | None = None) -> None:
        """A node whose server runs ``argv``: a process or a container (which also mounts
        ``mounts``, {host path: path inside}); with the lab's clocks on, it preloads the clock
        shim (unless that kind of server cannot be stepped: etcd). The network, if any, learns its name."""
        log_path, cwd = str(self.run_dir / f"{name}.log"), str(cwd or folder)
        env = prepare_clock(self.run_dir, name) if self.clocks and node_class.clock_problem is None else {}
        if self.backend == "docker":
            runner = DockerContainer(argv, log_path, cwd, lab_id=self.lab_id, name=name, env=env, mounts=mounts)
        else:
            runner = LocalProcess(argv, log_path, cwd, env)
        self.nodes.append(NodePlan(name, node_class.kind, ports["client"], ports, str(folder), runner.to_state(),
                                   dict(settings or {})))
        if self.network is not None:
            self.network.nodes.append(name)

    def via(self, src: str, dst: str, port: int, kind: str = "tcp", **extra) -> int:
        """The port ``src`` dials to reach ``dst``'s ``port``: the proxy of link src->dst when
        the lab has a network, else the port itself."""
        return port if self.network is None else self.network.route(src, dst, port, kind, **extra)

    def folder(self, name: str) -> Path:
        folder = self.run_dir / name
        folder.mkdir()
        return folder

    def of_kind(self, kind: str) -> list[NodePlan]:
        """The nodes of ``kind`` laid out so far (a service laid out earlier in the table)."""
        return [node for node in self.nodes if node.kind == kind]

    def settings_of(self, service: str) -> dict:
        """What ``service``'s handle will be built with: its ``__init__``'s keyword arguments."""
        return self.settings.setdefault(service, {})
