"""labkit/harness/cut_off.py: which labs a cut-off race refuses, where it seats the holder, and
how it runs again a race that proved nothing (the Curator and semaphore races use it)."""
from __future__ import annotations

import pytest

from labkit.harness.cut_off import VOID_RETRIES, again_if_void, ensemble_to_cut, seats


class Void(RuntimeError):
    pass


def test_a_void_run_runs_again_and_the_first_that_counts_is_returned():
    tries = []

    def race():
        tries.append(len(tries))
        if len(tries) < 3:
            raise Void("the holder gave up before the fault")
        return "a run that counts"

    assert again_if_void(race, (Void,)) == "a run that counts" and tries == [0, 1, 2]


def test_a_race_void_every_time_raises_after_the_retries_and_other_errors_at_once():
    tries = []

    def always_void():
        tries.append(1)
        raise Void("void")

    with pytest.raises(Void):
        again_if_void(always_void, (Void,))
    assert len(tries) == VOID_RETRIES + 1
    with pytest.raises(ValueError):
        again_if_void(lambda: (_ for _ in ()).throw(ValueError("a real failure")), (Void,))


def test_a_lab_of_another_shape_is_refused_with_the_lab_it_needs(lab):
    # the session lab: one ZooKeeper server, no network layer
    with pytest.raises(ValueError, match=r"my_race needs a lab with 3 ZooKeeper members and network=True"):
        ensemble_to_cut(lab, "my_race")


def test_the_holder_sits_on_the_standalone_leader_only_for_old_leader(lab):
    holder, others = seats(lab.etcd, "old-leader")      # one member: the leader
    assert holder.name == lab.etcd.nodes[0].name and others == []
    with pytest.raises(ValueError, match="has only its leader .*start it with 3 members"):
        seats(lab.etcd, "follower-cut")                  # no follower to seat it on
