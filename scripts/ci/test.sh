#!/usr/bin/env bash
# ./lab.sh test [--quick] [--stress] [PYTEST ARGS...]: the legs of the test suite, after
# ./lab.sh setup, then a table of each leg's result, time and load average (1 min, at its start
# and end). Exits non-zero when any leg failed.
#
#   local    the tests on local processes (scripts/ci/local.sh); the notebooks too, unless the
#            non-root leg runs them
#   nonroot  every notebook as an unprivileged user (scripts/ci/nonroot.sh), when run as root
#   pythons  the tests that start no server and notebook 00 on the oldest and the newest
#            CPython 3.10+ found (scripts/ci/pythons.sh --ends; every one: ./lab.sh test --pythons)
#   docker   the tests that depend on where servers run, in containers, and the whole-lab
#            image (scripts/ci/docker.sh), where a Docker engine answers or can be started
#
# --quick: only the local leg without slow tests and notebooks (pytest --leg quick).
# --stress: the load mode, the same legs with CPU-bound processes beside them (LABKIT_STRESS=K
#   of them, default one per core; LABKIT_STRESS=K alone turns it on too, 0 off), started here
#   and stopped when this script ends, however it ends (trap): the suite must hold on a busy
#   machine (#34). scripts/maint/soak.sh runs it N times from fresh clones.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh

quick="" stress=""
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=1; shift ;;
        --stress) stress=--stress; shift ;;
        *) break ;;
    esac
done
hogs=$(stress_hogs "$stress")
trap stop_stress_hogs EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

install_test_extras
command -v apt-get >/dev/null && export LABKIT_EXPECT_CURATOR="${LABKIT_EXPECT_CURATOR:-1}"  # installed: Curator's tests and cells fail without it
# tests keep their labs apart from a learner's running lab
export LABKIT_HOME="${LABKIT_HOME:-$HOME/.local/state/labkit-tests}"
start_stress_hogs "$hogs"

LEGS=() RESULTS=() TIMES=() LOADS=()
status=0

run_leg() {
    # run_leg NAME COMMAND...: one leg, timed; its result goes to the table. A leg that cannot
    # run here says why and exits 77 (skipped, as automake counts it)
    local name=$1 began=$SECONDS result=passed code=0 load
    shift
    load=$(load_average)
    "$@" || code=$?
    case "$code" in
        0) ;;
        77) result=skipped ;;
        *) result=FAILED; status=1 ;;
    esac
    LEGS+=("$name") RESULTS+=("$result") TIMES+=("$((SECONDS - began))") LOADS+=("$load -> $(load_average)")
}

summary() {
    local i total=0
    say "leg        result   time     load (start -> end)"
    for i in "${!LEGS[@]}"; do
        say "$(printf '%-10s %-8s %3dm%02ds  %s' "${LEGS[$i]}" "${RESULTS[$i]}" $((TIMES[i] / 60)) $((TIMES[i] % 60)) "${LOADS[$i]}")"
        total=$((total + TIMES[i]))
    done
    say "$(printf '%-10s %-8s %3dm%02ds' total "$([ "$status" -eq 0 ] && echo passed || echo FAILED)" $((total / 60)) $((total % 60)))"
    [ "$hogs" -eq 0 ] || say "load mode: $hogs CPU hogs ran beside the legs"
}

if [ -n "$quick" ]; then
    run_leg quick scripts/ci/local.sh --quick "$@"
elif scripts/ci/nonroot.sh --can-run; then
    run_leg local scripts/ci/local.sh "$@"
    run_leg nonroot scripts/ci/nonroot.sh
    run_leg pythons scripts/ci/pythons.sh --ends
    run_leg docker scripts/ci/docker.sh "$@"
else
    run_leg local scripts/ci/local.sh --notebooks "$@"
    run_leg pythons scripts/ci/pythons.sh --ends
    run_leg docker scripts/ci/docker.sh "$@"
fi
summary
exit "$status"
