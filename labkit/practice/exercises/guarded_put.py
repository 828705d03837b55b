"""Exercise (lesson 05): write only while the lock is still mine, in the same etcd transaction.

After a coordinator failover, a lease revocation or a long pause, the lock may be gone
while its holder still runs. The holder's write must then fail. On etcd the check and
the write go in one transaction (Go's ``Mutex.IsOwner()``): compare that my lock key
still has the create revision it had when I queued, and put only then.

    def put_if_owner(client, lock_key, my_revision, key, value) -> bool   # True if written

``check_guarded_put(put_if_owner, lab)`` runs it on the lab's etcd with a real
``EtcdMutex``: while c1 holds; after c1's lease is revoked and c2 holds; and in the
race where c1's lease is revoked between c1's read of its lock key and its put.

What can fail: ``ExerciseError`` if ``put_if_owner`` is not callable; python-etcd3's
connection errors if the lab's etcd cannot be reached.
"""
from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Callable

from labkit.locks.etcd_mutex import EtcdMutex
from labkit.locks.etcd_session import EtcdSession
from labkit.practice.exercises.etcd_cas import RacingEtcd
from labkit.practice.exercises.report import Report, learner_function

if TYPE_CHECKING:
    from etcd3 import Etcd3Client

    from labkit.servers.lab import Lab

PROPERTIES = ("writes while holding", "refuses after the lock is lost", "check and write in one transaction")


def check_guarded_put(put_if_owner: Callable, lab: Lab) -> Report:
    """Run ``put_if_owner(client, lock_key, my_revision, key, value)`` and judge it."""
    learner_function(put_if_owner, hint="pass put_if_owner(client, lock_key, my_revision, key, value) -> bool")
    report = Report("guarded write exercise", properties=PROPERTIES)
    base = f"/exercises/guard-{uuid.uuid4().hex[:8]}"
    lock_prefix, data_key = f"{base}/lock", f"{base}/data"
    observer = lab.etcd.client()
    try:
        report.scenarios.append("c1 holds and writes; c1's lease is revoked, c2 holds, c1 writes late")
        _after_revoke(report, put_if_owner, lab, observer, lock_prefix, data_key)
        report.scenarios.append("c1's lease is revoked between c1's read of its lock key and its put")
        _race(report, put_if_owner, lab, observer, lock_prefix, data_key)
    finally:
        observer.delete_prefix(base)
        observer.close()
    report.stop_clock()
    return report


def _holder(lab: Lab, prefix: str, name: str) -> tuple[Any, EtcdSession, EtcdMutex]:
    client = lab.etcd.client()
    session = EtcdSession(client, ttl=10)
    mutex = EtcdMutex(session, prefix, name)
    mutex.lock(timeout=10)
    return client, session, mutex


def _put(report: Report, prop: str, put_if_owner: Callable, *args: Any) -> bool | None:
    try:
        return bool(put_if_owner(*args))
    except Exception as error:
        report.judge(prop, False, f"put_if_owner raised {type(error).__name__}: {error}", "raised")
        return None


def _value(client: Any, key: str) -> str | None:
    value, _ = client.get(key)
    return None if value is None else value.decode()


def _after_revoke(report: Report, put_if_owner: Callable, lab: Lab, observer: Etcd3Client, prefix: str,
                  key: str) -> None:
    c1_client, c1_session, c1 = _holder(lab, prefix, "c1")
    c2_client = c2_session = None
    try:
        lock_key, revision = c1.key, c1.token
        written = _put(report, "writes while holding", put_if_owner, c1_client, lock_key, revision, key, "c1 holds")
        if written is not None:
            value = _value(observer, key)
            report.judge("writes while holding", bool(written) and value == "c1 holds",
                         "c1's write went through while it held the lock" if value == "c1 holds" else
                         f"c1 holds the lock but its write did not land (value {value!r}): compare "
                         "client.transactions.create(lock_key) == my_revision", "refuses the holder")
        c1_session.revoke()
        c2_client, c2_session, c2 = _holder(lab, prefix, "c2")
        observer.put(key, "c2 holds")
        late = _put(report, "refuses after the lock is lost", put_if_owner, c1_client, lock_key, revision, key,
                    "c1 writes late")
        if late is not None:
            value = _value(observer, key)
            report.judge("refuses after the lock is lost", value == "c2 holds" and not late,
                         "c1's late write was refused: its lock key is gone" if value == "c2 holds" else
                         "c1's lease was revoked and c2 holds the lock, yet c1's put landed: the put is not "
                         "guarded by a compare on c1's lock key", "no guard")
    finally:
        for session in (c1_session, c2_session):
            if session is not None:
                session.close()
        for client in (c1_client, c2_client):
            if client is not None:
                client.close()


def _race(report: Report, put_if_owner: Callable, lab: Lab, observer: Etcd3Client, prefix: str, key: str) -> None:
    client, session, c1 = _holder(lab, prefix, "c1")
    racing = RacingEtcd(client)
    prop = "check and write in one transaction"
    try:
        observer.put(key, "before")
        lock_key, revision = c1.key, c1.token
        racing.after_next_get(lock_key, session.revoke)
        written = _put(report, prop, put_if_owner, racing, lock_key, revision, key, "c1 writes")
        if written is None:
            return
        value = _value(observer, key)
        if lock_key not in racing.raced:
            report.judge(prop, True, "the lock key was never read before the write: the compare ran inside the "
                         "transaction, with no window to lose the lock in")
        elif value == "before":
            report.judge(prop, True, "the lock was lost after the read, and the write was refused")
        else:
            report.judge(prop, False, "get, then put: after c1 read its lock key, its lease was revoked (the key "
                         "deleted), and the put still landed. Put the compare in the same transaction as the put",
                         "check then write")
    finally:
        session.close()
        client.close()
