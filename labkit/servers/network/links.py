"""Network faults for a lab started with ``network=True``: partition, isolate, cut, delay,
stall (loss) and heal any link between servers and clients.

What can go wrong, first: a name that is neither a node nor a client seen by the network
(UnknownNode), a partition naming a node twice, a negative delay or a loss outside [0, 1]
(NetworkFaultError), a lab started without ``network=True`` (NetworkNotEnabled). A cut
does not close connections: it stalls them (see ``labkit.servers.network.proxy`` for exactly what
each fault does to TCP), so a server or client notices only through its own timeouts —
which is the point. ``heal()`` always restores every link, whoever cut it.

The rules live in the lab's proxy process, not here: any process attached to the lab
(a notebook, ``labkit net ...``) sees and changes the same network.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import socket
import sys
import time
from pathlib import Path
from typing import Callable

from labkit.errors import LabError, PortBusy, UnknownNode
from labkit.servers.runners.process import LocalProcess
from labkit.servers.ports import HOST, PortPool
from labkit.timing import wait_until


class NetworkNotEnabled(LabError):
    """A network fault on a lab whose links are direct (started without ``network=True``)."""


class NetworkFaultError(LabError):
    """A network fault asked for with impossible arguments."""


def not_enabled() -> NetworkNotEnabled:
    return NetworkNotEnabled("this lab connects its servers and clients directly: it has no network to break",
                             "start it with labkit.up(..., network=True) (CLI: `labkit up --network`)")


def etcd_member_id(peer_urls: list[str], cluster_token: str) -> str:
    """The id etcd gives a member of a new cluster (sha1 of its sorted peer URLs and the
    cluster token, first 8 bytes), in the hex form of rafthttp's X-Server-From header."""
    digest = hashlib.sha1(("".join(sorted(peer_urls)) + cluster_token).encode()).digest()
    return format(int.from_bytes(digest[:8], "big"), "x")


class Network:
    """The links of one lab. ``lab.network``; the Lab's ``partition``, ``heal``... call it."""

    def __init__(self, run_dir: Path, control_port: int | None, runner: LocalProcess | None = None,
                 nodes: list[str] = ()):
        self.run_dir = Path(run_dir)
        self.control_port = control_port
        self.runner = runner
        self.nodes = list(nodes)      # node names, in lab order (the layout adds each as it lays it out)
        self._open: list[dict] = []   # faults started from this process, closed by heal()
        self._ids = itertools.count(1)
        self._planned: dict[tuple, dict] | None = None   # routes chosen before connect() (see launch)
        self._ports = PortPool()   # where planned routes take their ports (see launch)

    @classmethod
    def from_state(cls, run_dir: Path, state: dict, on_start: Callable[[], None] | None = None) -> "Network":
        """The network a lab's state file records (``to_state``), its proxy already running;
        ``on_start``: what its runner calls if it starts the proxy again."""
        runner = state.get("runner")
        return cls(run_dir, state["control"], runner and LocalProcess.from_state(runner, on_start),
                   state.get("nodes", ()))

    @classmethod
    def start(cls, run_dir: Path, timeout: float = 10.0) -> "Network":
        """Start the lab's proxy process and wait until its control port answers."""
        network = cls.launch(run_dir)
        network.connect(timeout)
        return network

    @classmethod
    def launch(cls, run_dir: Path, ports: PortPool | None = None) -> "Network":
        """Start the lab's proxy process without waiting for it. Until ``connect()``, a
        route gets a free port from ``ports`` (the lab's pool, so never one of its nodes'),
        and the proxy opens it on connect: so the servers can start while the proxy's Python
        is still starting (~0.3 s, a third of the time a network costs a lab otherwise).
        A server that dials a proxy before then is refused and retries, as it would for a
        peer not yet up."""
        # run as a script: the proxy needs only the standard library, and importing the
        # labkit package (kazoo, redis, grpc...) would add a quarter of a second to every start
        proxy = str(Path(__file__).resolve().with_name("proxy.py"))
        runner = LocalProcess([sys.executable, proxy, str(run_dir)], str(Path(run_dir) / "proxy.log"), str(run_dir))
        runner.start()
        network = cls(run_dir, None, runner)
        network._planned, network._ports = {}, ports or PortPool()
        return network

    def connect(self, timeout: float = 10.0) -> None:
        """Wait until the proxy answers on its control port, then open the routes chosen
        before it did. Raises LabError with the proxy's log if it does not start."""
        proxy = str(Path(__file__).resolve().with_name("proxy.py"))
        port_file = self.run_dir / "proxy.port"

        def did_not_start() -> LabError:
            self.runner.kill()
            log = Path(self.runner.log_path).read_text(errors="replace")[-2000:]
            return LabError(f"the lab's network proxy did not start:\n{log}",
                            f"run `{sys.executable} {proxy} DIR` to see why")

        def started() -> bool:
            if port_file.exists():
                return True
            if self.runner.state() == "stopped":
                raise did_not_start()
            return False

        wait_until(started, "the lab's network proxy to write its port", timeout, poll=0.01, error=did_not_start)
        self.control_port = int(port_file.read_text())
        planned, self._planned = self._planned, None
        if planned:
            self.requests([{"op": "route", **request} for request in planned.values()])

    def stop(self) -> None:
        if self.runner is not None:
            self.runner.kill()

    def to_state(self) -> dict:
        return {"control": self.control_port, "runner": self.runner.to_state() if self.runner else None,
                "nodes": self.nodes}

    # -- the control channel ------------------------------------------------------
    def request(self, **request) -> dict:
        return self.requests([request])[0]

    def requests(self, requests: list[dict]) -> list[dict]:
        """Send several requests on one control connection; their answers, in order."""
        with socket.create_connection((HOST, self.control_port), timeout=10) as conn:
            conn.sendall(b"".join(json.dumps(request).encode() + b"\n" for request in requests))
            replies = conn.makefile("rb")
            answers = []
            for request in requests:
                reply = replies.readline()
                if not reply:
                    raise LabError("the lab's network proxy closed the control connection", "is the lab still running?")
                answer = json.loads(reply)
                if "error" in answer:
                    message = f"the network proxy refused {request.get('op')}: {answer['error']}"
                    if request.get("op") == "route" and "address already in use" in answer["error"]:
                        # chosen free before the proxy ran, taken meanwhile (another lab starting):
                        # up() lays the lab out again on other ports, as for a server's port
                        raise PortBusy(message, "another program took the port after labkit chose it; "
                                                "starting the lab again picks other ports")
                    raise LabError(message)
                answers.append(answer)
        return answers

    def route(self, src: str, dst: str, target: int, kind: str = "tcp", **extra) -> int:
        """The port on 127.0.0.1 that carries the link src -> dst to ``target`` (made on
        first use, the same port afterwards)."""
        if self._planned is not None:  # the proxy is still starting: choose the port now
            key = (src, dst, kind)
            if key not in self._planned:
                self._planned[key] = {"src": src, "dst": dst, "target": target, "kind": kind,
                                      "port": self._ports.take_free()}
            self._planned[key].update(extra)   # an etcd peer route learns its members later
            return self._planned[key]["port"]
        return self.request(op="route", src=src, dst=dst, target=target, kind=kind, **extra)["port"]

    def endpoint(self, via: str, node) -> str:
        """``host:port`` through which the client ``via`` reaches ``node``."""
        if via in self.nodes:
            raise NetworkFaultError(f"via={via!r} is a server's name; a client needs a name of its own",
                                    "use a name like via='client-1'")
        return f"{HOST}:{self.route(via, node.name, node.port)}"

    # -- names and links ------------------------------------------------------------
    def ends(self) -> list[str]:
        """Every node, then every client that has links of its own."""
        routes = self.request(op="status")["routes"]
        clients = sorted({r["src"] for r in routes} - set(self.nodes) - {"*"})
        return self.nodes + clients

    def _check(self, names, ends) -> None:
        for name in names:
            if name not in ends:
                raise UnknownNode(f"the network knows no node or client named {name!r} (it knows: {', '.join(ends)})",
                                  "use a node name, or a client name given as via= when the client was made")

    def _links(self, links, ends) -> list[tuple[str, str]]:
        """None: every directed link; ("a", "b"): both ways; "a->b": one way."""
        if links is None:
            return [(a, b) for a in ends for b in ends if a != b]
        pairs = []
        for link in links:
            if isinstance(link, str):
                a, _, b = link.partition("->")
                pairs.append((a.strip(), b.strip()))
            else:
                a, b = link
                pairs += [(a, b), (b, a)]
        self._check({name for pair in pairs for name in pair}, ends)
        return pairs

    def _apply(self, what: str, target: str, pairs, rule: dict, history, **detail) -> dict:
        answer = self.request(op="set", links={f"{a}>{b}": rule for a, b in pairs})
        fault = {"id": next(self._ids), "what": what, "target": target, "history": history,
                 "started": time.time(), "pairs": list(pairs), "rule": dict(rule)}
        self._open.append(fault)
        if history is not None:
            history.record_fault(what, target, phase="start", fault=fault["id"],
                                 links=[f"{a}->{b}" for a, b in pairs], **rule, **detail)
        return answer["rules"]

    # -- the faults -----------------------------------------------------------------
    def partition(self, *sides, history=None) -> dict:
        """Cut every link between two different sides, both ways. Names left out keep
        their links."""
        if len(sides) < 2:
            raise NetworkFaultError(f"a partition needs at least two sides, got {len(sides)}",
                                    "e.g. lab.partition(['zk1'], ['zk2', 'zk3'])")
        sides = [[side] if isinstance(side, str) else list(side) for side in sides]
        names = [name for side in sides for name in side]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise NetworkFaultError(f"{', '.join(twice)} named twice in the partition {sides}",
                                    "each node or client belongs to one side only")
        self._check(names, self.ends())
        pairs = [(a, b) for i, side in enumerate(sides) for other in sides[i + 1:]
                 for a in side for b in other]
        pairs += [(b, a) for a, b in pairs]
        target = " | ".join(",".join(side) for side in sides)
        return self._apply("partition", target, pairs, {"cut": True}, history)

    def isolate(self, name: str, history=None, **detail) -> dict:
        """Cut ``name`` from every other node and client, both ways. ``detail`` goes into
        the history's fault event (the panel says there when the victim's session ends)."""
        ends = self.ends()
        self._check([name], ends)
        pairs = [(name, other) for other in ends if other != name]
        pairs += [(b, a) for a, b in pairs]
        return self._apply("isolate", name, pairs, {"cut": True}, history, **detail)

    def cut(self, a: str, b: str, both_ways: bool = True, history=None) -> dict:
        """Cut the link a -> b (and b -> a unless ``both_ways=False``)."""
        self._check([a, b], self.ends())
        if a == b:
            raise NetworkFaultError(f"cannot cut {a!r} from itself", "name two different ends")
        pairs = [(a, b), (b, a)] if both_ways else [(a, b)]
        return self._apply("cut", f"{a}{'<->' if both_ways else '->'}{b}", pairs, {"cut": True}, history)

    def delay(self, ms: float, jitter: float = 0, links=None, history=None) -> dict:
        """Hold every chunk on the links for ``ms`` ± ``jitter`` milliseconds (each
        direction: a request and its reply pay it twice)."""
        if ms < 0 or jitter < 0:
            raise NetworkFaultError(f"delay({ms}, jitter={jitter}): a delay cannot be negative",
                                    "use 0 for no delay, or heal()")
        if jitter > ms:
            raise NetworkFaultError(f"jitter {jitter} ms above the delay {ms} ms would need negative delays",
                                    "use a jitter no larger than the delay")
        pairs = self._links(links, self.ends())
        return self._apply("delay", _links_name(links), pairs, {"delay": ms, "jitter": jitter}, history)

    def loss(self, fraction: float, links=None, history=None) -> dict:
        """Each chunk is 'lost' with this probability, and so arrives one retransmission
        timeout (200 ms, doubling) late: TCP turns loss into stalls."""
        if not 0 <= fraction <= 1:
            raise NetworkFaultError(f"loss({fraction}): a loss is a fraction between 0 and 1",
                                    "e.g. lab.loss(0.1) stalls about one chunk in ten")
        pairs = self._links(links, self.ends())
        return self._apply("loss", _links_name(links), pairs, {"loss": fraction}, history)

    def heal(self, history=None) -> dict:
        """Restore every link (cuts, delays and losses), whoever made them."""
        answer = self.request(op="heal")
        now = time.time()
        for fault in self._open:
            record_to = fault["history"] if fault["history"] is not None else history
            if record_to is not None:
                record_to.record_fault(fault["what"], fault["target"], phase="end", fault=fault["id"],
                                       started=fault["started"], seconds=now - fault["started"])
        if not self._open and history is not None:
            history.record_fault("heal", "network", phase="end")
        self._open.clear()
        return answer["rules"]

    def open_faults(self) -> list[dict]:
        """The faults started from this process and not yet ended: id, what, target, started."""
        return [{key: fault[key] for key in ("id", "what", "target", "started")} for fault in self._open]

    def end(self, fault_id: int, history=None) -> dict:
        """End one fault started from this process: its links lose what it set (a cut, a
        delay, a loss), and its end is recorded like heal() records it. A link that another
        fault also cut or slowed in the same way is restored too: heal() is the clean slate."""
        fault = next((fault for fault in self._open if fault["id"] == fault_id), None)
        if fault is None:
            raise NetworkFaultError(f"no open network fault with id {fault_id!r}",
                                    f"open ones: {self.open_faults() or 'none'}")
        cleared = {key: 0 for key in fault["rule"]}
        answer = self.request(op="set", links={f"{a}>{b}": cleared for a, b in fault["pairs"]})
        self._open.remove(fault)
        record_to = fault["history"] if fault["history"] is not None else history
        if record_to is not None:
            now = time.time()
            record_to.record_fault(fault["what"], fault["target"], phase="end", fault=fault["id"], undone=True,
                                   started=fault["started"], seconds=now - fault["started"])
        return answer["rules"]

    def status(self) -> dict:
        """{"rules": {"a>b": {"cut": True, ...}}, "ends": [...], "connections": n, "links": n}."""
        answer = self.request(op="status")
        ends = self.nodes + sorted({r["src"] for r in answer["routes"]} - set(self.nodes) - {"*"})
        return {"rules": answer["rules"], "ends": ends, "connections": answer["connections"],
                "links": len(answer["routes"])}


def _links_name(links) -> str:
    if links is None:
        return "every link"
    return ", ".join(link if isinstance(link, str) else "<->".join(link) for link in links)
