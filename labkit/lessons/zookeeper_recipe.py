"""Experiments of the ZooKeeper lesson (notebook 02) that take more than a few lines.

* ``watchers_of``: which sessions watch a path, as the servers list them (``wchp``); with
  ``node.watch_count()`` (``mntr``) an experiment waits for a watch to be really set
  instead of sleeping a guess.
* ``count_zookeeper_wakeups``: one holder and N waiters hand the lock on, one release at a time, each
  release only once the server holds every waiter's watch; the History it returns gives
  ``wakeups_per_release()`` exactly, whatever the machine's speed.
* ``packets_received`` / ``kill_just_after_heartbeat``: what ``cons`` says a session sent, and
  SIGKILL of a lock client process the moment the server has heard from it, so that the whole
  session timeout must run before the server gives up.
* ``NaiveLock`` and ``LosesFirstCreateReply``: a hand-rolled recipe as blogs write it, and
  the fault (a create whose reply is lost) that breaks it.
* ``sequence_diagram``: arrows between lanes, drawn from what a run really did.

What can fail: ``TimeoutError`` naming what was awaited (a waiter that does not queue,
acquire or watch again before the deadline, a session the servers do not know);
kazoo's errors when ZooKeeper does not answer; a waiter's own error is re-raised.
"""
from __future__ import annotations

import re
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from labkit.harness.handoff import hand_off, server_watches
from labkit.locks.registry import lock_factory, recipe_named
from labkit.record.plots import new_axes
from labkit.progress import shows_progress
from labkit.record.history import History
from labkit.servers.secret import login_for
from labkit.timing import wait_until
from labkit.vocabulary import ERROR_COLOUR, GUIDE_COLOUR, STATE_COLOURS

if TYPE_CHECKING:
    from labkit.clients import LockClient
    from labkit.servers.services.zookeeper import ZooKeeperService

# what a waiter watches -> the registered Recipe (labkit.locks.registry)
RECIPE_BY_WATCH = {watch: recipe_named(name) for watch, name in
                   (("predecessor", "zookeeper"), ("parent", "zookeeper-parent"), ("kazoo", "kazoo"))}
SESSION_TIMEOUT = 10.0  # seconds: long, so that a busy machine never expires a contender mid-count


def watchers_of(zookeeper: ZooKeeperService, path: str) -> set[int]:
    """Session ids with a data watch (exists/get) on ``path``, over every running server
    (``wchp``; a client's watches live on the server it is connected to)."""
    sessions: set[int] = set()
    for node in zookeeper.running():
        current = None
        for line in node.four_letter("wchp").splitlines():
            if line.startswith("\t") and current == path:
                sessions.add(int(line.strip(), 16))
            elif line and not line.startswith("\t"):
                current = line.strip()
    return sessions


def packets_received(zookeeper: ZooKeeperService, session_id: int) -> int | None:
    """How many packets the server the session is connected to has received from it
    (``cons``: recved), or None if no server has a connection for that session."""
    wanted = f"sid={session_id:#x},"
    for node in zookeeper.running():
        for line in node.four_letter("cons").splitlines():
            if wanted in line:
                return int(re.search(r"recved=(\d+)", line).group(1))
    return None


def kill_just_after_heartbeat(client: LockClient, zookeeper: ZooKeeperService, timeout: float = 10.0) -> float:
    """Wait until the server receives a packet (a heartbeat) from lock client process
    ``client`` (``labkit.clients.LockClient``), then SIGKILL it; return ``time.time()`` of
    the kill. The server has just heard from it, so it waits a full session timeout.
    Raises TimeoutError if no server sees the session or no heartbeat comes in time."""
    session_id = client.session["session_id"]
    before = [packets_received(zookeeper, session_id)]

    def packet_arrived() -> bool:
        now = packets_received(zookeeper, session_id)
        if before[0] is None:                     # no server saw the session yet: count from the first
            before[0] = now
            return False
        return now is not None and now > before[0]

    wait_until(packet_arrived, f"a heartbeat of {client.name}", timeout, 0.002,
               error=TimeoutError(f"no server received a heartbeat of {client.name}'s session {session_id:#x} "
                                  f"within {timeout:.0f} s: is the client process alive and connected?"))
    client.kill()                                 # a packet just arrived: kill before the next one
    return time.time()


@shows_progress("counting the waiters each release wakes")
def count_zookeeper_wakeups(zookeeper: ZooKeeperService, path: str, waiters: int, recipe: str = "predecessor",
                  timeout: float = 30.0) -> History:
    """``contender-0`` takes the lock on ``path``, ``waiters`` more queue behind it (one
    thread and one session each), then the lock is handed on ``waiters`` times
    (``labkit.harness.handoff``).

    Every contender talks to the same server, whose ``mntr`` then counts every watch of
    the experiment: a holder releases only once that server holds one watch per waiter
    still waiting, so every release meets every armed watch. ``recipe`` is "predecessor"
    or "parent" (ZooKeeperLock) or "kazoo" (kazoo's own Lock). Returns the History
    (``wakeups_per_release()``). Raises ValueError for a bad argument, TimeoutError if a
    step does not happen within ``timeout`` seconds; every session is closed on the way out.
    """
    if waiters < 1:
        raise ValueError(f"waiters must be at least 1, got {waiters}")
    if recipe not in RECIPE_BY_WATCH:
        raise ValueError(f"recipe {recipe!r} is not one of {tuple(RECIPE_BY_WATCH)} (what a waiter watches)")
    server = zookeeper.first_running()
    make = lock_factory(RECIPE_BY_WATCH[recipe], {"zookeeper": server.endpoint}, path, session_timeout=SESSION_TIMEOUT)
    return hand_off(make, waiters, server_watches(server), timeout=timeout).history


class LosesFirstCreateReply(KazooClient):
    """A KazooClient whose first sequential create reaches the server, which creates the
    node, but whose reply never arrives: ConnectionLoss is raised, as when the connection
    drops at that moment. ``lost_replies`` lists the nodes created that way."""

    def __init__(self, *args: Any, **kwargs: Any):
        hosts = kwargs.get("hosts", args[0] if args else "")
        kwargs = {**login_for(hosts, "zookeeper"), **kwargs}  # this user's private lab at those hosts
        super().__init__(*args, **kwargs)
        self.lost_replies: list[str] = []

    def create(self, path: str, *args: Any, **kwargs: Any) -> Any:
        created = super().create(path, *args, **kwargs)
        if kwargs.get("sequence") and not self.lost_replies:
            self.lost_replies.append(created if isinstance(created, str) else created[0])
            raise ConnectionLoss(f"the reply to create {path!r} was lost (injected by LosesFirstCreateReply)")
        return created


class NaiveLock:
    """A ZooKeeper lock as a blog post writes it: ephemeral sequential ``lock-`` nodes,
    the lowest holds, each waiter watches its predecessor and re-checks. What it gets
    wrong, kept on purpose: a create that fails with ConnectionLoss is simply tried again,
    though the server may have made the node; that orphan then waits in the queue, ahead
    of its own creator, until the session ends. ``acquire`` returns False on timeout,
    after deleting its own node (not the orphan: it does not know the orphan is its own)."""

    def __init__(self, client: KazooClient, path: str):
        self.client, self.path, self.node = client, path.rstrip("/"), None

    def acquire(self, timeout: float) -> bool:
        for _ in range(3):
            try:
                created = self.client.create(f"{self.path}/lock-", ephemeral=True, sequence=True, makepath=True)
                break
            except ConnectionLoss:
                continue                          # "it failed, try again": but did it fail?
        else:
            raise ConnectionLoss(f"could not create a node under {self.path} in 3 tries")
        self.node = created.rsplit("/", 1)[1]
        deadline = time.monotonic() + timeout
        while True:                               # the recipe as a learner reads it: a watch wakes it, not a poll
            children = sorted(self.client.get_children(self.path))
            if children[0] == self.node:
                return True
            predecessor = children[children.index(self.node) - 1]
            gone = threading.Event()
            if self.client.exists(f"{self.path}/{predecessor}", watch=lambda event: gone.set()) is None:
                continue                          # it went meanwhile: look again
            if not gone.wait(max(0.0, deadline - time.monotonic())):
                self.release()                    # leave the queue (the orphan, unknown to us, stays)
                return False

    def release(self) -> None:
        self.client.delete(f"{self.path}/{self.node}")
        self.node = None


def sequence_diagram(steps: Iterable[tuple[float, str, str, str]], lanes: list[str], ax: Axes | None = None,
                     title: str = "What happened, in order", highlight: Callable[[str], bool] = lambda _: False) -> Axes:
    """One arrow per step ``(time, sender, receiver, message)``, top to bottom in time
    order, between vertical ``lanes``; ``highlight(message)`` True draws it red (a fault).
    Returns the Axes. Raises ValueError for no steps or a lane not in ``lanes``."""
    steps = sorted(steps, key=lambda step: step[0])
    if not steps:
        raise ValueError("no steps to draw")
    unknown = {lane for _, sender, receiver, _ in steps for lane in (sender, receiver)} - set(lanes)
    if unknown:
        raise ValueError(f"steps name lanes {sorted(unknown)} that are not in lanes={lanes}")
    ax = new_axes(ax, width=2.6 * len(lanes) + 3, height=0.5 * len(steps) + 1.6)
    x = {lane: index for index, lane in enumerate(lanes)}
    for lane, position in x.items():
        ax.plot([position, position], [-0.5, len(steps) - 0.5], color=GUIDE_COLOUR, linewidth=1, zorder=0)
        ax.text(position, -0.7, lane, ha="center", va="bottom", fontsize=11, fontweight="bold")
    start = steps[0][0]
    for row, (moment, sender, receiver, message) in enumerate(steps):
        color = ERROR_COLOUR if highlight(message) else STATE_COLOURS["holding"]
        if sender == receiver:                    # something a client does by itself
            ax.plot([x[sender]], [row], marker="o", color=color)
            ax.text(x[sender] + 0.06, row - 0.12, message, fontsize=8.5, color=color)
        else:
            ax.annotate("", xy=(x[receiver], row), xytext=(x[sender], row),
                        arrowprops={"arrowstyle": "->", "color": color})
            ax.text((x[sender] + x[receiver]) / 2, row - 0.12, message, ha="center", fontsize=8.5)
        ax.text(-0.3, row, f"{1000 * (moment - start):8.1f} ms", ha="right", va="center", fontsize=8, family="monospace")
    ax.set_ylim(len(steps) - 0.4, -1.3)
    ax.set_xlim(-0.9, len(lanes) - 0.4)
    ax.set_xticks([])
    ax.set_yticks([])
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    ax.set_ylabel("time since the first step (ms), downwards")
    ax.set_title(title)
    ax.legend(handles=[Line2D([], [], color=STATE_COLOURS["holding"], label="request, reply or notification"),
                       Line2D([], [], color=ERROR_COLOUR, label="a fault or a session ending")],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    return ax
