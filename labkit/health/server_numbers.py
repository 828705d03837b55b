"""The servers' own numbers, parsed: ZooKeeper's four-letter words and etcd's /metrics.

A lock is only as healthy as the servers behind it, and both servers count things the
clients cannot see. ZooKeeper: how many ephemeral nodes and watches it keeps (``mntr``)
and which session watches which node (``wchc``: data watches only; a watch on a
parent's children list, the herd's kind, is counted by ``mntr`` but never listed).
etcd: whether each member has a leader, how often the leader changed and how many
leases expired unrenewed (its Prometheus ``/metrics`` text). The parsers take the raw
text, so they work on a saved reply too. (``mntr`` itself is parsed by
``labkit.servers.services.zookeeper.parse_mntr``, beside the other ZooKeeper probes.)

What can fail: nothing raises on odd input. A ZooKeeper node that is not serving
("This ZooKeeper instance is not currently serving requests") parses to an empty dict,
and a series missing from /metrics is missing from the result: callers decide what an
absent number means.
"""
from __future__ import annotations

import re
from typing import Iterable

# The etcd 3.4 series a lock dashboard needs, by the name the dashboard uses. Only the
# leader counts lease renewals and expiries, so those are summed over the members.
ETCD_SERIES = {
    "has_leader": "etcd_server_has_leader",                        # 1 if this member knows a leader
    "leader_changes": "etcd_server_leader_changes_seen_total",     # elections this member saw
    "keys_total": "etcd_debugging_mvcc_keys_total",                # live keys in the store
    "db_size_bytes": "etcd_mvcc_db_total_size_in_bytes",
    "leases_granted": "etcd_debugging_lease_granted_total",
    "leases_renewed": "etcd_debugging_lease_renewed_total",        # keep-alives the leader took
    "leases_expired": "etcd_debugging_server_lease_expired_total",  # leases nobody kept alive
    "proposals_committed": "etcd_server_proposals_committed_total",
}
COMBINE_MEMBERS = {"has_leader": min, "leases_renewed": sum, "leases_expired": sum}  # others: max

_PROMETHEUS_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_wchc(text: str) -> dict[str, list[str]]:
    """``wchc`` reply → {session id as "0x..." : [paths that session watches]}. A session
    with no watch does not appear: the server lists only sessions that watch something."""
    watches: dict[str, list[str]] = {}
    session = None
    for line in text.splitlines():
        if line.startswith("0x"):
            session = line.strip()
            watches[session] = []
        elif line.startswith("\t") and session is not None:
            watches[session].append(line.strip())
    return watches


def parse_wchs(text: str) -> dict[str, int]:
    """``wchs`` reply ("2 connections watching 1 paths / Total watches:2") →
    {"connections": 2, "paths": 1, "watches": 2}."""
    found = re.search(r"(\d+) connections watching (\d+) paths", text)
    total = re.search(r"Total watches:\s*(\d+)", text)
    if not found or not total:
        return {}
    return {"connections": int(found.group(1)), "paths": int(found.group(2)), "watches": int(total.group(1))}


def watch_kinds(mntr: dict[str, int | float | str], wchs: dict[str, int]) -> dict[str, int]:
    """{"data": watches on nodes' data/existence, "child": watches on children lists}.
    ``wchc``/``wchs`` list only data watches; ``mntr``'s zk_watch_count counts both, so
    the child watches (a parent-watching lock's herd) are the difference. Read both at a
    quiet moment: they are two separate requests."""
    data = int(wchs.get("watches", 0))
    return {"data": data, "child": int(mntr.get("zk_watch_count", 0)) - data}


def session_hex(session_id: int) -> str:
    """A kazoo ``client_id[0]`` in the form ``wchc`` and ``cons`` print it."""
    return hex(session_id)


def parse_prometheus(text: str, names: Iterable[str] | None = None) -> dict[str, float]:
    """Prometheus text → {"name" or 'name{labels}': value}, only for ``names`` if given
    (a name matches all its labelled series). Comment lines are skipped."""
    wanted = set(names) if names is not None else None
    series: dict[str, float] = {}
    for line in text.splitlines():
        match = _PROMETHEUS_LINE.match(line)
        if match is None or (wanted is not None and match.group(1) not in wanted):
            continue
        try:
            series[match.group(1) + (match.group(2) or "")] = float(match.group(3))
        except ValueError:
            continue
    return series


def etcd_numbers(metrics_text: str) -> dict[str, float]:
    """One member's /metrics → the ``ETCD_SERIES`` it has, by their short names."""
    series = parse_prometheus(metrics_text, ETCD_SERIES.values())
    return {short: series[full] for short, full in ETCD_SERIES.items() if full in series}


def combine_members(per_member: list[dict[str, float]]) -> dict[str, float]:
    """The cluster's numbers from each running member's: ``has_leader`` is the worst
    member's, leader-only counters are summed, replicated numbers take the largest."""
    combined: dict[str, float] = {}
    for short in ETCD_SERIES:
        values = [numbers[short] for numbers in per_member if short in numbers]
        if values:
            combined[short] = COMBINE_MEMBERS.get(short, max)(values)
    return combined


def zookeeper_numbers(mntr: dict[str, int | float | str]) -> dict[str, float]:
    """The ``mntr`` numbers a lock dashboard plots, by short names. ``has_leader`` is 1
    when the node serves (leader, follower or standalone) and 0 otherwise."""
    state = mntr.get("zk_server_state")
    numbers = {"has_leader": 1.0 if state in ("leader", "follower", "standalone") else 0.0}
    for short, key in (("ephemerals", "zk_ephemerals_count"), ("watches", "zk_watch_count"),
                       ("connections", "zk_num_alive_connections"), ("avg_latency_ms", "zk_avg_latency"),
                       ("outstanding_requests", "zk_outstanding_requests"), ("znodes", "zk_znode_count")):
        if isinstance(mntr.get(key), (int, float)):
            numbers[short] = float(mntr[key])
    return numbers
