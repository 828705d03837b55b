"""Labs that start side by side (a classroom's kernels, the suite's legs) each choose their
ports at random, free when chosen: another program can bind one before the lab's server does
(notebook 06's lab failed so with PortBusy beside 04's and 07's in a fresh-clone run).
``labkit.up`` then lays the lab out again on other ports (labkit/servers/ports.py,
``taken_meanwhile``); with a base port it cannot, and the error says which port.

Each test takes the port for real, with a listening socket, at the moment another lab would:
between labkit's choice and its check, or between the check and the server's own bind."""
from __future__ import annotations

import socket

import pytest

import labkit
from labkit.errors import NodeStartError, PortBusy
from labkit.servers import lab as lab_module
from labkit.servers import ports as ports_module
from labkit.servers.ports import taken_meanwhile

RETRY_LINE = "laying the lab out again on other ports (retry 1 of 2)"


def listen(port: int) -> socket.socket:
    """Take ``port`` on 127.0.0.1 as another program would (a server binds with SO_REUSEADDR)."""
    squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.0.0.1", port))
    squatter.listen()
    return squatter


@pytest.fixture
def squatters():
    taken: list[socket.socket] = []
    yield taken
    for squatter in taken:
        squatter.close()


def test_a_port_taken_between_the_choice_and_the_check_is_chosen_again(monkeypatch, capsys, squatters):
    chosen = ports_module.free_ports

    def chosen_then_taken(count: int) -> list[int]:
        ports = chosen(count)
        if not squatters:   # the first choice only: redis1's port, taken before the check
            squatters.append(listen(ports[0]))
        return ports

    monkeypatch.setattr(ports_module, "free_ports", chosen_then_taken)
    with labkit.up(zookeeper=0, etcd=0, redis=True) as lab:
        taken = squatters[0].getsockname()[1]
        assert lab.redis.nodes[0].port != taken
        assert lab.redis.client().ping()
    out = capsys.readouterr().out
    assert f"port {taken} on 127.0.0.1, needed for redis1 (client), is already in use" in out and RETRY_LINE in out


def test_a_port_taken_between_the_check_and_the_servers_bind_is_chosen_again(monkeypatch, capsys, squatters):
    checked = lab_module.check_port_free

    def checked_then_taken(port: int, what: str) -> None:
        checked(port, what)
        if not squatters:
            squatters.append(listen(port))   # the server itself finds it bound

    monkeypatch.setattr(lab_module, "check_port_free", checked_then_taken)
    with labkit.up(zookeeper=0, etcd=0, redis=True) as lab:
        assert lab.redis.nodes[0].port != squatters[0].getsockname()[1]
        assert lab.redis.client().ping()
    out = capsys.readouterr().out
    assert RETRY_LINE in out and "redis1" in out


def test_with_a_base_port_a_taken_port_is_an_error_that_names_it(squatters):
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.bind(("127.0.0.1", 0))
    base = probe.getsockname()[1]
    probe.close()
    squatters.append(listen(base))
    with pytest.raises(PortBusy, match=f"port {base} on 127.0.0.1, needed for redis1"):
        labkit.up(zookeeper=0, etcd=0, redis=True, base_port=base, quiet=True)


@pytest.mark.no_servers
def test_only_a_taken_port_counts_as_taken_meanwhile():
    assert taken_meanwhile(PortBusy("port 1 on 127.0.0.1, needed for redis1 (client), is already in use"))
    assert taken_meanwhile(NodeStartError("redis1 did not start", log_tail="bind: Address already in use"))
    assert not taken_meanwhile(NodeStartError("redis1 did not start", log_tail="Fatal error loading the DB"))
    assert not taken_meanwhile(TimeoutError("the lab did not answer"))


def test_a_link_port_taken_before_the_proxy_binds_it_is_chosen_again(monkeypatch, capsys, squatters):
    """The proxy's ports are chosen while its Python starts, and bound on connect: another lab
    can take one in between (a fresh-clone run: the network proxy refused route, address in use)."""
    from labkit.servers.network import links as links_module
    routed = links_module.Network.route

    def routed_then_taken(self, src, dst, target, kind="tcp", **extra):
        port = routed(self, src, dst, target, kind, **extra)
        if self._planned is not None and not squatters:   # chosen, not yet bound by the proxy
            squatters.append(listen(port))
        return port

    monkeypatch.setattr(links_module.Network, "route", routed_then_taken)
    with labkit.up(zookeeper=0, etcd=1, redis=False, network=True) as lab:   # etcd's peer link is routed
        taken = squatters[0].getsockname()[1]
        client = lab.etcd.client()
        client.put("/port-races", "up")
        assert client.get("/port-races")[0] == b"up"
        client.close()
    out = capsys.readouterr().out
    assert RETRY_LINE in out and f"('127.0.0.1', {taken}): address already in use" in out
