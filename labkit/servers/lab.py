"""The Lab: start real clusters, find them again, stop them without a trace."""
from __future__ import annotations

import atexit
import os
import sys
import threading
import time
import uuid
import weakref
from pathlib import Path
from typing import Callable

from labkit.errors import DockerUnavailable, InvalidClusterSize, LabError, NoLabRunning, UnknownNode
from labkit.servers import state as lab_state
from labkit.servers.client_logs import route_client_logs
from labkit.servers.runners.clock import build_shim
from labkit.servers.runners.docker_container import DockerContainer
from labkit.servers.runners.docker_engine import engine_problem
from labkit.servers.services.etcd import EtcdService
from labkit.servers.ports import check_port_free, free_ports
from labkit.servers.plan import (NODE_CLASSES, add_postgres, build_nodes, build_redlock_and_sentinels,
                                   check_ensemble_size, check_redis_extras, find_binaries, sentinel_aliases)
from labkit.servers.network.links import Network, not_enabled
from labkit.servers.services.postgres import PostgresService
from labkit.servers.runners.process import LocalProcess, process_start_time
from labkit.servers.services.redis import RedisService, RedlockService
from labkit.servers.secret import LabSecret, create_secret, read_secret
from labkit.servers.services.sentinel import SentinelService
from labkit.servers.services.zookeeper import ZooKeeperService

class Lab:
    """Handle on a running lab. A context manager: leaving the block stops what it started.

    ``lab.zookeeper``, ``lab.etcd``, ``lab.redis`` are None when that service was not asked for.

    Re-running a cell: a lab this process started outside a ``with`` block (the notebook
    style, ``lab = labkit.up()``) is stopped by the next ``labkit.up()`` of the same
    process, which says so in one line; the client groups and panels bound to it are
    closed with it. ``labkit.up(keep_previous=True)`` keeps it. A lab still inside its
    ``with`` block is never stopped that way (tests nest a lab of their own in a shared one).
    """

    def __init__(self, lab_id: str, run_dir: Path, backend: str, owned: bool, detached: bool,
                 clocks: bool = False):
        self.id = lab_id
        self.run_dir = run_dir
        self.backend = backend
        self.owned = owned          # this process started it and will stop it
        self.detached = detached    # started by `labkit up`: outlives its command
        self.clocks = clocks        # its ZooKeeper and Redis nodes run with the clock shim
        self.zookeeper: ZooKeeperService | None = None
        self.etcd: EtcdService | None = None
        self.redis: RedisService | None = None
        self.redlock: RedlockService | None = None    # independent primaries r1..rN
        self.sentinel: SentinelService | None = None  # also reachable as lab.redis.sentinels
        self.postgres: PostgresService | None = None  # labkit.up(postgres=True): pg1
        self.started_in: float | None = None
        self.network: Network | None = None  # labkit.up(network=True): every link through a proxy
        self.secret: LabSecret | None = None  # a private lab's login (labkit/servers/secret.py)
        self.owner_pid = os.getpid()  # a forked child must never stop its parent's lab at exit
        self.started_at: float | None = None  # wall clock, set once up() hands the lab out
        self.client_log: Path | None = None  # where kazoo's connection chatter goes (servers/client_logs.py)
        self._down = False
        self._in_with_block = False
        self._on_replace: list[weakref.WeakMethod] = []

    # -- nodes ------------------------------------------------------------------
    @property
    def services(self) -> list:
        every = (self.zookeeper, self.etcd, self.redis, self.redlock, self.sentinel, self.postgres)
        return [service for service in every if service is not None]

    @property
    def nodes(self) -> list:
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

    def share_secret(self) -> None:
        """Give the lab's secret to every service and node, so that their clients and probes log in."""
        for holder in [*self.services, *self.nodes]:
            holder.secret = self.secret

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
        _LIVE_LABS.discard(self)

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
        lab_state.write_state(self.run_dir, {
            "id": self.id, "backend": self.backend, "detached": self.detached, "clocks": self.clocks,
            "private": self.private,
            "owner_pid": None if self.detached else os.getpid(),
            "owner_start_time": None if self.detached else process_start_time(os.getpid()),
            "created": time.time(),
            "nodes": [node.to_state() for node in self.nodes],
            "network": self.network.to_state() if self.network else None,
        })

    # -- network faults (labkit.up(network=True); see labkit.servers.network.links) -------
    @property
    def net(self) -> Network:
        if self.network is None:
            raise not_enabled()
        return self.network

    def partition(self, *sides, history=None) -> dict:
        return self.net.partition(*sides, history=history)

    def isolate(self, name: str, history=None, **detail) -> dict:
        return self.net.isolate(name, history=history, **detail)

    def cut(self, a: str, b: str, both_ways: bool = True, history=None) -> dict:
        return self.net.cut(a, b, both_ways=both_ways, history=history)

    def delay(self, ms: float, jitter: float = 0, links=None, history=None) -> dict:
        return self.net.delay(ms, jitter=jitter, links=links, history=history)

    def loss(self, fraction: float, links=None, history=None) -> dict:
        return self.net.loss(fraction, links=links, history=history)

    def heal(self, history=None) -> dict:
        return self.net.heal(history=history)

    def network_status(self) -> dict:
        return self.net.status()


_LIVE_LABS: set[Lab] = set()
_REPLACING = threading.Lock()  # two threads calling up() at once stop a previous lab once


def this_process() -> str:
    """"this kernel" in a running Jupyter kernel, else "this process" (for messages)."""
    kernel_app = sys.modules.get("ipykernel.kernelapp")  # imported is not enough: pytest may import it
    in_kernel = kernel_app is not None and kernel_app.IPKernelApp.initialized()
    return "this kernel" if in_kernel else "this process"


def stop_previous_labs() -> list[Lab]:
    """Stop every lab this process started outside a ``with`` block (``Lab.replaceable``),
    and what is bound to it, and say so in one line. Returns the labs stopped."""
    with _REPLACING:
        previous = sorted((lab for lab in list(_LIVE_LABS) if lab.replaceable), key=lambda lab: lab.started_at)
        closed = []
        for lab in previous:
            closed += lab.close_bound()
            lab.down()
    if previous:
        who = this_process()
        which = "the lab" if len(previous) == 1 else f"the {len(previous)} labs"
        when = " and ".join(f"{time.strftime('%H:%M:%S', time.localtime(lab.started_at))} ({lab.sizes()})"
                            for lab in previous)
        also = f", with {', '.join(closed)}," if closed else ""
        print(f"stopped {which} {who} started at {when}{also} before starting a new one "
              f"(labkit.up(keep_previous=True) keeps {'it' if len(previous) == 1 else 'them'})", flush=True)
    return previous


@atexit.register
def _stop_owned_labs() -> None:
    for lab in list(_LIVE_LABS):
        if lab.owned and not lab.detached and lab.owner_pid == os.getpid():
            lab.down()


def choose_backend(backend: str | None, say=print) -> str:
    backend = (backend or os.environ.get("LABKIT_BACKEND") or "auto").lower()
    if backend not in ("auto", "local", "docker"):
        raise LabError(f"unknown backend {backend!r}", "use LABKIT_BACKEND=auto, local or docker")
    if backend == "auto":
        problem = engine_problem(timeout=1.5)
        if problem is None:
            say("backend: docker (a Docker engine answers)")
            return "docker"
        say(f"backend: local processes ({problem})")
        return "local"
    if backend == "docker":
        problem = engine_problem()
        if problem:
            raise DockerUnavailable(f"LABKIT_BACKEND=docker but {problem}",
                                    "start Docker (Debian: dockerd &, macOS: Docker Desktop) or use LABKIT_BACKEND=local")
    return backend


def up(zookeeper: int = 1, etcd: int = 1, redis: bool = True, replica: bool = False,
       backend: str | None = None, base_port: int | None = None, quiet: bool = False,
       detached: bool = False, timeout: float | None = None, clocks: bool = False, redlock: int = 0,
       sentinels: int = 0, network: bool = False, private: bool = True, keep_previous: bool = False,
       etcd_pre_vote: bool = False, postgres: bool = False) -> Lab:
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
    ``lab.postgres`` (local backend only; labkit/servers/services/postgres.py).

    keep_previous: keep running the labs this process started before outside a ``with``
    block. Without it they are stopped first, with the client groups and panels bound to
    them, and one line says which (re-running the cell that starts a lab must not pile up
    labs of 100 to 300 MB each); a lab still inside its ``with`` block is always kept.

    Raises InvalidClusterSize, ServerNotFound, ClockUnavailable (before starting anything),
    PortBusy, NodeStartError (with the node's last log lines; everything already started is stopped).
    """
    say = (lambda *a, **k: None) if quiet else (lambda *a, **k: print(*a, **k, flush=True))
    check_ensemble_size("zookeeper", zookeeper)
    check_ensemble_size("etcd", etcd)
    if replica and not redis:
        raise InvalidClusterSize("replica=True needs redis=True", "a replica replicates a primary")
    check_redis_extras(redlock, sentinels, replica)
    backend = choose_backend(backend, say)
    binaries = find_binaries(zookeeper, etcd, redis or bool(redlock), backend, postgres)
    if clocks:
        build_shim()  # no compiler: say so before anything starts
    if not keep_previous:
        stop_previous_labs()
    lab_state.reap_orphans(log=say)

    redis_count = (1 + int(replica)) if redis else 0
    port_count = 3 * zookeeper + 2 * etcd + redis_count + redlock + sentinels + int(postgres)
    if base_port is not None:
        ports = list(range(base_port, base_port + port_count))
    else:
        ports = free_ports(port_count)
    lab_id = time.strftime("%H%M%S-") + uuid.uuid4().hex[:6]
    run_dir = lab_state.labs_dir() / lab_id
    run_dir.mkdir(parents=True, mode=0o700)
    run_dir.chmod(0o700)  # whatever the umask: data, logs and the secret are the owner's alone
    lab = Lab(lab_id, run_dir, backend, owned=True, detached=detached, clocks=clocks)
    # a fault makes kazoo log every dropped connection as a WARNING, which a notebook shows in
    # red on stderr: send that chatter to a file (real errors still show)
    lab.client_log = route_client_logs()
    try:
        if private:
            lab.secret = create_secret(run_dir)
        if network:  # its Python starts while the nodes are laid out and started
            lab.network = Network.launch(run_dir, avoid=ports)
        build_nodes(lab, binaries, ports, zookeeper, etcd, redis_count, sentinels, etcd_pre_vote)
        # the last ports (build_nodes takes the first): Redlock's, the sentinels', then PostgreSQL's
        extra_ports = ports[len(ports) - redlock - sentinels - int(postgres):]
        build_redlock_and_sentinels(lab, binaries, extra_ports, redlock, sentinels)
        if postgres:
            add_postgres(lab, binaries, ports[-1])
        _join_network(lab)
        lab.share_secret()
        for node, port_use in _port_uses(lab):
            check_port_free(port_use[0], f"{node.name} ({port_use[1]})")
        lab.save_state()
        _LIVE_LABS.add(lab)
        began = time.monotonic()
        what = ", ".join(f"{s.name} x{len(s.nodes)}" for s in lab.services)
        say(f"starting {what} on 127.0.0.1 ({backend}) ...")
        _in_parallel(_servers(lab), lambda node: node.start())
        if lab.network is not None:
            lab.network.connect()
        lab.save_state()
        _wait_all_ready(lab, say, timeout)
        if lab.secret and lab.etcd:
            lab.etcd.enable_auth(lab.secret)
        if lab.sentinel:
            _start_sentinels(lab, say, timeout)
        lab.started_in = time.monotonic() - began
        say(f"lab {lab.id} ready in {lab.started_in:.1f} s")
    except BaseException:
        lab.down()
        raise
    lab.started_at = time.time()
    return lab


def _in_parallel(nodes: list, action) -> None:
    """Run ``action(node)`` for every node at once (a container takes ~0.3 s to create, a
    JVM ~1 s to answer); re-raise the first error once all are done."""
    errors: list[BaseException] = []

    def run(node):
        try:
            action(node)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(node,), daemon=True) for node in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _join_network(lab: Lab) -> None:
    """Let every service reach the network (for ``client(via=...)``) and tell the network
    the lab's node names."""
    for service in lab.services:
        service.network = lab.network
    if lab.network is not None:
        lab.network.nodes = [node.name for node in lab.nodes]


def _servers(lab: Lab) -> list:
    """Every node but the sentinels, which start last (see _start_sentinels)."""
    return [node for node in lab.nodes if node.kind != "sentinel"]


def _start_sentinels(lab: Lab, say, timeout: float | None) -> None:
    """Sentinels start only once the primary answers and the replica is in sync: a sentinel
    that found the primary silent for a moment could start a failover with nothing to promote."""
    _in_parallel(lab.sentinel.nodes, lambda node: node.start())
    lab.save_state()
    _in_parallel(lab.sentinel.nodes, lambda node: node.wait_ready(timeout))
    seconds = lab.sentinel.wait_until_watching(timeout or 30)
    say(f"  {len(lab.sentinel.nodes)} sentinels watch {lab.redis.primary.name} (agreed in {seconds:.1f} s)")


def _port_uses(lab: Lab):
    for node in lab.nodes:
        for use, port in node.ports.items():
            yield node, (port, use)


def _wait_all_ready(lab: Lab, say, timeout: float | None) -> None:
    """Probe every node in parallel; print a line per node as it answers."""
    printing = threading.Lock()  # one whole line per node, even when two answer at once

    def wait(node):
        seconds = node.wait_ready(timeout)
        with printing:
            say(f"  {node.name:<7} {node.endpoint:<16} ready in {seconds:4.1f} s")

    _in_parallel(_servers(lab), wait)
    if lab.zookeeper and len(lab.zookeeper.nodes) > 1:
        leader = lab.zookeeper.wait_for_leader(timeout or 30)
        say(f"  zookeeper leader: {leader.name}")
    if lab.etcd and len(lab.etcd.nodes) > 1:
        leader = lab.etcd.wait_for_leader(timeout or 30)
        say(f"  etcd leader: {leader.name}")
    if lab.redis and lab.redis.replica is not None:
        lab.redis.wait_replica_in_sync(timeout or 15)


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
    lab = Lab(data["id"], run_dir, data["backend"], owned=False, detached=data.get("detached", False),
              clocks=data.get("clocks", False))
    lab.client_log = route_client_logs()
    if data.get("network"):
        network = data["network"]
        runner = LocalProcess.from_state(network["runner"]) if network.get("runner") else None
        lab.network = Network(run_dir, network["control"], runner)
    by_kind: dict[str, list] = {}
    for node_data in data["nodes"]:
        runner_data = node_data["runner"]
        if runner_data["backend"] == "docker":
            runner = DockerContainer.from_state(runner_data)
        else:
            runner = LocalProcess.from_state(runner_data)
        cls = NODE_CLASSES[node_data["kind"]]
        by_kind.setdefault(node_data["kind"], []).append(
            cls(node_data["name"], node_data["port"], runner, node_data["data_dir"], node_data.get("ports")))
    if "zookeeper" in by_kind:
        lab.zookeeper = ZooKeeperService(by_kind["zookeeper"])
    if "etcd" in by_kind:
        lab.etcd = EtcdService(by_kind["etcd"])
    if "redis" in by_kind:
        lab.redis = RedisService(by_kind["redis"])
    if "redlock" in by_kind:
        lab.redlock = RedlockService(by_kind["redlock"])
    if "postgres" in by_kind:
        lab.postgres = PostgresService(by_kind["postgres"])
    if "sentinel" in by_kind and lab.redis is not None:
        lab.sentinel = lab.redis.sentinels = SentinelService(by_kind["sentinel"])
        lab.sentinel.aliases = sentinel_aliases(lab)
    _join_network(lab)
    lab.secret = read_secret(run_dir)
    lab.share_secret()
    return lab


def attach_or_up(**sizes) -> Lab:
    """Attach to the `labkit up` lab if it has at least the requested services, else start
    a lab owned by this process. Notebooks that break servers should call ``up`` instead."""
    try:
        lab = attach()
    except NoLabRunning:
        return up(**sizes)
    want_zk, want_etcd = sizes.get("zookeeper", 1), sizes.get("etcd", 1)
    want_redis, want_replica = sizes.get("redis", True), sizes.get("replica", False)
    if (sizes.get("clocks") and not lab.clocks) or (sizes.get("private", True) and not lab.private):
        return up(**sizes)
    have = lambda s: len(s.nodes) if s else 0  # noqa: E731
    if (have(lab.zookeeper) >= want_zk and have(lab.etcd) >= want_etcd
            and have(lab.redis) >= (1 + int(want_replica)) * int(bool(want_redis))
            and have(lab.redlock) >= sizes.get("redlock", 0) and have(lab.sentinel) >= sizes.get("sentinels", 0)
            and have(lab.postgres) >= int(bool(sizes.get("postgres")))
            and all(n.state == "running" for n in lab.nodes)):
        return lab
    return up(**sizes)


def down_all(say=print) -> list[str]:
    """Stop the `labkit up` lab and every orphan. Labs owned by live processes are left alone."""
    stopped = lab_state.reap_orphans(log=say)
    for run_dir in sorted(lab_state.labs_dir().iterdir()):
        data = lab_state.read_state(run_dir)
        if data and data.get("detached"):
            names = lab_state.stop_recorded_nodes(data, run_dir)
            lab_state.remove_lab(run_dir)
            stopped.append(data["id"])
            say(f"stopped lab {data['id']}: {', '.join(names) or 'nothing was running'}")
    return stopped


if sys.platform == "win32":  # pragma: no cover
    raise ImportError("labkit's local backend needs a POSIX system (Linux or macOS); on Windows use WSL or Docker")
