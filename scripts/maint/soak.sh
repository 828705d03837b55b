#!/usr/bin/env bash
# scripts/maint/soak.sh N [--quick] [--stress] [PYTEST ARGS...]: the suite N times, each from a
# fresh `git clone` of the current commit into /tmp (its own .venv, as a new user's clone gets
# from ./lab.sh test, and its own LABKIT_HOME), then a table of every test that failed at least
# once and in how many runs, and of every leg that failed. A test that fails one run in five
# fails every few runs for anyone who runs the suite (#34): this finds them.
#
#   --quick    each run is ./lab.sh test --quick (~3 min) instead of the whole suite (~20 min)
#   --stress   each run in the load mode (CPU hogs beside the legs; LABKIT_STRESS=K, scripts/ci/test.sh)
#
# Uncommitted changes are not in the clones: commit first. Each run's log stays in the soak's
# folder (printed at the end); the clones are removed as each run ends. Exits 1 when any run failed.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh

runs="${1:-}"
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || die "usage: scripts/maint/soak.sh N [--quick] [--stress] [PYTEST ARGS...] (N: how many runs, 1 or more; got '${runs}')"
shift
options=()
while [ $# -gt 0 ]; do
    case "$1" in
        --quick|--stress) options+=("$1"); shift ;;
        *) break ;;
    esac
done
[ -z "$(git status --porcelain --untracked-files=no)" ] || say "uncommitted changes are not soaked: the clones get $(git rev-parse --short HEAD)"
commit=$(git rev-parse HEAD) short=$(git rev-parse --short HEAD)   # HEAD may move while the soak runs
soak=$(mktemp -d /tmp/labkit-soak.XXXXXX)
clone=""

forget_clone() {
    # the labs a run left up, then the clone itself (its .venv is ~600 MB)
    [ -n "$clone" ] && [ -d "$clone" ] || return 0
    if [ -x "$clone/.venv/bin/python" ]; then (LABKIT_HOME="$soak/home" labkit_down_quietly "$clone/.venv/bin/python"); fi
    rm -rf "$clone" "$soak/home"
    clone=""
}
trap forget_clone EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

failures_table() {
    # failures_table LOG...: every test and leg that failed in those runs' logs, with in how many
    # runs, most first. Read from pytest's short summary ("FAILED tests/x.py::test - why",
    # "ERROR ..."; a notebook cell's id has spaces, its message follows " - ") and the leg table
    # ("[lab] local  FAILED  8m27s"), each counted once a run.
    local log
    for log in "$@"; do
        {
            sed -n -E 's/^(FAILED|ERROR) (.*)$/\2/p' "$log" | sed 's/ - .*//'
            sed -n -E 's/^.*\[lab\].* ([a-z0-9]+) +FAILED +[0-9]+m[0-9]+s.*$/leg \1/p' "$log" | grep -v '^leg total$' || true
        } | sort -u
    done | sort | uniq -c | sort -rn | awk '{ n++; printf "  %3d  %s\n", $1, substr($0, index($0, $2)) }
        END { if (n == 0) print "  (nothing failed)" }'
}

failed_runs=0
for ((run = 1; run <= runs; run++)); do
    clone="$soak/course"
    log="$soak/run-$run.log"
    git clone --quiet --no-checkout "$ROOT" "$clone"
    git -C "$clone" checkout --quiet --detach "$commit"
    say "soak run $run of $runs: ./lab.sh test ${options[*]} $* in a fresh clone of $short (log: $log)"
    began=$SECONDS code=0
    LABKIT_HOME="$soak/home" "$clone/lab.sh" test "${options[@]}" "$@" > "$log" 2>&1 || code=$?
    say "soak run $run: $([ "$code" -eq 0 ] && echo passed || echo "FAILED (exit $code)") in $((SECONDS - began)) s"
    [ "$code" -eq 0 ] || failed_runs=$((failed_runs + 1))
    forget_clone
done

say "$failed_runs of $runs runs failed; what failed, and in how many runs:"
failures_table "$soak"/run-*.log
say "the logs: $soak/run-*.log"
[ "$failed_runs" -eq 0 ]
