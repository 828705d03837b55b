"""The class hub for real: JupyterHub with DockerSpawner (docker/hub/), three students at once.

Starts the hub on 127.0.0.1 with a test authenticator, creates three students through the
hub's REST API, spawns their containers, checks each server answers through the hub's proxy,
runs notebook 00 in the three containers at the same time (each starts its own lab inside),
then stops the hub: no student container may be left, and each student's notebooks volume
must still hold their work. Runs in the Docker leg of ./lab.sh test (``--leg docker``).
"""
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
import yaml
from helpers import bytes_of

from labkit.servers.ports import free_ports
from labkit.timing import wait_until

ROOT = Path(__file__).resolve().parents[2]
HUB = ROOT / "docker" / "hub"
VALUES = yaml.safe_load((HUB / "z2jh-values.yaml").read_text())["singleuser"]
IMAGE = f"{VALUES['image']['name']}:{VALUES['image']['tag']}"
HUB_PYTHON = ROOT / ".venv-hub" / "bin" / "python"


pytestmark = [
    pytest.mark.docker, pytest.mark.slow,
    pytest.mark.skipif(not shutil.which("configurable-http-proxy"),
                       reason="configurable-http-proxy is missing (apt-get install node-configurable-http-proxy)"),
]


def docker(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"


class Hub:
    """A JupyterHub process with docker/hub/jupyterhub_config.py, a DummyAuthenticator and an
    admin service token for the test."""

    def __init__(self, state: Path):
        self.state = state
        self.log_path = state / "jupyterhub.log"
        self.token = secrets.token_hex(24)
        self.port, api_port, proxy_api_port = free_ports(3)
        self.url = f"http://127.0.0.1:{self.port}"
        config = state / "test_config.py"
        config.write_text(
            f"load_subconfig({str(HUB / 'jupyterhub_config.py')!r})\n"
            "c.JupyterHub.authenticator_class = 'dummy'\n"
            "c.Authenticator.allow_all = True\n"
            f"c.JupyterHub.services.append({{'name': 'labkit-test', 'api_token': {self.token!r}}})\n"
            "c.JupyterHub.load_roles.append({'name': 'admin', 'services': ['labkit-test']})\n")
        environment = {**os.environ, "LABKIT_HUB_STATE": str(state), "LABKIT_HUB_PORT": str(self.port),
                       "LABKIT_HUB_API_PORT": str(api_port), "LABKIT_HUB_PROXY_API_PORT": str(proxy_api_port)}
        self.began = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen([str(HUB_PYTHON), "-m", "jupyterhub", "-f", str(config)],
                                            cwd=state, env=environment, stdout=log, stderr=subprocess.STDOUT)

    def explain(self, what: str) -> str:
        return f"{what}\n--- the hub's log (last lines of {self.log_path}) ---\n{tail(self.log_path)}"

    def api(self, method: str, path: str, **kwargs) -> requests.Response:
        reply = requests.request(method, f"{self.url}/hub/api{path}", timeout=30,
                                 headers={"Authorization": f"token {self.token}"}, **kwargs)
        if reply.status_code >= 400:
            raise AssertionError(self.explain(f"{method} /hub/api{path}: {reply.status_code} {reply.text[:300]}"))
        return reply

    def wait_ready(self, timeout: float = 120) -> float:
        deadline = self.began + timeout
        while True:
            if self.process.poll() is not None:
                raise AssertionError(self.explain(f"jupyterhub exited ({self.process.returncode}) before answering"))
            try:
                if requests.get(f"{self.url}/hub/api/", timeout=5).ok:
                    return time.monotonic() - self.began
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(self.explain(f"the hub did not answer on {self.url} within {timeout:.0f} s"))
            time.sleep(0.2)

    def wait_server(self, name: str, began: float, timeout: float = 240) -> float:
        while True:
            server = self.api("GET", f"/users/{name}").json()["servers"].get("")
            if server and server["ready"]:
                return time.monotonic() - began
            if server is None or not server.get("pending"):
                raise AssertionError(self.explain(f"{name}'s server is neither ready nor starting: {server}"))
            if time.monotonic() - began > timeout:
                logs = docker("logs", "--tail", "20", container_of(name), check=False)
                raise AssertionError(self.explain(f"{name}'s server was not ready within {timeout:.0f} s; "
                                                  f"its container's log:\n{logs.stdout}{logs.stderr}"))
            time.sleep(0.5)

    def stop(self, timeout: float = 90) -> bool:
        """SIGTERM (the hub stops every student's server first); False if it had to be killed."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                return False
        return True


def container_of(name: str) -> str:
    return f"labkit-hub-{name}"


def volume_of(name: str) -> str:
    return f"labkit-hub-{name}-notebooks"


def peak_memory(containers: list[str], stop: threading.Event, peaks: dict) -> None:
    """docker stats, sampled until stopped: the largest memory use seen per container (MiB)."""
    while not stop.is_set():
        done = docker("stats", "--no-stream", "--format", "{{.Name}} {{.MemUsage}}", *containers,
                      check=False, timeout=30)
        for line in done.stdout.splitlines():
            name, usage = line.split(" ", 1)
            used = usage.split("/")[0].strip()
            number, unit = float(used.rstrip("KMGiB")), used.lstrip("0123456789.")
            mebibytes = number * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024, "B": 1 / 2**20}.get(unit, 1)
            peaks[name] = max(peaks.get(name, 0.0), mebibytes)


@pytest.fixture
def hub_image():
    """The single-user image and the hub's venv (docker/hub/hub.sh: cached after the first build)."""
    done = subprocess.run([str(HUB / "hub.sh"), "image"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"docker/hub/hub.sh image failed:\n{done.stdout}{done.stderr}"
    done = subprocess.run([str(HUB / "hub.sh"), "venv"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"docker/hub/hub.sh venv failed:\n{done.stdout}{done.stderr}"
    return IMAGE


@pytest.mark.timeout(900)  # the first run builds the image and the hub's venv (~1 min)
def test_three_students_run_notebook_00_at_once_in_their_own_containers(hub_image, tmp_path):
    students = [f"{first}{os.getpid()}" for first in ("ada", "grace", "barbara")]
    left = docker("ps", "-a", "--format", "{{.Names}}").stdout.split()
    assert not set(map(container_of, students)) & set(left), "containers of a previous run are in the way"
    hub = Hub(tmp_path)
    timings = {}
    try:
        timings["hub start"] = hub.wait_ready()
        culler = hub.api("GET", "/services").json().get("idle-culler", {})
        assert culler.get("pid"), hub.explain(f"the idle culler is not running: {culler}")
        hub.api("POST", "/users", json={"usernames": students})
        began = time.monotonic()
        for name in students:
            hub.api("POST", f"/users/{name}/server")
        timings.update({f"spawn {name}": hub.wait_server(name, began) for name in students})

        # each server answers through the hub's proxy, to its own student's token only
        for name in students:
            token = hub.api("POST", f"/users/{name}/tokens", json={"note": "test"}).json()["token"]
            status = requests.get(f"{hub.url}/user/{name}/api/status", timeout=30,
                                  headers={"Authorization": f"token {token}"})
            assert status.ok, hub.explain(f"{name}'s server does not answer through the proxy: {status.status_code}")

        # the containers: the limits of z2jh-values.yaml, the host network, disjoint port ranges
        ranges = []
        for name in students:
            [info] = json.loads(docker("inspect", container_of(name)).stdout)
            host = info["HostConfig"]
            assert host["NetworkMode"] == "host"
            assert host["Memory"] == bytes_of(VALUES["memory"]["limit"]), host["Memory"]
            assert host["CpuQuota"] / host["CpuPeriod"] == float(VALUES["cpu"]["limit"])
            assert host["AutoRemove"] is True
            assert {"Type": "volume", "Name": volume_of(name)}.items() <= info["Mounts"][0].items()
            environment = dict(line.split("=", 1) for line in info["Config"]["Env"])
            first, last = map(int, environment["LABKIT_PORTS"].split("-"))
            ranges.append(range(first, last + 1))
        assert all(set(a).isdisjoint(b) for a in ranges for b in ranges if a is not b), ranges
        chosen = docker("exec", container_of(students[0]), "python", "-c",
                        "from labkit.servers.ports import free_ports; print(*free_ports(20))").stdout.split()
        assert all(int(port) in ranges[0] for port in chosen), f"labkit chose {chosen}, outside {ranges[0]}"

        # notebook 00 in the three containers at the same time, each with a lab of its own
        stop_sampling, peaks = threading.Event(), {}
        sampler = threading.Thread(target=peak_memory, daemon=True,
                                   args=(list(map(container_of, students)), stop_sampling, peaks))
        sampler.start()
        results = {}

        def run_notebook(name):
            try:
                results[name] = docker("exec", container_of(name), "python", "-m", "pytest", "--nbval-lax", "-q",
                                       "-p", "no:cacheprovider", "/lab/notebooks/00_start_here.ipynb",
                                       check=False, timeout=600)
            except subprocess.TimeoutExpired as exc:
                results[name] = subprocess.CompletedProcess(exc.cmd, -1, str(exc.stdout or ""),
                                                            f"still running after {exc.timeout:.0f} s")

        began = time.monotonic()
        runners = [threading.Thread(target=run_notebook, args=(name,)) for name in students]
        for runner in runners:
            runner.start()
        for runner in runners:
            runner.join()
        timings["notebook 00, three at once"] = time.monotonic() - began
        stop_sampling.set()
        for name in students:
            done = results[name]
            assert done.returncode == 0 and " passed" in done.stdout, \
                f"notebook 00 failed in {name}'s container:\n{done.stdout[-3000:]}{done.stderr[-1000:]}"

        # a learner's work: written in the container, found in the volume after the hub is gone
        for name in students:
            docker("exec", container_of(name), "sh", "-c", f"echo {name} > /lab/notebooks/my_work.txt")
        began = time.monotonic()
        assert hub.stop(), hub.explain("the hub did not stop within 90 s of SIGTERM")
        timings["hub stop"] = time.monotonic() - began
        # DockerSpawner's removal meets Docker's own auto-removal (409, "removal already in
        # progress") and returns before it ends: the containers go, a moment after the hub
        def students_left() -> list[str]:
            listed = docker("ps", "-a", "--filter", "label=labkit.hub", "--format", "{{.Names}} {{.State}}").stdout
            return [line for line in listed.splitlines() if line.split()[0] in set(map(container_of, students))]
        try:
            timings["containers gone"] = wait_until(lambda: not students_left(), "the students' containers to go",
                                                    timeout=60, poll=0.2)
        except TimeoutError:
            pytest.fail(f"containers left 60 s after the hub stopped: {students_left()}")
        for name in students:
            kept = docker("run", "--rm", "--network", "none", "-v", f"{volume_of(name)}:/notebooks", IMAGE,
                          "cat", "/notebooks/my_work.txt").stdout.strip()
            assert kept == name, f"{volume_of(name)} lost the student's work: {kept!r}"
        print("\nclass hub:", ", ".join(f"{what} {seconds:.1f} s" for what, seconds in timings.items()),
              "| peak memory per container:", ", ".join(f"{name} {mib:.0f} MiB" for name, mib in peaks.items()),
              file=sys.stderr)
    finally:
        hub.stop()
        for name in students:
            docker("rm", "-f", container_of(name), check=False)
            docker("volume", "rm", volume_of(name), check=False)
