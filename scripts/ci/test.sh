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
# The legs overlap where it is safe (one after another they took 43 min on a fresh 2-core
# machine): the local leg runs in the foreground; beside it, at nice 19, the Python-versions leg
# (no servers but notebook 00, no timing) and the Docker leg's image builds (docker.sh raises its
# priority for its tests). Once the local leg is done the Python-versions lane is raised to
# normal priority (as root): at nice 19 throughout it starved beside two CPU hogs (3.10 in 14m31s
# against 2m13s idle, 3.13 not done after 42 min, #34); at normal priority throughout it took a
# share of the local leg's CPU, which then ran 23 min against 12 (one idle fresh-clone run).
# The non-root leg's notebooks follow the local leg, never at nice 19 (starved, their margins
# failed); the Docker leg's tests wait for the local leg too (the gate, a lock this script
# holds until then) and then run beside the non-root leg, both at normal priority: two legs
# side by side are a load like --stress, which every test must hold.
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
RUN=$(mktemp -d "${TMPDIR:-/tmp}/labkit-legs.XXXXXX")   # each leg's exit code, seconds and load, the background legs' output
trap 'stop_stress_hogs; rm -rf "$RUN"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

install_test_extras
command -v apt-get >/dev/null && export LABKIT_EXPECT_CURATOR="${LABKIT_EXPECT_CURATOR:-1}"  # installed: Curator's tests and cells fail without it
command -v apt-get >/dev/null && export LABKIT_EXPECT_CHROMIUM="${LABKIT_EXPECT_CHROMIUM:-1}"  # installed: the browser tests fail without it (tests/needs.py)
# tests keep their labs apart from a learner's running lab
export LABKIT_HOME="${LABKIT_HOME:-$HOME/.local/state/labkit-tests}"
start_stress_hogs "$hogs"
BEGAN=$SECONDS LEGS=() BESIDE=()

run_leg() {
    # run_leg NAME COMMAND...: one leg, timed; its exit code, seconds and the 1-minute load at its
    # start and end go to $RUN/NAME for the table. A leg that cannot run here says why and exits
    # 77 (skipped, as automake counts it). (Self-contained: a lane runs it in a bash -c.)
    local name=$1 began=$SECONDS code=0 load
    shift
    load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?")
    "$@" || code=$?
    echo "$code $((SECONDS - began)) $load -> $(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?")" > "$RUN/$name"
}

beside() {
    # beside NAME COMMAND...: COMMAND in the background (without the gate's descriptor), its
    # output to $RUN/NAME.log, printed by after_beside when it ends
    local name=$1
    shift
    "$@" > "$RUN/$name.log" 2>&1 {gate}>&- &
    BESIDE+=("$name $!")
}

after_beside() {
    local entry
    for entry in "${BESIDE[@]}"; do
        wait "${entry#* }" || true   # each leg's own result is in $RUN
        say "the ${entry%% *} lane, which ran beside the local leg:"
        cat "$RUN/${entry%% *}.log"
    done
}

summary() {
    local name code seconds load result status=0 wall=$((SECONDS - BEGAN))
    say "leg        result   time     load (start -> end)"
    for name in "${LEGS[@]}"; do
        code=1 seconds=0 load="?"
        [ -e "$RUN/$name" ] && read -r code seconds load < "$RUN/$name"
        case "$code" in
            0) result=passed ;;
            77) result=skipped ;;
            *) result=FAILED; status=1 ;;
        esac
        say "$(printf '%-10s %-8s %3dm%02ds  %s' "$name" "$result" $((seconds / 60)) $((seconds % 60)) "$load")"
    done
    say "$(printf '%-10s %-8s %3dm%02ds  (wall clock: the legs overlap)' total \
        "$([ "$status" -eq 0 ] && echo passed || echo FAILED)" $((wall / 60)) $((wall % 60)))"
    [ "$hogs" -eq 0 ] || say "load mode: $hogs CPU hogs ran beside the legs"
    return "$status"
}

if [ -n "$quick" ]; then
    LEGS=(quick)
    run_leg quick scripts/ci/local.sh --quick "$@"
else
    local_args=() nonroot=no
    if scripts/ci/nonroot.sh --can-run; then LEGS=(local nonroot pythons docker) nonroot=yes
    else LEGS=(local pythons docker) local_args=(--notebooks); fi
    # (the legs beside keep their labs under a LABKIT_HOME of their own: a leg's `labkit down`
    # at its end must not stop the local leg's labs)
    exec {gate}> "$RUN/local-leg.lock"
    flock -x "$gate"
    # Ctrl-C: a script's background jobs ignore it; stop them (this script's process group)
    trap 'trap - INT TERM; kill 0' INT TERM
    LABKIT_HOME="$LABKIT_HOME/docker-leg" LABKIT_DOCKER_TESTS_AFTER="$RUN/local-leg.lock" \
        beside docker run_leg docker scripts/ci/docker.sh "$@"
    LABKIT_HOME="$LABKIT_HOME/pythons-leg" beside pythons run_leg pythons nice -n 19 scripts/ci/pythons.sh --ends
    run_leg local scripts/ci/local.sh "${local_args[@]}" "$@"
    flock -u "$gate"
    # the Python-versions lane had the CPU the local leg left; from here on a normal share, so
    # that nothing else starves it (as root; another user cannot raise a priority)
    for entry in "${BESIDE[@]}"; do [ "${entry%% *}" != pythons ] || renice_tree 0 "${entry#* }"; done
    say "the local leg is done: the Docker leg's tests may start, beside the non-root leg"
    [ "$nonroot" = no ] || run_leg nonroot scripts/ci/nonroot.sh
    after_beside
fi
summary
