"""What each client of a lock panel does on its own (labkit/widgets/driver.py), with real client
processes on the session lab's ZooKeeper and a fenced store on its Redis: two drivers take
the lock in turn, each holder writing to the store while it holds, never two at once (judged
from the store's record), and closing the panel ends both loops even while one of them waits
for the lock; a driver without writes only acquires and releases; a client whose process was
killed ends its loop with a note, and the other takes the lock once its session expired. The panel around them:
tests/widgets/test_widgets.py."""
from __future__ import annotations

import threading

import pytest

from labkit.clients import spawn_clients
from labkit.record.checker import check_mutual_exclusion
from labkit.timing import wait_until
from labkit.widgets.driver import ClientDriver

PATIENCE = 30.0


def drivers_of(clients, stopping, errors, writes=True, hold=1.0):
    drivers = [ClientDriver(client, stopping, lambda: hold, writes, lambda name, text: errors.append((name, text)))
               for client in clients]
    for driver in drivers:
        driver.start()
    return drivers


def acquisitions(history, name):
    return len(history.events(client=name, kind="acquired"))


@pytest.mark.slow   # four holds of at least a second each (a write a second), client processes
def test_two_drivers_take_the_lock_in_turn_writing_while_they_hold_and_stop_when_closed(lab, fenced_store, unique_name):
    stopping, errors = threading.Event(), []
    with spawn_clients(lab, "zookeeper", n=2, name=unique_name, store=fenced_store) as clients:
        drivers = drivers_of(clients, stopping, errors)
        try:
            wait_until(lambda: all(acquisitions(clients.history, name) >= 2 for name in ("client-1", "client-2")),
                       "both clients holding twice", PATIENCE)
        finally:
            stopping.set()
        for driver in drivers:
            driver.thread.join(PATIENCE)
        assert not any(driver.thread.is_alive() for driver in drivers), "closing ends both loops"
        assert errors == [] and [driver.note for driver in drivers] == ["", ""]
    writes = fenced_store.writes()
    assert {write.client for write in writes} == {"client-1", "client-2"}
    assert all(write.value.startswith(f"{write.client} step ") for write in writes)
    verdict = check_mutual_exclusion(writes)
    assert verdict.ok, verdict.summary


def test_a_driver_without_writes_only_acquires_and_releases(lab, fenced_store, unique_name):
    stopping, errors = threading.Event(), []
    with spawn_clients(lab, "zookeeper", n=1, name=unique_name, store=fenced_store) as clients:
        [driver] = drivers_of(clients, stopping, errors, writes=False, hold=0.1)
        try:
            wait_until(lambda: len(clients.history.events(client="client-1", kind="released")) >= 2,
                       "two holds released", PATIENCE)
        finally:
            stopping.set()
        driver.thread.join(PATIENCE)
        assert not driver.thread.is_alive() and errors == []
    assert fenced_store.writes() == []


@pytest.mark.slow   # a session timeout after the kill, client processes
def test_a_killed_client_ends_its_loop_with_a_note_and_the_other_takes_over(lab, fenced_store, unique_name):
    stopping, errors = threading.Event(), []
    with spawn_clients(lab, "zookeeper", n=2, name=unique_name, store=fenced_store, session_timeout=1.0) as clients:
        holder, waiter = drivers_of(clients, stopping, errors, hold=60.0)
        try:
            wait_until(lambda: acquisitions(clients.history, "client-1") + acquisitions(clients.history, "client-2") >= 1,
                       "a first holder", PATIENCE)
            [holding] = [driver for driver in (holder, waiter) if acquisitions(clients.history, driver.client.name)]
            other = waiter if holding is holder else holder
            holding.client.kill()
            holding.thread.join(PATIENCE)
            assert not holding.thread.is_alive() and holding.note == "its process is gone"
            wait_until(lambda: acquisitions(clients.history, other.client.name) >= 1,
                       "the other client holding once the dead one's session expired", PATIENCE)
        finally:
            stopping.set()
        other.thread.join(PATIENCE)
        assert not other.thread.is_alive() and other.note == ""
        # (errors is not asserted empty: for a moment after the kill the process's pipe can be
        # closed while poll() does not report it dead yet, and a write failing then is reported)
        assert all(name == holding.client.name for name, _ in errors), errors
