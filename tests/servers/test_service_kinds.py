"""The table of services (labkit/servers/services/kinds.py): a service is one entry, so a toy
service defined in this file alone, and registered, is laid out, started, probed, restarted,
attached to and stopped like labkit's own, through the plan and the Lab that name no service.

The toy is a real server: ``python -m http.server`` on a port of the lab, serving its own
folder, where its layout wrote a page naming the node. Everything it needs comes from its
entry: its size (``extra={"toy": N}``), its binary (the finder of "python"), its layout, its
node and service classes. If any step bypassed the table, the toy would be missing from the
plan, the binaries, the lab or its state file, and these tests fail."""
from __future__ import annotations

import http.client
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

import labkit
from labkit.errors import InvalidClusterSize, UnknownService
from labkit.servers import state as lab_state
from labkit.servers.plan import Sizes
from labkit.servers.runners.process import process_state
from labkit.servers.services import kinds
from labkit.servers.services.kind import ServiceKind
from labkit.servers.services.layout import Layout
from labkit.servers.services.node import Node, Service

pytestmark = pytest.mark.local_backend  # pids and a Python of this machine: local processes only


class ToyNode(Node):
    kind = "toy"
    start_timeout = 15.0

    def page(self, endpoint: str | None = None) -> str:
        """The page the layout wrote, fetched from the server (at ``endpoint``: through a proxy)."""
        with urllib.request.urlopen(f"http://{endpoint or self.endpoint}/name.txt", timeout=2) as reply:
            return reply.read().decode()

    def is_ready(self) -> bool:
        try:
            return self.page() == self.name
        except (OSError, http.client.HTTPException):
            return False

    def read_role(self) -> str:
        return "server"


class ToyService(Service):
    name = "toy"
    nodes: list[ToyNode]


def lay_out_toy(layout: Layout, count: int) -> None:
    for i in range(count):
        name, port = f"toy{i + 1}", layout.ports.take()
        folder = layout.folder(name)
        (folder / "name.txt").write_text(name)
        argv = [layout.binaries["python"], "-m", "http.server", str(port), "--bind", "127.0.0.1",
                "--directory", str(folder)]
        layout.add(ToyNode, name, {"client": port}, folder, argv)


def check_toy(sizes: Sizes) -> None:
    if sizes.extra.get("toy", 0) > 3:
        raise InvalidClusterSize("toy: 3 at most", "use extra={'toy': 2}")


TOY = ServiceKind("toy", ToyNode, ToyService, lay_out_toy, check=check_toy, finders={"python": lambda: sys.executable})


@pytest.fixture
def toy():
    kinds.register_kind(TOY)
    yield TOY
    kinds.unregister_kind("toy")


def gone(pid: int) -> bool:
    return process_state(pid) == "stopped"


def refused(port: int) -> bool:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1).close()
    except (OSError, http.client.HTTPException):
        return True
    return False


def test_a_registered_toy_service_runs_like_labkits_own(toy):
    """Laid out after Redis (the table's order), built with the lab's secret and network (a
    client reaches it through a link of its own), a restart's pid on file, attached again, stopped."""
    with labkit.up(zookeeper=0, etcd=0, redis=True, extra={"toy": 2}, network=True, backend="local",
                   quiet=True) as lab:
        service = lab.service("toy")
        assert isinstance(service, ToyService) and [s.name for s in lab.services] == ["redis", "toy"]
        assert lab.sizes() == "redis=1, toy=2" and [n.name for n in service.nodes] == ["toy1", "toy2"]
        assert service.secret is lab.secret is not None and service.network is lab.network is not None
        assert [node.page() for node in service.nodes] == ["toy1", "toy2"]
        assert service.nodes[0].page(service.endpoint_for(service.nodes[0], via="client-1")) == "toy1"
        assert lab.status()["services"]["toy"]["nodes"][1]["role"] == "server"
        assert lab.plan.holds(Sizes(zookeeper=0, etcd=0, extra={"toy": 2}))
        assert not lab.plan.holds(Sizes(zookeeper=0, etcd=0, extra={"toy": 3}))

        node, first = service.nodes[1], service.nodes[1].pid
        node.kill()
        node.start()
        node.wait_ready()
        recorded = {entry["name"]: entry["runner"]["pid"] for entry in lab_state.read_state(lab.run_dir)["nodes"]}
        assert recorded["toy2"] == node.pid != first and gone(first)

        attached = labkit.attach(lab.id)
        assert [(n.name, n.port, n.pid) for n in attached.service("toy").nodes] == \
            [(n.name, n.port, n.pid) for n in service.nodes]
        pids, ports = [n.pid for n in service.nodes], [n.port for n in service.nodes]
    assert all(gone(pid) for pid in pids) and all(refused(port) for port in ports)
    assert not lab.run_dir.exists()


def test_labkit_down_stops_a_detached_toy_lab(toy):
    """`labkit down`, another process that has never heard of the toy, stops it from the state file."""
    lab = labkit.up(zookeeper=0, etcd=0, redis=False, extra={"toy": 1}, detached=True, backend="local", quiet=True)
    try:
        node = lab.service("toy").nodes[0]
        assert node.page() == "toy1"
        down = subprocess.run([sys.executable, "-m", "labkit.cli", "down"], capture_output=True, text=True,
                              timeout=120, env={**os.environ, "LABKIT_BACKEND": "local"})
        assert down.returncode == 0, down.stdout + down.stderr
        assert f"stopped lab {lab.id}: toy1" in down.stdout, down.stdout
        assert gone(node.pid) and refused(node.port) and not lab.run_dir.exists()
    finally:
        lab.down()


@pytest.mark.no_servers
def test_a_service_is_sized_checked_and_looked_up_through_the_table(toy):
    with pytest.raises(InvalidClusterSize, match="toy: 3 at most"):
        labkit.up(zookeeper=0, etcd=0, redis=False, extra={"toy": 4}, quiet=True)
    with pytest.raises(InvalidClusterSize, match="a node count is a whole number"):
        Sizes(extra={"toy": -1}).check()
    assert TOY.wanted(Sizes(extra={"toy": 2})) == 2 and TOY.wanted(Sizes()) == 0
    with pytest.raises(ValueError, match="in the table already"):
        kinds.register_kind(TOY)
    with pytest.raises(ValueError, match="labkit's own"):
        kinds.unregister_kind("redis")
    assert [kind.name for kind in kinds.kinds()][-1] == "toy"


@pytest.mark.no_servers
def test_an_unregistered_service_is_refused_by_name():
    assert kinds.kind_named("toy") is None
    with pytest.raises(InvalidClusterSize, match="no service is named 'toy'"):
        Sizes(extra={"toy": 1}).check()
    with pytest.raises(InvalidClusterSize, match="redis is sized by an argument of its own"):
        Sizes(extra={"redis": 1}).check()


def test_a_lab_says_which_services_it_runs(lab):
    with pytest.raises(UnknownService, match="its services: zookeeper, etcd, redis, redlock"):
        lab.service("toy")
    assert lab.service("etcd") is lab.etcd


@pytest.mark.no_servers
def test_the_cluster_handles_are_built_in_one_place():
    """Lab is built in one step from a plan: a cluster handle is made only by its kind's
    build (servers/services/kind.py), which only plan.services_of calls, so up() and attach()
    cannot map nodes to services two ways (they did until #24)."""
    labkit_dir = Path(labkit.__file__).parent

    def files_saying(pattern: str) -> list[str]:
        return sorted(str(path.relative_to(labkit_dir)) for path in labkit_dir.rglob("*.py")
                      if re.search(pattern, path.read_text()))

    assert files_saying(r"(?<!class )\b(ZooKeeper|Etcd|Redis|Redlock|Sentinel|Postgres)Service\(|service_class\(") \
        == ["servers/services/kind.py"]
    assert files_saying(r"\bkind\.build\(") == ["servers/plan.py"]
