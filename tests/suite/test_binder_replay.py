"""The course on Binder: .binder/'s files, replayed the way repo2docker uses them.

mybinder.org cannot be reached from here, so tests/binder_replay.Dockerfile replays
repo2docker's steps on the lab's Debian base image (apt.txt as root, the notebook user jovyan,
its pip on .binder/requirements.txt, postBuild as that user), then runs notebooks 00 and 02
as that user, through .binder/start, under Binder's 2 GiB memory limit, with no swap.

The replay runs only in the Docker leg of ./lab.sh test (``--leg docker``), where a
Docker engine answers and the lab's base image is built (docker/build.sh makes it). Cold (no
layer cache) the build took 2 to 5 min here, by load; warm, only the repository copy and postBuild rerun
(seconds), and the notebooks take about a minute. The image keeps its tag, as the cache of the
next run; older replay images (untagged by a newer build) are pruned after each build. What it cannot tell: that Ubuntu's packages (Binder's base image) behave as
Debian's do, and that conda's Python behaves as Debian's.
"""
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = Path(__file__).resolve().parents[1] / "binder_replay.Dockerfile"
NOTEBOOKS = ("notebooks/00_start_here.ipynb", "notebooks/02_zookeeper_lock_recipe.ipynb")
IMAGE = "labkit-binder-replay:test"
MEMORY_LIMIT = "2g"  # mybinder.org's limit per user
BUILD_DEADLINE = 1200.0
RUN_DEADLINE = 900.0


def docker(*args: str, timeout: float = 120.0, **options) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, **options)


def base_image() -> str | None:
    """The base docker/build.sh picks: $LABKIT_BASE_IMAGE, else the first one present."""
    if os.environ.get("LABKIT_BASE_IMAGE"):
        return os.environ["LABKIT_BASE_IMAGE"]
    for tag in ("debian:bookworm-slim", "labkit-base:bookworm"):
        if docker("image", "inspect", tag).returncode == 0:
            return tag
    return None


def tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def apt_packages(text: str) -> set[str]:
    """Package names of an apt.txt (repo2docker drops what follows a #)."""
    return {line.partition("#")[0].strip() for line in text.splitlines()} - {""}


@pytest.mark.no_servers
def test_binder_installs_what_lab_sh_installs():
    # lab.sh's install step, but Python: Binder's comes from conda, not python3-venv
    install_step = re.search(r"^install_servers\(\).*?^}", (ROOT / "lab.sh").read_text(), re.MULTILINE | re.DOTALL)
    servers = set(re.search(r"apt_install (.+)", install_step.group(0)).group(1).split()) - {"python3-venv"}
    wanted = servers | {"libcurator-recipes-java", "default-jdk-headless"}  # Curator in notebook 02
    listed = apt_packages((ROOT / ".binder" / "apt.txt").read_text())
    assert wanted <= listed, f".binder/apt.txt lacks {sorted(wanted - listed)} (lab.sh installs them)"
    start = (ROOT / ".binder" / "start").read_text()
    assert start.rstrip().endswith('exec "$@"') and "labkit up" not in start, "start must only set the environment"


def course_files() -> list[str]:
    """What a clone of the repository holds (tracked files, and new ones not ignored yet)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return sorted(name for name in set(listed.split("\0")) if name and (ROOT / name).is_file())


def build_context(folder: Path) -> Path:
    """repo/ (the course as repo2docker receives it), ca/ (the host's local CAs, maybe none)
    and the Dockerfile."""
    context = folder / "context"
    for name in course_files():
        (context / "repo" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, context / "repo" / name)
    (context / "ca").mkdir()
    for certificate in sorted(Path("/usr/local/share/ca-certificates").glob("*.crt")):
        shutil.copy(certificate, context / "ca" / certificate.name)
    shutil.copy(DOCKERFILE, context / "Dockerfile")
    return context


@pytest.fixture
def replay_image(tmp_path):
    base = base_image()
    if base is None:
        pytest.skip("no base image: docker/build.sh makes labkit-base:bookworm (or pulls debian:bookworm-slim)")
    context = build_context(tmp_path)
    environment = dict(os.environ)
    if docker("buildx", "version").returncode != 0:
        environment["DOCKER_BUILDKIT"] = "0"  # Debian's engine has no BuildKit plugin
    began = time.monotonic()
    build = docker("build", "--network", "host", "--force-rm", "--build-arg", f"BASE={base}",
                   "-t", IMAGE, str(context), env=environment, timeout=BUILD_DEADLINE)
    if build.returncode != 0:
        pytest.fail(f"building the Binder replay FROM {base} failed:\n{tail(build.stdout + build.stderr)}")
    print(f"Binder replay image built FROM {base} in {time.monotonic() - began:.0f} s")
    # the tagged image is the next run's cache; the ones this build untagged go (a changed lock
    # or apt.txt would otherwise leave ~1.5 GB behind each time)
    docker("image", "prune", "--force", "--filter", "label=labkit.binder-replay=1")
    yield IMAGE


@pytest.mark.docker
@pytest.mark.slow
# the build and the run have deadlines of their own, with their output on failure; pytest's
# 300 s cut a cold build at load 20 with nothing to say
@pytest.mark.timeout(BUILD_DEADLINE + RUN_DEADLINE + 120)
def test_notebooks_00_and_02_pass_as_binder_runs_them(replay_image):
    name = f"labkit-binder-replay-{os.getpid()}"
    command = " ; ".join([
        "echo backend-from-start=$LABKIT_BACKEND",
        # what Binder launches must still start after the lock replaced its packages
        "jupyterhub-singleuser --version > /dev/null && jupyter lab --version > /dev/null && echo launchers-start",
        "python -m pytest --nbval-lax -p no:cacheprovider " + " ".join(NOTEBOOKS),
        "status=$?",
        # the container's own cgroup keeps its peak (v2: memory.peak; v1 counts page cache too)
        "echo peak-memory-bytes $(cat /sys/fs/cgroup/memory.peak 2>/dev/null"
        " || cat /sys/fs/cgroup/memory/memory.max_usage_in_bytes 2>/dev/null)",
        "exit $status",
    ])
    began = time.monotonic()
    try:
        # --memory-swap equal to --memory: no swap to hide an overrun of the limit
        run = docker("run", "--name", name, "--label", "labkit.binder-replay=1", "--network", "host",
                     "--memory", MEMORY_LIMIT, "--memory-swap", MEMORY_LIMIT, replay_image,
                     "bash", "-c", command, timeout=RUN_DEADLINE)
    except subprocess.TimeoutExpired as timeout:
        output = timeout.stdout.decode() if isinstance(timeout.stdout, bytes) else timeout.stdout or ""
        pytest.fail(f"the notebooks did not finish within {RUN_DEADLINE:.0f} s in the Binder replay:\n{tail(output)}")
    finally:
        docker("rm", "--force", name)
    output = run.stdout + run.stderr
    assert docker("ps", "--all", "--quiet", "--filter", f"name={name}").stdout.strip() == "", \
        f"the container {name} was left behind"
    assert run.returncode == 0, f"notebooks failed in the Binder replay (exit {run.returncode}):\n{tail(output)}"
    assert "backend-from-start=local" in output, f".binder/start did not set LABKIT_BACKEND:\n{tail(output)}"
    assert "launchers-start" in output, f"jupyterhub-singleuser or jupyter lab does not start:\n{tail(output)}"
    for notebook in NOTEBOOKS:
        assert notebook in output, f"{notebook} did not run:\n{tail(output)}"
    assert re.search(r"\d+ passed", output) and not re.search(r"\d+ (failed|error)", output), tail(output)
    peak = re.search(r"peak-memory-bytes (\d+)", output)
    print(f"notebooks 00 and 02 passed in {time.monotonic() - began:.0f} s; peak memory of the container: "
          + (f"{int(peak.group(1)) / 2**20:.0f} MiB" if peak else "unknown"))
