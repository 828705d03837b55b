"""Is a Docker engine there? Asked quickly, answered in words."""
from __future__ import annotations


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
