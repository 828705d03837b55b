"""The widgets of a lock panel (labkit/widgets/view.py), with a stand-in panel (a plain object
with what the view reads, PanelState, and a list of the calls its buttons made) and real
histories: every button calls the panel with its client, node or action, and only the
buttons a recipe and a lab can use are enabled or there at all; a refresh assigns a widget
only when its text changed, shows the holder's token and age and the store's counts; the
figure is redrawn only when the history grew; errors keep the last four; a closed view
disables everything and a late refresh cannot undo it. The real LockPanel on real servers:
tests/widgets/test_widgets.py. Pure logic: no server."""
from __future__ import annotations

import html
from types import SimpleNamespace

import pytest

from labkit.locks.registry import recipe_named
from labkit.record.events import Event
from labkit.record.history import History
from labkit.widgets.view import LOG_LINES, PanelView

pytestmark = pytest.mark.no_servers

ORIGIN = 1000.0


class Panel:
    """What the view reads, and the calls its buttons made (``calls``)."""

    def __init__(self, recipe="zookeeper", network=False, store=None, services=("zookeeper", "etcd"),
                 events=()):
        self.lab = SimpleNamespace(zookeeper=object() if "zookeeper" in services else None,
                                   etcd=object() if "etcd" in services else None)
        self.recipe = recipe_named(recipe)
        self.name = "/locks/view"
        self.clients = [SimpleNamespace(name="client-1"), SimpleNamespace(name="client-2")]
        self.nodes = [SimpleNamespace(name="zk1"), SimpleNamespace(name="zk2")]
        self.history = History(Event(ORIGIN + seconds, client, kind, detail) for seconds, client, kind, detail in events)
        self.origin = ORIGIN
        self.store = store
        self.closed = False
        self.has_network = network
        self.calls: list[tuple] = []
        self.notes: dict[str, str] = {}
        self.pngs = 0

    def states(self):
        return {"client-1": "waiting", "client-2": "waiting"}

    def client_note(self, client_name):
        return self.notes.get(client_name, "")

    def render_png(self):
        self.pngs += 1
        return b"png %d" % self.pngs

    def __getattr__(self, action):   # fault_client, fault_node, kill_leader, partition_leader, cut_holder, ...
        if action.startswith("_"):
            raise AttributeError(action)
        return lambda *args: self.calls.append((action, *args))


def view_of(panel):
    return PanelView(panel, "the test panel", hold=5, pause_seconds=3)


def changes_of(widget):
    """The values assigned to ``widget`` from now on."""
    seen = []
    widget.observe(lambda change: seen.append(change["new"]), names="value")
    return seen


def test_each_clients_buttons_call_the_panel_with_its_name_and_action():
    panel = Panel("zookeeper")
    view = view_of(panel)
    view.button("client-2", "pause").click()
    view.button("client-1", "kill").click()
    view.button("client-1", "expire session").click()
    view.button("zk2", "restart").click()
    view.button("zk1", "pause / resume").click()
    assert panel.calls == [("fault_client", "client-2", "pause"), ("fault_client", "client-1", "kill"),
                           ("fault_client", "client-1", "expire session"), ("fault_node", panel.nodes[1], "restart"),
                           ("fault_node", panel.nodes[0], "pause / resume")]
    assert view.button("client-1", "stop keep-alive").disabled, "only an etcd lease is kept alive"
    assert view.hold_seconds == 5.0 and view.pause_seconds == 3.0


def test_the_session_button_fits_the_recipe():
    etcd = view_of(Panel("etcd"))
    assert not etcd.button("client-1", "revoke lease").disabled and not etcd.button("client-1", "stop keep-alive").disabled
    with pytest.raises(KeyError, match="no button 'expire session'"):
        etcd.button("client-1", "expire session")
    redis = view_of(Panel("redis"))
    session = redis.button("client-1", "expire session")
    assert session.disabled and "no session" in session.tooltip


def test_kill_the_leader_is_offered_for_the_recipes_own_ensemble_only():
    panel = Panel("etcd")
    view = view_of(panel)
    view.button("etcd", "kill the leader").click()
    assert panel.calls == [("kill_leader", "etcd")]
    with pytest.raises(KeyError):
        view.button("zookeeper", "kill the leader")
    with pytest.raises(KeyError):
        view_of(Panel("etcd", services=("zookeeper",))).button("etcd", "kill the leader")


def test_without_a_network_the_panel_says_how_to_get_its_buttons():
    view = view_of(Panel())
    with pytest.raises(KeyError) as missing:
        view.button("network", "heal")
    assert "'client-1'/'pause'" in str(missing.value), "the error lists the buttons there are"
    assert "network=True" in view.widget.children[4].children[1].children[-1].value
    view.show_slowed(True)   # no slow-link button: nothing to relabel, no error


def test_the_network_buttons_call_the_panel_and_the_slow_link_says_how_to_stop():
    panel = Panel("redis", network=True)
    view = view_of(panel)
    for action in ("partition the leader", "cut the holder", "slow link", "heal"):
        view.button("network", action).click()
    assert panel.calls == [("partition_leader",), ("cut_holder",), ("slow_links",), ("heal",)]
    assert "primary" in view.button("network", "partition the leader").tooltip, "a Redis lab has a primary"
    view.show_slowed(True)
    assert view.button("network", "slow link").description == "stop slowing"
    view.show_slowed(False)
    assert view.button("network", "slow link").description == "slow link"


def test_the_holder_shows_its_token_and_age_and_a_refresh_assigns_only_what_changed():
    panel = Panel(events=[(1.0, "client-1", "acquired", {"token": 7})])
    view = view_of(panel)
    states = {"client-1": "holding", "client-2": "waiting"}
    label = view._labels["client-1"]
    assigned, other = changes_of(label), changes_of(view._labels["client-2"])
    view.refresh_clients(states, ORIGIN + 4.0)
    assert "(token 7, 3.0 s)" in label.value and "holding" in label.value
    assert "client-1" in html.unescape(view.holder_line.value)
    view.refresh_clients(states, ORIGIN + 4.0)
    assert len(assigned) == 1, "the same text is not assigned again (the front end would flicker)"
    view.refresh_clients(states, ORIGIN + 6.5)
    assert len(assigned) == 2 and "(token 7, 5.5 s)" in label.value
    assert other == [], "client-2 still waits as when the view was made: its text was never assigned again"
    panel.notes["client-2"] = "its process is gone"
    view.refresh_clients(states, ORIGIN + 6.5)
    assert "<i>its process is gone</i>" in view._labels["client-2"].value


def test_the_store_line_counts_accepted_and_rejected_writes_and_says_if_it_is_fenced():
    writes = [(1.0, "client-1", "acquired", {"token": 3})] + [
        (1.5 + step, "client-1", "write", {"accepted": step != 1, "token": 3}) for step in range(3)]
    fenced = view_of(Panel(store=SimpleNamespace(fenced=True), events=writes))
    assert "fenced: it refuses" in fenced.store_line.value and "<b>2</b> writes accepted" in fenced.store_line.value
    assert "1 rejected" in fenced.store_line.value and "font-weight:bold" in fenced.store_line.value
    unfenced = view_of(Panel(store=SimpleNamespace(fenced=False), events=writes[:2]))
    assert "NOT fenced" in unfenced.store_line.value and "0 rejected" in unfenced.store_line.value
    assert view_of(Panel(events=writes)).store_line.value == "", "no store, no line"


def test_the_log_shows_the_newest_events_only():
    events = [(float(second), "client-1" if second % 2 else "client-2", "waiting", {}) for second in range(20)]
    view = view_of(Panel(events=events))
    lines = html.unescape(view.log.value).split("<pre")[1].split(">", 1)[1].split("</pre>")[0].splitlines()
    assert len(lines) == LOG_LINES and lines[-1].lstrip().startswith("19.0 s")
    assert "(nothing yet)" in view_of(Panel()).log.value


def test_the_figure_is_redrawn_only_when_the_history_grew_and_never_once_closed():
    panel = Panel()
    view = view_of(panel)
    view.redraw_if_changed()
    view.redraw_if_changed()
    assert panel.pngs == 1 and view.image.value == b"png 1"
    panel.history.append(Event(ORIGIN + 1, "client-1", "acquired", {"token": 1}))
    view.redraw_if_changed()
    assert panel.pngs == 2 and view.image.value == b"png 2"
    panel.history.append(Event(ORIGIN + 2, "client-1", "released", {}))
    panel.closed = True
    view.redraw_if_changed()
    assert panel.pngs == 2


def test_a_node_shows_its_role_its_state_when_it_differs_and_pause_turns_to_resume():
    view = view_of(Panel())
    view.refresh_nodes({"zk1": ("paused", "leader"), "zk2": ("running", "follower")})
    assert "leader" in view._labels["zk1"].value and "(paused)" in view._labels["zk1"].value
    assert "follower" in view._labels["zk2"].value and "(" not in html.unescape(view._labels["zk2"].value).split("</b>")[1]
    assert view.button("zk1", "pause / resume").description == "resume"
    assert view.button("zk2", "pause / resume").description == "pause"
    view.refresh_nodes({"zk1": ("running", "follower")})
    assert view.button("zk1", "pause / resume").description == "pause"


def test_errors_keep_the_last_four_escaped():
    view = view_of(Panel())
    for number in range(6):
        view.show_error(f"error <{number}>")
    shown = html.unescape(view.errors.value)
    assert [f"error <{number}>" in shown for number in range(6)] == [False, False, True, True, True, True]
    assert "<5>" not in view.errors.value, "escaped"


def test_a_closed_view_disables_everything_and_a_late_refresh_keeps_it_closed():
    view = view_of(Panel("etcd", network=True))
    view.show_closed("the lab stopped")
    assert view._buttons and all(button.disabled for button in view._buttons.values())
    assert view.hold_slider.disabled and view.pause_slider.disabled
    closed = view.holder_line.value
    assert "Panel closed (the lab stopped)" in closed
    view.panel.closed = True
    view.refresh_clients({"client-1": "holding", "client-2": "waiting"}, ORIGIN + 10)
    assert view.holder_line.value == closed
