"""Every lock recipe of the lab by name: the service it needs, a title, and a factory that
builds the lock on connections of its own (so a lock client process, a benchmark or a
panel can make any recipe from plain connection data).

What can fail: ``UnknownRecipe`` for a name that is not registered, ``ServiceMissing``
when the lab runs no server for the recipe's service, and the client libraries' errors
when a server does not answer.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

import redis
from kazoo.client import KazooClient

from labkit.errors import LabError
from labkit.locks.etcd3_reference import Etcd3ReferenceLock
from labkit.locks.errors import check_semaphore_size
from labkit.locks.etcd_election import EtcdElection, check_election_name
from labkit.locks.etcd_mutex import EtcdMutex
from labkit.locks.etcd_semaphore import EtcdSemaphore
from labkit.locks.etcd_session import EtcdSession
from labkit.locks.kazoo_reference import KazooReferenceLock
from labkit.locks.lease_election import LeaseDurations, LeaseElection
from labkit.locks.redis_lock import RedisLock
from labkit.locks.redis_peers import PotteryRedlock, PythonRedisLock, RedisPyLock
from labkit.locks.redlock import Redlock
from labkit.locks.zookeeper import ZooKeeperLock
from labkit.locks.zookeeper_semaphore import ZooKeeperSemaphore
from labkit.locks.zookeeper_election import ZooKeeperElection, check_election_path
from labkit.record.events import EventSink, ignore_events
from labkit.servers.services.etcd import etcd_client  # python3-etcd3, with the lab's fixes
from labkit.servers.secret import SECRET_FILE, load_secret, login_for

if TYPE_CHECKING:
    from labkit.servers.services.etcd import EtcdService
    from labkit.servers.lab import Lab
    from labkit.servers.services.redis import RedisService
    from labkit.servers.services.zookeeper import ZooKeeperService


class UnknownRecipe(LabError):
    """No recipe has that name (or none that this experiment supports)."""


class ServiceMissing(LabError):
    """The recipe needs a service the lab does not run."""


class NotASemaphore(LabError):
    """More than one holder asked of a recipe that admits one."""


@dataclass
class RecipeHandle:
    """A lock plus the session/connection it owns. ``session()`` says what a fault needs
    to reach it from outside (ZooKeeper session id and password, etcd lease id)."""

    lock: Any
    close: Callable[[], None]
    session: Callable[[], dict[str, Any]] = dict
    stop_keepalive: Callable[[], None] | None = None
    expired: Callable[[], bool] = lambda: False  # the session is gone for good: open a new one
    extra: dict[str, Any] = field(default_factory=dict)


def connection_of(service: ZooKeeperService | EtcdService | RedisService, via: str | None = None) -> str:
    """Plain connection data (no live client) for one service of a lab: ZooKeeper's hosts
    string, etcd's first running member (python-etcd3 talks to one endpoint), Redis's
    primary. ``via``: the client's own links through the lab's network (a lab started with
    network=True)."""
    if service.name == "zookeeper":
        return service.hosts_for(via)
    if service.name == "etcd":
        running = service.running()
        return service.endpoint_for(running[0] if running else service.nodes[0], via)
    if service.name == "redlock":
        return ",".join(service.endpoint_for(node, via) for node in service.nodes)
    return service.endpoint_for(service.primary, via)


def connections_of(lab: Lab, via: str | None = None) -> dict[str, str]:
    """``connection_of`` every service the lab runs, by service name; Redlock's independent
    primaries comma-separated."""
    services = (getattr(lab, name, None) for name in ("zookeeper", "etcd", "redis"))
    connections = {service.name: connection_of(service, via) for service in services if service is not None}
    if getattr(lab, "secret", None) is not None:
        # the path of the secret, not the secret: handed to a client process on its command
        # line, the connections show in ``ps``
        connections["secret_file"] = str(lab.run_dir / SECRET_FILE)
    redlock = getattr(lab, "redlock", None)
    if redlock is not None:
        connections["redlock"] = connection_of(redlock, via)
    return connections


def login(connections: dict[str, str], service: str) -> dict:
    """Client keyword arguments to log in to ``service`` ("zookeeper", "etcd", "redis",
    "redlock"): from the secret file the connections name, else from this user's private
    lab at that address (connections written by hand), else none."""
    server = {"redlock": "redis"}.get(service, service)   # Redlock's primaries are Redis servers
    if connections.get("secret_file"):
        secret = load_secret(connections["secret_file"])
        return getattr(secret, server) if secret else {}
    return login_for(connections.get(service, ""), server)


def _need(connections: dict[str, str], service: str, recipe: str) -> str:
    if service not in connections:
        raise ServiceMissing(f"recipe {recipe!r} needs {service}, but the lab runs none",
                          hint=f"start the lab with labkit.up({service}=...)")
    return connections[service]


# kazoo's default doubles its wait between reconnect rounds up to an hour: after a partition
# of a few seconds a client sleeps on past its session timeout while a server is back, and
# its session, and its place in the queue, expire. ZooKeeper's own Java client waits at most
# a second between attempts; so do these.
RECONNECT = {"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 1.0}


def _zookeeper(watch: str | None, reference: bool = False, semaphore: bool = False,
               election: bool = False) -> Callable[..., RecipeHandle]:
    def factory(connections, name, identifier, on_event, session_timeout, ttl, holders: int = 1) -> RecipeHandle:
        if election:
            check_election_path(name)    # before any connection: a bad name leaves nothing open
        zookeeper = KazooClient(hosts=_need(connections, "zookeeper", "zookeeper"), timeout=session_timeout,
                                connection_retry=dict(RECONNECT), **login(connections, "zookeeper"))
        zookeeper.start(timeout=max(10.0, session_timeout))
        if semaphore:
            lock = ZooKeeperSemaphore(zookeeper, name, holders, identifier=identifier, on_event=on_event)
        elif election:
            lock = ZooKeeperElection(zookeeper, name, identifier=identifier, on_event=on_event)
        elif reference:
            lock = KazooReferenceLock(zookeeper, name, identifier=identifier, on_event=on_event)
        else:
            lock = ZooKeeperLock(zookeeper, name, watch=watch, identifier=identifier, on_event=on_event)

        def session() -> dict[str, Any]:
            session_id, password = zookeeper.client_id or (None, b"")
            return {"session_id": session_id, "password": password.hex()}

        def close() -> None:
            zookeeper.stop()
            zookeeper.close()
        return RecipeHandle(lock, close, session, extra={"zookeeper": zookeeper})
    return factory


def etcd_client_for(connections: dict[str, str], recipe: str) -> Any:
    host, port = _need(connections, "etcd", recipe).rsplit(":", 1)
    return etcd_client(host, int(port), **login(connections, "etcd"))


def etcd_mutex_on(client: Any, name: str, identifier: str, on_event: EventSink = ignore_events,
                  ttl: float = 5.0) -> RecipeHandle:
    """An EtcdMutex on a session (a lease) of its own, over a ``client`` it does not own.
    A session is a lease, not a connection: Go's concurrency package runs many sessions
    over one client, and so can a process holding many contenders (one gRPC channel and
    one watch stream for all of them). ``close()`` revokes the lease, leaves the client open."""
    session = EtcdSession(client, ttl=max(1, math.ceil(ttl)))
    lock = EtcdMutex(session, name, identifier=identifier, on_event=on_event)
    return RecipeHandle(lock, session.close, lambda: {"lease_id": session.lease_id}, session.stop_keepalive,
                        expired=session.done.is_set, extra={"etcd": client})


def etcd_semaphore_on(client: Any, name: str, identifier: str, on_event: EventSink = ignore_events,
                      ttl: float = 5.0, holders: int = 1) -> RecipeHandle:
    """An EtcdSemaphore (``holders`` at once) on a session of its own, over ``client``."""
    session = EtcdSession(client, ttl=max(1, math.ceil(ttl)))
    try:
        lock = EtcdSemaphore(session, name, holders, identifier=identifier, on_event=on_event)
    except BaseException:
        session.close()
        raise
    return RecipeHandle(lock, session.close, lambda: {"lease_id": session.lease_id}, session.stop_keepalive,
                        expired=session.done.is_set, extra={"etcd": client})


def _etcd_mutex(connections, name, identifier, on_event, session_timeout, ttl, holders: int = 1,
                semaphore: bool = False) -> RecipeHandle:
    client = etcd_client_for(connections, "etcd")
    try:
        handle = (etcd_semaphore_on(client, name, identifier, on_event, ttl, holders) if semaphore
                  else etcd_mutex_on(client, name, identifier, on_event, ttl))
    except BaseException:
        client.close()
        raise
    close_session = handle.close

    def close() -> None:
        try:
            close_session()
        finally:
            client.close()
    handle.close = close
    return handle


def _etcd_election(connections, name, identifier, on_event, session_timeout, ttl) -> RecipeHandle:
    check_election_name(name)            # before any connection: a bad name leaves nothing open
    client = etcd_client_for(connections, "etcd-election")
    session = EtcdSession(client, ttl=max(1, math.ceil(ttl)))
    election = EtcdElection(session, name, identifier=identifier, on_event=on_event)

    def close() -> None:
        try:
            session.close()
        finally:
            client.close()
    return RecipeHandle(election, close, lambda: {"lease_id": session.lease_id}, session.stop_keepalive,
                        expired=session.done.is_set, extra={"etcd": client})


def lease_durations_for(ttl: float) -> LeaseDurations:
    """client-go's proportions (15 s, 10 s, 2 s) scaled to a lease of ``ttl`` seconds."""
    return LeaseDurations(ttl, ttl * 10 / 15, ttl * 2 / 15)


def _lease_election(connections, name, identifier, on_event, session_timeout, ttl) -> RecipeHandle:
    durations = lease_durations_for(ttl)  # checked before any connection
    client = etcd_client_for(connections, "lease-election")
    election = LeaseElection(client, name, identifier, durations, on_event=on_event)

    def close() -> None:
        try:
            election.crash()              # a caller that held has released already
        finally:
            client.close()
    return RecipeHandle(election, close, extra={"etcd": client})


def etcd3_lock_on(client: Any, name: str, identifier: str, on_event: EventSink = ignore_events,
                  ttl: float = 5.0) -> RecipeHandle:
    """python-etcd3's Lock over a ``client`` it does not own (each attempt grants its own
    lease, see etcd3_reference.py). ``close()`` leaves the client open; a lease granted and
    never released runs out by its TTL, as it does when a client of its own is closed."""
    lock = Etcd3ReferenceLock(client, name, ttl=max(1, math.ceil(ttl)), identifier=identifier, on_event=on_event)
    return RecipeHandle(lock, lambda: None, lambda: {"lease_id": getattr(lock.etcd3_lock.lease, "id", None)},
                        extra={"etcd": client})


def _etcd3_reference(connections, name, identifier, on_event, session_timeout, ttl) -> RecipeHandle:
    client = etcd_client_for(connections, "etcd3-lock")
    handle = etcd3_lock_on(client, name, identifier, on_event, ttl)
    handle.close = client.close
    return handle


def _redis(lock_class: type = RedisLock, recipe: str = "redis") -> Callable[..., RecipeHandle]:
    """A factory for a single-primary Redis lock of ``lock_class``: labkit's, or a library's
    (redis_peers.py), all built the same way on one client of their own."""
    def factory(connections, name, identifier, on_event, session_timeout, ttl) -> RecipeHandle:
        host, port = _need(connections, "redis", recipe).rsplit(":", 1)
        client = redis.Redis(host=host, port=int(port), **login(connections, "redis"))
        lock = lock_class(client, name, ttl_ms=int(ttl * 1000), identifier=identifier, on_event=on_event)
        return RecipeHandle(lock, client.close, extra={"redis": client})
    return factory


def _redlock(connections, name, identifier, on_event, session_timeout, ttl) -> RecipeHandle:
    endpoints = _need(connections, "redlock", "redlock").split(",")
    lock = Redlock.connect(endpoints, name, ttl_ms=int(ttl * 1000), identifier=identifier, on_event=on_event,
                           auth=login(connections, "redlock"))
    return RecipeHandle(lock, lock.close)


def _pottery(connections, name, identifier, on_event, session_timeout, ttl) -> RecipeHandle:
    endpoints = _need(connections, "redlock", "pottery").split(",")
    lock = PotteryRedlock.connect(endpoints, name, ttl_ms=int(ttl * 1000), identifier=identifier, on_event=on_event,
                                  auth=login(connections, "redlock"))
    return RecipeHandle(lock, lock.close)


@dataclass(frozen=True)
class Recipe:
    """One recipe of docs/RECIPES.md: the service it needs, a title for people, and the
    factory(connections, name, identifier, on_event, session_timeout, ttl) that opens its
    own connections and returns a RecipeHandle."""

    name: str
    service: str
    title: str
    factory: Callable[..., RecipeHandle]
    ttl_only: bool = False  # no session and no fencing token: the lock ends when its TTL runs out
    # the coordination primitive it builds: "mutex" (one holder), "semaphore" (up to
    # ``holders``), "election" (one holder, and one leader per epoch): what a torture's
    # verdict checks. A new primitive adds its judgment in labkit/torture/verdict.py under this name.
    primitive: str = "mutex"

    def __repr__(self) -> str:
        return f"<Recipe {self.name}: {self.primitive} on {self.service}>"

    @property
    def gives_tokens(self) -> bool:
        """A fencing token with every grant (a store can then fence its writes)."""
        return not self.ttl_only

    @property
    def lease(self) -> str:
        """"ttl" when the lock ends as a TTL runs out (Redis, Redlock, and python-etcd3's
        Lock, whose lease nothing refreshes), else "session" (a session or a lease its
        client keeps alive)."""
        return "ttl" if self.ttl_only or self.name == "etcd3-lock" else "session"


RECIPES: dict[str, Recipe] = {recipe.name: recipe for recipe in (
    Recipe("zookeeper", "zookeeper", "ZooKeeper, waiters watch their predecessor", _zookeeper("predecessor")),
    Recipe("zookeeper-parent", "zookeeper", "ZooKeeper, waiters watch the parent (herd)", _zookeeper("parent")),
    Recipe("kazoo", "zookeeper", "kazoo's Lock (reference)", _zookeeper(None, reference=True)),
    Recipe("etcd", "etcd", "etcd Mutex on a session lease (Go's concurrency)", _etcd_mutex),
    Recipe("zookeeper-semaphore", "zookeeper", "ZooKeeper counting semaphore (Curator's InterProcessSemaphoreV2 layout)",
           _zookeeper(None, semaphore=True), primitive="semaphore"),
    Recipe("etcd-semaphore", "etcd", "etcd counting semaphore: the first N create revisions hold",
           functools.partial(_etcd_mutex, semaphore=True), primitive="semaphore"),
    Recipe("etcd-election", "etcd", "etcd election (Go's concurrency.Election, etcdctl elect)", _etcd_election,
           primitive="election"),
    Recipe("zookeeper-election", "zookeeper", "ZooKeeper election in kazoo's Election queue",
           _zookeeper("predecessor", election=True), primitive="election"),
    Recipe("lease-election", "etcd", "Kubernetes-style lease election on an etcd key (clocks)", _lease_election,
           primitive="election"),
    Recipe("etcd3-lock", "etcd", "python-etcd3's Lock (reference, herd-prone)", _etcd3_reference),
    Recipe("redis", "redis", "Redis SET NX PX (a TTL, no fencing token)", _redis(), ttl_only=True),
    Recipe("redlock", "redlock", "Redlock: a majority of N independent Redis primaries", _redlock, ttl_only=True),
    # the libraries learners use (reference, redis_peers.py): same algorithms, same faults
    Recipe("redis-py", "redis", "redis-py's Lock (reference)", _redis(RedisPyLock, "redis-py"), ttl_only=True),
    Recipe("python-redis-lock", "redis", "python-redis-lock, auto-renewed (reference)",
           _redis(PythonRedisLock, "python-redis-lock"), ttl_only=True),
    Recipe("pottery", "redlock", "pottery's Redlock (reference)", _pottery, ttl_only=True),
)}


def recipe_named(recipe: Recipe | str, among: Iterable[str] | None = None) -> Recipe:
    """The Recipe for ``recipe``: a name of the registry (from a notebook, the command line
    or a client process's spec), or a Recipe, which passes as it is. The one place in
    labkit where a recipe's name becomes a recipe: everything past it carries the Recipe.
    ``among``: the names an experiment supports, when it does not support them all. Raises
    UnknownRecipe, in one line that lists the names to choose from, for any other name."""
    name = recipe.name if isinstance(recipe, Recipe) else recipe
    allowed = list(RECIPES if among is None else among)
    if name not in allowed or not (isinstance(recipe, Recipe) or name in RECIPES):
        raise UnknownRecipe(f"no recipe named {name!r}{'' if among is None else ' here'}; "
                            f"choose one of {', '.join(allowed)}")
    return recipe if isinstance(recipe, Recipe) else RECIPES[name]


def check_holders(recipe: Recipe | str, holders: int) -> int:
    """``holders`` if ``recipe`` takes that many: any whole number >= 1 for a semaphore,
    1 for every other primitive. Raises UnknownRecipe, InvalidSemaphoreSize or NotASemaphore."""
    recipe = recipe_named(recipe)
    if recipe.primitive == "semaphore":
        return check_semaphore_size(holders, recipe.name)
    if holders != 1:
        raise NotASemaphore(f"recipe {recipe.name!r} is a {recipe.primitive}: it admits one holder, not {holders!r}",
                            hint="choose zookeeper-semaphore or etcd-semaphore for N holders")
    return holders


def make_lock(recipe: Recipe | str, connections: dict[str, str], name: str, identifier: str,
              on_event: EventSink = ignore_events, session_timeout: float = 4.0, ttl: float = 5.0,
              holders: int = 1) -> RecipeHandle:
    """A lock of ``recipe`` (a Recipe or its name) on new connections; ``handle.close()``
    closes them. ``holders``: how many may hold a semaphore recipe at once. Raises
    UnknownRecipe for a name that is not registered, ServiceMissing when ``connections``
    has no server for the recipe's service, InvalidSemaphoreSize / NotASemaphore for
    ``holders`` the recipe cannot take."""
    recipe = recipe_named(recipe)
    check_holders(recipe, holders)
    extra = {"holders": holders} if recipe.primitive == "semaphore" else {}
    return recipe.factory(connections, name, identifier, on_event, session_timeout, ttl, **extra)


# lock_factory(...)(identifier, on_event) -> a RecipeHandle: one contender with its own connections
LockFactory = Callable[[str, EventSink], RecipeHandle]


def lock_factory(recipe: Recipe | str, connections: dict[str, str], name: str, session_timeout: float = 4.0,
                 ttl: float = 5.0, holders: int = 1) -> LockFactory:
    """Contenders for one lock: each call ``make(identifier, on_event)`` opens new
    connections (and, for etcd, a new session and lease) and returns its RecipeHandle.
    Raises UnknownRecipe at once for a name that is not registered (and what make_lock
    raises for ``holders``)."""
    recipe = recipe_named(recipe)
    check_holders(recipe, holders)

    def make(identifier: str, on_event: EventSink) -> RecipeHandle:
        return make_lock(recipe, connections, name, identifier, on_event, session_timeout, ttl, holders)
    return make
