"""The verdicts of a torture run, each from the evidence it trusts.

* Mutual exclusion (``labkit.record.checker.check_mutual_exclusion``) trusts the protected
  resource: the fenced store's own log of every write, in the order it ran them. It says
  whether two holds ever acted on the resource at once, whatever the clients believed.
* Linearizability (``labkit.torture.linearizable``) judges the lock service: could every
  answer the clients got have come from one mutex with leases, in real time? It reads the
  clients' events (invoke = "requested", or the client's previous event before a release,
  not the "error" its failure reports;
  complete = "acquired" / "released") and the faults the nemesis did, which say when a
  lease may legally have lapsed. What can go wrong: a lapse the lab did not cause (a
  session that expired because the machine was overloaded) is legal only if the client
  said "lost"; otherwise it shows as a violation, which is then the server's or the
  machine's, and the explanation names the hold.
* At most N holders (``check_at_most_holders``), for a semaphore recipe (``Recipe.primitive``
  "semaphore"): the same record, judged for no more than N holds acting at once; the
  linearizability search, whose model is one mutex, is not run for it.
* One leader per epoch, for an election (``Recipe.primitive`` "election"): the same record, judged
  for mutual exclusion and for no epoch (the leader's token) under two clients, in the
  store's record or in the clients' "acquired" events (``labkit.record.epochs``). A leader
  is a mutex's holder, so the linearizability search runs as for a mutex.
* Availability: the share of the run during which some client held the lock, the longest
  time nobody did, and the typical hand-off (a release to the next acquire).

Leases come in two kinds. A session (ZooKeeper) or a kept-alive lease (etcd Mutex) lapses
only when its client is cut off from a quorum: by a pause, kill, expiry or partition of that
client, by a cut of its server from the rest of the ensemble, by a leader's kill or cut, or
before the client heard "lost". Not at any moment after such a fault began: the leader heard
of the session shortly before it (the client sends something every third of its timeout,
its server passes it on), and expires it no sooner than the timeout after that
(``earliest_lapse``, docs/TORTURE.md). An expiry the nemesis orders (``expire``) may come at
once. A TTL (Redis, python-etcd3's Lock)
lapses only once the TTL has run out since the key was set, which is taken as half a TTL
before "acquired" at the earliest (the acquire's invoke if the nemesis froze or killed the
client meanwhile): a key that vanishes earlier (a failover, a clock step) is the lock
service breaking its promise.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from labkit.locks.registry import Recipe
from labkit.servers.services.zookeeper import TICK_MS
from labkit.record.checker import Verdict, check_at_most_holders, check_mutual_exclusion
from labkit.record.epochs import check_one_leader_per_epoch
from labkit.record.history import FAULT_CLIENT, History
from labkit.stats import percentile
from labkit.torture.linearizable import Linearizability, Operation, check_mutex
from labkit.torture.nemesis import Executed

CLIENT_FAULTS = ("pause", "kill", "expire", "partition")


def _exclusion(writes: list[Any], history: History, holders: int) -> Verdict:
    return check_mutual_exclusion(writes, history=history)


def _at_most_holders(writes: list[Any], history: History, holders: int) -> Verdict:
    return check_at_most_holders(writes, holders, history=history)


def _one_leader_per_epoch(writes: list[Any], history: History, holders: int) -> Verdict:
    exclusion = check_mutual_exclusion(writes, history=history)
    epochs = check_one_leader_per_epoch(writes, history)
    return Verdict(exclusion.ok and epochs.ok, f"{epochs.claim}, and no two leaders wrote during the same period",
                   f"{epochs.summary} {exclusion.summary}", overlaps=exclusion.overlaps,
                   problems=epochs.problems + exclusion.problems, origin=exclusion.origin)


# What the resource's record must show, by the recipe's primitive (``Recipe.primitive``):
# another primitive adds its own judgment here. ``MUTEX_MODELS``: the primitives whose
# answers the linearizability search can judge, against one mutex with leases.
SAFETY = {"mutex": ("Mutual exclusion", _exclusion), "semaphore": ("At most N holders", _at_most_holders),
          "election": ("One leader per epoch", _one_leader_per_epoch)}
MUTEX_MODELS = ("mutex", "election")
LAPSE_GRACE = 1.0  # seconds after a client fault ends during which its session may still be ended
# The earliest lapse (see earliest_lapse): a server's timeout may last DRIFT_MARGIN less
# (the margin ZooKeeperLock and EtcdSession keep: a clock up to 25 % fast); a live client
# sends something at least every SILENCE of its timeout (kazoo pings after a third of it
# without a request; EtcdSession keeps its lease alive every TTL/3); DELIVERY covers
# transit and a busy machine.
DRIFT_MARGIN = 0.2
SILENCE = 1 / 3
DELIVERY = 0.2


def earliest_lapse(recipe: Recipe, timeout: float) -> float:
    """Seconds after a fault cut a client off (froze it, killed it, cut its links or its
    server's) before which its session or kept-alive lease cannot have lapsed:
    timeout x (1 - DRIFT_MARGIN) - timeout x SILENCE - relay - DELIVERY, never below 0.
    ``relay``: a ZooKeeper follower tells the leader of its clients' pings only when the
    leader pings it, every half tick; an etcd member forwards a keep-alive at once (0).
    Until the cut the client sent something at least every timeout x SILENCE, which reached
    the leader within relay + DELIVERY; the leader expires a session no sooner than the
    timeout after the last it heard of it, on a clock up to 25 % fast (so after
    timeout x (1 - DRIFT_MARGIN)); and a new leader starts every session's clock afresh
    (later still)."""
    relay = TICK_MS / 2000 if recipe.service == "zookeeper" else 0.0
    return max(0.0, timeout * (1 - DRIFT_MARGIN) - timeout * SILENCE - relay - DELIVERY)


def cut_off(done: Executed) -> tuple[str, ...]:
    """The clients whose sessions an executed step may have ended (none if it was skipped)."""
    if done.skipped:
        return ()
    return (done.target,) if done.step.nemesis in CLIENT_FAULTS else done.clients


@dataclass
class Availability:
    """``held_share``: part of [start, end] during which some client held the lock;
    ``longest_gap`` (s) starting ``longest_gap_at`` (s after start); ``handoff_median`` (s)."""

    held_share: float
    longest_gap: float
    longest_gap_at: float
    handoff_median: float | None
    holds: list[tuple[str, float, float]] = field(default_factory=list)

    def describe(self) -> str:
        handoff = "" if self.handoff_median is None else f"; a hand-off took {1000 * self.handoff_median:.0f} ms (median)"
        return (f"the lock was held {100 * self.held_share:.0f}% of the time; the longest time nobody held it was "
                f"{self.longest_gap:.2f} s (from t={self.longest_gap_at:.1f} s){handoff}.")


class _Incarnations:
    """A killed client rejoins under its name as a new process: ``client-3#2`` is its second
    life. The boundary is the "kill" fault in the history, recorded just after SIGKILL:
    every event of the old process is stamped before it, every event of the new one after."""

    def __init__(self, history: History):
        self.kills: dict[str, list[float]] = {}
        for fault in history.events(client=FAULT_CLIENT, kind="fault"):
            if fault.detail.get("what") == "kill":
                self.kills.setdefault(str(fault.detail.get("target")), []).append(fault.time)

    def process(self, client: str, at: float) -> str:
        lives = bisect.bisect_left(self.kills.get(client, []), at) + 1
        return client if lives == 1 else f"{client}#{lives}"

    def killed_at(self, process: str) -> float | None:
        client, _, life = process.partition("#")
        kills = self.kills.get(client, [])
        index = int(life or 1) - 1
        return kills[index] if index < len(kills) else None


def operations(history: History, executed: list[Executed], lease: str, ttl: float, timeout: float,
               end: float, lapse_after: float = 0.0) -> tuple[list[Operation], list[tuple[str, float, float]]]:
    """The lock operations of a run, and the holds [(process, acquired, ended)] they imply.
    ``lapse_after``: seconds after a fault struck before which the sessions it cut off
    cannot have lapsed (``earliest_lapse``; 0: at any moment after it began)."""
    lives = _Incarnations(history)
    ops: list[Operation] = []
    holds: list[tuple[str, float, float]] = []
    ttl_holds: list[tuple[str, int, float, float, float, str]] = []  # (process, hold, invoke, acquired, ended, how)
    for client in history.clients():
        state: dict[str, dict[str, Any]] = {}
        for event in history.events(client=client):
            process = lives.process(client, event.time)
            mine = state.setdefault(process, {"pending": None, "hold": None, "last": event.time, "holds": 0})
            kind, at = event.kind, event.time
            if kind == "requested" and mine["hold"] is not None:
                # a new round without "released" or "lost": the release failed (its server was
                # unreachable), and may or may not have happened
                ops.append(Operation(process, "release", mine["last"], None, "its release failed", mine["holds"]))
                _end_hold(holds, ttl_holds, process, mine, mine["last"], "failed")
            if kind == "requested":
                mine["pending"] = at  # a request without an answer before it failed: no effect
            elif kind == "acquired":
                invoke = mine["pending"] if mine["pending"] is not None else mine["last"]
                mine["holds"] += 1
                ops.append(Operation(process, "acquire", invoke, at, hold=mine["holds"]))
                mine["pending"], mine["hold"] = None, (invoke, at)
            elif kind == "released" and mine["hold"] is not None:
                ops.append(Operation(process, "release", mine["last"], at, hold=mine["holds"]))
                _end_hold(holds, ttl_holds, process, mine, at, "released")
            elif kind == "lost" and mine["hold"] is not None:
                if lease == "session":
                    ops.append(Operation(process, "lapse", mine["hold"][0], at, f"{process} heard 'lost'",
                                         mine["holds"]))
                _end_hold(holds, ttl_holds, process, mine, at, "lost")
            elif kind in ("timeout", "error", "lost"):
                mine["pending"] = None
            if not (kind == "error" and mine["hold"] is not None):
                # a holder's "error" is its release failing (ZooKeeperLock.release): that release
                # began before it, at the event before, and may have taken effect at any moment since
                mine["last"] = at
        for process, mine in state.items():
            killed = lives.killed_at(process)
            if mine["pending"] is not None:  # killed while waiting, or still waiting at the end
                ops.append(Operation(process, "acquire", mine["pending"], None, "it never heard back",
                                     mine["holds"] + 1))
            if mine["hold"] is not None:  # a release may have been under way when it died or the run ended
                ops.append(Operation(process, "release", mine["last"], None, "its release never answered",
                                     mine["holds"]))
            if mine["hold"] is not None:
                _end_hold(holds, ttl_holds, process, mine, end if killed is None else killed, "open")
    if lease == "ttl":
        for process, number, invoke, acquired, ended, how in ttl_holds:
            # The TTL starts at the successful SET (or lease grant), not at "requested": a client
            # may poll for seconds first. Assume "acquired" is stamped within half a TTL of it,
            # unless the nemesis froze or killed that client meanwhile.
            hit = any(done.step.nemesis in CLIENT_FAULTS and not done.skipped and invoke <= done.start <= acquired
                      and lives.process(done.target, done.start) == process for done in executed)
            began = invoke if hit else max(invoke, acquired - ttl / 2)
            if how != "released" or ended > began + ttl:
                ops.append(Operation(process, "lapse", began + ttl, None, "its TTL ran out", number))
    else:
        for done in executed:
            for client in cut_off(done):
                process = lives.process(client, done.start)  # the life it hit: a kill comes after start
                # an expiry the nemesis orders may come at once; a silence needs its timeout
                begin = done.start + (0.0 if done.step.nemesis == "expire" else lapse_after)
                window_end = None if done.step.nemesis == "kill" else done.end + timeout + LAPSE_GRACE
                ops.append(Operation(process, "lapse", begin, max(window_end, begin) if window_end else None,
                                     f"{done.step.nemesis} of {done.target}", hold=None))
    return ops, sorted(holds, key=lambda hold: hold[1])


def _end_hold(holds, ttl_holds, process: str, mine: dict[str, Any], at: float, how: str) -> None:
    invoke, acquired = mine["hold"]
    holds.append((process, acquired, max(acquired, at)))
    ttl_holds.append((process, mine["holds"], invoke, acquired, at, how))
    mine["hold"] = None


def availability(holds: list[tuple[str, float, float]], start: float, end: float) -> Availability:
    merged: list[list[float]] = []
    for _, begin, finish in sorted(holds, key=lambda hold: hold[1]):
        begin, finish = max(begin, start), min(finish, end)
        if finish <= begin:
            continue
        if merged and begin <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], finish)
        else:
            merged.append([begin, finish])
    held = sum(finish - begin for begin, finish in merged)
    gaps = [(merged[0][0] - start, start)] if merged else [(end - start, start)]
    gaps += [(b[0] - a[1], a[1]) for a, b in zip(merged, merged[1:])]
    if merged:
        gaps.append((end - merged[-1][1], merged[-1][1]))
    longest, longest_at = max(gaps)
    starts = sorted(begin for _, begin, _ in holds)
    handoffs = []
    for process, _, finish in holds:
        following = bisect.bisect_right(starts, finish)
        if following < len(starts) and starts[following] - finish < 10.0:
            handoffs.append(starts[following] - finish)
    return Availability(held / max(end - start, 1e-9), longest, longest_at - start,
                        percentile(handoffs, 0.5) if handoffs else None, holds)


@dataclass
class Judgement:
    """Every verdict of one trial, and the numbers behind them."""

    mutual_exclusion: Verdict
    linearizability: Linearizability
    availability: Availability
    acquires: int
    writes_accepted: int
    writes_rejected: int
    latencies: list[tuple[float, float]]  # (seconds after start the acquire was invoked, seconds it took)
    start: float
    safety: str = "Mutual exclusion"  # what ``mutual_exclusion`` judged (SAFETY's name for the recipe's primitive)
    linearizability_judged: bool = True  # False: the recipe is no mutex, the search does not apply

    @property
    def ok(self) -> bool:
        return self.mutual_exclusion.ok and (self.linearizability.ok is True or not self.linearizability_judged)

    def lines(self) -> list[str]:
        """The verdicts in words, the first violation explained."""
        exclusion = self.mutual_exclusion
        first = exclusion.overlaps[0].explain(self.start) if exclusion.overlaps else ""
        first = first or (exclusion.problems[0] if exclusion.problems else "")
        lines = [f"{self.safety} (the store's record): {'OK' if exclusion.ok else 'VIOLATED'}. {exclusion.summary}"
                 + (f" First: {first}" if first else ""),
                 (f"Linearizability (the lock service vs a mutex with leases): "
                  f"{ {True: 'OK', False: 'VIOLATED', None: 'UNKNOWN'}[self.linearizability.ok]}. "
                  f"{self.linearizability.explanation}") if self.linearizability_judged else
                 "Linearizability: not judged (its model is one mutex; this recipe admits several holders).",
                 f"Availability: {self.availability.describe()}"]
        return lines

    def numbers(self) -> dict[str, Any]:
        waits = sorted(seconds for _, seconds in self.latencies)
        return {"acquires": self.acquires, "writes_accepted": self.writes_accepted,
                "stale_writes_rejected": self.writes_rejected, "overlaps": len(self.mutual_exclusion.overlaps),
                "linearizable": self.linearizability.ok, "operations_checked": self.linearizability.operations,
                "held_share": round(self.availability.held_share, 4),
                "longest_gap_s": round(self.availability.longest_gap, 3),
                "handoff_median_ms": None if self.availability.handoff_median is None
                else round(1000 * self.availability.handoff_median, 2),
                "acquire_wait_median_ms": round(1000 * percentile(waits, 0.5), 2) if waits else None}


def judge(history: History, writes: list[Any], executed: list[Executed], recipe: Recipe, ttl: float,
          timeout: float, start: float, end: float, holders: int = 1) -> Judgement:
    ops, holds = operations(history, executed, recipe.lease, ttl, timeout, end,
                            lapse_after=earliest_lapse(recipe, timeout))
    safety, check = SAFETY[recipe.primitive]
    exclusion = check(writes, history, holders)
    judged = recipe.primitive in MUTEX_MODELS
    linearizability = (check_mutex(ops, origin=start) if judged
                       else Linearizability(None, len(ops), 0, "not judged: the recipe admits several holders"))
    acquires = [op for op in ops if op.action == "acquire" and op.complete is not None]
    latencies = [(op.invoke - start, op.complete - op.invoke) for op in acquires]
    rejected = sum(1 for write in writes if not write.accepted)
    return Judgement(exclusion, linearizability, availability(holds, start, end), len(acquires),
                     len(writes) - rejected, rejected, latencies, start, safety=safety.replace("N", str(holders)),
                     linearizability_judged=judged)
