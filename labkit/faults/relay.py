"""A TCP relay on 127.0.0.1 between one client and one server that can be cut and restored.

``cut()`` keeps every connection open but drops the bytes both ways, as a network
partition does: neither side is told, each notices only by its own timeouts. A connection
that lost bytes never carries more: after ``restore()`` the relay closes it, since a TCP
stream with a hole in it cannot go on (had the relay passed later bytes, a client would read
the answer to its request 8 where it waits for 7's: kazoo then dies with "xids do not match").

What can fail: a target that is not on 127.0.0.1 (``ValueError``: the lab binds loopback
only); a relay whose listening port cannot be opened (``OSError``).
"""
from __future__ import annotations

import selectors
import socket
import threading
from typing import Any

from labkit.servers.ports import HOST


class TcpLink:
    """A relay from ``address`` (a free port on 127.0.0.1) to ``target`` ("127.0.0.1:PORT").

    ``cut()`` keeps every connection open but drops the bytes both ways, like a cable
    pulled out: neither side is told, each notices only by its own timeouts. ``restore()``
    lets bytes through again on new connections and closes those that lost bytes during the
    cut (their clients reconnect). ``close()`` ends the relay and its connections.
    """

    def __init__(self, target: str):
        host, port = target.rsplit(":", 1)
        if host != HOST:
            raise ValueError(f"TcpLink relays to {HOST} only (got {target!r}); the lab binds loopback")
        self.target = (host, int(port))
        self._listener = socket.create_server((HOST, 0))
        self.address = f"{HOST}:{self._listener.getsockname()[1]}"
        self._is_cut = threading.Event()
        self._broken: dict[socket.socket, socket.socket] = {}   # lost bytes in a cut: closed on restore
        self._closed = threading.Event()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._relay, name=f"tcp-link-{self.address}", daemon=True)
        self._thread.start()

    @property
    def is_cut(self) -> bool:
        return self._is_cut.is_set()

    def cut(self) -> None:
        self._is_cut.set()

    def restore(self) -> None:
        self._is_cut.clear()

    def _relay(self) -> None:
        # one thread and a selector: each socket's data goes to its peer, or nowhere when cut
        while not self._closed.is_set():
            if self._broken and not self.is_cut:
                for source, peer in list(self._broken.items()):
                    self._drop(source, peer)
                self._broken.clear()
            for key, _ in self._selector.select(timeout=0.1):
                if key.data is None:
                    self._accept()
                    continue
                source, peer = key.fileobj, key.data
                try:
                    data = source.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    self._drop(source, peer)
                elif self.is_cut or source in self._broken:
                    self._broken[source] = peer
                else:
                    try:
                        peer.sendall(data)
                    except OSError:
                        self._drop(source, peer)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()
        self._selector.close()

    def _accept(self) -> None:
        client, _ = self._listener.accept()
        try:
            server = socket.create_connection(self.target, timeout=2.0)
        except OSError:
            client.close()  # the server is down: the client sees a refused connection
            return
        server.settimeout(None)
        self._selector.register(client, selectors.EVENT_READ, server)
        self._selector.register(server, selectors.EVENT_READ, client)

    def _drop(self, *sockets: socket.socket) -> None:
        for sock in sockets:
            try:
                self._selector.unregister(sock)
            except (KeyError, ValueError):
                pass
            sock.close()

    def close(self) -> None:
        self._closed.set()
        self._thread.join(5)

    def __enter__(self) -> "TcpLink":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<TcpLink {self.address} -> {self.target[0]}:{self.target[1]}{' CUT' if self.is_cut else ''}>"
