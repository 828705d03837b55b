"""How ./lab.sh test fits its time: the races part in two groups side by side (tests/legs.py
RACE_GROUPS, scripts/lib.sh run_pytest_in_parts), and the legs of scripts/ci/test.sh in two
lanes: the local leg then the non-root leg in the foreground; beside them at nice 19 the
Python-versions leg (raised to normal priority once the local leg is done: nothing may starve
under load) and the Docker leg's builds, whose tests wait for the local leg (a lock test.sh
holds) and then run beside the non-root leg."""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import RECORDING_TEST
from legs import LOAD_SENSITIVE, RACE_GROUPS, RACES

pytestmark = pytest.mark.no_servers  # the Python-versions leg runs these

ROOT = Path(__file__).resolve().parents[2]


def test_the_race_groups_hold_every_file_of_the_races_part_once():
    grouped = [name for group in RACE_GROUPS for name in group]
    assert sorted(grouped) == sorted(RACES + LOAD_SENSITIVE) and len(grouped) == len(set(grouped)), RACE_GROUPS
    # one worker a group: the races part runs with as many workers as there are groups
    assert len(RACE_GROUPS) == 2
    assert "--part races -n 2 --dist loadfile" in (ROOT / "scripts" / "lib.sh").read_text()


@pytest.mark.slow   # a pytest -n 2 session: ~5 s alone, 30 s on a loaded machine
def test_in_the_races_part_each_group_runs_whole_on_a_worker_of_its_own(pytester, monkeypatch):
    pytester.makeconftest((Path(__file__).parents[1] / "conftest.py").read_text())
    pytester.makepyfile(**{module: (Path(__file__).parents[1] / f"{module}.py").read_text()
                           for module in ("legs", "helpers", "needs")})   # what conftest.py imports
    first, second = (sorted(group)[:2] for group in RACE_GROUPS)
    pytester.makepyfile(**{name.removesuffix(".py"): RECORDING_TEST for name in first + second})
    pytester.makepyfile(test_plain=RECORDING_TEST)   # not a race: not in the races part
    home, record = pytester.path / "home", pytester.path / "record.jsonl"
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.setenv("LABKIT_HOME", str(home))
    monkeypatch.setenv("RECORD", str(record))
    done = pytester.runpytest_subprocess("--part", "races", "-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider")
    done.assert_outcomes(passed=8)
    worker_of = {}
    for file, worker, labkit_home in (json.loads(line) for line in record.read_text().splitlines()):
        assert labkit_home == str(home / "workers" / f"races-{worker}")   # apart from the rest part's gw0...
        worker_of.setdefault(file, set()).add(worker)
    assert "test_plain.py" not in worker_of
    assert worker_of[first[0]] == worker_of[first[1]] and len(worker_of[first[0]]) == 1, worker_of
    assert worker_of[second[0]] == worker_of[second[1]] and len(worker_of[second[0]]) == 1, worker_of
    assert worker_of[first[0]] != worker_of[second[0]], worker_of   # the two groups side by side


# Fake legs for a copy of scripts/ci/test.sh: each records its priority and LABKIT_HOME. The
# local leg waits (30 s at most) for the Python-versions leg to say it started: the two overlap.
FAKE_LEGS = {
    "local.sh": 'echo "local $(nice) $LABKIT_HOME $*" >> "$RECORD"\nexec 3<>"$FIFO"\n'
                'read -r -t 30 -u 3 _ || echo "local waited in vain" >> "$RECORD"\necho "local ends" >> "$RECORD"\n',
    "pythons.sh": 'echo "pythons $(nice) $LABKIT_HOME" >> "$RECORD"\nexec 3<>"$FIFO"\necho started >&3\n',
    "nonroot.sh": '[ "${1:-}" = --can-run ] && exit 0\necho "nonroot $(nice)" >> "$RECORD"\n',
    "docker.sh": 'echo "docker builds $(nice) $LABKIT_HOME" >> "$RECORD"\nflock -s "$LABKIT_DOCKER_TESTS_AFTER" true\n'
                 'echo "docker tests" >> "$RECORD"\nexit "$EXIT_DOCKER"\n',
}


@pytest.mark.skipif(not shutil.which("flock"), reason="flock (util-linux) is not installed")
@pytest.mark.parametrize("docker_exit, expected", [(0, 0), (77, 0), (1, 1)])
def test_the_legs_run_in_two_lanes_and_the_docker_tests_wait_for_the_local_leg(tmp_path, docker_exit, expected):
    tree = tmp_path / "tree"
    (tree / "scripts" / "ci").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "ci" / "test.sh", tree / "scripts" / "ci" / "test.sh")
    lib = (ROOT / "scripts" / "lib.sh").read_text() + "\ninstall_test_extras() { :; }\n"
    (tree / "scripts" / "lib.sh").write_text(lib)
    for name, body in FAKE_LEGS.items():
        (tree / "scripts" / "ci" / name).write_text("#!/usr/bin/env bash\n" + body)
        (tree / "scripts" / "ci" / name).chmod(0o755)
    record, fifo, home = tmp_path / "record", tmp_path / "fifo", tmp_path / "home"
    os.mkfifo(fifo)
    environment = dict(os.environ, RECORD=str(record), FIFO=str(fifo), LABKIT_HOME=str(home),
                       EXIT_DOCKER=str(docker_exit), TMPDIR=str(tmp_path))
    # held open here: what the Python-versions leg writes stays in the pipe even if it ends
    # before the local leg opens it (a pipe's data goes with its last descriptor)
    held = os.open(fifo, os.O_RDWR)
    try:
        done = subprocess.run(["bash", str(tree / "scripts" / "ci" / "test.sh"), "-x"], capture_output=True,
                              text=True, timeout=120, env=environment)
    finally:
        os.close(held)
    assert done.returncode == expected, done.stdout + done.stderr
    assert not list(tmp_path.glob("labkit-legs.*")), "the legs' results and logs are removed at the end"
    lines = record.read_text().splitlines()
    mine = os.nice(0)
    assert f"local {mine} {home} -x" in lines, lines                     # in the foreground, its own args
    assert "local waited in vain" not in lines, lines                     # the Python-versions leg ran beside
    # the non-root leg's notebooks start servers and assert margins: after the local leg, at its
    # priority, never beside it; the Docker leg's tests wait for the local leg (then run beside
    # the non-root leg, in either order)
    assert f"pythons 19 {home}/pythons-leg" in lines and f"nonroot {mine}" in lines, lines
    assert lines.index("local ends") < lines.index(f"nonroot {mine}"), lines
    assert lines.index("local ends") < lines.index("docker tests"), lines
    assert f"docker builds {mine} {home}/docker-leg" in lines, lines    # it lowers its own priority (as root)
    table = {line.split()[1]: line.split()[2] for line in done.stdout.splitlines()
             if line.split()[1:2] in (["local"], ["nonroot"], ["pythons"], ["docker"], ["total"])}
    assert table == {"local": "passed", "nonroot": "passed", "pythons": "passed",
                     "docker": {0: "passed", 77: "skipped", 1: "FAILED"}[docker_exit],
                     "total": "FAILED" if expected else "passed"}, done.stdout


def test_the_docker_leg_builds_low_then_waits_for_the_gate_before_its_tests():
    leg = (ROOT / "scripts" / "ci" / "docker.sh").read_text()
    lines = [line.strip() for line in leg.splitlines()]
    lowered = next(i for i, line in enumerate(lines) if line.startswith("renice -n 19 -p $$"))
    engine = next(i for i, line in enumerate(lines) if line.startswith("start_dockerd || exit 1"))
    build = next(i for i, line in enumerate(lines) if "docker/build.sh ||" in line)
    gate = next(i for i, line in enumerate(lines) if line.startswith('flock -s "$gate" true'))
    raised = next(i for i, line in enumerate(lines) if line.startswith("renice -n 0 -p $$"))
    tests = next(i for i, line in enumerate(lines) if line.startswith("run_pytest_in_parts "))
    assert lowered < engine < build < gate < raised < tests


def test_the_pythons_lane_is_raised_once_the_local_leg_is_done():
    lines = [line.strip() for line in (ROOT / "scripts" / "ci" / "test.sh").read_text().splitlines()]
    started = next(i for i, line in enumerate(lines) if "beside pythons run_leg pythons nice -n 19" in line)
    local = next(i for i, line in enumerate(lines) if line.startswith("run_leg local "))
    released = next(i for i, line in enumerate(lines) if line.startswith('flock -u "$gate"'))
    raised = next(i for i, line in enumerate(lines) if "renice_tree 0" in line)
    assert started < local < released < raised


def nice_of_each_thread(pid: int) -> dict[int, int]:
    """Every thread of pid and of the processes below it: thread id -> nice (/proc stat field 19)."""
    found = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:    # it ended while we walked
        return found
    for task in tasks:
        try:
            stat = (task / "stat").read_text()
            children = (task / "children").read_text().split()
        except (FileNotFoundError, ProcessLookupError):    # a thread or process that ended meanwhile
            continue
        found[int(task.name)] = int(stat.rsplit(")", 1)[1].split()[16])
        for child in children:
            found.update(nice_of_each_thread(int(child)))
    return found


def can_raise_a_priority() -> bool:
    """Root with CAP_SYS_NICE: not another user, nor root in a container that drops it (Docker's default)."""
    # lowered here, so that it is surely at 19 before the raise is tried (with `nice -n 19 sleep`
    # the raise could land before nice had lowered it, and pass where raising is refused: CI, the
    # Debian 13 container)
    probe = subprocess.Popen(["sleep", "30"])
    try:
        os.setpriority(os.PRIO_PROCESS, probe.pid, 19)
        assert os.getpriority(os.PRIO_PROCESS, probe.pid) == 19
        os.setpriority(os.PRIO_PROCESS, probe.pid, 0)
        return True
    except PermissionError:
        return False
    finally:
        probe.kill()
        probe.wait()


def test_renice_tree_raises_a_process_its_threads_and_what_runs_below_it():
    if os.geteuid() != 0 or not can_raise_a_priority():
        pytest.skip("this user may not raise a priority (renice_tree then does nothing): not root, or a container")
    threads = "import threading, time; [threading.Thread(target=time.sleep, args=(60,), daemon=True).start() for _ in range(2)]; time.sleep(60)"
    tree = subprocess.Popen(["nice", "-n", "19", "bash", "-c", f'sleep 60 & {sys.executable} -c "{threads}" & wait'])
    try:
        # the precondition: the shell, its sleep and the three threads of its python are there (this
        # interpreter, not `python3`, which may be a shim that execs through short-lived processes)
        deadline = time.monotonic() + 30
        while len(nice_of_each_thread(tree.pid)) < 5:
            assert time.monotonic() < deadline, nice_of_each_thread(tree.pid)
            time.sleep(0.05)
        assert set(nice_of_each_thread(tree.pid).values()) == {19}
        subprocess.run(["bash", "-c", f"source scripts/lib.sh && renice_tree 0 {tree.pid}"], cwd=ROOT, check=True, timeout=30)
        assert set(nice_of_each_thread(tree.pid).values()) == {0}, nice_of_each_thread(tree.pid)
    finally:
        subprocess.run(["pkill", "-KILL", "-P", str(tree.pid)])
        tree.kill()
        tree.wait()
