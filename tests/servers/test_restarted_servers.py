"""Nothing leaks: a server restarted after a kill (node.start(), lab.redlock.crash_restart) is
stopped by `labkit down` and by the reaper, like the process it replaced.

A restart starts a new process with a new pid. The reaper and `labkit down` find a lab's
servers through its state file (lab.json), so each start must be recorded there; as a second
line of defence the reaper also stops this user's processes whose working directory or command
line lies inside the dead lab's run folder. These tests count what is left both ways: by the
pids the owner printed, and by a look through /proc written here, independently of labkit.
"""
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import labkit
from labkit.servers import state as lab_state
from labkit.servers.runners.process import process_state

pytestmark = pytest.mark.local_backend  # pids and /proc: local processes only


def gone(pid: int) -> bool:
    return process_state(pid) == "stopped"


def processes_inside(folder: str) -> list[int]:
    """This user's live processes whose working directory or command line is inside ``folder``
    (a deleted folder too: the kernel then shows its old path with " (deleted)")."""
    inside = folder.rstrip("/") + "/"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if entry.stat().st_uid != os.getuid():
                continue
            cwd = os.readlink(entry / "cwd").removesuffix(" (deleted)") + "/"
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if cwd.startswith(inside) or any(arg == folder or arg.startswith(inside) for arg in argv):
            if not gone(int(entry.name)):
                found.append(int(entry.name))
    return found


def none_left(folder: str) -> bool:
    """True if no process is left inside ``folder``; those left are killed first, so that a
    failing test leaks nothing into the next."""
    left = processes_inside(folder)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return not left


def run_owner(body: str) -> dict:
    """Run ``body`` in a child Python that starts a lab (``lab``) and prints what the body put in
    ``seen`` as JSON, then dies by SIGKILL without cleaning up: a kernel that died."""
    script = "import json, os, signal, subprocess, sys, labkit\n" + textwrap.dedent(body) + textwrap.dedent("""
        seen.update(id=lab.id, run_dir=str(lab.run_dir), pids=[node.pid for node in lab.nodes])
        print(json.dumps(seen), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    owner = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "LABKIT_BACKEND": "local"})
    assert owner.returncode == -signal.SIGKILL, owner.stdout + owner.stderr
    return json.loads(owner.stdout.splitlines()[-1])


def test_servers_restarted_before_their_owner_died_are_reaped():
    seen = run_owner("""
        lab = labkit.up(zookeeper=0, etcd=1, redis=False, redlock=3, quiet=True)
        etcd = lab.node("etcd1")
        seen = {"old": [etcd.pid, lab.node("r2").pid]}
        etcd.kill(); etcd.start(); etcd.wait_ready()    # notebook 05's way: kill, then start
        lab.redlock.crash_restart("r2")                 # notebook 08's way
        seen["new"] = [etcd.pid, lab.node("r2").pid]
    """)
    assert set(seen["new"]).isdisjoint(seen["old"]) and not any(gone(pid) for pid in seen["new"])
    assert set(seen["new"]) <= set(processes_inside(seen["run_dir"]))
    try:
        recorded = lab_state.read_state(Path(seen["run_dir"]))
        assert {node["runner"]["pid"] for node in recorded["nodes"]} == set(seen["pids"])   # the new pids are on file
        with labkit.up(zookeeper=0, etcd=0, redis=True, quiet=True) as bystander:   # reaps the orphan as it starts
            assert none_left(seen["run_dir"])
            assert all(gone(pid) for pid in seen["pids"])
            assert not Path(seen["run_dir"]).exists()
            assert all(node.state == "running" for node in bystander.nodes)   # a live owner's lab is not touched
    finally:
        none_left(seen["run_dir"])


def test_the_reaper_stops_what_the_state_file_does_not_know_and_nothing_else(tmp_path):
    """The second line of defence: a server the state file does not list (here started by hand:
    a redis-server in a node's folder, a Python, the proxy's program, naming a file of the lab)
    in a session of its own, as labkit starts its servers, is stopped. Kept: a program the lab
    does not run, even inside its folder (a learner's shell, a ``tail -f`` of a log); the lab's
    program inside it but started in a terminal's session (a learner's Python); and the lab's
    program naming a path that only starts the same."""
    sleeper = [sys.executable, "-c", "import time; time.sleep(300)"]
    seen = run_owner(f"""
        import shutil
        lab = labkit.up(zookeeper=0, etcd=0, redis=True, network=True, quiet=True)
        quiet = dict(start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # not our pipe
        inside = subprocess.Popen([shutil.which("redis-server"), "--port", "0", "--unixsocket", "stray.sock", "--save", "",
                                   "--appendonly", "no"],
                                  cwd=lab.node("redis1").data_dir, **quiet)
        named = subprocess.Popen({sleeper!r} + [str(lab.run_dir / "notes")], cwd="/", **quiet)
        seen = {{"strays": [inside.pid, named.pid]}}
    """)
    learner = subprocess.Popen(["sleep", "300"], cwd=seen["run_dir"], start_new_session=True)
    by_hand = subprocess.Popen(sleeper, cwd=seen["run_dir"])   # the proxy's program, in this session
    neighbour = subprocess.Popen(sleeper + [seen["run_dir"] + "-other"], cwd=str(tmp_path), start_new_session=True)
    try:
        assert not any(gone(pid) for pid in seen["strays"] + seen["pids"])
        assert lab_state.reap_orphans(log=None) == [seen["id"]]
        assert all(gone(pid) for pid in seen["strays"] + seen["pids"])
        assert sorted(processes_inside(seen["run_dir"])) == sorted([learner.pid, by_hand.pid])
        assert neighbour.poll() is None   # the proxy's program, a look-alike path: not this lab's
    finally:
        for keep in (learner, by_hand, neighbour):
            keep.kill()
            keep.wait()
        none_left(seen["run_dir"])


@pytest.mark.slow   # 4-6 s alone, 12-18 s beside other runs
def test_labkit_down_stops_a_server_restarted_by_another_process():
    """`labkit up` starts a lab no process owns; a notebook attaches and restarts a node;
    `labkit down` must stop the new process, not only the one it replaced."""
    cli = [sys.executable, "-m", "labkit.cli"]
    env = {**os.environ, "LABKIT_BACKEND": "local"}
    started = subprocess.run(cli + ["up", "--zookeeper", "0", "--etcd", "1", "--redlock", "3"],
                             capture_output=True, text=True, timeout=120, env=env)
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        lab = labkit.attach()
        before = [node.pid for node in lab.nodes]
        etcd = lab.node("etcd1")
        etcd.kill()
        etcd.start()
        etcd.wait_ready()
        lab.redlock.crash_restart("r1")
        after = [node.pid for node in lab.nodes]
        assert len(set(after) - set(before)) == 2 and not any(gone(pid) for pid in after)
        assert lab_state.read_state(lab.run_dir)["owner_pid"] is None   # still nobody's: `labkit down` stops it
    finally:
        stopped = subprocess.run(cli + ["down"], capture_output=True, text=True, timeout=120, env=env)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert none_left(str(lab.run_dir))
    assert all(gone(pid) for pid in after)


@pytest.mark.slow   # 4-6 s alone, 12-18 s beside other runs
def test_every_kind_of_server_records_its_restart():
    """Every restart path goes through the runner, which records the new pid: ZooKeeper with the
    clock shim, Redis and its replica, a Sentinel, PostgreSQL (copied from its template only at
    the first start), each with links through the lab's fault proxy, whose own pid is on file too."""
    with labkit.up(zookeeper=1, etcd=0, redis=True, replica=True, sentinels=1, postgres=True, network=True,
                   clocks=True, backend="local", quiet=True) as lab:
        first = {node.name: node.pid for node in lab.nodes}
        for node in lab.nodes:
            node.kill()
            node.start()
            node.wait_ready()
        now = {node.name: node.pid for node in lab.nodes}
        recorded = lab_state.read_state(lab.run_dir)
        assert {node["name"]: node["runner"]["pid"] for node in recorded["nodes"]} == now
        assert not set(now.values()) & set(first.values()) and not any(gone(pid) for pid in now.values())
        assert recorded["network"]["runner"]["pid"] == lab.network.runner.pid and not gone(lab.network.runner.pid)
        assert recorded["owner_pid"] == os.getpid()
    assert all(gone(pid) for pid in now.values())
