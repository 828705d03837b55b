"""The schedule of a torture run: which faults, when, at whom and for how long, drawn from a seed.

``plan`` is a pure function of its arguments (the seed, the nemeses, the number of
clients, the time and the timeout), so a schedule can be checked, printed and replayed
without any server; ``labkit.torture.nemesis`` carries one out. What the seed cannot
decide: a step aimed at "holder" hits whoever holds the lock when it runs.
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any

# every nemesis, in the order the schedule draws from (the order asked for does not matter)
NEMESES = {
    "pause": "SIGSTOP a lock client past its session timeout, then SIGCONT (a long GC pause)",
    "kill": "SIGKILL a lock client; it rejoins as a new process with a new session",
    "expire": "the server ends a client's session now (ZooKeeper session expiry, etcd lease revoke)",
    "leader": "kill the coordinator's leader and restart it (Redis: fail over to a replica that missed writes; "
              "Redlock: crash-restart a majority of its instances, which forget their keys)",
    "partition": "cut a client off from every server, then heal (labkit.up(network=True))",
    "clock": "step a server's wall clock forward by a few TTLs, then back (Redlock: a majority's)",
    # the server-side nemeses: a 3-member ensemble, each client connected to one member
    # through links of its own, so that a cut member takes its clients with it
    "partition-leader": "cut the leader, with the clients connected to it, from the other two members "
                        "and their clients, then heal",
    "split": "cut one member (drawn from the seed), with its clients, from the other two and theirs, then heal",
    "isolate-server": "cut the member a holder is connected to from the rest of the ensemble, the holder's "
                      "own link up (the follower window), then heal",
}
# the nemeses that cut members of the ensemble apart: they need 3 members, the lab's network,
# and clients spread over the members
SERVER_NEMESES = ("partition-leader", "split", "isolate-server")
CURRENT_HOLDER = "holder"  # a target: whichever client holds the lock when the step begins
COORDINATOR = "coordinator"
MEMBER = "member-"  # a split's target: "member-2" is the ensemble's second node


@dataclass(frozen=True)
class Step:
    """One planned fault: ``at`` seconds after the workload began, for ``seconds``
    (0: instantaneous); ``shift`` is the clock step in seconds (clock only)."""

    at: float
    nemesis: str
    target: str
    seconds: float = 0.0
    shift: float = 0.0

    def describe(self) -> str:
        length = f" for {self.seconds:.1f} s" if self.seconds else ""
        shift = f" by {self.shift:+.1f} s" if self.shift else ""
        return f"t={self.at:5.1f} s  {self.nemesis} {self.target}{shift}{length}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Step":
        return cls(float(data["at"]), str(data["nemesis"]), str(data["target"]), float(data.get("seconds", 0.0)),
                   float(data.get("shift", 0.0)))


def plan(seed: int, nemeses: list[str], clients: int, duration: float, timeout: float) -> list[Step]:
    """The schedule for ``seed``: faults one after another, each followed by a quiet time
    to recover, none starting later than ``duration`` minus a timeout. Pauses and
    partitions (of a client or of a member) last 1.5-3 timeouts (past the session timeout, so
    they bite)."""
    rng = random.Random(seed)
    chosen = [name for name in NEMESES if name in nemeses]
    steps: list[Step] = []
    at = min(1.0, 0.1 * duration) + rng.uniform(0.0, timeout)
    while chosen:
        nemesis = rng.choice(chosen)
        target, seconds, shift = _draw(rng, nemesis, clients, timeout)
        if at + seconds > duration - timeout:
            break
        steps.append(Step(round(at, 3), nemesis, target, round(seconds, 3), round(shift, 3)))
        at += seconds + timeout * rng.uniform(1.0, 2.0)
    return steps


def _draw(rng: random.Random, nemesis: str, clients: int, timeout: float) -> tuple[str, float, float]:
    if nemesis in ("pause", "kill", "expire", "partition"):
        # half the faults hit whoever holds the lock then: a waiter's pause rarely shows anything
        target = CURRENT_HOLDER if rng.random() < 0.5 else f"client-{rng.randint(1, clients)}"
        seconds = timeout * rng.uniform(1.5, 3.0) if nemesis in ("pause", "partition") else 0.0
        return target, seconds, 0.0
    if nemesis in SERVER_NEMESES:
        # isolate-server: the member the holder is connected to, found when the step runs
        target = {"partition-leader": COORDINATOR, "isolate-server": CURRENT_HOLDER}.get(nemesis) or f"{MEMBER}{rng.randint(1, 3)}"
        return target, timeout * rng.uniform(1.5, 3.0), 0.0
    # "coordinator": the leader of ZooKeeper or etcd, the primary of Redis, found when the step runs
    if nemesis == "leader":
        return COORDINATOR, timeout * rng.uniform(1.0, 2.0), 0.0
    return COORDINATOR, timeout * rng.uniform(1.0, 2.0), timeout * rng.uniform(2.0, 4.0)  # clock
