#!/usr/bin/env bash
# The Python-versions leg (./lab.sh test --pythons): on every CPython 3.10+ this machine has,
# a venv with requirements/lock.txt (hashes checked) and labkit, then the quick tests that
# start no server (pytest --leg pythons) and notebook 00 (on real servers, with nbval).
#
#   scripts/ci/pythons.sh [MINOR...]    e.g. `scripts/ci/pythons.sh 3.10 3.13`: only those
#   scripts/ci/pythons.sh --ends        the oldest and the newest found (what ./lab.sh test runs)
#
# Interpreters: python3.10 ... python3.19 on PATH, then /usr/bin/python3.1*, then pyenv's
# ($PYENV_ROOT or ~/.pyenv)/versions/3.1*/bin/python. One per minor version (the first found):
# it prints which it found, which it skipped and why. The venvs are kept outside the checkout,
# in ~/.cache/labkit/pythons/MINOR-<hash of the lock> (LABKIT_PYTHONS_CACHE), so that every
# clone reuses them; the first install takes ~1 min per interpreter, then only labkit itself
# is installed again (pip --no-deps -e ., seconds). ./lab.sh test runs it with --ends: the
# oldest supported Python (where 3.11+ syntax breaks imports) and the newest.
# Venvs no run used for 14 days are removed. Exits 77 (skipped) when it finds no interpreter.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
CACHE="${LABKIT_PYTHONS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/labkit/pythons}"
NOTEBOOK=notebooks/00_start_here.ipynb
ends=no
if [ "${1:-}" = --ends ]; then ends=yes; shift; fi
wanted=("$@")

candidates() {
    local v path
    for v in 10 11 12 13 14 15 16 17 18 19; do
        path=$(command -v "python3.$v" 2>/dev/null) && echo "$path"
    done
    for path in /usr/bin/python3.1[0-9] "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[0-9]*/bin/python; do
        [ -x "$path" ] && echo "$path"
    done
    return 0
}

describe() {
    # describe PYTHON: "MINOR EXECUTABLE" of a working CPython 3.10+ that can make a venv;
    # otherwise the first line of why not, and exit 1
    local said code=0
    said=$("$1" scripts/ci/describe_python.py 2>&1) || code=$?
    if [ "$code" -ne 0 ]; then echo "${said%%$'\n'*}"; return 1; fi
    echo "$said"
}

make_venv_for() {
    # make_venv_for PYTHON FOLDER: the lock in FOLDER unless it is there already (a stamp
    # written last says so), then this checkout's labkit (editable, no dependencies)
    local python=$1 venv=$2 stamp=$2/.labkit-lock-installed
    if [ ! -e "$stamp" ]; then
        rm -rf "$venv"
        mkdir -p "$(dirname "$venv")"
        "$python" -m venv "$venv" &&
            pip_quiet "$venv/bin/python" --upgrade pip &&
            pip_quiet "$venv/bin/python" --require-hashes -r "$LOCK" &&
            touch "$stamp" || return 1
    fi
    touch "$venv/.labkit-last-used"
    pip_quiet "$venv/bin/python" --no-deps -e .
}

forget_unused_venvs() {
    # each venv is ~600 MB and a lock change makes new ones: those no run used for 14 days go
    # (another clone's lock still in use keeps its own)
    local venv
    for venv in "$CACHE"/3.*-*; do
        [ -e "$venv/.labkit-last-used" ] || [ -e "$venv/.labkit-lock-installed" ] || continue
        if [ -z "$(find "$venv" -maxdepth 1 -name '.labkit-*' -mtime -14 -print -quit)" ]; then
            say "removing $venv: unused for 14 days"
            rm -rf "$venv"
        fi
    done
}

forget_unused_venvs

declare -A seen_minor=() seen_executable=()
found=() skipped=()
while read -r candidate; do
    if ! info=$(describe "$candidate"); then skipped+=("$candidate: $info"); continue; fi
    read -r minor executable <<< "$info"
    executable=$(readlink -f "$executable")
    if [ -n "${seen_executable[$executable]:-}" ]; then continue; fi  # the same one by another name
    seen_executable[$executable]=1
    if [ -n "${seen_minor[$minor]:-}" ]; then
        skipped+=("$candidate ($executable): $minor is tested with ${seen_minor[$minor]}"); continue
    fi
    if [ ${#wanted[@]} -gt 0 ] && [[ " ${wanted[*]} " != *" $minor "* ]]; then
        skipped+=("$candidate: $minor was not asked for (${wanted[*]})"); continue
    fi
    seen_minor[$minor]=$executable
    found+=("$minor $executable")
done < <(candidates)
[ ${#found[@]} -eq 0 ] || mapfile -t found < <(printf '%s\n' "${found[@]}" | sort -V)
if [ "$ends" = yes ] && [ ${#found[@]} -gt 2 ]; then
    for line in "${found[@]:1:${#found[@]}-2}"; do skipped+=("${line#* }: --ends tests the oldest and the newest only"); done
    found=("${found[0]}" "${found[-1]}")
fi

say "interpreters found: ${#found[@]}"
for line in "${found[@]}"; do say "  $line"; done
say "skipped: ${#skipped[@]}"
for line in "${skipped[@]}"; do say "  $line"; done
[ ${#found[@]} -gt 0 ] || { say "Python-versions leg skipped: no CPython 3.10+ found"; exit 77; }

export LABKIT_HOME="${LABKIT_HOME:-$HOME/.local/state/labkit-tests}"
workers=$(test_workers 3)
status=0 results=()
for line in "${found[@]}"; do
    read -r minor executable <<< "$line"
    began=$SECONDS result=passed
    venv="$CACHE/$minor-$(sha1sum "$LOCK" | cut -c1-12)"
    say "Python $minor ($executable): venv in $venv"
    if ! make_venv_for "$executable" "$venv"; then
        result="FAILED (installing $LOCK)"
    else
        say "Python $minor: the quick tests that start no server, and $NOTEBOOK"
        run_pytest "$venv/bin/python" -m pytest tests "$NOTEBOOK" --leg pythons --nbval-lax \
            --nbval-current-env -q -n "$workers" --dist loadfile || result=FAILED
        labkit_down_quietly "$venv/bin/python"
    fi
    [ "$result" = passed ] || status=1
    results+=("$(printf '%-6s %-8s %4d s  %s' "$minor" "$result" $((SECONDS - began)) "$executable")")
done
say "Python   result     time  interpreter"
for line in "${results[@]}"; do say "$line"; done
exit "$status"
