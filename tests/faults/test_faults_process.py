"""Faults on a process (labkit/faults/process.py), beyond test_faults.py's pause-and-timer and
kill: freeze_process returns only once the kernel reports the process stopped; a pause ended
early (the timer cancelled, resume) lets it run and records both faults; a resume timer
firing after a kill is harmless (thaw_process says False); a pause must last; a history is
optional and a fault names its target ("pid N", a node's name); and a real server node
(Redis, in a lab of this module's own) is frozen by its own runner: it answers nothing until
resumed, and the faults are recorded under its name."""
from __future__ import annotations

import subprocess
import sys

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from labkit.faults.process import (ClientProcess, describe, freeze_process, kill, pause, record_fault, resume,
                                   thaw_process)
from labkit.record.history import History
from labkit.servers.runners.process import process_state, wait_for_process_state


@pytest.fixture
def sleeper():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield process
    finally:
        process.kill()
        process.wait(10)


def faults_of(history):
    return [(event.detail["what"], event.detail["target"]) for event in history.events(kind="fault")]


@pytest.mark.no_servers
def test_freeze_returns_once_the_process_is_stopped_and_thaw_lets_it_run(sleeper):
    freeze_process(sleeper.pid)
    assert process_state(sleeper.pid) == "paused"
    assert thaw_process(sleeper.pid) is True
    assert wait_for_process_state(sleeper.pid, lambda state: state == "running", timeout=10)


@pytest.mark.no_servers
def test_a_pause_ended_early_lets_the_process_run_and_records_both_faults(sleeper):
    history = History()
    timer = pause(sleeper.pid, 60, history=history)
    assert process_state(sleeper.pid) == "paused" and timer.daemon and timer.is_alive()
    timer.cancel()
    resume(sleeper.pid, history=history)
    assert wait_for_process_state(sleeper.pid, lambda state: state == "running", timeout=10)
    assert faults_of(history) == [("pause", f"pid {sleeper.pid}"), ("resume", f"pid {sleeper.pid}")]
    assert history.events(kind="fault")[0].detail["seconds"] == 60


@pytest.mark.no_servers
def test_a_resume_after_a_kill_is_harmless(sleeper):
    timer = pause(sleeper.pid, 60)
    history = History()
    kill(sleeper.pid, history=history)
    assert sleeper.wait(10) == -9 and faults_of(history) == [("kill", f"pid {sleeper.pid}")]
    timer.cancel()
    assert thaw_process(sleeper.pid) is False, "the process is gone: False, not ProcessLookupError"


@pytest.mark.no_servers
@pytest.mark.parametrize("seconds", [0, -1])
def test_a_pause_must_last(sleeper, seconds):
    with pytest.raises(ValueError, match="positive number of seconds"):
        pause(sleeper.pid, seconds)
    assert process_state(sleeper.pid) == "running", "nothing was frozen"


@pytest.mark.no_servers
def test_a_fault_names_its_target_and_a_history_is_optional():
    assert describe(4242) == "pid 4242"
    history = History()
    record_fault(None, 4242, "pause", seconds=1)   # nothing to record into: no error
    record_fault(history, type("Node", (), {"name": "zk2"})(), "kill")
    assert faults_of(history) == [("kill", "zk2")]


@pytest.fixture(scope="module")
def redis_lab(lab_of):
    return lab_of(zookeeper=0, etcd=0, redis=True)


@pytest.mark.backend   # the node pauses through its runner: a process or a container
def test_a_paused_server_node_answers_nothing_until_resumed(redis_lab):
    node = redis_lab.redis.primary
    assert not isinstance(node, ClientProcess), "a node takes no commands: it is no lock client"
    client = redis_lab.redis.client(socket_timeout=0.5, retry=Retry(NoBackoff(), 0))   # one try, not four
    history = History()
    timer = pause(node, 60, history=history)
    try:
        assert node.state == "paused"
        with pytest.raises(redis.TimeoutError):
            client.ping()
    finally:
        timer.cancel()
        resume(node, history=history)
    client = redis_lab.redis.client(socket_timeout=10)
    assert client.ping() and node.state == "running"
    assert faults_of(history) == [("pause", node.name), ("resume", node.name)]
