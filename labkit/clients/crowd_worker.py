"""One worker of a crowd: ``python -m labkit.clients.crowd_worker SPEC_JSON``.

It holds many contenders of one lock, each with a session of its own, so that a thousand
contenders spread over a few processes measure the coordinator and the recipe rather than
one Python interpreter's threads and pings. A ZooKeeper session is a connection, so each
ZooKeeper contender has its own (``labkit.locks.registry.make_lock``). An etcd session is
a lease, not a connection: the etcd contenders of one worker share one client (one gRPC
channel, one watch stream carrying every waiter's watch), each with its own lease, as Go's
concurrency package runs many sessions over one client (``labkit.locks.registry.etcd_mutex_on``;
python-etcd3's Lock grants a lease per attempt anyway: ``etcd3_lock_on``). A thousand gRPC
channels, one per contender, were what made a thousand-contender hand-off slow: the load
average went past 100 on 2 cores. It talks JSON lines like ``labkit.clients.child``: commands on stdin
(``acquire``/``release`` for one contender, ``loop`` for all of them, ``exit``), events
and replies on stdout (see ``labkit.clients.crowd.Crowd`` for the other side).

What can fail: a contender whose session cannot be opened (the error goes to stderr and
the process exits with status 1: the crowd reports it with the stderr lines); a
recipe call that raises (sent back as the reply; the worker keeps serving; an acquire
that lost its etcd connection is first tried again, up to RETRIES times, and counted). On ``exit``
or when stdin closes, every session is closed, in parallel, and the process ends.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import etcd3.exceptions

from labkit.locks.registry import (RecipeHandle, etcd3_lock_on, etcd_client_for, etcd_mutex_on, make_lock,
                                   recipe_named)
from labkit.record.events import Event

RETRIES = 3   # tries of an acquire that lost its etcd connection, before the error goes to the harness
# recipes whose contenders in one worker share one client (their sessions are leases), and
# how each contender's lock is made on it: (client, name, identifier, on_event, ttl) -> RecipeHandle
SHARED_CLIENT = {"etcd": etcd_mutex_on, "etcd3-lock": etcd3_lock_on}
OPENING_THREADS = 16   # sessions opened at once: enough to hide the round trips, few enough not to swamp 2 cores


class CrowdWorker:
    """The contenders of one worker process and the pipe to the crowd."""

    def __init__(self, spec: dict[str, Any], output: Any):
        self.spec = spec
        self.recipe = recipe_named(spec["recipe"])   # the spec carries its name across the pipe
        self._output = output
        self._output_lock = threading.Lock()
        self.quiet = threading.Event()   # set while looping for throughput: events would only cost
        self.handles: dict[str, RecipeHandle] = {}
        self.shared_client: Any = None
        if self.recipe.name in SHARED_CLIENT and spec.get("share_client", True):
            self.shared_client = etcd_client_for(spec["connections"], self.recipe.name)
            self.set_call_timeout(self.shared_client)
        with ThreadPoolExecutor(OPENING_THREADS) as pool:
            opened = pool.map(self.open, spec["clients"])
            self.handles = dict(zip(spec["clients"], opened))

    def open(self, client: str) -> RecipeHandle:
        def on_event(kind: str, **detail: Any) -> None:
            if not self.quiet.is_set():   # both clocks at once: hand-offs are timed on the monotonic one
                stamp, monotonic = time.time(), time.monotonic()
                self.send(type="event", event=Event(stamp, client, kind, detail).to_dict(), monotonic=monotonic)
        if self.shared_client is not None:
            make = SHARED_CLIENT[self.recipe.name]
            return make(self.shared_client, self.spec["name"], client, on_event, self.spec["ttl"])
        handle = make_lock(self.recipe, self.spec["connections"], self.spec["name"], client, on_event,
                           self.spec["session_timeout"], self.spec["ttl"])
        if handle.extra.get("etcd") is not None:
            self.set_call_timeout(handle.extra["etcd"])
        return handle

    def set_call_timeout(self, etcd: Any) -> None:
        # python3-etcd3's deadline per call (10 s): a herd of a thousand on 2 busy cores can
        # queue a call longer than that, and a missed deadline would end the measurement
        if self.spec.get("call_timeout"):
            etcd.timeout = self.spec["call_timeout"]

    def send(self, **message: Any) -> None:
        line = json.dumps(message, default=str) + "\n"
        with self._output_lock:
            self._output.write(line)
            self._output.flush()

    def reply(self, command: dict[str, Any], result: Any = None, error: BaseException | None = None) -> None:
        if error is None:
            self.send(type="reply", id=command["id"], ok=True, result=result)
        else:
            self.send(type="reply", id=command["id"], ok=False, error=f"{type(error).__name__}: {error}")

    def execute(self, command: dict[str, Any]) -> None:
        """One command (acquire and loop in a thread of their own: a contender blocked in
        acquire must not hold up the others)."""
        try:
            if command["op"] == "loop":
                result: Any = self.loop(command["until"])
            else:
                lock = self.handles[command["client"]].lock
                result = None
                if command["op"] == "acquire":
                    result = {"retries": self.acquire(lock, command.get("timeout"))}
                else:   # when the holder began to let go and when its release was answered: a
                    # hand-off's start (two ways), without the pipe to this worker
                    started = time.monotonic()
                    lock.release()
                    result = {"started": started, "replied": time.monotonic()}
        except Exception as error:  # the crowd re-raises it; the worker keeps serving
            self.reply(command, error=error)
        else:
            self.reply(command, result)

    def acquire(self, lock: Any, timeout: float | None) -> int:
        """``lock.acquire``, tried again (at most RETRIES times) when the etcd client loses
        its connection: with a thousand sessions on 2 busy cores, gRPC now and then answers
        UNAVAILABLE. Returns how many tries failed, so the harness reports them."""
        for retries in range(RETRIES + 1):
            try:
                lock.acquire(timeout=timeout)
                return retries
            except (etcd3.exceptions.ConnectionFailedError, etcd3.exceptions.ConnectionTimeoutError):
                if retries == RETRIES:
                    raise
                time.sleep(0.5 * (retries + 1))
        return RETRIES

    def loop(self, until: float) -> int:
        """Every contender acquires and releases at once again, until the wall clock says
        ``until``: a saturated queue. Returns the acquisitions this worker made."""
        counts = dict.fromkeys(self.handles, 0)

        def take_turns(client: str) -> None:
            lock = self.handles[client].lock
            while time.time() < until:
                lock.acquire(timeout=max(1.0, until - time.time() + 30))
                counts[client] += 1
                lock.release()

        self.quiet.set()
        try:
            threads = [threading.Thread(target=take_turns, args=(client,), daemon=True) for client in self.handles]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            self.quiet.clear()
        return sum(counts.values())

    def close(self) -> None:
        """Close every session at once (one after the other, a herd would re-check the
        whole queue after every single close); a session already gone is what we wanted."""
        def close_one(handle: RecipeHandle) -> None:
            try:
                handle.close()
            except Exception as error:
                print(f"(closing a session: {error!r})", file=sys.stderr)
        with ThreadPoolExecutor(max(1, len(self.handles))) as pool:
            list(pool.map(close_one, self.handles.values()))
        if self.shared_client is not None:
            self.shared_client.close()

    def serve(self, commands: Any) -> None:
        for line in commands:
            command = json.loads(line)
            if command["op"] == "exit":
                break
            if command["op"] == "release":   # quick, never blocks for long: no thread to start first
                self.execute(command)
            else:
                threading.Thread(target=self.execute, args=(command,), daemon=True).start()
        self.quiet.set()
        self.close()
        self.send(type="closed")


def worker_main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("python -m labkit.clients.crowd_worker runs contenders for labkit.clients.crowd.Crowd; "
              "it talks JSON lines on stdin/stdout. Start a crowd from Python instead.", file=sys.stderr)
        return 2
    spec = json.loads(argv[0])
    output = os.fdopen(os.dup(1), "w")   # the protocol owns the pipe; libraries print to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    worker = CrowdWorker(spec, output)
    worker.send(type="ready", pid=os.getpid())
    worker.serve(sys.stdin)
    sys.stderr.flush()
    os._exit(0)   # grpc and kazoo threads may linger: the sessions are closed, leave now


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
