"""Is a Docker engine there? Asked quickly, answered in words; which backend a lab runs on
(``choose_backend``); and the one SDK client per process."""
from __future__ import annotations

import os
import threading

from labkit.errors import DockerUnavailable, LabError

_clients: dict = {}
_clients_lock = threading.Lock()


def engine_problem(timeout: float = 3.0) -> str | None:
    """None when an engine answers a ping; otherwise why not, in one sentence."""
    try:
        import docker
    except ImportError:
        return "the Docker SDK for Python is not installed (pip install docker)"
    try:
        client = docker.from_env(timeout=timeout)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # the SDK raises several unrelated types for "no engine"
        text = str(exc)
        if "FileNotFoundError" in text or "No such file" in text or "Connection refused" in text:
            return "no Docker engine answers (is dockerd / Docker Desktop running?)"
        if "Permission denied" in text:
            return "the Docker engine refused this user (add it to the docker group, or use sudo)"
        reason = text.splitlines()[0] if text else type(exc).__name__
        return f"no Docker engine answers ({reason[:120]})"
    return None


def docker_client():
    """One Docker SDK client per process (pid-keyed: a forked child makes its own)."""
    import docker

    with _clients_lock:
        client = _clients.get(os.getpid())
        if client is None:
            try:
                client = docker.from_env(timeout=60)
                client.ping()
            except Exception as exc:  # the SDK raises several unrelated types for "no engine"
                raise DockerUnavailable(f"no Docker engine answers ({str(exc).splitlines()[0][:160]})",
                                        "start Docker (Debian: dockerd &; macOS/Windows: Docker Desktop) "
                                        "or use LABKIT_BACKEND=local") from None
            _clients[os.getpid()] = client
    return client


def choose_backend(backend: str | None, say=print) -> str:
    """"local" or "docker": the one asked for (else LABKIT_BACKEND); "auto" takes Docker when
    an engine answers. Raises DockerUnavailable when Docker is asked for and no engine answers."""
    backend = (backend or os.environ.get("LABKIT_BACKEND") or "auto").lower()
    if backend not in ("auto", "local", "docker"):
        raise LabError(f"unknown backend {backend!r}", "use LABKIT_BACKEND=auto, local or docker")
    if backend == "auto":
        problem = engine_problem(timeout=1.5)
        if problem is None:
            say("backend: docker (a Docker engine answers)")
            return "docker"
        say(f"backend: local processes ({problem})")
        return "local"
    if backend == "docker":
        problem = engine_problem()
        if problem:
            raise DockerUnavailable(f"LABKIT_BACKEND=docker but {problem}",
                                    "start Docker (Debian: dockerd &, macOS: Docker Desktop) or use LABKIT_BACKEND=local")
    return backend
