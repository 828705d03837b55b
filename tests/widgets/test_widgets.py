"""The lock lab panel: its words (pure, no server) and its buttons on real servers.

The buttons are clicked from Python (``button.click()`` runs the same handler as a click
in the browser); what changed is read from the panel's own state and from the history.
"""
import html
import os
import threading

import pytest

import labkit
from labkit.locks.zookeeper import ZooKeeperLock
from labkit.record.events import Event
from labkit.record.history import FAULT_CLIENT, History
from labkit.widgets import LockPanel, describe_event, holder_text, why_text

from helpers import process_exists, run_in_kernel, wait_until


def panel_threads():
    return [thread for thread in threading.enumerate() if thread.name.startswith("panel-") and thread.is_alive()]


def queue_formed(panel, waiters):
    return panel.holder() is not None and list(panel.states().values()).count("waiting") == waiters


# ---- words, from hand-made histories -----------------------------------------------------
NODE = "/locks/x/0f1e2d3c4b5a69788796a5b4c3d2e1f0-lock-0000000007"


def history_of(*events):
    return History(Event(100.0 + seconds, client, kind, detail) for seconds, client, kind, detail in events)


def test_a_wakeup_names_the_deleted_predecessor_by_its_sequence():
    woke = Event(1.0, "client-3", "woke", {"reason": "deleted", "target": NODE})
    assert describe_event(woke) == "client-3 woke: its predecessor lock-0000000007 was deleted"
    parent = Event(1.0, "client-3", "woke", {"reason": "child", "target": "/locks/x"})
    assert "queue under /locks/x changed" in describe_event(parent)


def test_holder_line_names_the_holder_its_age_and_token_and_a_paused_believer():
    history = history_of((0.0, "client-1", "acquired", {"token": 7}),
                         (1.0, FAULT_CLIENT, "fault", {"what": "pause", "target": "client-1", "seconds": 6}),
                         (5.0, "client-2", "acquired", {"token": 8}))
    text = holder_text(history, {"client-1": "paused", "client-2": "holding"}, now=108.1)
    assert text.startswith("Holder: client-2 (since 3.1 s, token 8)")
    assert "client-1 (paused) still believes it holds the lock (token 7)" in text
    alone = holder_text(history_of((0.0, "client-1", "acquired", {"token": 7})), {"client-1": "paused"}, 102.0)
    assert "PAUSED" in alone and "token 7" in alone


def test_why_line_explains_an_expired_session_and_the_wakeup():
    history = history_of((0.0, "client-1", "acquired", {"token": 7}),
                         (2.0, FAULT_CLIENT, "fault", {"what": "expire_session", "target": "client-1"}),
                         (2.01, "client-1", "lost", {"reason": "session expired: the server deleted my node"}),
                         (2.02, "client-2", "woke", {"reason": "deleted", "target": NODE}),
                         (2.03, "client-2", "acquired", {"token": 8}))
    text = why_text(history, origin=100.0)
    assert "client-1 lost it (session expired" in text and "after you expired client-1's session at 2.0 s" in text
    assert "client-2 got it 0.02 s later (token 8) because it woke: its predecessor lock-0000000007" in text


def test_why_line_links_a_fault_recorded_just_after_the_loss_it_caused():
    # expire_session records its fault when its call returns; the victim may say "lost" first
    history = history_of((0.0, "client-1", "acquired", {"token": 7}),
                         (2.00, "client-1", "lost", {"reason": "session expired"}),
                         (2.01, "client-2", "acquired", {"token": 8}),
                         (2.05, FAULT_CLIENT, "fault", {"what": "expire_session", "target": "client-1"}))
    assert "client-1 lost it (session expired) after you expired client-1's session at 2.0 s" in why_text(history, 100.0)


def test_why_line_explains_a_kill_and_a_late_loss():
    killed = history_of((0.0, "client-1", "acquired", {"token": None}),
                        (1.0, FAULT_CLIENT, "fault", {"what": "kill", "target": "client-1"}),
                        (6.0, "client-2", "acquired", {"token": None}))
    assert "you killed client-1 at 1.0 s; the server freed its lock only when" in why_text(killed, 100.0)
    assert "client-2 got it 5.00 s later (no fencing token)" in why_text(killed, 100.0)
    paused = history_of((0.0, "client-1", "acquired", {"token": 3}),
                        (1.0, FAULT_CLIENT, "fault", {"what": "pause", "target": "client-1", "seconds": 6}),
                        (5.0, "client-2", "acquired", {"token": 4}),
                        (7.0, "client-1", "lost", {"reason": "session expired"}))
    assert "client-2 already had the lock (token 4) 2.00 s before client-1 found out" in why_text(paused, 100.0)


# ---- buttons, on real servers ----------------------------------------------------------
def test_expire_session_on_the_holder_hands_the_lock_to_the_next_client(lab, unique_name):
    with LockPanel(lab, "zookeeper", clients=3, name=unique_name, hold=60, session_timeout=4.0) as panel:
        wait_until(lambda: queue_formed(panel, 2), f"no holder and two waiters: {panel.states()}", timeout=30)
        first = panel.holder()
        panel.button(first, "expire session").click()
        panel.wait_for_actions(15)
        # hold=60: only the fault can make the lock change hands this soon
        wait_until(lambda: panel.holder() not in (None, first), f"nobody took over from {first}: {panel.states()}", timeout=10)
        second = panel.holder()
        assert panel.states()[second] == "holding"
        wait_until(lambda: panel.history.events(kind="lost"), f"{first} never reported its loss", timeout=5)
        assert [event.client for event in panel.history.events(kind="lost")] == [first]
        wait_until(lambda: f"Holder: {second}" in panel.view.holder_line.value, "the holder line did not follow", timeout=5)
        why = lambda: html.unescape(panel.view.why_line.value)  # noqa: E731
        wait_until(lambda: f"{first} lost it" in why() and f"expired {first}'s session" in why(), why(), timeout=5)
        assert panel.errors == []


def test_revoke_lease_on_an_etcd_holder_hands_the_lock_on(lab, unique_name):
    with LockPanel(lab, "etcd", clients=2, name=unique_name, hold=60, ttl=5) as panel:
        wait_until(lambda: queue_formed(panel, 1), f"no holder and a waiter: {panel.states()}", timeout=30)
        first = panel.holder()
        assert panel.button(first, "stop keep-alive").disabled is False
        panel.button(first, "revoke lease").click()
        wait_until(lambda: panel.holder() not in (None, first), f"nobody took over from {first}", timeout=10)
        wait_until(lambda: panel.history.events(client=first, kind="lost"), f"{first} never learned it lost", timeout=10)
        # a new session, and back in the queue
        wait_until(lambda: panel.states()[first] == "waiting", f"{first} did not queue again: {panel.states()}", timeout=15)


def test_a_redis_lock_has_no_session_button_and_an_unfenced_store(lab, unique_name):
    with LockPanel(lab, "redis", clients=1, name=unique_name, hold=60) as panel:
        assert panel.button("client-1", "expire session").disabled
        assert panel.button("client-1", "stop keep-alive").disabled
        assert panel.store.fenced is False
        wait_until(lambda: panel.holder() == "client-1", f"client-1 never held: {panel.states()}", timeout=20)
        wait_until(lambda: panel.store.writes(), "no write reached the store", timeout=10)
        assert all(write.accepted and write.token is None for write in panel.store.writes())
        wait_until(lambda: "NOT fenced" in panel.view.store_line.value, panel.view.store_line.value, timeout=5)


@pytest.mark.slow
def test_a_pause_past_the_session_timeout_is_caught_by_the_fenced_store(lab, unique_name):
    with LockPanel(lab, "zookeeper", clients=2, name=unique_name, hold=60, session_timeout=2.0,
                   pause_seconds=4.0) as panel:
        wait_until(lambda: queue_formed(panel, 1), f"no holder and a waiter: {panel.states()}", timeout=30)
        first = panel.holder()
        wait_until(lambda: panel.history.events(client=first, kind="write"), f"{first} never wrote", timeout=5)
        panel.button(first, "pause").click()
        wait_until(lambda: panel.holder() not in (None, first), "the server never gave the lock away", timeout=15)
        wait_until(lambda: any(not event.detail["accepted"] for event in panel.history.events(client=first, kind="write")), f"{first} made no late write after its pause", timeout=15)
        rejected = [write for write in panel.store.writes() if not write.accepted]
        assert rejected and rejected[0].client == first, rejected
        wait_until(lambda: "1 rejected" in panel.view.store_line.value, panel.view.store_line.value, timeout=5)


def test_close_stops_every_client_process_and_thread(lab, unique_name):
    panel = LockPanel(lab, "zookeeper", clients=3, name=unique_name, hold=60)
    pids = [client.pid for client in panel.clients]
    try:
        wait_until(lambda: queue_formed(panel, 2), f"no queue: {panel.states()}", timeout=30)
        waiter = next(name for name, state in panel.states().items() if state == "waiting")
        panel.button(waiter, "pause").click()
        panel.wait_for_actions(10)
        assert panel.states()[waiter] == "paused"
    finally:
        panel.close()
    assert not [pid for pid in pids if process_exists(pid)]
    wait_until(lambda: not panel_threads(), f"threads left: {panel_threads()}", timeout=10)
    assert all(button.disabled for button in panel.view._buttons.values())
    panel.close()  # twice is harmless


def test_a_new_panel_closes_the_one_a_rerun_cell_left_behind(lab, unique_name):
    first = LockPanel(lab, "zookeeper", clients=1, name=unique_name + "-1")
    pid = first.clients[0].pid
    with LockPanel(lab, "zookeeper", clients=1, name=unique_name + "-2") as second:
        assert first.closed and not process_exists(pid)
        assert second.wait_for_holder(timeout=20) == "client-1"


@pytest.mark.slow
def test_kill_the_leader_shows_a_new_leader_and_the_lock_lives_on():
    with labkit.up(zookeeper=3, etcd=0, redis=True, quiet=True) as own_lab:
        with LockPanel(own_lab, "zookeeper", clients=2, hold=60, session_timeout=6.0) as panel:
            wait_until(lambda: queue_formed(panel, 1), f"no queue: {panel.states()}", timeout=30)
            old_leader = own_lab.zookeeper.wait_for_leader(15).name
            wait_until(lambda: "leader" in panel.view._labels[old_leader].value, "the leader is not shown", timeout=10)
            follower = next(node.name for node in own_lab.zookeeper.nodes if node.name != old_leader)
            panel.button(follower, "pause / resume").click()
            wait_until(lambda: panel.node_roles().get(follower) == "paused", f"{follower} not shown paused", timeout=10)
            assert panel.button(follower, "pause / resume").description == "resume"
            panel.button(follower, "pause / resume").click()
            wait_until(lambda: panel.node_roles().get(follower) == "follower", f"{follower} did not come back", timeout=15)
            panel.button("zookeeper", "kill the leader").click()
            panel.wait_for_actions(15)
            assert own_lab.node(old_leader).state == "stopped"

            def new_leader_shown():
                return [name for name, label in panel.view._labels.items()
                        if name.startswith("zk") and name != old_leader and ">leader<" in label.value]
            wait_until(new_leader_shown, "no new leader on the panel", timeout=30)
            assert ">stopped<" in panel.view._labels[old_leader].value
            holder = panel.holder()
            panel.button(holder, "expire session").click()
            wait_until(lambda: panel.holder() not in (None, holder), "the lock stopped working", timeout=20)


# ---- network buttons (a lab started with network=True) ----------------------------------
def test_a_lab_without_network_faults_has_no_network_buttons_and_says_how_to_get_them(lab, unique_name):
    with LockPanel(lab, "zookeeper", clients=1, name=unique_name) as panel:
        assert not panel.has_network
        with pytest.raises(KeyError, match="no button 'heal'"):
            panel.button("network", "heal")
        assert "network=True" in html.unescape(str([child for child in panel.widget.children]))


@pytest.fixture(scope="module")
def netlab():
    with labkit.up(zookeeper=3, etcd=0, redis=True, network=True, quiet=True) as own_lab:
        yield own_lab


@pytest.fixture
def healed(netlab):
    yield netlab
    netlab.heal()
    netlab.zookeeper.wait_for_leader(30)


def log_text(panel):
    return html.unescape(panel.view.log.value)


def test_cut_the_holder_hands_the_lock_to_another_client_and_heal_brings_it_back(healed, unique_name):
    with LockPanel(healed, "zookeeper", clients=2, name=unique_name, hold=60, session_timeout=2.0) as panel:
        wait_until(lambda: queue_formed(panel, 1), f"no holder and a waiter: {panel.states()}", timeout=30)
        first = panel.holder()
        pid = panel.clients[first].pid
        panel.button("network", "cut the holder").click()
        panel.wait_for_actions(15)
        assert not [error for error in panel.errors if "cut the holder" in error], panel.errors
        assert f"{first}>zk1" in healed.network_status()["rules"]   # its own links, no other client's
        wait_until(lambda: f"{first} was cut off from the servers; its session expires in 2.0 s" in log_text(panel),
                   log_text(panel), timeout=5)
        # hold=60: only the cut can make the lock change hands this soon
        second = panel.wait_for_holder(other_than=first, timeout=20)
        assert process_exists(pid)   # the cut-off client still runs
        wait_until(lambda: panel.history.events(client=first, kind="lost"), f"{first} never reported its loss",
                   timeout=10)
        panel.button("network", "heal").click()
        panel.wait_for_actions(15)
        assert healed.network_status()["rules"] == {}
        wait_until(lambda: "the network healed" in log_text(panel), log_text(panel), timeout=5)
        # healed: the cut-off client opens a new session and queues behind the new holder
        wait_until(lambda: panel.states()[first] == "waiting", f"{first} did not queue again: {panel.states()}",
                   timeout=30)
        # the new holder keeps the lock, unless its own 2 s session let it go on a loaded machine
        # (in a fresh-clone run client-2 was "lost" by then, a sometimes-event)
        assert panel.holder() == second or panel.history.events(client=second, kind="lost"), panel.states()
        phases = [(e.detail["what"], e.detail["phase"]) for e in panel.history.events(kind="fault")]
        assert phases == [("isolate", "start"), ("isolate", "end")]


@pytest.mark.slow
def test_partition_the_leader_elects_another_and_slow_link_toggles_a_delay_on_every_link(healed, unique_name):
    with LockPanel(healed, "zookeeper", clients=2, name=unique_name, hold=60, session_timeout=6.0) as panel:
        wait_until(lambda: panel.holder() is not None, f"nobody took the lock: {panel.states()}", timeout=30)
        old = healed.zookeeper.wait_for_leader(15).name
        panel.button("network", "partition the leader").click()
        panel.wait_for_actions(15)
        assert not [error for error in panel.errors if "partition the leader" in error], panel.errors

        def new_leader():
            roles = panel.node_roles()
            leaders = [name for name, role in roles.items() if role == "leader"]
            return leaders if leaders and old not in leaders else None
        [leader] = panel.wait_until(new_leader, 40, "a new leader on the panel")
        assert leader != old
        assert f"you cut the leader {old} off from the rest" in log_text(panel)
        panel.button("network", "heal").click()
        panel.wait_for_actions(15)
        wait_until(lambda: panel.node_roles().get(old) == "follower", f"{old} did not rejoin: {panel.node_roles()}",
                   timeout=40)
        slow = panel.button("network", "slow link")
        slow.click()
        panel.wait_for_actions(15)
        rules = healed.network_status()["rules"]
        assert rules and all(rule == {"delay": 50.0} for rule in rules.values()), rules
        assert panel.slowed and slow.description == "stop slowing"
        slow.click()
        panel.wait_for_actions(15)
        assert healed.network_status()["rules"] == {} and not panel.slowed and slow.description == "slow link"
        phases = [(e.detail["what"], e.detail["phase"]) for e in panel.history.events(kind="fault")]
        assert phases == [("isolate", "start"), ("isolate", "end"), ("delay", "start"), ("delay", "end")]
        # the lock still changes hands on the healed network, to a waiter queued on the server (a
        # waiter's session can expire in the partition: it queues again, and until it has, the
        # expired holder could queue first and take the lock back)
        observer = healed.zookeeper.client()
        try:
            queue = ZooKeeperLock(observer, unique_name)
            wait_until(lambda: sorted(contender.identifier for contender in queue.contenders()) == ["client-1", "client-2"],
                       f"a holder and a waiter on the server: {panel.states()}", timeout=20)
        finally:
            observer.stop()
            observer.close()
        holder = panel.wait_for_holder(timeout=20)
        panel.button(holder, "expire session").click()
        panel.wait_for_holder(other_than=holder, timeout=30)
        assert not [error for error in panel.errors if "failed" in error], panel.errors


@pytest.mark.slow
def test_a_kernel_restart_stops_the_panel_its_clients_and_its_lab(tmp_path):
    from jupyter_client.manager import start_new_kernel

    environment = dict(os.environ, LABKIT_HOME=str(tmp_path / "labkit"), LABKIT_BACKEND="local")
    manager, kernel = start_new_kernel(kernel_name="python3", env=environment, cwd=str(tmp_path))
    try:
        printed = run_in_kernel(kernel, "import labkit\nfrom labkit.widgets import LockPanel\n"
                                "lab = labkit.up(zookeeper=1, etcd=0, redis=True, quiet=True)\n"
                                "panel = LockPanel(lab, 'zookeeper', clients=2)\npanel.wait_for_holder(timeout=30)\n"
                                "print('PIDS', *[c.pid for c in panel.clients], *[n.pid for n in lab.nodes])\n")
        pids = [int(word) for word in printed.split("PIDS", 1)[1].split()]
        assert len(pids) == 4 and all(process_exists(pid) for pid in pids)
        manager.restart_kernel(now=False)  # a polite shutdown request, as Jupyter's restart button sends
        wait_until(lambda: not [pid for pid in pids if process_exists(pid)], f"still running after the restart: {[pid for pid in pids if process_exists(pid)]}", timeout=30)
    finally:
        kernel.stop_channels()
        manager.shutdown_kernel(now=True)


# ---- a panel whose lab is gone ------------------------------------------------------------
def test_a_panel_whose_lab_was_stopped_says_so_when_clicked(unique_name):
    own_lab = labkit.up(zookeeper=0, etcd=0, redis=True, quiet=True)
    try:
        with LockPanel(own_lab, "redis", clients=1, name=unique_name, close_others=False) as panel:
            panel.wait_for_holder(timeout=20)
            own_lab.down()
            panel.button("redis1", "kill").click()   # the handler a browser click runs
            panel.wait_for_actions(5)
            said = [error for error in panel.errors if error.startswith("kill redis1")]
            assert said and said[0].startswith(f"kill redis1: not done: lab {own_lab.id} was stopped"), panel.errors
            assert "run the cell that makes the panel again" in said[0]
            wait_until(lambda: any(error.startswith(f"lab {own_lab.id} was stopped") for error in panel.errors),
                       f"the panel did not notice its lab was stopped: {panel.errors}", timeout=10)
            assert "was stopped" in html.unescape(panel.view.errors.value)
    finally:
        own_lab.down()


def test_a_new_lab_closes_the_panel_and_clients_of_the_lab_it_replaces(unique_name, capsys):
    first = labkit.up(zookeeper=0, etcd=0, redis=True, quiet=True)
    try:
        panel = LockPanel(first, "redis", clients=2, name=unique_name, close_others=False)
        pids = [client.pid for client in panel.clients]
        labkit.up(zookeeper=0, etcd=0, redis=True, quiet=True).down()
    finally:
        first.down()
    said = capsys.readouterr().out
    assert f"with a LockPanel and its 2 redis clients on {unique_name}, before starting" in said, said
    assert panel.closed and not any(process_exists(pid) for pid in pids)
    assert "its lab was stopped by a new labkit.up()" in html.unescape(panel.view.holder_line.value)
