"""labkit torture: the linearizability search on hand-made histories, the seeded schedule,
bad requests, and a bounded soak on real servers whose verdicts must come out as the
course claims (fenced ZooKeeper and etcd: no overlap, stale writes refused; unfenced: the
checker finds the overlap; Redis under failover: the lock is granted twice). Ctrl-C of
`labkit torture` leaves no process behind.
"""
from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labkit.cli import main as cli_main
from labkit.record.events import Event
from labkit.record.history import FAULT_CLIENT, History
from labkit.torture import NEMESES, Operation, TortureError, check_mutex, check_request, plan, read_replay, torture
from labkit.torture.nemesis import Executed
from labkit.torture.schedule import Step
from labkit.torture.verdict import operations

SOAK = dict(clients=4, duration=10.0, timeout=1.0, quiet=True)


def acquire(process, invoke, complete):
    return Operation(process, "acquire", invoke, complete)


def release(process, invoke, complete):
    return Operation(process, "release", invoke, complete)


def lapse(process, invoke, complete):
    return Operation(process, "lapse", invoke, complete)


# ---- the search, on hand-made histories --------------------------------------------------
LINEARIZABLE = {
    "one after another": [acquire("A", 0, 1), release("A", 1, 2), acquire("B", 2, 3), release("B", 3, 4)],
    "concurrent acquires, B first": [acquire("A", 0, 3), acquire("B", 1, 2), release("B", 2.5, 2.6),
                                     release("A", 4, 5)],
    "a release overlapping the next acquire": [acquire("A", 0, 1), release("A", 2, 4), acquire("B", 3, 5)],
    "a crashed acquire that never took effect": [acquire("A", 0, None), acquire("B", 1, 2), release("B", 3, 4)],
    "a killed holder whose lease lapsed": [acquire("A", 0, 1), lapse("A", 2, None), acquire("B", 3, 4)],
    "a paused holder releases a lapsed lock": [acquire("A", 0, 1), lapse("A", 1.5, 2), acquire("B", 3, 4),
                                               release("A", 5, 6), release("B", 7, 8)],
    "a lapse that was not needed": [acquire("A", 0, 1), lapse("A", 1, 2), release("A", 3, 4)],
    "a failed release that took effect": [acquire("A", 0, 1), release("A", 1, None), acquire("B", 2, 3)],
    "a failed release, then the holder finds its own entry": [acquire("A", 0, 1), release("A", 1, None),
                                                              acquire("A", 2, 3), release("A", 4, 5)],
}
NOT_LINEARIZABLE = {
    "two holders": [acquire("A", 0, 1), acquire("B", 2, 3), release("A", 4, 5)],
    "a holder that never let go": [acquire("A", 0, 1), acquire("B", 3, 4)],
    "a lapse window that opens too late": [acquire("A", 0, 1), lapse("A", 5, 6), acquire("B", 3, 4)],
    "a release by a client that never held": [acquire("A", 0, 1), release("B", 2, 3)],
    "two releases of one lapsed hold": [acquire("A", 0, 1), lapse("A", 1.5, 2), acquire("B", 3, 4),
                                        release("A", 5, 6), release("A", 6.5, 6.6)],
    "an acquire after a crashed holder without lapse": [acquire("A", 0, None), acquire("B", 1, 2),
                                                        acquire("C", 3, 4)],
    "an old hold's TTL does not end the next hold": [Operation("A", "acquire", 0, 1, hold=1),
                                                     Operation("A", "lapse", 0.5, None, hold=1),
                                                     Operation("A", "acquire", 2, 3, hold=2), acquire("B", 3.5, 4)],
}


@pytest.mark.parametrize("name", LINEARIZABLE)
def test_linearizable_histories(name):
    result = check_mutex(LINEARIZABLE[name])
    assert result.ok is True, result.explanation


@pytest.mark.parametrize("name", NOT_LINEARIZABLE)
def test_histories_that_are_not_linearizable(name):
    result = check_mutex(NOT_LINEARIZABLE[name])
    assert result.ok is False
    assert result.explanation.startswith("not linearizable")


def test_the_explanation_names_both_holders():
    result = check_mutex(NOT_LINEARIZABLE["two holders"])
    assert result.stuck_at.process == "B" and result.blocking.process == "A"
    assert "acquire by B" in result.explanation and "A held the lock" in result.explanation


def simulated_mutex(processes: int, rounds: int, seed: int) -> list[Operation]:
    """A correct mutex in time: acquires invoked early and waiting, releases on time."""
    rng = random.Random(seed)
    ops, now, free_at = [], 0.0, 0.0
    for _ in range(rounds):
        order = list(range(processes))
        rng.shuffle(order)
        for process in order:
            invoke = now + rng.uniform(0, 0.5)
            acquired = max(invoke, free_at) + rng.uniform(0.001, 0.01)
            released = acquired + rng.uniform(0.01, 0.1)
            ops += [acquire(f"p{process}", invoke, acquired), release(f"p{process}", released - 0.002, released)]
            free_at, now = released, acquired
    return ops


def test_a_long_correct_history_is_checked_quickly():
    ops = simulated_mutex(processes=8, rounds=150, seed=7)  # 2400 operations
    began = time.monotonic()
    result = check_mutex(ops)
    assert result.ok is True, result.explanation
    assert time.monotonic() - began < 20.0
    broken = [op for op in ops if not (op.action == "release" and op.process == ops[800].process
                                       and op.invoke > ops[800].complete)][:]
    assert check_mutex(broken).ok is False  # one client never releases after its 400th acquire


def test_an_undecidable_search_says_so():
    ops = simulated_mutex(processes=4, rounds=20, seed=1)
    result = check_mutex(ops, budget=5)
    assert result.ok is None and "undecided" in result.explanation


# ---- from a history to operations --------------------------------------------------------
def history_of(*rows) -> History:
    return History(Event(at, client, kind, detail) for at, client, kind, detail in rows)


def fault(at, what, target):
    return (at, FAULT_CLIENT, "fault", {"what": what, "target": target})


def executed(nemesis, target, start, end):
    return Executed(Step(start, nemesis, target), target, start, end)


def test_a_paused_zookeeper_holder_whose_session_lapsed_is_linearizable():
    history = history_of((0.0, "c1", "requested", {}), (0.1, "c1", "acquired", {"token": 1}),
                         (0.2, "c2", "requested", {}), (2.0, "c2", "acquired", {"token": 2}),
                         (3.0, "c1", "write", {"token": 1}), (3.1, "c1", "lost", {}), (3.2, "c2", "released", {}))
    pause = [executed("pause", "c1", 0.5, 3.0)]
    ops, _ = operations(history, pause, "session", 1.0, 1.0, end=4.0)
    assert check_mutex(ops).ok is True
    unaware = History(event if event.kind != "lost" else Event(event.time, event.client, "released")
                      for event in history.events())
    ops, _ = operations(unaware, [], "session", 1.0, 1.0, end=4.0)  # no fault, and c1 let go at 3.1: two holders
    assert check_mutex(ops).ok is False


def test_a_redis_key_lost_before_its_ttl_is_a_violation():
    history = history_of((0.0, "c1", "requested", {}), (0.1, "c1", "acquired", {}),
                         (0.2, "c2", "requested", {}), (0.5, "c2", "acquired", {}),
                         (0.6, "c1", "lost", {}), (0.7, "c2", "released", {}))
    ops, _ = operations(history, [], "ttl", ttl=5.0, timeout=5.0, end=1.0)
    assert check_mutex(ops).ok is False
    ops, _ = operations(history, [], "ttl", ttl=0.2, timeout=0.2, end=1.0)  # a TTL that ran out: legal
    assert check_mutex(ops).ok is True


def test_a_release_that_never_answered_may_have_happened():
    history = history_of((0.0, "c1", "requested", {}), (0.1, "c1", "acquired", {"token": 1}),
                         (0.2, "c1", "write", {"token": 1}), (0.3, "c2", "requested", {}),
                         (2.0, "c1", "requested", {}),  # a new round: the release before it failed
                         (3.0, "c2", "acquired", {"token": 2}), (3.1, "c2", "released", {}))
    ops, holds = operations(history, [], "session", 1.0, 1.0, end=4.0)
    assert [op for op in ops if op.action == "release" and op.complete is None][0].invoke == 0.2
    assert check_mutex(ops).ok is True
    assert holds[0] == ("c1", 0.1, 0.2)


def test_a_killed_client_rejoins_as_a_new_life():
    history = history_of((0.0, "c1", "requested", {}), (0.1, "c1", "acquired", {"token": 1}),
                         fault(0.5, "kill", "c1"),
                         (1.0, "c1", "requested", {}), (2.0, "c1", "acquired", {"token": 2}),
                         (2.1, "c1", "released", {}))
    ops, holds = operations(history, [executed("kill", "c1", 0.4, 0.4)], "session", 1.0, 1.0, end=3.0)
    assert {op.process for op in ops} == {"c1", "c1#2"}
    assert check_mutex(ops).ok is True
    assert holds[0] == ("c1", 0.1, 0.5)  # the first life held until it was killed


# ---- the schedule ----------------------------------------------------------------------
def test_the_same_seed_gives_the_same_schedule():
    first = plan(42, ["pause", "kill", "expire", "leader"], 8, 60.0, 2.0)
    assert first == plan(42, ["pause", "kill", "expire", "leader"], 8, 60.0, 2.0)
    assert first == plan(42, ["leader", "expire", "kill", "pause"], 8, 60.0, 2.0)  # order asked: irrelevant
    assert first != plan(43, ["pause", "kill", "expire", "leader"], 8, 60.0, 2.0)
    assert [Step.from_dict(step.to_dict()) for step in first] == first


def test_a_schedule_stays_inside_the_run_and_its_pauses_bite():
    steps = plan(7, ["pause", "kill", "expire", "leader", "clock"], 8, 60.0, 2.0)
    kinds = {step.nemesis for step in steps}
    assert len(steps) >= 8 and len(kinds) >= 4 and kinds <= {"pause", "kill", "expire", "leader", "clock"}
    assert all(0 < step.at and step.at + step.seconds <= 58.0 for step in steps)
    assert all(step.seconds > 2.0 for step in steps if step.nemesis == "pause")  # past the session timeout
    assert all(b.at >= a.at + a.seconds for a, b in zip(steps, steps[1:]))  # one fault at a time


# ---- bad requests: one line each --------------------------------------------------------
BAD = {
    ("--recipe", "nope"): "no recipe named 'nope'",
    ("--nemesis", "pause,boom"): "no nemesis named 'boom'",
    ("--recipe", "redis", "--nemesis", "partition,leader"): "cannot re-point",
    ("--recipe", "redis", "--nemesis", "expire"): "only a TTL",
    ("--recipe", "etcd", "--nemesis", "clock"): "cannot step etcd",
    ("--clients", "0"): "clients must be",
    ("--time", "0"): "time must be a positive number",
    ("--time", "-5"): "time must be a positive number",
    ("--recipe", "redis", "--fenced"): "no fencing token",
}


@pytest.mark.parametrize("argv", BAD, ids=[" ".join(argv) for argv in BAD])
def test_bad_requests_fail_with_one_line(argv, capsys, tmp_path):
    assert cli_main(["torture", *argv, "--report", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert BAD[argv] in captured.err
    assert len(captured.err.strip().splitlines()) == 1 and "Traceback" not in captured.err
    assert not list(tmp_path.iterdir())  # nothing was started, nothing written


def test_the_function_raises_the_same_errors():
    with pytest.raises(TortureError, match="time must be"):
        torture("zookeeper", duration=0)
    with pytest.raises(TortureError, match="partition and leader together"):
        check_request("redis", 8, 60.0, ["partition", "leader"], None, 1)
    assert check_request("redis", 8, 60.0, "pause,kill", None, 1) == (["pause", "kill"], False)
    assert set(NEMESES) == {"pause", "kill", "expire", "leader", "partition", "clock", "partition-leader", "split",
                            "isolate-server"}


# ---- the soak, on real servers ------------------------------------------------------------
@pytest.mark.slow
def test_fenced_zookeeper_keeps_mutual_exclusion_under_pauses_and_expiries(tmp_path):
    result = torture("zookeeper", nemesis="pause,expire", seed=2, fenced=True, report=tmp_path, **SOAK)
    trial = result.trials[0]
    assert [step.nemesis for step in trial.schedule] == ["pause", "expire"]
    assert result.ok, repr(result)
    assert trial.judgement.writes_rejected >= 1, repr(result)  # the nemesis bit, and fencing refused it
    assert trial.judgement.acquires >= 10
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["trials"][0]["numbers"]["overlaps"] == 0
    assert (tmp_path / "trial-1.png").stat().st_size > 10_000 and (tmp_path / "report.html").exists()
    parameters, schedules = read_replay(tmp_path)  # replayable: the same schedule comes back
    assert schedules == [(2, trial.schedule)] and parameters["fenced"] is True
    assert trial.schedule == plan(2, ["pause", "expire"], 4, 10.0, 1.0)


@pytest.mark.slow
def test_unfenced_zookeeper_is_caught_by_the_checker(tmp_path):
    """The negative control: the same schedule without fencing must show an overlap."""
    result = torture("zookeeper", nemesis="pause,expire", seed=2, fenced=False, **SOAK)
    judgement = result.trials[0].judgement
    assert not judgement.mutual_exclusion.ok, repr(result)
    assert judgement.linearizability.ok is True, repr(result)  # the lock service itself was right
    assert "both holds were writing" in judgement.lines()[0]


@pytest.mark.slow
def test_a_partitioned_holder_writes_late_without_fencing():
    """A holder cut off from ZooKeeper runs on and writes while its successor holds (C20).
    Its client-side deadline stops it *acquiring*, but a holder that does not ask before it
    writes still writes at the end of its hold: holds of 4 session timeouts make the cut land
    early enough in a hold that the successor is granted before that write."""
    result = torture("zookeeper", nemesis="partition", seed=16, fenced=False, clients=3, duration=10.0,
                     timeout=1.0, hold=4.0, quiet=True)
    trial = result.trials[0]
    assert [done.step.nemesis for done in trial.executed if not done.skipped] == ["partition", "partition"]
    assert not trial.judgement.mutual_exclusion.ok, repr(result)
    assert trial.judgement.linearizability.ok is True, repr(result)


@pytest.mark.slow
def test_fenced_etcd_survives_killed_holders_and_leaders():
    result = torture("etcd", nemesis="kill,leader", seed=1, fenced=True, **SOAK)
    trial = result.trials[0]
    assert {done.step.nemesis for done in trial.executed if not done.skipped} == {"kill", "leader"}, repr(result)
    assert result.ok, repr(result)
    assert trial.rejoined >= 1  # killed clients came back as new processes
    # The lock kept being granted through the faults, as in the ZooKeeper soak. How much of the
    # run it was held is reported, not asserted: it depends on which member the leader kill
    # hits (the lab's clients talk to one member, and when the leader was that one every client
    # waited for its restart). Measured on this seed, quiet machine: 21-90 % held between runs.
    assert trial.judgement.acquires >= 10, f"the lock was granted {trial.judgement.acquires} times; {trial.judgement.availability}"


@pytest.mark.slow
def test_redis_under_pauses_and_a_failover_lets_two_holders_write():
    """Redis has no token and no session: a holder paused past its TTL writes late, so the
    store's record shows overlapping holds. (Whether the failover itself also loses an
    acknowledged SET, which makes the lock's own history non-linearizable, depends on the
    replication lag at the kill: it happens in some runs, so it is not asserted here.)"""
    result = torture("redis", nemesis="pause,leader", seed=2, **SOAK)
    trial = result.trials[0]
    assert any(done.step.nemesis == "leader" and not done.skipped for done in trial.executed), repr(result)
    assert not result.ok, repr(result)
    assert not trial.judgement.mutual_exclusion.ok, repr(result)


@pytest.mark.slow
def test_redlock_has_no_token_and_forgets_its_votes():
    """The pause lands between a holder's two writes: the nemesis waits for a hold that has
    just begun with its first write (measured: the pause came 2-7 ms after it), and holds of
    0.5 s, well inside the 1 s TTL, put the second write far away. Paused for 2 TTLs, its key
    expires, another client takes the lock and writes, and the paused one writes its "end"
    after that: Redlock has no token to fence it with, so the store's record shows the overlap
    in every run. Whether the majority restart also grants the lock twice depends on whether
    the restart finishes before the holder it caught releases, and it may catch one at the
    end of its hold: with holds of 0.1 s it did in 6 of 10 runs, so it is not asserted."""
    result = torture("redlock", nemesis="pause,leader", seed=2, **dict(SOAK, hold=0.5))
    trial = result.trials[0]
    restarted = [done for done in trial.executed if done.step.nemesis == "leader" and not done.skipped]
    assert restarted and len(restarted[0].target.split(",")) == 3, repr(result)  # 3 of 5 instances
    [paused] = [done.target for done in trial.executed if done.step.nemesis == "pause" and not done.skipped]
    overlaps = trial.judgement.mutual_exclusion.overlaps
    assert any(paused in (overlap.first_client, overlap.second_client) for overlap in overlaps), repr(result)


# ---- Ctrl-C ---------------------------------------------------------------------------------
def processes_with(marker: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker.encode() in (entry / "environ").read_bytes():
                    found.append(f"{entry.name}: {(entry / 'cmdline').read_bytes()[:120]!r}")
            except OSError:
                pass
    return found


@pytest.mark.slow
def test_ctrl_c_stops_every_client_and_server(tmp_path):
    home = tmp_path / "home"
    environment = dict(os.environ, LABKIT_HOME=str(home), LABKIT_BACKEND="local", PYTHONUNBUFFERED="1")
    command = subprocess.Popen([sys.executable, "-m", "labkit.cli", "torture", "--recipe", "zookeeper", "--clients",
                                "3", "--time", "120", "--nemesis", "pause", "--timeout", "1"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment)
    output = []
    try:
        deadline = time.monotonic() + 90
        for line in command.stdout:
            output.append(line)
            if line.startswith("  t=") or time.monotonic() > deadline:  # clients run, the nemesis struck
                break
        ports = [int(port) for port in re.findall(r"127\.0\.0\.1:(\d+)", "".join(output))]
        assert ports and processes_with(str(home)), "".join(output)
        command.send_signal(signal.SIGINT)
        rest, _ = command.communicate(timeout=60)
    finally:
        if command.poll() is None:
            command.kill()
            # killed, it stops nothing: its lab would outlive the test (its home is never used again)
            command.wait()
            subprocess.run([sys.executable, "-m", "labkit.cli", "down"], env=environment, capture_output=True, timeout=120)
    assert command.returncode == 130, "".join(output) + rest
    assert "Traceback" not in rest
    assert processes_with(str(home)) == []
    for port in ports:
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    assert not list((home / "labs").iterdir()) if (home / "labs").exists() else True
