"""labkit torture's server-side nemeses (partition-leader, split, isolate-server): the
schedule, the requests they refuse, the lapse bound of the linearizability model on
hand-made histories, and runs on a real 3-member ZooKeeper ensemble (fenced: no overlap;
unfenced with holds longer than the session: the store shows the cut-off holder's late
write, and the checker says so).
"""
from __future__ import annotations

import json

import pytest

from labkit.cli import main as cli_main
from labkit.record.events import Event
from labkit.record.history import History
from labkit.torture import TortureError, check_mutex, check_request, plan, torture
from labkit.torture.nemesis import Executed
from labkit.torture.schedule import COORDINATOR, CURRENT_HOLDER, SERVER_NEMESES, Step
from labkit.locks.registry import recipe_named
from labkit.torture.verdict import cut_off, earliest_lapse, operations

ALL = "partition-leader,split,isolate-server"
RUN = dict(clients=3, duration=15.0, timeout=2.0, quiet=True)


# ---- the schedule and the requests ---------------------------------------------------------
def test_the_server_nemeses_are_planned_from_the_seed():
    steps = plan(7, list(SERVER_NEMESES), 3, 60.0, 2.0)
    assert steps == plan(7, list(SERVER_NEMESES), 3, 60.0, 2.0)
    assert {step.nemesis for step in steps} == set(SERVER_NEMESES)
    for step in steps:
        assert 3.0 <= step.seconds <= 6.0  # 1.5-3 session timeouts: past the timeout, so they bite
        expected = {"partition-leader": COORDINATOR, "isolate-server": CURRENT_HOLDER}.get(step.nemesis)
        assert step.target == expected if expected else step.target in ("member-1", "member-2", "member-3")


REFUSED = {
    ("--recipe", "redis", "--nemesis", "split"): "split cuts a member from a ZooKeeper or etcd ensemble",
    ("--recipe", "redlock", "--nemesis", "isolate-server"): "and a redlock lock has none",
    ("--nemesis", "partition-leader", "--timeout", "1"): "use --timeout 2 or more",
    ("--nemesis", "leader", "--timeout", "1.5"): "refuses sessions under ~1.8 s",
}


@pytest.mark.parametrize("argv", REFUSED, ids=[" ".join(argv) for argv in REFUSED])
def test_requests_the_server_nemeses_cannot_run(argv, capsys, tmp_path):
    assert cli_main(["torture", *argv, "--report", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert REFUSED[argv] in captured.err
    assert len(captured.err.strip().splitlines()) == 1 and "Traceback" not in captured.err
    assert not list(tmp_path.iterdir())


def test_the_requests_they_accept():
    assert check_request("zookeeper", 3, 15.0, ALL, None, 1, timeout=2.0) == (list(SERVER_NEMESES), True)
    assert check_request("etcd", 3, 15.0, "split", False, 1, timeout=1.0) == (["split"], False)  # no lag to give up
    assert check_request("kazoo", 3, 15.0, "split", None, 1, timeout=1.0)[0] == ["split"]  # no client deadline
    with pytest.raises(TortureError, match="too short"):
        check_request("zookeeper-parent", 3, 15.0, "isolate-server", None, 1, timeout=1.9)


# ---- the lapse bound, on hand-made histories -------------------------------------------------
def test_the_earliest_lapse_of_a_two_second_session():
    # 2 x 0.8 - 2/3 - (half a 200 ms tick) - 0.2 for ZooKeeper; no relay for etcd
    assert earliest_lapse(recipe_named("zookeeper"), 2.0) == pytest.approx(1.6 - 2 / 3 - 0.1 - 0.2)
    assert earliest_lapse(recipe_named("etcd"), 2.0) == pytest.approx(1.6 - 2 / 3 - 0.2)
    assert earliest_lapse(recipe_named("zookeeper"), 0.5) == 0.0  # never negative: then any time after the cut
    assert earliest_lapse(recipe_named("kazoo"), 6.0) > earliest_lapse(recipe_named("kazoo"), 2.0)


def history_of(*rows) -> History:
    return History(Event(at, client, kind, detail) for at, client, kind, detail in rows)


def cut(nemesis, target, start, end, clients):
    return Executed(Step(start, nemesis, target), target, start, end, clients=tuple(clients))


BOUND = earliest_lapse(recipe_named("zookeeper"), 2.0)  # 0.633 s


def takeover(after: float, lost: float | None = None) -> History:
    """c1 holds from 0.1; its server is cut at 1.0; c2 (other side) acquires ``after`` s later;
    c1, which did not hear "lost", writes and lets go after that (else its release could have
    happened at any moment after its last event)."""
    rows = [(0.0, "c1", "requested", {}), (0.1, "c1", "acquired", {"token": 1}),
            (0.2, "c2", "requested", {}), (1.0 + after, "c2", "acquired", {"token": 2}),
            (1.0 + after + 0.1, "c2", "released", {})]
    if lost is None:
        rows += [(1.0 + after + 0.2, "c1", "write", {"token": 1}), (1.0 + after + 0.3, "c1", "released", {})]
    if lost is not None:
        rows.append((1.0 + lost, "c1", "lost", {"reason": "client-side deadline"}))
    return history_of(*rows)


def verdict(history, executed, lapse_after=BOUND):
    ops, _ = operations(history, executed, "session", 2.0, 2.0, end=9.0, lapse_after=lapse_after)
    return check_mutex(ops)


def test_a_takeover_after_the_bound_is_linearizable():
    isolated = [cut("isolate-server", "c1", 1.0, 4.0, ["c1"])]
    assert verdict(takeover(after=2.0), isolated).ok is True
    assert verdict(takeover(after=BOUND + 0.01), isolated).ok is True  # the bound itself is allowed


def test_a_takeover_before_the_bound_is_a_violation():
    """The old model let c1's session lapse at any moment after the cut began: a lock
    service handing the lock over 0.3 s after the cut passed. No session can have expired
    by then: the leader heard of c1 within timeout/3 + relay + 0.2 s before the cut."""
    isolated = [cut("isolate-server", "c1", 1.0, 4.0, ["c1"])]
    assert verdict(takeover(after=0.3), isolated, lapse_after=0.0).ok is True  # the old model
    result = verdict(takeover(after=0.3), isolated)
    assert result.ok is False and "acquire by c2" in result.explanation


def test_only_the_clients_a_fault_cut_off_may_lapse():
    # a follower holding c3's session was cut; c1's member and the leader were fine
    follower = [cut("split", "member-3", 1.0, 4.0, ["c3"])]
    assert verdict(takeover(after=2.0), follower).ok is False
    # the cut member was the leader: every session waits for a new one
    leader = [cut("partition-leader", "zk1", 1.0, 4.0, ["c1", "c2", "c3"])]
    assert verdict(takeover(after=2.0), leader).ok is True
    assert cut_off(leader[0]) == ("c1", "c2", "c3")
    skipped = Executed(Step(1.0, "split", "member-1"), "member-1", 1.0, 1.0, "skipped: LookupError", ("c1",))
    assert cut_off(skipped) == ()


def test_a_holder_that_heard_lost_may_have_lapsed_before_the_bound():
    """c1's client-side deadline said "lost" at the cut + 0.4 s (it gave up and deleted its
    node): a takeover after that is legal, whatever the bound of the fault."""
    isolated = [cut("isolate-server", "c1", 1.0, 4.0, ["c1"])]
    assert verdict(takeover(after=0.5, lost=0.4), isolated).ok is True


def release_answer_lost(c2_acquired: float) -> History:
    """No fault. c1 holds from 0.1 and writes its "end" at 0.5, then releases; the delete
    takes effect, but its answer is lost (kazoo dropped the connection: a ping answered too
    late on a busy server), so c1 reports "release failed" only at 1.5 and asks again at 1.6."""
    return history_of((0.0, "c1", "requested", {}), (0.1, "c1", "acquired", {"token": 1}),
                      (0.2, "c2", "requested", {}), (0.5, "c1", "write", {"token": 1, "accepted": True}),
                      (c2_acquired, "c2", "acquired", {"token": 2}),
                      (1.5, "c1", "error", {"message": "release failed: ConnectionLoss()"}),
                      (1.6, "c1", "requested", {}), (1.8, "c2", "released", {}))


def test_a_failed_release_began_before_the_error_that_reports_it():
    """The release's invoke is c1's event before it (its last write), not the error: the model
    that took the error as the invoke found c2's acquire at 0.7 illegal (c1 still holding, no
    fault, no "lost"), on a history a correct lock service gives."""
    after_the_write = verdict(release_answer_lost(c2_acquired=0.7), [])
    assert after_the_write.ok is True, after_the_write.explanation
    ops, holds = operations(release_answer_lost(0.7), [], "session", 2.0, 2.0, end=9.0, lapse_after=BOUND)
    [failed] = [op for op in ops if op.action == "release" and op.process == "c1"]
    assert (failed.invoke, failed.complete) == (0.5, None)
    assert ("c1", 0.1, 0.5) in holds
    # the negative control: c2 acquires while c1 still writes under its hold (0.4 < 0.5)
    during_the_hold = verdict(release_answer_lost(c2_acquired=0.4), [])
    assert during_the_hold.ok is False and "acquire by c2" in during_the_hold.explanation


def test_the_other_faults_keep_their_kind_of_window():
    expire = [cut("expire", "c1", 1.0, 1.0, [])]  # the server ends the session now
    assert verdict(takeover(after=0.1), expire).ok is True
    pause = [cut("pause", "c1", 1.0, 5.0, [])]  # a frozen client falls silent: the bound applies
    assert verdict(takeover(after=0.3), pause).ok is False
    assert verdict(takeover(after=2.0), pause).ok is True


# ---- on a real 3-member ZooKeeper ensemble -----------------------------------------------------
def hit(result, nemesis):
    return [done for done in result.trials[0].executed if done.step.nemesis == nemesis and not done.skipped]


@pytest.mark.slow
def test_fenced_zookeeper_under_a_leader_cut_and_a_holder_server_cut(tmp_path):
    """Seed 7: the leader cut with its clients, then the holder's member cut."""
    assert cli_main(["torture", "--recipe", "zookeeper", "--clients", "3", "--time", "15", "--timeout", "2",
                     "--nemesis", ALL, "--seed", "7", "--fenced", "--report", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "report.json").read_text())
    trial = saved["trials"][0]
    done = [(step["step"]["nemesis"], step["note"]) for step in trial["executed"]]
    assert done == [("partition-leader", ""), ("isolate-server", "")], done
    assert trial["numbers"]["overlaps"] == 0 and trial["numbers"]["linearizable"] is True
    assert trial["numbers"]["acquires"] >= 10
    leader_cut = trial["executed"][0]
    assert "(leader)" in leader_cut["target"] and len(leader_cut["clients"]) == 3


@pytest.mark.slow
def test_fenced_zookeeper_under_a_split():
    """Seed 1: the leader cut, then a 1|2 split with clients on both sides."""
    result = torture("zookeeper", nemesis=ALL, seed=1, fenced=True, **RUN)
    assert hit(result, "split") and hit(result, "partition-leader"), repr(result)
    assert result.ok, repr(result)
    assert result.trials[0].judgement.numbers()["overlaps"] == 0


# the first holder is cut ~1.8 s into its 10 s hold; when its member is the leader, the other
# side waits for a new one too, and took up to 5.7 s after the cut to hand the lock over
LATE = dict(RUN, duration=12.0, nemesis="isolate-server", seed=11, hold=10.0)


@pytest.mark.slow
def test_a_holder_whose_server_is_cut_writes_late_without_fencing():
    """Holds of 10 s (5 session timeouts): the holder's member is cut early in a hold, the
    other side hands the lock over 2-6 s later, and the cut-off holder, which does not ask
    before it writes, writes "end" after its successor began. The lock service itself is
    linearizable; the store's record shows the overlap."""
    result = torture("zookeeper", fenced=False, **LATE)
    trial = result.trials[0]
    assert hit(result, "isolate-server"), repr(result)
    assert not trial.judgement.mutual_exclusion.ok, repr(result)
    assert "both holds were writing" in trial.judgement.lines()[0]
    assert trial.judgement.linearizability.ok is True, repr(result)


@pytest.mark.slow
def test_fencing_refuses_the_late_write_of_a_holder_whose_server_is_cut():
    result = torture("zookeeper", fenced=True, **LATE)
    judgement = result.trials[0].judgement
    assert hit(result, "isolate-server"), repr(result)
    assert judgement.mutual_exclusion.ok and judgement.writes_rejected >= 1, repr(result)
    assert judgement.linearizability.ok is True, repr(result)
