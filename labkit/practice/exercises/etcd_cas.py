"""Exercise (lesson 03): add one to a counter in etcd with a compare-and-swap transaction.

The learner writes

    def add_one(client, key) -> None      # client: a python-etcd3 client; key holds an integer

``check_etcd_cas(add_one, lab)`` runs it on the lab's real etcd:

1. alone: three calls make 0 into 3;
2. a writer in the window: right after the learner's read of the key, another client
   adds one (for real, through etcd). A plain get-then-put overwrites that write (a lost
   update); a transaction comparing the key's mod revision fails and must be retried;
3. four threads add ten each at the same time: the counter must reach 40.

Which mistake it was is read from etcd's own record: if the key's mod revision is newer
than the other writer's put, the learner wrote on top of it from a stale read (lost
update); if not, the learner's write never happened (a failed txn that was not retried).

What can fail: ``ExerciseError`` if ``add_one`` is not callable; python-etcd3's connection
errors if the lab's etcd cannot be reached. The learner's own exceptions are reported.
"""
from __future__ import annotations

import threading
import uuid
from typing import TYPE_CHECKING, Any, Callable

from labkit.practice.exercises.report import Report, learner_function

if TYPE_CHECKING:
    from labkit.servers.lab import Lab

PROPERTIES = ("counts alone", "no lost update", "retries a failed compare", "counts under concurrency")


class RacingEtcd:
    """A python-etcd3 client (every attribute passes through) that, once armed, lets another
    client write the key right after the learner's next ``get`` of it was answered."""

    def __init__(self, client: Any):
        self._client = client
        self._hooks: dict[str, Callable[[], None]] = {}
        self.raced: list[str] = []      # the keys whose hook ran

    def after_next_get(self, key: str, hook: Callable[[], None]) -> None:
        self._hooks[key] = hook

    def get(self, key: Any, **kwargs: Any):
        answer = self._client.get(key, **kwargs)
        name = key.decode() if isinstance(key, bytes) else key
        hook = self._hooks.pop(name, None)
        if hook is not None:
            self.raced.append(name)
            hook()
        return answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def check_etcd_cas(add_one: Callable, lab: Lab, threads: int = 4, per_thread: int = 10) -> Report:
    """Run ``add_one(client, key)`` alone, with a writer in the window, and in threads."""
    learner_function(add_one, hint="pass add_one(client, key), which reads the integer at key and writes it plus one")
    report = Report("etcd compare-and-swap exercise", properties=PROPERTIES)
    key = f"/exercises/cas-{uuid.uuid4().hex[:8]}"
    other, clients = lab.etcd.client(), [lab.etcd.client() for _ in range(threads)]
    try:
        _alone(report, add_one, clients[0], other, key)
        _writer_in_the_window(report, add_one, clients[0], other, key)
        _concurrent(report, add_one, clients, other, key, per_thread)
    finally:
        other.delete(key)
        for client in clients + [other]:
            client.close()
    report.stop_clock()
    return report


def _read(client: Any, key: str) -> tuple[int, int]:
    value, meta = client.get(key)
    return int(value), meta.mod_revision


def _alone(report: Report, add_one: Callable, client: Any, other: Any, key: str) -> None:
    report.scenarios.append("three calls, nobody else writing")
    other.put(key, "0")
    try:
        for _ in range(3):
            add_one(client, key)
    except Exception as error:
        report.judge("counts alone", False, f"add_one raised {type(error).__name__}: {error}", "raised")
        return
    value, _ = _read(other, key)
    report.judge("counts alone", value == 3, f"0 became {value} after three calls" +
                 ("" if value == 3 else ": each call must add exactly one"), None if value == 3 else "wrong count")


def _writer_in_the_window(report: Report, add_one: Callable, client: Any, other: Any, key: str) -> None:
    report.scenarios.append("another client adds one between the learner's read and write (three times)")
    other.put(key, "0")
    racing = RacingEtcd(client)
    for _ in range(3):
        before, _ = _read(other, key)
        other_write: dict[str, int] = {}

        def another_client_adds_one() -> None:
            value, _ = _read(other, key)
            other_write["revision"] = other.put(key, str(value + 1)).header.revision

        racing.after_next_get(key, another_client_adds_one)
        try:
            add_one(racing, key)
        except Exception as error:
            report.judge("no lost update", False, f"add_one raised {type(error).__name__}: {error}", "raised")
            return
        after, mod_revision = _read(other, key)
        if "revision" not in other_write:
            report.judge("no lost update", False, "add_one never read the key with client.get(key): "
                         "read the value and its mod revision first", "no read")
            return
        if after == before + 2:
            continue
        if mod_revision > other_write["revision"]:
            report.judge("no lost update", False,
                         f"lost update: the other client wrote {before + 1} after your read; your put wrote "
                         f"{after} from the old value and erased its write. Put inside "
                         "client.transaction(compare=[client.transactions.mod(key) == revision_you_read], ...)",
                         "lost update")
        else:
            report.judge("retries a failed compare", False,
                         f"your compare failed (the other client wrote in between) and add_one returned without "
                         f"writing: the counter is {after}, not {before + 2}. Read again and retry until the "
                         "transaction succeeds", "no retry")
        return
    report.judge("no lost update", True, "the other client's writes survived: each write compared the revision")
    report.judge("retries a failed compare", True, "every failed compare was retried until it succeeded")


def _concurrent(report: Report, add_one: Callable, clients: list, other: Any, key: str, per_thread: int) -> None:
    report.scenarios.append(f"{len(clients)} threads add {per_thread} each at the same time")
    other.put(key, "0")
    errors: list[BaseException] = []
    go = threading.Event()

    def worker(client: Any) -> None:
        go.wait()
        try:
            for _ in range(per_thread):
                add_one(client, key)
        except Exception as error:
            errors.append(error)

    workers = [threading.Thread(target=worker, args=(client,), daemon=True) for client in clients]
    for thread in workers:
        thread.start()
    go.set()
    for thread in workers:
        thread.join(60)
    expected = len(clients) * per_thread
    value, _ = _read(other, key)
    if any(thread.is_alive() for thread in workers):
        report.judge("counts under concurrency", False, "add_one was still running after 60 s: a retry loop "
                     "that never succeeds? Read the revision afresh on every try", "stuck")
    elif errors:
        report.judge("counts under concurrency", False,
                     f"add_one raised {type(errors[0]).__name__}: {errors[0]}", "raised")
    else:
        report.judge("counts under concurrency", value == expected,
                     f"the counter reached {value} of {expected}" +
                     ("" if value == expected else f": {expected - value} increments were lost"),
                     None if value == expected else "lost update")
