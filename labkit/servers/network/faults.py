"""A lab's network faults, as methods of the lab (``labkit.up(network=True)``): each hands on
to its ``Network`` (labkit/servers/network/links.py), which says what each does; a lab started
without a network refuses them all with the same clear error (``not_enabled``)."""
from __future__ import annotations

from labkit.servers.network.links import Network, not_enabled


class NetworkFaults:
    """Mixed into ``labkit.servers.lab.Lab``: ``lab.partition(...)``, ``lab.isolate(name)``,
    ``lab.cut(a, b)``, ``lab.delay(ms)``, ``lab.loss(fraction)``, ``lab.heal()``."""

    network: Network | None

    def _links(self) -> Network:
        if self.network is None:
            raise not_enabled()
        return self.network

    def partition(self, *sides, history=None) -> dict:
        return self._links().partition(*sides, history=history)

    def isolate(self, name: str, history=None, **detail) -> dict:
        return self._links().isolate(name, history=history, **detail)

    def cut(self, a: str, b: str, both_ways: bool = True, history=None) -> dict:
        return self._links().cut(a, b, both_ways=both_ways, history=history)

    def delay(self, ms: float, jitter: float = 0, links=None, history=None) -> dict:
        return self._links().delay(ms, jitter=jitter, links=links, history=history)

    def loss(self, fraction: float, links=None, history=None) -> dict:
        return self._links().loss(fraction, links=links, history=history)

    def heal(self, history=None) -> dict:
        return self._links().heal(history=history)

    def network_status(self) -> dict:
        return self._links().status()
