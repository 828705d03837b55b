"""The Redis failures of the course, made to happen on purpose on real redis-server processes.

A Redis lock is one key on one primary. Each helper here breaks that primary (or its
replica) in one precise way, so that a lesson can show what happens to the key:

* ``crash_and_restart``: SIGKILL, then start again on the same data directory. Without
  persistence the key is gone; with an old snapshot (``SAVE`` earlier) an old key is back.
* ``cut_replication``: freeze the replica and close its link on the primary, so that the
  primary's next writes reach no replica. This models replication lag, or a network hiccup
  at the wrong moment, made deterministic. Freezing alone is not enough on one machine:
  the kernel still accepts the replication stream into the frozen replica's socket buffer,
  and the replica reads it when it resumes.
* ``fail_over``: kill the primary, thaw the replica and promote it (manual failover, as
  Sentinel would do after its timeout).
* ``wait_until_gone``: poll a key until it no longer exists (its TTL ran out), with a deadline.

What can fail: ``labkit.errors.NodeStartError`` when a restarted node does not answer in
time (with its log), ``TimeoutError`` when a key or a link does not change in time (the
message says which), redis-py's ``ConnectionError`` when the server asked is down.
"""
from __future__ import annotations

import time

from labkit.errors import WaitTimedOut
from labkit.timing import wait_until

POLL_INTERVAL = 0.002  # seconds; a local GET takes ~0.1 ms, so this costs little and measures well


def crash_and_restart(node, timeout: float | None = None) -> float:
    """SIGKILL ``node`` (no shutdown, no final save) and start it again on the same data
    directory; return the seconds until it answered. Redis loads whatever snapshot
    (dump.rdb) its directory holds, and nothing written after it.
    Raises NodeStartError (with the node's last log lines) if it does not come back."""
    node.kill()
    node.start()
    return node.wait_ready(timeout)


def wait_until_gone(client, key: str, timeout: float, poll_interval: float = POLL_INTERVAL) -> float:
    """Poll ``EXISTS key`` until the key is gone; return the seconds that took.
    Each EXISTS also makes Redis drop an expired key at once (lazy expiry), so the time
    measured is the key's real end, not that of Redis's background expiry cycle.
    Raises TimeoutError after ``timeout`` seconds if the key is still there."""
    return wait_until(lambda: not client.exists(key), f"key {key!r} to be gone", timeout, poll_interval,
                      error=lambda: WaitTimedOut(f"key {key!r} still exists after {timeout:.2f} s (PTTL now "
                                                 f"{client.pttl(key)} ms)", hint="wait longer than its TTL or delete it"))


def connected_replicas(client) -> int:
    """How many replicas the primary behind ``client`` is streaming to right now."""
    return int(client.info("replication").get("connected_slaves", 0))


def wait_for_replication(service, timeout: float = 5.0) -> float:
    """Block until the replica of ``service`` has acknowledged a write made now; return the
    seconds that took. A replica whose link is "up" may not receive commands yet: after
    the initial sync, the primary streams nothing until the replica's first acknowledgement
    (up to a second later). Writes in that gap reach the replica late, whatever happens to
    the replica meanwhile. Raises TimeoutError if the replica does not acknowledge in time."""
    primary = service.client()
    probe = "labkit:replication-probe"
    started = time.monotonic()
    try:
        for command in (("SET", probe, "1"), ("DEL", probe)):
            primary.execute_command(*command)
            # WAIT blocks until that many replicas acknowledged every write of this connection
            if primary.execute_command("WAIT", 1, int(timeout * 1000)) < 1:
                raise TimeoutError(f"the replica did not acknowledge a write within {timeout:.1f} s; "
                                   "is it paused, or still loading? look at INFO replication on both nodes")
    finally:
        primary.close()
    return time.monotonic() - started


def cut_replication(service, timeout: float = 5.0):
    """Freeze the replica of ``service`` (``lab.redis``) and make the primary drop its
    link, so that writes from now on stay on the primary alone. Returns the frozen replica
    (``fail_over`` thaws it). Raises TimeoutError if the primary still reports a replica
    after ``timeout`` seconds; the replica is thawed before raising."""
    replica = service.replica
    if replica is None:
        raise ValueError("this Redis has no replica: start the lab with labkit.up(redis=True, replica=True)")
    replica.pause()
    primary = service.client()
    try:
        # the frozen replica cannot reconnect, so once the primary has closed the link no
        # write can travel to it, not even into its socket buffer
        primary.execute_command("CLIENT", "KILL", "TYPE", "replica")
        wait_until(lambda: connected_replicas(primary) == 0, "the primary to drop its replica", timeout,
                   POLL_INTERVAL, error=WaitTimedOut(f"the primary still reports a replica {timeout:.1f} s after "
                                                     "CLIENT KILL", hint="is another replica attached? look at INFO "
                                                     "replication"))
    except BaseException:
        replica.resume()
        raise
    finally:
        primary.close()
    return replica


def fail_over(service, timeout: float = 10.0):
    """The failover Sentinel would perform: kill the primary (SIGKILL), thaw the replica,
    promote it (REPLICAOF NO ONE) and wait until it answers as a primary. Returns the new
    primary; ``service.client()`` now talks to it. Raises TimeoutError if the promoted
    node does not report the primary role within ``timeout`` seconds."""
    old_primary, replica = service.primary, service.replica
    if replica is None:
        raise ValueError("this Redis has no replica to fail over to: start the lab with replica=True")
    old_primary.kill()
    replica.resume()
    replica.wait_ready(timeout)
    service.promote(replica)
    wait_until(lambda: replica.role == "primary", f"{replica.name} to report role primary", timeout, POLL_INTERVAL,
               error=lambda: WaitTimedOut(f"{replica.name} does not report role primary {timeout:.0f} s after "
                                          f"REPLICAOF NO ONE (role: {replica.role})",
                                          hint="is it still loading its data? its log says", log_tail=replica.log_tail()))
    return replica


def key_facts(client, key: str) -> dict:
    """What Redis holds under ``key`` now: its value (str or None) and milliseconds to live
    (PTTL: -2 when the key does not exist, -1 when it has no TTL)."""
    value = client.get(key)
    return {"key": key, "value": value.decode() if isinstance(value, bytes) else value,
            "ttl_ms": client.pttl(key)}
