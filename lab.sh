#!/usr/bin/env bash
# Distributed Locks Lab — the two commands of the README, and their helpers.
#
#   ./lab.sh start    install what is missing, start a lab, open Jupyter Lab on the course
#   ./lab.sh test     install what is missing, run the whole test suite on real servers: the
#                     tests, every notebook (as an unprivileged user when run as root), and
#                     what depends on where servers run again in Docker containers (where it can)
#   ./lab.sh setup    only install (idempotent: fast when everything is there)
#   ./lab.sh stop     stop every lab server labkit started
#   ./lab.sh book [NOTEBOOK...]  execute the notebooks on real servers, build the course book with
#                     Jupyter Book 2 (needs Node.js 18+): open book/_build/html/index.html
# Maintainers:
#   ./lab.sh test --quick       the tests without the slow ones, Docker and notebooks (~5 min)
#   ./lab.sh test [--quick] --stress   the same beside CPU hogs (LABKIT_STRESS=K, default one a core)
#   ./lab.sh test --pythons     the quick pure-logic tests and notebook 00 on every CPython 3.10+
#   ./lab.sh test --latest      the suite against the newest releases, in .venv-latest
#   ./lab.sh lock [--upgrade]   rewrite requirements/lock.txt from pyproject.toml
#
# Works on a fresh Debian/Ubuntu machine with Python 3 and root (or sudo). Elsewhere it
# installs the Python side and tells you how to get the servers (see README). The test legs
# live in scripts/ci/, the maintainers' commands in scripts/maint/ (scripts/README.md).
set -euo pipefail
cd "$(dirname "$0")"
# ROOT, VENV, PY, LOCK; say, die, apt_install, pip_quiet, install_lab_settings, free_port
source scripts/lib.sh

install_servers() {
    if command -v apt-get >/dev/null && command -v dpkg-query >/dev/null; then
        # gcc + libc6-dev build labkit's clock shim (labkit up --clocks, docs/CLOCKS.md)
        # openssl makes the key a private lab's etcd signs its login tokens with (labkit/servers/secret.py)
        # iproute2 (ip, tc) drops a half-open connection's packets in lesson 10 (labkit/faults/namespace.py)
        apt_install default-jre-headless zookeeper etcd-server etcd-client redis-server redis-sentinel postgresql python3-venv gcc libc6-dev openssl iproute2
    else
        for tool in java etcd redis-server; do
            command -v "$tool" >/dev/null || say "missing '$tool': see README (Homebrew / conda), or use Docker"
        done
    fi
}

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
    "$PY" scripts/jupyter_ready.py "$port" "$token" --pid "$JUPYTER_PID" ||
        die "Jupyter Lab did not start (its messages are above)"
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

book() {
    # the course book: every notebook executed on real servers, then built by Jupyter Book 2
    # (MyST, which runs on Node.js) into static pages (labkit/book/)
    setup
    command -v node >/dev/null || die "the course book needs Node.js 18 or later: sudo apt-get install nodejs (Debian/Ubuntu), brew install node (macOS)"
    export LABKIT_HOME="${LABKIT_HOME:-$HOME/.local/state/labkit-book}"  # apart from a learner's lab
    local status=0
    LABKIT_BACKEND=local "$PY" -m labkit.book "$@" || status=$?
    labkit_down_quietly "$PY"  # a notebook that failed midway left its lab up
    return "$status"
}

run_tests() {
    case "${1:-}" in
        --latest) shift; exec scripts/maint/latest.sh "$@" ;;
        --pythons) shift; setup; exec scripts/ci/pythons.sh "$@" ;;
    esac
    setup
    exec scripts/ci/test.sh "$@"
}

case "${1:-}" in
    start) start ;;
    test) shift; run_tests "$@" ;;
    setup) setup ;;
    stop) "$VENV/bin/labkit" down ;;
    book) shift; book "$@" ;;
    lock) shift; exec scripts/maint/lock.sh "$@" ;;
    test-nonroot) setup; exec scripts/ci/nonroot.sh ;;  # only the non-root leg of `test`
    *) sed -n '2,17p' "$0"; exit 2 ;;
esac
