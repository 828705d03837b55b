"""PostgreSQL: one server, a local process or a container, the database a lesson fences
(labkit/record/fenced_table.py, labkit/lessons/databases.py). ``labkit.up(postgres=True)``.

How it starts fast: ``initdb`` runs once per PostgreSQL version into a template folder,
``$LABKIT_HOME/templates/postgres-<version>/``, and every lab copies it (~40 MB) instead of
running initdb again. The server listens on 127.0.0.1 only, its unix socket sits in its own
data folder (never in /var/run), and TCP logins need a password (scram-sha-256). The
template's password is random and readable by the lab's owner only; as soon as the server
answers, labkit logs in with it and sets the lab's secret (labkit/servers/secret.py), so
from then on only the secret opens the server. A lab started with ``private=False`` trusts
every connection to 127.0.0.1 instead.

Which user runs initdb and the server (root cannot), and how initdb runs on the Docker
backend: labkit/servers/services/postgres_template.py.

``lay_out_postgres`` lays pg1 out: its port, its data folder (``data_folder``), its command
line (``postgres_argv``) and its template (``postgres_template.template``).

What can fail: ServerNotFound (no initdb or postgres, with the install command),
NodeStartError with the server's last log lines (a busy port, a broken template: remove
``$LABKIT_HOME/templates`` and start again), or with initdb's output.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import psycopg
from psycopg import sql

from labkit.timing import became_true
from labkit.servers.ports import HOST
from labkit.servers.runners.discovery import find_postgres
from labkit.servers.services.kind import ServiceKind
from labkit.servers.services.layout import Layout
from labkit.servers.services.node import Node, Service
from labkit.servers.runners.process import process_state
from labkit.servers.services.postgres_leftovers import OUTSIDE_MARK, release_shared_memory
from labkit.servers.services.postgres_template import as_server_user, give_to_server_user, template
from labkit.servers.secret import USER

DATABASE = "postgres"
SETTINGS = {
    "listen_addresses": HOST,
    "shared_buffers": "16MB",          # a lab's table is tiny; 8 helpers share one machine
    "max_connections": "40",
    "dynamic_shared_memory_type": "mmap",   # a file in the data folder: nothing left in /dev/shm
    "log_min_messages": "warning",
    "log_connections": "off",
}
SOCKET_PATH_LIMIT = 100   # sun_path holds 108 bytes on Linux, 104 on macOS


def container_mounts(data: Path, backend: str) -> dict:
    """What a PostgreSQL container mounts beside the run folder: on a root host, the data
    folder that lives outside the run folder."""
    if backend != "docker" or os.geteuid() != 0:
        return {}
    return {str(data.parent): str(data.parent)}


def postgres_argv(bin_dir: str, data_dir: str, port: int, backend: str = "local") -> list[str]:
    settings = dict(SETTINGS, port=str(port))
    socket_dir = data_dir if len(data_dir) + len(f"/.s.PGSQL.{port}.lock") < SOCKET_PATH_LIMIT else ""
    settings["unix_socket_directories"] = socket_dir   # '' = no unix socket at all
    argv = [*as_server_user(backend), os.path.join(bin_dir, "postgres"), "-D", data_dir]
    for name, value in settings.items():
        argv += ["-c", f"{name}={value}"]
    return argv


def child_processes(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (/proc on Linux, ``pgrep -P`` elsewhere)."""
    if os.path.isdir("/proc/self"):
        found = []
        for entry in os.listdir("/proc"):
            try:
                if entry.isdigit() and int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
        return found
    listed = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, timeout=10).stdout
    return [int(line) for line in listed.split()]


def data_folder(run_dir: Path, name: str, backend: str = "local") -> Path:
    """Where a node's data lives: in the run folder, or (root) outside it (see the module's text)."""
    if os.geteuid() != 0:
        return run_dir / name
    outside = Path(tempfile.mkdtemp(prefix=f"{OUTSIDE_MARK}{run_dir.name}-"))
    give_to_server_user(outside, backend)
    return outside / name


class PostgresNode(Node):
    kind = "postgres"
    start_timeout = 20.0
    start_hint = ("check that the port is free and `labkit doctor` finds PostgreSQL; "
                  "a broken template: remove $LABKIT_HOME/templates")

    @property
    def template_dir(self) -> str | None:
        """Where its data is copied from at its first start (its settings, from the lab's plan)."""
        return self.settings.get("template_dir")

    @property
    def trusts_everyone(self) -> bool:
        """True in a lab started with private=False: every login from 127.0.0.1 is trusted."""
        return self.settings.get("trusts_everyone", False)

    def start(self) -> None:
        if self.state != "stopped":
            return
        data = Path(self.data_dir)
        if not (data / "PG_VERSION").exists():
            self.copy_template(data)
        self.runner.start()

    def stop(self) -> None:
        """PostgreSQL's fast shutdown (SIGINT: open sessions are ended, not waited for), then
        SIGTERM and SIGKILL after the runner's grace period."""
        self.runner.signal(signal.SIGINT)
        self.runner.terminate()

    def kill(self) -> None:
        """SIGKILL to the postmaster and every backend (each runs in a session of its own, so
        one by one, the postmaster frozen first so that it forks no new one), then wait until
        all are gone: a start right after a crash finds no process on the old shared memory.
        In a container the engine's SIGKILL ends every process of it: labkit only waits."""
        pid = self.pid
        backends = []
        if pid is not None and self.state != "stopped":
            self.runner.signal(signal.SIGSTOP)
            backends = self.backends()
            for backend in [] if self.in_container else backends:
                try:
                    os.kill(backend, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        self.runner.kill()
        became_true(lambda: all(process_state(backend) == "stopped" for backend in backends), 10)
        release_shared_memory(self.data_dir)

    def backends(self) -> list[int]:
        """The postmaster's children as this host sees them (a container's too, on Linux; none
        where the engine runs in a virtual machine, whose pids are not the host's)."""
        if not self.pid or (self.in_container and not os.path.isdir("/proc/self")):
            return []
        return child_processes(self.pid)

    @property
    def in_container(self) -> bool:
        """True on the Docker backend, whose freezer and kill take every backend with the postmaster."""
        return self.runner.backend == "docker"

    def pause(self) -> None:
        """Freeze the postmaster and every backend (SIGSTOP each): freezing the postmaster alone
        would leave the open sessions answering."""
        self.runner.pause()
        for backend in [] if self.in_container else self.backends():
            try:
                os.kill(backend, signal.SIGSTOP)
            except (ProcessLookupError, PermissionError):
                pass

    def resume(self) -> None:
        for backend in [] if self.in_container else self.backends():
            try:
                os.kill(backend, signal.SIGCONT)
            except (ProcessLookupError, PermissionError):
                pass
        self.runner.resume()

    def copy_template(self, data: Path) -> None:
        shutil.copytree(Path(self.template_dir) / "data", data, symlinks=True)
        data.chmod(0o700)   # PostgreSQL refuses a data folder others can read
        hba = "host all all 127.0.0.1/32 " + ("trust" if self.trusts_everyone else "scram-sha-256") + "\n"
        (data / "pg_hba.conf").write_text("local all all reject\n" + hba)
        give_to_server_user(data, self.runner.backend)

    def program(self, name: str) -> str:
        """The path of one of PostgreSQL's programs next to this server's (``psql``, ``pg_isready``)."""
        server = next(part for part in self.runner.argv if part.endswith("/postgres"))
        beside = Path(server).with_name(name)
        return str(beside) if beside.exists() else (shutil.which(name) or str(beside))

    def connect(self, **kwargs) -> psycopg.Connection:
        """A psycopg connection to this server, logged in (autocommit unless told otherwise)."""
        kwargs.setdefault("autocommit", True)
        return psycopg.connect(**{**self.login(), **kwargs})

    def login(self, port: int | None = None) -> dict:
        login = {"host": self.host, "port": port or self.port, "user": USER, "dbname": DATABASE, "connect_timeout": 5}
        if self.secret is not None:
            login["password"] = self.secret.password
        return login

    def is_ready(self) -> bool:
        """A real login answers. The first one after a start sets the lab's password, with
        the template's: until then only the template's password opens the server."""
        try:
            with self.connect(connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.OperationalError:
            if self.secret is None or self.template_dir is None:
                return False
        try:
            password = (Path(self.template_dir) / "password").read_text()
            first_login = {**self.login(), "password": password, "connect_timeout": 2}
            with psycopg.connect(**first_login, autocommit=True) as conn:
                conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(USER),
                                                                        sql.Literal(self.secret.password)))
            return True
        except (psycopg.OperationalError, OSError):
            return False

    def read_role(self) -> str:
        with self.connect(connect_timeout=2) as conn:
            recovering = conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]
        return "standby" if recovering else "primary"

    def role_or_unreachable(self) -> str:
        try:
            return self.role
        except psycopg.Error:
            return "unreachable"

    def describe(self) -> dict:
        return {"name": self.name, "endpoint": self.endpoint, "role": self.role_or_unreachable(), "state": self.state}


class PostgresService(Service):
    """``lab.postgres``: one PostgreSQL server (pg1)."""

    name = "postgres"
    nodes: list[PostgresNode]

    @property
    def node(self) -> PostgresNode:
        return self.nodes[0]

    @property
    def host(self) -> str:
        return self.node.host

    @property
    def port(self) -> int:
        return self.node.port

    def login(self, via: str | None = None) -> dict:
        """psycopg.connect's keyword arguments (host, port, user, dbname, password); with
        ``via="client-1"`` (a lab with network=True) through a link of that client's own."""
        port = int(self.endpoint_for(self.node, via).rsplit(":", 1)[1])
        return self.node.login(port)

    def connect(self, via: str | None = None, **kwargs) -> psycopg.Connection:
        """A psycopg connection, autocommit unless ``autocommit=False``; ``via`` as in ``login``."""
        kwargs.setdefault("autocommit", True)
        return psycopg.connect(**{**self.login(via), **kwargs})

    def describe(self) -> dict:
        return {"endpoints": [self.node.endpoint], "nodes": [n.describe() for n in self.nodes]}

    def is_ready(self) -> bool:
        return self.node.is_ready()


def lay_out_postgres(layout: Layout, count: int) -> None:
    """pg1, its data copied from the template at its first start (initdb runs here, once)."""
    bin_dir, backend = layout.binaries.get("postgres", ""), layout.backend
    made_from = template(bin_dir, backend)
    port, data = layout.ports.take(), data_folder(layout.run_dir, "pg1", backend)
    layout.add(PostgresNode, "pg1", {"client": port}, data, postgres_argv(bin_dir, str(data), port, backend),
               cwd=data.parent, settings={"template_dir": str(made_from), "trusts_everyone": layout.secret is None},
               mounts=container_mounts(data, backend))


POSTGRES = ServiceKind("postgres", PostgresNode, PostgresService, lay_out_postgres,
                       count=lambda sizes: int(sizes.postgres), finders={"postgres": find_postgres},
                       in_image=("postgres",))
