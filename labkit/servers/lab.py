"""The Lab: start real clusters, find them again, stop them without a trace."""
from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
import uuid
import weakref
from pathlib import Path
from typing import Callable, TypeVar

from labkit.errors import NoLabRunning, UnknownNode, UnknownService
from labkit.servers import state as lab_state
from labkit.servers.client_logs import route_client_logs
from labkit.servers.live_labs import forget, stop_previous_labs, track
from labkit.servers.network.faults import NetworkFaults
from labkit.servers.network.links import Network
from labkit.servers.plan import LabPlan, NodePlan, Sizes, find_binaries, make_plan, services_of
from labkit.servers.ports import PortPool, check_port_free, on_other_ports_if_taken
from labkit.servers.runners.clock import build_shim
from labkit.servers.runners.docker_engine import choose_backend
from labkit.servers.runners.process import process_start_time
from labkit.servers.secret import LabSecret, create_secret, read_secret
from labkit.servers.services.etcd import EtcdService
from labkit.servers.services.node import Node, Service
from labkit.servers.services.postgres import PostgresService
from labkit.servers.services.redis import RedisService, RedlockService
from labkit.servers.services.sentinel import SentinelService
from labkit.servers.services.zookeeper import ZooKeeperService
from labkit.servers.start import start_nodes

S = TypeVar("S", bound=Service)


class Lab(NetworkFaults):
    """Handle on a running lab. A context manager: leaving the block stops what it started.

    ``lab.zookeeper``, ``lab.etcd``, ``lab.redis`` are None when that service was not asked for.

    Re-running a cell: a lab this process started outside a ``with`` block (the notebook
    style, ``lab = labkit.up()``) is stopped by the next ``labkit.up()`` of the same
    process, which says so in one line; the client groups and panels bound to it are
    closed with it. ``labkit.up(keep_previous=True)`` keeps it. A lab still inside its
    ``with`` block is never stopped that way (tests nest a lab of their own in a shared one).
    """

    def __init__(self, plan: LabPlan, owned: bool, network: Network | None = None):
        """The lab a plan describes (``up`` lays one out, ``attach`` reads one back), built
        in one step: its network (``network``: the proxy ``up`` launched; else the one the
        plan records), its secret (a private lab's, read from its folder), then its services
        (plan.services_of), given both, their runners recording every start in lab.json."""
        self._plan = plan
        self.owned = owned          # this process started it and will stop it
        self.owner_pid = os.getpid()  # a forked child must never stop its parent's lab at exit
        self._created = time.time()
        self._saving = threading.Lock()  # nodes start in parallel threads, and each start saves the state
        self._down = False
        self.started_in: float | None = None
        self.started_at: float | None = None  # wall clock, set once up() hands the lab out
        self._in_with_block = False
        self._on_replace: list[weakref.WeakMethod] = []
        if network is None and plan.network:  # a restart's new pid reaches lab.json, whoever restarts it
            network = Network.from_state(plan.run_dir, plan.network, on_start=self._record_start)
        self.network: Network | None = network  # labkit.up(network=True): every link through a proxy
        self.secret: LabSecret | None = read_secret(plan.run_dir)  # a private lab's login (servers/secret.py)
        self._services: dict[str, Service] = services_of(plan, network, self.secret, on_start=self._record_start)
        # a fault makes kazoo log every dropped connection as a WARNING, which a notebook shows in
        # red on stderr: send that chatter to a file (real errors still show)
        self.client_log: Path = route_client_logs()  # servers/client_logs.py

    @property
    def plan(self) -> LabPlan:
        """What this lab is made of, each runner as it is now (its pid or container once
        started): what its state file records and ``attach`` reads back."""
        return dataclasses.replace(self._plan, nodes=[NodePlan(**node.to_state()) for node in self.nodes],
                                   network=self.network.to_state() if self.network else None)

    id = property(lambda self: self._plan.id, doc="The lab's id, e.g. '142501-3fa2b1' (its folder's name).")
    run_dir = property(lambda self: self._plan.run_dir, doc="Its folder: data, logs, lab.json.")
    backend = property(lambda self: self._plan.backend, doc="'local' or 'docker'.")
    clocks = property(lambda self: self._plan.clocks, doc="Its ZooKeeper and Redis nodes run with the clock shim.")
    detached = property(lambda self: self._plan.detached, doc="Started by `labkit up`: outlives its command.")

    # -- services and nodes -------------------------------------------------------
    @property
    def services(self) -> list[Service]:
        """Its services, in the table's order (labkit/servers/services/kinds.py)."""
        return list(self._services.values())

    def service(self, name: str) -> Service:
        """The service named ``name`` (one registered in the table too: ``lab.service("toy")``).
        Raises UnknownService when this lab does not run it."""
        if name not in self._services:
            raise UnknownService(f"this lab runs no {name!r} (its services: {', '.join(self._services) or 'none'})",
                                 "start a lab that runs it (a registered service: labkit.up(extra={name: 1}))")
        return self._services[name]

    def _of(self, name: str, service_class: type[S]) -> S | None:
        """The service ``name`` of the table if this lab runs it (a ``service_class``), else None."""
        service = self._services.get(name)
        assert service is None or isinstance(service, service_class), service
        return service

    @property
    def zookeeper(self) -> ZooKeeperService | None:
        return self._of("zookeeper", ZooKeeperService)

    @property
    def etcd(self) -> EtcdService | None:
        return self._of("etcd", EtcdService)

    @property
    def redis(self) -> RedisService | None:
        return self._of("redis", RedisService)

    @property
    def redlock(self) -> RedlockService | None:  # independent primaries r1..rN
        return self._of("redlock", RedlockService)

    @property
    def sentinel(self) -> SentinelService | None:  # watches lab.redis
        return self._of("sentinel", SentinelService)

    @property
    def postgres(self) -> PostgresService | None:  # labkit.up(postgres=True): pg1
        return self._of("postgres", PostgresService)

    @property
    def nodes(self) -> list[Node]:
        return [node for service in self.services for node in service.nodes]

    def node(self, name: str):
        for node in self.nodes:
            if node.name == name:
                return node
        known = ", ".join(n.name for n in self.nodes) or "none"
        raise UnknownNode(f"no node named {name!r} in this lab (its nodes: {known})",
                          "use one of those names, e.g. lab.node('zk1')")

    @property
    def stopped(self) -> bool:
        """True once ``down()`` ran: its servers are gone."""
        return self._down

    def sizes(self) -> str:
        """Each service and its node count, e.g. "zookeeper=3, etcd=1"."""
        return ", ".join(f"{s.name}={len(s.nodes)}" for s in self.services)

    def on_replace(self, close: Callable[[], str | None]) -> None:
        """Have ``close`` (a bound method) run when a later ``labkit.up()`` of this process
        replaces this lab, before its servers stop; it returns what it closed, in a few
        words, or None if that was closed already. Held weakly: a forgotten object is skipped."""
        alive = [reference for reference in self._on_replace if reference() is not None]
        self._on_replace = alive + [weakref.WeakMethod(close)]

    @property
    def replaceable(self) -> bool:
        """True for a ready lab this process started outside a ``with`` block, still running:
        the next ``labkit.up()`` of this process stops it unless ``keep_previous=True``."""
        return (self.owned and not self.detached and not self._down and not self._in_with_block
                and self.started_at is not None and self.owner_pid == os.getpid())

    def close_bound(self) -> list[str]:
        """Run the ``on_replace`` callbacks, newest first (a panel before its clients);
        what they closed, in a few words each."""
        closed = []
        for reference in reversed(self._on_replace):
            close = reference()
            if close is None:
                continue
            try:
                what = close()
            except Exception as error:  # the lab is stopped anyway; say what could not be closed
                what = f"(closing failed: {type(error).__name__}: {error})"
            if what:
                closed.append(what)
        self._on_replace.clear()
        return closed

    @property
    def private(self) -> bool:
        """True when every server asks for the lab's secret (``labkit.up(private=True)``)."""
        return self.secret is not None

    def status(self, memory: bool = False) -> dict:
        """The shape printed by `labkit status --json`, read live from the servers; with
        ``memory``, each node's resident memory in MB ("memory_mb") too."""
        services = {service.name: service.describe() for service in self.services}
        if memory:
            for service in self.services:
                for node, row in zip(service.nodes, services[service.name]["nodes"]):
                    rss = node.memory_bytes()
                    row["memory_mb"] = None if rss is None else round(rss / 2**20, 1)
        return {"backend": self.backend, "id": self.id, "private": self.private, "services": services}

    # -- lifetime ---------------------------------------------------------------
    def down(self) -> None:
        """Stop every node and remove the run folder. Safe to call twice."""
        if self._down:
            return
        self._down = True
        if self.network is not None:
            self.network.stop()
        for node in self.nodes:
            try:
                node.runner.kill()
            except Exception:  # keep stopping the others; the reaper will retry the rest
                pass
        state = lab_state.read_state(self.run_dir)
        if state is not None:
            lab_state.stop_recorded_nodes(state, self.run_dir)
        lab_state.remove_lab(self.run_dir)
        forget(self)

    def __enter__(self) -> "Lab":
        self._in_with_block = True
        return self

    def __exit__(self, *exc) -> None:
        self._in_with_block = False
        if self.owned:
            self.down()

    def __repr__(self) -> str:
        return f"<Lab {self.id} {self.backend} {self.sizes()}{' down' if self._down else ''}>"

    def save_state(self) -> None:
        """Record the plan, with each runner as it is now, and who owns the lab (``lab.json``).
        A lab this process did not start (``attach``, or a forked child's copy) keeps the owner
        its file names: restarting a node from another process must not adopt the lab."""
        with self._saving:
            own = self.owned and self.owner_pid == os.getpid()
            recorded = {} if own else (lab_state.read_state(self.run_dir) or {})
            owner = recorded if "owner_pid" in recorded else {
                "owner_pid": None if self.detached else os.getpid(),
                "owner_start_time": None if self.detached else process_start_time(os.getpid())}
            lab_state.write_state(self.run_dir, {
                **self.plan.to_state(), "private": self.private,
                "owner_pid": owner["owner_pid"], "owner_start_time": owner["owner_start_time"],
                "created": recorded.get("created", self._created),
            })

    def _record_start(self) -> None:
        """A runner started a process (a node's first start or a restart): record its pid, so
        that `labkit down` and the reaper find it. Nothing to record once the lab is down or
        its folder removed (by `labkit down` in another process, say)."""
        if self._down or not self.run_dir.is_dir():
            return
        try:
            self.save_state()
        except FileNotFoundError:  # the folder went between the check and the write: the lab is gone
            pass


def up(zookeeper: int = 1, etcd: int = 1, redis: bool = True, replica: bool = False,
       backend: str | None = None, base_port: int | None = None, quiet: bool = False,
       detached: bool = False, timeout: float | None = None, clocks: bool = False, redlock: int = 0,
       sentinels: int = 0, network: bool = False, private: bool = True, keep_previous: bool = False,
       etcd_pre_vote: bool = False, postgres: bool = False, zookeeper_settings: dict | None = None,
       extra: dict[str, int] | None = None) -> Lab:
    """Start a lab of real servers and wait until every node answers.

    zookeeper / etcd: ensemble sizes (0, 1, 3 or 5). redis: a primary; replica: plus an
    asynchronous replica. redlock: that many independent Redis primaries r1..rN (3 to 9)
    as ``lab.redlock``. sentinels: 1, 3 or 5 Redis Sentinels watching the primary (needs
    replica=True), started once the replica is in sync. base_port: use consecutive ports
    from there instead of free ones chosen by the kernel. Prints a line per node as it
    becomes ready unless ``quiet``. clocks: start ZooKeeper and Redis (Redlock's instances
    too) with labkit's clock shim, so that ``node.clock.step(30)`` can step their wall
    clock while they run (labkit/servers/runners/clock.py; etcd cannot be stepped). network: every
    link between servers (and every client made with ``via=``) goes through the lab's fault
    proxy, so that ``lab.partition``, ``lab.delay``... can break it (labkit/servers/network/links.py);
    without it servers talk directly. private (the default): every server asks for the
    lab's secret, which only this user can read, and labkit's clients log in with it
    (labkit/servers/secret.py); private=False for a lesson that shows raw access, on a
    machine nobody else uses. etcd_pre_vote: start every etcd member with ``--pre-vote``
    (off by default, as in etcd 3.4, which Debian 12 ships; etcd 3.5 turns it on): a member
    cut off from the others then stops bumping its term, so it rejoins without forcing an
    election (labkit/lessons/pre_vote.py measures it). postgres: a PostgreSQL server pg1 as
    ``lab.postgres`` (labkit/servers/services/postgres.py). zookeeper_settings: zoo.cfg keys
    every ZooKeeper member gets instead of the lab's, e.g. ``{"tickTime": 2000, "syncLimit": 5}``
    (ZooKeeper's sample config) or ``{"4lw.commands.whitelist": "srvr,mntr,ruok"}``. extra: the node
    count of each service registered beside labkit's own (servers/services/kinds.py), by name.

    keep_previous: keep running the labs this process started before outside a ``with``
    block. Without it they are stopped first, with the client groups and panels bound to
    them, and one line says which (re-running the cell that starts a lab must not pile up
    labs of 100 to 300 MB each); a lab still inside its ``with`` block is always kept.

    Raises InvalidClusterSize, ServerNotFound, ClockUnavailable (before starting anything),
    PortBusy, NodeStartError (with the node's last log lines; everything already started is stopped).
    """
    say = (lambda *a, **k: None) if quiet else (lambda *a, **k: print(*a, **k, flush=True))
    sizes = Sizes(zookeeper, etcd, redis, replica, redlock, sentinels, postgres, dict(extra or {}))
    sizes.check()
    backend = choose_backend(backend, say)
    binaries = find_binaries(sizes, backend)
    if clocks:
        build_shim()  # no compiler: say so before anything starts
    if not keep_previous:
        stop_previous_labs()
    lab_state.reap_orphans(log=say)

    lab = on_other_ports_if_taken(lambda: _lay_out_and_start(
        sizes, backend, binaries, base_port, clocks, detached, private, network, etcd_pre_vote, zookeeper_settings,
        timeout, quiet, say), fixed=base_port is not None, say=say)
    lab.started_at = time.time()
    return lab


def _lay_out_and_start(sizes: Sizes, backend: str, binaries: dict, base_port: int | None, clocks: bool,
                       detached: bool, private: bool, network: bool, etcd_pre_vote: bool,
                       zookeeper_settings: dict | None, timeout: float | None, quiet: bool, say) -> Lab:
    """One try of ``up``: a new folder and plan, its ports checked, its servers started; on any
    error everything of it is stopped and its folder removed."""
    lab_id = time.strftime("%H%M%S-") + uuid.uuid4().hex[:6]
    plan = LabPlan(lab_id, lab_state.labs_dir() / lab_id, backend, clocks=clocks, detached=detached)
    plan.run_dir.mkdir(parents=True, mode=0o700)
    plan.run_dir.chmod(0o700)  # whatever the umask: data, logs and the secret are the owner's alone
    ports, links, lab = PortPool(base_port), None, None
    try:
        secret = create_secret(plan.run_dir) if private else None
        if network:  # its Python starts while the nodes are laid out and started
            links = Network.launch(plan.run_dir, ports)
        options = {"etcd_pre_vote": etcd_pre_vote, "zookeeper_settings": zookeeper_settings}
        lab = Lab(make_plan(plan, sizes, binaries, ports, secret, links, options), owned=True, network=links)
        for node in lab.nodes:
            for use, port in node.ports.items():
                check_port_free(port, f"{node.name} ({use})")
        lab.save_state()
        track(lab)
        began = time.monotonic()
        what = ", ".join(f"{s.name} x{len(s.nodes)}" for s in lab.services)
        say(f"starting {what} on 127.0.0.1 ({backend}) ...")
        start_nodes(lab, say, timeout, quiet)
        lab.started_in = time.monotonic() - began
        say(f"lab {lab.id} ready in {lab.started_in:.1f} s")
    except BaseException:
        if lab is not None:
            lab.down()
        else:  # laying it out failed: nothing of it started but the proxy
            if links is not None:
                links.stop()
            lab_state.remove_lab(plan.run_dir)
        raise
    return lab


def attach(lab_id: str | None = None) -> Lab:
    """The lab started by `labkit up` (or the one with this id), without starting anything.
    Leaving its context manager does not stop it: `labkit down` does."""
    lab_state.reap_orphans(log=None)
    if lab_id is None:
        try:
            lab_id = lab_state.current_file().read_text().strip()
        except OSError:
            raise NoLabRunning("no lab started by `labkit up` is running",
                               "run `labkit up` in a terminal, or start one here with labkit.up()") from None
    run_dir = lab_state.labs_dir() / lab_id
    data = lab_state.read_state(run_dir)
    if data is None:
        raise NoLabRunning(f"lab {lab_id} is not running (no state in {run_dir})", "run `labkit up`")
    return Lab(LabPlan.from_state(data, run_dir), owned=False)


def attach_or_up(**options) -> Lab:
    """Attach to the `labkit up` lab if it has at least the requested services, else start
    a lab owned by this process. Notebooks that break servers should call ``up`` instead."""
    try:
        lab = attach()
    except NoLabRunning:
        return up(**options)
    wanted = Sizes(**{key: value for key, value in options.items() if key in Sizes.__dataclass_fields__})
    if ((options.get("clocks") and not lab.clocks) or (options.get("private", True) and not lab.private)
            or not lab.plan.holds(wanted) or any(node.state != "running" for node in lab.nodes)):
        return up(**options)
    return lab


if sys.platform == "win32":  # pragma: no cover
    raise ImportError("labkit's local backend needs a POSIX system (Linux or macOS); on Windows use WSL or Docker")
