"""A lab's plan (labkit/servers/plan.py): the sizes labkit refuses before anything starts, and
the plan of the session's real lab: read back from its state it is the same plan, it holds
the sizes it was made for and no more, and the services built from it name the lab's
running servers."""
from __future__ import annotations

import socket

import pytest

from labkit.errors import InvalidClusterSize
from labkit.servers.plan import LabPlan, Sizes, services_of

from helpers import SHARED_SHAPE


@pytest.mark.no_servers
@pytest.mark.parametrize("sizes, said", [
    (Sizes(zookeeper=2), "use 1 or 3"),
    (Sizes(etcd=4), "use 3 or 5"),
    (Sizes(zookeeper=7), "ensembles of 1, 3 or 5"),
    (Sizes(redis=False, replica=True), "replica=True needs redis=True"),
    (Sizes(redlock=2), "redlock=2"),
    (Sizes(redlock=10), "redlock=10"),
    (Sizes(replica=True, sentinels=2), "sentinels=2"),
    (Sizes(sentinels=3), "without a replica"),
])
def test_a_size_labkit_refuses_is_refused_before_anything_starts(sizes, said):
    with pytest.raises(InvalidClusterSize) as refused:
        sizes.check()
    assert said in str(refused.value), str(refused.value)


@pytest.mark.no_servers
def test_the_sizes_labkit_runs_pass_the_check():
    for sizes in (Sizes(), Sizes(zookeeper=0, etcd=0, redis=False), Sizes(zookeeper=5, etcd=3),
                  Sizes(replica=True, sentinels=3, redlock=9), Sizes(postgres=True)):
        sizes.check()


def test_the_plan_read_back_from_its_state_is_the_same_plan(lab):
    assert LabPlan.from_state(lab.plan.to_state(), lab.run_dir) == lab.plan
    assert {node.kind for node in lab.plan.nodes} == {"zookeeper", "etcd", "redis", "redlock"}
    assert len({node.port for node in lab.plan.nodes}) == len(lab.plan.nodes)   # a port each


def test_the_plan_holds_the_sizes_it_was_made_for_and_no_more(lab):
    shape = dict(SHARED_SHAPE)
    assert lab.plan.holds(Sizes(**shape))
    assert lab.plan.holds(Sizes(zookeeper=0, etcd=0, redis=False))
    for more in ({"zookeeper": 3}, {"etcd": 3}, {"redlock": 5}, {"replica": True}, {"postgres": True}):
        assert not lab.plan.holds(Sizes(**{**shape, **more})), more


def test_the_services_built_from_the_plan_name_the_running_servers(lab):
    """The same nodes as the lab's own services, in the table's order, each listening where
    the plan says and, built with the lab's secret, answering its probe (which logs in: a
    Redis server of a private lab refuses a PING without it)."""
    services = services_of(lab.plan, secret=lab.secret)
    assert list(services) == ["zookeeper", "etcd", "redis", "redlock"] == [s.name for s in lab.services]
    for kind, service in services.items():
        running = getattr(lab, kind).nodes
        assert [(node.name, node.port) for node in service.nodes] == [(node.name, node.port) for node in running]
        assert service.secret is lab.secret is not None
        for node in service.nodes:
            socket.create_connection(("127.0.0.1", node.port), timeout=5).close()   # refused if nothing listens
            assert node.is_ready(), node
    assert not services_of(lab.plan)["redis"].nodes[0].is_ready()   # no secret, no login
