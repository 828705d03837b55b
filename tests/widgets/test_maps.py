"""The lock maps (labkit/widgets/maps.py) drawn from small real runs on one lab: a ZooKeeper
holder whose session closes under a waiter, and an etcd holder whose keep-alive stops under a
waiter. Each map's steps must be the History's events, with their times, in recorded order,
and its Mermaid text must name every node and edge. Pure-logic tests (a History without the
events, Mermaid's escaping) start no server."""
from __future__ import annotations

import re
import threading

import pytest

import labkit
from labkit.locks.errors import SessionExpired
from labkit.locks.etcd_mutex import EtcdMutex
from labkit.locks.etcd_session import EtcdSession
from labkit.lessons.zookeeper_recipe import watchers_of
from labkit.locks.zookeeper import ZooKeeperLock
from labkit.record.events import Event
from labkit.record.history import History
from labkit.widgets import maps
from labkit.widgets.map_model import LockMap, MapEdge, MapNode, MapStep, mermaid_text

from helpers import DEADLINE, wait_until

TTL = 2


def zookeeper_run(lab, path: str = "/maps/zookeeper") -> History:
    """A holds; B queues and watches A's node; A's session closes; B takes the lock and releases."""
    run = History()
    client_a, client_b = lab.zookeeper.client(timeout=4.0), lab.zookeeper.client(timeout=4.0)
    lock_a = ZooKeeperLock(client_a, path, identifier="A", on_event=run.sink("A"))
    lock_b = ZooKeeperLock(client_b, path, identifier="B", on_event=run.sink("B"))
    try:
        lock_a.acquire(timeout=DEADLINE)
        waiter = threading.Thread(target=lock_b.acquire, kwargs={"timeout": DEADLINE}, daemon=True)
        waiter.start()
        run.wait_for("watch", client="B", timeout=DEADLINE)      # B is about to watch A's node ...
        wait_until(lambda: client_b.client_id[0] in watchers_of(lab.zookeeper, f"{path}/{lock_a.node}"),
                   "the server to list B's watch on A's node")   # ... and now it does
        run.record_fault("close session", "A")
        client_a.stop()
        waiter.join(DEADLINE)
        assert lock_b.is_held, "B should hold the lock once A's session is closed"
        lock_b.release()
    finally:
        for client in (client_a, client_b):
            client.stop()
            client.close()
    return run


def etcd_run(lab, path: str = "/maps/etcd") -> History:
    """A holds; B queues behind A's key; A's keep-alive stops; A's lease expires, B takes the lock."""
    run = History()
    clients = [lab.etcd.client(), lab.etcd.client()]
    session_a, session_b = EtcdSession(clients[0], ttl=TTL), EtcdSession(clients[1], ttl=10)
    mutex_a = EtcdMutex(session_a, path, identifier="A", on_event=run.sink("A"))
    mutex_b = EtcdMutex(session_b, path, identifier="B", on_event=run.sink("B"))
    try:
        mutex_a.lock(timeout=DEADLINE)
        waiter = threading.Thread(target=mutex_b.lock, kwargs={"timeout": DEADLINE}, daemon=True)
        waiter.start()
        run.wait_for("watch", client="B", timeout=DEADLINE)
        run.record_fault("stop_keepalive", "A", lease_id=session_a.lease_id)
        session_a.stop_keepalive()
        waiter.join(DEADLINE)
        wait_until(lambda: run.events(client="A", kind="lost"), "A's session to give up")
        assert mutex_b.is_held, "B should hold the lock once A's lease expired"
        mutex_b.unlock()
    finally:
        for session in (session_a, session_b):
            session.close()
        for client in clients:
            client.close()
    return run


def acquire_unless_expired(lock: ZooKeeperLock) -> None:
    try:
        lock.acquire(timeout=DEADLINE)
    except SessionExpired:        # B's, once its session is closed: the run expects it
        pass


def middle_waiter_run(lab, path: str = "/maps/queue") -> History:
    """A holds; B and C queue; B's session closes: C wakes, re-checks and watches A's node; A
    releases and C takes the lock."""
    run = History()
    clients = {name: lab.zookeeper.client(timeout=4.0) for name in "ABC"}
    locks = {name: ZooKeeperLock(client, path, identifier=name, on_event=run.sink(name))
             for name, client in clients.items()}
    try:
        locks["A"].acquire(timeout=DEADLINE)
        waiters = {}
        for name in "BC":
            waiters[name] = threading.Thread(target=acquire_unless_expired, args=(locks[name],), daemon=True)
            waiters[name].start()
            run.wait_for("watch", client=name, timeout=DEADLINE)
        wait_until(lambda: clients["C"].client_id[0] in watchers_of(lab.zookeeper, f"{path}/{locks['B'].node}"),
                   "the server to list C's watch on B's node")
        run.record_fault("close session", "B")
        clients["B"].stop()
        run.wait_for("watch", client="C", count=2, timeout=DEADLINE)
        wait_until(lambda: clients["C"].client_id[0] in watchers_of(lab.zookeeper, f"{path}/{locks['A'].node}"),
                   "the server to list C's new watch, on A's node")
        locks["A"].release()
        waiters["C"].join(DEADLINE)
        assert locks["C"].is_held, "C should hold the lock after A released it"
        locks["C"].release()
    finally:
        for client in clients.values():
            client.stop()
            client.close()
    return run


@pytest.fixture(scope="module")
def runs():
    with labkit.up(zookeeper=1, etcd=1, redis=False, quiet=True) as lab:
        yield {"zookeeper": zookeeper_run(lab), "etcd": etcd_run(lab), "queue": middle_waiter_run(lab)}


def mermaid_names_everything(lock_map: LockMap) -> None:
    text = lock_map.to_mermaid()
    for node in lock_map.nodes:
        assert mermaid_text(node.label) in text, f"{node.id} missing from:\n{text}"
    for edge in lock_map.edges:
        assert mermaid_text(edge.label) in text, f"{edge.id} missing from:\n{text}"


def test_the_zookeeper_sequence_is_the_run(runs):
    run = runs["zookeeper"]
    sequence = maps.zookeeper_sequence(run)
    replay = sequence.replay()
    assert sorted(step.number for _, step in replay) == list(range(1, 10)), "the recipe's nine steps, once each"
    events = run.events()
    for _, step in replay:   # every step is an event of the run, at its recorded time
        assert any(event.time == step.time and event.client == step.client and event.kind == step.event
                   for event in events), step
    times = [step.time for _, step in replay]
    assert times == sorted(times), "the replay goes in recorded order"
    created = {event.client: event.detail["node"] for event in run.events(kind="created")}
    watch = sequence.edge("step5").steps[0]
    assert watch.event == "watch" and watch.facts["target"] == created["A"], "B watched A's node, its predecessor"
    assert sequence.edge("step6").steps[0].event == "fault" and sequence.edge("step6").failure
    [woke] = run.events(client="B", kind="woke")
    assert sequence.edge("step7").steps[0].time == woke.time
    order = [number for _, step in replay for number in [step.number]]
    assert order.index(6) < order.index(7) < order.index(9), "B wakes and holds only after A's session closed"

    text = sequence.to_mermaid()
    assert text.startswith("sequenceDiagram\n")
    mermaid_names_everything(sequence)
    arrows = [int(number) for number in re.findall(r"^    \w+(?:->>|--\))\w+: (\d+)\. ", text, re.MULTILINE)]
    assert arrows == order, "the Mermaid arrows come in the recorded order"
    assert [entry["edge"] for entry in sequence.as_state()["replay"]] == [edge_id for edge_id, _ in replay]


def test_the_zookeeper_architecture_carries_the_sequence_steps(runs):
    run = runs["zookeeper"]
    sequence, architecture = maps.zookeeper_sequence(run), maps.zookeeper_architecture(run)
    by_number = {step.number: step for _, step in sequence.replay()}
    assert architecture.edge("b_requests").numbers == [2, 5, 8]
    assert architecture.edge("zk_to_b").numbers == [7, 9]
    for edge in architecture.edges:
        assert all(step == by_number[step.number] for step in edge.steps), edge.id
    assert sorted(step.number for _, step in architecture.replay()) == list(range(1, 10))
    assert architecture.to_mermaid().startswith("flowchart LR\n")
    mermaid_names_everything(architecture)


def test_the_etcd_lease_flow_is_the_run_with_its_failure_branch(runs):
    run = runs["etcd"]
    flow = maps.etcd_lease_flow(run)
    replay = flow.replay()
    assert [step.number for _, step in replay] == list(range(1, len(replay) + 1)), "numbered in recorded order"
    [stopped] = run.events(kind="fault")
    [lost] = run.events(client="A", kind="lost")
    [woke] = run.events(client="B", kind="woke")
    acquired_b = run.events(client="B", kind="acquired")[0]
    assert [step.time for step in flow.edge("keepalive_fails").steps] == [stopped.time]
    assert [(step.client, step.time) for step in flow.edge("fails_stop").steps] == [("A", lost.time)]
    assert [step.time for step in flow.edge("fails_expires").steps] == [woke.time]
    assert [step.time for step in flow.edge("expires_deleted").steps] == [woke.time]
    assert flow.edge("wait_deleted").steps == (), "B's predecessor went with its lease, not by an unlock"
    assert [(step.client, step.time) for step in flow.edge("lowest_hold").steps] == [
        ("A", run.events(client="A", kind="acquired")[0].time), ("B", acquired_b.time)]
    assert [step.client for step in flow.edge("lowest_wait").steps] == ["B"]
    assert all(edge.failure for edge in flow.edges if edge.id in ("keepalive_fails", "fails_stop", "fails_expires"))
    assert flow.edge("grant_keepalive").steps == (), "a keep-alive is not an event: that edge has no step"
    assert flow.to_mermaid().startswith("flowchart LR\n")
    mermaid_names_everything(flow)

    architecture = maps.etcd_architecture(run)
    assert sorted(step.number for _, step in architecture.replay()) == [step.number for _, step in replay]
    assert [step.event for step in architecture.edge("a_keepalive").steps] == ["fault", "lost"]
    mermaid_names_everything(architecture)


def test_a_queue_of_three_shows_the_re_check_after_a_middle_waiter_died(runs):
    run = runs["queue"]
    queue = maps.zookeeper_queue(run)
    replay = queue.replay()
    assert [step.number for _, step in replay] == list(range(1, len(replay) + 1)), "numbered in recorded order"
    recorded = {(event.time, event.client, event.kind) for event in run.events()}
    assert all((step.time, step.client, step.event) in recorded for _, step in replay)
    c_arrows = [(queue.edge(edge_id).label.split(" ")[0], step.event) for edge_id, step in replay
                if step.client == "C"]
    assert c_arrows == [("create", "created"), ("get(…-lock-0000000001,", "watch"), ("NodeDeleted", "woke"),
                        ("re-check,", "watch"), ("NodeDeleted", "woke"), ("getChildren", "acquired"),
                        ("lowest:", "acquired"), ("delete", "released")], c_arrows
    [fault] = [queue.edge(edge_id) for edge_id, step in replay if step.event == "fault"]
    assert fault.failure and fault.source == queue.nodes[2].id and queue.nodes[2].label == "B"
    text = queue.to_mermaid()
    assert len(re.findall(r"^    \w+(?:->>|--\))\w+: ", text, re.MULTILINE)) == len(queue.edges)
    mermaid_names_everything(queue)


def made_up(*rows) -> History:
    return History(Event(float(number), client, kind, detail) for number, (client, kind, detail) in enumerate(rows))


@pytest.mark.no_servers
@pytest.mark.parametrize("build", [maps.zookeeper_sequence, maps.zookeeper_architecture, maps.etcd_lease_flow,
                                   maps.etcd_architecture])
def test_a_history_without_the_events_says_what_to_record(build):
    with pytest.raises(maps.MissingEvents) as empty:
        build(History())
    assert "record a run of two lock clients" in str(empty.value)
    with pytest.raises(maps.MissingEvents, match="record a run of ZooKeeper lock clients"):
        maps.zookeeper_queue(History())
    alone = made_up(("A", "created", {"node": "/l/x-lock-0000000000", "key": "/l/1"}),
                    ("A", "acquired", {"token": 5}))
    with pytest.raises(maps.MissingEvents, match="'watch' event"):
        build(alone)


@pytest.mark.no_servers
def test_a_waiter_that_never_woke_is_named():
    node = "/l/x-lock-0000000000"
    unfinished = made_up(("A", "created", {"node": node}), ("A", "acquired", {"token": 5}),
                         ("B", "created", {"node": "/l/y-lock-0000000001"}), ("B", "watch", {"target": node}))
    with pytest.raises(maps.MissingEvents, match="release, loss or session end of the holder 'A'"):
        maps.zookeeper_sequence(unfinished)


@pytest.mark.no_servers
def test_mermaid_text_escapes_what_its_parser_reads_as_syntax():
    assert mermaid_text('a "b"; #1 <c>') == "a #quot;b#quot;#59; #35;1 #lt;c#gt;"
    nodes = (MapNode("one", "first; node", "why"), MapNode("two", 'the "second"', "why", 1))
    step = MapStep(1, 10.0, "A", "created")
    edges = (MapEdge("go", "one", "two", "go #1", "p", "d", "e", "c", steps=(step,)),
             MapEdge("back", "two", "one", "back", "p", "d", "e", "c", failure=True))
    flow = LockMap("flow", "a; b", nodes, edges)
    assert flow.to_mermaid() == ("flowchart LR\n    %% a#59; b\n    one[\"first#59; node\"]\n"
                                 "    two[\"the #quot;second#quot;\"]\n"
                                 "    one -->|\"go #35;1 (1 at +0.000 s)\"| two\n    two -.->|\"back\"| one\n")
    sequence = LockMap("sequence", "s", nodes, edges)
    assert sequence.to_mermaid() == ("sequenceDiagram\n    title s\n    participant one as first#59; node\n"
                                     "    participant two as the #quot;second#quot;\n"
                                     "    one->>two: 1. go #35;1 (+0.000 s)\n")
    with pytest.raises(ValueError, match="name nodes this map does not have"):
        LockMap("flow", "x", nodes[:1], edges)
