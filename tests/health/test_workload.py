"""SteadyWorkload on real client processes, through the lab's proxy: a release that meets a
dropped connection is sent again, so a blip on a loaded machine never leaves the holder's
node in place (lesson 06's healthy stretch waited 60 s behind such a node in a fresh-clone
run: the loop had taken the failed release as a failed round and queued again)."""
from __future__ import annotations

import threading

import pytest

from labkit.clients import spawn_clients
from labkit.health import SteadyWorkload
from labkit.errors import WaitTimedOut


@pytest.fixture(scope="module")
def netlab(lab_of):
    return lab_of(zookeeper=1, etcd=0, network=True)


def test_a_release_that_meets_a_blip_is_sent_again_and_frees_the_lock(netlab, unique_name):
    lab = netlab
    with spawn_clients(lab, "zookeeper", n=2, name=f"/workload/{unique_name}", session_timeout=10,
                       proxied=True) as clients:
        holder, waiter = clients["client-1"], clients["client-2"]
        workload = SteadyWorkload([holder], hold=120, think=0.05).start()   # only take_out ends the hold
        try:
            clients.history.wait_for("acquired", client="client-1", timeout=30)
            lab.isolate("client-1")
            taking = threading.Thread(target=workload.take_out, args=("client-1", 90), daemon=True)
            taking.start()                     # ends the hold: the loop's release meets the cut
            # the precondition, forced: the loop's first release failed as release() fails
            [failed] = clients.history.wait_for("error", client="client-1", timeout=30)
            assert "ConnectionLoss" in failed.detail["message"], failed.detail
            lab.heal()
            taking.join(90)
            assert not taking.is_alive(), f"take_out did not return after the heal: {holder.state}"
            assert holder.state == "idle"
            waiter.acquire(timeout=10)         # the holder's node is gone; its session lives on
            waiter.release()
        finally:
            lab.heal()
            workload.stop(timeout=60)
        assert not [error for name, error in workload.errors if "ConnectionLoss" in error], workload.errors


def test_waiting_for_rounds_says_which_client_is_stuck(netlab, unique_name):
    with spawn_clients(netlab, "zookeeper", n=2, name=f"/workload/{unique_name}", session_timeout=10) as clients:
        blocker = clients["client-2"]
        blocker.acquire(timeout=10)            # client-1's loop queues behind it and never gets a round
        workload = SteadyWorkload([clients["client-1"]], hold=0.01, think=0.01).start()
        try:
            with pytest.raises(WaitTimedOut, match=r"client-1 0 \(waiting\)"):
                workload.wait_for_rounds(1, timeout=2)
        finally:
            blocker.release()
            workload.stop(timeout=30)
        assert workload.rounds["client-1"] >= 1
