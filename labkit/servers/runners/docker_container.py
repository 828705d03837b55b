"""Nodes as Docker containers: one container per server, same command line, same ports.

Each container uses host networking, so a server listens on its own 127.0.0.1 port exactly
as a local process would, and the lab's run folder is mounted at the same absolute path,
so every config and data path is the same too. The server's output is appended to its
log file in that folder, and it runs as the host user, so the folder stays removable.

Faults map onto the engine: kill() is `docker kill` (SIGKILL), pause()/resume() use the
cgroup freezer, terminate() is `docker stop`, and a restart starts the same container
again on the same data. Every container is labelled with its lab, node and owner, so
`labkit down` and the orphan reaper find them even when the state file is gone.

What can fail: no engine (DockerUnavailable, raised before anything starts), the image
build (ImageBuildError), or the engine refusing a container (NodeStartError with its log).
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import Callable

from labkit.errors import DockerUnavailable, NodeStartError
from labkit.servers.runners.discovery import ZooKeeperInstall
from labkit.servers.runners.docker_image import ensure_server_image, server_image_tag
from labkit.servers.runners.docker_engine import docker_client, engine_problem
from labkit.servers.runners.process import process_rss_bytes, process_start_time
from labkit.servers.run_folder import read_state
from labkit.timing import became_true, wait_until

LAB_LABEL = "labkit.lab"
NODE_LABEL = "labkit.node"
OWNER_LABEL = "labkit.owner_pid"
OWNER_START_LABEL = "labkit.owner_start"
RUN_DIR_LABEL = "labkit.run_dir"

# Where Debian's packages put things inside the image (see docker/Dockerfile).
IMAGE_BINARIES = {
    "java": "/usr/bin/java",
    "zookeeper": ZooKeeperInstall("/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar",
                                  "Debian's libzookeeper-java in the server image"),
    "etcd": "/usr/bin/etcd",
    "redis": "/usr/bin/redis-server",
    "postgres": "/usr/lib/postgresql/15/bin",   # Debian's postgresql-15: initdb, postgres, psql
}
# The server's stdout and stderr go to its log in the mounted run folder, so the log
# reader and the error messages work as for a local process.
WRAPPER = ["sh", "-c", 'exec "$@" >>"$LABKIT_LOG" 2>&1', "sh"]
STATES = {"running": "running", "paused": "paused", "restarting": "running"}



def image_binaries() -> dict:
    """The server paths inside the image (building it first if needed). etcdctl stays the
    host's, if it has one: EtcdService.etcdctl falls back to the image's otherwise."""
    ensure_server_image(docker_client(), say=lambda text: print(text, flush=True))
    return dict(IMAGE_BINARIES, etcdctl=shutil.which("etcdctl"))


def _owner_labels(run_dir: str) -> dict:
    """Who owns the lab, from the state file written before any node starts."""
    state = read_state(Path(run_dir)) or {}
    pid = state.get("owner_pid")
    return {OWNER_LABEL: str(pid) if pid else "detached", OWNER_START_LABEL: str(state.get("owner_start_time") or "")}


class DockerContainer:
    """Runs one argv in a container of the server image; the same interface as LocalProcess."""

    backend = "docker"

    def __init__(self, argv: list[str], log_path: str, cwd: str, lab_id: str, name: str,
                 container_id: str | None = None, image: str | None = None, env: dict | None = None,
                 mounts: dict | None = None, on_start: Callable[[], None] | None = None):
        self.argv = argv
        self.log_path = log_path
        self.cwd = cwd
        self.lab_id = lab_id
        self.name = name
        self.env = env or {}  # e.g. the clock shim's LD_PRELOAD: its files are in the mounted run folder
        self.mounts = mounts or {}   # more host paths than the run folder: {host path: path inside}
        self.container_id = container_id
        self.image = image
        self.on_start = on_start   # called after every start: the lab records the container

    @property
    def container_name(self) -> str:
        return f"labkit-{self.lab_id}-{self.name}"

    def _container(self):
        """The container now (fresh attributes), or None once it is removed."""
        import docker.errors

        try:
            return docker_client().containers.get(self.container_id or self.container_name)
        except docker.errors.NotFound:
            return None

    def start(self) -> None:
        import docker.errors

        with open(self.log_path, "ab") as log:
            log.write(f"\n--- labkit start {time.strftime('%H:%M:%S')} (docker): {' '.join(self.argv)}\n".encode())
        container = self._container()
        try:
            if container is None:
                container = self._create()
            container.start()
        except docker.errors.APIError as exc:
            engine_log = container.logs(tail=15).decode(errors="replace") if container is not None else ""
            if container is not None:
                container.remove(force=True)
                self.container_id = None
            raise NodeStartError(f"Docker could not start node {self.name} ({exc.explanation or exc})",
                                 "`docker info` checks the engine; the README's Docker section lists what "
                                 "host networking needs", engine_log) from None
        if self.on_start is not None:
            self.on_start()

    def _create(self):
        self.image = self.image or server_image_tag()
        run_dir = os.path.dirname(self.log_path)
        labels = {LAB_LABEL: self.lab_id, NODE_LABEL: self.name, RUN_DIR_LABEL: run_dir, **_owner_labels(run_dir)}
        container = docker_client().containers.create(
            self.image, command=WRAPPER + list(self.argv), name=self.container_name, labels=labels,
            network_mode="host", user=f"{os.getuid()}:{os.getgid()}", working_dir=self.cwd,
            environment={**self.env, "LABKIT_LOG": self.log_path, "HOME": "/tmp"},
            volumes=volumes({run_dir: run_dir, **self.mounts}))
        self.container_id = container.id
        return container

    def state(self) -> str:
        container = self._container()
        return "stopped" if container is None else STATES.get(container.status, "stopped")

    def memory_bytes(self) -> int | None:
        """The server's resident memory: from /proc when the host sees its pid (Linux),
        else Docker's own count (``docker stats``: slower, and it includes the page cache)."""
        rss = process_rss_bytes(self.pid)
        if rss is not None:
            return rss
        container = self._container()
        if container is None or container.status != "running":
            return None
        return container.stats(stream=False).get("memory_stats", {}).get("usage")

    @property
    def pid(self) -> int | None:
        """The server's pid as the host sees it (0 → None when it is not running)."""
        container = self._container()
        return (container.attrs["State"].get("Pid") or None) if container is not None else None

    def signal(self, signum: int) -> None:
        """One signal to the server (the container's first process), through the engine."""
        import docker.errors

        container = self._container()
        if container is not None and STATES.get(container.status) is not None:
            try:
                container.kill(signal=int(signum))
            except docker.errors.APIError:
                pass  # it exited meanwhile

    def kill(self) -> None:
        import docker.errors

        container = self._container()
        if container is None or STATES.get(container.status) is None:
            return
        try:
            container.kill()  # SIGKILL; the engine thaws a paused container for it
        except docker.errors.APIError:
            pass  # it exited meanwhile
        self._wait_stopped(10.0)

    def terminate(self, grace: float = 10.0) -> None:
        """`docker stop`: SIGTERM, then SIGKILL after the grace period. A frozen server cannot
        act on SIGTERM, so it is thawed first, as the local backend sends SIGCONT."""
        container = self._container()
        if container is None or STATES.get(container.status) is None:
            return
        if container.status == "paused":
            container.unpause()
        container.stop(timeout=max(1, int(grace)))
        self._wait_stopped(grace + 10.0)

    def pause(self) -> None:
        container = self._container()
        if container is not None and container.status == "running":
            container.pause()

    def resume(self) -> None:
        container = self._container()
        if container is not None and container.status == "paused":
            container.unpause()

    def _wait_stopped(self, timeout: float) -> bool:
        return became_true(lambda: self.state() == "stopped", timeout, poll=0.05)

    def to_state(self) -> dict:
        return {"backend": "docker", "argv": self.argv, "log_path": self.log_path, "cwd": self.cwd,
                "lab_id": self.lab_id, "name": self.name, "container_id": self.container_id, "image": self.image,
                "env": self.env, "mounts": self.mounts}

    @classmethod
    def from_state(cls, data: dict, on_start: Callable[[], None] | None = None) -> "DockerContainer":
        return cls(data["argv"], data["log_path"], data["cwd"], lab_id=data["lab_id"], name=data["name"],
                   container_id=data.get("container_id"), image=data.get("image"), env=data.get("env"),
                   mounts=data.get("mounts"), on_start=on_start)


def volumes(mounts: dict) -> dict:
    """Docker's volumes for {host path: path inside}: read-write, but /etc/passwd read-only."""
    return {host: {"bind": inside, "mode": "ro" if inside == "/etc/passwd" else "rw"}
            for host, inside in mounts.items()}


def run_once(argv: list[str], mounts: dict, user: str, timeout: float = 120) -> tuple[int, str]:
    """Run ``argv`` once in a throwaway container of the server image (host network, ``mounts``
    as in ``volumes``, as ``user``); returns its exit code and its output (e.g. PostgreSQL's
    initdb, when the host has no PostgreSQL). Labelled with its owner, so the reaper removes
    it if its owner dies meanwhile."""
    import docker.errors

    container = docker_client().containers.create(
        server_image_tag(), command=argv, network_mode="host", user=user, environment={"HOME": "/tmp"},
        volumes=volumes(mounts),
        labels={LAB_LABEL: "run-once", OWNER_LABEL: str(os.getpid()),
                OWNER_START_LABEL: str(process_start_time(os.getpid()))})
    try:
        container.start()
        code = container.wait(timeout=timeout)["StatusCode"]
        return code, container.logs().decode(errors="replace")
    finally:
        try:
            container.remove(force=True)
        except docker.errors.APIError:
            pass


def lab_containers(lab_id: str | None = None) -> list:
    """Every labkit container (of one lab, if given), running or not."""
    label = f"{LAB_LABEL}={lab_id}" if lab_id else LAB_LABEL
    # ignore_removed: the list is ids, then one inspect each; a container another process
    # removes in between (another lab stopping) is gone, not an error
    return docker_client().containers.list(all=True, filters={"label": label}, ignore_removed=True)


def remove_lab_containers(lab_id: str) -> list[str]:
    """Remove every container of a lab, whatever its state; returns the names of the nodes
    that were still running (or frozen). Without an engine there is nothing to remove now:
    returns [] (the labels let reap_orphan_containers find them once the engine is back)."""
    import docker.errors

    stopped = []
    try:
        containers = lab_containers(lab_id)
    except DockerUnavailable:
        return stopped
    for container in containers:
        if container.status in STATES:
            stopped.append(container.labels.get(NODE_LABEL, container.name))
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:
                raise
            # "removal ... already in progress": another process reaps the same orphan (two
            # labs starting at once): wait until it is gone, so its ports are free after this
            wait_until(lambda: _gone(container), f"container {container.name} removed by another process",
                       timeout=60, poll=0.1)
    return stopped


def _gone(container) -> bool:
    import docker.errors

    try:
        container.reload()
    except docker.errors.NotFound:
        return True
    return False


def reap_orphan_containers() -> list[str]:
    """Remove the containers of labs whose run folder is gone and whose owner is dead (or
    was `labkit up`, which has no owner): nothing else would ever find them. Returns their
    lab ids; [] when no engine answers."""
    if engine_problem(timeout=2.0) is not None:
        return []
    reaped = set()
    for container in lab_containers():
        labels = container.labels
        run_dir = labels.get(RUN_DIR_LABEL, "")
        if run_dir and os.path.exists(os.path.join(run_dir, "lab.json")):
            continue  # the state file's own reaper decides
        owner = labels.get(OWNER_LABEL, "detached")
        if owner != "detached" and owner.isdigit() and process_start_time(int(owner)) == labels.get(OWNER_START_LABEL):
            continue  # its owner still runs (and is removing its folder right now)
        remove_lab_containers(labels[LAB_LABEL])
        reaped.add(labels[LAB_LABEL])
    return sorted(reaped)


def run_etcdctl(args: list[str]) -> int:
    """etcdctl from the server image, for hosts without their own: a throwaway container
    on the host network, output passed through. Returns etcdctl's exit code."""
    import docker.errors

    client = docker_client()
    login = {"ETCDCTL_USER": os.environ["ETCDCTL_USER"]} if "ETCDCTL_USER" in os.environ else {}  # a private lab
    container = client.containers.create(server_image_tag(), command=["etcdctl", *args], network_mode="host",
                                         environment={"ETCDCTL_API": "3", **login},
                                         labels={LAB_LABEL: "etcdctl", OWNER_LABEL: str(os.getpid()),
                                                 OWNER_START_LABEL: str(process_start_time(os.getpid()))})
    try:
        container.start()
        code = container.wait(timeout=120)["StatusCode"]
        sys.stdout.write(container.logs(stdout=True, stderr=False).decode(errors="replace"))
        sys.stderr.write(container.logs(stdout=False, stderr=True).decode(errors="replace"))
        return code
    finally:
        try:
            container.remove(force=True)
        except docker.errors.APIError:
            pass


if __name__ == "__main__" and sys.argv[1:2] == ["etcdctl"]:
    sys.exit(run_etcdctl(sys.argv[2:]))
