"""The helpers of the etcd lesson: polling with a deadline, exact wakeup counts per
release for the Mutex port and python-etcd3's Lock, and the lease count, on real etcd."""
from __future__ import annotations

import time
import uuid

import pytest

from labkit.record.checker import check_fifo
from labkit.lessons.etcd_leases import count_etcd_wakeups, etcd3_lock_contenders, lease_ids, mutex_contenders, wait_until

# python3-etcd3 0.13's watch thread ends with NameError (a missing `six` import) when a
# client that watched is closed; the lab's clients patch it, this keeps any leftover quiet.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Exception in thread etcd3_watch:pytest.PytestUnhandledThreadExceptionWarning")


def unique(name: str) -> str:
    return f"/lessons-{name}-{uuid.uuid4().hex[:8]}"


def test_wait_until_returns_the_time_it_took_once_the_condition_holds():
    started = time.monotonic()
    assert wait_until(lambda: time.monotonic() - started > 0.05, "50 ms to pass") >= 0.05


def test_wait_until_names_what_never_happened():
    with pytest.raises(TimeoutError, match="the moon to turn blue"):
        wait_until(lambda: False, "the moon to turn blue", timeout=0.1)


def test_the_mutex_wakes_exactly_one_waiter_per_release(lab):
    history = count_etcd_wakeups(mutex_contenders(lab.etcd, unique("mutex"), ttl=10), waiters=3)
    assert history.wakeups_per_release() == [1, 1, 1]
    verdict = check_fifo(history)
    assert verdict.ok, verdict.explain()


def test_python_etcd3_lock_wakes_every_waiter_still_waiting(lab):
    history = count_etcd_wakeups(etcd3_lock_contenders(lab.etcd, unique("herd").strip("/"), ttl=30), waiters=3)
    assert history.wakeups_per_release() == [3, 2, 1]
    assert len(history.events(kind="released")) == 4


def test_count_wakeups_refuses_zero_waiters(lab):
    with pytest.raises(ValueError, match="at least 1"):
        count_etcd_wakeups(mutex_contenders(lab.etcd, unique("none")), waiters=0)


def test_lease_ids_see_a_granted_and_a_revoked_lease(lab):
    client = lab.etcd.client()
    try:
        lease = client.lease(30)
        assert lease.id in lease_ids(lab.etcd)
        lease.revoke()
        assert lease.id not in lease_ids(lab.etcd)
    finally:
        client.close()
