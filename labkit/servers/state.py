"""Where labs live on disk, and the reaper of labs whose owner died.

Each lab has a run folder ``$LABKIT_HOME/labs/<id>/`` with its data, logs and
``lab.json``: the owner's pid (None for a lab started by ``labkit up``, which outlives
the command), and for every node how to find it again (pid + start time, or container
id). A lab whose owner is gone is an orphan: the next ``up`` or ``down`` stops its
servers and removes its folder.
"""
from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

from labkit.servers.runners.docker_container import reap_orphan_containers, remove_lab_containers
from labkit.servers.runners.process import process_cmdline, process_start_time
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
    has one, goes the same way."""
    stopped = []
    network = state.get("network") or {}
    proxy = [{"name": "network proxy", "runner": network["runner"]}] if network.get("runner") else []
    for node in state.get("nodes", []) + proxy:
        runner = node.get("runner", {})
        if runner.get("backend") == "local" and runner.get("pid"):
            pid = runner["pid"]
            started = process_start_time(pid)
            same = started == runner.get("start_time") and (started != "unknown" or str(run_dir) in process_cmdline(pid))
            if same:
                for signum in (signal.SIGCONT, signal.SIGKILL):
                    try:
                        os.kill(pid, signum)
                    except ProcessLookupError:
                        break
                _wait_gone(pid)
                stopped.append(node["name"])
        if node.get("kind") == "postgres":   # its shared memory segment, and a root lab's data folder
            forget_postgres(node["data_dir"])
    if state.get("backend") == "docker":
        stopped += remove_lab_containers(state["id"])
    return stopped


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
