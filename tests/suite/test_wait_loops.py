"""One wait: ``labkit.timing.wait_until`` is the polled wait with a deadline, and it takes the
error to raise (docs/ARCHITECTURE.md). This test counts the deadline loops written by hand
in labkit and fails when one appears that is not listed below with the reason it stays.

A hand-rolled deadline loop, as read from the source with ``ast``: a ``while`` loop that
sleeps or waits in its body (``sleep(...)``, ``.wait(...)``) and checks a clock or a
deadline either in its condition or in an ``if`` that leaves the loop (break, return,
raise). A clock is ``time.monotonic()``, ``time.time()`` or ``time.perf_counter()``; a
deadline is a name like ``deadline``, ``until``, ``remaining``, ``lost_by``,
``give_up_at``. The loops are read without importing labkit; the last test runs
``wait_until`` itself, for the growing poll a node's readiness probe uses."""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from labkit.timing import wait_until

pytestmark = pytest.mark.no_servers

LABKIT = Path(__file__).resolve().parents[2] / "labkit"
CLOCKS = {"monotonic", "time", "perf_counter"}
DEADLINE_WORDS = ("deadline", "until", "remaining", "lost_by", "give_up_at")

# The loops that stay, by (file, function), each with why. Nothing else may poll a deadline
# by hand: use wait_until (error= for the error to raise), wait_for_value, became_true or
# seconds_until.
ALLOWED = {
    ("labkit/timing.py", "wait_until"): "the one polled wait itself",
    ("labkit/clients/client.py", "LockClient.wait_for_state"):
        "waits on a Condition that the reader thread notifies at every event and reply: it wakes at "
        "once, where a poll would lag; only the process's exit is polled",
    ("labkit/lessons/clock_drift.py", "SlowClockHolder.answer"):
        "waits on a Condition that its reader thread notifies at every answer, as LockClient.wait_for_state "
        "does: it wakes at once, where a poll would lag",
    ("labkit/clients/crowd.py", "_Worker.call"):
        "one Event per call, set by that call's own reply: with a thousand contenders waiting, a poll "
        "each would cost the CPU the benchmark measures",
    ("labkit/record/history.py", "History.wait_for"):
        "waits on the history's Condition, notified by every new event: it wakes at once",
    ("labkit/locks/zookeeper.py", "ZooKeeperLock._wait_until_lowest"):
        "the recipe a learner reads: it waits on a watch, not a poll, and re-checks at every wake-up",
    ("labkit/locks/zookeeper_deadline.py", "HolderDeadline._watch"):
        "the holder's heartbeat: sends a request every beat while it holds (work, not a poll)",
    ("labkit/locks/redis_lock.py", "RedisLock.acquire"):
        "the recipe a learner reads: Redis cannot say when a key goes, so SET NX is retried in plain sight, "
        "and a timeout is the recipe's own LockTimeout (None waits forever)",
    ("labkit/locks/redlock.py", "Redlock.acquire"):
        "the algorithm a learner reads: a round on every instance, a random pause, again; LockTimeout at the end",
    ("labkit/locks/etcd_session.py", "EtcdSession._keep_alive"):
        "the session's keep-alive: sends a refresh every TTL/3 (work, not a poll)",
    ("labkit/locks/zookeeper_semaphore.py", "ZooKeeperSemaphore._wait_for_slot"):
        "the semaphore recipe a learner reads: it waits on a watch of the leases, not a poll",
    ("labkit/lessons/semaphores.py", "_loop_together.loop"):
        "the run itself: each contender acquires, holds and releases until the time is up (work, not a wait)",
    ("labkit/lessons/zookeeper_recipe.py", "NaiveLock.acquire"):
        "the naive recipe a learner reads next to the real one: it waits on a watch, not a poll",
    ("labkit/lessons/etcd_experiments.py", "sample_leases"):
        "a sampler: reads every lease's TTL at a pace for a time; each reading is kept",
    ("labkit/lessons/etcd_experiments.py", "careless_holder.write_carelessly"):
        "the experiment itself: the careless holder writes at a pace until it has written enough",
    ("labkit/lessons/redis_vs_consensus.py", "pttl_until"): "a sampler: each PTTL read is kept",
    ("labkit/lessons/redlock_and_clocks.py", "zookeeper_session_across_step"):
        "a sampler: checks the node at a pace for the whole watch, to see that it stayed",
    ("labkit/lessons/redlock_and_clocks.py", "etcd_lease_countdown"): "a sampler: each TTL read is kept",
    ("labkit/widgets/driver.py", "ClientDriver._hold"):
        "the hold a panel shows: writes once a second for the hold's length, stops when the panel closes",
}


def reads_clock(node: ast.AST) -> bool:
    for inner in ast.walk(node):
        if isinstance(inner, ast.Call) and called(inner) in CLOCKS:
            return True
        if isinstance(inner, ast.Name) and any(word in inner.id for word in DEADLINE_WORDS):
            return True
    return False


def called(call: ast.Call) -> str | None:
    function = call.func
    return function.attr if isinstance(function, ast.Attribute) else function.id if isinstance(function, ast.Name) \
        else None


def is_deadline_loop(node: ast.AST) -> bool:
    if not isinstance(node, ast.While):
        return False
    if not any(isinstance(inner, ast.Call) and called(inner) in ("sleep", "wait") for inner in ast.walk(node)):
        return False
    # a name the loop sets from a clock (waited = time.monotonic() - started) is a clock too
    timed = {target.id for inner in ast.walk(node) if isinstance(inner, ast.Assign) and reads_clock(inner.value)
             for target in inner.targets if isinstance(target, ast.Name)}

    def checks_time(test: ast.AST) -> bool:
        return reads_clock(test) or any(isinstance(name, ast.Name) and name.id in timed for name in ast.walk(test))

    leaves = (ast.Break, ast.Return, ast.Raise)
    return checks_time(node.test) or any(
        isinstance(inner, ast.If) and checks_time(inner.test) and any(isinstance(n, leaves) for n in ast.walk(inner))
        for inner in ast.walk(node))


def deadline_loops(path: Path) -> list[tuple[str, int]]:
    """(enclosing function, as Class.method or outer.inner, line) of each deadline loop."""
    found = []

    def visit(node: ast.AST, where: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, where + [child.name])
            else:
                if is_deadline_loop(child):
                    found.append((".".join(where) or "<module>", child.lineno))
                visit(child, where)

    visit(ast.parse(path.read_text(), str(path)), [])
    return found


@functools.cache
def all_loops() -> dict[tuple[str, str], list[int]]:
    loops: dict[tuple[str, str], list[int]] = {}
    for path in sorted(LABKIT.rglob("*.py")):
        for function, line in deadline_loops(path):
            loops.setdefault((str(path.relative_to(LABKIT.parent)), function), []).append(line)
    return loops


def test_no_deadline_loop_by_hand_outside_the_allowed_ones():
    found = all_loops()
    new = [f"{path}:{line} in {function}" for (path, function), lines in sorted(found.items())
           if (path, function) not in ALLOWED for line in lines]
    assert not new, "a deadline loop written by hand: use labkit.timing.wait_until (error= says what to " \
                    "raise), or list it in ALLOWED with why it must stay:\n" + "\n".join(new)
    twice = [f"{path} {function}" for (path, function), lines in found.items() if len(lines) > 1]
    assert not twice, f"one allowed loop per function: {twice}"


def test_every_allowed_loop_is_still_there():
    gone = sorted(set(ALLOWED) - set(all_loops()))
    assert not gone, f"drop from ALLOWED (the loop is gone or moved): {gone}"


def test_a_growing_poll_stops_at_its_ceiling():
    """wait_until's max_poll (a node's readiness probe): the pause grows by half from 20 ms
    up to 200 ms, so half a second holds at most 8 probes (at 0, 20, 50, 95, 163, 264, 416
    and 616 ms); a steady 20 ms would make 26. A loaded machine only makes fewer."""
    calls = []
    with pytest.raises(TimeoutError):
        wait_until(lambda: calls.append(1), "nothing", timeout=0.5, poll=0.02, max_poll=0.2)
    assert 2 <= len(calls) <= 8, calls


def test_a_loop_is_found_in_a_sample(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import time\n"
        "def ready(probe, timeout):\n"
        "    deadline = time.monotonic() + timeout\n"
        "    while not probe():\n"                                   # found: an if with raise
        "        if time.monotonic() > deadline:\n"
        "            raise TimeoutError('late')\n"
        "        time.sleep(0.01)\n"
        "def gone(client, timeout):\n"
        "    started = time.monotonic()\n"
        "    while client.exists('k'):\n"                           # found: a name set from the clock
        "        waited = time.monotonic() - started\n"
        "        if waited > timeout:\n"
        "            raise TimeoutError('still there')\n"
        "        time.sleep(0.01)\n"
        "class Sampler:\n"
        "    def run(self, until):\n"
        "        while time.monotonic() < until:\n"                  # found: the condition
        "            self.stop.wait(0.1)\n"
        "    def loop(self):\n"
        "        while not self.stop.is_set():\n"                    # not a deadline
        "            self.stop.wait(1.0)\n")
    assert deadline_loops(sample) == [("ready", 4), ("gone", 10), ("Sampler.run", 17)]
