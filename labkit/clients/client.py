"""One lock client process, seen from the notebook: commands, replies, state and faults.

The notebook talks to the child (``labkit.clients.child``) through its stdin/stdout, one
JSON line per command and per reply; the child's events arrive before the reply to the
command that caused them.

What can fail: ``ClientError`` when the child does not start (with its stderr) or its
recipe raises, ``ClientTimeout`` when a command gets no reply in time (the client is
paused, dead, or still waiting for the lock).
"""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from labkit import faults
from labkit.errors import LabError
from labkit.locks.errors import Locked, LockTimeout, SessionExpired
from labkit.locks.registry import Recipe, login as registry_login
from labkit.record.events import Event
from labkit.servers.runners.clock import Clock, ClockHost
from labkit.vocabulary import STATE_AFTER

if TYPE_CHECKING:
    from labkit.record.history import History


class ClientGroup(Protocol):
    """What a client reads from the group that started it (labkit.clients.group.LockClients
    is the one group; this module does not import it, since the group imports clients)."""

    history: History
    connections: dict[str, str]
    log_directory: str
    hold: float
    loops: int
    recipe: Recipe

    def etcd_client(self) -> Any: ...

REPLY_TIMEOUT = 30.0
START_TIMEOUT = 60.0  # a child imports kazoo/grpc/redis, and ten of them share two cores
STOP_GRACE = 3.0


class ClientError(LabError):
    """A lock client process failed: it did not start, it died, or its recipe raised."""


class ClientTimeout(ClientError):
    """A lock client did not answer a command in time."""


class LockClient:
    """One lock client process. Single steps: ``acquire()``, ``release()``, ``write(v)``;
    loops: ``run(loops, hold)``. Faults: ``pause(seconds)``, ``resume()``, ``kill()``,
    ``expire_session()`` (ZooKeeper), ``revoke_lease()`` / ``stop_keepalive()`` (etcd).
    ``state`` is one of starting, idle, waiting, holding, lost, paused, stopped, dead."""

    def __init__(self, group: ClientGroup, name: str, spec: dict[str, Any],
                 clock_environment: dict[str, str] | None = None):
        self.group = group
        self.name = name
        self.spec = spec  # what the child was started with: LockClients.replace starts another
        # under the clock shim (spawn_clients(..., clocks=True)): ``clock`` steps its wall clock
        # or makes its monotonic clock drift, as ``node.clock`` does a server's (docs/CLOCKS.md)
        self.clock_environment = dict(clock_environment or {})
        self.clock = Clock(ClockHost(name, self.clock_environment)) if clock_environment else None
        self.recipe = group.recipe   # the Recipe; the child gets its name in ``spec``
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
            filter(None, [package_parent, os.environ.get("PYTHONPATH", "")])), **self.clock_environment)
        with open(self._log_path, "wb") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "labkit.clients.child", json.dumps(spec)], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1, env=environment)
        self.pid = self._process.pid
        self._reader = threading.Thread(target=self._read_messages, name=f"{name}-reader", daemon=True)
        self._reader.start()

    def __repr__(self) -> str:
        return f"<LockClient {self.name} pid={self.pid} {self.recipe.name} {self.state}>"

    # ---- messages from the child ----
    def _read_messages(self) -> None:
        for line in self._process.stdout:  # type: ignore[union-attr]
            message = json.loads(line)
            message_type = message["type"]
            if message_type == "event":
                event = Event.from_dict(message["event"])
                with self._condition:
                    self._lock_state = STATE_AFTER.get(event.kind, self._lock_state)
                self.group.history.append(event)
            elif message_type == "session":
                with self._condition:
                    self.session = message["session"]
            elif message_type == "ready":
                with self._condition:
                    self._lock_state = "idle"
            elif message_type == "reply":
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
        raise error_from(self.name, reply)

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

    def release_through_blips(self, within: float = 30.0) -> None:
        """release(), sent again while it fails on a dropped connection (a ZooKeeper client's
        ConnectionLoss: a server out of reach for a moment on a loaded machine, the session
        alive), for up to ``within`` seconds: for experiments whose point is not a failed unlock
        (lesson 04 shows that one with release()). Other failures raise at once."""
        deadline = time.monotonic() + within
        while True:
            try:
                return self.release()
            except ClientError as error:
                if "ConnectionLoss" not in str(error) or time.monotonic() > deadline:
                    raise

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
            raise ClientError(f"{self.name} ({self.recipe.name}) has no ZooKeeper session to expire",
                              hint="expire_session works on the zookeeper, zookeeper-parent and kazoo recipes")
        session_id = self.session["session_id"]
        closes = faults.expire_session(self.group.connections["zookeeper"], session_id,
                                       bytes.fromhex(self.session["password"]), timeout=timeout,
                                       auth=registry_login(self.group.connections, "zookeeper"))
        # closes > 1: the client took its session back before a close landed (see faults.expire_session)
        self.group.history.record_fault("expire_session", self.name, session_id=session_id, closes=closes)

    def revoke_lease(self) -> None:
        """etcd revokes this client's lease now: its lock key is deleted with it."""
        lease_id = self.session.get("lease_id")
        if lease_id is None:
            raise ClientError(f"{self.name} ({self.recipe.name}) has no etcd lease to revoke (yet)",
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
        # not wait_until: the Condition wakes this at once on every event and reply, a poll would lag
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
        # A command sent to a child that had died stays in the pipe's buffer (its flush failed).
        # Closed here, the pipe drops it quietly; left to the garbage collector, Python 3.13
        # prints the failed flush as "Exception ignored ... BrokenPipeError" (3.11 said nothing)
        # in whatever cell is running, e.g. when a killed client is replaced (lesson 09).
        try:
            self._process.stdin.close()  # type: ignore[union-attr]
        except (OSError, ValueError):
            pass
        try:
            self._process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(10)
        self._reader.join(5)
        self._process.stdout.close()  # type: ignore[union-attr]


def error_from(client: str, reply: dict[str, Any]) -> Exception:
    error_type, message = reply.get("error_type"), reply.get("message", "")
    if error_type == "LockTimeout":
        return LockTimeout(reply.get("lock_name") or client, float(reply.get("waited") or 0.0))
    if error_type == "SessionExpired":
        return SessionExpired(f"{client}: {message}")
    if error_type == "Locked":
        return Locked(f"{client}: {message}")
    return ClientError(f"{client} failed: {error_type}: {message}", hint="see client.log_tail() for its stderr")
