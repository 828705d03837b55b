"""Lock clients as real OS processes, driven from the notebook.

Each client is a child process (``python -m labkit.clients.child``) with its own connection
and its own session, so that it can really die (``kill()``: SIGKILL, nothing cleaned up)
and really freeze (``pause(seconds)``: SIGSTOP/SIGCONT, a stand-in for a GC pause) while
the servers keep counting its session timeout or lease TTL. The notebook talks to a
child through its stdin/stdout, one JSON line per command and per reply. The child sends
its events on the same stdout, before the reply to the command that caused them, so when
``client.acquire()`` returns, its "acquired" event is already in the History::

    store = FencedStore(lab.redis.client(), "demo")
    with spawn_clients(lab, "zookeeper", n=5, store=store, session_timeout=2) as clients:
        clients.run(loops=3, hold=0.1)        # every client: acquire, write, hold, write, release
        token = clients[0].acquire()          # single steps
        clients[0].pause(5)                   # frozen past its session timeout
        clients[1].acquire()                  # ... so the next client gets the lock
        clients[0].write("late")              # False: the fenced store rejects the old token
    clients.history                           # every event, faults included

What can fail: a child that does not start (``ClientError`` with the last lines of its
stderr: wrong server address, a recipe that cannot be imported), a command that gets no
reply in time (``ClientTimeout``: the client is paused, dead, or still waiting for the
lock), a recipe error in the child (re-raised here as ``LockTimeout``, ``SessionExpired``
or ``ClientError``). ``close()`` (also run at exit) stops every child, with SIGKILL after
a grace period, so no process outlives the notebook.

Re-running a cell: a new group on the same lock (same recipe, lock name and servers)
closes an earlier group of this process that is not in a ``with`` block nor held by a
panel, and says so in one line, unless ``keep_previous=True``; a group bound to a lab is
closed with that lab when a later ``labkit.up()`` replaces it (labkit/servers/lab.py).
"""
from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from labkit.clients.client import START_TIMEOUT, STOP_GRACE, ClientError, LockClient
from labkit.locks.registry import Recipe, check_holders, connections_of, etcd_client_for, recipe_named
from labkit.progress import shows_progress
from labkit.record.history import History
from labkit.servers.live_labs import this_process
from labkit.servers.runners.clock import prepare_clock
from labkit.servers.runners.process import process_start_time

if TYPE_CHECKING:
    from etcd3 import Etcd3Client

    from labkit.record.fencing import FencedStore
    from labkit.servers.lab import Lab

_LIVE_GROUPS: "weakref.WeakSet[LockClients]" = weakref.WeakSet()


def _checked_timeouts(timeouts: dict[str, float] | None, n: int) -> dict[str, float]:
    names = [f"client-{number}" for number in range(1, n + 1)]
    for name, seconds in (timeouts or {}).items():
        if name not in names:
            raise ValueError(f"timeouts names {name!r}, which is not one of the {n} clients ({', '.join(names)})")
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds <= 0:
            raise ValueError(f"timeouts[{name!r}] = {seconds!r}: give a session timeout / TTL in seconds, above 0")
    return dict(timeouts or {})


class LockClients:
    """N lock client processes on one lock (see ``spawn_clients``). Index by position or
    name; iterate; ``run()`` starts every loop; ``close()`` stops them all."""

    def __init__(self, lab: Lab | None = None, recipe: Recipe | str = "zookeeper", n: int = 5, name: str = "/locks/resource",
                 history: History | None = None, hold: float = 0.2, loops: int = 1, store: FencedStore | None = None,
                 session_timeout: float = 4.0, ttl: float = 5.0, connections: dict[str, str] | None = None,
                 start_timeout: float = START_TIMEOUT, proxied: bool = False, keep_previous: bool = False,
                 connections_for: Callable[[str], dict[str, str]] | None = None, holders: int = 1,
                 clocks: bool = False, timeouts: dict[str, float] | None = None):
        recipe = recipe_named(recipe)   # UnknownRecipe for a name not registered
        check_holders(recipe, holders)
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        timeouts = _checked_timeouts(timeouts, n)
        self.history = history if history is not None else History()
        self.recipe, self.name, self.hold, self.loops = recipe, name, hold, loops
        self.connections = dict(connections) if connections is not None else connections_of(lab)
        self.log_directory = _new_log_directory()
        self._etcd_client: Etcd3Client | None = None
        self._closed = False
        self.owner_pid = os.getpid()
        self.started_at: float | None = None  # wall clock, set once every client answered
        self.held_by: str | None = None  # "a with block", "a LockPanel": never replaced while held
        if not keep_previous:
            close_previous_groups(recipe, name, self.connections)
        spec = {"recipe": recipe.name, "name": name, "connections": self.connections,
                "session_timeout": session_timeout, "ttl": ttl, "store": _store_spec(store), "holders": holders}
        _register_for_exit(self)
        self.clients: list[LockClient] = []
        try:
            for number in range(1, n + 1):
                client_name = f"client-{number}"
                client_spec = dict(spec, client=client_name)
                if client_name in timeouts:   # this client's own session timeout and TTL
                    client_spec.update(session_timeout=timeouts[client_name], ttl=timeouts[client_name])
                if connections_for is not None:  # chosen by the caller (a torture: one member each)
                    client_spec["connections"] = connections_for(client_name)
                elif proxied:  # links of its own, so that lab.isolate(client_name) cuts this one
                    client_spec["connections"] = connections_of(lab, via=client_name)
                # clocks=True: each process under the clock shim, with a clock file of its own here
                clock_environment = prepare_clock(Path(self.log_directory), client_name) if clocks else None
                self.clients.append(LockClient(self, client_name, client_spec, clock_environment))
            deadline = time.monotonic() + start_timeout
            for client in self.clients:
                client.wait_until_ready(max(0.1, deadline - time.monotonic()))
        except BaseException:
            self.close()
            raise
        self.started_at = time.time()
        on_replace = getattr(lab, "on_replace", None)  # a Lab; None when only connections were given
        if on_replace is not None:
            on_replace(self._close_with_lab)

    def __getitem__(self, key: int | str) -> LockClient:
        if isinstance(key, str):
            for client in self.clients:
                if client.name == key:
                    return client
            raise KeyError(f"no client named {key!r}; clients: {', '.join(c.name for c in self.clients)}")
        return self.clients[key]

    def __iter__(self):
        return iter(self.clients)

    def __len__(self) -> int:
        return len(self.clients)

    def __repr__(self) -> str:
        return f"<LockClients {self.recipe.name} on {self.name!r}: {self.states()}>"

    def states(self) -> dict[str, str]:
        return {client.name: client.state for client in self.clients}

    def holders(self) -> list[LockClient]:
        return [client for client in self.clients if client.state == "holding"]

    def run(self, loops: int | None = None, hold: float | None = None, timeout: float = 120.0) -> dict[str, int]:
        """Every client loops at once; returns the rounds each finished. Raises the first
        client error (e.g. ClientTimeout after ``timeout`` seconds)."""
        started = {client: client.run(loops, hold, wait=False) for client in self.clients}
        deadline = time.monotonic() + timeout
        return {client.name: client.wait_reply(command_id, max(0.1, deadline - time.monotonic()))
                for client, command_id in started.items()}

    def replace(self, key: int | str, start_timeout: float = START_TIMEOUT) -> LockClient:
        """Start a new process in place of a client that died (killed or crashed): the same
        name and spec, new connections and a new session, as a crashed process restarted by
        its supervisor rejoins. Its events go on under the same name. Raises ClientError if
        that client is still running (kill it first) or the new one does not start."""
        old = self[key]
        if old.state not in ("dead", "stopped"):
            raise ClientError(f"{old.name} is still running ({old.state}); only a dead client can be replaced",
                              hint=f"kill it first: clients[{old.name!r}].kill()")
        old.finish_close(time.monotonic())
        new = LockClient(self, old.name, old.spec, old.clock_environment)   # its clock as it left it
        self.clients[self.clients.index(old)] = new
        try:
            if self._closed:  # close() ran meanwhile and did not see the new process
                raise ClientError(f"these clients were closed while {old.name} was being replaced")
            new.wait_until_ready(start_timeout)
        except BaseException:
            new.begin_close()
            new.finish_close(time.monotonic() + 1.0)
            raise
        return new

    def etcd_client(self) -> Any:
        """An etcd client in this process (for revoke_lease), made on first use."""
        if self._etcd_client is None:
            self._etcd_client = etcd_client_for(self.connections, "revoke_lease")
        return self._etcd_client

    def close(self, grace: float = STOP_GRACE) -> None:
        """Stop every child: each closes its session; SIGKILL after ``grace`` seconds."""
        if self._closed:
            return
        self._closed = True
        for client in self.clients:
            client.begin_close()
        deadline = time.monotonic() + grace
        for client in self.clients:
            client.finish_close(deadline)
        if self._etcd_client is not None:
            self._etcd_client.close()
        for leftover in Path(self.log_directory).iterdir():   # logs; clock files and shim (clocks=True)
            leftover.unlink()
        os.rmdir(self.log_directory)

    def __enter__(self) -> "LockClients":
        self.held_by = "a with block"
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def describe(self) -> str:
        """E.g. "3 zookeeper clients on /locks/x"."""
        return f"{len(self.clients)} {self.recipe.name} client{'s' if len(self.clients) != 1 else ''} on {self.name}"

    @property
    def replaceable(self) -> bool:
        """True for a started group of this process, still open, that nothing holds."""
        return (not self._closed and self.held_by is None and self.started_at is not None
                and self.owner_pid == os.getpid())

    def _close_with_lab(self) -> str | None:
        """Called when a later labkit.up() replaces this group's lab."""
        if self._closed:
            return None
        self.close(grace=1.0)
        return self.describe()


LOG_PREFIX = "labkit-clients-"
# labkit-clients-<owner pid>-<its start time>-<mkdtemp's random part>
_LOG_FOLDER = re.compile(re.escape(LOG_PREFIX) + r"(\d+)-(\w+?)-\w+")


def _new_log_directory() -> str:
    """A new folder for the clients' stderr in the temp folder, named after the process that
    owns it (pid and start time): close() removes it, and a run killed before close() leaves
    it for the next start, which reaps it (``reap_log_directories``)."""
    reap_log_directories()
    pid = os.getpid()
    return tempfile.mkdtemp(prefix=f"{LOG_PREFIX}{pid}-{process_start_time(pid)}-")


def reap_log_directories(temp: str | None = None) -> list[str]:
    """Remove this user's client log folders in ``temp`` (the temp folder) whose owner process
    is gone: its pid runs no more, or runs another process (another start time). Returns the
    folders removed. Folders named the old way (no owner in the name) are left alone."""
    reaped = []
    for folder in Path(temp or tempfile.gettempdir()).glob(f"{LOG_PREFIX}*"):
        owner = _LOG_FOLDER.fullmatch(folder.name)
        try:
            if owner is None or not folder.is_dir() or folder.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue   # removed meanwhile by its owner or another reaper
        if process_start_time(int(owner[1])) == owner[2]:
            continue   # its owner still runs
        shutil.rmtree(folder, ignore_errors=True)
        reaped.append(str(folder))
    return reaped


def _store_spec(store: Any) -> dict[str, Any] | None:
    """A FencedStore as plain data, so that each child opens its own Redis connection."""
    if store is None:
        return None
    connection = store.client.connection_pool.connection_kwargs
    return {"host": connection.get("host", "127.0.0.1"), "port": connection.get("port", 6379),
            "name": store.name, "fenced": store.fenced}


def _register_for_exit(group: LockClients) -> None:
    atexit.unregister(_close_all)  # registered once, on first use: no side effect at import
    atexit.register(_close_all)
    _LIVE_GROUPS.add(group)


def close_previous_groups(recipe: Recipe, name: str, connections: dict[str, str]) -> list[LockClients]:
    """Close every replaceable group of this process on the same lock (recipe, lock name
    and servers): the group a re-run cell started before. Says so in one line."""
    previous = sorted((group for group in list(_LIVE_GROUPS) if group.replaceable and group.recipe == recipe
                       and group.name == name and group.connections == connections), key=lambda g: g.started_at)
    for group in previous:
        group.close(grace=1.0)
    if previous:
        who = this_process()
        what = " and ".join(group.describe() for group in previous)
        when = " and ".join(time.strftime("%H:%M:%S", time.localtime(group.started_at)) for group in previous)
        print(f"closed the {what} that {who} started at {when} before starting new ones "
              "(spawn_clients(..., keep_previous=True) keeps the old ones)", flush=True)
    return previous


def _close_all() -> None:
    for group in list(_LIVE_GROUPS):
        if group.owner_pid == os.getpid():  # a forked copy of the notebook must not stop them
            group.close(grace=1.0)


@shows_progress("starting lock client processes")
def spawn_clients(lab: Lab | None = None, recipe: Recipe | str = "zookeeper", n: int = 5, name: str = "/locks/resource",
                  history: History | None = None, hold: float = 0.2, loops: int = 1, store: FencedStore | None = None,
                  session_timeout: float = 4.0, ttl: float = 5.0, **options: Any) -> LockClients:
    """Start ``n`` client processes of ``recipe`` (a Recipe, or its name in ``RECIPES``) on lock ``name``,
    each with its own session (ZooKeeper session timeout / etcd lease TTL / Redis lock TTL
    in seconds). Events go to ``history`` (a new History if None). ``store`` is a
    FencedStore the clients write to. Use as a context manager, or call ``close()``.
    ``proxied=True`` (a lab started with network=True): each client-N reaches the servers
    through links of its own, so ``lab.isolate("client-2")`` cuts that process only.
    ``connections_for(name)``: each client's own connections instead (e.g. one member only).
    ``holders``: how many may hold a semaphore recipe at once (1 for every other recipe).
    ``timeouts``: {client name: seconds}, that client's own session timeout and TTL (both),
    e.g. a waiter that must outlive an election the holder's timer is measured across.
    ``clocks=True``: each process runs under labkit's clock shim, and ``client.clock`` steps
    its wall clock or makes its monotonic clock drift (``client.clock.monotonic_rate(4)``;
    docs/CLOCKS.md); needs Linux and a C compiler (ClockUnavailable otherwise).
    An earlier group of this process on the same lock, outside a ``with`` block, is closed
    first (a re-run cell), and one line says so; ``keep_previous=True`` keeps it.
    Raises ClientError (with the child's stderr) if a client cannot start, for instance
    because the lab does not run the service the recipe needs."""
    return LockClients(lab, recipe, n, name, history, hold, loops, store, session_timeout, ttl, **options)
