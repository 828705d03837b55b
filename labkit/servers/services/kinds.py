"""The table of services: every ``ServiceKind`` (kind.py) a lab can run, in the lab's order.

That order is the order in which a lab lays its services out (Sentinel after Redis, whose
primary it watches), lists them (``lab.services``, ``lab.sizes()``, its state file) and checks
their sizes. ``labkit.servers.plan`` and ``labkit.servers.lab`` read this table and name no
service themselves. ``register_kind`` adds a service of one's own at the end (a test's toy, say).
"""
from __future__ import annotations

from labkit.servers.services.etcd import ETCD
from labkit.servers.services.kind import ServiceKind
from labkit.servers.services.postgres import POSTGRES
from labkit.servers.services.redis import REDIS, REDLOCK
from labkit.servers.services.sentinel import SENTINEL
from labkit.servers.services.zookeeper import ZOOKEEPER

BUILT_IN: tuple[ServiceKind, ...] = (ZOOKEEPER, ETCD, REDIS, REDLOCK, SENTINEL, POSTGRES)
_table: list[ServiceKind] = list(BUILT_IN)


def kinds() -> tuple[ServiceKind, ...]:
    """Every service of the table, in the lab's order."""
    return tuple(_table)


def kind_named(name: str) -> ServiceKind | None:
    return next((kind for kind in _table if kind.name == name), None)


def register_kind(kind: ServiceKind) -> ServiceKind:
    """Add ``kind`` at the end of the table; labs started from now on can run it
    (``labkit.up(extra={kind.name: 1})``, then ``lab.service(kind.name)``)."""
    if kind_named(kind.name) is not None:
        raise ValueError(f"a service named {kind.name!r} is in the table already")
    _table.append(kind)
    return kind


def unregister_kind(name: str) -> None:
    """Take a registered service out of the table again (a built-in one stays)."""
    kind = kind_named(name)
    if kind in BUILT_IN:
        raise ValueError(f"{name!r} is one of labkit's own services")
    if kind is not None:
        _table.remove(kind)
