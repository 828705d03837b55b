"""JupyterHub for a class on one Docker host: a container per student, each with its own lab.

What can go wrong, and what this configuration does about it:
- Two students' servers or labs on the same port. Containers share the host's network (the
  rule here: everything on 127.0.0.1, no Docker bridge), so DockerSpawner's fixed port 8888
  would collide. Each student gets a range of ports of their own: the single-user server
  listens on its first port, and labkit picks its servers' ports from the rest
  (LABKIT_PORTS), so two labs cannot take the same port between labkit's check and the bind.
- A student's lab eating the host. Memory and CPU limits come from the measured budget
  (docker/hub/z2jh-values.yaml says why 1.5 GiB and 1 CPU); above the memory limit the
  kernel kills a process of that container only.
- A learner's work lost. Notebooks live in a named volume per student
  (labkit-hub-<name>-notebooks), which outlives the container; containers are removed when
  their server stops, so a restart always starts from the current image.

The image and the limits are read from z2jh-values.yaml (their one place, shared with the
Kubernetes values). Run it with `docker/hub/hub.sh start`; tests/hub/test_hub.py runs it for real.
"""
import os
import sys
from pathlib import Path

import yaml
from dockerspawner import DockerSpawner

c = get_config()  # noqa: F821 (JupyterHub's config loader provides it)

HERE = Path(__file__).resolve().parent
VALUES = yaml.safe_load((HERE / "z2jh-values.yaml").read_text())
SINGLEUSER, CULL = VALUES["singleuser"], VALUES["cull"]

# Port ranges of the students' containers: student i has FIRST_PORT + i * PORTS_PER_STUDENT
# onwards (below the kernel's ephemeral range, which starts at 32768 on Linux: 45 students).
# A full lab with the network faults of notebook 07 uses about 40 ports.
FIRST_PORT = 10_000
PORTS_PER_STUDENT = 500
LAST_PORT = 32_767


class LabSpawner(DockerSpawner):
    """DockerSpawner on the host network: the hub reaches each student's server at
    127.0.0.1 on a port from that student's own range."""

    ranges_in_use: dict = {}  # range index -> spawner name, across every student of this hub

    def claim_range(self) -> int:
        for index, owner in self.ranges_in_use.items():
            if owner == self.object_name:
                return index
        count = (LAST_PORT + 1 - FIRST_PORT) // PORTS_PER_STUDENT
        free = [index for index in range(count) if index not in self.ranges_in_use]
        if not free:
            raise RuntimeError(f"all {count} port ranges of this hub are in use: stop an idle server, "
                               "or make PORTS_PER_STUDENT smaller in docker/hub/jupyterhub_config.py")
        self.ranges_in_use[free[0]] = self.object_name
        return free[0]

    def release_range(self) -> None:
        for index, owner in list(self.ranges_in_use.items()):
            if owner == self.object_name:
                del self.ranges_in_use[index]

    async def start(self):
        first = FIRST_PORT + self.claim_range() * PORTS_PER_STUDENT
        self.port = first
        self.environment = {**self.environment, "LABKIT_PORTS": f"{first + 1}-{first + PORTS_PER_STUDENT - 1}"}
        try:
            return await super().start()
        except BaseException:
            self.release_range()
            raise

    async def stop(self, now=False):
        try:
            await super().stop(now=now)
        finally:
            self.release_range()

    async def get_ip_and_port(self):
        # host network: no port mapping for Docker to report; the server is where we told it
        return "127.0.0.1", self.port


c.JupyterHub.spawner_class = LabSpawner
c.DockerSpawner.image = f"{SINGLEUSER['image']['name']}:{SINGLEUSER['image']['tag']}"
c.DockerSpawner.pull_policy = "never"  # built on this host by hub.sh; no registry is asked
c.DockerSpawner.network_name = "host"
c.DockerSpawner.use_internal_ip = True  # no port publishing: there is no bridge to publish through
c.DockerSpawner.ip = "127.0.0.1"
c.DockerSpawner.mem_limit = SINGLEUSER["memory"]["limit"]
c.DockerSpawner.cpu_limit = float(SINGLEUSER["cpu"]["limit"])
c.DockerSpawner.cmd = [SINGLEUSER["cmd"]]
c.DockerSpawner.notebook_dir = SINGLEUSER["storage"]["homeMountPath"]
c.DockerSpawner.default_url = SINGLEUSER["defaultUrl"]
c.DockerSpawner.environment = dict(SINGLEUSER["extraEnv"])
c.DockerSpawner.prefix = "labkit-hub"  # containers are labkit-hub-<name>
c.DockerSpawner.volumes = {"labkit-hub-{username}-notebooks": SINGLEUSER["storage"]["homeMountPath"]}
c.DockerSpawner.remove = True
c.DockerSpawner.extra_create_kwargs = {"labels": {"labkit.hub": "student"}}
# a loaded host (a class starting at 9:00) starts containers slowly: wait, rather than fail
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 120

# The hub and its proxy on 127.0.0.1 only. An instructor serving a room puts a TLS reverse
# proxy (nginx, Caddy) in front, or sets LABKIT_HUB_IP to the host's address.
c.JupyterHub.ip = os.environ.get("LABKIT_HUB_IP", "127.0.0.1")
c.JupyterHub.port = int(os.environ.get("LABKIT_HUB_PORT", "8000"))
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(os.environ.get("LABKIT_HUB_API_PORT", "8081"))
# Debian's node-configurable-http-proxy keeps its modules in /usr/share/nodejs, where Debian's
# node looks by itself and another node (NodeSource's, nvm's) does not: tell it.
if Path("/usr/share/nodejs").is_dir():
    os.environ["NODE_PATH"] = os.pathsep.join(filter(None, [os.environ.get("NODE_PATH"), "/usr/share/nodejs"]))
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{os.environ.get('LABKIT_HUB_PROXY_API_PORT', '8001')}"
STATE = Path(os.environ.get("LABKIT_HUB_STATE", ".")).expanduser()
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = str(STATE / "jupyterhub-proxy.pid")
c.JupyterHub.cleanup_servers = True  # stopping the hub stops (and removes) every student's container

# Idle servers are stopped, as z2jh's `cull` does: their lab with them, never their volume.
c.JupyterHub.services = [{
    "name": "idle-culler",
    "command": [sys.executable, "-m", "jupyterhub_idle_culler",
                f"--timeout={CULL['timeout']}", f"--cull-every={CULL['every']}"],
}]
c.JupyterHub.load_roles = [{
    "name": "idle-culler",
    "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
    "services": ["idle-culler"],
}]

# Who may log in: by default the Unix accounts of this host (PAM) in the group LABKIT_HUB_GROUP
# ("students"), and the instructors in LABKIT_HUB_ADMINS (comma-separated). For a class
# without Unix accounts, set your authenticator here (GitHub, LTI, OAuth), e.g.
# c.JupyterHub.authenticator_class = "github"
c.PAMAuthenticator.allowed_groups = {os.environ.get("LABKIT_HUB_GROUP", "students")}
c.Authenticator.admin_users = set(filter(None, os.environ.get("LABKIT_HUB_ADMINS", "").split(",")))
