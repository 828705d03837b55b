"""Lock clients as real processes, on the real servers of the shared ``lab`` fixture."""
import json
import os
import subprocess
import sys
import tempfile
import time

import pytest

import labkit
from labkit.record.checker import check_mutual_exclusion
from labkit.clients import RECIPES, ClientError, spawn_clients
from labkit.record.fencing import FencedStore
from labkit.record.history import History
from labkit.locks import LockTimeout
from labkit.locks.registry import UnknownRecipe, connections_of, recipe_named
from labkit.servers.runners.process import process_start_time

from helpers import process_exists


@pytest.fixture
def store(lab, unique_name):
    fenced_store = FencedStore(lab.redis.client(), "store" + unique_name)
    fenced_store.reset()
    yield fenced_store
    fenced_store.reset()


@pytest.mark.slow
@pytest.mark.parametrize("recipe", sorted(RECIPES.values(), key=lambda recipe: recipe.name),
                         ids=lambda recipe: recipe.name)
def test_ten_client_processes_never_overlap(lab, unique_name, recipe):
    history = History()
    # a Redis lock or Redlock has no fencing token, so its store must accept writes without one
    store = FencedStore(lab.redis.client(), "store" + unique_name, fenced=recipe.gives_tokens)
    store.reset()
    # sessions as long as the leases: the claim is exclusion, and a 4 s ZooKeeper session
    # expired under load in a fresh-clone run (SessionExpiredError, one of ten clients)
    with spawn_clients(lab, recipe, n=10, name=unique_name, history=history, store=store,
                       hold=0.01, loops=2, session_timeout=10.0, ttl=10) as clients:
        assert len({client.pid for client in clients}) == 10
        rounds = clients.run(timeout=120)
    writes = store.writes()
    verdict = check_mutual_exclusion(writes, history=history)
    assert verdict.ok, verdict.explain()
    assert rounds == {f"client-{number}": 2 for number in range(1, 11)}
    assert len(writes) == 40 and all(write.accepted for write in writes)
    assert len([hold for hold in history.holds() if hold.end_reason == "released"]) == 20
    store.reset()


def test_single_steps_report_tokens_states_and_timeouts(lab, unique_name, store):
    with spawn_clients(lab, "zookeeper", n=2, name=unique_name, store=store, session_timeout=2.0) as clients:
        first, second = clients
        assert first.state == second.state == "idle"
        token = first.acquire(timeout=5)
        assert isinstance(token, int) and first.state == "holding"
        with pytest.raises(LockTimeout):
            second.acquire(timeout=0.3)
        assert second.state == "idle"
        assert first.write("mine") is True
        first.release()
        assert first.state == "idle"
        assert second.acquire(timeout=5) > token
        kinds = [event.kind for event in clients.history.events(client="client-1")]
        assert kinds == ["requested", "created", "acquired", "write", "released"]
        assert [write.client for write in store.writes()] == ["client-1"]


def test_unknown_recipe_is_refused_before_any_process_starts(lab):
    with pytest.raises(UnknownRecipe, match="no recipe named"):
        spawn_clients(lab, "chubby", n=1)


def test_a_name_becomes_its_recipe_once_and_a_recipe_passes_as_it_is():
    etcd = recipe_named("etcd")
    assert etcd is RECIPES.get("etcd") and etcd.name == "etcd" and etcd.service == "etcd"
    assert recipe_named(etcd) is etcd and recipe_named(etcd, among=("zookeeper", "etcd")) is etcd
    with pytest.raises(UnknownRecipe, match="no recipe named 'etcd' here; choose one of zookeeper"):
        recipe_named(etcd, among=("zookeeper",))
    with pytest.raises(UnknownRecipe, match="no recipe named 'zookeper'; choose one of zookeeper,"):
        recipe_named("zookeper")
    assert (recipe_named("redis").lease, recipe_named("etcd3-lock").lease, etcd.lease) == ("ttl", "ttl", "session")
    assert not recipe_named("redlock").gives_tokens and etcd.gives_tokens


def test_close_stops_every_process_even_a_paused_one(lab, unique_name):
    clients = spawn_clients(lab, "zookeeper", n=3, name=unique_name, session_timeout=2.0)
    pids = [client.pid for client in clients]
    clients[0].acquire(timeout=5)
    clients[1].send("acquire")  # blocked waiting for the lock while we close
    clients[2].pause(60)
    clients.close()
    assert not any(process_exists(pid) for pid in pids)
    assert set(clients.states().values()) == {"stopped"}


def test_a_killed_client_is_dead_and_refuses_commands(lab, unique_name):
    with spawn_clients(lab, "redis", n=1, name=unique_name, ttl=1) as clients:
        client = clients[0]
        client.kill()
        client.wait_for_state("dead", timeout=5)
        with pytest.raises(ClientError):
            client.acquire(timeout=1, reply_timeout=2)
        assert [e.detail["what"] for e in clients.history.events(kind="fault")] == ["kill"]


def test_session_details_reach_the_notebook(lab, unique_name):
    etcd = lab.etcd.client()
    try:
        with spawn_clients(lab, "zookeeper", n=1, name=unique_name) as zookeeper_clients, \
                spawn_clients(lab, "etcd", n=1, name=unique_name, ttl=3) as etcd_clients:
            session = zookeeper_clients[0].session
            assert session["session_id"] > 0 and len(bytes.fromhex(session["password"])) == 16
            lease_id = etcd_clients[0].session["lease_id"]
            assert etcd.get_lease_info(lease_id).TTL > 0
        deadline = time.monotonic() + 10
        # closing the client's session revokes its lease: the server reports it gone (TTL -1)
        while etcd.get_lease_info(lease_id).TTL != -1:
            assert time.monotonic() < deadline, "the closed client's lease is still alive"
            time.sleep(0.05)
    finally:
        etcd.close()



def test_a_client_of_the_group_can_have_a_timeout_of_its_own(lab, unique_name):
    # crash_then_fail_over's waiter: its timer must outlive an election the holder's is measured across
    with pytest.raises(ValueError, match="'client-3', which is not one of the 2 clients"):
        spawn_clients(lab, "etcd", n=2, name=unique_name, timeouts={"client-3": 5})
    with pytest.raises(ValueError, match="above 0"):
        spawn_clients(lab, "etcd", n=2, name=unique_name, timeouts={"client-2": 0})
    etcd = lab.etcd.client()
    try:
        with spawn_clients(lab, "etcd", n=2, name=unique_name, ttl=3, timeouts={"client-2": 7}) as clients:
            granted = {client.name: etcd.get_lease_info(client.session["lease_id"]).grantedTTL for client in clients}
        assert granted == {"client-1": 3, "client-2": 7}
    finally:
        etcd.close()

# ---- re-running a cell: the old clients go, unless asked to stay --------------------------
def test_a_rerun_spawn_closes_the_group_it_started_before_on_the_same_lock(lab, unique_name, capsys):
    first = spawn_clients(lab, "zookeeper", n=2, name=unique_name)
    first_pids = [client.pid for client in first]
    other_recipe = spawn_clients(lab, "etcd", n=1, name=unique_name, ttl=3)    # notebook 06: both on one name
    with spawn_clients(lab, "zookeeper", n=1, name=unique_name) as in_block:   # a with block is never replaced
        again = spawn_clients(lab, "zookeeper", n=2, name=unique_name)
        try:
            said = capsys.readouterr().out
            assert said.count("closed the 2 zookeeper clients on " + unique_name) == 1, said
            assert "this process started at" in said and "keep_previous=True" in said
            assert not any(process_exists(pid) for pid in first_pids)
            assert set(first.states().values()) == {"stopped"}
            assert set(other_recipe.states().values()) == {"idle"} and set(in_block.states().values()) == {"idle"}
            kept = spawn_clients(lab, "zookeeper", n=1, name=unique_name, keep_previous=True)
            assert "closed" not in capsys.readouterr().out and set(again.states().values()) == {"idle"}
            kept.close()
        finally:
            again.close()
            other_recipe.close()


def test_a_replaced_lab_closes_the_clients_bound_to_it(unique_name, capsys):
    first = labkit.up(zookeeper=0, etcd=1, redis=False, quiet=True)
    try:
        clients = spawn_clients(first, "etcd", n=2, name=unique_name, ttl=3)
        pids = [client.pid for client in clients]
        second = labkit.up(zookeeper=0, etcd=1, redis=False, quiet=True)
        second.down()
    finally:
        first.down()
    said = capsys.readouterr().out
    assert "stopped the lab this process started at" in said and "with 2 etcd clients on " + unique_name in said, said
    assert not any(process_exists(pid) for pid in pids) and set(clients.states().values()) == {"stopped"}


def test_the_next_start_reaps_the_client_log_folders_of_a_killed_run(lab, unique_name, tmp_path, monkeypatch):
    # a run killed before close() (SIGKILL, a kernel that died) leaves its folder behind
    code = ("import json, sys, time\nfrom labkit.clients import spawn_clients\n"
            "clients = spawn_clients(None, 'zookeeper', n=1, name=sys.argv[2], connections=json.loads(sys.argv[1]))\n"
            "print(clients.log_directory, flush=True)\ntime.sleep(120)\n")
    environment = dict(os.environ, TMPDIR=str(tmp_path))
    run = subprocess.Popen([sys.executable, "-c", code, json.dumps(connections_of(lab)), unique_name],
                           stdout=subprocess.PIPE, text=True, env=environment)
    try:
        killed_folder = run.stdout.readline().strip()
    finally:
        run.kill()
        run.wait(10)
    assert killed_folder.startswith(str(tmp_path / "labkit-clients-")), killed_folder
    assert os.listdir(killed_folder) == ["client-1.log"]
    mine = tmp_path / f"labkit-clients-{os.getpid()}-{process_start_time(os.getpid())}-alive"   # a live owner
    old_style = tmp_path / "labkit-clients-8h5bbcxa"   # made before folders named their owner
    mine.mkdir()
    old_style.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with spawn_clients(lab, "zookeeper", n=1, name=unique_name) as clients:
        assert not os.path.exists(killed_folder)
        assert sorted(os.listdir(tmp_path)) == sorted([mine.name, old_style.name, os.path.basename(clients.log_directory)])
    assert sorted(os.listdir(tmp_path)) == sorted([mine.name, old_style.name])
