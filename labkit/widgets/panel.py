"""LockPanel: a live lock you can break with buttons, for a learner or a projector.

``LockPanel(lab, recipe="zookeeper", clients=3)`` starts real lock client processes
(``labkit.clients``) that take turns holding one lock and writing to a fenced store.
``panel.widget`` shows who holds the lock and why it last changed hands, each client and
each server with buttons that break them for real, graphs and a log in plain words.
On a lab started with ``network=True`` it also has network buttons: "partition the
leader", "cut the holder" (its clients then reach the servers through links of their
own), "slow link" (50 ms each way on every link; click again to stop) and "heal"; on
any other lab a line says how to get them.

Every button runs its fault in a worker thread, so a slow one (restarting a node waits
until it answers) never freezes the notebook; ``wait_for_actions()`` waits for them and
``errors`` lists what failed. Three timer threads refresh the view in place: the
clients' states and the words twice a second, the server roles once a second, the graphs
every 2 s if the history grew. ``close()``, leaving a ``with`` block, or the kernel's
exit (restart) stops the timers and every client process.

What can fail: ``ClientError`` if the client processes cannot start (the message names
the server they could not reach); ``ValueError`` for an unknown recipe. Without a
reachable Redis in the lab there is no fenced store (the clients only lock; ``errors``
says why). "cut the holder" with nobody holding, or "partition the leader" while the
ensemble has no leader, fails at run time and says so under the log. A fault its target cannot take (a Redis lock has no session to expire) has
a disabled button; a fault that fails at run time is shown in red under the log.
A panel whose lab was stopped (``lab.down()``) says so under the log, and a click then
says so too instead of failing; a later ``labkit.up()`` that replaces the lab (a re-run
first cell) closes the panel and its clients with it.
"""
from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable

import redis

from labkit.clients import spawn_clients
from labkit.faults import kill_leader
from labkit.locks.registry import Recipe, check_holders, recipe_named
from labkit.progress import showing_progress
from labkit.record.fencing import FencedStore
from labkit.record.history import History
from labkit.timing import wait_for_value
from labkit.widgets import figure, narration
from labkit.widgets.driver import ClientDriver
from labkit.widgets.lifetime import close_all_panels, forget_panel, register, start_timer
from labkit.widgets.view import PanelView

if TYPE_CHECKING:
    from labkit.servers.lab import Lab
    from labkit.servers.services.node import Node

SLOW_LINK_MS = 50.0   # the "slow link" button's delay, each way: a cross-datacenter link


class LockPanel:
    """See the module docstring. ``widget`` to display; ``button(target, action)`` finds a
    button ("client-2", "expire session"; "zk1", "kill"; "zookeeper", "kill the leader").

    ``hold``: seconds each holder keeps the lock; ``pause_seconds``: length of a "pause"
    (default: the session timeout + 2 s); ``session_timeout`` / ``ttl``: the clients'
    ZooKeeper session timeout / etcd lease and Redis key TTL; ``holders``: the slots of a
    semaphore recipe (its store then runs unfenced: N holders carry N tokens). A new panel
    closes the panels this kernel already has, unless ``close_others=False``."""

    def __init__(self, lab: Lab, recipe: Recipe | str = "zookeeper", clients: int = 3, name: str | None = None,
                 hold: float = 8.0, pause_seconds: float | None = None, session_timeout: float = 4.0,
                 ttl: float = 5.0, refresh: float = 0.5, redraw_every: float = 2.0, window: float = 60.0,
                 close_others: bool = True, holders: int = 1):
        recipe = recipe_named(recipe)   # UnknownRecipe for a name not registered
        check_holders(recipe, holders)
        if close_others:
            # re-running the cell that made a panel must not leave the old one's processes running
            close_all_panels()
        self.lab, self.recipe = lab, recipe
        self.name = name or f"/locks/panel-{uuid.uuid4().hex[:6]}"
        self.refresh, self.redraw_every, self.window = refresh, redraw_every, window
        self.history = History()
        self.origin = time.time()
        self.errors: list[str] = []
        self._node_roles: dict[str, str] = {}
        self.closed = False
        self._stopping = threading.Event()
        self._actions = ThreadPoolExecutor(max_workers=1, thread_name_prefix="panel-action")
        self._pending: list[Future] = []
        self.store = None
        if getattr(lab, "redis", None) is not None:
            # a Redis lock (or Redlock) gives no token, so a fenced store would refuse all its
            # writes: its store accepts everything, and the panel shows what that lets through
            self.store = FencedStore(lab.redis.client(socket_timeout=2.0), f"panel-store:{self.name}",
                                     fenced=recipe.gives_tokens and recipe.primitive == "mutex")
            try:
                self.store.reset()
            except redis.RedisError as error:  # the lock still works; only the store is missing
                self.store = None
                self.errors.append(f"no fenced store: the lab's Redis did not answer ({error}); restart it to get one")
        self.session_timeout, self.ttl = session_timeout, ttl
        self._slow_fault: int | None = None   # the id of the "slow link" delay while it is on
        # with network faults each client reaches the servers through links of its own, so
        # that "cut the holder" cuts that one process and no other
        self.clients = spawn_clients(lab, recipe, n=clients, name=self.name, history=self.history,
                                     store=self.store, session_timeout=session_timeout, ttl=ttl,
                                     proxied=self.has_network, keep_previous=True,  # close_others decides
                                     holders=holders)
        self.clients.held_by = "a LockPanel"
        self._said_lab_stopped = False
        self.drivers: list[ClientDriver] = []
        self._threads: list[threading.Thread] = []
        try:
            self.nodes = [node for service in self._services() for node in service.nodes]
            slots = f", {holders} slots" if recipe.primitive == "semaphore" else ""
            self.view = PanelView(self, title=recipe.title + slots, hold=hold,
                                  pause_seconds=pause_seconds or round(session_timeout + 2.0, 1))
            for message in self.errors:
                self.view.show_error(message)
            self.drivers = [ClientDriver(client, self._stopping, lambda: self.view.hold_seconds,
                                         writes=self.store is not None, on_error=self._client_error)
                            for client in self.clients]
        except BaseException:
            self.clients.close()
            raise
        register(self)
        on_replace = getattr(lab, "on_replace", None)
        if on_replace is not None:
            on_replace(self._close_with_lab)
        for driver in self.drivers:
            driver.start()
        timers = ((LockPanel.refresh_clients, refresh, "panel-refresh"),
                  (LockPanel.refresh_nodes, max(1.0, refresh), "panel-nodes"),
                  (LockPanel.redraw, redraw_every, "panel-figure"))
        self._threads = [start_timer(self, tick, interval, name, self._stopping, LockPanel._report)
                         for tick, interval, name in timers]

    # ---- what the view reads ----
    @property
    def widget(self):
        return self.view.widget

    def _services(self) -> list:
        wanted = [self.recipe.service, "redis"]
        return [getattr(self.lab, name) for name in dict.fromkeys(wanted) if getattr(self.lab, name, None)]

    def client_note(self, client_name: str) -> str:
        for driver in self.drivers:
            if driver.client.name == client_name:
                return driver.note
        return ""

    def states(self) -> dict[str, str]:
        return self.clients.states()

    def holder(self) -> str | None:
        """The client the panel shows as holder (None: nobody)."""
        return narration.current_holder(self.history, self.states())

    def wait_for_holder(self, other_than: str | None = None, timeout: float = 30.0) -> str:
        """Block until a live client other than ``other_than`` holds the lock; return its
        name. Raises TimeoutError with every client's state (and the panel's last errors)."""
        def new_holder() -> str | None:
            holder = self.holder()
            live = holder is not None and holder != other_than and self.states().get(holder) == "holding"
            return holder if live else None
        return self.wait_until(new_holder, timeout, f"a client{' other than ' + other_than if other_than else ''} "
                                                    "to take the lock")

    def wait_until(self, condition: Callable[[], Any], timeout: float = 30.0, what: str = "the condition") -> Any:
        """``labkit.timing.wait_for_value`` that, on timeout, also names the clients' states
        and their last errors: returns what ``condition()`` returned once it was true."""
        try:
            with showing_progress(f"the panel, waiting for {what}"):
                return wait_for_value(condition, what, timeout, poll=0.05)
        except TimeoutError as error:
            raise TimeoutError(f"{error}; client states: {self.states()}; "
                               f"last errors: {self.errors[-3:] or 'none'}") from None

    def rejected_writes(self, client: str | None = None) -> list:
        """The ``write`` events the store refused (of ``client``, or of everyone)."""
        return [event for event in self.history.events(client=client, kind="write") if not event.detail.get("accepted")]

    def node_roles(self) -> dict[str, str]:
        """Each server's role as the panel last showed it (polled once a second)."""
        return dict(self._node_roles)

    def button(self, target: str, action: str):
        return self.view.button(target, action)

    # ---- actions (run in the worker thread) ----
    @property
    def lab_stopped(self) -> bool:
        """True once the panel's lab was stopped: its buttons have nothing left to break."""
        return bool(getattr(self.lab, "stopped", False))

    def _lab_stopped_text(self) -> str:
        return (f"lab {getattr(self.lab, 'id', '')} was stopped, so this panel has no servers left: "
                "start a lab and run the cell that makes the panel again")

    def act(self, what: str, action: Callable[[], Any]) -> Future:
        """Run ``action`` in the worker thread; a failure goes to ``errors`` and the log.
        On a stopped lab, nothing runs: ``errors`` and the log say why."""
        if self.lab_stopped:
            self._report(f"{what}: not done: {self._lab_stopped_text()}")
            done: Future = Future()
            done.set_result(None)
            return done

        def run() -> None:
            try:
                action()
            except Exception as error:  # shown to the learner, who can try something else
                self._report(f"{what} failed: {type(error).__name__}: {error}")
        future = self._actions.submit(run)
        self._pending = [pending for pending in self._pending if not pending.done()] + [future]
        return future

    def wait_for_actions(self, timeout: float = 30.0) -> None:
        """Block until every fault started by a button has finished."""
        deadline = time.monotonic() + timeout
        for future in list(self._pending):
            future.result(max(0.0, deadline - time.monotonic()))

    def _report(self, message: str) -> None:
        self.errors.append(message)
        self.view.show_error(message)

    def _client_error(self, client_name: str, message: str) -> None:
        if not self._stopping.is_set():
            self._report(f"{client_name}: {message}")

    def fault_client(self, client_name: str, action: str) -> Future:
        client = self.clients[client_name]
        actions = {"pause": lambda: client.pause(self.view.pause_seconds), "kill": client.kill,
                   "expire session": client.expire_session, "revoke lease": client.revoke_lease,
                   "stop keep-alive": client.stop_keepalive}
        return self.act(f"{action} {client_name}", actions[action])

    def fault_node(self, node: Node, action: str) -> Future:
        def pause_or_resume() -> None:
            if node.state == "paused":
                node.resume()
                self.history.record_fault("resume", node.name)
            else:
                node.pause()
                self.history.record_fault("pause", node.name)

        def restart() -> None:
            if node.state == "paused":
                node.resume()  # a frozen process cannot act on SIGTERM
            self.history.record_fault("restart", node.name)
            node.restart()

        def kill() -> None:
            node.kill()
            self.history.record_fault("kill", node.name)
        actions = {"kill": kill, "pause / resume": pause_or_resume, "restart": restart}
        return self.act(f"{action} {node.name}", actions[action])

    def kill_leader(self, service_name: str) -> Future:
        return self.act(f"kill the {service_name} leader",
                        lambda: kill_leader(getattr(self.lab, service_name), history=self.history))

    # ---- network faults (a lab started with network=True) ----
    @property
    def has_network(self) -> bool:
        return getattr(self.lab, "network", None) is not None

    @property
    def slowed(self) -> bool:
        """True while the "slow link" delay is on."""
        return self._slow_fault is not None

    def _leader(self) -> Node:
        service = getattr(self.lab, self.recipe.service)
        return service.primary if self.recipe.service == "redis" else service.leader()

    def partition_leader(self) -> Future:
        """Cut the current leader of the recipe's ensemble (a Redis lock: the primary) off
        from every other server and client; the majority elects a new leader."""
        def isolate() -> None:
            leader = self._leader()
            role = "primary" if self.recipe.service == "redis" else "leader"
            self.lab.isolate(leader.name, history=self.history, role=role)
        return self.act("partition the leader", isolate)

    def cut_holder(self) -> Future:
        """Cut the client that holds the lock off from every server: its process keeps
        running while its session, lease or key's TTL runs out on the servers."""
        service = self.recipe.service
        session, expires_in = {"zookeeper": ("session", self.session_timeout),
                               "etcd": ("lease", self.ttl)}.get(service, ("lock key's TTL", self.ttl))

        def isolate() -> None:
            holder = self.holder()
            if holder is None or self.states().get(holder) != "holding":
                raise RuntimeError("nobody holds the lock right now: wait for a holder, then cut it")
            self.lab.isolate(holder, history=self.history, session=session, expires_in=expires_in)
        return self.act("cut the holder", isolate)

    def heal(self) -> Future:
        """Restore every link of the lab (whoever cut or slowed it)."""
        def heal() -> None:
            self._slow_fault = None
            self.lab.heal(history=self.history)
            self.view.show_slowed(False)
        return self.act("heal", heal)

    def slow_links(self, ms: float = SLOW_LINK_MS) -> Future:
        """Toggle: delay every link of the lab by ``ms`` each way; again: take the delay off."""
        def toggle() -> None:
            network = self.lab.network
            if self._slow_fault is not None:
                fault, self._slow_fault = self._slow_fault, None
                if fault in [open_fault["id"] for open_fault in network.open_faults()]:
                    network.end(fault, history=self.history)
            else:
                self.lab.delay(ms, history=self.history)
                self._slow_fault = network.open_faults()[-1]["id"]
            self.view.show_slowed(self.slowed)
        return self.act("slow link", toggle)

    # ---- timers ----
    def refresh_clients(self) -> None:
        """Show each client's state now (a timer does it every ``refresh`` seconds)."""
        self.view.refresh_clients(self.states(), time.time())

    def refresh_nodes(self) -> None:
        """Show each node's state and role now (a timer does it every second or so)."""
        if self.lab_stopped:  # its nodes are gone: say so once instead of polling them
            if not self._said_lab_stopped:
                self._said_lab_stopped = True
                self._report(self._lab_stopped_text())
            return
        nodes = {node.name: (node.state, node.role) for node in self.nodes}
        self._node_roles = {name: role for name, (_, role) in nodes.items()}
        self.view.refresh_nodes(nodes)

    def redraw(self) -> None:
        """Redraw the timeline if the history grew (a timer does it every ``redraw_every`` s)."""
        self.view.redraw_if_changed()

    def render_png(self) -> bytes:
        return figure.render_png(self.history, self.window)

    # ---- lifetime ----
    def close(self, reason: str | None = None) -> None:
        """Stop the timers, the client loops and every client process. Safe to call twice.
        ``reason`` is shown on the closed panel."""
        if self.closed:
            return
        self.closed = True
        self._stopping.set()
        self._actions.shutdown(wait=False, cancel_futures=True)
        for thread in self._threads:
            thread.join(5)
        for driver in self.drivers:
            driver.thread.join(5)
        try:
            self.clients.close()
        finally:
            forget_panel(self)
            self.view.show_closed(reason)

    def _close_with_lab(self) -> str | None:
        """Called when a later labkit.up() replaces the panel's lab."""
        if self.closed:
            return None
        self.close(reason="its lab was stopped by a new labkit.up()")
        return f"a LockPanel and its {self.clients.describe()}"

    def __enter__(self) -> "LockPanel":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _repr_mimebundle_(self, **kwargs: Any):
        return self.widget._repr_mimebundle_(**kwargs)

    def __repr__(self) -> str:
        return f"<LockPanel {self.recipe.name} on {self.name!r}{' closed' if self.closed else ''}: {self.states()}>"
