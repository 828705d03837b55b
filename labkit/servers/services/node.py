"""A node of a lab: one server, whatever runs it (a local process or a container).

Subclasses say how their server is probed for readiness and asked for its role; the
runner says how it is started, killed, frozen and thawed. Keeping the two apart is what
lets the Docker backend reuse every probe and every fault.
"""
from __future__ import annotations

import os

from labkit.errors import NodeStartError, UnknownNode
from labkit.servers.runners.clock import Clock
from labkit.servers.network.links import Network, not_enabled
from labkit.servers.ports import HOST
from labkit.servers.secret import LabSecret
from labkit.timing import wait_until


class Node:
    kind = "server"
    start_timeout = 30.0
    start_hint = "look at the log lines above; `labkit doctor` checks the installation"
    clock_problem: str | None = None  # why this kind of server's wall clock cannot be stepped

    def __init__(self, name: str, port: int, runner, data_dir: str, ports: dict | None = None,
                 settings: dict | None = None, secret: LabSecret | None = None):
        self.name = name
        self.host = HOST
        self.port = port
        self.ports = dict(ports or {"client": port})
        self.runner = runner
        self.data_dir = data_dir
        self.settings = dict(settings or {})  # what its kind needs beyond ports, folder and runner
        self.secret = secret  # the lab's secret when it is private (servers/secret.py): probes log in

    # -- identity -------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return getattr(self.runner, "pid", None)

    @property
    def clock(self) -> Clock:
        """The wall clock this server reads: ``node.clock.step(30)`` (needs clocks=True)."""
        return Clock(self)

    @property
    def log_path(self) -> str:
        return self.runner.log_path

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.endpoint} {self.state}>"

    # -- live facts -------------------------------------------------------------
    @property
    def state(self) -> str:
        """'running', 'paused' or 'stopped', read from the process or container now."""
        return self.runner.state()

    @property
    def role(self) -> str:
        """The role the server reports right now; 'paused'/'stopped'/'unreachable' when it
        cannot answer."""
        state = self.state
        if state != "running":
            return state
        try:
            return self.read_role()
        except OSError:
            return "unreachable"

    def read_role(self) -> str:
        raise NotImplementedError

    def is_ready(self) -> bool:
        """One readiness probe; never raises for a server that is merely not up yet."""
        raise NotImplementedError

    # -- faults -----------------------------------------------------------------
    def start(self) -> None:
        if self.state != "stopped":
            return
        self.runner.start()

    def kill(self) -> None:
        """SIGKILL: no goodbye, no flush — the crash."""
        self.runner.kill()

    def stop(self) -> None:
        """A polite shutdown (SIGTERM, then SIGKILL after a grace period)."""
        self.runner.terminate()

    def pause(self) -> None:
        """Freeze the server (SIGSTOP or Docker's freezer): it holds its sockets but answers nothing."""
        self.runner.pause()

    def resume(self) -> None:
        self.runner.resume()

    def restart(self, timeout: float | None = None) -> None:
        """Stop (if running) and start again on the same data directory, then wait until
        it answers: the server recovers from its own log or snapshot."""
        self.stop()
        self.start()
        self.wait_ready(timeout)

    # -- readiness --------------------------------------------------------------
    def wait_ready(self, timeout: float | None = None) -> float:
        """Poll the readiness probe until it answers; returns the seconds it took.
        Raises NodeStartError with the last log lines if the process dies or the deadline
        passes."""
        timeout = self.start_timeout if timeout is None else timeout

        def ready() -> bool:
            if self.state == "stopped":
                raise NodeStartError(f"{self.kind} node {self.name} exited while starting "
                                     f"(port {self.port})", self.start_hint, self.log_tail())
            return self.is_ready()

        return wait_until(ready, f"{self.kind} node {self.name} to answer", timeout, poll=0.02, max_poll=0.2,
                          error=lambda: NodeStartError(f"{self.kind} node {self.name} did not become ready on "
                                                       f"{self.endpoint} within {timeout:.0f} s", self.start_hint,
                                                       self.log_tail()))

    def log_tail(self, lines: int = 15) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(0, os.SEEK_END)
                size = log.tell()
                log.seek(max(0, size - 16384))
                text = log.read().decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # -- state file -------------------------------------------------------------
    def to_state(self) -> dict:
        return {"name": self.name, "kind": self.kind, "port": self.port, "ports": self.ports,
                "data_dir": self.data_dir, "runner": self.runner.to_state(), "settings": self.settings}

    def memory_bytes(self) -> int | None:
        """Resident memory of the server now (None when it is not running)."""
        return self.runner.memory_bytes()

    def describe(self) -> dict:
        return {"name": self.name, "endpoint": self.endpoint, "role": self.role, "state": self.state}


class Service:
    """The nodes of one kind in a lab (``lab.zookeeper``, ``lab.etcd``, ``lab.redis``)."""

    name = "service"

    def __init__(self, nodes: list[Node], network: Network | None = None, secret: LabSecret | None = None):
        self.nodes = nodes
        self.network = network  # the lab's Network when it was started with network=True
        self.secret = secret    # the lab's secret when it is private: its clients log in

    def endpoint_for(self, node: Node, via: str | None = None) -> str:
        """"host:port" to reach ``node``: directly, or for the client named ``via`` (a lab
        with network=True) through a link of that client's own. Raises LabError when
        ``via`` is given on a lab without the network."""
        if via is None:
            return node.endpoint
        if self.network is None:
            raise not_enabled()
        return self.network.endpoint(via, node)

    def describe(self) -> dict:
        """What `labkit status` shows of it."""
        return {"nodes": [n.describe() for n in self.nodes]}

    def is_ready(self) -> bool:
        return all(n.is_ready() for n in self.nodes)

    def running(self) -> list[Node]:
        """The nodes whose process runs now (not killed, stopped or paused)."""
        return [node for node in self.nodes if node.state == "running"]

    def first_running(self) -> Node:
        """The first running node. Raises UnknownNode when none runs."""
        running = self.running()
        if not running:
            raise UnknownNode(f"no {self.name} node is running (states: "
                              f"{ {node.name: node.state for node in self.nodes} })",
                              hint="restart a node (node.restart()) or start a new lab")
        return running[0]
