"""Clickable lock maps drawn from a real run: the architecture (two clients and the ZooKeeper
ensemble or the etcd cluster, with the lease), the ZooKeeper lock recipe as its nine steps, a
whole ZooKeeper queue (one arrow per event, with the re-checks), and the etcd lease flow with its "keep-alive fails, the lease expires, the process must stop
writing" branch. Every edge carries the steps the run's History recorded on it, with their
times; selecting a node says why it exists, selecting an edge says its protocol, direction,
effect and consequence; the replay button lights the edges in the recorded order. The
JavaScript (maps.js) runs in the browser: clicks and the replay need no kernel.

    from labkit.widgets import maps
    sequence = maps.zookeeper_sequence(run)      # run: the History of a holder and a waiter
    sequence                                     # display it (the last line of a cell)
    sequence.replay(); sequence.to_mermaid(); sequence.edges

What can go wrong: a History without the events a map needs raises ``MissingEvents``, which
says which events to record (a holder, a waiter queued behind it, the holder's release or
end). An edge the run did not use is still drawn, with no step ("not in this run").
"""
from __future__ import annotations

from typing import Any

from labkit.errors import LabError
from labkit.record.events import Event
from labkit.record.history import History
from labkit.widgets.map_model import LockMap, MapEdge, MapNode, MapStep
from labkit.widgets.map_texts import (ETCD_EDGES, ETCD_NODES, FLOW_EDGES, FLOW_NODES, QUEUE_STEPS, ZOOKEEPER_EDGES,
                                      ZOOKEEPER_NODES, ZOOKEEPER_STEPS)

# faults that end a holder's session or silence it (History.record_fault or a client group's)
ENDING_FAULTS = ("close session", "expire_session", "kill", "revoke_lease")
SILENCING_FAULTS = ("stop_keepalive", "pause", "kill", "cut", "isolate", "partition")


class MissingEvents(LabError):
    """A History lacks the events a map is drawn from."""


# ---- reading a run ----------------------------------------------------------------------------
def _short(name: str) -> str:
    return name.rsplit("/", 1)[-1][-16:]    # "...-lock-0000000001": the uuid prefix only makes it long


def _first(events: list[Event], what: str, hint: str) -> Event:
    if not events:
        raise MissingEvents(f"the History has no {what}", hint=hint)
    return events[0]


def _queue_of(run: History, entry: str) -> tuple[Event, Event]:
    """The holder's and the waiter's "created" events: the holder is the first client to
    acquire; the waiter is the one whose watch was on the holder's node or key."""
    hint = ("record a run of two lock clients on one lock with on_event=history.sink(name): the first "
            "acquires, the second queues behind it, then the first releases (or its session ends)")
    created = [event for event in run.events(kind="created") if entry in event.detail]
    acquired = _first([event for event in run.events(kind="acquired")
                       if any(made.client == event.client for made in created)],
                      f"'acquired' event of a lock with a {entry}", hint)
    holder = _first([event for event in created if event.client == acquired.client],
                    f"'created' event of {acquired.client!r}", hint)
    watches = [event for event in run.events(kind="watch") if event.detail.get("target") == holder.detail[entry]]
    watch = _first(watches, f"'watch' event on the holder's {entry} {holder.detail[entry]}", hint)
    waiter = _first([event for event in created if event.client == watch.client],
                    f"'created' event of the waiter {watch.client!r}", hint)
    return holder, waiter


def _after(run: History, client: str, kind: str, since: float) -> list[Event]:
    return [event for event in run.events(client=client, kind=kind) if event.time >= since]


def _end_of_hold(run: History, holder: str, since: float) -> Event | None:
    """What ended the holder's hold: a fault that ends its session, its release, or its loss."""
    ends = [event for event in run.events() if event.time >= since and (
        (event.kind == "fault" and event.detail.get("target") == holder and event.detail.get("what") in ENDING_FAULTS)
        or (event.client == holder and event.kind in ("released", "lost")))]
    return ends[0] if ends else None


def _client(name: str) -> str:
    return name if name.lower().startswith("client") else f"Client {name}"


def _texts(template: tuple[str, ...], **names: str) -> tuple[str, ...]:
    return tuple(text.format(**names) for text in template)


def _step(number: int, event: Event) -> MapStep:
    return MapStep(number, event.time, event.client, event.kind, dict(event.detail))


# ---- ZooKeeper ------------------------------------------------------------------------------
def _zookeeper_steps(run: History) -> tuple[dict[int, MapStep], str, str]:
    holder, waiter = _queue_of(run, "node")
    a, b = holder.client, waiter.client
    hint = "let the waiter take the lock after the holder's release or session end before you draw the map"
    held = _first(_after(run, a, "acquired", holder.time), f"'acquired' event of {a!r}", hint)
    watch = _first([event for event in _after(run, b, "watch", waiter.time)
                    if event.detail.get("target") == holder.detail["node"]], f"'watch' event of {b!r}", hint)
    end = _end_of_hold(run, a, held.time)
    if end is None:
        raise MissingEvents(f"the History has no release, loss or session end of the holder {a!r}", hint=hint)
    # a fault is recorded when its call returned, which can be just after the server acted and
    # the waiter heard of it: half a second of slack
    woke = _first([event for event in _after(run, b, "woke", end.time - 0.5)
                   if event.detail.get("target") == holder.detail["node"]],
                  f"'woke' event of {b!r} for {holder.detail['node']}", hint)
    taken = _first(_after(run, b, "acquired", woke.time), f"'acquired' event of {b!r} after it woke", hint)
    events = {1: holder, 2: waiter, 3: held, 4: held, 5: watch, 6: end, 7: woke, 8: taken, 9: taken}
    return {number: _step(number, event) for number, event in events.items()}, a, b


def zookeeper_sequence(run: History) -> LockMap:
    """The ZooKeeper recipe's nine steps between the holder, the ensemble and the waiter, each
    arrow from the run's own events: 1-2 the creates, 3-4 the holder lists and holds, 5 the
    waiter's watch on its predecessor, 6 the holder's release or session end, 7 the
    notification, 8-9 the waiter's re-check and hold. Raises MissingEvents."""
    steps, a, b = _zookeeper_steps(run)
    nodes = (MapNode("A", _client(a), _texts(ZOOKEEPER_NODES["client_a"], client=a)[1], 0),
             MapNode("ZK", "ZooKeeper", ZOOKEEPER_NODES["zookeeper"][1], 1),
             MapNode("B", _client(b), _texts(ZOOKEEPER_NODES["client_b"], client=b)[1], 2))
    end = steps[6]
    how = (f"{end.facts.get('what')} (no delete)" if end.event == "fault" else
           "delete own node (release)" if end.event == "released" else "session expired: node deleted")
    edges = []
    for number, (source, target, *texts) in ZOOKEEPER_STEPS.items():
        client, other = (a, b) if "A" in (source, target) else (b, a)
        step = steps[number]
        short = _short(step.facts.get("target") or step.facts.get("node") or "")
        texts = [text.format(client=client, other=other, short=short, how=how) for text in texts]
        edges.append(MapEdge(f"step{number}", source, target, *texts, steps=(step,),
                             failure=number == 6 and end.event != "released"))
    return LockMap("sequence", f"The ZooKeeper lock recipe as it ran: {a} holds, {b} waits", nodes, tuple(edges))


def zookeeper_architecture(run: History) -> LockMap:
    """Client A, the ensemble, Client B; each edge carries the sequence steps that went over it."""
    steps, a, b = _zookeeper_steps(run)
    on_edge = {"a_requests": (1, 3, 6), "zk_to_a": (4,), "b_requests": (2, 5, 8), "zk_to_b": (7, 9)}
    ends = {"a_requests": ("client_a", "zookeeper"), "zk_to_a": ("zookeeper", "client_a"),
            "b_requests": ("client_b", "zookeeper"), "zk_to_b": ("zookeeper", "client_b")}
    nodes = (MapNode("client_a", _client(a), ZOOKEEPER_NODES["client_a"][1], 0, 0),
             MapNode("zookeeper", "ZooKeeper ensemble", ZOOKEEPER_NODES["zookeeper"][1], 1, 0, "store"),
             MapNode("client_b", _client(b), ZOOKEEPER_NODES["client_b"][1], 2, 0))
    edges = tuple(MapEdge(edge_id, *ends[edge_id], *ZOOKEEPER_EDGES[edge_id],
                          steps=tuple(steps[number] for number in on_edge[edge_id])) for edge_id in ZOOKEEPER_EDGES)
    return LockMap("architecture", f"Who talks to whom in a ZooKeeper lock: {a}, the ensemble, {b}", nodes, edges)


def zookeeper_queue(run: History) -> LockMap:
    """Every lock event of every ZooKeeper client of the run as one arrow between the client and
    the ensemble, numbered in recorded order: creates, holds, watches, notifications, the
    re-checks that end in a new watch, releases, faults and errors. For a queue of any length
    (the nine-step map is for a holder and one waiter). Raises MissingEvents."""
    members = [event.client for event in run.events(kind="created") if "node" in event.detail]
    if not members:
        raise MissingEvents("the History has no 'created' event of a ZooKeeper lock",
                            hint="record a run of ZooKeeper lock clients with on_event=history.sink(name)")
    ids = {name: f"c{number}" for number, name in enumerate(members, start=1)}
    woken: set[str] = set()
    edges: list[MapEdge] = []

    def arrow(kind: str, event: Event, client: str, short: str = "", failure: bool = False) -> None:
        to_server, *texts = QUEUE_STEPS[kind]
        names = dict(client=client, short=short, what=event.detail.get("what", ""),
                     message=event.detail.get("message", ""))
        label, protocol, effect, consequence = (text.format(**names) for text in texts)
        source, target = (ids[client], "ZK") if to_server else ("ZK", ids[client])
        direction = f"{client} to the ensemble" if to_server else f"the ensemble to {client}"
        step = _step(len(edges) + 1, event)
        edges.append(MapEdge(f"step{step.number}", source, target, label, protocol, direction, effect, consequence,
                             steps=(step,), failure=failure))

    for event in run.events():
        who, kind, detail = event.client, event.kind, event.detail
        if kind == "fault" and detail.get("target") in ids:
            arrow("fault", event, detail["target"], failure=True)
        elif who not in ids:
            continue
        elif kind == "acquired":
            arrow("listed", event, who)
            arrow("acquired", event, who)
        elif kind == "watch":
            arrow("rewatch" if who in woken else "watch", event, who, _short(detail.get("target", "")))
        elif kind in ("created", "woke", "released", "lost", "error"):
            if kind == "woke":
                woken.add(who)
            arrow(kind, event, who, _short(detail.get("node") or detail.get("target") or ""),
                  failure=kind in ("lost", "error"))
    nodes = (MapNode("ZK", "ZooKeeper", ZOOKEEPER_NODES["zookeeper"][1], 0),) + tuple(
        MapNode(ids[name], name, f"A lock client of this run, number {number} in the queue (by creation). It has "
                "its own session, and its node lives exactly as long as that session.", number)
        for number, name in enumerate(members, start=1))
    return LockMap("sequence", f"A ZooKeeper lock queue of {len(members)} as it ran", nodes, tuple(edges))


# ---- etcd -----------------------------------------------------------------------------------
def _etcd_passes(run: History) -> tuple[list[tuple[str, Event]], str, str]:
    """(flow edge id, event) for each step of the run, in recorded order, and the two clients."""
    holder, waiter = _queue_of(run, "key")
    clients = {holder.client, waiter.client}
    key_of = {event.client: event.detail["key"] for event in run.events(kind="created") if "key" in event.detail}
    silenced: set[str] = set()
    woke_once: set[str] = set()
    passes: list[tuple[str, Event]] = []
    for event in run.events():
        who, what = event.client, event.kind
        if what == "fault" and event.detail.get("target") in clients and event.detail.get("what") in SILENCING_FAULTS:
            silenced.add(event.detail["target"])
            passes.append(("keepalive_fails", event))
        elif who not in clients:
            continue
        elif what == "created" and "key" in event.detail:
            passes += [("grant_put", event), ("put_lowest", event)]
        elif what == "watch":
            passes.append(("lowest_wait", event))
        elif what == "woke":
            woke_once.add(who)
            late = [name for name, key in key_of.items() if key == event.detail.get("target") and name in silenced]
            passes += [("fails_expires", event), ("expires_deleted", event)] if late else [("wait_deleted", event)]
        elif what == "acquired":
            passes += ([("deleted_lowest", event)] if who in woke_once else []) + [("lowest_hold", event)]
        elif what == "released":
            passes.append(("hold_release", event))
        elif what == "lost":
            passes.append(("fails_stop", event))
    return passes, holder.client, waiter.client


def etcd_lease_flow(run: History) -> LockMap:
    """The lease flow of an etcd Mutex, each edge with the steps the run took on it (numbered in
    recorded order): grant, put the key on the lease, first or watch the key below, re-check,
    hold, unlock; and the branch keep-alive fails, the process must stop writing, the lease
    expires and the waiter's watch fires. Raises MissingEvents."""
    passes, a, b = _etcd_passes(run)
    taken: dict[str, list[MapStep]] = {}
    for number, (edge_id, event) in enumerate(passes, start=1):
        taken.setdefault(edge_id, []).append(_step(number, event))
    nodes = tuple(MapNode(node_id, label, why, column, row, shape)
                  for node_id, (label, why, column, row, shape) in FLOW_NODES.items())
    edges = tuple(MapEdge(edge_id, source, target, *texts, steps=tuple(taken.get(edge_id, ())),
                          failure=FLOW_NODES[target][4] == "failure" or FLOW_NODES[source][4] == "failure")
                  for edge_id, (source, target, *texts) in FLOW_EDGES.items())
    return LockMap("flow", f"The etcd lease flow as it ran: {a} held first, {b} waited", nodes, edges)


def etcd_architecture(run: History) -> LockMap:
    """Client A, its lease, the etcd cluster, Client B; each edge with the lease flow's steps
    that went over it."""
    passes, a, b = _etcd_passes(run)
    on_edge: dict[str, list[MapStep]] = {}
    for number, (flow_edge, event) in enumerate(passes, start=1):
        mine = event.client == a or event.detail.get("target") == a
        edge_id = {"keepalive_fails": "a_keepalive", "fails_stop": "a_keepalive", "fails_expires": "lease_keys",
                   "expires_deleted": "etcd_to_b", "wait_deleted": "etcd_to_b", "deleted_lowest": "etcd_to_b",
                   "lowest_wait": "b_put"}.get(flow_edge, "a_put" if mine else "b_put")
        if flow_edge == "lowest_hold" and not mine:
            edge_id = "etcd_to_b"
        on_edge.setdefault(edge_id, []).append(_step(number, event))
    ends = {"a_keepalive": ("client_a", "lease"), "a_put": ("client_a", "etcd"), "lease_keys": ("lease", "etcd"),
            "b_put": ("client_b", "etcd"), "etcd_to_b": ("etcd", "client_b")}
    places = {"client_a": (0, 1, "box"), "lease": (1, 0, "box"), "etcd": (1, 1, "store"), "client_b": (2, 1, "box")}
    names = {"client_a": _client(a), "lease": ETCD_NODES["lease"][0].format(client=a),
             "etcd": ETCD_NODES["etcd"][0], "client_b": _client(b)}
    nodes = tuple(MapNode(node_id, names[node_id], ETCD_NODES[node_id][1], *places[node_id]) for node_id in places)
    edges = tuple(MapEdge(edge_id, *ends[edge_id], *ETCD_EDGES[edge_id], steps=tuple(on_edge.get(edge_id, ())),
                          failure=edge_id == "lease_keys") for edge_id in ETCD_EDGES)
    return LockMap("architecture", f"Who talks to whom in an etcd lock: {a}, its lease, the cluster, {b}",
                   nodes, edges)


def passes_of(lock_map: LockMap) -> list[dict[str, Any]]:
    """The replay as rows: step number, edge label, client, event, seconds from the first."""
    first = lock_map.started() or 0.0
    return [{"step": step.number, "edge": lock_map.edge(edge_id).label, "client": step.client,
             "event": step.event, "at (s)": round(step.time - first, 3)} for edge_id, step in lock_map.replay()]
