"""etcd's pre-vote and the stranded acquire (notebook 07), on a lab started with
``labkit.up(etcd=3, network=True, etcd_pre_vote=...)``: one lab with pre-vote off (etcd
3.4's default, which Debian 12 ships, and the lab's), one with it on (etcd 3.5's default).

``isolated_leader_rejoins(lab)`` partitions the etcd leader with ``client-1`` away from the
two other members and ``client-2``. At the cut, while the isolated member still believes it
leads, ``client-1`` asks it for a lock (``EtcdMutex``, on a session granted before the cut).
It cannot commit anything without a majority, so the request waits; the member steps down by
itself within about an election timeout (check-quorum) and etcd answers the request with its
own "request timed out" about 6 s after it was sent (its request timeout: 5 s plus two
election timeouts). Meanwhile the majority elects a new leader and ``client-2`` takes the
lock. Then the network heals.

Without pre-vote, the isolated member campaigns every election timeout or so, and each
campaign raises its term. When it comes back its term is higher than the new leader's: its
first answer to the new leader carries that term, the leader steps down, and the cluster
holds one more election it did not need: the leader the majority had elected counts one more
``etcd_server_leader_changes_seen_total`` at the heal, and so does the rejoining member. The
third member usually counts one too, but not always: with check-quorum a follower that heard
from its leader within the last election timeout ignores a vote request (its "lease is not
expired"), and if that leader steps down and wins again at the higher term before the
follower's lease runs out, the follower goes on following the same member and never sees its
leader change (seen once on a busy machine). With pre-vote, a
member first asks whether a majority would vote for it (a pre-vote raises no term); cut off,
nobody answers, so its term stays where it was and it rejoins as a follower of the new
leader: only the rejoining member counts a change (it learns the new leader).

Measured here (etcd 3.4.23, heartbeat 50 ms, election timeout 500 ms; 9 runs of each
setting): the stranded acquire was sent while the old member was still leader in 18 of 18
runs and came back after 6.0 s every time with ``ConnectionFailedError (etcdserver: request
timed out)``; never a lock. Pre-vote off: the cut-off member's term was 4 to 7 above the
majority's just before the heal, and in 9 of 9 runs every member counted one more leader
change at the heal (the cluster agreed again 0.7 to 2.3 s after it); what holds every time is
that the majority's leader and the rejoining member count one. Pre-vote on: its term
never moved while cut; in 9 of 9 runs the two majority members counted no change at the heal
and the cut-off member one, and the leader stayed (the cluster agreed 0.09 to 0.36 s after
the heal).

The counts come from each member's /metrics, the terms from its /debug/vars (raft.status);
``status()``'s raftTerm is the term of the newest applied entry, which a cut-off member
never raises. What can fail: ``TimeoutError`` (from ``wait_until``) naming what did not
come; ``NetworkNotEnabled`` on a lab without ``network=True``. The network is healed before
the function returns, even when it fails, and its clients are closed.
"""
from __future__ import annotations

import re
import threading
import time
import uuid
from dataclasses import dataclass, field

from labkit.locks.etcd_mutex import EtcdMutex
from labkit.locks.etcd_session import EtcdSession
from labkit.servers import up
from labkit.progress import showing_progress, waiting_for
from labkit.timing import wait_until

PHASES = ("before the cut", "after the election", "after the heal")


def leader_changes(node) -> int:
    """``etcd_server_leader_changes_seen_total`` from the member's /metrics."""
    return int(float(_metric(node.metrics(), "etcd_server_leader_changes_seen_total")))


def _metric(text: str, name: str) -> str:
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    if found is None:
        raise ValueError(f"{name} is not in this member's /metrics")
    return found.group(1)


@dataclass
class PreVoteRun:
    """One partition of the leader and its heal. ``changes`` and ``terms`` map each phase
    (``PHASES``) to {member: value}; times are seconds after the cut."""

    pre_vote: bool
    old_leader: str
    new_leader: str
    old_state_at_send: str        # the old leader's raft state just after client-1 sent its acquire
    stranded_result: str          # what client-1's acquire gave
    stranded_s: float             # when it gave it
    elected_s: float              # the majority side has a leader
    majority_token: int           # client-2's lock
    healed_leader: str
    healed_s: float               # heal -> every member agrees on one leader and one term
    changes: dict[str, dict[str, int]] = field(default_factory=dict)
    terms: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def majority(self) -> list[str]:
        return sorted(name for name in self.changes["before the cut"] if name != self.old_leader)

    def changes_at_heal(self) -> dict[str, int]:
        """Leader changes each member counted between the election and the heal's end."""
        return {name: self.changes["after the heal"][name] - self.changes["after the election"][name]
                for name in self.changes["after the heal"]}

    @property
    def extra_election_at_heal(self) -> bool:
        """The majority side's members saw another leader change at the heal: the rejoining
        member forced an election. (The leader the majority elected counts it whenever it
        happens; its follower may not, when its check-quorum lease made it ignore the votes.)"""
        at_heal = self.changes_at_heal()
        return any(at_heal[name] > 0 for name in self.majority)

    def row(self) -> dict:
        at_heal = self.changes_at_heal()
        terms = self.terms
        return {"pre-vote": "on" if self.pre_vote else "off",
                "stranded acquire": f"{self.stranded_result} after {self.stranded_s:.1f} s",
                "old leader's term while cut": terms["after the election"][self.old_leader],
                "majority's term": terms["after the election"][self.majority[0]],
                "term after heal": terms["after the heal"][self.old_leader],
                "leader changes at heal (majority)": [at_heal[name] for name in self.majority],
                "leader changes at heal (old leader)": at_heal[self.old_leader],
                "extra election": self.extra_election_at_heal}


def _snapshot(lab) -> tuple[dict[str, int], dict[str, int]]:
    changes, terms = {}, {}
    for node in lab.etcd.nodes:
        changes[node.name] = leader_changes(node)
        terms[node.name] = node.raft_status()["term"]
    return changes, terms


def _settled(lab) -> bool:
    """Every member follows one leader at one term, and each has published it in /metrics
    (the counter and etcd_server_has_leader are set together)."""
    try:
        states = [node.raft_status() for node in lab.etcd.nodes]
        has_leader = [_metric(node.metrics(), "etcd_server_has_leader") for node in lab.etcd.nodes]
    except OSError:
        return False
    return (len({(state["lead"], state["term"]) for state in states}) == 1 and states[0]["lead"] != "0"
            and has_leader == ["1"] * len(states))


def _describe(error: Exception) -> str:
    cause = error.__cause__
    details = cause.details() if cause is not None and hasattr(cause, "details") else str(error)
    return f"{type(error).__name__} ({details})"


def isolated_leader_rejoins(lab, stranded_timeout: float = 10.0) -> PreVoteRun:
    """Partition the etcd leader with ``client-1`` away from the others and ``client-2``;
    ``client-1`` starts an acquire at the cut; the majority elects and ``client-2`` locks;
    once ``client-1``'s acquire has come back (``stranded_timeout``: its client's own gRPC
    deadline, longer than etcd's 6 s request timeout), heal, and wait until every member
    agrees on one leader and one term. Leader changes and terms are read before the cut,
    just before the heal, and after it."""
    wait_until(lambda: _settled(lab), "the etcd cluster agrees on a leader", timeout=30)
    old = lab.etcd.leader()
    rest = [node for node in lab.etcd.nodes if node is not old]
    stranded = lab.etcd.client(node=old, via="client-1", timeout=stranded_timeout)
    majority = lab.etcd.client(node=rest[0], via="client-2", timeout=5)
    prefix = f"/pre-vote-{uuid.uuid4().hex[:6]}"
    changes, terms = {}, {}
    outcome: list = []
    sessions: list[EtcdSession] = []
    try:
        sessions.append(EtcdSession(stranded, ttl=15))  # granted before the cut: the acquire is one Txn
        mutex = EtcdMutex(sessions[0], prefix, "client-1")
        changes[PHASES[0]], terms[PHASES[0]] = _snapshot(lab)
        try:
            cut = time.monotonic()
            lab.partition([old.name, "client-1"], [node.name for node in rest] + ["client-2"])

            def acquire():
                try:
                    outcome.append(f"the lock (token {mutex.lock(timeout=stranded_timeout)})")
                except Exception as error:  # the lesson shows which error the stranded client got
                    outcome.append(_describe(error))
                outcome.append(time.monotonic() - cut)
            attempt = threading.Thread(target=acquire, daemon=True)
            attempt.start()
            old_state = old.raft_status()["raftState"]
            elected = cut + wait_until(lambda: [node.role for node in rest].count("leader") == 1,
                                       "the majority side elects an etcd leader", timeout=30)
            new = next(node for node in rest if node.role == "leader")
            sessions.append(EtcdSession(majority, ttl=5))
            token = EtcdMutex(sessions[1], prefix, "client-2").lock(timeout=10)
            with waiting_for("client-1's stranded acquire to come back", stranded_timeout):
                attempt.join(stranded_timeout + 5)
            if len(outcome) < 2:
                raise TimeoutError(f"client-1's acquire did not come back within {stranded_timeout + 5:.0f} s")
            changes[PHASES[1]], terms[PHASES[1]] = _snapshot(lab)
        finally:
            lab.heal()
        settled = wait_until(lambda: _settled(lab), "every etcd member follows one leader at one term", timeout=30)
        changes[PHASES[2]], terms[PHASES[2]] = _snapshot(lab)
        healed_leader = lab.etcd.leader().name
    finally:
        for session in reversed(sessions):
            session.close()
        for client in (stranded, majority):
            client.close()
    return PreVoteRun(old.pre_vote, old.name, new.name, old_state[5:], outcome[0], outcome[1], elected - cut,
                      token, healed_leader, settled, changes, terms)


def compare(runs: int = 1, **options) -> list[PreVoteRun]:
    """``runs`` of ``isolated_leader_rejoins`` on a lab of 3 etcd members with pre-vote off,
    then as many on one with pre-vote on; each lab is stopped before the next starts.
    ``options`` go to ``labkit.up`` (e.g. ``keep_previous=True`` in a notebook that keeps
    its own lab running)."""
    results = []
    with showing_progress("isolated etcd leader rejoins", total=2 * runs) as shown:
        for pre_vote in (False, True):
            with up(zookeeper=0, etcd=3, redis=False, network=True, quiet=True, etcd_pre_vote=pre_vote,
                    **options) as lab:
                for _ in range(runs):
                    shown.step(f"pre-vote {'on' if pre_vote else 'off'}")
                    results.append(isolated_leader_rejoins(lab))
    return results
