"""The widgets of a LockPanel and how they are updated in place.

Nothing is ever rebuilt: a refresh only assigns new values to existing widgets, and only
when the text changed, so the front-end does not flicker. The figure is redrawn only
when the history grew, and at most once per ``redraw_every`` seconds.
"""
from __future__ import annotations

import html
import threading
import time
from typing import TYPE_CHECKING, Protocol

import ipywidgets as widgets

from labkit.vocabulary import ERROR_COLOUR, GUIDE_COLOUR, REJECTED_COLOUR, ROLE_COLOURS, STATE_COLOURS, TEXT_COLOUR
from labkit.widgets import narration

if TYPE_CHECKING:
    from labkit.locks.registry import Recipe
    from concurrent.futures import Future

    from labkit.clients import LockClients
    from labkit.record.fencing import FencedStore
    from labkit.record.history import History
    from labkit.servers.lab import Lab
    from labkit.servers.services.node import Node


class PanelState(Protocol):
    """What the view reads from its panel and the buttons it wires to it
    (labkit.widgets.panel.LockPanel is the one panel; the view does not import it)."""

    lab: Lab
    recipe: Recipe
    name: str
    clients: LockClients
    nodes: list[Node]
    history: History
    origin: float
    store: FencedStore | None
    closed: bool

    @property
    def has_network(self) -> bool: ...
    def states(self) -> dict[str, str]: ...
    def client_note(self, client_name: str) -> str: ...
    def render_png(self) -> bytes: ...
    def fault_client(self, client_name: str, action: str) -> Future: ...
    def fault_node(self, node: Node, action: str) -> Future: ...
    def kill_leader(self, service_name: str) -> Future: ...
    def partition_leader(self) -> Future: ...
    def cut_holder(self) -> Future: ...
    def slow_links(self, ms: float = ...) -> Future: ...
    def heal(self) -> Future: ...

SESSION_ACTIONS = {"zookeeper": "expire session", "etcd": "revoke lease"}
SERVICE_NAMES = {"zookeeper": "ZooKeeper", "etcd": "etcd", "redis": "Redis"}
LOG_LINES = 12


def _colored(text: str, color: str, bold: bool = False) -> str:
    weight = "font-weight:bold;" if bold else ""
    return f"<span style='color:{color};{weight}'>{html.escape(text)}</span>"


def _button(description: str, tooltip: str, style: str = "", width: str = "auto") -> widgets.Button:
    return widgets.Button(description=description, tooltip=tooltip, button_style=style,
                          layout=widgets.Layout(width=width))


class PanelView:
    def __init__(self, panel: PanelState, title: str, hold: float, pause_seconds: float):
        self.panel = panel
        self._buttons: dict[tuple[str, str], widgets.Button] = {}
        self._texts: dict[str, str] = {}
        self._labels: dict[str, widgets.HTML] = {}
        self._update_lock = threading.Lock()
        self._error_lines: list[str] = []
        self._drawn_length = -1
        service = panel.recipe.service

        self.holder_line = widgets.HTML().add_class("labkit-holder")
        self.why_line = widgets.HTML().add_class("labkit-why")
        self.store_line = widgets.HTML()
        self.hold_slider = widgets.FloatSlider(value=hold, min=1, max=60, step=1, description="hold (s)",
                                               tooltip="how long each holder keeps the lock before releasing it")
        self.pause_slider = widgets.FloatSlider(value=pause_seconds, min=0.5, max=30, step=0.5,
                                                description="pause (s)",
                                                tooltip="length of a 'pause' (a stand-in for a GC pause)")
        self.client_rows = [self._client_row(client.name, service) for client in panel.clients]
        self.node_rows = [self._node_row(node) for node in panel.nodes]
        leaders = []
        for name in ("zookeeper", "etcd"):
            cluster = getattr(panel.lab, name, None)
            if cluster is not None and name == service:
                button = _button("kill the leader", f"SIGKILL the current {SERVICE_NAMES[name]} leader", "danger")
                button.on_click(lambda _, name=name: panel.kill_leader(name))
                self._buttons[(name, "kill the leader")] = button
                leaders.append(widgets.HBox([widgets.HTML(f"<b>{SERVICE_NAMES[name]} ensemble:</b>"), button]))
        self.image = widgets.Image(format="png", layout=widgets.Layout(width="100%", max_width="900px"))
        self.log = widgets.HTML().add_class("labkit-log")
        self.errors = widgets.HTML()
        heading = widgets.HTML(f"<h3 style='margin:0'>Lock lab: {html.escape(title)}</h3>"
                               f"<span style='color:{GUIDE_COLOUR}'>lock <code>{html.escape(panel.name)}</code>, "
                               f"{len(panel.clients)} client processes; each holds it for the chosen time, "
                               f"writing to the store once a second, then queues again.</span>")
        clients_box = widgets.VBox([widgets.HTML("<b>Lock clients</b>"), *self.client_rows],
                                   layout=widgets.Layout(margin="0 24px 8px 0"))
        nodes_box = widgets.VBox([widgets.HTML("<b>Servers</b>"), *self.node_rows, *leaders, self._network_row()])
        self.widget = widgets.VBox([
            heading, self.holder_line, self.why_line,
            widgets.HBox([self.hold_slider, self.pause_slider]),
            widgets.HBox([clients_box, nodes_box], layout=widgets.Layout(flex_flow="row wrap")),
            self.store_line, self.image, widgets.HTML("<b>What happened, newest last</b>"), self.log, self.errors,
        ]).add_class("labkit-panel")
        self.refresh_clients(panel.states(), time.time())

    # ---- rows ----
    def _client_row(self, name: str, service: str) -> widgets.HBox:
        label = widgets.HTML(layout=widgets.Layout(width="360px")).add_class("labkit-client-state")
        self._labels[name] = label
        pause = _button("pause", "freeze the process (SIGSTOP) for the chosen seconds, like a GC pause", "warning")
        kill = _button("kill", "SIGKILL the client process: no goodbye, its session lives on until it times out",
                       "danger")
        session_action = SESSION_ACTIONS.get(service, "expire session")
        session = _button(session_action, "the server ends this client's session / lease now")
        keepalive = _button("stop keep-alive", "stop refreshing the lease: it expires after its TTL")
        if self.panel.recipe.ttl_only:
            session.disabled, session.tooltip = True, "a Redis lock has no session: it ends when its TTL runs out"
        if self.panel.recipe.name not in ("etcd", "etcd-semaphore"):
            keepalive.disabled, keepalive.tooltip = True, "only an etcd Mutex or semaphore keeps a lease alive"
        for button, action in ((pause, "pause"), (kill, "kill"), (session, session_action),
                               (keepalive, "stop keep-alive")):
            button.on_click(lambda _, action=action: self.panel.fault_client(name, action))
            self._buttons[(name, action)] = button
        return widgets.HBox([label, pause, kill, session, keepalive]).add_class(f"labkit-client-{name}")

    def _node_row(self, node: Node) -> widgets.HBox:
        label = widgets.HTML(layout=widgets.Layout(width="230px"))
        self._labels[node.name] = label
        row = [label]
        for action, style, tooltip in (("kill", "danger", "SIGKILL the server"),
                                       ("pause / resume", "warning", "freeze or thaw the server process"),
                                       ("restart", "", "stop it, start it on its data, wait until it answers")):
            button = _button("pause" if action == "pause / resume" else action, tooltip, style)
            button.on_click(lambda _, action=action: self.panel.fault_node(node, action))
            self._buttons[(node.name, action)] = button
            row.append(button)
        return widgets.HBox(row).add_class(f"labkit-node-{node.name}")

    def _network_row(self) -> widgets.Widget:
        """The network's buttons ("network", action), or a line saying how to get them."""
        if not self.panel.has_network:
            return widgets.HTML(f"<span style='color:{GUIDE_COLOUR}'><i>Network faults (partition the leader, "
                                "cut the holder, slow link, heal) need a lab started with "
                                "<code>labkit.up(..., network=True)</code> (CLI: <code>labkit up --network</code>).</i></span>")
        leader = "primary" if self.panel.recipe.service == "redis" else "leader"
        row = [widgets.HTML("<b>Network:</b>")]
        for action, style, tooltip, run in (
                ("partition the leader", "danger", f"cut the current {leader} off from every other server and client",
                 self.panel.partition_leader),
                ("cut the holder", "danger", "cut the client holding the lock off from every server; its process "
                 "keeps running while its session runs out", self.panel.cut_holder),
                ("slow link", "warning", "delay every link of the lab by 50 ms each way; click again to stop",
                 self.panel.slow_links),
                ("heal", "success", "restore every link", self.panel.heal)):
            button = _button(action, tooltip, style)
            button.on_click(lambda _, run=run: run())
            self._buttons[("network", action)] = button
            row.append(button)
        return widgets.HBox(row).add_class("labkit-network")

    def show_slowed(self, slowed: bool) -> None:
        button = self._buttons.get(("network", "slow link"))
        if button is not None:
            button.description = "stop slowing" if slowed else "slow link"

    def button(self, target: str, action: str) -> widgets.Button:
        try:
            return self._buttons[(target, action)]
        except KeyError:
            known = ", ".join(f"{t!r}/{a!r}" for t, a in self._buttons)
            raise KeyError(f"no button {action!r} for {target!r}; the panel has: {known}") from None

    # ---- settings ----
    @property
    def hold_seconds(self) -> float:
        return float(self.hold_slider.value)

    @property
    def pause_seconds(self) -> float:
        return float(self.pause_slider.value)

    # ---- in-place updates ----
    def _set(self, key: str, widget: widgets.HTML, value: str) -> None:
        if self._texts.get(key) != value:
            self._texts[key] = value
            widget.value = value

    def refresh_clients(self, states: dict[str, str], now: float) -> None:
        panel, history = self.panel, self.panel.history
        with self._update_lock:
            if panel.closed and self._texts.get("closed"):
                return
            holds = {hold.client: hold for hold in narration.open_holds(history)}
            for name, state in states.items():
                text = f"<b>{html.escape(name)}</b> " + _colored(state, STATE_COLOURS.get(state, TEXT_COLOUR), True)
                if name in holds:
                    hold = holds[name]
                    token = "no token" if hold.token is None else f"token {hold.token}"
                    text += f" ({token}, {now - hold.start:.1f} s)"
                note = panel.client_note(name)
                if note:
                    text += f" <i>{html.escape(note)}</i>"
                self._set(name, self._labels[name], text)
            self._set("holder", self.holder_line, "<div style='font-size:20px;font-weight:bold;padding:4px 0'>"
                      f"{html.escape(narration.holder_text(history, states, now))}</div>")
            self._set("why", self.why_line, "<div style='font-size:15px'>"
                      f"{html.escape(narration.why_text(history, panel.origin))}</div>")
            accepted, rejected = narration.store_counts(history.events(kind="write"))
            if panel.store is not None:
                mode = "fenced: it refuses a token lower than one it already accepted" if panel.store.fenced \
                    else "NOT fenced: this lock has no token, so the store accepts every write"
                self._set("store", self.store_line, f"Store ({mode}): <b>{accepted}</b> writes accepted, "
                          + _colored(f"{rejected} rejected", REJECTED_COLOUR, rejected > 0))
            lines = narration.log_lines(history, panel.origin, LOG_LINES)
            self._set("log", self.log, "<pre style='margin:0;font-size:12px;line-height:1.3'>"
                      + html.escape("\n".join(lines) or "(nothing yet)") + "</pre>")

    def redraw_if_changed(self) -> None:
        """Redraw the graphs if the history grew since the last drawing (its own timer
        thread calls this: a drawing takes a few hundred ms, the text must not wait)."""
        length = len(self.panel.history)
        if length == self._drawn_length or self.panel.closed:
            return
        self._drawn_length = length
        self.image.value = self.panel.render_png()

    def refresh_nodes(self, nodes: dict[str, tuple[str, str]]) -> None:
        for name, (state, role) in nodes.items():
            text = f"<b>{html.escape(name)}</b> " + _colored(role, ROLE_COLOURS.get(role, TEXT_COLOUR), True)
            if state != "running" and state != role:
                text += f" ({html.escape(state)})"
            self._set(name, self._labels[name], text)
            self._buttons[(name, "pause / resume")].description = "resume" if state == "paused" else "pause"

    def show_error(self, message: str) -> None:
        with self._update_lock:
            self._error_lines = (self._error_lines + [f"{time.time() - self.panel.origin:7.1f} s  {message}"])[-4:]
            self.errors.value = (f"<pre style='color:{ERROR_COLOUR};margin:0;white-space:pre-wrap'>"
                                 + html.escape("\n".join(self._error_lines)) + "</pre>")

    def show_closed(self, reason: str | None = None) -> None:
        with self._update_lock:
            self._texts["closed"] = "yes"
            for button in self._buttons.values():
                button.disabled = True
            self.hold_slider.disabled = self.pause_slider.disabled = True
            because = f" ({html.escape(reason)})" if reason else ""
            self.holder_line.value = ("<div style='font-size:20px;font-weight:bold'>Panel closed"
                                      f"{because}: its client processes are stopped.</div>")
