#!/usr/bin/env bash
# Build the lab's Docker images; where no registry answers, make the base image first.
#
#   docker/build.sh           both images
#   docker/build.sh servers   labkit-servers:<hash of docker/Dockerfile>, what LABKIT_BACKEND=docker
#                             runs (labkit also builds it by itself on first use)
#   docker/build.sh lab       labkit-lab:latest, also tagged labkit-lab:lock-<hash of
#                             requirements/lock.txt>: Jupyter Lab + labkit + the servers,
#                             served by docker/compose.yaml
#   docker/build.sh lab trixie   labkit-lab:trixie, the same lab on Debian 13 (its python3 3.13
#                             and its server packages), which the Docker leg checks the course on
#
# Debian 12 (bookworm) is the base of everything else. Unchanged images are not rebuilt (the
# server tag follows its Dockerfile, and the server image holds no Python package; the lab
# image reuses Docker's layer cache, whose Python layer is rebuilt when the lock changes).
# Build output goes to /tmp/labkit-docker-build.log.
set -euo pipefail
cd "$(dirname "$0")/.."
LOG=/tmp/labkit-docker-build.log
WHAT="${1:-all}"
SUITE="${2:-bookworm}"

say() { printf '[docker] %s\n' "$*"; }
die() { printf '[docker] %s\n' "$*" >&2; exit 1; }

case "$SUITE/$WHAT" in
    bookworm/*|trixie/lab) ;;
    trixie/*) die "on Debian 13 only the lab image is built: docker/build.sh lab trixie" ;;
    *) die "unknown Debian suite \"$SUITE\": expected bookworm (Debian 12) or trixie (Debian 13)" ;;
esac
docker info >/dev/null 2>&1 || die "no Docker engine answers: start dockerd (Debian) or Docker Desktop"
# Debian's engine has no BuildKit plugin: use the classic builder there
docker buildx version >/dev/null 2>&1 || export DOCKER_BUILDKIT=0

base_image() {
    # Debian's slim image of $SUITE if here or pulled, else one made here by make-base-image.sh
    # ($LABKIT_BASE_IMAGE overrides Debian 12's)
    if [ "$SUITE" = bookworm ] && [ -n "${LABKIT_BASE_IMAGE:-}" ]; then echo "$LABKIT_BASE_IMAGE"; return; fi
    for tag in "debian:$SUITE-slim" "labkit-base:$SUITE"; do
        if docker image inspect "$tag" >/dev/null 2>&1; then echo "$tag"; return; fi
    done
    if docker pull -q "debian:$SUITE-slim" >/dev/null 2>&1; then echo "debian:$SUITE-slim"; return; fi
    say "no registry answers: making the base image locally" >&2
    docker/make-base-image.sh "$SUITE" >&2
    echo "labkit-base:$SUITE"
}

build() {
    # build TAG DOCKERFILE CONTEXT: docker build on the host network, a line per step
    local tag=$1 dockerfile=$2 context=$3 began=$SECONDS
    say "building $tag FROM $BASE"
    if ! docker build --force-rm --network host --build-arg "BASE=$BASE" -f "$dockerfile" -t "$tag" "$context" \
            > "$LOG" 2>&1 < /dev/null; then
        tail -25 "$LOG" >&2
        die "building $tag failed (full output: $LOG)"
    fi
    grep -E '^(Step [0-9]+/|#[0-9]+ \[)' "$LOG" | cut -c1-110 | sed 's/^/    /' || true
    say "$tag ready in $((SECONDS - began)) s"
}

lab_context() {
    # lab_context FOLDER: only what the lab image copies, plus the host's local CAs (*.crt) for
    # pip behind a TLS-intercepting proxy
    tar -c --exclude=__pycache__ pyproject.toml README.md requirements/lock.txt jupyter/overrides.json \
        labkit docker/Dockerfile.lab | tar -x -C "$1"
    cp /usr/local/share/ca-certificates/*.crt "$1/" 2>/dev/null || true
}

BASE=$(base_image)
if [ "$SUITE" = trixie ]; then
    # the lab image on Debian 13, for scripts/ci/debian13.sh: no lock tag, no pruning of the
    # Debian 12 lab's tags
    CONTEXT=$(mktemp -d /tmp/labkit-lab-context.XXXXXX)
    trap 'rm -rf "$CONTEXT"' EXIT
    lab_context "$CONTEXT"
    build labkit-lab:trixie "$CONTEXT/docker/Dockerfile.lab" "$CONTEXT"
    docker image prune -f --filter label=labkit.image=lab >/dev/null   # the one it replaced
    exit 0
fi
case "$WHAT" in
    servers|all)
        SERVERS="labkit-servers:$(sha256sum docker/Dockerfile | cut -c1-12)"
        if docker image inspect "$SERVERS" >/dev/null 2>&1; then say "$SERVERS already built"
        else build "$SERVERS" docker/Dockerfile docker; fi ;;&
    lab|all)
        CONTEXT=$(mktemp -d /tmp/labkit-lab-context.XXXXXX)
        trap 'rm -rf "$CONTEXT"' EXIT
        lab_context "$CONTEXT"
        build labkit-lab:latest "$CONTEXT/docker/Dockerfile.lab" "$CONTEXT"
        # which Python stack is inside: the lock's hash, as a second tag
        LOCKED="labkit-lab:lock-$(sha256sum requirements/lock.txt | cut -c1-12)"
        docker tag labkit-lab:latest "$LOCKED"
        say "labkit-lab:latest is $LOCKED"
        # the lab images this build moved away from (only ours: they carry the label)
        docker images --filter label=labkit.image=lab --format '{{.Repository}}:{{.Tag}}' |
            grep '^labkit-lab:lock-' | grep -vx "$LOCKED" | xargs -r docker rmi >/dev/null || true
        docker image prune -f --filter label=labkit.image=lab >/dev/null ;;
    servers) ;;
    *) sed -n '2,10p' "$0"; exit 2 ;;
esac
