"""Lock clients as real OS processes, driven from the notebook.

Each client is a child process (``python -m labkit.clients``) with its own connection
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
"""
from __future__ import annotations

import atexit
import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from labkit import faults
from labkit.errors import LabError
from labkit.events import Event, sink_for

REPLY_TIMEOUT = 30.0
START_TIMEOUT = 60.0  # a child imports kazoo/grpc/redis, and ten of them share two cores
STOP_GRACE = 3.0
# the state a client is in after each of its lock events ("suspended" changes nothing:
# a holder that lost its connection may still hold the lock)
LOCK_STATES = {"requested": "waiting", "created": "waiting", "watch": "waiting", "woke": "waiting",
               "acquired": "holding", "released": "idle", "timeout": "idle", "lost": "lost"}
_LIVE_GROUPS: "weakref.WeakSet[LockClients]" = weakref.WeakSet()


class ClientError(LabError):
    """A lock client process failed: it did not start, it died, or its recipe raised."""


class ClientTimeout(ClientError):
    """A lock client did not answer a command in time."""


# ---- the registry: recipe name -> a lock on fresh connections --------------------------
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


def connections_of(lab: Any) -> dict[str, str]:
    """Plain connection data (no live clients) for the services a lab runs. etcd: the
    first running member (python-etcd3 talks to one endpoint)."""
    connections: dict[str, str] = {}
    zookeeper, etcd, redis = (getattr(lab, service, None) for service in ("zookeeper", "etcd", "redis"))
    if zookeeper is not None:
        connections["zookeeper"] = zookeeper.hosts
    if etcd is not None:
        running = [node.endpoint for node in etcd.nodes if node.state == "running"]
        connections["etcd"] = running[0] if running else etcd.endpoints[0]
    if redis is not None:
        connections["redis"] = f"{redis.host}:{redis.port}"
    return connections


def _need(connections: dict[str, str], service: str, recipe: str) -> str:
    if service not in connections:
        raise ClientError(f"recipe {recipe!r} needs {service}, but the lab runs none",
                          hint=f"start the lab with labkit.up({service}=...)")
    return connections[service]


def _zookeeper(watch: str | None, reference: bool = False) -> Callable[..., RecipeHandle]:
    def factory(connections, name, identifier, on_event, session_timeout, ttl) -> RecipeHandle:
        from kazoo.client import KazooClient
        zookeeper = KazooClient(hosts=_need(connections, "zookeeper", "zookeeper"), timeout=session_timeout)
        zookeeper.start(timeout=max(10.0, session_timeout))
        if reference:
            from labkit.locks.kazoo_reference import KazooReferenceLock
            lock = KazooReferenceLock(zookeeper, name, identifier=identifier, on_event=on_event)
        else:
            from labkit.locks.zookeeper import ZooKeeperLock
            lock = ZooKeeperLock(zookeeper, name, watch=watch, identifier=identifier, on_event=on_event)

        def session() -> dict[str, Any]:
            session_id, password = zookeeper.client_id or (None, b"")
            return {"session_id": session_id, "password": password.hex()}

        def close() -> None:
            zookeeper.stop()
            zookeeper.close()
        return RecipeHandle(lock, close, session, extra={"zookeeper": zookeeper})
    return factory


def _etcd_client(connections: dict[str, str], recipe: str) -> Any:
    from labkit.servers.etcd import etcd_client  # python3-etcd3, with the lab's two fixes
    host, port = _need(connections, "etcd", recipe).rsplit(":", 1)
    return etcd_client(host, int(port))


def _etcd_mutex(connections, name, identifier, on_event, session_timeout, ttl) -> RecipeHandle:
    from labkit.locks.etcd_mutex import EtcdMutex
    from labkit.locks.etcd_session import EtcdSession
    client = _etcd_client(connections, "etcd")
    session = EtcdSession(client, ttl=max(1, math.ceil(ttl)))
    lock = EtcdMutex(session, name, identifier=identifier, on_event=on_event)

    def close() -> None:
        try:
            session.close()
        finally:
            client.close()
    return RecipeHandle(lock, close, lambda: {"lease_id": session.lease_id}, session.stop_keepalive,
                        expired=session.done.is_set, extra={"etcd": client})


def _etcd3_reference(connections, name, identifier, on_event, session_timeout, ttl) -> RecipeHandle:
    from labkit.locks.etcd3_reference import Etcd3ReferenceLock
    client = _etcd_client(connections, "etcd3-lock")
    lock = Etcd3ReferenceLock(client, name, ttl=max(1, math.ceil(ttl)), identifier=identifier, on_event=on_event)
    return RecipeHandle(lock, client.close, lambda: {"lease_id": getattr(lock.etcd3_lock.lease, "id", None)},
                        extra={"etcd": client})


def _redis(connections, name, identifier, on_event, session_timeout, ttl) -> RecipeHandle:
    import redis
    from labkit.locks.redis_lock import RedisLock
    host, port = _need(connections, "redis", "redis").rsplit(":", 1)
    client = redis.Redis(host=host, port=int(port))
    lock = RedisLock(client, name, ttl_ms=int(ttl * 1000), identifier=identifier, on_event=on_event)
    return RecipeHandle(lock, client.close, extra={"redis": client})


# The names of docs/RECIPES.md. Each factory(connections, name, identifier, on_event,
# session_timeout, ttl) opens its own connections and returns a RecipeHandle.
RECIPES: dict[str, Callable[..., RecipeHandle]] = {
    "zookeeper": _zookeeper("predecessor"),
    "zookeeper-parent": _zookeeper("parent"),
    "kazoo": _zookeeper(None, reference=True),
    "etcd": _etcd_mutex,
    "etcd3-lock": _etcd3_reference,
    "redis": _redis,
}


def make_lock(recipe: str, connections: dict[str, str], name: str, identifier: str,
              on_event: Callable[..., None], session_timeout: float = 4.0, ttl: float = 5.0) -> RecipeHandle:
    """A lock of ``recipe`` on new connections (raises ClientError for an unknown name)."""
    if recipe not in RECIPES:
        raise ClientError(f"no recipe named {recipe!r}", hint=f"choose one of {', '.join(RECIPES)}")
    return RECIPES[recipe](connections, name, identifier, on_event, session_timeout, ttl)


# ---- the child process ------------------------------------------------------------------
class _Child:
    """Runs in the client process: builds its own lock, executes commands from stdin,
    writes events, session changes and replies to stdout as JSON lines."""

    def __init__(self, spec: dict[str, Any], output: Any):
        self.spec = spec
        self.name = spec["client"]
        self._output = output
        self._output_lock = threading.Lock()
        self._stop_loop = threading.Event()
        self._last_session: dict[str, Any] | None = None
        self.token: Any = None
        self.on_event = sink_for(self.name, lambda event: self.send(type="event", event=event.to_dict()))
        self.handle = make_lock(spec["recipe"], spec["connections"], spec["name"], self.name, self.on_event,
                                spec["session_timeout"], spec["ttl"])
        self.store = None
        if spec.get("store"):
            import redis
            from labkit.fencing import FencedStore
            store = spec["store"]
            self.store = FencedStore(redis.Redis(host=store["host"], port=store["port"]), store["name"],
                                     fenced=store["fenced"])
        zookeeper = self.handle.extra.get("zookeeper")
        if zookeeper is not None:  # a new session after expiry has a new id: tell the notebook
            zookeeper.add_listener(lambda state: self.report_session() if state == "CONNECTED" else None)

    def send(self, **message: Any) -> None:
        with self._output_lock:
            self._output.write(json.dumps(message) + "\n")
            self._output.flush()

    def report_session(self) -> None:
        session = self.handle.session()
        if session != self._last_session:
            self._last_session = session
            self.send(type="session", session=session)

    def acquire(self, timeout: float | None = None) -> Any:
        if self.handle.expired():
            # An etcd lease, once lost, is lost for good (kazoo, by contrast, opens a new
            # ZooKeeper session by itself): like a real client, start a new session.
            self.handle.close()
            self.handle = make_lock(self.spec["recipe"], self.spec["connections"], self.spec["name"], self.name,
                                    self.on_event, self.spec["session_timeout"], self.spec["ttl"])
            self.report_session()  # before waiting: a fault aimed at this client must hit the new lease
        self.token = self.handle.lock.acquire(timeout=timeout)
        self.report_session()
        return self.token

    def release(self) -> None:
        self.handle.lock.release()
        self.token = None

    def write(self, value: str) -> bool:
        if self.store is None:
            raise ClientError(f"{self.name} has no store to write to",
                              hint="spawn the clients with store=FencedStore(...)")
        # the token this process got from its last acquire, as a real holder keeps it in a
        # variable: after a pause it still believes in it, whatever the lock says by now
        accepted = self.store.write(self.name, self.token, value)
        self.on_event("write", token=self.token, accepted=accepted, value=value)
        return accepted

    def run(self, loops: int, hold: float) -> int:
        """acquire, write "begin", hold, write "end", release; the store's own log of
        begin/end pairs shows whether two holds ever overlapped."""
        done = 0
        self._stop_loop.clear()
        for round_number in range(loops):
            if self._stop_loop.is_set():
                break
            self.acquire(timeout=None)
            try:
                if self.store is not None:
                    self.write(f"{self.name} begin {round_number}")
                time.sleep(hold)  # the work done under the lock
                if self.store is not None:
                    self.write(f"{self.name} end {round_number}")
            finally:
                self.release()
            done += 1
        return done

    def control(self, command: dict[str, Any]) -> bool:
        """Commands that must work while the main thread is blocked in acquire or run."""
        if command["op"] == "stop_loop":
            self._stop_loop.set()
        elif command["op"] == "stop_keepalive":
            if self.handle.stop_keepalive is None:
                self.reply(command, error=ClientError(f"recipe {self.spec['recipe']!r} has no keep-alive"))
                return True
            self.handle.stop_keepalive()  # the notebook records the fault
        else:
            return False
        self.reply(command, result=None)
        return True

    def reply(self, command: dict[str, Any], result: Any = None, error: BaseException | None = None) -> None:
        if error is None:
            self.send(type="reply", id=command["id"], ok=True, result=result)
        else:
            self.send(type="reply", id=command["id"], ok=False, error_type=type(error).__name__,
                      message=str(error), waited=getattr(error, "waited", None),
                      lock_name=getattr(error, "name", None))

    def shutdown(self) -> None:
        """Close the session (the server frees the lock at once) and end the process,
        even if the main thread is blocked waiting for the lock."""
        try:
            self.handle.close()
        except Exception as error:
            print(f"{self.name}: closing the session failed: {error}", file=sys.stderr)
        finally:
            sys.stderr.flush()
            os._exit(0)

    def serve(self, commands: Any) -> None:
        pending: list[dict[str, Any]] = []
        condition = threading.Condition()

        def read_commands() -> None:
            for line in commands:
                command = json.loads(line)
                if command["op"] == "exit":
                    break
                if not self.control(command):
                    with condition:
                        pending.append(command)
                        condition.notify()
            self.shutdown()  # "exit", or stdin closed because the notebook is gone

        threading.Thread(target=read_commands, name="commands", daemon=True).start()
        methods = {"acquire": self.acquire, "release": self.release, "write": self.write, "run": self.run}
        while True:
            with condition:
                condition.wait_for(lambda: pending)
                command = pending.pop(0)
            try:
                self.reply(command, result=methods[command["op"]](**command.get("args", {})))
            except Exception as error:  # the notebook re-raises it; the child keeps serving
                self.reply(command, error=error)


def child_main(argv: list[str]) -> int:
    """Entry point of ``python -m labkit.clients SPEC_JSON``."""
    if len(argv) != 1:
        print("python -m labkit.clients runs one lock client for spawn_clients(); it talks JSON lines "
              "on stdin/stdout.\nStart clients from Python instead:\n"
              "    from labkit.clients import spawn_clients\n"
              "    clients = spawn_clients(lab, 'zookeeper', n=3)", file=sys.stderr)
        return 2
    spec = json.loads(argv[0])
    # the protocol owns the pipe; anything a library prints, even from C, goes to stderr
    output = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    child = _Child(spec, output)
    child.report_session()
    child.send(type="ready", pid=os.getpid())
    child.serve(sys.stdin)
    return 0


# ---- the notebook side ------------------------------------------------------------------
class LockClient:
    """One lock client process. Single steps: ``acquire()``, ``release()``, ``write(v)``;
    loops: ``run(loops, hold)``. Faults: ``pause(seconds)``, ``resume()``, ``kill()``,
    ``expire_session()`` (ZooKeeper), ``revoke_lease()`` / ``stop_keepalive()`` (etcd).
    ``state`` is one of starting, idle, waiting, holding, lost, paused, stopped, dead."""

    def __init__(self, group: "LockClients", name: str, spec: dict[str, Any]):
        self.group = group
        self.name = name
        self.recipe = spec["recipe"]
        self.session: dict[str, Any] = {}
        self._condition = threading.Condition()
        self._replies: dict[int, dict[str, Any]] = {}
        self._ids = itertools.count(1)
        self._lock_state = "starting"
        self._paused = False
        self._killed = False
        self._closing = False
        self._ended = False
        self._resume_timer: threading.Timer | None = None
        self._log_path = Path(group.log_directory) / f"{name}.log"
        package_parent = str(Path(__file__).resolve().parent.parent)
        environment = dict(os.environ, PYTHONPATH=os.pathsep.join(
            filter(None, [package_parent, os.environ.get("PYTHONPATH", "")])))
        with open(self._log_path, "wb") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "labkit.clients", json.dumps(spec)], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1, env=environment)
        self.pid = self._process.pid
        self._reader = threading.Thread(target=self._read_messages, name=f"{name}-reader", daemon=True)
        self._reader.start()

    def __repr__(self) -> str:
        return f"<LockClient {self.name} pid={self.pid} {self.recipe} {self.state}>"

    # ---- messages from the child ----
    def _read_messages(self) -> None:
        for line in self._process.stdout:  # type: ignore[union-attr]
            message = json.loads(line)
            kind = message["type"]
            if kind == "event":
                event = Event.from_dict(message["event"])
                with self._condition:
                    self._lock_state = LOCK_STATES.get(event.kind, self._lock_state)
                self.group.history.append(event)
            elif kind == "session":
                with self._condition:
                    self.session = message["session"]
            elif kind == "ready":
                with self._condition:
                    self._lock_state = "idle"
            elif kind == "reply":
                with self._condition:
                    self._replies[message["id"]] = message
            with self._condition:
                self._condition.notify_all()
        with self._condition:
            self._ended = True
            self._condition.notify_all()

    def wait_until_ready(self, timeout: float = START_TIMEOUT) -> None:
        with self._condition:
            self._condition.wait_for(lambda: self._lock_state != "starting" or self._ended, timeout)
            if self._ended:
                raise ClientError(f"{self.name} exited while starting (code {self._process.poll()})",
                                  hint="its stderr says why:\n" + self.log_tail())
            if self._lock_state == "starting":
                raise ClientTimeout(f"{self.name} did not start within {timeout:.0f} s",
                                    hint="the machine may be overloaded; its stderr:\n" + self.log_tail())

    def log_tail(self, lines: int = 15) -> str:
        """The last lines the child wrote to stderr (tracebacks, kazoo warnings)."""
        try:
            return "\n".join(self._log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    # ---- commands ----
    def send(self, op: str, **args: Any) -> int:
        """Send a command without waiting; ``wait_reply(id)`` collects the answer."""
        command_id = next(self._ids)
        try:
            self._process.stdin.write(json.dumps({"id": command_id, "op": op, "args": args}) + "\n")  # type: ignore[union-attr]
            self._process.stdin.flush()  # type: ignore[union-attr]
        except (BrokenPipeError, ValueError, OSError):
            raise ClientError(f"{self.name} is not running (state {self.state}); cannot send {op!r}",
                              hint="spawn new clients") from None
        return command_id

    def wait_reply(self, command_id: int, timeout: float = REPLY_TIMEOUT) -> Any:
        """The result of a command sent earlier; re-raises the child's error."""
        with self._condition:
            self._condition.wait_for(lambda: command_id in self._replies or self._ended, timeout)
            reply = self._replies.pop(command_id, None)
        if reply is None:
            if self._ended:
                raise ClientError(f"{self.name} ended before answering (state {self.state})",
                                  hint="it was killed or crashed; its stderr:\n" + self.log_tail())
            raise ClientTimeout(f"{self.name} did not answer within {timeout:.1f} s (state {self.state})",
                                hint="a paused client answers after it resumes; a waiting one once it holds")
        if reply["ok"]:
            return reply["result"]
        raise _error_from(self.name, reply)

    def command(self, op: str, reply_timeout: float = REPLY_TIMEOUT, **args: Any) -> Any:
        """Send ``op`` with ``args`` and wait for the child's reply."""
        return self.wait_reply(self.send(op, **args), reply_timeout)

    def acquire(self, timeout: float | None = None, reply_timeout: float = REPLY_TIMEOUT) -> Any:
        """Block until this client holds the lock; returns its fencing token (None for
        Redis). Raises LockTimeout after ``timeout``, SessionExpired if its session or
        lease is gone, ClientTimeout if no reply came within ``reply_timeout`` (the
        child keeps waiting: ``state`` says "waiting"), ClientError if it died."""
        return self.command("acquire", max(reply_timeout, (timeout or 0) + 5.0), timeout=timeout)

    def release(self, timeout: float = REPLY_TIMEOUT) -> None:
        """Let go (idempotent). Raises ClientError if the recipe could not reach its server."""
        self.command("release", timeout)

    def write(self, value: str, timeout: float = REPLY_TIMEOUT) -> bool:
        """Write to the protected store with the token of this client's last acquire
        (what a holder that does not know it lost the lock would do); True if accepted.
        Raises ClientError if the clients were spawned without ``store=``."""
        return self.command("write", timeout, value=value)

    def run(self, loops: int | None = None, hold: float | None = None, wait: bool = True,
            timeout: float = 120.0) -> int:
        """Loop acquire / write / hold / write / release; returns the rounds done, or the
        command id (for ``wait_reply``) when ``wait`` is False."""
        command_id = self.send("run", loops=self.group.loops if loops is None else loops,
                               hold=self.group.hold if hold is None else hold)
        return self.wait_reply(command_id, timeout) if wait else command_id

    def stop_loop(self) -> None:
        """Finish the current round of ``run`` and stop looping."""
        self.command("stop_loop")

    # ---- faults ----
    def pause(self, seconds: float) -> threading.Timer:
        """SIGSTOP now, SIGCONT after ``seconds`` (a timer thread); ``resume()`` ends it early."""
        if seconds <= 0:
            raise ValueError(f"pause needs a positive number of seconds, got {seconds!r}")
        faults.freeze_process(self.pid)
        with self._condition:
            self._paused = True
            self._resume_timer = threading.Timer(seconds, self.resume)
            self._resume_timer.daemon = True
            self._resume_timer.start()
        self.group.history.record_fault("pause", self.name, seconds=seconds, pid=self.pid)
        return self._resume_timer

    def resume(self) -> None:
        with self._condition:
            if not self._paused:
                return
            self._paused = False
            if self._resume_timer is not None:
                self._resume_timer.cancel()
        if faults.thaw_process(self.pid):
            self.group.history.record_fault("resume", self.name, pid=self.pid)

    def kill(self) -> None:
        """SIGKILL: the session stays on the server until it times out."""
        with self._condition:
            self._killed = True
            self._paused = False
            if self._resume_timer is not None:
                self._resume_timer.cancel()
        self._process.kill()
        self.group.history.record_fault("kill", self.name, pid=self.pid)

    def expire_session(self, timeout: float = 10.0) -> None:
        """ZooKeeper expires this client's session now, server-side (see faults.expire_session)."""
        if "session_id" not in self.session:
            raise ClientError(f"{self.name} ({self.recipe}) has no ZooKeeper session to expire",
                              hint="expire_session works on the zookeeper, zookeeper-parent and kazoo recipes")
        faults.expire_session(self.group.connections["zookeeper"], self.session["session_id"],
                              bytes.fromhex(self.session["password"]), timeout=timeout)
        self.group.history.record_fault("expire_session", self.name, session_id=self.session["session_id"])

    def revoke_lease(self) -> None:
        """etcd revokes this client's lease now: its lock key is deleted with it."""
        lease_id = self.session.get("lease_id")
        if lease_id is None:
            raise ClientError(f"{self.name} ({self.recipe}) has no etcd lease to revoke (yet)",
                              hint="etcd3-lock clients have a lease only once they tried to acquire")
        faults.revoke_lease(self.group.etcd_client(), lease_id)
        self.group.history.record_fault("revoke_lease", self.name, lease_id=lease_id)

    def stop_keepalive(self) -> None:
        """The child stops refreshing its lease: it expires after its TTL."""
        self.command("stop_keepalive")
        self.group.history.record_fault("stop_keepalive", self.name, lease_id=self.session.get("lease_id"))

    # ---- state and shutdown ----
    @property
    def state(self) -> str:
        code = self._process.poll()
        if code is not None:
            return "dead" if self._killed or (code != 0 and not self._closing) else "stopped"
        return "paused" if self._paused else self._lock_state

    def wait_for_state(self, *states: str, timeout: float = 10.0) -> str:
        """Poll until the client is in one of ``states``; raises ClientTimeout otherwise."""
        deadline = time.monotonic() + timeout
        while (state := self.state) not in states:
            if time.monotonic() > deadline:
                raise ClientTimeout(f"{self.name} is {state}, not {' or '.join(states)}, after {timeout:.1f} s")
            with self._condition:
                self._condition.wait(0.05)  # events and replies wake us; process exit is polled
        return state

    def begin_close(self) -> None:
        self._closing = True
        self.resume()  # a stopped process cannot read "exit"
        try:
            self.send("exit")
        except ClientError:
            pass
        try:
            self._process.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass

    def finish_close(self, deadline: float) -> None:
        try:
            self._process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(10)
        self._reader.join(5)
        self._process.stdout.close()  # type: ignore[union-attr]


def _error_from(client: str, reply: dict[str, Any]) -> Exception:
    from labkit.locks.errors import Locked, LockTimeout, SessionExpired
    kind, message = reply.get("error_type"), reply.get("message", "")
    if kind == "LockTimeout":
        return LockTimeout(reply.get("lock_name") or client, float(reply.get("waited") or 0.0))
    if kind == "SessionExpired":
        return SessionExpired(f"{client}: {message}")
    if kind == "Locked":
        return Locked(f"{client}: {message}")
    return ClientError(f"{client} failed: {kind}: {message}", hint="see client.log_tail() for its stderr")


class LockClients:
    """N lock client processes on one lock (see ``spawn_clients``). Index by position or
    name; iterate; ``run()`` starts every loop; ``close()`` stops them all."""

    def __init__(self, lab: Any = None, recipe: str = "zookeeper", n: int = 5, name: str = "/locks/resource",
                 history: Any = None, hold: float = 0.2, loops: int = 1, store: Any = None,
                 session_timeout: float = 4.0, ttl: float = 5.0, connections: dict[str, str] | None = None,
                 start_timeout: float = START_TIMEOUT):
        if recipe not in RECIPES:
            raise ClientError(f"no recipe named {recipe!r}", hint=f"choose one of {', '.join(RECIPES)}")
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        if history is None:
            from labkit.history import History
            history = History()
        self.history = history
        self.recipe, self.name, self.hold, self.loops = recipe, name, hold, loops
        self.connections = dict(connections) if connections is not None else connections_of(lab)
        self.log_directory = tempfile.mkdtemp(prefix="labkit-clients-")
        self._etcd_client: Any = None
        self._closed = False
        self.owner_pid = os.getpid()
        spec = {"recipe": recipe, "name": name, "connections": self.connections,
                "session_timeout": session_timeout, "ttl": ttl, "store": _store_spec(store)}
        _register_for_exit(self)
        self.clients: list[LockClient] = []
        try:
            for number in range(1, n + 1):
                client_name = f"client-{number}"
                self.clients.append(LockClient(self, client_name, dict(spec, client=client_name)))
            deadline = time.monotonic() + start_timeout
            for client in self.clients:
                client.wait_until_ready(max(0.1, deadline - time.monotonic()))
        except BaseException:
            self.close()
            raise

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
        return f"<LockClients {self.recipe} on {self.name!r}: {self.states()}>"

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

    def etcd_client(self) -> Any:
        """An etcd client in this process (for revoke_lease), made on first use."""
        if self._etcd_client is None:
            self._etcd_client = _etcd_client(self.connections, "revoke_lease")
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
        for log in Path(self.log_directory).glob("*.log"):
            log.unlink()
        os.rmdir(self.log_directory)

    def __enter__(self) -> "LockClients":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


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


def _close_all() -> None:
    for group in list(_LIVE_GROUPS):
        if group.owner_pid == os.getpid():  # a forked copy of the notebook must not stop them
            group.close(grace=1.0)


def spawn_clients(lab: Any = None, recipe: str = "zookeeper", n: int = 5, name: str = "/locks/resource",
                  history: Any = None, hold: float = 0.2, loops: int = 1, store: Any = None,
                  session_timeout: float = 4.0, ttl: float = 5.0, **options: Any) -> LockClients:
    """Start ``n`` client processes of ``recipe`` (a name of ``RECIPES``) on lock ``name``,
    each with its own session (ZooKeeper session timeout / etcd lease TTL / Redis lock TTL
    in seconds). Events go to ``history`` (a new History if None). ``store`` is a
    FencedStore the clients write to. Use as a context manager, or call ``close()``.
    Raises ClientError (with the child's stderr) if a client cannot start, for instance
    because the lab does not run the service the recipe needs."""
    return LockClients(lab, recipe, n, name, history, hold, loops, store, session_timeout, ttl, **options)


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
