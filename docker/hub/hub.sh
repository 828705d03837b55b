#!/usr/bin/env bash
# A JupyterHub for a class on one Docker host: one container per student, each with its own lab.
#
#   docker/hub/hub.sh image    build labkit-hub-user:latest FROM labkit-lab:latest (which
#                              docker/build.sh lab builds first, from this checkout)
#   docker/hub/hub.sh venv     the hub's own Python (.venv-hub) from requirements/hub.txt
#   docker/hub/hub.sh start [JUPYTERHUB OPTIONS]   both, then JupyterHub on 127.0.0.1:8000
#                              with docker/hub/jupyterhub_config.py (Ctrl-C stops it and
#                              every student's container; their notebooks stay in volumes)
#
# Needs a Docker engine and configurable-http-proxy (Debian: node-configurable-http-proxy;
# elsewhere: npm install -g configurable-http-proxy). Build output: /tmp/labkit-hub-build.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
VENV="$ROOT/.venv-hub"
IMAGE=labkit-hub-user:latest
LOG=/tmp/labkit-hub-build.log

say() { printf '[hub] %s\n' "$*"; }
die() { printf '[hub] %s\n' "$*" >&2; exit 1; }

image() {
    docker info >/dev/null 2>&1 || die "no Docker engine answers: start dockerd (Debian) or Docker Desktop"
    # the whole-lab image first, from this checkout (Docker's layer cache makes it quick when
    # nothing changed); LABKIT_LAB_IMAGE=TAG uses an image you built yourself instead
    local lab_image="${LABKIT_LAB_IMAGE:-labkit-lab:latest}"
    if [ -z "${LABKIT_LAB_IMAGE:-}" ]; then docker/build.sh lab >/dev/null || die "docker/build.sh lab failed"; fi
    docker buildx version >/dev/null 2>&1 || export DOCKER_BUILDKIT=0  # Debian's engine: classic builder
    local context began=$SECONDS
    context=$(mktemp -d /tmp/labkit-hub-context.XXXXXX)
    # only what the image copies (no checkpoints, no learner's scores), and the host's local CAs
    tar -c --exclude=__pycache__ --exclude=.ipynb_checkpoints --exclude=practice_scores.json --exclude=.practice_scores.json.lock \
        requirements/hub.txt notebooks docker/hub/Dockerfile | tar -x -C "$context"
    cp /usr/local/share/ca-certificates/*.crt "$context/" 2>/dev/null || true
    if ! docker build --force-rm --network host --build-arg "LAB_IMAGE=$lab_image" -f "$context/docker/hub/Dockerfile" -t "$IMAGE" "$context" \
            > "$LOG" 2>&1 < /dev/null; then
        rm -rf "$context"
        tail -25 "$LOG" >&2
        die "building $IMAGE failed (full output: $LOG)"
    fi
    rm -rf "$context"
    docker image prune -f --filter label=labkit.image=hub-user >/dev/null  # the image this build replaced
    say "$IMAGE ready in $((SECONDS - began)) s"
}

venv() {
    local stamp="$VENV/.hub-installed" want
    want=$(sha1sum requirements/hub.txt | cut -d' ' -f1)
    [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && return 0
    say "installing the hub's packages pinned in requirements/hub.txt into .venv-hub"
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --require-hashes -r requirements/hub.txt
    echo "$want" > "$stamp"
}

start() {
    command -v configurable-http-proxy >/dev/null ||
        die "configurable-http-proxy is missing: apt-get install node-configurable-http-proxy (or npm install -g configurable-http-proxy)"
    image
    venv
    # the hub's database and cookie secret: one folder, kept between starts
    export LABKIT_HUB_STATE="${LABKIT_HUB_STATE:-$HOME/.local/state/labkit-hub}"
    mkdir -p "$LABKIT_HUB_STATE"
    say "JupyterHub on http://127.0.0.1:${LABKIT_HUB_PORT:-8000} (state in $LABKIT_HUB_STATE)"
    exec "$VENV/bin/jupyterhub" -f docker/hub/jupyterhub_config.py "$@"
}

case "${1:-}" in
    image) image ;;
    venv) venv ;;
    start) shift; start "$@" ;;
    *) sed -n '2,11p' "$0"; exit 2 ;;
esac
