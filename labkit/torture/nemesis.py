"""The nemesis: carries out a schedule of faults (``labkit.torture.schedule``) on a running lab.

What can go wrong first. A step aimed at "the holder" finds whoever holds the lock when it
runs, which the seed cannot decide: the schedule (what, when, at whom, how long) is the
same for the same seed, the processes it hit are what the run found, and both go into the
report. A pause aimed at the holder waits for a holder that has just written "begin" under
the lock (its "end" comes a hold later): a pause after the "end" write would only delay a
release, and show nothing. A step whose target is not there (a client still restarting
after a kill, an etcd lease not granted yet) is skipped and the report says why; the run
goes on. A step that runs late (a slow restart) delays the ones after it, never reorders
them.

The server-side nemeses (partition-leader, split, isolate-server) cut one member of a
3-member ensemble, with the clients connected to it, from the other two members and theirs
(``Rig.members`` says which member each client reaches), then heal. Each executed step
records which clients' sessions it may have ended (``Executed.clients``): the cut member's
clients, or every client when the cut member was the leader (the others then wait for a new
one); the verdict allows those sessions to lapse, and no others.
"""
from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from labkit import faults
from labkit.faults import redis as redis_faults
from labkit.timing import became_true
from labkit.torture.schedule import CURRENT_HOLDER, MEMBER, Step


@dataclass
class Executed:
    """What a step did: the target it found, when the fault struck (time.time(), after its
    target was found) and ended, or why it was skipped; ``clients``: the clients a
    server-side fault (or a leader kill) cut off from a quorum, whose sessions may lapse."""

    step: Step
    target: str
    start: float
    end: float
    note: str = ""
    clients: tuple[str, ...] = ()

    @property
    def skipped(self) -> bool:
        return self.note.startswith("skipped")

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step.to_dict(), "target": self.target, "start": self.start, "end": self.end,
                "note": self.note, "clients": list(self.clients)}


class Nemesis:
    """Carries out a schedule on ``rig`` (a ``labkit.torture.run.Rig``: the lab, the clients,
    the recipe's service). ``run(began, stop)`` blocks until the schedule is done or
    ``stop`` is set; ``executed`` lists what each step did."""

    def __init__(self, rig: Any, steps: list[Step], say: Callable[[str], None] = lambda line: None):
        self.rig = rig
        self.steps = steps
        self.say = say
        self.executed: list[Executed] = []
        self._struck = 0.0

    def run(self, began: float, stop: threading.Event) -> None:
        for step in self.steps:
            if stop.wait(max(0.0, began + step.at - time.time())):
                return
            start = self._struck = time.time()
            clients: tuple[str, ...] = ()
            try:
                target, end, *cut = getattr(self, f"_{step.nemesis.replace('-', '_')}")(step, stop)
                clients = tuple(cut[0]) if cut else ()
                note = ""
            except Exception as error:  # a fault that cannot be done now must not end the run
                target, end = step.target, None
                note = f"skipped: {type(error).__name__}: {(str(error).splitlines() or [''])[0]}"
            # when the fault struck: a step aimed at the holder may first wait for one
            start = max(start, self._struck)
            done = Executed(step, target, start, time.time() if end is None else end, note, clients)
            self.executed.append(done)
            self.say(f"  t={start - began:5.1f} s  {step.nemesis} {target}"
                     + (f" {step.shift:+.1f} s" if step.shift and not done.skipped else "")
                     + (f" for {step.seconds:.1f} s" if step.seconds and not done.skipped else "")
                     + (f"  ({note})" if note else ""))

    def _strike(self) -> None:
        """Note the moment the fault is done, once its target was found."""
        self._struck = time.time()

    # ---- targets -------------------------------------------------------------------------
    def _client(self, step: Step, stop: threading.Event):
        """The client a step aims at; "holder": whoever holds now (waiting up to a timeout)."""
        clients = self.rig.clients
        if step.target != CURRENT_HOLDER:
            return clients[step.target]
        holders: list[Any] = []

        def someone_holds() -> bool:
            holders[:] = clients.holders()
            return bool(holders) or stop.is_set()

        if not became_true(someone_holds, self.rig.timeout) or not holders:
            raise LookupError("nobody held the lock" if not stop.is_set() else "the run is stopping")
        return holders[0]

    def _holder_at_work(self, stop: threading.Event):
        """A holder that has just made the first of its hold's two writes ("begin"; "end"
        comes a hold later), waiting up to a hold and a timeout for one: paused now past its
        TTL or session, it writes "end" after another client was granted the lock, which is
        the overlap the store's record shows (unless fencing refuses that write). A holder
        found mid-hold could be about to write "end": the pause would then land after it and
        show nothing. Raises LookupError if no hold began meanwhile."""
        history, found = self.rig.history, []
        since = time.time()

        def someone_began() -> bool:
            for client in self.rig.clients.holders():
                latest = history.latest(client.name, 2)
                if [event.kind for event in latest] == ["acquired", "write"] and latest[1].time >= since:
                    found[:] = [client]
            return bool(found) or stop.is_set()

        if not became_true(someone_began, self.rig.timeout + 2 * self.rig.clients.hold) or not found:
            raise LookupError("no hold began with a write" if not stop.is_set() else "the run is stopping")
        return found[0]

    def _wait_for_a_holder(self, stop: threading.Event) -> None:
        """Up to a timeout, until some client holds the lock (a fault on the servers then
        shows what it does to a hold; if nobody holds, it goes ahead anyway)."""
        became_true(lambda: self.rig.clients.holders() or stop.is_set(), self.rig.timeout)

    # ---- the faults ----------------------------------------------------------------------
    def _pause(self, step: Step, stop: threading.Event):
        client = self._holder_at_work(stop) if step.target == CURRENT_HOLDER else self._client(step, stop)
        self._strike()
        client.pause(step.seconds)  # a timer thread resumes it
        return client.name, time.time() + step.seconds

    def _kill(self, step: Step, stop: threading.Event):
        client = self._client(step, stop)
        self._strike()
        client.kill()  # the workload starts a new process in its place
        return client.name, None

    def _expire(self, step: Step, stop: threading.Event):
        client = self._client(step, stop)
        self._strike()
        if "session_id" in client.session:
            client.expire_session()
        else:
            client.revoke_lease()
        return client.name, None

    def _partition(self, step: Step, stop: threading.Event):
        """Cut the client off from every server (its process runs on, believing it holds),
        then heal: the network faults of labkit.up(network=True)."""
        client = self._client(step, stop)
        self._strike()
        self.rig.lab.isolate(client.name, history=self.rig.history)
        stop.wait(step.seconds)
        self.rig.lab.heal(history=self.rig.history)
        return client.name, None

    def _leader(self, step: Step, stop: threading.Event):
        service, history = self.rig.service, self.rig.history
        if self.rig.service_name == "redis":
            return self._fail_over_redis(step, stop)
        if self.rig.service_name == "redlock":
            return self._restart_redlock_majority(step, stop)
        self._strike()
        node = faults.kill_leader(service, history)
        # every session waits for a new leader; a client connected to the killed member only
        # (Rig.members) has no server until it is back
        everyone = [client.name for client in self.rig.clients]
        if stop.wait(step.seconds):
            return node.name, None, everyone  # the run ends: the lab is stopped, or healed before the next trial
        node.start()
        node.wait_ready()
        history.record_fault("restart", node.name)
        return node.name, None, everyone

    def _partition_leader(self, step: Step, stop: threading.Event):
        self._wait_for_a_holder(stop)  # a cut while someone holds: the lesson
        return self._cut_off(self.rig.service.wait_for_leader(timeout=max(15.0, 3 * self.rig.timeout)), step, stop)

    def _split(self, step: Step, stop: threading.Event):
        nodes = self.rig.service.nodes
        number = int(step.target[len(MEMBER):]) if step.target.startswith(MEMBER) else 0
        if not 1 <= number <= len(nodes):
            raise LookupError(f"no member {step.target!r} in an ensemble of {len(nodes)}")
        self._wait_for_a_holder(stop)
        return self._cut_off(nodes[number - 1], step, stop)

    def _isolate_server(self, step: Step, stop: threading.Event):
        client = self._client(step, stop)
        node = self.rig.members.get(client.name)
        if node is None:
            raise LookupError(f"{client.name} is not connected to one member only")
        target, end, cut = self._cut_off(node, step, stop)
        return f"{target} (the server of {client.name})", end, cut

    def _cut_off(self, node: Any, step: Step, stop: threading.Event):
        """Partition [node and its clients] | [the other members and their clients] for
        step.seconds, then heal. The clients whose sessions may lapse: node's, or everyone's
        if node was the leader (or no leader could be found: the safe side)."""
        service, members = self.rig.service, self.rig.members
        try:
            leader = service.leader().name
        except Exception:  # an election under way: any session may be waiting for it
            leader = None
        mine = sorted(name for name, member in members.items() if member.name == node.name)
        theirs = sorted(name for name, member in members.items() if member.name != node.name)
        others = [other.name for other in service.nodes if other.name != node.name]
        cut = sorted(members) if leader in (None, node.name) else mine
        self._strike()
        self.rig.lab.partition([node.name, *mine], [*others, *theirs], history=self.rig.history)
        try:
            stop.wait(step.seconds)
        finally:
            self.rig.lab.heal(history=self.rig.history)
        role = "leader" if leader == node.name else "follower" if leader else "member"
        return f"{node.name} ({role})", None, cut

    def _fail_over_redis(self, step: Step, stop: threading.Event):
        """Cut replication, let writes land on the primary alone, then fail over to the
        replica (which never saw them) and point the clients' relay at it; the old primary
        comes back as the new replica, so that the next failover can happen too."""
        service, history = self.rig.service, self.rig.history
        old = service.primary
        redis_faults.cut_replication(service)
        history.record_fault("cut_replication", old.name)
        if stop.wait(step.seconds):
            return old.name, None  # the replica stays frozen until the lab stops or is healed
        self._wait_for_a_holder(stop)  # fail over while someone holds: the lesson
        new = redis_faults.fail_over(service)
        self.rig.point_redis_at(new)
        history.record_fault("fail_over", new.name, old_primary=old.name)
        old.start()
        old.wait_ready()
        old.client().execute_command("REPLICAOF", new.host, str(new.port))
        service.wait_replica_in_sync()
        return f"{old.name} → {new.name}", None

    def _redlock_majority(self, step: Step) -> list[Any]:
        """A majority of Redlock's instances, drawn from the step itself (the same every replay)."""
        nodes = self.rig.service.nodes
        return sorted(random.Random(repr(step)).sample(nodes, len(nodes) // 2 + 1), key=lambda node: node.name)

    def _restart_redlock_majority(self, step: Step, stop: threading.Event):
        """Redlock has no leader: crash a majority of its instances and start them again at
        once with no data (nothing was fsynced), so every vote they gave is forgotten."""
        nodes = self._redlock_majority(step)
        self._wait_for_a_holder(stop)  # its votes are the ones forgotten
        # all at once, so that they forget while the holder still holds
        restarts = [threading.Thread(target=self.rig.service.crash_restart, args=(node,)) for node in nodes]
        for restart in restarts:
            restart.start()
        for restart, node in zip(restarts, nodes):
            restart.join()
            self.rig.history.record_fault("crash_restart", node.name)
        return ",".join(node.name for node in nodes), None

    def _clock(self, step: Step, stop: threading.Event):
        """Step the coordinator's wall clock forward, then back: Redis and Redlock keys
        expire early (on a majority of Redlock's instances); ZooKeeper's sessions do not care."""
        service = self.rig.service
        if self.rig.service_name == "redlock":
            nodes = self._redlock_majority(step)
        else:
            nodes = [service.primary if self.rig.service_name == "redis" else service.leader()]
        for node in nodes:
            node.clock.step(step.shift, history=self.rig.history)
        stop.wait(step.seconds)
        for node in nodes:
            node.clock.reset(history=self.rig.history)
        return ",".join(node.name for node in nodes), None
