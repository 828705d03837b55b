"""The server image: built from docker/Dockerfile on first use, reused afterwards.

Its tag carries a hash of the Dockerfile (``labkit-servers:<hash>``), so editing the
Dockerfile builds a new image and an unchanged one is never rebuilt. The base image is
Debian's slim image when it is here or a registry answers; where none does (a classroom
behind a firewall, CI), docker/make-base-image.sh makes one locally with debootstrap.

What can fail: no docker/ folder (labkit installed without its repository), no base image
and no way to make one, or the build itself (its last output lines are in the error).
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

from labkit.errors import LabError
from labkit.servers.runners.docker_engine import docker_client

DOCKER_DIR = Path(__file__).resolve().parents[3] / "docker"
OFFICIAL_BASE = "debian:bookworm-slim"
LOCAL_SUITE = "bookworm"   # Debian 12: what docker/make-base-image.sh makes by default
LOCAL_BASE = f"labkit-base:{LOCAL_SUITE}"
IMAGE_NAME = "labkit-servers"


class ImageBuildError(LabError):
    """The server image could not be built (or its base image found or made)."""


def server_image_tag() -> str:
    """``$LABKIT_SERVER_IMAGE`` if set, else ``labkit-servers:<first 12 hex of sha256(Dockerfile)>``."""
    explicit = os.environ.get("LABKIT_SERVER_IMAGE")
    if explicit:
        return explicit
    dockerfile = DOCKER_DIR / "Dockerfile"
    try:
        digest = hashlib.sha256(dockerfile.read_bytes()).hexdigest()[:12]
    except OSError:
        raise ImageBuildError(f"the Dockerfile of the server image is missing ({dockerfile})",
                              "the Docker backend builds its image from the repository's docker/ folder: "
                              "install labkit from a clone (pip install -e .)") from None
    return f"{IMAGE_NAME}:{digest}"


def _have(client, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def ensure_base_image(client, say=print) -> str:
    """A Debian 12 image to build FROM: ``$LABKIT_BASE_IMAGE``, or the official slim image
    (present or pulled), or one made here by docker/make-base-image.sh (root + debootstrap)."""
    import docker.errors

    explicit = os.environ.get("LABKIT_BASE_IMAGE")
    if explicit:
        return explicit
    for tag in (OFFICIAL_BASE, LOCAL_BASE):
        if _have(client, tag):
            return tag
    try:
        say(f"pulling {OFFICIAL_BASE} ...")
        client.images.pull(OFFICIAL_BASE)
        return OFFICIAL_BASE
    except docker.errors.APIError as exc:
        why = str(exc.explanation or exc).splitlines()[0][:160]
        say(f"  no registry answers ({why}); making the base image locally instead")
    script = DOCKER_DIR / "make-base-image.sh"
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        raise ImageBuildError(f"cannot pull {OFFICIAL_BASE} and cannot make a base image here (that needs "
                              "root on Linux, with debootstrap)",
                              f"as root: {script} {LOCAL_SUITE}; or `docker pull {OFFICIAL_BASE}` where a "
                              "registry answers; or set LABKIT_BASE_IMAGE to a Debian 12 image you have")
    say(f"  {script.name}: debootstrap + docker import (about a minute) ...")
    done = subprocess.run([str(script), LOCAL_SUITE], capture_output=True, text=True, timeout=900)
    for line in (done.stdout + done.stderr).splitlines():
        say(f"  {line}")
    if done.returncode != 0 or not _have(client, LOCAL_BASE):
        raise ImageBuildError(f"{script.name} failed (exit {done.returncode}): no base image",
                              "read its output above; it needs debootstrap (apt-get install -y debootstrap) "
                              "and a reachable Debian mirror")
    return LOCAL_BASE


def ensure_server_image(client, say=print) -> str:
    """The tag of the server image, building it first if it is not there yet (about a
    minute; progress is printed a step at a time)."""
    tag = server_image_tag()
    if _have(client, tag):
        return tag
    if os.environ.get("LABKIT_SERVER_IMAGE"):
        raise ImageBuildError(f"LABKIT_SERVER_IMAGE={tag} but the Docker engine has no such image",
                              "build it, or unset LABKIT_SERVER_IMAGE to let labkit build its own")
    base = ensure_base_image(client, say)
    say(f"building the server image {tag} FROM {base} (once; about a minute) ...")
    began = time.monotonic()
    recent: list[str] = []
    last_said = began
    # host networking for the build too: apt reaches the mirror the way the host does
    stream = client.api.build(path=str(DOCKER_DIR), dockerfile="Dockerfile", tag=tag, buildargs={"BASE": base},
                              network_mode="host", rm=True, forcerm=True, decode=True)
    for chunk in stream:
        if "error" in chunk:
            tail = "\n".join("    " + line for line in recent[-15:])
            raise ImageBuildError(f"building {tag} failed: {chunk['error'].strip()}\n  last build output:\n{tail}",
                                  f"fix the cause above, then retry; by hand: docker build --network host "
                                  f"--build-arg BASE={base} -t {tag} {DOCKER_DIR}")
        for line in chunk.get("stream", "").splitlines():
            if line.strip():
                recent.append(line.rstrip())
            now = time.monotonic()
            # every Step, and inside a long step (apt) its latest line every few seconds
            if line.startswith("Step ") or (line.strip() and now - last_said > 5):
                say(f"  [{now - began:5.1f} s] {line.strip()[:110]}")
                last_said = now
    if not _have(client, tag):
        raise ImageBuildError(f"the build of {tag} ended without an image", "retry; `docker images` shows what exists")
    say(f"  server image {tag} built in {time.monotonic() - began:.0f} s")
    return tag


def main() -> int:
    """``python -m labkit.servers.runners.docker_image``: build the server image now, print its tag."""

    try:
        tag = ensure_server_image(docker_client(), say=lambda text: print(text, file=sys.stderr, flush=True))
    except LabError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(tag)
    return 0


if __name__ == "__main__":
    sys.exit(main())
