#!/usr/bin/env bash
# scripts/maint/classroom.sh [--learners K] [--stress] [NOTEBOOK...]: a workshop on this
# machine (#34). K learners (default: 2 x the cores) each run a different lesson at the same
# moment, each as a learner of its own: its own LABKIT_HOME (a temp folder: two students never
# share a lab), its own kernel (its own pytest --nbval-lax), all started together; as one
# finishes, the next lesson of the list goes to a new learner, until every lesson has run.
# The lessons' asserts are about order and bounds with margins: they must hold here too.
#
#   --learners K   how many learners run at once (a whole number, 1 or more)
#   --stress       the load mode's CPU hogs beside them (LABKIT_STRESS=K, default one per core)
#   NOTEBOOK...    the lessons, in turn (default: every lesson, notebooks/[0-9][0-9]_*.ipynb,
#                  the longest first)
#
# A line as each learner finishes, then a table: notebook, learner, cells passed/failed,
# seconds, the 1-minute load average at its start and end; then the failing cells' first error
# lines. Exits 1 if any notebook failed, 2 on bad arguments. Each learner's lab is stopped
# (`labkit down` with its LABKIT_HOME) and its folder removed when the script ends, however it
# ends (Ctrl-C too). The logs are kept only with LABKIT_CLASSROOM_KEEP=FOLDER (copied there).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
# as scripts/ci/nonroot.sh: kernels starting side by side beside labs and hogs answer late
KERNEL_STARTUP_TIMEOUT=180

bad_arguments() {
    printf '\033[1;31m[lab] %s\033[0m\n' "$*" >&2
    echo "usage: scripts/maint/classroom.sh [--learners K] [--stress] [NOTEBOOK...]" >&2
    exit 2
}

learners=$((2 * $(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2))) stress="" notebooks=()
while [ $# -gt 0 ]; do
    case "$1" in
        --learners)
            [ $# -ge 2 ] || bad_arguments "--learners needs how many learners run at once: a whole number >= 1"
            [[ "$2" =~ ^[1-9][0-9]*$ ]] ||
                bad_arguments "--learners $2: expected how many learners run at once, a whole number >= 1 (e.g. --learners 4)"
            learners=$2; shift 2 ;;
        --learners=*) bad_arguments "write --learners K (a whole number >= 1), not $1" ;;
        --stress) stress=--stress; shift ;;
        -*) bad_arguments "unknown option $1: expected --learners K, --stress, or notebooks" ;;
        *)
            [ -f "$1" ] && [[ "$1" == *.ipynb ]] ||
                bad_arguments "$1: not a notebook of this course; pass notebooks that exist, e.g. notebooks/00_start_here.ipynb"
            notebooks+=("$1"); shift ;;
    esac
done
if [ ${#notebooks[@]} -eq 0 ]; then
    mapfile -t notebooks < <(notebooks_longest_first | grep -E '^notebooks/[0-9][0-9]_[^/]*\.ipynb$')
fi
[ -x "$PY" ] || die "no $PY: run ./lab.sh setup first"
hogs=$(stress_hogs "$stress")

ROOM=$(mktemp -d "${TMPDIR:-/tmp}/labkit-classroom.XXXXXX")   # a folder per learner: home/ (its LABKIT_HOME), tmp/, log, result
RUNNING=()   # "pid learner" of the learners still running

stop_learners_processes() {
    # stop_learners_processes HOME: every process that runs with that learner's LABKIT_HOME (its
    # kernel, in a session of its own since jupyter_client starts it so, its clients, servers
    # still starting): a kernel whose pytest was stopped lives on, and a lab it was starting
    # came up after the learner's `labkit down` (a ZooKeeper outlived Ctrl-C, 1 run in 2)
    local environ pid
    for environ in /proc/[0-9]*/environ; do
        grep -qzxF "LABKIT_HOME=$1" "$environ" 2>/dev/null || continue
        pid=${environ#/proc/}
        kill -KILL "${pid%/environ}" 2>/dev/null || true
    done
}

lab_down() {
    # lab_down FOLDER: that learner's lab stopped, once
    [ -d "$1/home" ] && [ ! -e "$1/down" ] || return 0
    LABKIT_HOME="$1/home" "$PY" -m labkit.cli down >/dev/null 2>&1 || true
    touch "$1/down"
}

end_class() {
    # stop the learners still running (each a process group of its own, and what runs with its
    # LABKIT_HOME, before and after its `labkit down`), the hogs; then forget the learners' folders
    local entry folder
    for entry in "${RUNNING[@]}"; do kill -TERM -- "-${entry%% *}" 2>/dev/null || true; done
    for entry in "${RUNNING[@]}"; do
        wait "${entry%% *}" 2>/dev/null || true
        folder="$ROOM/learner-${entry#* }"
        stop_learners_processes "$folder/home"
        lab_down "$folder"
        stop_learners_processes "$folder/home"
    done
    RUNNING=()
    stop_stress_hogs
    for folder in "$ROOM"/learner-*/; do lab_down "${folder%/}"; done
    for folder in "$ROOM"/learner-*/; do
        [ -n "${LABKIT_CLASSROOM_KEEP:-}" ] && [ -f "$folder/log" ] || continue
        mkdir -p "$LABKIT_CLASSROOM_KEEP" && cp "$folder/log" "$LABKIT_CLASSROOM_KEEP/$(basename "$folder").log" || true
    done
    rm -rf "$ROOM"
}
trap end_class EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

learner() {
    # learner N NOTEBOOK: one learner's run (in the background), its result to learner-N/result:
    # exit code, seconds, load at the start, load at the end
    local folder="$ROOM/learner-$1" began=$SECONDS load code=0
    load=$(load_average)
    # its own LABKIT_HOME, and TMPDIR (its kernel's connection file: a learner stopped midway
    # leaves it), which other users may enter as they enter /tmp: as root, labkit runs
    # PostgreSQL as the user postgres with its data under TMPDIR (postgres_template.py)
    local own=(LABKIT_HOME="$folder/home" TMPDIR="$folder/tmp" LABKIT_BACKEND="${LABKIT_BACKEND:-local}")
    run_pytest env "${own[@]}" "$PY" -m pytest --nbval-lax "$2" --nbval-kernel-startup-timeout "$KERNEL_STARTUP_TIMEOUT" \
        -rfE --color=no > "$folder/log" 2>&1 </dev/null || code=$?
    echo "$code $((SECONDS - began)) $load $(load_average)" > "$folder/result"
}

cells() {
    # cells LOG: "passed failed" from pytest's last line (an error counts as failed)
    local last passed failed errors
    last=$(grep -E '^=+ .*(passed|failed|error|no tests ran).* =+$' "$1" | tail -n 1 || true)
    passed=$(sed -nE 's/.*[^0-9]([0-9]+) passed.*/\1/p' <<< " $last")
    failed=$(sed -nE 's/.*[^0-9]([0-9]+) failed.*/\1/p' <<< " $last")
    errors=$(sed -nE 's/.*[^0-9]([0-9]+) errors?.*/\1/p' <<< " $last")
    echo "${passed:-0} $((${failed:-0} + ${errors:-0}))"
}

finished() {
    # finished N NOTEBOOK: the line for a learner that is done
    local code seconds start end passed failed
    read -r code seconds start end < "$ROOM/learner-$1/result"
    read -r passed failed < <(cells "$ROOM/learner-$1/log")
    say "$(printf 'learner %2d %-8s %-54s %3d passed %2d failed %4d s  load %s -> %s' "$1" \
        "$([ "$code" -eq 0 ] && echo passed || echo FAILED)" "$2" "$passed" "$failed" "$seconds" "$start" "$end")"
}

start_stress_hogs "$hogs"
say "a classroom of ${#notebooks[@]} lessons, $learners learners at once on $(getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?') cores$([ "$hogs" -eq 0 ] || echo ", $hogs CPU hogs beside"); load $(load_average)"
began=$SECONDS next=0 status=0
declare -A LESSON   # learner -> notebook
while [ "$next" -lt ${#notebooks[@]} ] || [ ${#RUNNING[@]} -gt 0 ]; do
    while [ "$next" -lt ${#notebooks[@]} ] && [ ${#RUNNING[@]} -lt "$learners" ]; do
        number=$((next + 1))
        mkdir -p "$ROOM/learner-$number/home" "$ROOM/learner-$number/tmp"
        chmod 711 "$ROOM" "$ROOM/learner-$number" && chmod 1777 "$ROOM/learner-$number/tmp"
        LESSON[$number]=${notebooks[$next]}
        set -m   # a process group of its own: end_class stops it with its pytest and kernel
        learner "$number" "${notebooks[$next]}" &
        set +m
        RUNNING+=("$! $number")
        next=$((next + 1))
    done
    done_pid=""
    wait -n -p done_pid "${RUNNING[@]%% *}" || true
    [ -n "$done_pid" ] || continue
    left=()
    for entry in "${RUNNING[@]}"; do
        if [ "${entry%% *}" = "$done_pid" ]; then number=${entry#* }; else left+=("$entry"); fi
    done
    RUNNING=("${left[@]}")
    finished "$number" "${LESSON[$number]}"
    lab_down "$ROOM/learner-$number"
done
stop_stress_hogs

say "$(printf '%-54s  %7s  %-6s  %6s  %6s  %7s  %s' notebook learner result passed failed seconds 'load (start -> end)')"
for ((number = 1; number <= ${#notebooks[@]}; number++)); do
    read -r code seconds start end < "$ROOM/learner-$number/result"
    read -r passed failed < <(cells "$ROOM/learner-$number/log")
    [ "$code" -eq 0 ] || status=1
    say "$(printf '%-54s  %7d  %-6s  %6d  %6d  %7d  %s -> %s' "${LESSON[$number]}" "$number" \
        "$([ "$code" -eq 0 ] && echo passed || echo FAILED)" "$passed" "$failed" "$seconds" "$start" "$end")"
done
say "$(printf 'classroom: %s in %d s, %d learners at once%s' "$([ "$status" -eq 0 ] && echo passed || echo FAILED)" \
    $((SECONDS - began)) "$learners" "$([ "$hogs" -eq 0 ] || echo ", $hogs CPU hogs beside")")"
for ((number = 1; number <= ${#notebooks[@]}; number++)); do
    read -r code _ < "$ROOM/learner-$number/result"
    [ "$code" -ne 0 ] || continue
    say "learner $number, ${LESSON[$number]}: what failed"
    # pytest's short summary (the cell), and the first lines that name an error in its report
    sed 's/\x1b\[[0-9;]*m//g' "$ROOM/learner-$number/log" |
        grep -E '^(FAILED|ERROR) |^[A-Za-z_.]*(Error|Exception|Timeout)[A-Za-z]*: |^E  ' | awk '!seen[$0]++' | head -n 12 |
        sed 's/^/    /' | cut -c1-240
done
exit "$status"
