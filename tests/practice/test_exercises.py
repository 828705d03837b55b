"""Auto-checked exercises on real servers: the checker accepts the right locks and rejects the
classic mistakes with the cause in words; the pitfall experiments; the mock interview panel."""
from __future__ import annotations

import threading

import pytest

from labkit.practice.deck import Deck
from labkit.practice.exercises import ExerciseError, Report, check_etcd_wait, check_zookeeper_lock, examples
from labkit.practice.mock_interview import MockInterviewPanel, show_mock_interview
from labkit.practice.exercises.pitfalls import wakeups_of_one_release
from labkit.practice.exercises.zookeeper_exercise import learner_functions


# ---- pure logic ----------------------------------------------------------------------------------
def test_report_fails_if_any_property_failed_and_keeps_each_cause_once():
    report = Report("demo")
    report.judge("progress", True, "all good")
    report.judge("progress", False, "c2 stuck", "stuck")
    report.judge("progress", False, "c3 stuck", "stuck")
    report.judge("progress", False, "c4 raised", "raised")
    report.judge("FIFO order", True, "in order")
    assert not report.passed and report.causes == ["stuck", "raised"]
    assert report["progress"].words == "c2 stuck Also: c4 raised"
    assert "FAIL progress" in report.explain() and "ok   FIFO order" in report.explain()
    with pytest.raises(ValueError, match="unknown property"):
        report.judge("speed", True, "fast")


def test_an_empty_report_has_not_passed():
    assert not Report("nothing judged").passed


def test_learner_code_can_be_a_pair_an_object_or_a_class():
    def acquire(client, lock_path):
        return "/x/lock-0000000001"

    def release(client, my_node):
        return None

    class AsMethods:
        def acquire(self, client, lock_path):
            return acquire(client, lock_path)

        def release(self, client, my_node):
            return release(client, my_node)

    assert learner_functions((acquire, release)) == (acquire, release)
    from_class = learner_functions(AsMethods)
    assert from_class[0](None, "/x") == "/x/lock-0000000001"
    with pytest.raises(ExerciseError, match="acquire and a release"):
        learner_functions(acquire)


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_mock_interview_panel_asks_reveals_grades_and_sums_up():
    clock = FakeClock()
    deck = Deck(random_seed=3)
    panel = MockInterviewPanel(deck.mock_interview(n=2, seconds_per_card=60, clock=clock))
    assert panel.reveal_button.disabled and not panel.next_button.disabled
    panel.next_button.click()
    first = panel.interview.current
    assert first.question.split()[0] in panel.question.value and "Question 1 of 2" in panel.question.value
    panel.got_it_button.click()                          # not revealed yet: ignored
    assert panel.interview.results == []
    panel.reveal_button.click()
    assert "Proved in" in panel.answer.value
    clock.now += 75
    panel.got_it_button.click()
    assert "over time" in panel.clock.value and deck.grades == {first.id: True}
    panel.next_button.click()
    panel.reveal_button.click()
    clock.now += 10
    panel.missed_button.click()
    assert panel.interview.done and "Interview over" in panel.question.value
    assert "1/2 right" in panel.answer.value and first.id in panel.answer.value


def test_mock_interview_text_fallback(capsys):
    interview = Deck(random_seed=1).mock_interview(n=3)
    assert show_mock_interview(interview, widgets=False) is None
    assert "interview.next_card()" in capsys.readouterr().out


# ---- ZooKeeper exercise on a real server ---------------------------------------------------------
def test_the_right_zookeeper_lock_passes(lab):
    report = check_zookeeper_lock(examples.ZOOKEEPER_RIGHT, lab, clients=6)
    assert report.passed, report.explain()
    assert report.wakeups == [1] * 5
    assert set(report.verdicts) == {"mutual exclusion", "FIFO order", "wakeups per release", "progress",
                                    "session handling"}


def test_watching_the_parent_is_rejected_as_a_herd(lab):
    report = check_zookeeper_lock(examples.ZOOKEEPER_WRONG["parent watch"], lab, clients=6)
    assert not report.passed and report.causes == ["herd"]
    assert report.wakeups == [5, 4, 3, 2, 1]
    words = report["wakeups per release"].words
    assert "up to 5 waiters" in words and "the parent" in words
    assert report["mutual exclusion"].held and report["FIFO order"].held


def test_skipping_the_recheck_is_rejected_as_two_holders(lab):
    report = check_zookeeper_lock(examples.ZOOKEEPER_WRONG["no re-check"], lab, clients=4)
    assert not report.passed and "no re-check" in report.causes
    words = report["mutual exclusion"].words
    assert "two clients held the lock at once: " in words
    assert words.startswith("two clients held the lock at once: c3 acquired while c1 still held it — after c2's "
                            "node was deleted (c2's session expired), c3 did not re-check that it was now the lowest")
    assert "c2's session expired and its node was gone, yet its acquire returned" in words
    assert not report["session handling"].held and "ignores session loss" in report.causes
    assert report["wakeups per release"].held


@pytest.mark.slow
def test_a_node_that_is_not_ephemeral_is_rejected_as_stuck(lab):
    report = check_zookeeper_lock(examples.ZOOKEEPER_WRONG["not ephemeral"], lab, clients=3, patience=3.0)
    assert not report.passed and {"not ephemeral", "stuck"} <= set(report.causes)
    assert "without ephemeral=True" in report["session handling"].words
    progress = report["progress"].words
    assert progress.startswith("stuck: c2's session expired, but its node") and "is still there" in progress
    leftover = [thread.name for thread in threading.enumerate() if thread.name.startswith("exercise-")]
    assert not leftover, f"the stuck waiters' threads should end when the checker closes their sessions: {leftover}"


def recipe_as_learner_code(make_lock):
    """(acquire, release) around a lock object made by ``make_lock(client, lock_path)``."""
    held = {}

    def acquire(client, lock_path):
        lock = make_lock(client, lock_path)
        lock.acquire()
        node = f"{lock_path}/{lock.node}"
        held[node] = lock
        return node

    def release(client, my_node):
        held.pop(my_node).release()

    return acquire, release


@pytest.mark.parametrize("recipe", ["kazoo", "labkit", "labkit-parent"])
def test_real_recipes_are_judged_like_learner_code(lab, recipe):
    from labkit.locks.zookeeper import ZooKeeperLock

    make = {"kazoo": lambda client, path: client.Lock(path),
            "labkit": lambda client, path: ZooKeeperLock(client, path),
            "labkit-parent": lambda client, path: ZooKeeperLock(client, path, watch="parent")}[recipe]
    report = check_zookeeper_lock(recipe_as_learner_code(make), lab, clients=4)
    if recipe == "labkit-parent":
        assert report.causes == ["herd"] and report.wakeups == [3, 2, 1], report.explain()
    else:
        assert report.passed, report.explain()
    if recipe == "kazoo":   # kazoo's Lock queues again on a new session instead of raising
        assert "queued again with a new node" in report["session handling"].words


def test_an_acquire_that_returns_nothing_is_reported_not_raised(lab):
    def acquire(client, lock_path):
        client.create(f"{lock_path}/lock-", ephemeral=True, sequence=True, makepath=True)

    report = check_zookeeper_lock((acquire, examples.zookeeper_release), lab, clients=3, patience=2.0)
    assert not report.passed and "raised" in report.causes
    assert "must return the path of my lock node" in report["progress"].words


# ---- etcd exercise on a real server --------------------------------------------------------------
def test_the_right_etcd_wait_passes(lab):
    report = check_etcd_wait(examples.ETCD_RIGHT, lab, clients=5)
    assert report.passed, report.explain()
    assert report.wakeups == [1] * 4


def test_an_etcd_wait_without_recheck_is_rejected(lab):
    report = check_etcd_wait(examples.ETCD_WRONG["no re-check"], lab, clients=4)
    assert not report.passed and report.causes == ["no re-check"]
    words = report["mutual exclusion"].words
    assert "after c2's key was deleted (c2's lease was revoked), c3 did not re-check" in words


def test_an_etcd_wait_on_the_holder_is_rejected_as_a_herd(lab):
    report = check_etcd_wait(examples.ETCD_WRONG["watch the holder"], lab, clients=5)
    assert not report.passed and report.causes == ["herd"]
    assert report.wakeups == [4, 3, 2, 1]


def test_etcd_checker_refuses_what_is_not_a_function(lab):
    with pytest.raises(ExerciseError, match="not a function"):
        check_etcd_wait("wait", lab)


# ---- the pitfall experiment ----------------------------------------------------------------------
@pytest.mark.parametrize("watch, woken", [("parent", 6), ("predecessor", 1)])
def test_one_release_wakes_every_parent_watcher_but_one_predecessor_watcher(lab, watch, woken):
    outcome = wakeups_of_one_release(lab, watch, waiters=6)
    assert outcome.count == woken, str(outcome)
    assert outcome.next_holder == "w1"
    if watch == "predecessor":
        assert outcome.woken == ["w1"]


# ---- the cards' links ----------------------------------------------------------------------------
def test_link_status_finds_missing_and_unwritten_sections(tmp_path):
    import json

    from labkit.practice.cards import Card
    from labkit.practice.links import FOUND, MISSING, NOT_WRITTEN, link_status

    cell = {"cell_type": "markdown", "metadata": {}, "source": ["# Title\n", "## Practice cards\n", "text"]}
    (tmp_path / "11_interview_practice.ipynb").write_text(json.dumps({"cells": [cell]}))
    card = Card("demo", "Q?", "A.", (("11_interview_practice.ipynb", "Practice cards"),
                                      ("11_interview_practice.ipynb", "Mock interview"),
                                      ("sandbox.ipynb", "First come, first served")))
    assert [row["status"] for row in link_status(tmp_path, [card])] == [FOUND, MISSING, NOT_WRITTEN]


def test_a_lock_that_never_returns_fails_fast_and_says_who_should_hold(lab):
    never = threading.Event()

    def acquire(client, lock_path):
        client.create(f"{lock_path}/lock-", ephemeral=True, sequence=True, makepath=True)
        never.wait(30)              # the mistake: never looks at the queue

    try:
        report = check_zookeeper_lock((acquire, examples.zookeeper_release), lab, clients=3, patience=2.0)
    finally:
        never.set()                 # let the learner threads end
    assert not report.passed and report.causes == ["stuck"]
    assert "c1's node" in report["progress"].words and "is the lowest, yet c1's acquire has not returned" \
        in report["progress"].words
    assert report.seconds < 15 and "skipped" in report.scenarios[-1]


def test_a_lock_on_one_shared_node_is_rejected_as_no_queue_and_a_herd(lab):
    from kazoo.exceptions import NodeExistsError

    def acquire(client, lock_path):         # "create it if you can, else wait for it to go"
        while True:
            try:
                return client.create(f"{lock_path}/the-lock", ephemeral=True, makepath=True)
            except NodeExistsError:
                gone = threading.Event()
                if client.exists(f"{lock_path}/the-lock", watch=lambda event: gone.set()):
                    gone.wait()

    report = check_zookeeper_lock((acquire, examples.zookeeper_release), lab, clients=4)
    assert report.causes == ["no queue", "herd"] and report.wakeups == [3, 2, 1], report.explain()
    assert "there is no queue" in report["FIFO order"].words
    assert report["mutual exclusion"].held
