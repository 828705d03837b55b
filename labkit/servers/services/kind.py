"""A service described once: a ``ServiceKind``.

Each service's module declares its own (``ZOOKEEPER`` in zookeeper.py, ``REDIS`` and ``REDLOCK``
in redis.py, ...): its name (``lab.<name>``, its nodes' kind, its key in the state file), its
node and service classes, how many nodes a ``Sizes`` asks of it and which sizes it refuses, the
binaries it needs on each backend, and how it lays its nodes out (layout.py). kinds.py lists them
in the lab's order; the plan and the Lab read that table and nothing else, so a new service is
one module and one line there (a test's own service: ``kinds.register_kind``, nothing else).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from labkit.errors import InvalidClusterSize
from labkit.servers.network.links import Network
from labkit.servers.runners.docker_container import DockerContainer
from labkit.servers.runners.process import LocalProcess
from labkit.servers.secret import LabSecret
from labkit.servers.services.layout import Layout, NodePlan
from labkit.servers.services.node import Node, Service

ENSEMBLE_SIZES = (0, 1, 3, 5)


def no_check(sizes: Any) -> None:
    """A service that refuses no size."""


@dataclass(frozen=True, eq=False)
class ServiceKind:
    """One service of the table (kinds.py). ``count`` and ``check`` are given the
    ``labkit.servers.plan.Sizes`` asked for; without a ``count``, the service's size is
    ``sizes.extra[name]`` (``labkit.up(extra={"toy": 1})``)."""

    name: str
    node_class: type[Node]
    service_class: type[Service]    # built as service_class(nodes, network, secret, **its settings)
    lay_out: Callable[[Layout, int], None]     # lays out that many nodes
    count: Callable[[Any], int] | None = None  # how many nodes the sizes ask for
    check: Callable[[Any], None] = no_check    # raises InvalidClusterSize for a size refused
    finders: Mapping[str, Callable[[], object]] = field(default_factory=dict)  # local backend: binary -> finder
    in_image: tuple[str, ...] = ()             # docker backend: the binaries it takes from the server image

    def wanted(self, sizes: Any) -> int:
        """How many nodes of this service ``sizes`` asks for."""
        return self.count(sizes) if self.count is not None else sizes.extra.get(self.name, 0)

    def node(self, plan: NodePlan, secret: LabSecret | None, on_start: Callable[[], None] | None) -> Node:
        """The node a plan describes; its runner calls ``on_start`` after every start."""
        runner_class = DockerContainer if plan.runner["backend"] == "docker" else LocalProcess
        return self.node_class(plan.name, plan.port, runner_class.from_state(plan.runner, on_start),
                               plan.data_dir, plan.ports, plan.settings, secret)

    def build(self, nodes: list[Node], settings: dict, network: Network | None,
              secret: LabSecret | None) -> Service:
        """The handle on these nodes (``lab.<name>``)."""
        return self.service_class(nodes, network, secret, **settings)


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
