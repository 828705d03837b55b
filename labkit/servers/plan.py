"""What a lab is made of, decided before anything starts: its plan.

A ``LabPlan`` says which services a lab runs and, for every node, its ports, data folder
and runner (the command line a local process or a container runs, with its config file
written beside it), with its peers reached through the lab's network proxies when it has
one. ``make_plan`` lays one out from the sizes asked for; ``services_of`` builds the
cluster handles from a plan. Both ways into a lab go through the same plan:
``labkit.servers.lab.up`` makes it, builds the lab from it and records it in the lab's
state file (``LabPlan.to_state``); ``attach`` reads it back (``LabPlan.from_state``) and
builds the lab the same way. There is no second mapping to keep in step.

Every step reads the table of services (labkit/servers/services/kinds.py) and names none:
each service's module says how it is sized, which binaries it needs and how it lays its
nodes out (its ``ServiceKind``).

Nothing here starts anything. What can fail: ``InvalidClusterSize`` for a size labkit
refuses (even ensembles, Sentinel without a replica), ``ServerNotFound`` for a missing binary,
``NodeStartError`` when PostgreSQL's template cannot be made (initdb runs here, once).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from labkit.errors import InvalidClusterSize
from labkit.servers.network.links import Network
from labkit.servers.ports import PortPool
from labkit.servers.runners.docker_container import image_binaries
from labkit.servers.secret import LabSecret
from labkit.servers.services.kinds import kinds
from labkit.servers.services.layout import Layout, NodePlan
from labkit.servers.services.node import Service

__all__ = ["LabPlan", "NodePlan", "Sizes", "find_binaries", "make_plan", "services_of"]


@dataclass(frozen=True)
class Sizes:
    """The services asked for: ensemble sizes (0, 1, 3 or 5), a Redis primary and its
    replica, Redlock's independent primaries (3 to 9), sentinels (1, 3 or 5), a PostgreSQL
    server; ``extra``: the node count of each service registered beside labkit's own
    (services/kinds.py), by name."""

    zookeeper: int = 1
    etcd: int = 1
    redis: bool = True
    replica: bool = False
    redlock: int = 0
    sentinels: int = 0
    postgres: bool = False
    extra: dict[str, int] = field(default_factory=dict)

    def check(self) -> None:
        """Raise InvalidClusterSize for a size labkit refuses, before anything starts."""
        known = {kind.name: kind for kind in kinds()}
        for name, count in self.extra.items():
            if name not in known:
                raise InvalidClusterSize(f"extra={{{name!r}: {count}}}: no service is named {name!r}",
                                         f"the services: {', '.join(known)}")
            if known[name].count is not None:
                raise InvalidClusterSize(f"extra={{{name!r}: {count}}}: {name} is sized by an argument of its own",
                                         "see labkit.up's arguments")
            if not isinstance(count, int) or count < 0:
                raise InvalidClusterSize(f"extra={{{name!r}: {count!r}}}: a node count is a whole number",
                                         f"use extra={{{name!r}: 1}}")
        for kind in kinds():
            kind.check(self)


@dataclass
class LabPlan:
    """A whole lab. Its state file is ``to_state()`` plus who owns the lab."""

    id: str
    run_dir: Path
    backend: str
    clocks: bool = False      # ZooKeeper and Redis nodes preload the clock shim
    detached: bool = False    # started by `labkit up`: outlives its command
    nodes: list[NodePlan] = field(default_factory=list)
    settings: dict[str, dict] = field(default_factory=dict)  # by service: what its handle is built with
    network: dict | None = None   # ``Network.to_state()`` for a lab with network=True

    def of_kind(self, kind: str) -> list[NodePlan]:
        return [node for node in self.nodes if node.kind == kind]

    def holds(self, sizes: Sizes) -> bool:
        """At least the nodes ``sizes`` asks for, of every kind."""
        return all(len(self.of_kind(kind.name)) >= kind.wanted(sizes) for kind in kinds())

    def to_state(self) -> dict:
        state = dataclasses.asdict(self)
        state["run_dir"] = str(self.run_dir)
        return state

    @classmethod
    def from_state(cls, data: dict, run_dir: Path) -> "LabPlan":
        """The plan a state file records (older files lack the settings)."""
        return cls(data["id"], Path(run_dir), data["backend"], data.get("clocks", False), data.get("detached", False),
                   [NodePlan(**{key.name: node.get(key.name) for key in dataclasses.fields(NodePlan)
                                if key.name in node}) for node in data["nodes"]],
                   data.get("settings") or {}, data.get("network"))


def services_of(plan: LabPlan, network: Network | None = None, secret: LabSecret | None = None,
                on_start: Callable[[], None] | None = None) -> dict[str, Service]:
    """The cluster handles of a plan, by service in the table's order, built with the lab's
    network and secret (their clients and probes log in with it), each node's runner calling
    ``on_start`` after every start; a service the plan has no node of is left out."""
    services: dict[str, Service] = {}
    for kind in kinds():
        nodes = [kind.node(node, secret, on_start) for node in plan.of_kind(kind.name)]
        if nodes:
            services[kind.name] = kind.build(nodes, plan.settings.get(kind.name, {}), network, secret)
    return services


def find_binaries(sizes: Sizes, backend: str) -> dict:
    """The binaries of every service ``sizes`` asks for: found on this machine (raises
    ServerNotFound), or their paths in the server image (built first if needed)."""
    wanted = [kind for kind in kinds() if kind.wanted(sizes)]
    if backend == "docker":
        names = {name for kind in wanted for name in kind.in_image}
        image = image_binaries() if names else {}
        return {name: image[name] for name in names}
    finders = {name: find for kind in wanted for name, find in kind.finders.items()}   # each binary once
    return {name: find() for name, find in finders.items()}


def make_plan(plan: LabPlan, sizes: Sizes, binaries: dict, ports: PortPool, secret: LabSecret | None = None,
              network: Network | None = None, options: dict | None = None) -> LabPlan:
    """Fill ``plan`` (its id, folder, backend and clocks set) with the nodes of ``sizes``,
    service by service in the table's order (each service's ``lay_out``; ``options`` are
    what they read beyond their size): each node takes its ports from ``ports`` as it is laid
    out, gets its folder and config file in the run folder, and its links through ``network``
    when the lab has one."""
    layout = Layout(plan.id, plan.run_dir, plan.backend, plan.clocks, binaries, ports, secret, network, sizes,
                    dict(options or {}), plan.nodes, plan.settings)
    for kind in kinds():
        count = kind.wanted(sizes)
        if count:
            kind.lay_out(layout, count)
    return plan
