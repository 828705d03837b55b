"""The verdicts of an exercise scenario (labkit/practice/exercises/diagnosis.py), judged from
recorded runs made here (a real History of hand-made events, a resource's write record, the
contenders' end states: what a ZooKeeperRun or EtcdRun offers): a clean queue passes every
property; two holders are told apart as a missing re-check, an ignored session loss or a
plain second holder; no numbered entry is "no queue"; a release that wakes two waiters is a
herd, one that wakes none is polling; a stuck waiter is explained by what the lowest entry's
owner did; a persistent node and an expired waiter that waits on are session mistakes; and
run_scenarios skips the fault scenarios once nobody ever held, counting wakeups in the first
only. The checkers on real servers: test_exercises.py. Pure logic: no server."""
from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest

from labkit.practice.exercises.contention import GAVE_UP, HOLDING, RELEASED, WAITING
from labkit.practice.exercises.diagnosis import judge_run, run_scenarios
from labkit.practice.exercises.report import Report
from labkit.record.events import Event
from labkit.record.history import History

pytestmark = pytest.mark.no_servers

PATH = "/exercise"


def node(number):
    return f"{PATH}/lock-{number:010d}"


class Recorded:
    """A finished scenario: what the diagnosis reads, from hand-made records."""

    title, entry, patience = "the test scenario", "node", 5.0
    session_lost, entries_die = "session expired", "nodes are ephemeral: they die"

    def __init__(self, events, writes=(), states=None, errors=None, expired=(), stuck=(), not_lowest=None,
                 woken=None, nodes=None, lowest=None):
        self.history = History(Event(100.0 + at, client, kind, detail) for at, client, kind, detail in events)
        self.resource = SimpleNamespace(writes=lambda: [{"time": 100.0 + at, "client": client, "token": token,
                                                         "accepted": True, "value": "w"} for at, client, token in writes])
        acquired = {event.client: event.time for event in self.history.events(kind="acquired")}
        self.contenders = [SimpleNamespace(name=name, state=state, error=(errors or {}).get(name),
                                           acquired_at=acquired.get(name)) for name, state in (states or {}).items()]
        self.expired, self.stuck = set(expired), list(stuck)
        self.acquired_while_not_lowest = not_lowest or {}
        self._woken, self._nodes, self._lowest = woken or {}, nodes or {}, lowest
        self.closed = False

    def woken_by_owner(self, name):
        return self._woken.get(name)

    def nodes_made(self):
        return self._nodes

    def entries_of(self, name):
        return [made for made, (owner, _) in self._nodes.items() if owner == name]

    def lowest_now(self):
        return self._lowest

    def watched(self):
        return "the parent /exercise (every change under it wakes every waiter)"

    def close(self):
        self.closed = True


def queue_of_two(watch="predecessor", woke=True):
    """c1 holds, c2 queues behind it (watching ``watch``), c1 releases, c2 holds and releases."""
    events = [(0.0, "c1", "created", {"node": node(1), "sequence": 1}),
              (0.1, "c1", "acquired", {"token": 1, "node": node(1)}),
              (0.2, "c2", "created", {"node": node(2), "sequence": 2}),
              (0.3, "c2", "watch", {"target": node(1) if watch == "predecessor" else PATH, "what": watch}),
              (1.0, "c1", "released", {"token": 1}),
              (1.3, "c2", "acquired", {"token": 2, "node": node(2)}),
              (2.0, "c2", "released", {"token": 2})]
    if woke:
        events.append((1.1, "c2", "woke", {"reason": "deleted", "target": node(1)}))
    writes = [(0.15, "c1", 1), (0.9, "c1", 1), (1.4, "c2", 2), (1.9, "c2", 2)]
    nodes = {node(1): ("c1", True), node(2): ("c2", True)}
    return events, writes, nodes


def judged(run, counts_wakeups=True):
    report = Report("test exercise")
    judge_run(run, report, counts_wakeups)
    return report


def test_a_queue_served_in_order_with_one_wakeup_a_release_passes():
    events, writes, nodes = queue_of_two()
    report = judged(Recorded(events, writes, {"c1": RELEASED, "c2": RELEASED}, nodes=nodes))
    assert report.passed, report.explain()
    assert set(report.verdicts) == {"mutual exclusion", "FIFO order", "wakeups per release", "progress"}
    assert report.wakeups == [1]


def two_holders(**run):
    """c1 holds (node 1); c3 (node 3) acquires and writes while c1 still holds."""
    events = [(0.0, "c1", "created", {"node": node(1), "sequence": 1}),
              (0.1, "c1", "acquired", {"token": 1, "node": node(1)}),
              (0.2, "c3", "created", {"node": node(3), "sequence": 3}),
              (0.5, "c3", "acquired", {"token": 3, "node": node(3)}),
              (1.0, "c1", "released", {"token": 1}), (1.2, "c3", "released", {"token": 3})]
    writes = [(0.15, "c1", 1), (0.6, "c3", 3), (0.9, "c1", 1), (1.1, "c3", 3)]
    states = {"c1": RELEASED, "c2": GAVE_UP, "c3": RELEASED}
    return Recorded(events, writes, states, not_lowest={"c3": "c1"}, **run)


@pytest.mark.parametrize("run, cause, words", [
    (dict(expired={"c2"}, woken={"c3": "c2"}), "no re-check",
     "c3 acquired while c1 still held it — after c2's node was deleted (c2's session expired), c3 did not re-check"),
    (dict(), "two holders", "c3 acquired while c1's node was still lower: it took the lock without being the lowest"),
    (dict(expired={"c3"}), "ignores session loss", "c3's session expired and its node was gone, yet its acquire returned"),
])
def test_two_holders_are_told_apart_by_what_let_the_second_in(run, cause, words):
    report = judged(two_holders(**run), counts_wakeups=False)
    verdict = report["mutual exclusion"]
    assert not verdict.held and cause in verdict.causes and cause in report.causes, report.explain()
    assert words in verdict.words and "[scenario: the test scenario]" in verdict.words


def test_no_numbered_entry_is_no_queue():
    events, writes, nodes = queue_of_two()
    events = [event for event in events if event[2] != "created"]
    report = judged(Recorded(events, writes, {"c1": RELEASED, "c2": RELEASED}, nodes=nodes))
    assert not report["FIFO order"].held and report["FIFO order"].causes == ["no queue"]
    assert "sequence=True" in report["FIFO order"].words and report["mutual exclusion"].held


def test_a_release_that_wakes_two_waiters_is_a_herd_and_one_that_wakes_none_is_polling():
    events, writes, nodes = queue_of_two(watch="parent")
    events += [(0.35, "c3", "created", {"node": node(3), "sequence": 3}),
               (0.4, "c3", "watch", {"target": PATH, "what": "parent"}),
               (1.15, "c3", "woke", {"reason": "child", "target": PATH}),
               (2.1, "c3", "acquired", {"token": 3, "node": node(3)}), (2.5, "c3", "released", {"token": 3})]
    writes += [(2.2, "c3", 3), (2.4, "c3", 3)]
    herd = judged(Recorded(events, writes, dict.fromkeys(["c1", "c2", "c3"], RELEASED), nodes=nodes))
    verdict = herd["wakeups per release"]
    assert not verdict.held and verdict.causes == ["herd"] and "woke up to 2 waiters" in verdict.words
    assert "The waiters watched the parent /exercise" in verdict.words and max(herd.wakeups) == 2
    events, writes, nodes = queue_of_two(woke=False)
    polling = judged(Recorded([e for e in events if e[2] != "watch"], writes, {"c1": RELEASED, "c2": RELEASED}))
    assert polling["wakeups per release"].causes == ["polling"] and polling.wakeups == [0]


def stuck_behind(owner_state, ephemeral=True, expired=()):
    """c1 made node 1 and is in ``owner_state``; c2 waits behind it and the run gave up on it."""
    events = [(0.0, "c1", "created", {"node": node(1), "sequence": 1}),
              (0.2, "c2", "created", {"node": node(2), "sequence": 2})]
    return Recorded(events, states={"c1": owner_state, "c2": WAITING}, stuck=["c2"], expired=expired,
                    nodes={node(1): ("c1", ephemeral), node(2): ("c2", True)}, lowest=(node(1), "c1"))


@pytest.mark.parametrize("run, words", [
    (stuck_behind(RELEASED), f"c1 released, but its node {node(1)} is still there, so c2 waited for ever"),
    (stuck_behind(WAITING), "yet c1's acquire has not returned in 5 s"),
    (stuck_behind(HOLDING), "c1 holds the lock and its release did not return within 5 s"),
    (stuck_behind(GAVE_UP, ephemeral=False, expired={"c1"}), "it was created without ephemeral=True"),
], ids=["released", "lowest-waits", "holding", "not-ephemeral"])
def test_a_stuck_waiter_is_explained_by_what_the_lowest_nodes_owner_did(run, words):
    verdict = judged(run)["progress"]
    assert not verdict.held and verdict.causes == ["stuck"] and words in verdict.words, verdict.words


def test_a_stuck_waiter_with_an_empty_queue_and_a_learner_error_are_both_said():
    run = stuck_behind(GAVE_UP)
    run._lowest = None
    run.contenders[0].error = KeyError("no node")
    verdict = judged(run)["progress"]
    assert verdict.causes == ["raised", "stuck"]
    assert "c1's acquire or release raised KeyError: 'no node'" in verdict.words
    assert "although the queue is empty: a wait that nothing will ever end" in verdict.words


def test_a_client_whose_session_the_checker_ended_is_not_blamed_for_giving_up():
    run = stuck_behind(RELEASED, expired={"c2"})
    run.contenders[1].state, run.contenders[1].error, run.stuck = GAVE_UP, RuntimeError("session expired"), []
    report = judged(run)
    assert report["progress"].held and report["session handling"].held
    assert "gave up (RuntimeError)" in report["session handling"].words


@pytest.mark.parametrize("change, held, words", [
    (dict(nodes={node(1): ("c1", False)}), False, f"c1 created {node(1)} without ephemeral=True"),
    (dict(state=WAITING), False, "c2's session expired while it waited, but its acquire kept waiting"),
    (dict(state=RELEASED, acquired=True, nodes={node(2): ("c2", True), node(4): ("c2", True)}), True,
     "queued again with a new node and waited for its turn"),
])
def test_session_handling_after_the_checker_ended_a_waiters_session(change, held, words):
    run = Recorded([], states={"c2": change.get("state", GAVE_UP)}, expired={"c2"}, nodes=change.get("nodes"))
    run.contenders[0].acquired_at = 1.0 if change.get("acquired") else None
    verdict = judged(run)["session handling"]
    assert verdict.held is held and words in verdict.words, verdict.words
    assert held or verdict.causes in (["not ephemeral"], ["ignores session loss"])


def test_run_scenarios_skips_the_faults_once_nobody_held_and_closes_each_run():
    made, played, quiet = [], [], []

    def make_run(number, title):
        if number == 1:
            run = Recorded([], states={"c1": WAITING}, stuck=["c1"])
        else:
            events, writes, nodes = queue_of_two()
            run = Recorded(events, writes, {"c1": RELEASED, "c2": RELEASED}, nodes=nodes)
        made.append(run)
        return run

    @contextlib.contextmanager
    def hush():
        quiet.append(len(made))
        yield

    scripts = [(f"scenario {number}", lambda run, number=number: played.append(number)) for number in (1, 2, 3)]
    report = Report("test exercise")
    run_scenarios(report, scripts, make_run, hush)
    assert played == [1] and len(made) == 1 and made[0].closed and quiet == [0]
    assert report.scenarios == ["scenario 1", "the fault scenarios were skipped: without faults, nobody ever got "
                                              "the lock"]
    assert report["progress"].causes == ["stuck"]


def test_run_scenarios_counts_wakeups_in_the_first_scenario_only():
    runs = []

    def make_run(number, title):
        events, writes, nodes = queue_of_two(woke=number == 1)   # the second wakes nobody: polling, were it counted
        runs.append(Recorded(events, writes, {"c1": RELEASED, "c2": RELEASED}, nodes=nodes))
        return runs[-1]

    report = Report("test exercise")
    run_scenarios(report, [("first", lambda run: None), ("second", lambda run: None)], make_run)
    assert report.passed, report.explain()
    assert report.scenarios == ["first", "second"] and all(run.closed for run in runs) and report.wakeups == [1]
