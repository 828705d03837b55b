"""labkit/widgets/map_texts.py, the words of the lock maps, as data: every edge says its five
things (label, protocol, direction, effect, consequence) in plain words, every placeholder is
one the maps fill (labkit/widgets/maps.py), the lesson's nine ZooKeeper steps run between a
client and the ensemble in order, and the lease flow's edges join its nodes, its one decision
branching yes and no. Pure logic: the tables are read (tests/widgets/test_maps.py draws them
from real runs)."""
from __future__ import annotations

import string

import pytest

from labkit.widgets.map_texts import (ETCD_EDGES, ETCD_NODES, FLOW_EDGES, FLOW_NODES, QUEUE_STEPS, ZOOKEEPER_EDGES,
                                      ZOOKEEPER_NODES, ZOOKEEPER_STEPS)

pytestmark = pytest.mark.no_servers

# what labkit/widgets/maps.py passes to str.format, by table
FILLED = {"nodes": {"client"}, "edges": set(), "steps": {"client", "other", "short", "how"},
          "queue": {"client", "short", "what", "message"}}
EDGE_TABLES = {"ZOOKEEPER_EDGES": ZOOKEEPER_EDGES, "ETCD_EDGES": ETCD_EDGES}


def fields(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}


def plain(text: str) -> bool:
    """Words a learner reads in a panel: no markup, no blank padding, something said."""
    return bool(text.strip()) and text == text.strip() and not set(text) & set("<>`*#")


@pytest.mark.parametrize("table", EDGE_TABLES)
def test_every_edge_says_its_five_things_in_plain_words(table):
    for edge_id, texts in EDGE_TABLES[table].items():
        assert len(texts) == 5, (edge_id, texts)
        assert all(plain(text) for text in texts), (edge_id, texts)
        assert not set().union(*map(fields, texts)) - FILLED["edges"], (edge_id, texts)


def test_every_node_has_a_label_and_a_reason():
    for node_id, (label, why) in {**ZOOKEEPER_NODES, **{f"etcd {key}": value for key, value in ETCD_NODES.items()}}.items():
        assert plain(label) and plain(why) and why.endswith("."), node_id
        assert not (fields(label) | fields(why)) - FILLED["nodes"], node_id
    assert ETCD_NODES["client_b"] == ZOOKEEPER_NODES["client_b"]   # a waiter is a waiter on both


def test_the_nine_steps_run_in_order_between_a_client_and_the_ensemble():
    assert sorted(ZOOKEEPER_STEPS) == list(range(1, 10))
    for number, (source, target, *texts) in ZOOKEEPER_STEPS.items():
        assert {source, target} in ({"A", "ZK"}, {"B", "ZK"}), number
        assert len(texts) == 5 and all(plain(text) for text in texts), number
        assert not set().union(*map(fields, texts)) - FILLED["steps"], number
        filled = [text.format(client="client-1", other="client-2", short="0001", how="delete") for text in texts]
        assert not any("{" in text for text in filled), filled
    # the holder's side first, then the waiter's: A creates and holds, B watches, A lets go, B holds
    assert [ZOOKEEPER_STEPS[n][0] for n in (1, 3, 6)] == ["A"] * 3 and ZOOKEEPER_STEPS[9][1] == "B"


def test_every_queue_event_is_one_arrow_the_maps_can_fill():
    for kind, (to_server, *texts) in QUEUE_STEPS.items():
        assert isinstance(to_server, bool) and len(texts) == 4, kind
        assert all(plain(text) for text in texts), kind
        assert not set().union(*map(fields, texts)) - FILLED["queue"], kind
    # a fault and an error say what: their detail's words are filled in
    assert "what" in fields(QUEUE_STEPS["fault"][1]) and "message" in fields(QUEUE_STEPS["error"][3])
    assert QUEUE_STEPS["acquired"][0] is False and QUEUE_STEPS["created"][0] is True   # a grant comes from the server


def test_the_lease_flow_joins_its_nodes_and_its_decision_branches_yes_and_no():
    places = [(column, row) for _, _, column, row, _ in FLOW_NODES.values()]
    assert len(places) == len(set(places)), "two nodes of the flow drawn in one place"
    assert {shape for *_, shape in FLOW_NODES.values()} <= {"box", "decision", "failure"}
    ends = {end for source, target, *_ in FLOW_EDGES.values() for end in (source, target)}
    assert ends <= set(FLOW_NODES), sorted(ends - set(FLOW_NODES))
    assert set(FLOW_NODES) <= ends, f"nodes no edge reaches: {sorted(set(FLOW_NODES) - ends)}"
    for edge_id, (source, target, *texts) in FLOW_EDGES.items():
        assert source != target and len(texts) == 5 and all(plain(text) for text in texts), edge_id
    [decision] = [node for node, (*_, shape) in FLOW_NODES.items() if shape == "decision"]
    assert sorted(label for source, _, label, *_ in FLOW_EDGES.values() if source == decision) == ["no", "yes"]
    # a failing keep-alive leads to both ends of the lesson: the holder stops, the server frees the lock
    assert {target for source, target, *_ in FLOW_EDGES.values() if source == "fails"} == {"stop", "expires"}
