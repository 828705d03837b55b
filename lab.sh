#!/usr/bin/env bash
# Distributed Locks Lab — the two commands of the README, and their helpers.
#
#   ./lab.sh start    install what is missing, start a lab, open Jupyter Lab on the course
#   ./lab.sh test     install what is missing, run the whole test suite (notebooks included),
#                     the notebooks again as an unprivileged user (when run as root), then
#                     the suite again with the servers in Docker containers (where it can)
#   ./lab.sh setup    only install (idempotent: fast when everything is there)
#   ./lab.sh stop     stop every lab server labkit started
#   ./lab.sh book [NOTEBOOK...]  execute the notebooks on real servers, render book/_build (HTML)
#   ./lab.sh lock [--upgrade]   rewrite requirements/lock.txt from pyproject.toml (maintainers)
#   ./lab.sh test --latest      the suite against the newest releases, in .venv-latest (maintainers)
#
# Works on a fresh Debian/Ubuntu machine with Python 3 and root (or sudo). Elsewhere it
# installs the Python side and tells you how to get the servers (see README).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(pwd)
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
# Every Python package, pinned with its hashes: every learner and CI get the same stack.
LOCK=requirements/lock.txt
# The tool that writes the lock (`./lab.sh lock`); learners never need it. uv rather than
# pip-tools: `--universal` resolves once for every platform and Python >= 3.10 (macOS-only
# and Windows-only dependencies get markers and hashes), where pip-compile locks only the
# machine it runs on, so a Mac learner's `--require-hashes` install would fail; and it
# resolves in seconds. The lock it writes is a plain requirements file: pip installs it.
UV_VERSION=0.13.9

say() { printf '\033[1m[lab]\033[0m %s\n' "$*"; }
die() { printf '\033[1;31m[lab] %s\033[0m\n' "$*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null; then sudo "$@"
    else die "need root to run: $* (or install those packages yourself, see README)"; fi
}

apt_install() {
    # apt_install PACKAGE... — install the Debian packages that are not installed yet
    local missing=()
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing Debian packages: ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

install_servers() {
    if command -v apt-get >/dev/null && command -v dpkg-query >/dev/null; then
        # gcc + libc6-dev build labkit's clock shim (labkit up --clocks, docs/CLOCKS.md)
        # openssl makes the key a private lab's etcd signs its login tokens with (labkit/servers/secret.py)
        apt_install default-jre-headless zookeeper etcd-server etcd-client redis-server redis-sentinel python3-venv gcc libc6-dev openssl
    else
        for tool in java etcd redis-server; do
            command -v "$tool" >/dev/null || say "missing '$tool': see README (Homebrew / conda), or use Docker"
        done
    fi
}

install_test_extras() {
    # Curator (a real Java peer for the interop tests) and a browser for the widget test.
    if command -v apt-get >/dev/null; then
        # python3-redis: tests/test_private_labs.py runs labkit as a second user with Debian's python
        apt_install libcurator-recipes-java default-jdk-headless chromium python3-redis
    fi
}

pip_quiet() { "$1" -m pip install -q --disable-pip-version-check "${@:2}"; }

make_venv() {
    if [ ! -x "$PY" ]; then
        say "creating the virtual environment in .venv"
        python3 -m venv "$VENV" || die "python3 -m venv failed: on Debian/Ubuntu install python3-venv"
    fi
    # reinstall when the lock or pyproject.toml changes
    local stamp="$VENV/.labkit-installed" want
    want=$(cat pyproject.toml "$LOCK" | sha1sum | cut -d' ' -f1)
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        say "installing the Python packages pinned in $LOCK (about a minute the first time)"
        pip_quiet "$PY" --upgrade pip
        pip_quiet "$PY" --require-hashes -r "$LOCK"
        say "installing labkit from this folder"
        pip_quiet "$PY" --no-deps -e .
        echo "$want" > "$stamp"
    fi
    install_lab_settings "$VENV"
}

install_lab_settings() {
    # The course's JupyterLab defaults (no news prompt, no update check): overrides.json in
    # the app settings folder of the venv's JupyterLab, which it reads at start. A learner's
    # own settings (~/.jupyter) still win and are never touched.
    local folder="$1/share/jupyter/lab/settings"
    mkdir -p "$folder"
    cmp -s jupyter/overrides.json "$folder/overrides.json" || cp jupyter/overrides.json "$folder/overrides.json"
}

setup() {
    install_servers
    make_venv
    "$VENV/bin/labkit" doctor >/dev/null || "$VENV/bin/labkit" doctor
}

start() {
    setup
    "$VENV/bin/labkit" up --zookeeper 3 --etcd 3 --redis --replica
    JUPYTER_PID=""
    trap stop_started EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    local port token url as_root=()
    port=$(free_port 8888)
    token=$("$PY" -c 'import secrets; print(secrets.token_hex(24))')
    [ "$(id -u)" = 0 ] && as_root=(--allow-root)  # Jupyter refuses root unless told
    say "starting Jupyter Lab on 127.0.0.1:$port"
    # The token comes through the environment (not the command line, which `ps` shows).
    # Jupyter's own log (server and JupyterLab: --Application) stays on this terminal from WARN
    # up: problems show, chatter does not.
    JUPYTER_TOKEN="$token" "$VENV/bin/jupyter" lab --no-browser --ServerApp.ip=127.0.0.1 \
        --ServerApp.port="$port" --ServerApp.port_retries=0 --Application.log_level=WARN \
        --ServerApp.root_dir="$ROOT/notebooks" --LabApp.default_url=/lab/tree/00_start_here.ipynb \
        "${as_root[@]}" < /dev/null &
    JUPYTER_PID=$!
    "$PY" - "$port" "$token" "$JUPYTER_PID" <<'PYTHON' || die "Jupyter Lab did not start (its messages are above)"
import os, sys, time, urllib.request
port, token, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2).close()
        sys.exit(0)
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            sys.exit(1)
        time.sleep(0.3)
sys.exit(1)
PYTHON
    url="http://127.0.0.1:$port/lab/tree/00_start_here.ipynb?token=$token"
    say "Jupyter Lab is ready; open: $url"
    say "Ctrl-C stops Jupyter and the lab"
    if [ "$(uname -s)" = Darwin ] || [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]; then
        "$PY" -m webbrowser -t "$url" >/dev/null 2>&1 || true
    fi
    wait "$JUPYTER_PID"
}

stop_started() {
    # what `start` started, in reverse: Jupyter (SIGTERM: it shuts its kernels down), the lab
    if [ -n "$JUPYTER_PID" ] && kill -0 "$JUPYTER_PID" 2>/dev/null; then
        say "stopping Jupyter Lab"
        kill -TERM "$JUPYTER_PID" 2>/dev/null || true
        local deadline=$((SECONDS + 20))
        while kill -0 "$JUPYTER_PID" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
        kill -9 "$JUPYTER_PID" 2>/dev/null || true
    fi
    "$VENV/bin/labkit" down
}

free_port() {
    # free_port PREFERRED: PREFERRED if nothing listens there on 127.0.0.1, else any free port
    # (SO_REUSEADDR as Jupyter binds: connections of a Jupyter just stopped do not count)
    "$PY" -c 'import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])' "$1"
}

run_tests() {
    [ "${1:-}" = --latest ] && { shift; test_latest "$@"; return; }
    setup
    install_test_extras
    local status=0
    # tests keep their labs apart from a learner's running lab
    export LABKIT_HOME="${LABKIT_HOME:-$HOME/.local/state/labkit-tests}"
    say "running the test suite and every notebook on real servers (local processes)"
    LABKIT_BACKEND=local "$VENV/bin/pytest" tests notebooks --nbval-lax -p no:cacheprovider "$@" || status=$?
    [ "$status" -eq 5 ] && { say "pytest collected no test"; status=1; }
    "$VENV/bin/labkit" down >/dev/null 2>&1 || true
    nonroot_leg || status=1
    docker_leg "$@" || status=1
    return "$status"
}

book() {
    # the course as static HTML: every notebook executed on real servers (labkit/book.py)
    setup
    export LABKIT_HOME="${LABKIT_HOME:-$HOME/.local/state/labkit-book}"  # apart from a learner's lab
    local status=0
    LABKIT_BACKEND=local "$PY" -m labkit.book "$@" || status=$?
    "$VENV/bin/labkit" down >/dev/null 2>&1 || true  # a notebook that failed midway left its lab up
    return "$status"
}

# ---- the non-root leg of `test` -------------------------------------------------------
# Notebooks again as an ordinary user (labkit-learner), after root installed everything:
# nothing a learner runs may need root. The user gets its own copy of the course and a venv
# made from Debian's /usr/bin/python3 (the venv above may come from a python under root's
# home, which other users cannot execute), filled by copying this venv's packages when the
# Python minor versions match, then topped up from the lock by pip as that user (~15 s).
# Every notebook (~5 min on 2 cores); LABKIT_NONROOT_NOTEBOOKS="notebooks/00_start_here.ipynb
# ..." runs only those (00, 02 and 04 take 75 s); LABKIT_NONROOT_TESTS=no skips the leg.
NONROOT_USER=labkit-learner

nonroot_leg() {
    if [ "${LABKIT_NONROOT_TESTS:-auto}" = no ]; then
        say "non-root leg skipped (LABKIT_NONROOT_TESTS=no)"; return 0
    fi
    if [ "$(id -u)" != 0 ] || ! command -v useradd >/dev/null || [ ! -x /usr/bin/python3 ]; then
        say "non-root leg skipped: it needs root (to create a user) and Debian's /usr/bin/python3"; return 0
    fi
    local began=$SECONDS status=0 home course version site notebooks
    id -u "$NONROOT_USER" >/dev/null 2>&1 || useradd --create-home --shell /bin/sh "$NONROOT_USER"
    home=$(getent passwd "$NONROOT_USER" | cut -d: -f6)
    course="$home/labkit-course"
    rm -rf "$course"
    mkdir -p "$course"
    cp -r labkit notebooks pyproject.toml "$course/"
    version=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    site="$course/.venv/lib/python$version/site-packages"
    /usr/bin/python3 -m venv "$course/.venv"
    if [ "$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" = "$version" ]; then
        # same minor version: this venv's packages work there (a head start, not the whole
        # story: the lock's markers may differ, e.g. redis needs async-timeout before 3.11.3)
        cp -a "$("$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/." "$site/"
        rm -f "$site"/__editable__*labkit* "$site"/*labkit*.pth
    fi
    echo "$course" > "$site/labkit-course.pth"  # labkit from the user's copy
    cp "$LOCK" "$course/lock.txt"
    chown -R "$NONROOT_USER:" "$course"
    runuser -u "$NONROOT_USER" -- env -i HOME="$home" PATH=/usr/bin:/bin sh -c "cd '$course' &&
        .venv/bin/python -m pip install -q --disable-pip-version-check --require-hashes -r lock.txt" ||
        { say "non-root leg: the packages of $LOCK could not be installed for $NONROOT_USER"; return 1; }
    say "copy and venv for $NONROOT_USER ready in $((SECONDS - began)) s"
    notebooks="${LABKIT_NONROOT_NOTEBOOKS:-notebooks}"
    say "running notebooks as $NONROOT_USER (uid $(id -u "$NONROOT_USER")): $notebooks"
    runuser -u "$NONROOT_USER" -- env -i HOME="$home" PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 \
        LABKIT_BACKEND=local sh -c "cd '$course' && .venv/bin/python -m pytest $notebooks --nbval-lax -p no:cacheprovider" ||
        status=1
    runuser -u "$NONROOT_USER" -- env -i HOME="$home" PATH=/usr/bin:/bin sh -c \
        "cd '$course' && .venv/bin/python -m labkit.cli down" >/dev/null 2>&1 || true
    say "non-root leg: $([ "$status" -eq 0 ] && echo passed || echo FAILED) in $((SECONDS - began)) s"
    return "$status"
}

# ---- maintainers: the lock, and the newest versions on purpose ----------------------
lock() {
    # ./lab.sh lock [uv pip compile options]: rewrite the lock from pyproject.toml. Pins that
    # still fit are kept; `./lab.sh lock --upgrade` moves everything to the newest release
    # (after `./lab.sh test --latest` passed), `--upgrade-package NAME` just one.
    local tools="$ROOT/.venv-tools"
    if [ "$("$tools/bin/uv" --version 2>/dev/null | cut -d' ' -f2)" != "$UV_VERSION" ]; then
        say "installing uv $UV_VERSION (the tool that writes the lock) into .venv-tools"
        [ -x "$tools/bin/python" ] || python3 -m venv "$tools"
        pip_quiet "$tools/bin/python" "uv==$UV_VERSION"
    fi
    "$tools/bin/uv" pip compile pyproject.toml --extra test --universal --python-version 3.10 \
        --generate-hashes --custom-compile-command "./lab.sh lock" --quiet -o "$LOCK" "$@"
    say "$LOCK: $(grep -c '^[a-z0-9]' "$LOCK") pins; the next ./lab.sh start/test/setup installs them"
    # the class hub's packages (docker/hub/), held to the lock's versions of what they share
    "$tools/bin/uv" pip compile requirements/hub.in --constraint "$LOCK" --universal --python-version 3.10 \
        --generate-hashes --custom-compile-command "./lab.sh lock" --quiet -o requirements/hub.txt "$@"
    say "requirements/hub.txt: $(grep -c '^[a-z0-9]' requirements/hub.txt) pins (docker/hub/hub.sh installs them)"
}

test_latest() {
    # The suite (local processes, notebooks included) against the newest release of every
    # dependency, in .venv-latest: the step before `./lab.sh lock --upgrade`. CI never runs it.
    local venv="$ROOT/.venv-latest" status=0
    install_servers
    install_test_extras
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    say "installing the newest release of every dependency into .venv-latest (the lock is not used)"
    pip_quiet "$venv/bin/python" --upgrade pip
    pip_quiet "$venv/bin/python" --upgrade --upgrade-strategy eager -e ".[test]"
    install_lab_settings "$venv"
    say "what differs from $LOCK:"
    "$venv/bin/python" - "$LOCK" <<'PYTHON'
import re, sys
from importlib.metadata import distributions
from packaging.markers import Marker
from packaging.utils import canonicalize_name
locked = {}
for line in open(sys.argv[1]):
    pin = re.match(r"([A-Za-z0-9._-]+)==([^\s;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?$", line)
    if pin and (pin[3] is None or Marker(pin[3]).evaluate()):
        locked[canonicalize_name(pin[1])] = pin[2]
installed = {canonicalize_name(d.metadata["Name"]): d.version for d in distributions()}
changes = [f"    {name}: {locked.get(name, '-')} -> {installed.get(name, '-')}"
           for name in sorted((set(locked) | set(installed)) - {"labkit", "pip", "setuptools"})
           if locked.get(name) != installed.get(name)]
print("\n".join(changes) if changes else "    nothing: the lock is already the newest")
PYTHON
    export LABKIT_HOME="${LABKIT_HOME:-$HOME/.local/state/labkit-tests-latest}"
    say "running the test suite and every notebook with the newest versions"
    LABKIT_BACKEND=local "$venv/bin/pytest" tests notebooks --nbval-lax -p no:cacheprovider "$@" || status=$?
    [ "$status" -eq 5 ] && { say "pytest collected no test"; status=1; }
    "$venv/bin/labkit" down >/dev/null 2>&1 || true
    if [ "$status" -eq 0 ]; then
        say "the newest versions PASS: ./lab.sh lock --upgrade, then ./lab.sh test, then commit the lock"
    else
        say "the newest versions FAIL (pytest exit $status): keep the lock; the failures above say what broke"
    fi
    return "$status"
}

# ---- the Docker leg of `test` ---------------------------------------------------------
# The same integration tests again with every server in a container, then the whole-lab
# image. Runs where a Docker engine answers, or where one can be installed and started
# (root on Debian/Ubuntu); elsewhere it says why it is skipped. LABKIT_DOCKER_TESTS=no skips it.
DOCKERD_PID=""

docker_leg() {
    if [ "${LABKIT_DOCKER_TESTS:-auto}" = no ]; then
        say "Docker leg skipped (LABKIT_DOCKER_TESTS=no)"; return 0
    fi
    if ! docker info >/dev/null 2>&1; then
        if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null || [ "$(uname -s)" != Linux ]; then
            say "Docker leg skipped: no Docker engine answers, and starting one needs root on Debian/Ubuntu"
            return 0
        fi
        command -v dockerd >/dev/null || apt_install docker.io
        start_dockerd || return 1
    fi
    local status=0 began=$SECONDS phase=$SECONDS
    trap stop_dockerd EXIT
    { command -v debootstrap >/dev/null || [ "$(id -u)" != 0 ] || apt_install debootstrap; } &&
        docker/build.sh || status=1
    install_hub_extras || say "node-configurable-http-proxy could not be installed: tests/test_hub.py will skip"
    say "images ready in $((SECONDS - phase)) s"
    if [ "$status" -eq 0 ]; then
        say "running the test suite again with every server in a Docker container"
        phase=$SECONDS
        LABKIT_BACKEND=docker "$VENV/bin/pytest" tests -p no:cacheprovider "$@" || status=$?
        say "tests on Docker took $((SECONDS - phase)) s"
        "$VENV/bin/labkit" down >/dev/null 2>&1 || true
        no_labkit_containers_left || status=1
        smoke_test_lab_image || status=1
    fi
    say "Docker leg: $([ "$status" -eq 0 ] && echo passed || echo FAILED) in $((SECONDS - began)) s"
    stop_dockerd
    return "$status"
}

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
    # tests/test_hub.py (the class hub, docker/hub/): JupyterHub's proxy, from Debian. The hub
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

compose() {
    if docker compose version >/dev/null 2>&1; then docker compose "$@"; else docker-compose "$@"; fi
}

smoke_test_lab_image() {
    # docker/compose.yaml, as a learner runs it: Jupyter must answer on 127.0.0.1 with its
    # token and refuse without it.
    if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then apt_install docker-compose
        else say "smoke test of the whole-lab image skipped: no docker compose here"; return 0; fi
    fi
    local token port
    token=$("$PY" -c 'import secrets; print(secrets.token_hex(16))')
    port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 8888)); print(8888)' 2>/dev/null ||
           "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    say "smoke test: docker/compose.yaml serves Jupyter on 127.0.0.1:$port"
    export JUPYTER_TOKEN="$token" LAB_PORT="$port" LAB_UID LAB_GID
    LAB_UID=$(id -u) LAB_GID=$(id -g)
    compose -f docker/compose.yaml -p labkit-smoke up -d --no-build >/dev/null 2>&1 ||
        { compose -f docker/compose.yaml -p labkit-smoke up -d --no-build; return 1; }
    local ok=0 container
    container=$(compose -f docker/compose.yaml -p labkit-smoke ps -q lab)
    "$PY" - "$port" "$token" "$container" <<'PYTHON' || ok=1
import json, sys, time, urllib.error, urllib.request
import docker
port, token, container_id = sys.argv[1:]
container = docker.from_env().containers.get(container_id)
url = f"http://127.0.0.1:{port}/api/status"
deadline = time.monotonic() + 180
while True:
    try:
        with urllib.request.urlopen(f"{url}?token={token}", timeout=5) as reply:
            status = json.loads(reply.read())
        break
    except (OSError, ValueError) as exc:
        container.reload()
        if container.status != "running":
            sys.exit(f"the lab container stopped ({container.status}) before Jupyter answered on {url}")
        if time.monotonic() > deadline:
            sys.exit(f"Jupyter did not answer on {url} within 180 s ({exc})")
        time.sleep(0.5)
try:
    urllib.request.urlopen(url, timeout=5)
    sys.exit("Jupyter answered without the token")
except urllib.error.HTTPError as exc:
    assert exc.code == 403, exc.code
print(f"  Jupyter answers with the token (started {status['started']}), refuses without it")
PYTHON
    [ "$ok" -eq 0 ] || compose -f docker/compose.yaml -p labkit-smoke logs --tail 30 >&2
    compose -f docker/compose.yaml -p labkit-smoke down --timeout 20 >/dev/null 2>&1 || ok=1
    unset JUPYTER_TOKEN LAB_PORT LAB_UID LAB_GID
    return "$ok"
}

case "${1:-}" in
    start) start ;;
    test) shift; run_tests "$@" ;;
    setup) setup ;;
    stop) "$VENV/bin/labkit" down ;;
    book) shift; book "$@" ;;
    lock) shift; lock "$@" ;;
    test-nonroot) nonroot_leg ;;  # only the non-root leg of `test` (after ./lab.sh setup)
    *) sed -n '2,12p' "$0"; exit 2 ;;
esac
