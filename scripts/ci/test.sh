#!/usr/bin/env bash
# ./lab.sh test [--quick] [PYTEST ARGS...]: the legs of the test suite, after ./lab.sh setup,
# then a table of each leg's result and time. Exits non-zero when any leg failed.
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
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh

install_test_extras
command -v apt-get >/dev/null && export LABKIT_EXPECT_CURATOR="${LABKIT_EXPECT_CURATOR:-1}"  # installed: Curator's tests and cells fail without it
# tests keep their labs apart from a learner's running lab
export LABKIT_HOME="${LABKIT_HOME:-$HOME/.local/state/labkit-tests}"

RUN=$(mktemp -d "${TMPDIR:-/tmp}/labkit-legs.XXXXXX")   # each leg's exit code and seconds, the background legs' output
trap 'rm -rf "$RUN"' EXIT
BEGAN=$SECONDS LEGS=() BESIDE=()

run_leg() {
    # run_leg NAME COMMAND...: one leg, timed; its exit code and seconds go to $RUN/NAME for the
    # table. A leg that cannot run here says why and exits 77 (skipped, as automake counts it)
    local name=$1 began=$SECONDS code=0
    shift
    "$@" || code=$?
    echo "$code $((SECONDS - began))" > "$RUN/$name"
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
    local name code seconds result status=0 wall=$((SECONDS - BEGAN))
    say "leg        result   time"
    for name in "${LEGS[@]}"; do
        code=1 seconds=0
        [ -e "$RUN/$name" ] && read -r code seconds < "$RUN/$name"
        case "$code" in
            0) result=passed ;;
            77) result=skipped ;;
            *) result=FAILED; status=1 ;;
        esac
        say "$(printf '%-10s %-8s %3dm%02ds' "$name" "$result" $((seconds / 60)) $((seconds % 60)))"
    done
    say "$(printf '%-10s %-8s %3dm%02ds  (wall clock: the legs overlap)' total \
        "$([ "$status" -eq 0 ] && echo passed || echo FAILED)" $((wall / 60)) $((wall % 60)))"
    return "$status"
}

if [ "${1:-}" = --quick ]; then
    shift
    LEGS=(quick)
    run_leg quick scripts/ci/local.sh --quick "$@"
else
    # The legs in two lanes at once (one after another they took 43 min on a fresh 2-core
    # machine): the local leg in the foreground, its races at normal priority; beside it at
    # the lowest CPU priority (nice 19), the Python-versions leg then the non-root one, as the
    # local leg's rest part runs; and the Docker leg, which builds its images at nice 19 too,
    # then waits for the local leg (the gate, a lock it holds) before its own tests and races.
    local_args=()
    if scripts/ci/nonroot.sh --can-run; then LEGS=(local nonroot pythons docker)
    else LEGS=(local pythons docker) local_args=(--notebooks); fi
    # (the legs beside keep their labs under a LABKIT_HOME of their own: a leg's `labkit down`
    # at its end must not stop the local leg's labs)
    exec {gate}> "$RUN/local-leg.lock"
    flock -x "$gate"
    # Ctrl-C: a script's background jobs ignore it; stop them (this script's process group)
    trap 'trap - INT TERM; kill 0' INT TERM
    LABKIT_HOME="$LABKIT_HOME/docker-leg" LABKIT_DOCKER_TESTS_AFTER="$RUN/local-leg.lock" \
        beside docker run_leg docker scripts/ci/docker.sh "$@"
    if [ "${LEGS[1]}" = nonroot ]; then
        LABKIT_HOME="$LABKIT_HOME/pythons-leg" beside pythons-nonroot nice -n 19 bash -c \
            "$(declare -f run_leg); RUN=$RUN; run_leg pythons scripts/ci/pythons.sh --ends; run_leg nonroot scripts/ci/nonroot.sh"
    else
        LABKIT_HOME="$LABKIT_HOME/pythons-leg" beside pythons run_leg pythons nice -n 19 scripts/ci/pythons.sh --ends
    fi
    run_leg local scripts/ci/local.sh "${local_args[@]}" "$@"
    flock -u "$gate"
    say "the local leg is done: the Docker leg's tests may start"
    after_beside
fi
summary
