"""Notebook 09, leader election: an election is a lock with an epoch (C28). The
Kubernetes-style lease election's experiments (C31) are in ``lease_elections.py``.

* ``EtcdctlCandidate``: ``etcdctl elect NAME PROPOSAL`` (Go's Election) or ``etcdctl elect
  -l NAME`` (its Observe) as a process of its own; ``resign()`` sends SIGINT, on which
  etcdctl resigns.
* ``etcdctl_interop`` / ``kazoo_interop``: a labkit candidate and a peer (etcdctl; kazoo's
  Election) in one election, each seeing the other lead in turn.
* ``paused_leader`` (``paused_leaders``: etcd and ZooKeeper at once): an elected client process is frozen past its lease / session, a new
  leader is elected and writes, the old one wakes and writes with its old epoch: the fenced
  store refuses it.
* ``kill_and_time_failover``: kill an election's leader (SIGKILL), measure how long until
  the follower leads; ``measure_failover``: the benchmark's row, failover time against the
  lease's timeout.

What can fail: ``TimeoutError`` when an expected leader or event does not come in time,
``labkit.clients.ClientError`` when a client process fails, python-etcd3's and kazoo's
connection errors, ``ServerNotFound`` when etcdctl is not installed.
"""
from __future__ import annotations

import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kazoo.recipe.election import Election

from labkit.clients import spawn_clients
from labkit.lessons.pauses_and_fencing import PauseOutcome, pause_past_timeout, pause_past_timeout_at_once
from labkit.locks.etcd_election import EtcdElection, Leader
from labkit.locks.etcd_session import EtcdSession
from labkit.locks.registry import lease_durations_for
from labkit.locks.zookeeper_election import ZooKeeperElection
from labkit.progress import shows_progress
from labkit.record.history import History
from labkit.servers.runners.discovery import find_etcdctl
from labkit.stats import percentile
from labkit.timing import wait_until

if TYPE_CHECKING:
    from labkit.servers.lab import Lab


# ---- etcdctl elect as a peer ------------------------------------------------------------------
class EtcdctlCandidate:
    """``etcdctl elect NAME PROPOSAL`` (``proposal=None``: ``etcdctl elect -l NAME``, an
    observer) running against the lab. ``lines`` collects what it prints: for each leader
    it sees, the leader's key, then its proposal. Always ``resign()`` or use ``with``:
    on SIGINT etcdctl resigns (deletes its key) and exits; its session's lease, holding no
    key any more, runs out by its TTL (60 s). A SIGKILLed etcdctl would lead on for those
    60 s: its key lives as long as that lease."""

    def __init__(self, lab: Lab, name: str, proposal: str | None = None):
        command = [lab.etcd.etcdctl_path or find_etcdctl(), "--endpoints", ",".join(lab.etcd.endpoints), "elect"]
        command += ["-l", name] if proposal is None else [name, proposal]
        self.lines: list[str] = []
        self._process = subprocess.Popen(command, env=lab.etcd.etcdctl_environment(), stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self._process.stdout:  # type: ignore[union-attr]
            self.lines.append(line.rstrip("\n"))

    def leaders_seen(self) -> list[tuple[str, str]]:
        """(key, proposal) of every leader it printed, in order."""
        lines = list(self.lines)
        return [(lines[i], lines[i + 1]) for i in range(0, len(lines) - 1, 2)]

    def wait_to_see(self, proposal: str, timeout: float = 15.0) -> str:
        """Block until the last leader it printed proposes ``proposal``; return the proposal."""
        wait_until(lambda: self.leaders_seen() and self.leaders_seen()[-1][1] == proposal,
                   f"etcdctl to print a leader proposing {proposal!r} (it printed {self.lines})", timeout=timeout)
        return self.leaders_seen()[-1][1]

    def resign(self, timeout: float = 15.0) -> int:
        """SIGINT (etcdctl resigns, or stops observing) and wait; returns its exit code."""
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGINT)
        try:
            return self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            return self._process.wait(timeout)
        finally:
            self._reader.join(timeout)

    def __enter__(self) -> "EtcdctlCandidate":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.resign()


@dataclass
class ElectionInterop:
    """Who each side saw as leader, step by step: ``steps`` rows of (what happened, the
    leader labkit saw, the leader the peer saw)."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)

    def add(self, what: str, labkit_sees: str, peer_sees: str) -> None:
        self.steps.append({"step": what, "labkit sees": labkit_sees, "peer sees": peer_sees})


def etcdctl_interop(lab: Lab, name: str) -> ElectionInterop:
    """labkit campaigns first and leads; ``etcdctl elect`` campaigns behind it and an
    ``etcdctl elect -l`` observer watches; labkit resigns, etcdctl is elected and labkit's
    observer sees it; labkit campaigns again, etcdctl resigns (SIGINT), labkit leads again
    and etcdctl's observer prints it."""
    outcome = ElectionInterop()
    client = lab.etcd.client()
    session = EtcdSession(client, ttl=5)
    ours = EtcdElection(session, name, identifier="labkit")
    stop = threading.Event()
    seen: list[Leader] = []
    try:
        outcome.epochs.append(ours.campaign("labkit-1"))
        with EtcdctlCandidate(lab, name) as observer, EtcdctlCandidate(lab, name, "etcdctl") as go:
            watcher = threading.Thread(target=lambda: seen.extend(ours.observe(stop)), daemon=True)
            watcher.start()
            wait_until(lambda: len(ours.candidates()) == 2, "etcdctl's key to queue behind ours")
            outcome.add("labkit campaigns, then etcdctl", ours.leader().proposal, observer.wait_to_see("labkit-1"))
            ours.resign()
            go.wait_to_see("etcdctl")         # etcdctl prints its key once Campaign returns
            wait_until(lambda: seen and seen[-1].proposal == "etcdctl", "labkit's observer to see etcdctl lead")
            outcome.epochs.append(seen[-1].epoch)
            outcome.add("labkit resigns", seen[-1].proposal, observer.wait_to_see("etcdctl"))
            again = threading.Thread(target=lambda: outcome.epochs.append(ours.campaign("labkit-2")), daemon=True)
            again.start()
            wait_until(lambda: len(ours.candidates()) == 2, "our key to queue behind etcdctl's")
            go.resign()
            again.join(15)
            outcome.add("etcdctl resigns (SIGINT)", ours.leader().proposal, observer.wait_to_see("labkit-2"))
    finally:
        stop.set()
        ours.resign()
        session.close()
        client.close()
    return outcome


def kazoo_interop(lab: Lab, path: str) -> ElectionInterop:
    """labkit's ZooKeeperElection leads; kazoo's own ``Election.run`` waits behind it; labkit
    resigns and kazoo's leader function runs; labkit campaigns again and leads once kazoo's
    function returns. Each step reads who leads from both sides."""
    outcome = ElectionInterop()
    ours_client, kazoo_client = lab.zookeeper.client(timeout=4.0), lab.zookeeper.client(timeout=4.0)
    ours = ZooKeeperElection(ours_client, path, identifier="labkit")
    theirs = Election(kazoo_client, path, "kazoo")
    leading, step_down = threading.Event(), threading.Event()

    def lead() -> None:
        leading.set()
        step_down.wait(30)
    runner = threading.Thread(target=theirs.run, args=(lead,), daemon=True)
    try:
        outcome.epochs.append(ours.campaign(timeout=15))
        runner.start()
        wait_until(lambda: len(theirs.contenders()) == 2, "kazoo's candidate to queue behind ours")
        outcome.add("labkit campaigns, then kazoo", ours.leader().identifier, theirs.contenders()[0])
        ours.resign()
        wait_until(leading.is_set, "kazoo's leader function to run", timeout=15)
        outcome.epochs.append(ours.leader().epoch)
        outcome.add("labkit resigns", ours.leader().identifier, theirs.contenders()[0])
        again = threading.Thread(target=lambda: outcome.epochs.append(ours.campaign(timeout=15)), daemon=True)
        again.start()
        wait_until(lambda: len(theirs.contenders()) == 2, "our candidate to queue behind kazoo's")
        step_down.set()
        again.join(15)
        outcome.add("kazoo's function returns", ours.leader().identifier, theirs.contenders()[0])
    finally:
        step_down.set()
        ours.resign()
        runner.join(15)
        for client in (ours_client, kazoo_client):
            client.stop()
            client.close()
    return outcome


# ---- the epoch fences the old leader ----------------------------------------------------------
def paused_leader(lab: Lab, recipe: str = "etcd-election", timeout: float = 1.0, pause: float = 3.0) -> PauseOutcome:
    """Notebook 04's experiment on an election (``recipe``: "etcd-election" or
    "zookeeper-election"): the leader is frozen longer than its lease / session, the next
    candidate is elected and writes with its epoch, the old leader wakes and writes with
    its own. The store is fenced: it refuses the lower epoch."""
    return pause_past_timeout(lab, recipe, fenced=True, timeout=timeout, pause=pause,
                              name=f"/elections/pause-{recipe}-{time.time_ns()}")


@shows_progress("paused leaders of each election recipe")
def paused_leaders(lab: Lab, timeout: float = 1.0, pause: float = 3.0) -> dict[str, PauseOutcome]:
    """``paused_leader`` for the etcd and the ZooKeeper election at the same time (each its
    own election, store and processes), labelled "etcd election" and "ZooKeeper election"."""
    return pause_past_timeout_at_once(lab, {"etcd election": ("etcd-election", True),
                                            "ZooKeeper election": ("zookeeper-election", True)},
                                      timeout=timeout, pause=pause)


# ---- failover ------------------------------------------------------------------------------
@dataclass
class ElectionFailover:
    """A leader killed, a follower taking over: ``seconds`` from the kill to the follower's
    "acquired"; ``worst_case`` from the durations; ``timeout`` the lease's."""

    recipe: str
    seconds: float
    timeout: float
    worst_case: float | None = None

    @property
    def ratio(self) -> float:
        return self.seconds / self.timeout


def kill_and_time_failover(lab: Lab, recipe: str, ttl: float, name: str | None = None) -> ElectionFailover:
    """Two client processes of ``recipe`` (an election); the first leads, the second
    campaigns behind it; the leader is SIGKILLed and the time until the second leads is
    measured from the kill, both stamped on this machine's clock."""
    name = name or f"/elections/failover-{recipe}-{time.time_ns()}"
    history = History()
    with spawn_clients(lab, recipe, n=2, name=name, history=history, session_timeout=ttl, ttl=ttl) as clients:
        leader, follower = clients
        leader.acquire(timeout=15)
        pending = follower.send("acquire", timeout=None)
        history.wait_for("requested", client=follower.name, timeout=15)
        leader.kill()
        follower.wait_reply(pending, timeout=ttl * 3 + 15)
        follower.release()
    killed = next(event.time for event in history.events(kind="fault") if event.detail.get("target") == leader.name)
    took_over = history.events(client=follower.name, kind="acquired")[0].time
    worst = lease_durations_for(ttl).worst_case_failover() if recipe == "lease-election" else None
    return ElectionFailover(recipe, took_over - killed, ttl, worst)


# ---- the benchmark's row ----------------------------------------------------------------------
def measure_failover(lab: Lab, runs: int = 3, ttl: float = 1.0) -> dict[str, dict[str, Any]]:
    """Election failover time against the lease's timeout, per recipe: the etcd election
    (the lease TTL), the ZooKeeper election (the session timeout: ``ttl`` + 1 s, a lab
    ensemble's shortest safe one) and the lease election (leaseDuration). Each run kills
    the leader process. Returns {recipe: {timeout_s, failover_s (p50), ratio, runs}}."""
    rows: dict[str, dict[str, Any]] = {}
    for recipe, timeout in (("etcd-election", ttl), ("zookeeper-election", ttl + 1.0), ("lease-election", ttl)):
        seconds = [kill_and_time_failover(lab, recipe, timeout).seconds for _ in range(runs)]
        middle = percentile(seconds, 0.5)
        rows[recipe] = {"timeout_s": timeout, "failover_s": round(middle, 3), "ratio": round(middle / timeout, 2),
                        "runs": [round(value, 3) for value in seconds]}
    return rows
