"""The workload of a torture run (labkit/torture/workload.py), on the session lab's real
ZooKeeper with real client processes writing to a fenced store on its Redis, with no nemesis:
every client takes the lock again and again, one at a time (judged from the store's own
record); a client killed under it is replaced by a new process of the same name that takes
part again (``rejoined``); ``stop`` ends every loop and the threads; a loop that fails is
counted by its error's name with its first message. The nemeses and verdicts:
test_torture.py, test_torture_nemeses.py."""
from __future__ import annotations

import pytest

from labkit.clients import spawn_clients
from labkit.record.checker import check_mutual_exclusion
from labkit.torture.workload import TortureWorkload
from labkit.timing import wait_until

HOLD = 0.05
PATIENCE = 30.0


def holds_of(history, name):
    return len(history.events(client=name, kind="acquired"))


def test_every_client_takes_the_lock_in_turn_a_killed_one_rejoins_and_stop_ends_it(lab, fenced_store, unique_name):
    with spawn_clients(lab, "zookeeper", n=2, name=unique_name, store=fenced_store, session_timeout=1.0) as clients:
        workload = TortureWorkload(clients, HOLD)
        workload.start()
        try:
            wait_until(lambda: all(holds_of(clients.history, name) >= 2 for name in ("client-1", "client-2")),
                       "both clients holding twice", PATIENCE)
            killed = clients["client-1"]
            killed.kill()
            wait_until(lambda: workload.rejoined >= 1 and clients["client-1"] is not killed,
                       "client-1 replaced", PATIENCE)
            before = holds_of(clients.history, "client-1")
            wait_until(lambda: holds_of(clients.history, "client-1") > before, "the new client-1 holding", PATIENCE)
        finally:
            workload.stop(timeout=PATIENCE)
        assert not any(thread.is_alive() for thread in workload._threads), "stop ends every loop's thread"
        assert workload.rejoined == 1 and clients["client-1"].pid != killed.pid
    writes = fenced_store.writes()
    assert {write.client for write in writes} == {"client-1", "client-2"}
    verdict = check_mutual_exclusion(writes)
    assert verdict.ok, verdict.summary


@pytest.mark.no_servers
def test_a_failed_loop_is_counted_by_its_errors_name_with_its_first_message():
    workload = TortureWorkload([], HOLD)
    workload._note(TimeoutError("the lock did not come\nsecond line"))
    workload._note(TimeoutError("another"))
    workload._note(ConnectionError(""))
    assert workload.problems == {"TimeoutError": 2, "ConnectionError": 1}
    assert workload.examples == {"TimeoutError": "the lock did not come", "ConnectionError": "ConnectionError"}
