"""The labs a process started, and what re-running a notebook cell does to them
(labkit/servers/live_labs.py), on real Redis-only labs (a fraction of a second each): two labs
kept beside each other are stopped together by the next ``labkit.up()``, oldest first, in one
line that names both; a process that ends without ``lab.down()`` stops the labs it owns on its
way out; outside a Jupyter kernel the messages say "this process". Replacing one lab, and a
lab inside its ``with`` block: tests/servers/test_servers.py."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

import labkit
from labkit.servers.live_labs import stop_previous_labs, this_process
from labkit.servers.runners.process import process_state

REDIS_ONLY = dict(zookeeper=0, etcd=0, redis=True, quiet=True)


def pids(lab) -> list[int]:
    return [node.pid for node in lab.nodes if node.pid]


def gone(pid: int) -> bool:
    return process_state(pid) == "stopped"


def test_outside_a_kernel_the_messages_say_this_process():
    assert this_process() == "this process"


def test_the_labs_kept_beside_each_other_are_stopped_together_oldest_first(capsys):
    first = labkit.up(**REDIS_ONLY)
    second = labkit.up(**REDIS_ONLY, keep_previous=True)
    started = pids(first) + pids(second)
    try:
        assert not first.stopped and not second.stopped, "keep_previous=True kept the first"
        capsys.readouterr()
        stopped = stop_previous_labs()
        assert stopped == [first, second] and first.stopped and second.stopped
        said = capsys.readouterr().out.strip()
        assert re.fullmatch(r"stopped the 2 labs this process started at \d\d:\d\d:\d\d \(redis=1\) and "
                            r"\d\d:\d\d:\d\d \(redis=1\) before starting a new one "
                            r"\(labkit.up\(keep_previous=True\) keeps them\)", said), said
        assert all(gone(pid) for pid in started)
        assert stop_previous_labs() == [] and capsys.readouterr().out == "", "nothing left to stop, nothing said"
    finally:
        first.down()
        second.down()


@pytest.mark.local_backend   # reads the servers' pids
def test_a_process_that_ends_without_down_stops_the_labs_it_owns(tmp_path):
    script = textwrap.dedent("""
        import labkit
        lab = labkit.up(zookeeper=0, etcd=0, redis=True, quiet=True)
        print(" ".join(str(node.pid) for node in lab.nodes), flush=True)
    """)   # and the interpreter exits, lab still up
    owner = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, LABKIT_HOME=str(tmp_path), LABKIT_BACKEND="local"))
    assert owner.returncode == 0, owner.stderr
    started = [int(pid) for pid in owner.stdout.split()]
    assert started, owner.stdout
    # atexit stopped them before the interpreter was gone: no reaper, no wait
    assert all(gone(pid) for pid in started), [process_state(pid) for pid in started]
    assert not list((tmp_path / "labs").glob("*/lab.json")), "the lab's state is removed with it"
