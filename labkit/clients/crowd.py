"""Many contenders of one lock over a few worker processes (``labkit.clients.crowd_worker``),
each worker holding many sessions: a thousand contenders then measure the coordinator and
the recipe, not one interpreter's threads (one process with 1000 KazooClients cannot even
keep their sessions alive on 2 cores).

``Crowd.lock_factory()`` gives the same kind of factory as ``labkit.locks.registry.lock_factory``,
so ``labkit.harness.handoff.hand_off`` drives a crowd exactly as it drives threads: each
contender's ``acquire``/``release`` becomes a command to its worker, and the worker's events
go, with their own time stamps, into the crowd's History::

    with Crowd(connections_of(lab), "zookeeper", "/locks/big", n=1000, workers=10) as crowd:
        run = hand_off(crowd.lock_factory(), 999, settled, releases=10, history=crowd.history)

What can fail: a worker that does not start (``CrowdError`` with its last stderr lines:
a server that does not answer, too many sessions for its timeout), a command that fails
in the worker (``CrowdError`` with the worker's message). ``close()`` (also at exit) closes
every session and stops every worker, with SIGKILL after a grace period: nothing is left.
"""
from __future__ import annotations

import atexit
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable

from labkit.errors import LabError
from labkit.locks.registry import LockFactory, Recipe, RecipeHandle, recipe_named
from labkit.record.events import Event, EventSink
from labkit.record.history import History
from labkit.timing import wait_until


class CrowdError(LabError):
    """A crowd worker did not start, or a command it ran failed."""


class _Worker:
    """One worker process and its pipe; replies are matched to commands by id."""

    def __init__(self, spec: dict[str, Any], crowd: "Crowd"):
        self.crowd = crowd
        self.stderr = tempfile.TemporaryFile()
        self.process = subprocess.Popen([sys.executable, "-m", "labkit.clients.crowd_worker", json.dumps(spec)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        self.ready = threading.Event()
        self.closed = threading.Event()
        # command id -> (set when its reply came or nobody will answer, the reply)
        self.pending: dict[int, tuple[threading.Event, dict[str, Any]]] = {}
        self.write_lock = threading.Lock()
        threading.Thread(target=self.read, name=f"crowd-worker-{self.process.pid}", daemon=True).start()

    def read(self) -> None:
        for line in self.process.stdout:
            message = json.loads(line)
            if message["type"] == "event":
                self.crowd.receive(Event.from_dict(message["event"]), message.get("monotonic"))
            elif message["type"] == "reply" and message["id"] in self.pending:
                answered, reply = self.pending[message["id"]]
                reply.update(message)   # the worker's reply carries no "client": ours stays
                answered.set()
            elif message["type"] == "ready":
                self.ready.set()
            elif message["type"] == "closed":
                self.closed.set()
        for answered, _ in list(self.pending.values()):   # the worker is gone: nobody will answer
            answered.set()

    def stderr_tail(self, lines: int = 12) -> str:
        self.stderr.seek(0)
        return "\n".join(self.stderr.read().decode(errors="replace").splitlines()[-lines:])

    def call(self, op: str, timeout: float | None = None, **arguments: Any) -> Any:
        """Send one command and wait for its reply. Raises CrowdError for a failure in the
        worker, a worker that died, or no reply within ``timeout`` seconds."""
        number = next(self.crowd.numbers)
        client = arguments.get("client")
        answered, reply = threading.Event(), {"client": client}   # the reply's fields land here
        self.pending[number] = (answered, reply)
        try:
            with self.write_lock:
                self.process.stdin.write(json.dumps({"op": op, "id": number, **arguments}) + "\n")
                self.process.stdin.flush()
            deadline = None if timeout is None else time.monotonic() + timeout
            # one Event per call: a reply wakes its own caller, not the hundred others waiting
            # (not wait_until: a thousand polls at once would cost the CPU the bench measures)
            while not answered.wait(5.0 if deadline is None else max(0.0, min(5.0, deadline - time.monotonic()))):
                if self.crowd.closing.is_set() or client in self.crowd.abandoned:
                    raise CrowdError(f"{client or 'crowd'}: abandoned while waiting for {op!r} (the crowd is closing)")
                if deadline is not None and time.monotonic() >= deadline:
                    raise CrowdError(f"worker {self.process.pid} did not answer {op!r} within {timeout:.0f} s")
        except (OSError, ValueError) as error:   # the pipe is closed: the worker is gone
            raise CrowdError(f"worker {self.process.pid} is gone: {error}", hint=self.stderr_tail()) from None
        finally:
            self.pending.pop(number, None)
        if "ok" not in reply:
            raise CrowdError(f"{client or 'crowd'}: abandoned or worker {self.process.pid} ended before answering {op!r}",
                             hint=self.stderr_tail() or "the crowd is closing")
        if not reply["ok"]:
            raise CrowdError(f"{op} {arguments.get('client', '')}: {reply['error']}")
        return reply["result"]


class RemoteLock:
    """A contender's lock as the harness sees it: each call runs in its worker."""

    def __init__(self, worker: _Worker, client: str):
        self.worker, self.client = worker, client

    def acquire(self, timeout: float | None = None) -> None:
        result = self.worker.call("acquire", client=self.client, timeout=timeout)
        self.worker.crowd.retries += result["retries"]

    def release(self) -> None:
        result = self.worker.call("release", client=self.client, timeout=60)
        self.worker.crowd.releases.append((result["started"], result["replied"]))


class Crowd:
    """``n`` contenders ``contender-0 .. contender-{n-1}`` of the lock ``name`` (recipe of
    ``labkit.locks.registry``), dealt round-robin over ``workers`` processes. Every
    session is open when the constructor returns (within ``start_timeout`` seconds).
    ``call_timeout``: the etcd client's deadline per call (python3-etcd3's default, 10 s,
    is too short for a herd of a thousand on 2 busy cores). ``share_client``: the etcd
    contenders of one worker share one client, each with its own lease (False: a client
    each, as separate programs would have; see ``labkit.clients.crowd_worker``). ``progress``:
    called with (workers ready, workers) as each one opens its sessions (a slow start shows);
    ``starting_at_once``: workers started side by side, each batch ready before the next starts."""

    def __init__(self, connections: dict[str, str], recipe: Recipe | str, name: str, n: int, workers: int = 10,
                 session_timeout: float = 30.0, ttl: float = 60.0, start_timeout: float = 120.0,
                 history: History | None = None, call_timeout: float = 120.0, share_client: bool = True,
                 progress: Callable[[int, int], Any] = lambda ready, workers: None, starting_at_once: int = 1000):
        if n < 1 or workers < 1:
            raise ValueError(f"a crowd needs at least one contender and one worker, got n={n}, workers={workers}")
        recipe = recipe_named(recipe)   # UnknownRecipe here, not in every worker
        self.names = [f"contender-{number}" for number in range(n)]
        self.history = history if history is not None else History()
        self.closing = threading.Event()
        self.numbers = itertools.count()
        self.listeners: list[EventSink] = []
        self.retries = 0   # acquires a worker tried again after losing its etcd connection
        # Every worker stamps with time.monotonic(), one clock for the whole machine on Linux
        # (CLOCK_MONOTONIC: never stepped, unlike the wall clock of the events' own stamps).
        self.releases: list[tuple[float, float]] = []   # each release: (began to let go, its reply came)
        self.acquired_at: dict[float, float] = {}   # an "acquired" event's time -> time.monotonic() then
        self.woke_at: dict[str, list[float]] = {}   # contender -> time.monotonic() of each of its "woke"
        self.abandoned: set[str] = set()   # contenders the harness let go: their calls stop waiting
        self.workers: list[_Worker] = []
        self.worker_of: dict[str, _Worker] = {}
        atexit.register(self.close)
        try:
            for index in range(min(workers, n)):
                clients = self.names[index::workers]
                spec = {"recipe": recipe.name, "connections": connections, "name": name, "clients": clients,
                        "session_timeout": session_timeout, "ttl": ttl, "call_timeout": call_timeout,
                        "share_client": share_client}
                worker = _Worker(spec, self)
                self.workers.append(worker)
                self.worker_of.update(dict.fromkeys(clients, worker))
                if len(self.workers) % starting_at_once == 0:   # this batch opens before the next starts
                    self.wait_ready(self.workers[-starting_at_once:], start_timeout, progress, min(workers, n))
            if len(self.workers) % starting_at_once:   # the last batch, if it is not full
                self.wait_ready(self.workers[-(len(self.workers) % starting_at_once):], start_timeout, progress,
                                len(self.workers))
            progress(len(self.workers), len(self.workers))
        except BaseException:
            self.close()
            raise

    def wait_ready(self, batch: list[_Worker], timeout: float, progress: Callable[[int, int], Any], total: int) -> None:
        """Wait until every worker of ``batch`` has opened its sessions (``timeout`` for each)."""
        for worker in batch:
            progress(self.workers.index(worker), total)
            wait_until(lambda: worker.ready.is_set() or worker.process.poll() is not None,
                       f"crowd worker {worker.process.pid} to open its sessions", timeout, poll=0.05)
            if not worker.ready.is_set():
                raise CrowdError(f"crowd worker {worker.process.pid} exited while opening its sessions",
                                 hint=worker.stderr_tail())

    def receive(self, event: Event, monotonic: float | None = None) -> None:
        """An event from a worker, with the worker's time stamps (the machine has one clock)."""
        if event.kind == "acquired" and monotonic is not None:
            self.acquired_at[event.time] = monotonic
        if event.kind == "woke" and monotonic is not None:
            self.woke_at.setdefault(event.client, []).append(monotonic)
        self.history.append(event)
        for listener in self.listeners:
            listener(event.kind, client=event.client, **event.detail)

    @property
    def pids(self) -> list[int]:
        return [worker.process.pid for worker in self.workers]

    def lock_factory(self) -> LockFactory:
        """``make(identifier, on_event)`` for ``hand_off``: the identifier picks the
        contender; events reach ``self.history`` (pass it to hand_off), not ``on_event``."""
        def make(identifier: str, on_event: EventSink) -> RecipeHandle:
            worker = self.worker_of[identifier]
            return RecipeHandle(RemoteLock(worker, identifier), close=lambda: self.abandon(identifier))
        return make

    def abandon(self, client: str) -> None:
        """Stop waiting for ``client``'s replies (its session stays open until ``close()``)."""
        self.abandoned.add(client)
        worker = self.worker_of[client]
        for answered, reply in list(worker.pending.values()):
            if reply.get("client") == client:
                answered.set()

    def loop(self, seconds: float) -> int:
        """Every contender takes the lock and lets go again as fast as it can for
        ``seconds`` (a saturated queue); returns the acquisitions made in that time."""
        until = time.time() + seconds
        totals: list[int] = []
        threads = [threading.Thread(target=lambda worker=worker: totals.append(
            worker.call("loop", timeout=seconds + 120, until=until))) for worker in self.workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if len(totals) != len(self.workers):
            raise CrowdError("a crowd worker failed while looping", hint=self.workers[0].stderr_tail())
        return sum(totals)

    def close(self, grace: float = 60.0) -> None:
        """Close every session (each worker closes its own, in parallel) and stop every
        worker; a worker still running after ``grace`` seconds is killed."""
        self.closing.set()
        for worker in self.workers:
            try:
                worker.process.stdin.write(json.dumps({"op": "exit"}) + "\n")
                worker.process.stdin.close()
            except (OSError, ValueError):   # already gone
                pass
        deadline = time.monotonic() + grace
        for worker in self.workers:
            try:
                worker.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"(crowd worker {worker.process.pid} did not stop within {grace:.0f} s: killed; "
                      "its sessions end when the server times them out)", file=sys.stderr)
                worker.process.kill()
                worker.process.wait()
            worker.stderr.close()
        atexit.unregister(self.close)

    def __enter__(self) -> "Crowd":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def running(pids: list[int]) -> list[int]:
    """The pids of ``pids`` that still exist (a check that a crowd left nothing behind)."""
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        except PermissionError:
            pass
        alive.append(pid)
    return alive
