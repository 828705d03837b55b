# shellcheck shell=bash disable=SC2034  # (the variables are for the scripts that source it)
# Shell helpers shared by lab.sh and the scripts under scripts/ (sourced, never run).
# The sourcing script has already `cd`-ed to the repository root.
ROOT=$(pwd)
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
# Every Python package, pinned with its hashes: every learner and CI get the same stack.
LOCK=requirements/lock.txt

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

pip_quiet() { "$1" -m pip install -q --disable-pip-version-check "${@:2}"; }

install_lab_settings() {
    # The course's JupyterLab defaults (no news prompt, no update check): overrides.json in
    # the app settings folder of the venv's JupyterLab, which it reads at start. A learner's
    # own settings (~/.jupyter) still win and are never touched.
    local folder="$1/share/jupyter/lab/settings"
    mkdir -p "$folder"
    cmp -s jupyter/overrides.json "$folder/overrides.json" || cp jupyter/overrides.json "$folder/overrides.json"
}

install_test_extras() {
    # Curator (a real Java peer for the interop tests) and a browser for the widget test.
    if command -v apt-get >/dev/null; then
        # python3-redis: tests/servers/test_private_labs.py runs labkit as a second user with Debian's python
        apt_install libcurator-recipes-java default-jdk-headless chromium python3-redis
    fi
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

run_pytest() {
    # run_pytest COMMAND...: the one way the scripts call pytest. COMMAND is a python (maybe
    # behind runuser/env) with `-m pytest` and its arguments; no cache folder is written into
    # the course, and exit 5 (no test collected) is a failure, not a pass.
    local status=0
    "$@" -p no:cacheprovider || status=$?
    if [ "$status" -eq 5 ]; then say "pytest collected no test: that is a failure"; status=1; fi
    return "$status"
}

run_pytest_in_parts() {
    # run_pytest_in_parts WORKERS COMMAND...: COMMAND (as for run_pytest) with WORKERS test files
    # side by side (pytest -n WORKERS --dist loadfile). With workers, in two parts at once: the
    # timing races in two groups side by side, each one file at a time (--part races -n 2,
    # tests/legs.py RACE_GROUPS), and beside them the rest on WORKERS - 1 workers (at least 1;
    # --part rest; its report is printed when it ends). All at normal priority: the rest used to
    # run at nice 19, and beside any normal-priority work (two CPU hogs, #34) it got almost no
    # CPU, so that --quick did not finish in 15 minutes; the races mostly wait (sessions, leases,
    # elections) and hold their margins under load (./lab.sh test --stress checks that). A part
    # with nothing to run under the caller's arguments is fine; both empty is a failure.
    local workers=$1 status races=0 rest=0 rest_log rest_pid rest_workers
    shift
    if [ "$workers" -eq 0 ]; then
        status=0
        run_pytest "$@" || status=$?
        return "$status"
    fi
    rest_workers=$((workers > 1 ? workers - 1 : 1))
    rest_log=$(mktemp /tmp/labkit-rest-part.XXXXXX)
    say "the timing races, two groups side by side, each one file at a time; beside them the rest, $rest_workers files at a time (its report follows the races')"
    "$@" --part rest -n "$rest_workers" --dist loadfile -p no:cacheprovider > "$rest_log" 2>&1 &
    rest_pid=$!
    # a script's background job ignores Ctrl-C: stop it with the foreground
    trap 'kill "$rest_pid" 2>/dev/null' INT TERM
    # two workers: the two groups of races side by side (tests/legs.py RACE_GROUPS)
    "$@" --part races -n 2 --dist loadfile -p no:cacheprovider || races=$?
    kill -0 "$rest_pid" 2>/dev/null && say "the timing races are done; waiting for the rest"
    wait "$rest_pid" || rest=$?
    say "the rest:"
    trap - INT TERM
    cat "$rest_log"
    rm -f "$rest_log"
    if [ "$races" -eq 5 ] && [ "$rest" -eq 5 ]; then say "pytest collected no test: that is a failure"; return 1; fi
    for status in "$races" "$rest"; do
        [ "$status" -eq 0 ] || [ "$status" -eq 5 ] || return "$status"
    done
    return 0
}

stress_hogs() {
    # stress_hogs REQUEST: how many CPU hogs the load mode runs beside the legs (./lab.sh test
    # --stress, LABKIT_STRESS=K). REQUEST is "--stress" (LABKIT_STRESS, else one per core) or
    # empty (LABKIT_STRESS, else 0: no load mode). Refuses anything but a whole number.
    local hogs="${LABKIT_STRESS:-}"
    if [ -z "$hogs" ]; then
        if [ "${1:-}" = --stress ]; then hogs=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2); else hogs=0; fi
    fi
    [[ "$hogs" =~ ^[0-9]+$ ]] && [ "$hogs" -le 64 ] ||
        die "LABKIT_STRESS=$hogs: expected how many CPU hogs run beside the tests, a whole number from 0 to 64 (e.g. LABKIT_STRESS=2)"
    echo "$hogs"
}

STRESS_PIDS=()
start_stress_hogs() {
    # start_stress_hogs K: K CPU-bound processes (a shell's busy loop each, at normal priority)
    # until stop_stress_hogs; the caller traps EXIT with stop_stress_hogs. Each also stops by
    # itself within a fraction of a second when this shell is gone (even by kill -9).
    local i
    for ((i = 0; i < $1; i++)); do
        # shellcheck disable=SC2016  # $1 is the inner shell's: this shell's pid
        bash -c 'while kill -0 "$1" 2>/dev/null; do for ((i = 0; i < 20000; i++)); do :; done; done' \
            labkit-stress-hog "$$" </dev/null >/dev/null 2>&1 &
        STRESS_PIDS+=("$!")
    done
    [ "$1" -eq 0 ] || say "load mode: $1 CPU hogs beside the tests (pids ${STRESS_PIDS[*]})"
}

stop_stress_hogs() {
    [ ${#STRESS_PIDS[@]} -eq 0 ] && return 0
    kill "${STRESS_PIDS[@]}" 2>/dev/null || true
    wait "${STRESS_PIDS[@]}" 2>/dev/null || true
    STRESS_PIDS=()
}

renice_tree() {
    # renice_tree NICE PID: PID, each of its threads and every process below it, to NICE; what
    # they start later inherits it. As root only (another user cannot raise a priority): else
    # nothing. Twice over the tree: a process started during the first walk is met by the second.
    [ "$(id -u)" = 0 ] || return 0
    local nice=$1 pid=$2 walk
    for walk in 1 2; do renice_walk "$nice" "$pid"; done
}

renice_walk() {
    local child
    [ -d "/proc/$2/task" ] || return 0
    # shellcheck disable=SC2046  # one argument per thread id
    renice -n "$1" -p $(ls "/proc/$2/task") >/dev/null 2>&1 || true
    for child in $(ps -o pid= --ppid "$2" 2>/dev/null); do renice_walk "$1" "$child"; done
}

load_average() {
    # the 1-minute load average (Linux /proc/loadavg, else what uptime says), "?" if unknown
    if [ -r /proc/loadavg ]; then cut -d' ' -f1 /proc/loadavg
    else uptime 2>/dev/null | sed -E 's/.*load averages?: *//; s/[, ].*//' || echo "?"; fi
}

test_workers() {
    # how many pytest workers run test files side by side (pytest -n; tests/conftest.py gives
    # each its own LABKIT_HOME): LABKIT_TEST_WORKERS, else the leg's default ($1, else 3). Most
    # tests wait on servers (sessions, leases, elections), not on the CPU: 3 workers keep 2 cores
    # busy. 0: one at a time. Three fresh-clone runs with 3 workers each failed one or two tests
    # (a Sentinel failover, a nemesis that found no holder, an etcd soak's held share: timing
    # under the other workers' load, hence run_pytest_in_parts; on Docker "No such container",
    # a listing race fixed in docker_container.lab_containers).
    local workers="${LABKIT_TEST_WORKERS:-${1:-3}}"
    [[ "$workers" =~ ^[0-9]+$ ]] || die "LABKIT_TEST_WORKERS=$workers: expected a number (0: no workers)"
    echo "$workers"
}

notebooks_longest_first() {
    # every notebook of the course, one a line, those that take longest first (measured side by
    # side on a loaded 2-core machine: 07 108 s, 06 86 s, 04 81 s, 02 72 s, 05 66 s, 11 60 s, the
    # others 40 s or less; 09, the semaphore and election half of the old 10, not measured side by
    # side: alone at a load of 28 it ran 278 s and 10 41 s, and its first cell states two minutes
    # to 07's three), so that no long one starts while the other workers are finishing.
    # Side by side, pytest keeps this order with --no-loadscope-reorder.
    local first=(07 09 06 04 02 05 11) number path
    for number in "${first[@]}"; do
        for path in notebooks/"$number"_*.ipynb; do [ -e "$path" ] && echo "$path"; done
    done
    for path in notebooks/*.ipynb; do
        number=$(basename "$path"); number=${number%%_*}
        [[ " ${first[*]} " == *" $number "* ]] || echo "$path"
    done
}

labkit_down_quietly() {
    # labkit_down_quietly PYTHON: after a run, stop the labs a test or notebook that failed
    # midway left up, and those of each pytest worker ($LABKIT_HOME/workers/*, tests/conftest.py)
    # (runs keep their own LABKIT_HOME: a learner's lab is not touched)
    "$1" -m labkit.cli down >/dev/null 2>&1 || true
    local home
    for home in "${LABKIT_HOME:-/nonexistent}"/workers/*/; do
        [ -d "$home" ] || continue
        LABKIT_HOME="$home" "$1" -m labkit.cli down >/dev/null 2>&1 || true
    done
}
