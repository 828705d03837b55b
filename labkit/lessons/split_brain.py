"""Redis split brain with real Sentinel (notebook 07, claim C22), on a lab started with
``labkit.up(redis=True, replica=True, sentinels=3, network=True)``.

What can fail, first: ``FailoverTimeout`` with the sentinels' logs when Sentinel does not
promote the replica; ``TimeoutError`` naming what was awaited; ``NetworkNotEnabled`` on a
lab without ``network=True``. The network is healed before the function returns, even when
it fails.
"""
from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass

import redis

from labkit.progress import shows_progress
from labkit.timing import wait_for_value, wait_until


@dataclass
class SplitBrainRun:
    """One failover under a partition. Seconds after the cut."""

    old_primary: str
    new_primary: str
    min_replicas: bool
    acknowledged_before_cut: bool      # client-1's SET NX before the cut said OK
    old_side_granted: bool             # client-1's SET NX on the old primary after the cut
    failover_s: float
    new_side_granted: bool             # client-2's SET NX on the new primary
    key_on_new_primary_before_grant: str | None   # what the promoted replica had for the lock
    writes_accepted_until_s: float     # the old primary's last accepted write after the cut
    writes_refused_from_s: float | None
    refusal: str = ""

    @property
    def both_hold(self) -> bool:
        return (self.acknowledged_before_cut or self.old_side_granted) and self.new_side_granted

    def row(self) -> dict:
        refused = "never" if self.writes_refused_from_s is None else round(self.writes_refused_from_s, 1)
        return {"min-replicas": self.min_replicas, "old primary": self.old_primary, "new primary": self.new_primary,
                "failover (s)": round(self.failover_s, 1),
                "client-1 holds (old)": self.acknowledged_before_cut or self.old_side_granted,
                "client-2 holds (new)": self.new_side_granted,
                "old primary took writes until (s)": round(self.writes_accepted_until_s, 1),
                "refused from (s)": refused}


@shows_progress("a Sentinel failover with the old primary cut off")
def sentinel_split_brain(lab, min_replicas: bool = False, ttl_ms: int = 30_000,
                         replication_delay_ms: int = 5000) -> SplitBrainRun:
    """Partition the current primary with ``client-1`` away from the replica, the three
    sentinels and ``client-2``; wait for Sentinel to promote the replica; ``client-2`` takes
    the same lock there. client-1 writes to its primary every 50 ms throughout.

    ``min_replicas``: the primary first gets ``min-replicas-to-write 1`` and
    ``min-replicas-max-lag 1``, and its replication stream is slowed by
    ``replication_delay_ms`` (the replica's acknowledgements are not), so that client-1's
    lock is acknowledged *before* the cut yet never reaches the replica: the race every
    asynchronous replication has, held open long enough to see. Without it, client-1 takes
    the lock after the cut, on its side. After the heal the old primary is made a replica of
    the new one (``REPLICAOF``, what Sentinel itself does about 8 s later)."""
    old, replica = lab.redis.primary, lab.redis.replica
    sentinels = [node.name for node in lab.sentinel.nodes]
    client_1 = lab.redis.client(via="client-1", socket_timeout=2)
    client_2 = lab.redis.client(node=replica, via="client-2", socket_timeout=2)
    key, accepted, refused = f"lock:{uuid.uuid4().hex[:6]}", [], []
    stop = threading.Event()
    admin = old.client()
    try:
        client_2.ping()
        if min_replicas:
            admin.config_set("min-replicas-to-write", 1)
            admin.config_set("min-replicas-max-lag", 1)
            lab.delay(replication_delay_ms, links=[f"{old.name}->{replica.name}"])
        def take_while_acknowledged():
            try:
                return client_1.set(key, "client-1", nx=True, px=ttl_ms)
            except redis.ResponseError as error:
                if "NOREPLICAS" not in str(error):
                    raise
                return None   # the replica's last ack is over min-replicas-max-lag old (a loaded machine): again
        acknowledged = bool(wait_for_value(take_while_acknowledged, "the primary to take the lock with a replica "
                                           "acknowledging (no NOREPLICAS)", timeout=15, poll=0.1)) if min_replicas else False
        cut = time.monotonic()
        lab.partition([old.name, "client-1"], [replica.name, *sentinels, "client-2"])
        old_side = False if min_replicas else bool(client_1.set(key, "client-1", nx=True, px=ttl_ms))

        def keep_writing():
            while not stop.is_set():
                try:
                    client_1.set(f"{key}:writes", time.monotonic() - cut)
                    accepted.append(time.monotonic() - cut)
                except redis.ResponseError as error:  # NOREPLICAS: the primary refuses
                    refused.append((time.monotonic() - cut, str(error)))
                time.sleep(0.05)
        writer = threading.Thread(target=keep_writing, daemon=True)
        writer.start()
        new = lab.sentinel.wait_for_failover(lab.redis, 30)
        failover = time.monotonic() - cut
        on_new = client_2.get(key)
        granted = bool(client_2.set(key, "client-2", nx=True, px=ttl_ms))
        if min_replicas:
            wait_until(lambda: refused, "the isolated primary refuses writes (NOREPLICAS)", timeout=10)
        stop.set()
        writer.join(5)
    finally:
        stop.set()
        lab.heal()
        if min_replicas:
            admin.config_set("min-replicas-to-write", 0)
    try:
        # the address the sentinels know the new primary by (its proxy), as Sentinel would send
        announced = {own: alias for alias, own in lab.sentinel.aliases.items()}.get(new.endpoint, new.endpoint)
        admin.execute_command("REPLICAOF", *announced.rsplit(":", 1))
        wait_until(lambda: old.client().info("replication").get("master_link_status") == "up",
                   f"{old.name} replicates from {new.name}", timeout=20)
        lab.sentinel.wait_until_watching(30)   # the sentinels see the old primary as a replica
    finally:
        for client in (client_1, client_2, admin):
            client.close()
    return SplitBrainRun(old.name, new.name, min_replicas, acknowledged, old_side, failover, granted,
                         None if on_new is None else on_new.decode(),
                         max(accepted) if accepted else 0.0, refused[0][0] if refused else None,
                         refused[0][1] if refused else "")
