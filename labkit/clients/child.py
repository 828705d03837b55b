"""The lock client process: ``python -m labkit.clients.child SPEC_JSON``.

It builds its own lock (``labkit.locks.registry.make_lock``) on its own connections,
executes commands read from stdin and writes events, session changes and replies to
stdout as JSON lines (see ``labkit.clients.client.LockClient`` for the other side).

What can fail: a spec it cannot build a lock from (the error goes to stderr and the
process exits, so the notebook side reports it with the stderr lines); a command whose
recipe call raises (the error is sent back as the reply; the child keeps serving).
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

import redis

from labkit.errors import LabError

from labkit.locks.registry import login as registry_login, make_lock, recipe_named
from labkit.record.fencing import FencedStore
from labkit.record.events import sink_for
from labkit.servers.secret import login_for


class ChildError(LabError):
    """A command this client process cannot carry out (sent back to the notebook as the reply)."""


class _Child:
    """Runs in the client process: builds its own lock, executes commands from stdin,
    writes events, session changes and replies to stdout as JSON lines."""

    def __init__(self, spec: dict[str, Any], output: Any):
        self.spec = spec
        self.name = spec["client"]
        self.recipe = recipe_named(spec["recipe"])   # the spec carries its name across the pipe
        self._output = output
        self._output_lock = threading.Lock()
        self._stop_loop = threading.Event()
        self._last_session: dict[str, Any] | None = None
        self.token: Any = None
        self.on_event = sink_for(self.name, lambda event: self.send(type="event", event=event.to_dict()))
        self.handle = make_lock(self.recipe, spec["connections"], spec["name"], self.name, self.on_event,
                                spec["session_timeout"], spec["ttl"], spec.get("holders", 1))
        self.store = None
        if spec.get("store"):
            store = spec["store"]
            # the store may be another lab's Redis (the torture runs keep it apart): log in to
            # the lab at its address, else as the lock's connections do (a store behind a relay)
            address = f"{store['host']}:{store['port']}"
            login = login_for(address, "redis") or registry_login(dict(spec["connections"], redis=address), "redis")
            self.store = FencedStore(redis.Redis(host=store["host"], port=store["port"], **login), store["name"],
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
            self.handle = make_lock(self.recipe, self.spec["connections"], self.spec["name"], self.name,
                                    self.on_event, self.spec["session_timeout"], self.spec["ttl"],
                                    self.spec.get("holders", 1))
            self.report_session()  # before waiting: a fault aimed at this client must hit the new lease
        self.token = self.handle.lock.acquire(timeout=timeout)
        self.report_session()
        return self.token

    def release(self) -> None:
        self.handle.lock.release()
        self.token = None

    def write(self, value: str) -> bool:
        if self.store is None:
            raise ChildError(f"{self.name} has no store to write to",
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
                self.reply(command, error=ChildError(f"recipe {self.recipe.name!r} has no keep-alive"))
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
    """Entry point of ``python -m labkit.clients.child SPEC_JSON``."""
    if len(argv) != 1:
        print("python -m labkit.clients.child runs one lock client for spawn_clients(); it talks JSON lines "
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


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
