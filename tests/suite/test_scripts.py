"""lab.sh and scripts/: lab.sh keeps the learner's commands, the legs and the maintainers'
commands live in scripts/, each thing is done in one place, and CI runs the README's command."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import RECORDING_TEST
from legs import LEGS, LOAD_SENSITIVE, PARTS, RACES

pytestmark = pytest.mark.no_servers  # the Python-versions leg runs these

ROOT = Path(__file__).resolve().parents[2]
SHELL_SCRIPTS = [ROOT / "lab.sh", ROOT / ".ci" / "run", *sorted((ROOT / "scripts").rglob("*.sh"))]


def shell_text() -> dict[str, str]:
    return {str(path.relative_to(ROOT)): path.read_text() for path in SHELL_SCRIPTS}


def test_lab_sh_keeps_the_learners_commands_in_200_lines():
    text = (ROOT / "lab.sh").read_text()
    assert len(text.splitlines()) <= 200
    commands = set(re.findall(r"^    ([a-z-]+)\)", text, re.MULTILINE))
    assert {"start", "test", "setup", "stop", "book", "lock"} <= commands


def test_no_python_heredoc_in_shell():
    for name, text in shell_text().items():
        assert not re.search(r"python\S*\"? - .*<<", text), f"{name} feeds Python through a heredoc"
        assert not re.search(r"<<-?\s*'?PYTHON", text), f"{name} feeds Python through a heredoc"


def test_one_jupyter_readiness_probe():
    probes = [name for name, text in shell_text().items() if "/api/status" in text]
    assert probes == [], f"{probes} probe Jupyter themselves: use scripts/jupyter_ready.py"
    users = [name for name, text in shell_text().items() if "scripts/jupyter_ready.py" in text]
    assert sorted(users) == ["lab.sh", "scripts/ci/smoke_lab_image.sh"]


def test_every_pytest_run_goes_through_run_pytest():
    for name, text in shell_text().items():
        for line in text.splitlines():
            if re.search(r"-m pytest|bin/pytest", line) and not line.lstrip().startswith("#"):
                assert line.lstrip().startswith(("run_pytest ", "run_pytest_in_parts ")), f"{name}: {line.strip()}"


@pytest.mark.parametrize("code, expected", [(0, 0), (1, 1), (5, 1)])
def test_run_pytest_counts_no_test_collected_as_a_failure(code, expected):
    done = subprocess.run(["bash", "-c", f'source scripts/lib.sh && run_pytest "{sys.executable}" -c '
                                         f'"import sys; sys.exit({code})"'],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == expected, done.stdout + done.stderr


def test_ci_runs_exactly_the_readmes_test_command():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## The two commands.*?```bash\n(.*?)```", readme, re.DOTALL).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["./lab.sh start", "./lab.sh test"]
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.startswith("#") and not line.startswith(("set ", "cd "))]
    assert ci == ["./lab.sh test"]
    assert "--quick" in readme


def test_the_shell_scripts_parse():
    for path in SHELL_SCRIPTS:
        done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, f"{path.relative_to(ROOT)}: {done.stderr}"


@pytest.mark.skipif(not shutil.which("shellcheck"), reason="shellcheck is not installed")
def test_shellcheck_finds_nothing():
    done = subprocess.run(["shellcheck", "-x", *map(str, SHELL_SCRIPTS)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout


def runs(leg: str, *marks: str) -> bool:
    return LEGS[leg][1](set(marks))


def test_each_leg_selects_by_markers():
    assert runs("local") and runs("local", "slow", "browser", "backend") and not runs("local", "docker")
    assert runs("quick") and not runs("quick", "slow") and not runs("quick", "docker")
    assert not runs("quick", "browser")
    assert not runs("docker") and not runs("docker", "slow") and runs("docker", "backend", "slow")
    assert runs("docker", "docker") and not runs("docker", "backend", "local_backend")
    assert not runs("pythons") and runs("pythons", "no_servers") and not runs("pythons", "no_servers", "slow")
    assert {leg: backend for leg, (backend, _) in LEGS.items()} == {
        "local": "local", "quick": "local", "docker": "docker", "pythons": "local"}


def test_test_workers_takes_a_number_and_defaults_to_three_or_the_legs_own():
    def workers(value, leg_default=""):
        environment = "" if value is None else f"LABKIT_TEST_WORKERS={value} "
        return subprocess.run(["bash", "-c", f"source scripts/lib.sh && {environment}test_workers {leg_default}"],
                              cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert workers(None).stdout.strip() == "3"
    assert workers(0).stdout.strip() == "0"
    assert workers(None, "0").stdout.strip() == "0" and workers(2, "0").stdout.strip() == "2"
    refused = workers("many")
    assert refused.returncode != 0 and "LABKIT_TEST_WORKERS=many" in refused.stderr


def test_every_leg_runs_its_files_side_by_side():
    for name in ("ci/local.sh", "ci/nonroot.sh", "ci/docker.sh", "ci/pythons.sh", "ci/debian13.sh",
                 "maint/latest.sh"):
        text = (ROOT / "scripts" / name).read_text().replace("\\\n", " ")   # one line per command
        calls = [line for line in text.splitlines() if line.lstrip().startswith(("run_pytest ", "run_pytest_in_parts "))]
        assert calls and all('-n "$workers" --dist loadfile' in line or 'run_pytest_in_parts "$workers"' in line
                             for line in calls), (name, calls)
    for name in ("ci/local.sh", "ci/docker.sh"):   # the legs with timing races run those alone first
        assert 'run_pytest_in_parts "$workers"' in (ROOT / "scripts" / name).read_text(), name


FAKE_PYTEST = """import json, os, sys
with open(os.environ["RECORD"], "a") as record:
    record.write(json.dumps([os.nice(0), *sys.argv[1:]]) + "\\n")
part = sys.argv[sys.argv.index("--part") + 1] if "--part" in sys.argv else "all"
sys.exit(int(os.environ["EXIT_" + part.upper()]))
"""


@pytest.mark.parametrize("workers, races, rest, expected", [
    (3, 0, 0, 0), (3, 5, 0, 0), (3, 0, 5, 0), (3, 5, 5, 1), (3, 1, 0, 1), (3, 0, 2, 2), (0, 0, 0, 0)])
def test_run_pytest_in_parts_runs_the_races_one_at_a_time_and_the_rest_side_by_side(tmp_path, workers, races, rest,
                                                                              expected):
    fake, record = tmp_path / "fake_pytest.py", tmp_path / "record.jsonl"
    fake.write_text(FAKE_PYTEST)
    environment = dict(os.environ, RECORD=str(record), EXIT_RACES=str(races), EXIT_REST=str(rest), EXIT_ALL="0")
    done = subprocess.run(["bash", "-c", f'source scripts/lib.sh && run_pytest_in_parts {workers} '
                                         f'"{sys.executable}" "{fake}" --leg local'],
                          cwd=ROOT, capture_output=True, text=True, timeout=30, env=environment)
    assert done.returncode == expected, done.stdout + done.stderr
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    mine = os.nice(0)
    if workers == 0:
        assert calls == [[mine, "--leg", "local", "-p", "no:cacheprovider"]]
    else:   # all at this process's priority (nice 19 starved the rest under load, #34): the races
        # in two groups (-n 2), the rest on one worker fewer than asked
        assert sorted(calls) == [[mine, "--leg", "local", "--part", "races", "-n", "2", "--dist", "loadfile",
                                  "-p", "no:cacheprovider"],
                                 [mine, "--leg", "local", "--part", "rest", "-n", "2", "--dist", "loadfile",
                                  "-p", "no:cacheprovider"]]


def lib(command: str, **environment: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "LABKIT_STRESS"} | environment
    return subprocess.run(["bash", "-c", f"source scripts/lib.sh && {command}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=30, env=env)


def test_the_load_mode_counts_its_hogs_and_refuses_a_bad_count():
    cores = str(os.cpu_count())
    assert lib("stress_hogs").stdout.strip() == "0"               # off unless asked
    assert lib("stress_hogs --stress").stdout.strip() == cores    # one per core
    assert lib("stress_hogs", LABKIT_STRESS="3").stdout.strip() == "3"
    assert lib("stress_hogs --stress", LABKIT_STRESS="1").stdout.strip() == "1"
    for bad in ("two", "-1", "2.5", "1000"):
        refused = lib("stress_hogs --stress", LABKIT_STRESS=bad)
        assert refused.returncode != 0 and f"LABKIT_STRESS={bad}: expected how many CPU hogs" in refused.stderr
    # the leg runner refuses it before it installs or runs anything
    refused = subprocess.run(["scripts/ci/test.sh", "--quick", "--stress"], cwd=ROOT, capture_output=True, text=True,
                             timeout=30, env=dict(os.environ, LABKIT_STRESS="lots"))
    assert refused.returncode != 0 and "LABKIT_STRESS=lots: expected" in refused.stderr, refused.stderr
    assert "installing" not in refused.stdout and "running the tests" not in refused.stdout


def test_the_hogs_burn_cpu_until_stopped_and_never_outlive_their_shell():
    from labkit.timing import wait_until
    shell = subprocess.Popen(["bash", "-c", "source scripts/lib.sh && start_stress_hogs 2 >/dev/null && "
                              "echo ${STRESS_PIDS[*]} && read -r && stop_stress_hogs && echo stopped"],
                             cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(pid) for pid in shell.stdout.readline().split()]
        assert len(pids) == 2
        for pid in pids:   # started (exec'd), then its user CPU time, in clock ticks, grows
            wait_until(lambda: hog_alive(pid), f"hog {pid} starts", timeout=20)
            wait_until(lambda: int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[11]) > 0,
                       f"hog {pid} uses the CPU", timeout=20)
        shell.stdin.write("\n")
        shell.stdin.flush()
        assert shell.stdout.readline().strip() == "stopped"
        assert not any(hog_alive(pid) for pid in pids)
    finally:
        shell.kill()
        shell.wait(10)
    orphaned = lib("start_stress_hogs 1 >/dev/null; echo ${STRESS_PIDS[*]}; kill -9 $$")
    pid = int(orphaned.stdout.split()[0])
    assert wait_for_exit(pid), f"hog {pid} outlived its shell"


def hog_alive(pid: int) -> bool:
    try:
        return "labkit-stress-hog" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    except OSError:   # gone
        return False


def wait_for_exit(pid: int, seconds: float = 10.0) -> bool:
    from labkit.timing import became_true
    return became_true(lambda: not hog_alive(pid), timeout=seconds)


@pytest.mark.slow   # two pytest collections of the quick leg: ~20 s idle, over 240 s at a load of 23
def test_lab_test_quick_stress_runs_the_legs_beside_hogs_and_stops_them(tmp_path):
    done = subprocess.run(["scripts/ci/test.sh", "--quick", "--stress", "--collect-only", "-q"], cwd=ROOT,
                          capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, LABKIT_STRESS="1", LABKIT_HOME=str(tmp_path)))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "load mode: 1 CPU hogs beside the tests" in done.stdout
    assert re.search(r"quick +passed .* [0-9.?]+ -> [0-9.?]+", done.stdout), done.stdout[-2000:]
    pids = re.search(r"CPU hogs beside the tests \(pids ([0-9 ]+)\)", done.stdout).group(1).split()
    assert all(wait_for_exit(int(pid)) for pid in pids)   # stopped: the claim, not how fast


def test_the_parts_split_the_test_files_in_two():
    names = [path.name for path in (ROOT / "tests").rglob("test_*.py")]
    races = {name for name in names if PARTS["races"](name)}
    rest = {name for name in names if PARTS["rest"](name)}
    assert races and rest and not races & rest and races | rest == set(names) and all(PARTS["all"](n) for n in names)
    assert races == set(RACES) | set(LOAD_SENSITIVE)


def test_the_tests_and_a_notebook_collect_together():
    """The Python-versions leg collects tests/ and notebook 00 in one run: two conftest.py
    files, so a test that imports ``conftest`` by name may get the notebooks' one (it did)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "--nbval-lax", "--leg", "pythons", "tests/suite/test_scripts.py", "notebooks/00_start_here.ipynb"],
                          cwd=ROOT, capture_output=True, text=True, timeout=280)   # a hang guard: 120 s expired at load 24-40
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_the_races_name_test_files_that_exist():
    names = {path.name for path in (ROOT / "tests").rglob("test_*.py")}   # in their rooms, tests/<room>/
    assert set(RACES) | set(LOAD_SENSITIVE) <= names, sorted(set(RACES) | set(LOAD_SENSITIVE) - names)


@pytest.mark.slow   # two pytest sessions, one with 2 workers: ~5 s alone, 30 s on a loaded machine
def test_workers_run_whole_files_with_a_labkit_home_each_and_the_races_together(pytester, monkeypatch):
    # a real pytest -n 2 run with this folder's conftest, on four small files: two named like
    # RACES, one with a slow test
    pytester.makeconftest((Path(__file__).parents[1] / "conftest.py").read_text())
    pytester.makepyfile(**{module: (Path(__file__).parents[1] / f"{module}.py").read_text()
                           for module in ("legs", "helpers", "needs")})   # what conftest.py imports
    races = sorted(RACES)[:2]
    files = {name.removesuffix(".py"): RECORDING_TEST for name in races}
    files["test_plain"] = RECORDING_TEST
    files["test_long"] = RECORDING_TEST.replace("def test_where", "@pytest.mark.slow\ndef test_where")
    pytester.makepyfile(**files)
    home = pytester.path / "home"
    record = pytester.path / "record.jsonl"
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)   # when this test runs on a worker itself
    monkeypatch.setenv("LABKIT_HOME", str(home))
    monkeypatch.setenv("RECORD", str(record))
    # in a process of its own: this one may have imported the real test_clock_drift already
    collected = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider")
    order = [line.split("::")[0] for line in collected.outlines if "::" in line]
    assert order == [*(name for name in sorted(races) for _ in (1, 2)), "test_long.py", "test_long.py",
                     "test_plain.py", "test_plain.py"], order   # the races, then the costliest file
    done = pytester.runpytest_subprocess("-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider")
    done.assert_outcomes(passed=8)
    ran = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(ran) == 8
    worker_of = {}
    for file, worker, labkit_home in ran:
        assert labkit_home == str(home / "workers" / worker)
        worker_of.setdefault(file, set()).add(worker)
    assert all(len(workers) == 1 for workers in worker_of.values()), worker_of   # whole files
    assert worker_of[races[0]] == worker_of[races[1]], worker_of                   # the races one after another


def test_the_notebook_order_lists_every_notebook_once():
    done = subprocess.run(["bash", "-c", "source scripts/lib.sh && notebooks_longest_first"], cwd=ROOT,
                          capture_output=True, text=True, timeout=30)
    listed = done.stdout.split()
    every = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "notebooks").rglob("*.ipynb")
                   if ".ipynb_checkpoints" not in path.parts)
    assert sorted(listed) == every and len(listed) == len(set(listed)), listed
    assert listed[0].startswith("notebooks/07_")   # the longest, measured


def test_the_docker_leg_runs_the_course_on_debian_13_beside_its_tests():
    leg = (ROOT / "scripts" / "ci" / "docker.sh").read_text()
    lines = [line.strip() for line in leg.splitlines()]
    build = next(i for i, line in enumerate(lines) if "scripts/ci/debian13.sh build" in line)
    start = next(i for i, line in enumerate(lines) if line.startswith("scripts/ci/debian13.sh test") and line.endswith("&"))
    parts = next(i for i, line in enumerate(lines) if line.startswith("run_pytest_in_parts "))
    waited = next(i for i, line in enumerate(lines) if line.startswith('wait "$debian13_pid" || status=1'))
    assert build < start < parts < waited   # built first, then run while the leg's own tests run
    check = (ROOT / "scripts" / "ci" / "debian13.sh").read_text()
    assert "docker/build.sh lab trixie" in check
    assert "--leg pythons" in check and "notebooks/00_start_here.ipynb" in check
    assert "--network none" in check   # its servers' ports cannot meet the leg's on the host
    assert "FAILED (full log: $LOG)" in check and 'tail -30 "$LOG"' in check


def run_script(*command: str, path: str = "") -> subprocess.CompletedProcess:
    """COMMAND from the repository root; PATH starts with `path` (a folder of fakes) if given."""
    env = dict(os.environ, PATH=f"{path}:{os.environ['PATH']}" if path else os.environ["PATH"])
    return subprocess.run(list(command), cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize("suite, tag", [(None, "labkit-base:bookworm"), ("bookworm", "labkit-base:bookworm"),
                                        ("trixie", "labkit-base:trixie")])
def test_make_base_image_takes_a_debian_suite(tmp_path, suite, tag):
    # a docker that says every image exists: the script names the tag it would make, and stops
    fake = tmp_path / "docker"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/calls\nexit 0\n')
    fake.chmod(0o755)
    done = run_script("docker/make-base-image.sh", *([suite] if suite else []), path=str(tmp_path))
    assert done.returncode == 0 and f"{tag} already exists" in done.stdout, done.stdout + done.stderr
    assert (tmp_path / "calls").read_text().split() == ["image", "inspect", tag]


@pytest.mark.parametrize("command", [("docker/make-base-image.sh", "sid"),
                                     ("docker/make-base-image.sh", "labkit-base:bookworm"),   # the old TAG argument
                                     ("docker/build.sh", "lab", "sid")])
def test_an_unknown_debian_suite_is_refused_with_the_known_ones(command):
    done = run_script(*command)
    assert done.returncode != 0
    assert f'unknown Debian suite "{command[-1]}"' in done.stderr
    assert "bookworm (Debian 12)" in done.stderr and "trixie (Debian 13)" in done.stderr


def test_on_debian_13_only_the_lab_image_is_built():
    done = run_script("docker/build.sh", "servers", "trixie")
    assert done.returncode != 0 and "docker/build.sh lab trixie" in done.stderr


@pytest.mark.no_servers
def test_the_pythons_leg_forgets_venvs_no_run_used_for_two_weeks(tmp_path):
    # Each cached venv is ~600 MB, and every lock change makes new ones: the leg removes those
    # whose stamps are older than 14 days and keeps the others (another clone's lock in use).
    old, new, foreign = tmp_path / "3.10-0ld0ld0ld0ld", tmp_path / "3.10-n3wn3wn3wn3w", tmp_path / "3.13-notours"
    for venv in (old, new, foreign):
        venv.mkdir()
    for stamp in (".labkit-lock-installed", ".labkit-last-used"):
        (old / stamp).touch()
        os.utime(old / stamp, (0, 1_600_000_000))   # 2020
    (new / ".labkit-lock-installed").touch()
    os.utime(new / ".labkit-lock-installed", (0, 1_600_000_000))
    (new / ".labkit-last-used").touch()             # used now
    script = (ROOT / "scripts" / "ci" / "pythons.sh").read_text()
    function = re.search(r"^forget_unused_venvs\(\) \{.*?^\}", script, re.MULTILINE | re.DOTALL).group(0)
    done = subprocess.run(["bash", "-c", f'say() {{ echo "$*"; }}\nCACHE="$1"\n{function}\nforget_unused_venvs',
                           "bash", str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([new.name, foreign.name]), done.stdout
    assert "unused for 14 days" in done.stdout


def test_soak_counts_each_failed_test_and_leg_once_a_run(tmp_path):
    logs = {
        "run-1.log": "FAILED tests/test_a.py::test_x[zookeeper] - assert 0 == 1\n"
                     "FAILED tests/test_a.py::test_x[zookeeper] - assert 0 == 1\n"   # the same run twice: once
                     "ERROR tests/test_b.py::test_y - TimeoutError\n"
                     "\033[1m[lab]\033[0m local      FAILED     8m27s  0.61 -> 2.10\n"
                     "\033[1m[lab]\033[0m total      FAILED    26m55s\n",
        "run-2.log": "FAILED tests/test_a.py::test_x[zookeeper] - assert 0 == 1\n"
                     "FAILED notebooks/06_fencing.ipynb::Cell 3 - kernel died\n"
                     "\033[1m[lab]\033[0m nonroot    FAILED     3m48s  1.0 -> 3.2\n"
                     "a line that mentions FAILED in passing\n",
        "run-3.log": "\033[1m[lab]\033[0m quick      passed     2m31s  0.2 -> 0.9\n",
    }
    for name, text in logs.items():
        (tmp_path / name).write_text(text)
    script = (ROOT / "scripts" / "maint" / "soak.sh").read_text()
    function = re.search(r"^failures_table\(\) \{.*?^\}", script, re.MULTILINE | re.DOTALL).group(0)
    done = subprocess.run(["bash", "-c", f'{function}\nfailures_table "$@"', "bash",
                           *sorted(map(str, tmp_path.glob("run-*.log")))], capture_output=True, text=True, timeout=30)
    rows = [line.split(None, 1) for line in done.stdout.splitlines()]
    assert rows[0] == ["2", "tests/test_a.py::test_x[zookeeper]"], done.stdout + done.stderr
    assert sorted(rows[1:]) == [["1", "leg local"], ["1", "leg nonroot"], ["1", "notebooks/06_fencing.ipynb::Cell 3"],
                                ["1", "tests/test_b.py::test_y"]], done.stdout
    nothing = subprocess.run(["bash", "-c", f'{function}\nfailures_table "$@"', "bash", str(tmp_path / "run-3.log")],
                             capture_output=True, text=True, timeout=30)
    assert nothing.stdout.strip() == "(nothing failed)"


@pytest.mark.parametrize("runs", ["", "0", "five", "-2"])
def test_soak_wants_a_number_of_runs(runs):
    done = run_script("scripts/maint/soak.sh", *([runs] if runs else []))
    assert done.returncode != 0 and "usage: scripts/maint/soak.sh N" in done.stderr, done.stderr
