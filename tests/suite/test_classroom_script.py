"""scripts/maint/classroom.sh, the workshop on this machine (#34): it refuses bad arguments with
what to pass, runs each lesson as a learner of its own, counts a failing cell as a failure with
its error line, and leaves no learner's folder or lab behind."""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "scripts/maint/classroom.sh"


def classroom(*arguments: str, tmp: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    # TMPDIR: the learners' folders go under the test's own folder, so that the test sees them go
    env = dict(os.environ, TMPDIR=str(tmp))
    env.pop("LABKIT_STRESS", None)
    return subprocess.run([SCRIPT, *arguments], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.no_servers
@pytest.mark.parametrize("arguments, message", [
    (["--learners", "0"], "a whole number >= 1"),
    (["--learners", "two"], "a whole number >= 1"),
    (["--learners", "-3"], "a whole number >= 1"),
    (["--learners"], "a whole number >= 1"),
    (["--learners=2"], "a whole number >= 1"),
    (["--bogus"], "unknown option --bogus"),
    (["notebooks/99_no_such_lesson.ipynb"], "pass notebooks that exist"),
    (["README.md"], "pass notebooks that exist"),
])
def test_bad_arguments_exit_2_and_say_what_to_pass(tmp_path, arguments, message):
    done = classroom(*arguments, tmp=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr and "usage: scripts/maint/classroom.sh" in done.stderr, done.stderr
    assert not list(tmp_path.iterdir()), "refused arguments, yet it made a classroom folder"


def notebook(path: Path, *sources: str) -> Path:
    cells = [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
              "source": source} for i, source in enumerate(sources)]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


@pytest.mark.slow   # two kernels side by side: 17 s at a load of 8, 31 s at 15
def test_a_failing_cell_fails_the_classroom_with_its_error_line(tmp_path):
    lessons = tmp_path / "lessons"
    lessons.mkdir()
    good = notebook(lessons / "good.ipynb", "x = 1", "assert x == 1")
    bad = notebook(lessons / "bad.ipynb", "x = 1", "assert x == 2, 'the claim: x is 2'")
    room = tmp_path / "room"
    room.mkdir()
    done = classroom("--learners", "2", str(good), str(bad), tmp=room, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if ".ipynb " in line and "->" in line and "learner " not in line]
    assert len(rows) == 2, done.stdout
    good_row, bad_row = rows
    assert str(good) in good_row and " passed " in good_row and " 2       0 " in good_row, good_row
    assert str(bad) in bad_row and " FAILED " in bad_row and " 1       1 " in bad_row, bad_row
    assert "AssertionError: the claim: x is 2" in done.stdout and "bad.ipynb::Cell 1" in done.stdout, done.stdout
    assert "classroom: FAILED" in done.stdout
    assert not list(room.iterdir()), "a learner's folder outlived the classroom"


@pytest.mark.slow   # a kernel and a lab: ~25 s alone at a load of 8
def test_one_learner_runs_the_first_lesson_and_leaves_nothing_behind(tmp_path):
    done = classroom("--learners", "1", "notebooks/00_start_here.ipynb", tmp=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "learner  1 passed   notebooks/00_start_here.ipynb" in done.stdout, done.stdout
    assert "classroom: passed" in done.stdout and "1 learners at once" in done.stdout
    assert not list(tmp_path.iterdir()), "the learner's folder (its LABKIT_HOME) outlived the classroom"


def processes_naming(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in command:
            found.append(f"{entry.name}: {command[:160]}")
    return found


@pytest.mark.slow   # a lab starting beside a kernel, then stopped: 16 s at a load of 8, 65 s at 15
def test_ctrl_c_stops_every_learner_and_its_lab_and_removes_its_folder(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    env.pop("LABKIT_STRESS", None)
    # SIGINT as a terminal delivers it: the suite's legs run as a script's background jobs, which
    # ignore SIGINT, and a shell that starts with SIGINT ignored cannot trap it (CI: exit 0, not 130)
    script = subprocess.Popen([SCRIPT, "--learners", "1", "--stress", "notebooks/01_redis_vs_consensus.ipynb"], cwd=ROOT,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        # the precondition: the learner's lab is up (its servers run from the learner's folder)
        deadline = time.monotonic() + 240
        while not [line for line in processes_naming(str(tmp_path)) if "/labs/" in line]:
            assert script.poll() is None, script.stdout.read()
            assert time.monotonic() < deadline, "the learner's lab did not start in 240 s"
            time.sleep(0.2)
        script.send_signal(signal.SIGINT)
        output, _ = script.communicate(timeout=120)
    finally:
        if script.poll() is None:
            os.killpg(script.pid, signal.SIGKILL)
    assert script.returncode == 130, output
    assert processes_naming(str(tmp_path)) == [], "a learner's process outlived Ctrl-C"
    assert processes_naming(f"labkit-stress-hog {script.pid}") == [], "a CPU hog outlived Ctrl-C"
    assert not list(tmp_path.iterdir()), "a learner's folder outlived Ctrl-C"
