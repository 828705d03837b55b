#!/usr/bin/env bash
# The Docker leg of ./lab.sh test: the tests whose outcome depends on where the servers run
# (pytest --leg docker: server start and stop, faults, partitions, the Docker backend, the
# class hub, the Binder replay), with every server in a container; then a check that no
# container is left, and a smoke test of the whole-lab image (scripts/ci/smoke_lab_image.sh).
# Meanwhile, in a container of the whole-lab image built on Debian 13 (Debian 12 is the base of
# everything else), the quick tests and notebook 00 with Debian 13's Python and servers
# (scripts/ci/debian13.sh).
#
#   scripts/ci/docker.sh [PYTEST ARGS...]
#
# LABKIT_DOCKER_TESTS_AFTER=FILE (./lab.sh test, scripts/ci/test.sh: beside the local and non-root legs): the
# images are built at the lowest CPU priority (nice 19, the dockerd this script starts too),
# then the tests wait until no one holds a lock on FILE (flock), and run at normal priority
# (as root; the dockerd restarted so that its containers are too).
#
# Runs where a Docker engine answers, or where one can be installed and started (root on
# Debian/Ubuntu: a private dockerd, stopped at the end); elsewhere it says why and exits 77
# (skipped). LABKIT_DOCKER_TESTS=no skips it; LABKIT_DEBIAN13=no skips only the Debian 13 part.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
DOCKERD_PID=""

start_dockerd() {
    # A private socket, so that nothing else on this machine mistakes this short-lived engine
    # for its own; no bridge and no iptables rules: labkit's containers use the host network.
    say "starting dockerd for the tests (log: /tmp/labkit-dockerd.log)"
    export DOCKER_HOST=unix:///run/labkit-dockerd.sock
    dockerd -H "$DOCKER_HOST" --pidfile /run/labkit-dockerd.pid --bridge=none --iptables=false \
        --ip6tables=false > /tmp/labkit-dockerd.log 2>&1 &
    DOCKERD_PID=$!
    local deadline=$((SECONDS + 60))
    until docker info >/dev/null 2>&1; do
        if ! kill -0 "$DOCKERD_PID" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
            tail -15 /tmp/labkit-dockerd.log >&2
            say "dockerd did not start (log above): Docker leg FAILED"
            stop_dockerd
            return 1
        fi
        sleep 0.2
    done
}

stop_dockerd() {
    [ -n "$DOCKERD_PID" ] || return 0
    say "stopping the dockerd this script started"
    kill "$DOCKERD_PID" 2>/dev/null || true
    local deadline=$((SECONDS + 30))
    while kill -0 "$DOCKERD_PID" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
    kill -9 "$DOCKERD_PID" 2>/dev/null || true
    DOCKERD_PID=""
    unset DOCKER_HOST
}

install_hub_extras() {
    # tests/hub/test_hub.py (the class hub, docker/hub/): JupyterHub's proxy, from Debian. The hub
    # itself and its single-user image come from docker/hub/hub.sh, which the test runs.
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then apt_install node-configurable-http-proxy; fi
}

no_labkit_containers_left() {
    local left
    left=$(docker ps -a --filter label=labkit.lab --format '{{.Names}} ({{.Status}})')
    [ -z "$left" ] && { say "no labkit container is left"; return 0; }
    say "labkit containers were left behind: $left"
    docker ps -aq --filter label=labkit.lab | xargs -r docker rm -f >/dev/null
    return 1
}

if [ "${LABKIT_DOCKER_TESTS:-auto}" = no ]; then
    say "Docker leg skipped (LABKIT_DOCKER_TESTS=no)"; exit 77
fi
gate="${LABKIT_DOCKER_TESTS_AFTER:-}" lowered=no
if [ -n "$gate" ] && [ "$(id -u)" = 0 ]; then
    renice -n 19 -p $$ >/dev/null && lowered=yes   # the build, and a dockerd started here, at nice 19
fi
if ! docker info >/dev/null 2>&1; then
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null || [ "$(uname -s)" != Linux ]; then
        say "Docker leg skipped: no Docker engine answers, and starting one needs root on Debian/Ubuntu"
        exit 77
    fi
    command -v dockerd >/dev/null || apt_install docker.io
    start_dockerd || exit 1
fi
trap stop_dockerd EXIT
export LABKIT_HOME="${LABKIT_HOME:-$HOME/.local/state/labkit-tests}"
status=0 began=$SECONDS debian13_image=no debian13_pid=""
{ command -v debootstrap >/dev/null || [ "$(id -u)" != 0 ] || apt_install debootstrap; } &&
    docker/build.sh || status=1
built=$status
# a failed Debian 13 build fails the leg, but the tests on Debian 12 still run
if [ "$built" -eq 0 ] && [ "${LABKIT_DEBIAN13:-yes}" != no ]; then
    if scripts/ci/debian13.sh build; then debian13_image=yes; else status=1; fi
fi
install_hub_extras || say "node-configurable-http-proxy could not be installed: tests/hub/test_hub.py will skip"
if [ "$built" -eq 0 ]; then
    # the images the Binder replay and the class hub build in their fixtures, built now (at nice
    # 19 beside the local leg) so that the tests after the gate find them cached: cold, their
    # set-ups took 136 s and 59 s of a fresh-clone run's critical path, at normal priority,
    # beside the non-root leg's notebooks. A failure here shows again in the tests.
    workers=2   # the two images side by side
    run_pytest "$PY" -m pytest tests/suite/test_binder_replay.py tests/hub/test_hub.py --leg docker \
        --setup-only -q -n "$workers" --dist loadfile >/tmp/labkit-docker-prebuild.log 2>&1 ||
        say "building the Binder replay and hub images failed (log: /tmp/labkit-docker-prebuild.log); their tests will say why"
fi
say "images ready in $((SECONDS - began)) s"
if [ -n "$gate" ]; then
    say "the tests wait for the local leg (a lock on $gate)"
    flock -s "$gate" true
    if [ "$lowered" = yes ]; then
        renice -n 0 -p $$ >/dev/null
        # the engine at normal priority again, and the containers it starts from now on
        if [ -n "$DOCKERD_PID" ]; then stop_dockerd; start_dockerd || exit 1; fi
    fi
    say "the tests start after $((SECONDS - began)) s"
fi
if [ "$built" -eq 0 ]; then
    if [ "$debian13_image" = yes ]; then
        # the course on Debian 13, in a container of its own, while the tests below run (its
        # report follows theirs)
        debian13_out=$(mktemp /tmp/labkit-debian13-part.XXXXXX)
        scripts/ci/debian13.sh test > "$debian13_out" 2>&1 &
        debian13_pid=$!
    fi
    workers=$(test_workers 3)
    say "running the tests that depend on where servers run, with every server in a Docker container, $workers files at a time"
    phase=$SECONDS
    # and lesson 10, whose PostgreSQL runs in a container too (its other servers as every lesson's)
    run_pytest_in_parts "$workers" "$PY" -m pytest tests notebooks/10_fencing_a_database.ipynb \
        --nbval-lax --leg docker "$@" || status=$?
    say "tests on Docker took $((SECONDS - phase)) s"
    if [ -n "$debian13_pid" ]; then
        phase=$SECONDS
        wait "$debian13_pid" || status=1
        cat "$debian13_out"
        rm -f "$debian13_out"
        say "then waited $((SECONDS - phase)) s for the run on Debian 13"
    fi
    labkit_down_quietly "$PY"
    no_labkit_containers_left || status=1
    scripts/ci/smoke_lab_image.sh || status=1
fi
say "Docker leg: $([ "$status" -eq 0 ] && echo passed || echo FAILED) in $((SECONDS - began)) s"
exit "$status"
