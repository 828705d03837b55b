"""Ports on 127.0.0.1 for a lab's servers and its network's links: free ones chosen below
the kernel's ephemeral range (or in ``LABKIT_PORTS``), and the check that one is still free
just before a server binds it.

A port chosen free can still be taken by another program before the server binds it (labs
starting side by side, each choosing at random): ``taken_meanwhile`` tells such a failure, and
``labkit.up`` then lays the lab out again on other ports.

What can fail: ``PortBusy`` when something else listens on a port a node needs;
``ValueError`` for a malformed ``LABKIT_PORTS``.
"""
from __future__ import annotations

import os
import random
import socket
from pathlib import Path
from typing import Callable, TypeVar

from labkit.errors import NodeStartError, PortBusy

# The one address of a lab: every server, proxy link and relay binds it, every client dials it.
# (network/proxy.py, a script of the standard library alone, keeps a copy of its own.)
HOST = "127.0.0.1"
# how many times labkit.up lays a lab out when another program takes a port it chose free before
# its server binds it (labs starting side by side: a classroom, the suite's legs)
LAYOUTS = 3
T = TypeVar("T")


def free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 right now, all distinct, chosen below the kernel's ephemeral
    range: a port from that range can be taken, between this choice and the server's bind,
    as the source port of any outgoing connection on the machine (a test making many
    client connections does exactly that). Falls back to the kernel's choice when the
    ephemeral range leaves no room below it.

    ``LABKIT_PORTS=FIRST-LAST`` narrows the choice to that range: labs in containers that
    share the host's network (docker/hub/ gives each student a range of their own) then
    cannot pick the same port in the moment between this check and a server's bind."""
    first, last = lab_port_range()
    roomy = last + 1 - first >= 10 * count or "LABKIT_PORTS" in os.environ  # a given range is kept, however narrow
    candidates = list(range(first, last + 1)) if roomy else []
    random.shuffle(candidates)
    sockets, ports = [], []
    try:
        for port in candidates:
            if len(ports) == count:
                break
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            sockets.append(sock)
            ports.append(port)
        while len(ports) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
            ports.append(sock.getsockname()[1])
    finally:
        for sock in sockets:
            sock.close()
    return ports


def lab_port_range() -> tuple[int, int]:
    """The ports labs choose from: ``LABKIT_PORTS`` (``FIRST-LAST``), else 10000 up to the
    kernel's ephemeral range."""
    wanted = os.environ.get("LABKIT_PORTS", "")
    if wanted:
        try:
            first, last = (int(part) for part in wanted.split("-"))
        except ValueError:
            raise ValueError(f"LABKIT_PORTS={wanted!r}: expected FIRST-LAST, e.g. 20000-20499") from None
        if not 1024 <= first <= last <= 65535:
            raise ValueError(f"LABKIT_PORTS={wanted!r}: expected 1024 <= FIRST <= LAST <= 65535")
        return first, last
    low, _ = ephemeral_port_range()
    return 10_000, low - 1


def ephemeral_port_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' source ports (Linux; elsewhere the IANA one)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 49152, 65535


def check_port_free(port: int, what: str) -> None:
    """Raise PortBusy if something listens on the port. Like the servers themselves, bind
    with SO_REUSEADDR: a port whose old connections linger in TIME_WAIT is free to reuse."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        raise PortBusy(f"port {port} on 127.0.0.1, needed for {what}, is already in use ({exc.strerror})",
                       f"stop whatever listens there (`ss -ltnp 'sport = :{port}'` shows it), "
                       "or choose another base port, or leave the ports to labkit (the default)") from None
    finally:
        sock.close()


def taken_meanwhile(error: BaseException) -> bool:
    """True for a start that failed because a port was taken: the check before the start found
    it bound (PortBusy), or a server said so as it tried to bind it (its last log lines:
    ZooKeeper's BindException, etcd's and Redis's "bind: address already in use",
    PostgreSQL's "could not bind ... Address already in use")."""
    if isinstance(error, PortBusy):
        return True
    return isinstance(error, NodeStartError) and "address already in use" in error.log_tail.lower()


def on_other_ports_if_taken(start: Callable[[], T], fixed: bool, say: Callable[[str], None]) -> T:
    """``start()`` (lay a lab out on ports chosen free, and start it), again on new ports when
    it failed because one was taken meanwhile, at most ``LAYOUTS`` times in all; ``fixed``
    (a base port given): never again, the error stands. ``start`` cleans up what it began."""
    for layout in range(1, LAYOUTS + 1):
        try:
            return start()
        except (PortBusy, NodeStartError) as error:
            if fixed or layout == LAYOUTS or not taken_meanwhile(error):
                raise
            say(f"  another program took a port labkit had chosen before its server bound it "
                f"({error.message.splitlines()[0]}): laying the lab out again on other ports "
                f"(retry {layout} of {LAYOUTS - 1})")
    raise AssertionError("unreachable: the last try returns or raises")


class PortPool:
    """The ports of one lab, handed out as it is laid out and never twice: each node takes
    its own (``take``: consecutive from ``base`` when one is given, else free ones), and its
    network's links take free ones (``take_free``), so nothing counts them in advance."""

    BASE_BLOCK = 100   # a lab has at most 42 node ports; links never take one of base..base+99

    def __init__(self, base: int | None = None):
        self.base = base
        self.taken: set[int] = set()
        self._next = base
        self._spare: list[int] = []

    def take(self) -> int:
        if self._next is None:
            return self.take_free()
        port, self._next = self._next, self._next + 1
        self.taken.add(port)
        return port

    def take_free(self) -> int:
        """A port free on 127.0.0.1 now, not taken before, and outside the block of a base port."""
        while True:
            if not self._spare:
                self._spare = free_ports(8)   # one search for several: each search shuffles the whole range
            port = self._spare.pop(0)
            in_block = self.base is not None and self.base <= port < self.base + self.BASE_BLOCK
            if port not in self.taken and not in_block:
                self.taken.add(port)
                return port
