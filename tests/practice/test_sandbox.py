"""The in-memory recipe model: pure logic, no server."""
import pytest

from labkit.errors import LabError
from labkit.practice.sandbox import (MutualExclusionViolated, Sandbox, StrategyError, Stuck, View,
                            evaluate, watch_predecessor)

pytestmark = pytest.mark.no_servers  # the Python-versions leg runs these


def drained(strategy, clients):
    sim = Sandbox(strategy)
    sim.add_clients(clients)
    sim.drain()
    return sim


@pytest.mark.parametrize("clients", range(1, 51))
def test_predecessor_wakes_exactly_one_waiter_per_release(clients):
    sim = drained("predecessor", clients)
    # Every release but the last has a waiter behind it; the last has nobody to wake.
    assert sim.wakeups_per_release() == [1] * (clients - 1) + [0]
    assert sim.violations == []


@pytest.mark.parametrize("clients", [1, 2, 10, 50])
def test_parent_watch_wakes_every_waiter(clients):
    sim = drained("parent", clients)
    assert sim.wakeups_per_release() == list(range(clients - 1, -1, -1))
    assert sim.violations == []


def test_lowest_watch_is_a_herd_too():
    assert drained("lowest", 10).wakeups_per_release()[0] == 9


def test_first_release_with_ten_waiters():
    for strategy, woken in (("parent", 10), ("predecessor", 1)):
        sim = Sandbox(strategy)
        sim.add_clients(11)
        sim.run()                      # parent watchers also wake on every newcomer's create
        sim.release("c1")
        sim.run()
        assert sim.wakeups_per_release() == [woken]
        assert sim.holders() == ["c2"]


@pytest.mark.parametrize("strategy", ["predecessor", "parent", "lowest"])
def test_served_in_creation_order(strategy):
    sim = drained(strategy, 12)
    assert sim.order() == sim.creation_order() == [f"c{n}" for n in range(1, 13)]


def test_sequence_numbers_count_creations_only_like_zookeeper():
    # the same schedule as tests/practice/test_zookeeper_sequence.py runs on the real server
    sim = Sandbox()
    sim.add_clients(2)
    sim.release("c1")
    sim.add_clients(1)
    assert [sim.clients[name].node for name in ("c1", "c2", "c3")] == [
        "lock-0000000000", "lock-0000000001", "lock-0000000002"]
    assert sim.coordinator.cversion == 4   # 3 creates + 1 delete: the Stat's cversion is no suffix


def test_middle_waiter_dies_successor_rechecks_and_keeps_waiting():
    sim = Sandbox("predecessor")
    sim.add_clients(4)
    sim.expire("c2")
    sim.run()
    assert sim.holders() == ["c1"]
    assert sim.waiting() == ["c3", "c4"]
    assert sim.trace()[-1] == ("c3 woke: predecessor lock-0000000001 deleted; re-checked; "
                               "still waiting behind lock-0000000000; watching lock-0000000000")
    assert sim.wakeups_per_release() == []        # a waiter leaving is not a release
    sim.release("c1")
    sim.run()
    assert sim.holders() == ["c3"]
    sim.check_mutual_exclusion()


def test_skipping_the_recheck_gives_two_holders_and_the_checker_says_so():
    sim = Sandbox("no-recheck")
    sim.add_clients(4)
    sim.expire("c2")
    sim.run()
    assert sim.holders() == ["c1", "c3"]
    assert sim.violations == [(sim.steps, ("c1", "c3"))]
    assert "!! two holders at once: c1, c3" in sim.trace()
    with pytest.raises(MutualExclusionViolated, match="c1 and c3"):
        sim.check_mutual_exclusion()


def test_expired_holder_counts_as_a_release():
    sim = Sandbox()
    sim.add_clients(3)
    sim.expire("c1")
    sim.run()
    assert sim.holders() == ["c2"]
    assert sim.wakeups_per_release() == [1]


def test_notification_for_an_expired_client_is_not_delivered():
    sim = Sandbox("parent")
    sim.add_clients(3)                 # c2's parent watch fired when c3 joined: queued
    sim.expire("c2")
    sim.run()
    assert "notification for c2 ignored: it is expired" in sim.trace()


def test_a_learner_strategy_function():
    seen = []

    def my_strategy(view: View) -> str:
        seen.append(view)
        if view.my_node == view.children[0]:
            return "hold"
        return view.children[view.children.index(view.my_node) - 1]

    sim = drained(my_strategy, 5)
    assert sim.order() == ["c1", "c2", "c3", "c4", "c5"]
    assert sim.wakeups_per_release() == [1, 1, 1, 1, 0]
    assert seen[0] == View("lock-0000000000", ("lock-0000000000",), None)
    assert seen[-1].woken_by == "lock-0000000003"
    assert evaluate(my_strategy).ok


def test_evaluate_rejects_the_broken_strategies():
    assert evaluate(watch_predecessor).ok
    parent = evaluate("parent")
    assert (parent.mutual_exclusion, parent.fifo, parent.most_wakeups_per_release) == (True, True, 9)
    assert not parent.ok
    no_recheck = evaluate("no-recheck")
    assert not no_recheck.mutual_exclusion and "c1 and c3" in str(no_recheck)


def test_evaluate_reports_a_deadlock():
    def watch_myself_later(view):   # watches the newest node: nobody wakes the middle
        if view.predecessor is None:
            return "hold"
        return view.children[-1] if view.children[-1] != view.my_node else "parent"

    verdict = evaluate(watch_myself_later)
    assert not verdict.progress and "deadlock" in str(verdict)
    with pytest.raises(Stuck, match="nobody holds the lock"):
        drained(watch_myself_later, 4)


def test_strategy_returning_nonsense_is_explained():
    sim = Sandbox(lambda view: "hold" if view.predecessor is None else "lock-9999999999")
    sim.add_clients(1)
    with pytest.raises(StrategyError, match="returned 'lock-9999999999' for c2"):
        sim.add_clients(1)


def test_misuse_errors_name_the_next_step():
    sim = Sandbox()
    sim.add_clients(2)
    with pytest.raises(LabError, match="c2 does not hold the lock") as error:
        sim.release("c2")
    assert "c1" in str(error.value)
    with pytest.raises(LabError, match="no client named 'c9'"):
        sim.expire("c9")
    with pytest.raises(StrategyError, match="unknown strategy"):
        Sandbox("herd")
