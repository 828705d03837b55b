"""Where labs live on disk, and the reaper of labs whose owner died.

Each lab has a run folder ``$LABKIT_HOME/labs/<id>/`` with its data, logs and
``lab.json``: the owner's pid (None for a lab started by ``labkit up``, which outlives
the command), and for every node how to find it again (pid + start time, or container
id). A lab whose owner is gone is an orphan: the next ``up`` or ``down`` stops its
servers and removes its folder.

Two looks find a lab's servers. The state file comes first: the lab rewrites it whenever a
runner starts a process, a restart included. Then /proc, for what the file still missed (a
second process that attached to the lab and restarted a node while the owner kept its own
view, then both wrote the file): this user's processes running one of the lab's server
programs inside its run folder (``servers_inside``). Only a local lab is looked for there;
a container is removed by its lab's label.
"""
from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

from labkit.servers.runners.docker_container import reap_orphan_containers, remove_lab_containers
from labkit.servers.runners.process import LocalProcess, process_cmdline, process_start_time, servers_inside
from labkit.servers.services.postgres_leftovers import forget_postgres
from labkit.servers.run_folder import current_file, labkit_home, labs_dir, read_state, write_state
from labkit.timing import became_true

__all__ = ["current_file", "labkit_home", "labs_dir", "read_state", "write_state"]  # where a lab lives, re-exported


def owner_alive(state: dict) -> bool:
    """True for a detached lab (no owner) and for a lab whose owner process still runs."""
    pid = state.get("owner_pid")
    if pid is None:
        return True
    return process_start_time(pid) == state.get("owner_start_time")


def stop_recorded_nodes(state: dict, run_dir: Path) -> list[str]:
    """Stop every node the state file lists, trusting a pid only if it still has the start
    time recorded for it (pids get reused; some servers, like Redis, rewrite their command
    line, so the start time is the identity that holds). The lab's network proxy, if it
    has one, goes the same way; then whatever server of the lab still runs in its folder
    (see the module's docstring). Returns what was stopped, by name."""
    stopped = []
    network = state.get("network") or {}
    proxy = [{"name": "network proxy", "runner": network["runner"]}] if network.get("runner") else []
    local = [node for node in state.get("nodes", []) + proxy if node.get("runner", {}).get("backend") == "local"]
    killed = []
    for node in local:
        pid = node["runner"].get("pid")
        started = process_start_time(pid) if pid else None
        if started is not None and started == node["runner"].get("start_time") and (
                started != "unknown" or str(run_dir) in process_cmdline(pid)):
            _kill(pid)
            killed.append(pid)
            stopped.append(node["name"])
    if local:
        programs = {LocalProcess.from_state(node["runner"]).executable for node in local}
        for pid in servers_inside(run_dir, programs, leaders={node["runner"].get("pid") for node in local}):
            if pid not in killed:   # those killed above may not be gone yet
                _kill(pid)
                killed.append(pid)
                stopped.append(f"pid {pid} (not on file)")
    for pid in killed:   # all at once, then one wait: each takes a few ms to go
        _wait_gone(pid)
    for node in state.get("nodes", []):
        if node.get("kind") == "postgres":   # its shared memory segment, and a root lab's data folder
            forget_postgres(node["data_dir"])
    if state.get("backend") == "docker":
        stopped += remove_lab_containers(state["id"])
    return stopped


def _kill(pid: int) -> None:
    """SIGKILL, after SIGCONT: a frozen process would otherwise linger."""
    for signum in (signal.SIGCONT, signal.SIGKILL):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            return


def _wait_gone(pid: int, timeout: float = 5.0) -> None:
    became_true(lambda: _gone(pid), timeout, poll=0.02)


def _gone(pid: int) -> bool:
    """True once the process is reaped, gone, or a zombie that is not ours to reap."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)  # our own child: reap the zombie
        if done:
            return True
    except ChildProcessError:
        pass
    if process_start_time(pid) is None:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def remove_lab(run_dir: Path) -> None:
    shutil.rmtree(run_dir, ignore_errors=True)
    try:
        if current_file().read_text().strip() == run_dir.name:
            current_file().unlink()
    except OSError:
        pass


def reap_orphans(log=print) -> list[str]:
    """Stop and remove every lab whose owner died. Returns the ids reaped."""
    reaped = []
    for run_dir in sorted(labs_dir().iterdir()):
        state = read_state(run_dir)
        if state is None:
            # a folder without a readable state: a start that died very early
            if time.time() - run_dir.stat().st_mtime > 60:
                shutil.rmtree(run_dir, ignore_errors=True)
            continue
        if owner_alive(state):
            continue
        stopped = stop_recorded_nodes(state, run_dir)
        remove_lab(run_dir)
        reaped.append(state["id"])
        if log:
            log(f"reaped lab {state['id']} (its owner, pid {state.get('owner_pid')}, is gone): "
                f"stopped {', '.join(stopped) or 'nothing still running'}")
    for lab_id in reap_orphan_containers():
        reaped.append(lab_id)
        if log:
            log(f"reaped the containers of lab {lab_id} (its folder and its owner are gone)")
    return reaped


def down_all(say=print) -> list[str]:
    """Stop the `labkit up` lab and every orphan. Labs owned by live processes are left alone."""
    stopped = reap_orphans(log=say)
    for run_dir in sorted(labs_dir().iterdir()):
        data = read_state(run_dir)
        if data and data.get("detached"):
            names = stop_recorded_nodes(data, run_dir)
            remove_lab(run_dir)
            stopped.append(data["id"])
            say(f"stopped lab {data['id']}: {', '.join(names) or 'nothing was running'}")
    return stopped
