"""The lab's network: one process that forwards every proxied link and can cut, slow or
stall it. Started by ``labkit.up(network=True)``; reaped with the lab like its servers.

What a fault means here, on TCP over loopback (no root, no netem):
- a **cut** of a directed link a->b stalls the bytes that flow from a to b on every
  connection between them (whoever dialed): the proxy stops reading them, so the kernel's
  buffers fill and the sender blocks, as when packets are lost and retransmitted. A new
  connection between a and b while either direction is cut is accepted and reset at once
  (a real one-way cut also breaks the handshake; a reset is quicker than a connect timeout).
  On heal the stalled bytes flow again, unless an end closed its socket meanwhile.
- a **delay** holds each chunk for ``delay`` ms plus a uniform jitter in [-jitter, +jitter],
  never reordering a connection's bytes.
- a **loss** fraction p: TCP never loses bytes, it retransmits them. So each chunk, with
  probability p, is held for one more retransmission timeout (200 ms, Linux's minimum),
  doubled each further time it is "lost" again. Loss shows up as stalls, not as errors.

Each link is a listening port on 127.0.0.1 named (src, dst). An etcd member's peer port has
one proxy for every sender: the sender is read from the ``X-Server-From`` header that
rafthttp puts on each request; a connection without it (a /version probe) counts as cut
only when every other member is cut from its target. ZooKeeper peers announce their own
election address when they dial; the proxy rewrites it to the proxy of the reverse link, or
the higher id would dial back around it. With Sentinel, each Redis server has one proxy
shared by the sentinels and the other Redis server (all must name a primary by the same
address, or Sentinel "fixes" the replica back and forth): a sentinel names itself in its
first command (``CLIENT SETNAME sentinel-<first 8 of its myid>-cmd``, labkit fixes the
myid); any other connection is the other server. Sentinels reach each other directly.

Control: JSON lines on a loopback port written to ``proxy.port`` in the run folder:
``{"op": "route", "src", "dst", "target", "kind"[, "port"]}`` -> ``{"port"}``; ``{"op": "set",
"links": {"a>b": {"cut": true, "delay": 20, ...}}}`` merges rules; ``{"op": "heal"}``;
``{"op": "status"}``. The process exits by itself when the run folder disappears.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import re
import socket
import struct
import sys
import time
from pathlib import Path

_HOST = "127.0.0.1"  # labkit.servers.ports.HOST: a copy, as this script imports nothing of labkit
RETRANSMIT = 0.2
CHUNK = 65536


class ProxyRules:
    """What the proxy process holds: each directed link's rule (cut, delay, jitter, loss),
    the routes it listens on, and an event that wakes stalled connections when a rule
    changes. (The lab's side of the control channel is ``links.Network``.)"""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.rules: dict[str, dict] = {}
        self.routes: dict[tuple, dict] = {}   # (src, dst, kind) -> route
        self.connections = 0
        self.changed = asyncio.Event()        # set (and replaced) whenever the rules change

    # -- rules ------------------------------------------------------------------
    def rule(self, src: str | None, dst: str | None, peers=()) -> dict:
        if src is None:  # an unattributed connection: cut only if dst is cut from everyone
            return {"cut": bool(peers) and all(self.rules.get(f"{p}>{dst}", {}).get("cut") for p in peers)}
        if dst is None:
            return {"cut": bool(peers) and all(self.rules.get(f"{src}>{p}", {}).get("cut") for p in peers)}
        return self.rules.get(f"{src}>{dst}", {})

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    async def wait_open(self, src: str | None, dst: str, peers) -> None:
        while self.rule(src, dst, peers).get("cut"):
            await self.changed.wait()

    def hold_time(self, rule: dict) -> float:
        seconds = max(0.0, rule.get("delay", 0) + random.uniform(-1, 1) * rule.get("jitter", 0)) / 1000
        loss, timeout = rule.get("loss", 0), RETRANSMIT
        while loss and random.random() < loss and timeout < 60:
            seconds += timeout
            timeout *= 2
        return seconds

    # -- links ------------------------------------------------------------------
    async def route(self, src: str, dst: str, target: int, kind: str = "tcp", peers=(), port: int = 0) -> int:
        key = (src, dst, kind)
        if key not in self.routes:
            route = {"src": src, "dst": dst, "target": target, "kind": kind, "peers": list(peers)}
            # port: chosen by the lab before this process ran (the servers started meanwhile)
            server = await asyncio.start_server(lambda r, w: self.accept(route, r, w), _HOST, port)
            route["port"] = server.sockets[0].getsockname()[1]
            route["server"] = server
            self.routes[key] = route
        return self.routes[key]["port"]

    async def accept(self, route: dict, reader, writer) -> None:
        src, dst = route["src"], route["dst"]
        head = b""
        try:
            if route["kind"] == "etcd-peer":
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
                src = _header(head, b"x-server-from")
                src = route["members"].get(src) if src else None
            elif route["kind"] == "zk-election":
                head = await self.rewrite_election_address(route, reader)
            elif route["kind"] == "redis-shared":
                head = await asyncio.wait_for(_first_command(reader), 5)
                if head.split(b"\r\n")[2:3] == [b"AUTH"]:
                    # a private lab's sentinel logs in first and names itself next, in the same
                    # write (hiredis queues both): read on to the name, briefly
                    head += await asyncio.wait_for(_first_command(reader), 1)
                found = re.search(rb"sentinel-([0-9a-f]{8})-", head)
                src = route["members"].get(found.group(1).decode() if found else "")
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            pass
        peers = [p for p in route["peers"] if p != dst]
        if src is None and route["kind"] != "etcd-peer":
            src = route["src"]
        if self.rule(src, dst, peers).get("cut") or (src and self.rule(dst, src).get("cut")):
            _reset(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(_HOST, route["target"])
        except OSError:
            _reset(writer)
            return
        self.connections += 1
        try:
            pumps = [asyncio.ensure_future(self.pump(reader, up_writer, src, dst, peers, head)),
                     asyncio.ensure_future(self.pump(up_reader, writer, dst, src, peers))]
            await asyncio.wait(pumps, return_when=asyncio.FIRST_EXCEPTION)
            for pump in pumps:   # a reset on one side ends both directions
                pump.cancel()
        finally:
            self.connections -= 1
            for end in (writer, up_writer):
                end.close()

    async def rewrite_election_address(self, route: dict, reader) -> bytes:
        """ZooKeeper's first election message: version, sid, then the sender's own election
        address, which the receiver dials back when the sender's id is lower. Point it at
        the proxy of the reverse link, so that the connection back is proxied too."""
        version, sid = struct.unpack(">qq", await reader.readexactly(16))
        if version not in (-65536, -65535):
            return struct.pack(">qq", version, sid)
        length = struct.unpack(">i", await reader.readexactly(4))[0]
        address = await reader.readexactly(length)
        back = self.routes.get((route["dst"], route["src"], "zk-election"))
        if back is not None:
            address = f"{_HOST}:{back['port']}".encode()
        return struct.pack(">qqi", version, sid, len(address)) + address

    async def pump(self, reader, writer, src, dst, peers, head: bytes = b"") -> None:
        """Carry one direction: read (unless cut), hold for the delay, write (unless cut)."""
        queue: asyncio.Queue = asyncio.Queue()
        held = [0]   # chunks queued and not yet written

        async def read():
            if head:
                held[0] += 1
                queue.put_nowait((time.monotonic() + self.hold_time(self.rule(src, dst, peers)), head))
            while True:
                await self.wait_open(src, dst, peers)
                try:
                    data = await reader.read(CHUNK)
                except OSError:
                    data = None
                rule = self.rule(src, dst, peers)
                hold = self.hold_time(rule)
                if data and not hold and not held[0] and not rule.get("cut"):
                    # the fast path of a healthy link: nothing queued, nothing to hold
                    writer.write(data)
                    if writer.transport.get_write_buffer_size() > CHUNK:
                        await writer.drain()
                    continue
                held[0] += 1
                queue.put_nowait((time.monotonic() + hold, data))
                if not data:
                    return

        async def write():
            last = 0.0
            while True:
                due, data = await queue.get()
                due = max(due, last)   # a shorter jitter never overtakes earlier bytes
                last = due
                if due > time.monotonic():
                    await asyncio.sleep(due - time.monotonic())
                await self.wait_open(src, dst, peers)
                if data is None:
                    raise ConnectionResetError(f"{src} -> {dst}: the sending side was reset")
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()
                held[0] -= 1

        reading = asyncio.ensure_future(read())
        try:
            await write()
        finally:
            reading.cancel()

    # -- control ----------------------------------------------------------------
    async def control(self, reader, writer) -> None:
        try:
            while line := await reader.readline():
                try:
                    reply = await self.handle(json.loads(line))
                except Exception as exc:  # a bad request must never stop the network
                    reply = {"error": f"{type(exc).__name__}: {exc}"}
                writer.write(json.dumps(reply).encode() + b"\n")
                await writer.drain()
        finally:
            writer.close()

    async def handle(self, request: dict) -> dict:
        op = request.get("op")
        if op == "route":
            port = await self.route(request["src"], request["dst"], request["target"],
                                    request.get("kind", "tcp"), request.get("peers", ()), request.get("port", 0))
            self.routes[(request["src"], request["dst"], request.get("kind", "tcp"))]["members"] = \
                request.get("members", {})
            return {"port": port}
        if op == "set":
            for link, rule in request["links"].items():
                merged = {**self.rules.get(link, {}), **rule}
                self.rules[link] = {k: v for k, v in merged.items() if v}
                if not self.rules[link]:
                    del self.rules[link]
        elif op == "heal":
            self.rules.clear()
        elif op != "status":
            return {"error": f"unknown op {op!r}"}
        self.notify()
        return {"rules": self.rules, "connections": self.connections,
                "routes": [{k: v for k, v in r.items() if k not in ("server", "members")}
                           for r in self.routes.values()]}

    async def watch_run_dir(self) -> None:
        while self.run_dir.is_dir():
            await asyncio.sleep(1.0)


def _header(head: bytes, name: bytes) -> str | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip().decode()
    return None


async def _first_command(reader) -> bytes:
    """The bytes up to the end of the first RESP command (``*n`` then n bulk strings):
    what a client sends before it waits for a reply."""
    head = await reader.readuntil(b"\r\n")
    words = int(head[1:-2]) if head.startswith(b"*") else 0
    for _ in range(2 * words):
        head += await reader.readuntil(b"\r\n")
    return head


def _reset(writer) -> None:
    """Close with RST rather than FIN: the peer sees 'connection reset', as from a dead link."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()


async def serve(run_dir: Path) -> None:
    network = ProxyRules(run_dir)
    control = await asyncio.start_server(network.control, _HOST, 0)
    port_file = run_dir / "proxy.port"
    port_file.with_suffix(".tmp").write_text(str(control.sockets[0].getsockname()[1]))
    os.replace(port_file.with_suffix(".tmp"), port_file)
    await network.watch_run_dir()   # the lab is gone: so is its network


if __name__ == "__main__":
    asyncio.run(serve(Path(sys.argv[1])))
