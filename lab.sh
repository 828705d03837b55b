#!/usr/bin/env bash
# Distributed Locks Lab — the two commands of the README, and their helpers.
#
#   ./lab.sh start    install what is missing, start a lab, open Jupyter Lab on the course
#   ./lab.sh test     install what is missing, run the whole test suite (notebooks included)
#   ./lab.sh setup    only install (idempotent: fast when everything is there)
#   ./lab.sh stop     stop every lab server labkit started
#
# Works on a fresh Debian/Ubuntu machine with Python 3 and root (or sudo). Elsewhere it
# installs the Python side and tells you how to get the servers (see README).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(pwd)
VENV="$ROOT/.venv"
PY="$VENV/bin/python"

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
        apt_install default-jre-headless zookeeper etcd-server etcd-client redis-server python3-venv
    else
        for tool in java etcd redis-server; do
            command -v "$tool" >/dev/null || say "missing '$tool': see README (Homebrew / conda), or use Docker"
        done
    fi
}

install_test_extras() {
    # Curator (a real Java peer for the interop tests) and a browser for the widget test.
    if command -v apt-get >/dev/null; then
        apt_install libcurator-recipes-java default-jdk-headless chromium
    fi
}

make_venv() {
    if [ ! -x "$PY" ]; then
        say "creating the virtual environment in .venv"
        python3 -m venv "$VENV" || die "python3 -m venv failed: on Debian/Ubuntu install python3-venv"
    fi
    local stamp="$VENV/.labkit-installed" want
    want=$(cat pyproject.toml | sha1sum | cut -d' ' -f1)
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        say "installing labkit and its Python packages (about a minute the first time)"
        "$PY" -m pip install -q --disable-pip-version-check --upgrade pip
        "$PY" -m pip install -q --disable-pip-version-check -e ".[test]"
        echo "$want" > "$stamp"
    fi
}

setup() {
    install_servers
    make_venv
    "$VENV/bin/labkit" doctor >/dev/null || "$VENV/bin/labkit" doctor
}

start() {
    setup
    "$VENV/bin/labkit" up --zookeeper 3 --etcd 3 --redis --replica
    trap '"$VENV/bin/labkit" down' EXIT
    say "opening Jupyter Lab on the course (Ctrl-C stops Jupyter and the lab)"
    "$VENV/bin/jupyter" lab --ServerApp.ip=127.0.0.1 --ServerApp.root_dir="$ROOT/notebooks" \
        --LabApp.default_url=/lab/tree/00_start_here.ipynb
}

run_tests() {
    setup
    install_test_extras
    local status=0
    # tests keep their labs apart from a learner's running lab
    export LABKIT_HOME="${LABKIT_HOME:-$HOME/.local/state/labkit-tests}"
    say "running the test suite and every notebook on real servers (local processes)"
    LABKIT_BACKEND=local "$VENV/bin/pytest" tests notebooks --nbval-lax -p no:cacheprovider \
        -o cache_dir=/tmp/labkit-pytest-cache "$@" || status=$?
    [ "$status" -eq 5 ] && { say "pytest collected no test"; status=1; }
    "$VENV/bin/labkit" down >/dev/null 2>&1 || true
    return "$status"
}

case "${1:-}" in
    start) start ;;
    test) shift; run_tests "$@" ;;
    setup) setup ;;
    stop) "$VENV/bin/labkit" down ;;
    *) sed -n '2,8p' "$0"; exit 2 ;;
esac
