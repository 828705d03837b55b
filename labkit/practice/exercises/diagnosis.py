"""Turn what a scenario recorded into verdicts, with the cause in plain words.

A run (``ZooKeeperRun`` or ``EtcdRun``) offers: ``title``, ``path``, ``history``,
``resource``, ``contenders``, ``expired`` (clients whose session the checker ended),
``stuck``, ``patience``, ``entry``, ``session_lost`` and ``entries_die`` (words),
``acquired_while_not_lowest`` ({client: whose entry was lowest when its acquire
returned}), ``woken_by_owner(name)``, ``nodes_made()``,
``lowest_now()``, ``entries_of(name)`` and ``watched()``. Every sentence below is built from those records.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable

from labkit.record.checker import check_fifo, check_mutual_exclusion
from labkit.practice.exercises.contention import GAVE_UP, HOLDING, RELEASED, WAITING, nobody_ever_held
from labkit.practice.exercises.report import Report


def run_scenarios(report: Report, scripts: list[tuple[str, Callable[[Any], None]]],
                  make_run: Callable[[int, str], Any], quiet: Callable[[], Any] = contextlib.nullcontext) -> None:
    """Play each (title, script) on a fresh run from ``make_run(number, title)`` and judge it
    into ``report``; wakeups are counted in the first (fault-free) scenario only. If nobody
    ever got the lock, the fault scenarios would prove nothing, so they are skipped."""
    for number, (title, script) in enumerate(scripts, start=1):
        with quiet():
            run = make_run(number, title)
            try:
                script(run)
                report.scenarios.append(title)
                judge_run(run, report, counts_wakeups=number == 1)
            finally:
                run.close()
        if nobody_ever_held(run.contenders):
            report.scenarios.append("the fault scenarios were skipped: without faults, nobody ever got the lock")
            break


def judge_run(run: Any, report: Report, counts_wakeups: bool) -> None:
    """Judge one scenario into ``report`` (verdicts of several scenarios are merged)."""
    where = f" [scenario: {run.title}]"
    _judge_mutual_exclusion(run, report, where)
    _judge_fifo(run, report, where)
    if counts_wakeups:
        _judge_wakeups(run, report, where)
    _judge_progress(run, report, where)
    _judge_sessions(run, report, where)


def _judge_mutual_exclusion(run: Any, report: Report, where: str) -> None:
    writes = run.resource.writes()
    if not writes:
        return                                   # nobody ever held: "progress" says why
    # the history tells a client's holds apart when its entries carry no number (no token)
    verdict = check_mutual_exclusion(writes, history=run.history)
    if verdict.ok:
        report.judge("mutual exclusion", True, "never two holders at once, judged from the resource's own "
                                               "record of who wrote when")
        return
    sentences, causes = [], []
    # the waiters that skipped the re-check first: theirs is the mistake the scenario exists to show
    ordered = sorted(run.acquired_while_not_lowest.items(), key=lambda item: item[0] in run.expired)
    for name, lowest_owner in ordered:
        woken_by = run.woken_by_owner(name)
        if name in run.expired:
            sentences.append(f"{name}'s {run.session_lost} and its {run.entry} was gone, yet its acquire returned as "
                             f"if it held the lock while {lowest_owner} held it; when the session is lost, "
                             "acquire must raise, not return")
            causes.append("ignores session loss")
        elif woken_by in run.expired and woken_by != lowest_owner:
            sentences.append(f"{name} acquired while {lowest_owner} still held it — after {woken_by}'s {run.entry} "
                             f"was deleted ({woken_by}'s {run.session_lost}), {name} did not re-check that it was "
                             "now the lowest")
            causes.append("no re-check")
        else:
            sentences.append(f"{name} acquired while {lowest_owner}'s {run.entry} was still lower: it took the lock "
                             "without being the lowest")
            causes.append("two holders")
    # the record's evidence about the first client named, if it has some
    named = ordered[0][0] if ordered else None
    overlap = next((o for o in verdict.overlaps if named in (o.first_client, o.second_client)),
                   verdict.overlaps[0] if verdict.overlaps else None)
    evidence = overlap.explain(verdict.origin) if overlap else verdict.summary
    report.judge("mutual exclusion", False,
                 "two clients held the lock at once: " + ("; ".join(sentences) or "see the record") +
                 f". The resource's record: {evidence}{where}", causes[0] if causes else "two holders")
    report.causes += [cause for cause in causes if cause not in report.causes]


def _judge_fifo(run: Any, report: Report, where: str) -> None:
    if not run.history.events(kind="acquired"):
        return
    if not run.history.events(kind="created"):
        report.judge("FIFO order", False, f"no numbered (sequential) {run.entry} was created, so there is no "
                                          "queue: waiters race for the lock and nobody is served in arrival "
                                          "order. Create it with sequence=True, through the client acquire() "
                                          "is given" + where, "no queue")
        return
    verdict = check_fifo(run.history)
    if verdict.ok:
        report.judge("FIFO order", True, "waiters got the lock in the order their entries were created")
    else:
        report.judge("FIFO order", False, "served out of order: " + "; ".join(verdict.problems[:2]) + where,
                     "not FIFO")


def _judge_wakeups(run: Any, report: Report, where: str) -> None:
    counts = run.history.wakeups_per_release()
    report.wakeups = counts
    if not counts:
        report.judge("wakeups per release", False, "no release handed the lock on, so there was nothing to count"
                     + where)
    elif max(counts) > 1:
        report.judge("wakeups per release", False,
                     f"a release woke up to {max(counts)} waiters (per release: {counts}) though only one can "
                     f"take the lock: a thundering herd. The waiters watched {run.watched()}. Watch only the "
                     f"{run.entry} just before yours" + where, "herd")
    elif min(counts) == 0:
        report.judge("wakeups per release", False,
                     f"some releases woke nobody (per release: {counts}): the next holder did not learn of the "
                     "release from a watch. Does it poll?" + where, "polling")
    else:
        report.judge("wakeups per release", True, f"each release woke exactly one waiter ({len(counts)} releases)")


def _judge_progress(run: Any, report: Report, where: str) -> None:
    stuck = [name for name in run.stuck if name not in run.expired]
    raised = [c for c in run.contenders if c.state == GAVE_UP and c.name not in run.expired]
    for contender in raised:
        error = contender.error
        report.judge("progress", False, f"{contender.name}'s acquire or release raised {type(error).__name__}: "
                                        f"{error}{where}", "raised")
    if stuck:
        report.judge("progress", False, _why_stuck(run, stuck) + where, "stuck")
    if not raised and not stuck:
        report.judge("progress", True, "every client that stayed alive got the lock and released it")


def _why_stuck(run: Any, stuck: list[str]) -> str:
    waiting = ", ".join(stuck)
    lowest = run.lowest_now()
    states = {c.name: c.state for c in run.contenders}
    if lowest is None:
        return (f"stuck: {waiting} waited {run.patience:.0f} s although the queue is empty: "
                "a wait that nothing will ever end")
    node, owner = lowest
    ephemeral = run.nodes_made().get(node, (owner, True))[1]
    if owner in run.expired and not ephemeral:
        return (f"stuck: {owner}'s {run.session_lost}, but its {run.entry} {node} is still there: it was created "
                f"without ephemeral=True, so it outlives its session, and {waiting} waited until the checker "
                f"gave up ({run.patience:.0f} s). Create the node ephemeral so the server deletes it "
                "when the session dies")
    if states.get(owner) == RELEASED:
        return f"stuck: {owner} released, but its {run.entry} {node} is still there, so {waiting} waited for ever"
    if states.get(owner) == WAITING:
        return (f"stuck: {owner}'s {run.entry} {node} is the lowest, yet {owner}'s acquire has not returned in "
                f"{run.patience:.0f} s: the lowest {run.entry} holds the lock, and its owner should see that")
    if states.get(owner) == HOLDING:
        return f"stuck: {owner} holds the lock and its release did not return within {run.patience:.0f} s"
    return (f"stuck: {waiting} waited {run.patience:.0f} s while nobody held the lock; the lowest {run.entry} "
            f"is {node} ({owner}, {states.get(owner, 'gone')}). A watch that never fires?")


def _judge_sessions(run: Any, report: Report, where: str) -> None:
    persistent = [(node, owner) for node, (owner, ephemeral) in run.nodes_made().items() if not ephemeral]
    if persistent:
        node, owner = persistent[0]
        report.judge("session handling", False,
                     f"{owner} created {node} without ephemeral=True: the node outlives its session, so a "
                     "client that dies holding or queueing blocks everyone behind it" + where, "not ephemeral")
        return
    for name in sorted(run.expired):
        contender = next(c for c in run.contenders if c.name == name)
        state, acquired = contender.state, contender.acquired_at is not None
        if acquired and name in run.acquired_while_not_lowest:
            report.judge("session handling", False,
                         f"{name}'s {run.session_lost} while it waited, yet its acquire returned as if it held the "
                         f"lock; check that your {run.entry} still exists (or catch the session error) and raise"
                         + where, "ignores session loss")
        elif acquired and len(run.entries_of(name)) > 1:
            report.judge("session handling", True,
                         f"{run.entries_die} with the session; a waiter whose {run.session_lost} queued again "
                         f"with a new {run.entry} and waited for its turn")
        elif state == WAITING:
            report.judge("session handling", False,
                         f"{name}'s {run.session_lost} while it waited, but its acquire kept waiting for "
                         f"{run.patience:.0f} s; on session loss, give up and raise" + where, "ignores session loss")
        elif state == GAVE_UP and not acquired:
            report.judge("session handling", True,
                         f"{run.entries_die} with the session; a waiter whose {run.session_lost} gave up "
                         f"({type(contender.error).__name__})")
