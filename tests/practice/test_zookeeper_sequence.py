"""Where a sequential node's suffix comes from, checked on the real server (ZooKeeper 3.8),
and the sandbox's model of it agrees: the suffix counts the children ever created under
the parent (deletes leave no gap), while the parent's cversion counts creates and deletes."""
from __future__ import annotations

from labkit.practice.sandbox import Sandbox


def suffix(path: str) -> int:
    return int(path[-10:])


def test_the_suffix_counts_creations_and_deletes_leave_no_gap(zk, unique_name):
    zk.create(unique_name)
    first, second = (zk.create(f"{unique_name}/lock-", sequence=True) for _ in range(2))
    zk.delete(first)
    third = zk.create(f"{unique_name}/lock-", sequence=True)
    assert [suffix(first), suffix(second), suffix(third)] == [0, 1, 2]
    assert zk.exists(unique_name).cversion == 4          # 3 creates + 1 delete
    zk.delete(second)
    zk.delete(third)
    zk.create(f"{unique_name}/plain")                     # any child's create counts, sequential or not
    assert suffix(zk.create(f"{unique_name}/lock-", sequence=True)) == 4
    assert zk.exists(unique_name).cversion == 8


def test_the_sandbox_numbers_nodes_as_the_server_does(zk, unique_name):
    zk.create(unique_name)
    on_server = [zk.create(f"{unique_name}/lock-", sequence=True) for _ in range(2)]
    zk.delete(on_server[0])
    on_server.append(zk.create(f"{unique_name}/lock-", sequence=True))
    sim = Sandbox()
    sim.add_clients(2)
    sim.release("c1")
    sim.add_clients(1)
    assert [sim.clients[name].node for name in ("c1", "c2", "c3")] == [path.rsplit("/", 1)[1] for path in on_server]
    assert sim.coordinator.cversion == zk.exists(unique_name).cversion
