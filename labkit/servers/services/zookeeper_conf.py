"""How far the leader's view of a session can trail the answers of the client's own server:
``server_lag``, learned from the ensemble itself, never assumed.

A follower passes its clients' pings on to the leader only when the leader pings it (every
half tick), and cut from the leader it keeps answering by itself for syncLimit x tickTime.
So an answer of a follower can be up to

    server_lag = syncLimit x tickTime + tickTime / 2

older than the leader's news of the session, and ``HolderDeadline`` subtracts that from its
deadline (``locks/zookeeper_deadline.py``). A standalone server expires sessions itself: lag 0. Those two settings are the
ensemble's own (zoo.cfg), and differ between ensembles: ZooKeeper's sample config (tickTime
2000, syncLimit 5) gives 11 s, this lab's (200 ms, 5) 1.1 s. ``learn_server_lag`` asks every
server the client may connect to (its connection string's hosts) with the ``conf``
four-letter word and takes the largest lag (``ZooKeeperService.server_lag`` asks the lab's
members the same way). What can go wrong, and is refused with
``ServerLagUnknown`` (never guessed): no server that answers, one whose
``4lw.commands.whitelist`` leaves ``conf`` out, a reply without tickTime. A server that is
down or not serving when first asked is asked again once the client connects to it
(``LearnedLag``): until then its answers would prove nothing, so the holder gives up.

(The AdminServer's ``configuration`` command says the same over HTTP, on a port of its own
that the connection string does not name; Debian's ZooKeeper 3.8 package cannot start it,
"Unable to load jetty". So it is not asked here: read it yourself and pass ``server_lag=``.)
"""
from __future__ import annotations

import math
import socket
import threading
import time

from kazoo.client import KazooClient

from labkit.errors import LabError, LockError

FORMULA = "syncLimit x tickTime + tickTime / 2"


class ServerLagUnknown(LabError, ValueError):
    """The ensemble would not say its tickTime and syncLimit, so the lock cannot know how
    late a follower's answer may be: pass ``server_lag=`` (seconds) yourself."""


class ServerUnreachable(ServerLagUnknown, LockError):
    """One server could not be asked now (down, cut off, or not serving, as during an election).
    Also a ``LockError``: a lock asked for on that server cannot be taken now, as when its
    create cannot reach a serving server (a client stranded with an isolated old leader)."""


def parse_conf(text: str) -> dict[str, str]:
    """``conf`` reply → {"tickTime": "200", "syncLimit": "5", ...} (its key=value lines)."""
    settings = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and not key.startswith("server."):
            settings[key.strip()] = value.strip()
    return settings


def lag_of(settings: dict[str, str], where: str) -> float:
    """Seconds of lag a server with these ``conf`` settings allows (0 for a standalone one,
    which has no syncLimit). ServerLagUnknown if tickTime or syncLimit is not a number."""
    try:
        tick = int(settings["tickTime"]) / 1000.0
        if "syncLimit" not in settings and "peerType" not in settings:
            return 0.0                            # standalone: it expires the sessions it answers for
        sync_limit = int(settings["syncLimit"])
    except (KeyError, ValueError):
        raise ServerLagUnknown(
            f"{where} answered conf without a tickTime and syncLimit that are whole numbers "
            f"(it said {dict(list(settings.items())[:4])!r}...)",
            hint=f"pass server_lag= yourself, in seconds: {FORMULA} from that ensemble's zoo.cfg") from None
    if tick <= 0 or sync_limit < 0:
        raise ServerLagUnknown(f"{where} says tickTime={settings['tickTime']} and syncLimit={sync_limit}",
                               hint=f"pass server_lag= yourself, in seconds: {FORMULA}")
    return sync_limit * tick + tick / 2


def ask_conf(host: str, port: int, timeout: float = 2.0) -> dict[str, str]:
    """The ``conf`` settings of the server at host:port. ServerLagUnknown if it cannot be
    reached or will not say (its 4lw.commands.whitelist leaves conf out)."""
    where = f"the ZooKeeper server {host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.sendall(b"conf")
            chunks = []
            while chunk := conn.recv(65536):
                chunks.append(chunk)
    except OSError as error:
        raise ServerUnreachable(
            f"could not ask {where} for its tickTime and syncLimit ({error}): the lock must know them "
            "for every server the client may connect to",
            hint=f"start the client when every server of its connection string answers, or pass server_lag= "
                 f"yourself, in seconds: {FORMULA} from the ensemble's zoo.cfg") from None
    text = b"".join(chunks).decode(errors="replace")
    if "not currently serving" in text:
        raise ServerUnreachable(f"{where} is not serving now (it answered conf with {text.strip()!r})",
                                hint=f"wait until the ensemble has a leader, or pass server_lag= yourself: {FORMULA}")
    if "not in the whitelist" in text or "not executed" in text:
        raise ServerLagUnknown(
            f"{where} refused the conf four-letter word ({text.strip()!r}), so the lock cannot learn how late "
            "its followers may answer",
            hint=f"add conf to 4lw.commands.whitelist in zoo.cfg, or pass server_lag= yourself, in seconds: "
                 f"{FORMULA} (ZooKeeper's sample config: 5 x 2 s + 1 s = 11 s)")
    return parse_conf(text)


def lag_of_servers(hosts: list[tuple[str, int]], timeout: float = 2.0) -> float:
    """The largest lag over the servers ``hosts`` [(host, port), ...] that answer (``LearnedLag``)."""
    return LearnedLag(hosts, timeout).lag()


class LearnedLag:
    """The lags of the servers of one client's connection string, each asked once.

    ``lag(connected)``: the largest known. The first call asks every host; one that cannot be
    asked now (``ServerUnreachable``) is skipped if another answered, and asked when the
    client is connected to it (``connected``, a (host, port)), at most once a second; until it
    answers, that raises ServerUnreachable: answers from a server whose lag is unknown prove
    nothing. A refusal or a reply without the numbers raises ServerLagUnknown at once."""

    def __init__(self, hosts, timeout: float = 2.0):
        self.hosts = [tuple(host) for host in hosts]
        self.timeout = timeout
        self.lags: dict[tuple, float] = {}
        self._asked_at: dict[tuple, float] = {}
        self._asking = threading.Lock()

    def lag(self, connected: tuple | None = None) -> float:
        with self._asking:
            return self._lag(connected)

    def _lag(self, connected: tuple | None) -> float:
        if not self.lags:
            unreachable = [error for error in map(self._ask, self.hosts) if error is not None]
            if not self.lags:
                raise unreachable[0] if unreachable else ServerLagUnknown(
                    "no ZooKeeper server to ask", hint="pass server_lag= yourself, in seconds")
        if connected is not None and tuple(connected) not in self.lags:
            connected = tuple(connected)
            error = None
            if time.monotonic() - self._asked_at.get(connected, -math.inf) >= 1.0:
                error = self._ask(connected)
            if connected not in self.lags:
                raise error or ServerUnreachable(f"the lag of the ZooKeeper server {connected[0]}:{connected[1]}, "
                                                 "which the client is connected to, is not known yet")
        return max(self.lags.values())

    def _ask(self, host: tuple) -> ServerUnreachable | None:
        self._asked_at[host] = time.monotonic()
        try:
            self.lags[host] = lag_of(ask_conf(host[0], host[1], self.timeout), f"the ZooKeeper server {host[0]}:{host[1]}")
        except ServerUnreachable as error:
            return error
        return None


def learn_server_lag(client: KazooClient, timeout: float = 2.0) -> float:
    """``server_lag`` of the ensemble ``client`` connects to: asked of every host of its
    connection string (``client.hosts``), the largest of those that answer (``LearnedLag``)."""
    return lag_of_servers(client.hosts, timeout)
